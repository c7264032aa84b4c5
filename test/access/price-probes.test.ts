// The merchant check's count of distinct prices per merchant and agent (src/access/price-probes.ts): the HTTP
// answer is tested in test/ledger/mandates.test.ts; here the window and the memory bound.
import { describe, expect, it } from 'vitest';
import { PriceProbes } from '../../src/access/price-probes.ts';

describe('distinct prices a merchant asks about an agent', () => {
  it('admits up to the limit of distinct prices, any price again, and a new one once the oldest leaves the window', () => {
    const probes = new PriceProbes(3, 3600);
    expect([1n, 2n, 3n].map((price, i) => probes.admit('m', 'a', price, 1000 + i).allowed)).toEqual([true, true, true]);
    expect(probes.admit('m', 'a', 4n, 1010)).toEqual({ allowed: false, retryAfterS: 3590 });
    expect(probes.admit('m', 'a', 2n, 1020).allowed).toBe(true);
    // Another agent, another merchant: their own counts.
    expect(probes.admit('m', 'b', 4n, 1020).allowed).toBe(true);
    expect(probes.admit('n', 'a', 4n, 1020).allowed).toBe(true);
    // Price 1 was last asked at 1000: at 4600 it has left the window.
    expect(probes.admit('m', 'a', 4n, 4599).allowed).toBe(false);
    expect(probes.admit('m', 'a', 4n, 4600).allowed).toBe(true);
  });

  it('forgets the least recently asked pair beyond its bound', () => {
    const probes = new PriceProbes(1, 3600, 2);
    probes.admit('m', 'a', 1n, 0);
    probes.admit('m', 'b', 1n, 0);
    probes.admit('m', 'a', 1n, 1); // a is now the most recent
    probes.admit('m', 'c', 1n, 2); // b is forgotten
    expect(probes.admit('m', 'b', 2n, 3).allowed).toBe(true);
    expect(probes.admit('m', 'c', 2n, 3).allowed).toBe(false);
  });
});
