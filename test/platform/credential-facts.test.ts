// Credential facts (src/platform/credential-facts.ts): what a credential's check reads that can be revoked is
// kept for its lifetime and then read again; a miss is read every time (unless absence is the fact); a read asked
// before a revocation on this process is never kept; a revocation forgets at once for every gateway of this
// process on the same database, and, where other processes may share it, answers only once the lifetime has
// passed.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { CredentialFacts } from '../../src/platform/credential-facts.ts';
import { Metrics } from '../../src/platform/metrics.ts';

const limits = { inFlightMax: 2, batchMax: 16 };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One kind of fact over a table the test changes; counts the statements it would send. */
function table(facts: CredentialFacts, options: { keepMisses?: boolean } = {}) {
  const rows = new Map<string, string>();
  const statements: Array<readonly string[]> = [];
  let pending: Array<() => void> | undefined;
  const reads = facts.reads<string, string>(
    async (keys) => {
      statements.push(keys);
      // The answer is the table as it is when the read starts; a test may hold it before it answers.
      const seen = new Map(keys.filter((key) => rows.has(key)).map((key) => [key, rows.get(key)!]));
      if (pending) await new Promise<void>((resolve) => pending!.push(resolve));
      return seen;
    },
    (key) => key,
    { kind: 'test', limits, ...options },
  );
  return {
    rows,
    statements,
    reads,
    hold: () => {
      pending = [];
    },
    release: () => {
      const waiting = pending ?? [];
      pending = undefined;
      for (const resolve of waiting) resolve();
    },
  };
}

describe('credential facts', () => {
  it('keeps what a read found for its lifetime, then reads it again', async () => {
    const metrics = new Metrics({ processMetrics: false });
    const facts = new CredentialFacts({ lifetimeMs: 150, database: {}, shared: false, metrics });
    const t = table(facts);
    t.rows.set('key', 'v1');
    expect(await t.reads.read('key')).toBe('v1');
    t.rows.set('key', 'v2');
    expect(await t.reads.read('key')).toBe('v1');
    expect(t.statements).toHaveLength(1);
    await sleep(200);
    expect(await t.reads.read('key')).toBe('v2');
    expect(t.statements).toHaveLength(2);
    const counted = (await metrics.credentialFactReads.get()).values.map((v) => [v.labels.outcome, v.value]);
    expect(Object.fromEntries(counted)).toEqual({ kept: 1, read: 2 });
  });

  it('reads a miss every time, unless absence is the fact (a deny-list)', async () => {
    const facts = new CredentialFacts({ lifetimeMs: 10_000, database: {}, shared: false });
    const found = table(facts);
    expect(await found.reads.read('new')).toBeUndefined();
    found.rows.set('new', 'registered');
    expect(await found.reads.read('new')).toBe('registered');
    const denyList = table(facts, { keepMisses: true });
    expect(await denyList.reads.read('jti')).toBeUndefined();
    denyList.rows.set('jti', 'denied');
    expect(await denyList.reads.read('jti')).toBeUndefined();
    expect(denyList.statements).toHaveLength(1);
  });

  it('with a lifetime of 0 reads on every request', async () => {
    const facts = new CredentialFacts({ lifetimeMs: 0, database: {}, shared: true });
    const t = table(facts);
    t.rows.set('key', 'v1');
    await t.reads.read('key');
    await t.reads.read('key');
    expect(t.statements).toHaveLength(2);
    const order: string[] = [];
    const turn = sleep(0).then(() => order.push('a turn passed'));
    await facts.revoked().then(() => order.push('revocation answered'));
    await turn;
    expect(order).toEqual(['revocation answered', 'a turn passed']);
  });

  it('does not keep a read asked before a revocation on this process, which may have seen the revoked state', async () => {
    const facts = new CredentialFacts({ lifetimeMs: 10_000, database: {}, shared: false });
    const t = table(facts);
    t.rows.set('key', 'before');
    t.hold();
    const asked = t.reads.read('key');
    await sleep(0);
    t.rows.delete('key');
    await facts.revoked();
    t.release();
    expect(await asked).toBe('before');
    expect(await t.reads.read('key')).toBeUndefined();
    expect(t.statements).toHaveLength(2);
  });

  it("forgets at once every gateway's facts on the same database in this process, and no other database's", async () => {
    const database = {};
    const one = new CredentialFacts({ lifetimeMs: 10_000, database, shared: false });
    const two = new CredentialFacts({ lifetimeMs: 10_000, database, shared: false });
    const elsewhere = new CredentialFacts({ lifetimeMs: 10_000, database: {}, shared: false });
    const tables = [one, two, elsewhere].map((facts) => table(facts));
    for (const t of tables) {
      t.rows.set('key', 'kept');
      await t.reads.read('key');
      t.rows.set('key', 'changed');
    }
    await one.revoked();
    expect(await Promise.all(tables.map((t) => t.reads.read('key')))).toEqual(['changed', 'changed', 'kept']);
    two.close();
    tables[1]!.rows.set('key', 'changed again');
    await one.revoked();
    expect(await tables[1]!.reads.read('key')).toBe('changed');
  });

  it('answers a revocation only once the lifetime has passed where other processes may share the database, at once where none can', async () => {
    const shared = new CredentialFacts({ lifetimeMs: 300, database: {}, shared: true });
    const order: string[] = [];
    const timer = sleep(150).then(() => order.push('150 ms passed'));
    await shared.revoked().then(() => order.push('revocation answered'));
    await timer;
    expect(order).toEqual(['150 ms passed', 'revocation answered']);

    const alone = new CredentialFacts({ lifetimeMs: 300, database: {}, shared: false });
    order.length = 0;
    const immediate = sleep(0).then(() => order.push('a turn passed'));
    await alone.revoked().then(() => order.push('revocation answered'));
    await immediate;
    expect(order).toEqual(['revocation answered', 'a turn passed']);
  });
});
