// The gateway's clock follows the database server's when this host's is off (bb140 §1): sampled at start-up and
// every 30 s, adopted beyond 500 ms only, a sample with a long round trip ignored, a failed one keeping the offset.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DATABASE_CLOCK_ROUND_TRIP_MAX_MS, DATABASE_CLOCK_THRESHOLD_MS, databaseNowMs, SystemClock } from '../../src/platform/clock.ts';
import type { Queryable } from '../../src/platform/db/database.ts';
import { openTestDatabase, type TestDatabase } from '../support/database.ts';

/** A database whose clock reads `offsetMs` from this host's, answering after `delayMs`, or failing. */
function fakeDatabase(settings: { offsetMs: number; delayMs?: number; delaysMs?: number[]; fail?: boolean }): Queryable {
  return {
    async query<R>() {
      const delayMs = settings.delaysMs?.shift() ?? settings.delayMs;
      if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
      if (settings.fail) throw Object.assign(new Error('connection terminated'), { code: '57P01' });
      return { rows: [{ ms: String(Date.now() + settings.offsetMs) }] as R[], rowCount: 1 } as never;
    },
    async exec() {},
  };
}

/** A clock on a host whose own clock is `hostOffMs` off. */
const hostOff = (hostOffMs: number) => new SystemClock(() => Date.now() + hostOffMs);

describe('the gateway clock follows the database server', () => {
  it('a host clock minutes ahead reads the database time once sampled, and says how far it was off', async () => {
    const clock = hostOff(300_000);
    expect(clock.nowMs() - Date.now()).toBeGreaterThan(299_000);
    const change = await clock.followDatabase(fakeDatabase({ offsetMs: 0 }));
    expect(Math.abs(clock.nowMs() - Date.now())).toBeLessThan(100);
    expect(change?.fromMs).toBe(0);
    expect(Math.abs(change!.toMs + 300_000)).toBeLessThan(100);
    expect(clock.databaseOffsetMs).toBe(change!.toMs);
  });

  it('a host clock behind follows the database forward', async () => {
    const clock = hostOff(-40_000);
    await clock.followDatabase(fakeDatabase({ offsetMs: 0 }));
    expect(Math.abs(clock.nowMs() - Date.now())).toBeLessThan(100);
  });

  it('a difference within the threshold is ignored: time is not moved, nothing to report', async () => {
    const clock = new SystemClock();
    for (const offsetMs of [DATABASE_CLOCK_THRESHOLD_MS - 100, -(DATABASE_CLOCK_THRESHOLD_MS - 100), 30]) {
      expect(await clock.followDatabase(fakeDatabase({ offsetMs }))).toBeUndefined();
      expect(clock.databaseOffsetMs).toBe(0);
    }
  });

  it('a failed sample keeps the last offset', async () => {
    const clock = hostOff(300_000);
    await clock.followDatabase(fakeDatabase({ offsetMs: 0 }));
    const followed = clock.databaseOffsetMs;
    await expect(clock.followDatabase(fakeDatabase({ offsetMs: 0, fail: true }))).rejects.toThrow('connection terminated');
    expect(clock.databaseOffsetMs).toBe(followed);
    expect(Math.abs(clock.nowMs() - Date.now())).toBeLessThan(100);
  });

  it('samples whose round trips were all long are ignored, the last offset kept', async () => {
    const slowMs = DATABASE_CLOCK_ROUND_TRIP_MAX_MS + 50;
    const clock = hostOff(300_000);
    expect(await clock.followDatabase(fakeDatabase({ offsetMs: 0, delayMs: slowMs }), 1)).toBeUndefined();
    expect(clock.databaseOffsetMs).toBe(0);
    await clock.followDatabase(fakeDatabase({ offsetMs: 0 }));
    const followed = clock.databaseOffsetMs;
    expect(await clock.followDatabase(fakeDatabase({ offsetMs: 60_000, delayMs: slowMs }), 2)).toBeUndefined();
    expect(clock.databaseOffsetMs).toBe(followed);
  });

  it('of a few samples, the one of the shortest round trip counts: one slow answer does not skew the offset', async () => {
    const clock = hostOff(300_000);
    // The slow sample alone would read the database 100 ms early against the midpoint of its round trip.
    await clock.followDatabase(fakeDatabase({ offsetMs: 0, delaysMs: [190, 0, 0] }));
    expect(Math.abs(clock.nowMs() - Date.now())).toBeLessThan(30);
  });

  it('once following, small changes follow silently, a step beyond the threshold is reported, and agreement again ends it', async () => {
    const host = { offMs: 10_000 };
    const clock = new SystemClock(() => Date.now() + host.offMs);
    const database = fakeDatabase({ offsetMs: 0 });
    await clock.followDatabase(database);
    // The host's clock drifts: followed without a report.
    host.offMs = 10_300;
    expect(await clock.followDatabase(database)).toBeUndefined();
    expect(Math.abs(clock.databaseOffsetMs + 10_300)).toBeLessThan(100);
    // A host just past the threshold is followed; once following, 400 ms off is still followed (no flipping near it).
    host.offMs = 700;
    expect(await clock.followDatabase(database)).toBeDefined();
    host.offMs = 400;
    expect(await clock.followDatabase(database)).toBeUndefined();
    expect(Math.abs(clock.databaseOffsetMs + 400)).toBeLessThan(100);
    // Within half the threshold: back on its own clock; 400 ms to 0 is not worth a line.
    host.offMs = 100;
    expect(await clock.followDatabase(database)).toBeUndefined();
    expect(clock.databaseOffsetMs).toBe(0);
    // A step of the host's clock is reported, and so is its end.
    host.offMs = -40_000;
    const stepped = await clock.followDatabase(database);
    expect(Math.abs(stepped!.toMs - 40_000)).toBeLessThan(100);
    host.offMs = 0;
    expect(await clock.followDatabase(database)).toEqual({ fromMs: stepped!.toMs, toMs: 0 });
    expect(Math.abs(clock.nowMs() - Date.now())).toBeLessThan(100);
  });

  it("a frozen test clock is never moved, and a test's advance and freeze work on top of the followed offset", async () => {
    const clock = hostOff(300_000);
    clock.freeze();
    const frozenMs = clock.nowMs();
    expect(await clock.followDatabase(fakeDatabase({ offsetMs: 0 }))).toBeUndefined();
    expect(clock.nowMs()).toBe(frozenMs);
    clock.thaw();
    await clock.followDatabase(fakeDatabase({ offsetMs: 0 }));
    clock.advance(60_000);
    expect(Math.abs(clock.nowMs() - (Date.now() + 60_000))).toBeLessThan(100);
    // A test's moved time is its own: the next sample compares the host's clock, not the moved one.
    await clock.followDatabase(fakeDatabase({ offsetMs: 0 }));
    expect(Math.abs(clock.nowMs() - (Date.now() + 60_000))).toBeLessThan(100);
    clock.freeze();
    const standing = clock.nowMs();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(clock.nowMs()).toBe(standing);
    clock.thaw();
    expect(clock.nowMs() - standing).toBeLessThan(50);
  });
});

describe('on the real database', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await openTestDatabase();
  });
  afterAll(async () => {
    await database.drop();
    await database.db.close().catch(() => {});
  });

  it('a database on this host (or one NTP keeps in step) never moves the time', async () => {
    const clock = new SystemClock();
    for (let i = 0; i < 3; i++) expect(await clock.followDatabase(database.db)).toBeUndefined();
    expect(clock.databaseOffsetMs).toBe(0);
  });

  it("a host clock five minutes ahead reads the database's time", async () => {
    const clock = hostOff(300_000);
    await clock.followDatabase(database.db);
    expect(Math.abs(clock.nowMs() - (await databaseNowMs(database.db)))).toBeLessThan(DATABASE_CLOCK_THRESHOLD_MS);
  });
});
