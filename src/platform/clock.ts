// The one clock. Everything that compares against "now" (hold expiry, token lifetimes, idempotency
// leases) asks it, so tests can move time without sleeping. Instances that share a database take the
// database server's clock as the one time: a gateway whose host clock is off follows the database's.
import type { Queryable } from './db/database.ts';

export interface Clock {
  nowMs(): number;
  nowS(): number;
}

/**
 * How far this host's clock may stand from the database server's before the gateway follows the database's: more
 * than NTP's usual error, so a database on the same host (PGlite, the tests') never moves time, less than any lifetime
 * the gateway gives (a hold's is 60 s at least).
 */
export const DATABASE_CLOCK_THRESHOLD_MS = 500;
/**
 * A sample whose round trip took longer is ignored: the database read its clock somewhere within it, so the reading
 * is up to half the round trip off, and beyond this that could be a good part of the threshold.
 */
export const DATABASE_CLOCK_ROUND_TRIP_MAX_MS = 200;
/** Samples taken each time, the one of the shortest round trip kept (a few statements of a few milliseconds). */
export const DATABASE_CLOCK_SAMPLES = 3;
/** How often a serving gateway samples the database's clock again (a host clock drifts, or NTP steps it). */
export const DATABASE_CLOCK_SAMPLE_INTERVAL_MS = 30_000;

/** The time the clock follows moved by more than the threshold: from one offset from the host's clock to another. */
export interface DatabaseClockChange {
  fromMs: number;
  toMs: number;
}

export class SystemClock implements Clock {
  /** Added to the system time; only tests change it. */
  offsetMs = 0;
  /** When set, time stands still here (tests that compare against a model step by step). */
  private frozenAtMs: number | undefined;
  /** The database server's clock minus this host's, while they differ by more than the threshold; else 0. */
  private followedOffsetMs = 0;

  /** `hostNowMs` is this host's clock (tests give one that is off, as a host whose NTP is off would be). */
  constructor(private readonly hostNowMs: () => number = Date.now) {}

  nowMs(): number {
    return (this.frozenAtMs ?? this.hostNowMs()) + this.offsetMs + this.followedOffsetMs;
  }

  /** How far the database server's clock, which this clock follows, stands from this host's (0: within the threshold). */
  get databaseOffsetMs(): number {
    return this.followedOffsetMs;
  }

  freeze(): void {
    this.frozenAtMs = this.hostNowMs();
  }

  /** Lets time run again from where it stands, offset kept. */
  thaw(): void {
    if (this.frozenAtMs === undefined) return;
    this.offsetMs += this.frozenAtMs - this.hostNowMs();
    this.frozenAtMs = undefined;
  }

  nowS(): number {
    return Math.floor(this.nowMs() / 1000);
  }

  advance(ms: number): void {
    this.offsetMs += ms;
  }

  /**
   * Samples the database server's clock and follows it when this host's stands more than the threshold from it:
   * offset = the database's reading − the midpoint of the round trip on this host's clock, from the sample of the
   * shortest round trip of a few (a stall of this process or a busy pool lengthens one, not all). Once following, it
   * keeps following until the two agree within half the threshold, so a host near the threshold does not flip at each
   * sample. When every round trip was long the samples are ignored, and a failed one throws: either way the last
   * offset stays. A frozen clock is never moved. Returns the change when the offset moved by more than the threshold
   * (worth a warning). Compared with the host's clock, not `nowMs()`: a test's moved time (`advance`) is its own.
   */
  async followDatabase(db: Queryable, samples = DATABASE_CLOCK_SAMPLES): Promise<DatabaseClockChange | undefined> {
    if (this.frozenAtMs !== undefined) return undefined;
    let best: { measuredMs: number; roundTripMs: number } | undefined;
    for (let i = 0; i < samples; i++) {
      const sentMs = performance.now();
      const hostSentMs = this.hostNowMs();
      const databaseMs = await databaseNowMs(db);
      const roundTripMs = performance.now() - sentMs;
      if (roundTripMs <= (best?.roundTripMs ?? DATABASE_CLOCK_ROUND_TRIP_MAX_MS)) {
        best = { measuredMs: Math.round(databaseMs - (hostSentMs + roundTripMs / 2)), roundTripMs };
      }
    }
    if (best === undefined || this.frozenAtMs !== undefined) return undefined;
    const offByMs = Math.abs(best.measuredMs);
    const following = this.followedOffsetMs !== 0;
    const toMs = offByMs > DATABASE_CLOCK_THRESHOLD_MS || (following && offByMs > DATABASE_CLOCK_THRESHOLD_MS / 2) ? best.measuredMs : 0;
    const fromMs = this.followedOffsetMs;
    this.followedOffsetMs = toMs;
    return Math.abs(toMs - fromMs) > DATABASE_CLOCK_THRESHOLD_MS ? { fromMs, toMs } : undefined;
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

/** What the log says of a change: how far this host's clock is off, and whose time the gateway uses. */
export function describeDatabaseClockChange({ toMs }: DatabaseClockChange): string {
  if (toMs === 0) {
    return `this instance's clock agrees with the database server's again (within ${DATABASE_CLOCK_THRESHOLD_MS} ms); the gateway uses its own clock`;
  }
  const direction = toMs < 0 ? 'ahead of' : 'behind';
  return `this instance's clock is ${(Math.abs(toMs) / 1000).toFixed(1)} s ${direction} the database server's; the gateway uses the database's time (holds, token lifetimes), which every instance sharing the database agrees on: check this host's time synchronisation (NTP)`;
}
