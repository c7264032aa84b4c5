// The domain and webhook URL rules, fuzzed through the real routes: whatever arrives, the answer is a
// success or a 400 (never a 5xx), and every value the gateway accepts and stores obeys the rules. The
// validators' own properties run thousands of cases in validation.test.ts; these run fewer, end to end.
import net from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { markVerified, registerMerchant, uniqueKey } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

const RUNS = 80;
const SPECIAL_TLDS = new Set(['localhost', 'test', 'invalid', 'example', 'local', 'onion', 'alt', 'arpa', 'internal', 'localdomain', 'lan', 'home', 'corp', 'intranet', 'private']);

/** An independent statement of "a public DNS hostname in canonical form" (no shared code with the validator). */
function hostnameProblem(host: string): string | null {
  if (host.length < 1 || host.length > 253) return 'length';
  if (![...host].every((c) => (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c === '-' || c === '.')) return 'characters';
  const labels = host.split('.');
  if (labels.length < 2) return 'single label';
  if (labels.some((l) => l.length < 1 || l.length > 63 || l.startsWith('-') || l.endsWith('-'))) return 'label';
  const tld = labels.at(-1)!;
  if (!(tld[0]! >= 'a' && tld[0]! <= 'z')) return 'numeric tld';
  if (SPECIAL_TLDS.has(tld)) return 'special-use tld';
  if (net.isIP(host) !== 0) return 'ip';
  return null;
}

const hostile = fc.oneof(
  fc.string(),
  fc.string({ unit: 'binary', maxLength: 80 }),
  fc.domain(),
  fc.domain().map((d) => `${d.toUpperCase()}.`),
  fc.webUrl(),
  fc.ipV4(),
  fc.ipV6().map((ip) => `[${ip}]`),
  fc.constantFrom('bücher.de', 'ｅｘａｍｐｌｅ.com', 'shop。com', 'xn--.com', 'a..b.com', 'shop.com:443', 'shop.localhost', '0x7f.1', '2130706433', 'x.123'),
);

let world: World;

beforeAll(async () => {
  world = await startWorld();
});
afterAll(() => world.close());

describe('POST /v1/merchants, fuzzed domains', () => {
  it('answers 201 or 400, and every stored domain is a canonical public hostname', async () => {
    let ownerNumber = 0;
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(hostile, async (domain) => {
        // A fresh owner now and then keeps far below the per-owner merchant limit.
        const token = await world.humanToken(`fuzz-${Math.floor(ownerNumber++ / 20)}@example.com`);
        const res = await world.api('POST', '/v1/merchants', { token, key: uniqueKey('fuzz'), body: { name: 'Fuzz', domain, categories: ['books'] } });
        expect([201, 400], `${JSON.stringify(domain)} -> ${res.status} ${JSON.stringify(res.body)}`).toContain(res.status);
        if (res.status !== 201) {
          expect(res.body.code).toBe('invalid_input');
          return;
        }
        accepted += 1;
        const stored: string = res.body.merchant.domain;
        expect(hostnameProblem(stored), `${JSON.stringify(domain)} -> ${stored}`).toBeNull();
        expect(res.body.dnsRecord.name).toBe(`_acceptor-verify.${stored}`);
        expect(res.body.dnsRecord.name.length).toBeLessThanOrEqual(253);
      }),
      { numRuns: RUNS },
    );
    expect(accepted, 'the generators must also produce valid domains').toBeGreaterThan(0);
  });
});

describe('PUT /v1/merchants/{id}/webhook, fuzzed URLs', () => {
  it('answers 200 or 400, and every stored URL is https on the verified domain with nothing but a path', async () => {
    const token = await world.humanToken('fuzz-webhook@example.com');
    const { merchant } = await registerMerchant(world, token, { domain: 'fuzz-shop.com' });
    await markVerified(world, merchant.id);
    const urls = fc.oneof(
      fc.string(),
      fc.webUrl({ withQueryParameters: true, withFragments: true }),
      fc.webUrl({ validSchemes: ['https'], authoritySettings: { withPort: true, withUserInfo: true, withIPv4: true } }),
      fc.tuple(fc.constantFrom('https://', 'HTTPS://', 'http://', 'https:/'), fc.constantFrom('fuzz-shop.com', 'hooks.fuzz-shop.com', 'FUZZ-SHOP.COM.', 'evil-fuzz-shop.com', 'fuzz-shop.com.evil.com', 'user@fuzz-shop.com', 'fuzz-shop.com:443', 'fuzz-shop.com:8443', '127.0.0.1'), fc.webPath(), fc.constantFrom('', '?', '#', '?a=1', '#f'))
        .map((parts) => parts.join('')),
      // Mostly valid, so that the "accepted values obey the rules" half of the property has work to do.
      fc.tuple(fc.constantFrom('https://fuzz-shop.com', 'https://hooks.fuzz-shop.com', 'https://FUZZ-SHOP.COM.', 'https://a.b.fuzz-shop.com:443'), fc.webPath())
        .map((parts) => parts.join('')),
    );
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(urls, async (url) => {
        const res = await world.api('PUT', `/v1/merchants/${merchant.id}/webhook`, { token, key: uniqueKey('fuzz'), body: { url } });
        expect([200, 400], `${JSON.stringify(url)} -> ${res.status} ${JSON.stringify(res.body)}`).toContain(res.status);
        if (res.status !== 200) {
          expect(res.body.code).toBe('invalid_input');
          return;
        }
        accepted += 1;
        const stored: string = res.body.configuration.url;
        expect(stored.length).toBeLessThanOrEqual(2048);
        expect(stored.startsWith('https://')).toBe(true);
        const parsed = new URL(stored);
        expect(parsed.href).toBe(stored);
        expect([parsed.username, parsed.password, parsed.port, parsed.search, parsed.hash]).toEqual(['', '', '', '', '']);
        expect(stored.includes('?') || stored.includes('#')).toBe(false);
        expect(hostnameProblem(parsed.hostname)).toBeNull();
        expect(parsed.hostname === 'fuzz-shop.com' || parsed.hostname.endsWith('.fuzz-shop.com'), stored).toBe(true);
      }),
      { numRuns: RUNS },
    );
    expect(accepted, 'the generators must also produce valid URLs').toBeGreaterThan(0);
  });
});
