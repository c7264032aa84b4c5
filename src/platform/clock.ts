// The one clock. Everything that compares against "now" (hold expiry, token lifetimes, idempotency
// leases) asks it, so tests can move time without sleeping.
export interface Clock {
  nowMs(): number;
  nowS(): number;
}

export class SystemClock implements Clock {
  /** Added to the system time; only tests change it. */
  offsetMs = 0;

  nowMs(): number {
    return Date.now() + this.offsetMs;
  }

  nowS(): number {
    return Math.floor(this.nowMs() / 1000);
  }

  advance(ms: number): void {
    this.offsetMs += ms;
  }
}
