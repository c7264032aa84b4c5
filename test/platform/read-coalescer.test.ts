// Coalesced reads (src/platform/read-coalescer.ts): concurrent lookups share one read per round, and a lookup
// is always answered by a read that started after it was asked (so a revocation committed before a request
// arrived is never missed).
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { ReadCoalescer } from '../../src/platform/read-coalescer.ts';

/** A coalescer over a table the test changes, whose reads the test finishes by hand. */
function manual(inFlightMax = 1) {
  const table = new Map<string, number>();
  const reads: Array<{ keys: readonly string[]; finish: () => void; fail: (error: Error) => void }> = [];
  const coalescer = new ReadCoalescer<string, number>(
    (keys) =>
      new Promise((resolve, reject) => {
        // The read's answer is the table as it is when the read starts.
        const seen = new Map(keys.filter((key) => table.has(key)).map((key) => [key, table.get(key)!]));
        reads.push({ keys, finish: () => resolve(seen), fail: reject });
      }),
    (key) => key,
    { inFlightMax, batchMax: 3 },
  );
  return { table, reads, coalescer };
}

const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('coalesced reads', () => {
  it('asks at once when idle, then gathers what arrives meanwhile into one read (distinct keys, at most batchMax)', async () => {
    const { table, reads, coalescer } = manual();
    table.set('a', 1).set('b', 2);
    const first = coalescer.read('a');
    expect(reads.map((r) => r.keys)).toEqual([['a']]);
    const later = ['b', 'a', 'b', 'c', 'a'].map((key) => coalescer.read(key));
    expect(reads).toHaveLength(1);
    reads[0]!.finish();
    expect(await first).toBe(1);
    await settled();
    expect(reads.map((r) => r.keys)).toEqual([['a'], ['b', 'a']]);
    reads[1]!.finish();
    await settled();
    expect(reads[2]!.keys).toEqual(['c', 'a']);
    reads[2]!.finish();
    expect(await Promise.all(later)).toEqual([2, 1, 2, undefined, 1]);
  });

  it('never answers a lookup from a read that started before it was asked', async () => {
    const { table, reads, coalescer } = manual();
    table.set('key', 1);
    const before = coalescer.read('key');
    // A change committed after the first read started, before the second lookup is asked (a revocation).
    table.set('key', 2);
    const after = coalescer.read('key');
    reads[0]!.finish();
    expect(await before).toBe(1);
    await settled();
    reads[1]!.finish();
    expect(await after).toBe(2);
  });

  it('fails only the lookups of a failed read; the next round reads again', async () => {
    const { table, reads, coalescer } = manual();
    table.set('a', 1);
    const failed = coalescer.read('a').catch((error: Error) => error.message);
    const next = coalescer.read('a');
    reads[0]!.fail(new Error('connection lost'));
    expect(await failed).toBe('connection lost');
    await settled();
    reads[1]!.finish();
    expect(await next).toBe(1);
  });

  it('runs up to inFlightMax reads side by side', async () => {
    const { reads, coalescer } = manual(2);
    void coalescer.read('a');
    void coalescer.read('b');
    void coalescer.read('c');
    expect(reads.map((r) => r.keys)).toEqual([['a'], ['b']]);
    reads[0]!.finish();
    await settled();
    expect(reads.map((r) => r.keys)).toEqual([['a'], ['b'], ['c']]);
    reads[1]!.finish();
    reads[2]!.finish();
  });
});
