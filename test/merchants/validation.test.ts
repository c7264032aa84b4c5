// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import net from 'node:net';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { validateWebhookUrl, WEBHOOK_URL_CHARS_MAX } from '../../src/events/webhook-url.ts';
import { normaliseDomain, SPECIAL_USE_TLDS } from '../../src/platform/hostnames.ts';

// An independent restatement of the domain rules, written differently on purpose (character codes, no
// shared regular expressions), used to re-check every output the validators accept.
// The special-use and private-use last labels the rules refuse (RFC 6761, RFC 2606, RFC 9476, ICANN's name-collision list).
const SPECIAL_TLDS = ['localhost', 'local', 'internal', 'localdomain', 'test', 'invalid', 'example', 'onion', 'arpa', 'alt', 'lan', 'home', 'corp', 'intranet', 'private'];
function domainViolation(domain: string): string | null {
  if (domain.length < 1 || domain.length > 253) return 'length';
  for (const char of domain) {
    const code = char.charCodeAt(0);
    const allowed = (code >= 97 && code <= 122) || (code >= 48 && code <= 57) || char === '-' || char === '.';
    if (!allowed) return `character ${JSON.stringify(char)}`;
  }
  const labels = domain.split('.');
  if (labels.length < 2) return 'single label';
  for (const label of labels) {
    if (label.length < 1 || label.length > 63) return 'label length';
    if (label.startsWith('-') || label.endsWith('-')) return 'hyphen at label edge';
  }
  const tld = labels.at(-1)!;
  if (!(tld.charCodeAt(0) >= 97 && tld.charCodeAt(0) <= 122)) return 'tld does not start with a letter';
  if (SPECIAL_TLDS.includes(tld)) return 'special-use tld';
  if (net.isIP(domain) !== 0) return 'ip address';
  // A WHATWG URL parser must see exactly this name as the host (not an IPv4 number, not something else).
  if (new URL(`https://${domain}/`).hostname !== domain) return 'URL parser reads it differently';
  return null;
}

function webhookViolation(url: string, verifiedDomain: string): string | null {
  if (url.length > WEBHOOK_URL_CHARS_MAX) return 'length';
  if (!url.startsWith('https://')) return 'scheme';
  const parsed = new URL(url);
  if (parsed.href !== url) return 'not canonical';
  if (parsed.username || parsed.password) return 'credentials';
  if (parsed.search || parsed.hash || url.includes('?') || url.includes('#')) return 'query or fragment';
  if (parsed.port !== '') return 'port';
  const authority = url.slice('https://'.length).split('/')[0]!;
  if (authority !== parsed.hostname) return 'authority holds more than the host';
  const hostProblem = domainViolation(parsed.hostname);
  if (hostProblem) return `host: ${hostProblem}`;
  const domain = verifiedDomain.toLowerCase();
  const hostLabels = parsed.hostname.split('.');
  const domainLabels = domain.split('.');
  const tail = hostLabels.slice(hostLabels.length - domainLabels.length).join('.');
  if (tail !== domain) return 'not on the verified domain';
  return null;
}

describe('normaliseDomain examples', () => {
  it.each([
    ['example.com', 'example.com'],
    ['Shop.Example.COM', 'shop.example.com'],
    ['example.com.', 'example.com'],
    ['bücher.de', 'xn--bcher-kva.de'],
    ['xn--bcher-kva.de', 'xn--bcher-kva.de'],
    ['ｅｘａｍｐｌｅ.com', 'example.com'],
    ['shop。example。com', 'shop.example.com'],
    ['1.2.3.com', '1.2.3.com'],
    ['a-b.co.uk', 'a-b.co.uk'],
    [`${'a'.repeat(63)}.com`, `${'a'.repeat(63)}.com`],
    [`${'a.'.repeat(125)}com`, `${'a.'.repeat(125)}com`],
  ])('accepts %j as %j', (input, domain) => {
    expect(normaliseDomain(input)).toEqual({ ok: true, domain });
  });

  it.each([
    '', ' example.com', 'example.com ', 'exa mple.com', 'example.com\n', 'example.com\u00a0', 'example\tcom',
    'https://example.com', 'example.com/path', 'example.com:443', 'user@example.com', 'example.com?x', 'example.com#x',
    'ex%61mple.com', 'example.com\\x',
    '127.0.0.1', '[::1]', '::1', '0x7f.1', '0x7f.0.0.1', '2130706433', '0177.0.0.1', '127.1', '0x7f000001', '１２７.0.0.1', '1.2.3.4.',
    'localhost', 'LOCALHOST', 'foo.localhost', 'localhost.', 'com', 'shop.local', 'x.internal', 'x.localdomain', 'x.test', 'x.invalid',
    'x.example', 'x.onion', '1.0.0.127.in-addr.arpa',
    'a..com', '.com', '-a.com', 'a-.com', 'a_b.com', 'example.com..', `${'a'.repeat(64)}.com`, `${'a.'.repeat(126)}com`,
    'example.123', 'example.1a', 'a.0x7f', 'xn--zz.com',
  ])('refuses %j', (input) => {
    const result = normaliseDomain(input);
    expect(result.ok, JSON.stringify(result)).toBe(false);
  });
});

// IPv4 addresses written in the notations URL parsers and inet_aton accept.
const ipv4Notations = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(5)).map(([a, b, c, d, style]) => {
  const whole = ((a << 24) >>> 0) + (b << 16) + (c << 8) + d;
  switch (style) {
    case 0: return `${a}.${b}.${c}.${d}`;
    case 1: return [a, b, c, d].map((n) => `0x${n.toString(16)}`).join('.');
    case 2: return [a, b, c, d].map((n) => `0${n.toString(8)}`).join('.');
    case 3: return `${a}.${(b << 16) + (c << 8) + d}`;
    case 4: return String(whole);
    default: return `0X${whole.toString(16).toUpperCase()}`;
  }
});
const ipLiterals = fc.oneof(
  ipv4Notations,
  ipv4Notations.map((ip) => `${ip}.`),
  fc.ipV6(),
  fc.ipV6().map((ip) => `[${ip}]`),
  fc.ipV4().map((ip) => `::ffff:${ip}`),
  fc.ipV4().map((ip) => `[::ffff:${ip}]`),
  fc.ipV4().map((ip) => ip.replace(/\d/g, (digit) => String.fromCharCode(0xff10 + Number(digit)))), // full-width digits
  fc.ipV4().map((ip) => ip.replaceAll('.', '。')),
);

describe('normaliseDomain properties', () => {
  it('never throws, and everything it accepts obeys the rules', () => {
    const anything = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.domain(), fc.webUrl(), ipLiterals);
    fc.assert(fc.property(anything, (input) => {
      const result = normaliseDomain(input);
      if (!result.ok) return true;
      expect(domainViolation(result.domain)).toBeNull();
      expect(normaliseDomain(result.domain)).toEqual(result);
      return true;
    }), { numRuns: 2000 });
  });

  it('accepts every ordinary public domain, lower-cased', () => {
    fc.assert(fc.property(fc.domain(), (domain) => {
      // Every special-use name the rules refuse (fast-check's domains include .lan, .home, .corp …).
      fc.pre(domain.length <= 253 && !SPECIAL_USE_TLDS.has(domain.split('.').at(-1)!.toLowerCase()));
      expect(normaliseDomain(domain)).toEqual({ ok: true, domain: domain.toLowerCase() });
    }), { numRuns: 500 });
  });

  it('refuses every IP literal in every notation', () => {
    fc.assert(fc.property(ipLiterals, (input) => !normaliseDomain(input).ok), { numRuns: 2000 });
  });

  it('refuses anything written as a URL', () => {
    fc.assert(fc.property(fc.webUrl(), (url) => !normaliseDomain(url).ok));
  });
});

describe('validateWebhookUrl examples', () => {
  it.each([
    ['https://example.com/hook', 'example.com', 'https://example.com/hook'],
    ['https://hooks.example.com/a/b', 'example.com', 'https://hooks.example.com/a/b'],
    ['https://EXAMPLE.com:443/x', 'example.com', 'https://example.com/x'],
    ['HTTPS://example.com', 'example.com', 'https://example.com/'],
    ['https://example.com./x', 'Example.COM', 'https://example.com/x'],
    ['https://a.b.example.com/in/@team/%7Euser', 'example.com', 'https://a.b.example.com/in/@team/%7Euser'],
    ['https://bücher.de/hook', 'xn--bcher-kva.de', 'https://xn--bcher-kva.de/hook'],
  ])('accepts %j on %j', (input, domain, url) => {
    expect(validateWebhookUrl(input, domain)).toEqual({ ok: true, url });
  });

  it.each([
    'http://example.com/hook',
    'ftp://example.com/hook',
    '//example.com/hook',
    'example.com/hook',
    'https://evil-example.com/',
    'https://example.com.evil.com/',
    'https://evil.com/example.com',
    'https://evil.com/?x=example.com',
    'https://example.com@evil.com/',
    'https://user:pw@example.com/',
    'https://user@example.com/',
    'https://example.com:8443/',
    'https://example.com:80/',
    'https://example.com/x?',
    'https://example.com/x#',
    'https://example.com/x?a=1',
    'https://example.com/x#top',
    'https://127.0.0.1/',
    'https://[::1]/',
    'https://2130706433/',
    'https:\\\\example.com\\x',
    'https://example.com\\@evil.com/',
    'https://evil.com\\.example.com/',
    'https://ex%61mple.com/',
    'https://example.com%2F@evil.com/',
    ' https://example.com/',
    'https://example.com/ ',
    'https://example.com/a b',
    'https://example.com/\t',
    'https://example.com。evil.com/',
    'https://localhost/',
    `https://example.com/${'a'.repeat(WEBHOOK_URL_CHARS_MAX)}`,
    'javascript:alert(1)//example.com',
  ])('refuses %j on example.com', (input) => {
    const result = validateWebhookUrl(input, 'example.com');
    expect(result.ok, JSON.stringify(result)).toBe(false);
  });

  it('refuses when the verified domain itself is not valid', () => {
    expect(validateWebhookUrl('https://localhost/', 'localhost').ok).toBe(false);
    expect(validateWebhookUrl('https://127.0.0.1/', '127.0.0.1').ok).toBe(false);
  });
});

const hostileWebhookUrl = fc
  .record({
    scheme: fc.constantFrom('https://', 'HTTPS://', 'http://', 'https:/', 'https:\\\\', '//', 'https:///', ''),
    userinfo: fc.option(fc.constantFrom('user@', 'user:pw@', 'example.com@', ':@', '@', 'a%40b@')),
    host: fc.oneof(
      fc.constantFrom('example.com', 'hooks.example.com', 'EXAMPLE.COM', 'example.com.', 'evil-example.com', 'example.com.evil.com'),
      fc.constantFrom('example.com。evil.com', 'evil.com。example.com', 'ex%61mple.com', 'example%2ecom', 'evil.com\\.example.com'),
      fc.constantFrom('localhost', 'foo.localhost', 'x.internal', 'example.com\u0000', 'exa\u00admple.com', 'ｅｘａｍｐｌｅ.com'),
      ipLiterals,
      fc.domain(),
      fc.domain().map((domain) => `${domain}.example.com`),
    ),
    port: fc.option(fc.constantFrom(':443', ':80', ':8443', ':0', ':', ':0443', ':65536', ':-1', ':443:443')),
    path: fc.option(fc.oneof(fc.webPath(), fc.constantFrom('/@evil.com', '\\evil', '/..%2f..', '/%00', '/a b'))),
    query: fc.option(fc.oneof(fc.constant('?'), fc.webQueryParameters().map((q) => `?${q}`))),
    fragment: fc.option(fc.oneof(fc.constant('#'), fc.webFragments().map((f) => `#${f}`))),
  })
  .map(({ scheme, userinfo, host, port, path, query, fragment }) =>
    [scheme, userinfo ?? '', host, port ?? '', path ?? '', query ?? '', fragment ?? ''].join(''));

describe('validateWebhookUrl properties', () => {
  function acceptedObeyRules(input: string, domain: string): boolean {
    const result = validateWebhookUrl(input, domain);
    if (!result.ok) return true;
    expect(webhookViolation(result.url, domain), `${input} -> ${result.url}`).toBeNull();
    expect(validateWebhookUrl(result.url, domain)).toEqual(result);
    return true;
  }

  it('never throws on hostile input, and everything it accepts obeys the rules', () => {
    fc.assert(fc.property(hostileWebhookUrl, (input) => acceptedObeyRules(input, 'example.com')), { numRuns: 3000 });
  });

  it('never throws on arbitrary strings and URLs', () => {
    const authoritySettings = { withIPv4: true, withIPv6: true, withIPv4Extended: true, withPort: true, withUserInfo: true };
    const anything = fc.oneof(
      fc.string(),
      fc.string({ unit: 'binary' }),
      fc.webUrl({ withQueryParameters: true, withFragments: true }),
      fc.webUrl({ validSchemes: ['https'], authoritySettings }),
    );
    fc.assert(fc.property(anything, fc.oneof(fc.constant('example.com'), fc.domain(), fc.string()), acceptedObeyRules), { numRuns: 2000 });
  });

  it('checks URLs on their own domain the same way (fc.webUrl with its own host as the verified domain)', () => {
    const urls = fc.oneof(
      fc.webUrl({ validSchemes: ['https'] }),
      fc.webUrl({ validSchemes: ['https'], withQueryParameters: true, withFragments: true }),
    );
    fc.assert(fc.property(urls, (url) => {
      return acceptedObeyRules(url, new URL(url).hostname);
    }), { numRuns: 1000 });
  });

  it('accepts every plain https URL on the domain or a subdomain', () => {
    const special = (domain: string) => SPECIAL_TLDS.includes(domain.split('.').at(-1)!.toLowerCase());
    fc.assert(fc.property(fc.domain(), fc.option(fc.domain().map((d) => d.split('.')[0]!)), fc.webPath(), (domain, sub, path) => {
      const host = sub ? `${sub}.${domain}` : domain;
      fc.pre(!special(domain) && host.length <= 253 && path.length < 1000);
      const result = validateWebhookUrl(`https://${host}${path}`, domain);
      expect(result.ok, JSON.stringify(result)).toBe(true);
    }), { numRuns: 500 });
  });
});
