// The lifetimes instances announce (src/platform/credential-facts.ts, AnnouncedLifetimes): a revocation waits out
// the longest one an instance still counted announced, its own at least; an instance that withdrew, or has not
// announced for 90 s (by the database's clock), no longer counts; an instance keeps facts only while its own
// announcement counts; and when the database cannot say, a revocation waits the longest any instance may keep.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { performance } from 'node:perf_hooks';
import { AnnouncedLifetimes, CREDENTIAL_FACTS_MS_MAX, CredentialFacts, LIFETIME_ANNOUNCEMENT_COUNTS_S } from '../../src/platform/credential-facts.ts';
import { openTestDatabase, type TestDatabase } from '../support/database.ts';

describe('lifetimes announced by the instances sharing a database', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await openTestDatabase(undefined, { migrated: true });
  });
  afterAll(async () => {
    await database.drop();
    await database.db.close().catch(() => {});
  });

  it('counts the longest lifetime announced, its own at least, and no longer one withdrawn or not announced for 90 s', async () => {
    const short = new AnnouncedLifetimes(database.db, 200);
    const long = new AnnouncedLifetimes(database.db, 4_000);
    const longer = new AnnouncedLifetimes(database.db, 7_000);
    await short.announce();
    expect(await short.longestMs()).toBe(200);
    await long.announce();
    await longer.announce();
    expect(await short.longestMs()).toBe(7_000);

    // An instance that stopped without withdrawing counts until its last announcement is 90 s old.
    await database.db.query('UPDATE credential_fact_lifetimes SET seen_at_s = seen_at_s - $1 WHERE instance_id = $2', [LIFETIME_ANNOUNCEMENT_COUNTS_S - 5, longer.instanceId]);
    expect(await short.longestMs()).toBe(7_000);
    await database.db.query('UPDATE credential_fact_lifetimes SET seen_at_s = seen_at_s - 10 WHERE instance_id = $1', [longer.instanceId]);
    expect(await short.longestMs()).toBe(4_000);

    await long.withdraw();
    expect(await short.longestMs()).toBe(200);
    // Its own lifetime holds even before it announced, and after it withdrew.
    await short.withdraw();
    expect(await new AnnouncedLifetimes(database.db, 300).longestMs()).toBe(300);
    await longer.withdraw();
    expect((await database.db.query('SELECT count(*)::int AS n FROM credential_fact_lifetimes')).rows).toEqual([{ n: 0 }]);
  });

  it('announces again, so one instance is one row whatever its announcements', async () => {
    const instance = new AnnouncedLifetimes(database.db, 1_000);
    await instance.announce();
    await instance.announce();
    expect((await database.db.query('SELECT lifetime_ms FROM credential_fact_lifetimes WHERE instance_id = $1', [instance.instanceId])).rows).toEqual([{ lifetime_ms: 1_000 }]);
    await instance.withdraw();
  });

  it("answers a revocation once another instance's longer lifetime has passed", async () => {
    const mine = new AnnouncedLifetimes(database.db, 100);
    const theirs = new AnnouncedLifetimes(database.db, 700);
    await mine.announce();
    await theirs.announce();
    try {
      const facts = new CredentialFacts({ lifetimeMs: 100, database: database.db, shared: true, announced: mine });
      const started = performance.now();
      await facts.revoked();
      expect(performance.now() - started).toBeGreaterThanOrEqual(700);
      facts.close();
    } finally {
      await mine.withdraw();
      await theirs.withdraw();
    }
  });

  it('keeps facts only while its announcement counts: none before the first, nor after it withdrew', async () => {
    const announced = new AnnouncedLifetimes(database.db, 5_000);
    const facts = new CredentialFacts({ lifetimeMs: 5_000, database: {}, shared: true, announced });
    let reads = 0;
    const agent = facts.reads<string, string>(async (keys) => new Map(keys.map((key) => [key, `read ${++reads}`])), (key) => key, {
      kind: 'test',
      limits: { inFlightMax: 1, batchMax: 16 },
    });
    expect(announced.counted()).toBe(false);
    expect(await agent.read('a')).toBe('read 1');
    expect(await agent.read('a')).toBe('read 2');
    await announced.announce();
    expect(announced.counted()).toBe(true);
    expect(await agent.read('a')).toBe('read 3');
    expect(await agent.read('a')).toBe('read 3');
    await announced.withdraw();
    expect(announced.counted()).toBe(false);
    facts.close();
  });

  it('waits the longest any instance may keep when the database cannot say', async () => {
    const closed = await openTestDatabase(undefined, { migrated: true });
    await closed.drop();
    await closed.db.close().catch(() => {});
    expect(await new AnnouncedLifetimes(closed.db, 100).longestMs()).toBe(CREDENTIAL_FACTS_MS_MAX);
  });
});
