// The one clock. Everything that compares against "now" (hold expiry, token lifetimes, idempotency
// leases) asks it, so tests can move time without sleeping.
import type { Queryable } from './db/database.ts';

export interface Clock {
  nowMs(): number;
  nowS(): number;
}

export class SystemClock implements Clock {
  /** Added to the system time; only tests change it. */
  offsetMs = 0;
  /** When set, time stands still here (tests that compare against a model step by step). */
  private frozenAtMs: number | undefined;

  nowMs(): number {
    return (this.frozenAtMs ?? Date.now()) + this.offsetMs;
  }

  freeze(): void {
    this.frozenAtMs = Date.now();
  }

  /** Lets time run again from where it stands, offset kept. */
  thaw(): void {
    if (this.frozenAtMs === undefined) return;
    this.offsetMs += this.frozenAtMs - Date.now();
    this.frozenAtMs = undefined;
  }

  nowS(): number {
    return Math.floor(this.nowMs() / 1000);
  }

  advance(ms: number): void {
    this.offsetMs += ms;
  }
}

/**
 * The database server's clock now, in milliseconds since the epoch, read by one statement (`clock_timestamp()`: the
 * time the statement runs, not its transaction's start). Instances that share a database agree on it whatever their
 * own clocks say; a command that writes a time other instances act on (a signing key's activation) reads it here.
 */
export async function databaseNowMs(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ ms: string }>(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint::text AS ms`);
  return Number(rows[0]!.ms);
}
