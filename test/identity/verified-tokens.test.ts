// The verified-token cache on its own, with a clock that only moves when told: an entry is reused for the
// same check only, never at or past the token's exp nor past its age limit, is keyed by a hash of the
// token, and the cache never holds more than its capacity (the least recently used entry goes first).
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { beforeEach, describe, expect, it } from 'vitest';
import { SystemClock } from '../../src/platform/clock.ts';
import { VERIFIED_TOKEN_AGE_MAX_MS, VERIFIED_TOKENS_MAX, VerifiedTokens } from '../../src/identity/verified-tokens.ts';

let clock: SystemClock;

beforeEach(() => {
  clock = new SystemClock();
  clock.freeze();
  clock.advance(1000 - (clock.nowMs() % 1000)); // on a whole second, so exp (seconds) is exactly now + n s
});

const nowS = () => clock.nowS();
const verified = (expInS: number, kid = 'k1') => ({ claims: { sub: 'someone', exp: nowS() + expInS }, kid });

describe('verified tokens', () => {
  it('reuses a verification for the same check only', () => {
    const cache = new VerifiedTokens(clock);
    cache.remember('token-a', 'at+jwt https://gw https://gw', verified(600));
    expect(cache.find('token-a', 'at+jwt https://gw https://gw')).toMatchObject({ claims: { sub: 'someone' }, kid: 'k1' });
    expect(cache.find('token-a', 'at+jwt https://gw https://gw/mcp')).toBeUndefined();
    expect(cache.find('token-b', 'at+jwt https://gw https://gw')).toBeUndefined();
  });

  it('never hands out an entry at or after the token expiry', () => {
    const cache = new VerifiedTokens(clock);
    cache.remember('short', 'check', verified(10));
    clock.advance(9_999);
    expect(cache.find('short', 'check')).toBeDefined();
    clock.advance(1);
    expect(cache.find('short', 'check')).toBeUndefined();
    expect(cache.size).toBe(0);
  });

  it('reuses a verification at most for its age limit, however long the token lives', () => {
    const cache = new VerifiedTokens(clock);
    cache.remember('long', 'check', verified(86_400));
    clock.advance(VERIFIED_TOKEN_AGE_MAX_MS - 1);
    expect(cache.find('long', 'check')).toBeDefined();
    clock.advance(1);
    expect(cache.find('long', 'check')).toBeUndefined();
  });

  it('keeps nothing for a token without exp or already expired', () => {
    const cache = new VerifiedTokens(clock);
    cache.remember('no-exp', 'check', { claims: { sub: 'x' }, kid: 'k1' });
    cache.remember('expired', 'check', verified(0));
    expect(cache.size).toBe(0);
  });

  it('holds its bound, dropping the least recently used entry first', () => {
    const cache = new VerifiedTokens(clock, 3);
    for (const token of ['t1', 't2', 't3']) cache.remember(token, 'check', verified(600));
    expect(cache.find('t1', 'check')).toBeDefined(); // t1 is now the most recently used
    cache.remember('t4', 'check', verified(600));
    expect(cache.size).toBe(3);
    expect(cache.find('t2', 'check')).toBeUndefined();
    for (const token of ['t1', 't3', 't4']) expect(cache.find(token, 'check')).toBeDefined();
    for (let i = 0; i < 100; i += 1) cache.remember(`many-${i}`, 'check', verified(600));
    expect(cache.size).toBe(3);
  });

  it('is bounded to 10,000 entries by default', () => {
    const cache = new VerifiedTokens(clock);
    expect(cache.capacity).toBe(VERIFIED_TOKENS_MAX);
    expect(VERIFIED_TOKENS_MAX).toBe(10_000);
    for (let i = 0; i < VERIFIED_TOKENS_MAX + 50; i += 1) cache.remember(`token-${i}`, 'check', verified(600));
    expect(cache.size).toBe(VERIFIED_TOKENS_MAX);
  });

  it('keys entries by a hash of the token, never the token itself', () => {
    const cache = new VerifiedTokens(clock);
    const token = 'eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJzb21lb25lIn0.c2lnbmF0dXJl';
    cache.remember(token, 'check', verified(600));
    const keys = [...(cache as unknown as { entries: Map<string, unknown> }).entries.keys()];
    expect(keys).toHaveLength(1);
    expect(keys[0]).not.toContain(token);
    expect(keys[0]).toMatch(/^[A-Za-z0-9_-]{43}$/); // base64url SHA-256
  });

  it('hands out claims that cannot be changed by the one who reads them', () => {
    const cache = new VerifiedTokens(clock);
    cache.remember('token', 'check', verified(600));
    const found = cache.find('token', 'check')!;
    expect(() => {
      (found.claims as { sub: string }).sub = 'someone else';
    }).toThrow(TypeError);
  });
});
