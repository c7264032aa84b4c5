// Ids: a type prefix and 128 random bits in base32, never repeated, also across the refills of the random
// pool they are drawn from (src/platform/ids.ts).
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { newId, randomBase32 } from '../../src/platform/ids.ts';

describe('ids', () => {
  it('are a prefix and 26 base32 characters (128 bits), all different over many pool refills', () => {
    const ids = Array.from({ length: 5000 }, () => newId('hold')); // 80,000 random bytes: about 20 refills of the pool
    for (const id of ids) expect(id).toMatch(/^hold_[a-z2-7]{26}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('encode any byte count, larger than the pool too', () => {
    expect(randomBase32(8)).toMatch(/^[a-z2-7]{13}$/);
    expect(randomBase32(5000)).toMatch(/^[a-z2-7]{8000}$/);
  });

  it('use the whole alphabet with no bias a test of this size can see', () => {
    const counts = new Map<string, number>();
    for (let i = 0; i < 2000; i++) for (const char of randomBase32(10)) counts.set(char, (counts.get(char) ?? 0) + 1);
    expect(counts.size).toBe(32);
    // 32,000 characters, 1,000 expected of each: far outside chance would be below 800 or above 1,200.
    for (const count of counts.values()) expect(count).toBeGreaterThan(800);
    for (const count of counts.values()) expect(count).toBeLessThan(1200);
  });
});
