// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import dnsPacket from 'dns-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasTxtValue, ResolverError, resolveTxt, type DohOptions } from '../../src/merchants/doh.ts';
import { freePort, hasUnbound, noteIfUnboundMissing, startDohServer, type DohServer } from '../support/doh-server.ts';
import { makeTestCertificate, type TestCertificate } from '../support/test-certificate.ts';

async function resolverError(promise: Promise<unknown>): Promise<ResolverError> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(ResolverError);
  return error as ResolverError;
}

noteIfUnboundMissing();

describe.skipIf(!hasUnbound)('DoH TXT lookup against a real resolver (unbound)', () => {
  let doh: DohServer;
  let options: DohOptions;
  const token = 'acg-verify=tok_3f9a1c';

  beforeAll(async () => {
    doh = await startDohServer({ zone: 'acg.test' });
    options = { resolverUrl: doh.url, timeoutMs: 3_000, ca: doh.ca };
  });
  afterAll(() => doh?.stop());

  it('reports an absent record as not found, then finds it once published', async () => {
    await doh.setRecords([]);
    expect(await resolveTxt('_acceptor-verify.shop.acg.test', options)).toEqual([]);
    expect(await hasTxtValue('_acceptor-verify.shop.acg.test', token, options)).toBe(false);
    await doh.setRecords([`_acceptor-verify.shop IN TXT "${token}"`, '_acceptor-verify.shop IN TXT "v=spf1 -all"']);
    expect((await resolveTxt('_acceptor-verify.shop.acg.test', options)).sort()).toEqual([token, 'v=spf1 -all'].sort());
    expect(await hasTxtValue('_acceptor-verify.shop.acg.test', token, options)).toBe(true);
  });

  it('reports a name with other records but no TXT (NOERROR, no data) as not found', async () => {
    await doh.setRecords(['nodata IN A 192.0.2.1']);
    expect(await resolveTxt('nodata.acg.test', options)).toEqual([]);
  });

  it('joins the strings of one TXT record with no separator', async () => {
    await doh.setRecords(['_acceptor-verify.split IN TXT "acg-verify=tok_" "split_in_two"']);
    expect(await resolveTxt('_acceptor-verify.split.acg.test', options)).toEqual(['acg-verify=tok_split_in_two']);
    expect(await hasTxtValue('_acceptor-verify.split.acg.test', 'acg-verify=tok_split_in_two', options)).toBe(true);
    expect(await hasTxtValue('_acceptor-verify.split.acg.test', 'acg-verify=tok_', options)).toBe(false);
  });

  it('matches exactly, trimming nothing', async () => {
    await doh.setRecords([`_acceptor-verify.shop IN TXT " ${token}"`]);
    expect(await hasTxtValue('_acceptor-verify.shop.acg.test', token, options)).toBe(false);
  });

  it('finds the record under an upper-case name', async () => {
    await doh.setRecords([`_acceptor-verify.shop IN TXT "${token}"`]);
    expect(await hasTxtValue('_ACCEPTOR-VERIFY.SHOP.ACG.TEST', token, options)).toBe(true);
    expect(await hasTxtValue('_acceptor-verify.shop.acg.test.', token, options)).toBe(true);
  });

  it('follows a CNAME in the answer to the name that holds the TXT', async () => {
    await doh.setRecords([
      '_acceptor-verify.alias IN CNAME _acceptor-verify.shop',
      `_acceptor-verify.shop IN TXT "${token}"`,
    ]);
    expect(await hasTxtValue('_acceptor-verify.alias.acg.test', token, options)).toBe(true);
  });

  it('throws ResolverError when the resolver refuses (REFUSED)', async () => {
    const error = await resolverError(resolveTxt('outside-the-zone.example.com', options));
    expect(error.reason).toBe('rcode');
  });

  it('throws ResolverError when nothing listens on the resolver port', async () => {
    const port = await freePort();
    const error = await resolverError(resolveTxt('shop.acg.test', { ...options, resolverUrl: `https://127.0.0.1:${port}/dns-query` }));
    expect(error.reason).toBe('unreachable');
  });

  it('throws ResolverError when the resolver has stopped', async () => {
    const other = await startDohServer({ zone: 'acg.test', records: [`shop IN TXT "${token}"`] });
    const otherOptions = { ...options, resolverUrl: other.url, ca: other.ca };
    expect(await hasTxtValue('shop.acg.test', token, otherOptions)).toBe(true);
    await other.stop();
    await resolverError(hasTxtValue('shop.acg.test', token, otherOptions));
  });
});

// Misbehaving resolvers need no unbound: a small HTTPS server plays each one.
describe('DoH TXT lookup against a misbehaving resolver', () => {
  let cert: TestCertificate;
  let server: https.Server;
  let options: DohOptions;
  let requests: string[] = [];

  type Answers = NonNullable<dnsPacket.Packet['answers']>;
  function answerFor(name: string, answers: Answers = [{ type: 'TXT', class: 'IN', name, ttl: 60, data: ['x'] }], flags = 0, rcode?: string): Buffer {
    const rcodeBits = rcode === 'SERVFAIL' ? 2 : 0;
    return dnsPacket.encode({
      type: 'response',
      id: 0,
      flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | flags | rcodeBits,
      questions: [{ type: 'TXT', class: 'IN', name }],
      answers,
    });
  }
  const cname = (name: string, data: string) => ({ type: 'CNAME' as const, class: 'IN' as const, name, ttl: 60, data });
  const txt = (name: string, data: string) => ({ type: 'TXT' as const, class: 'IN' as const, name, ttl: 60, data: [data] });

  beforeAll(async () => {
    cert = makeTestCertificate({ ip: ['127.0.0.1'] });
    server = https.createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      requests.push(req.url ?? '');
      const dnsMessage = { 'content-type': 'application/dns-message' };
      switch (req.url) {
        case '/hang':
          return; // never answers
        case '/redirect':
          return void res.writeHead(301, { location: '/good' }).end();
        case '/good':
          return void res.writeHead(200, dnsMessage).end(answerFor('x.acg.test'));
        case '/html':
          return void res.writeHead(200, { 'content-type': 'text/html' }).end('<html></html>');
        case '/garbage':
          return void res.writeHead(200, dnsMessage).end(Buffer.from([1, 2, 3]));
        case '/other-question':
          return void res.writeHead(200, dnsMessage).end(answerFor('elsewhere.acg.test'));
        case '/unrelated-txt':
          return void res.writeHead(200, dnsMessage).end(answerFor('x.acg.test', [txt('other.acg.test', 'x')]));
        case '/unrelated-cname-target':
          return void res.writeHead(200, dnsMessage).end(answerFor('x.acg.test', [cname('x.acg.test', 'y.acg.test'), txt('z.acg.test', 'x')]));
        case '/cname-loop':
          return void res.writeHead(200, dnsMessage).end(answerFor('x.acg.test', [cname('x.acg.test', 'y.acg.test'), cname('y.acg.test', 'x.acg.test')]));
        case '/cname-chain':
          return void res.writeHead(200, dnsMessage).end(answerFor('x.acg.test', [cname('X.acg.test', 'y.acg.test'), cname('y.acg.test', 'z.acg.test'), txt('Z.ACG.TEST', 'x')]));
        case '/servfail':
          return void res.writeHead(200, dnsMessage).end(answerFor('x.acg.test', [], 0, 'SERVFAIL'));
        case '/truncated':
          return void res.writeHead(200, dnsMessage).end(answerFor('x.acg.test', [], dnsPacket.TRUNCATED_RESPONSE));
        // One TXT record of two strings, the token then "zzzz" (its value is not the token), cut short by 1 and 5 bytes:
        // the decoder read the strings short ("zzz", ""), and the cut by 5 matched the token (found from outside).
        case '/cut-0':
        case '/cut-1':
        case '/cut-5': {
          const whole = answerFor('x.acg.test', [{ type: 'TXT', class: 'IN', name: 'x.acg.test', ttl: 60, data: ['x', 'zzzz'] }]);
          return void res.writeHead(200, dnsMessage).end(whole.subarray(0, whole.length - Number(req.url.slice('/cut-'.length))));
        }
        case '/padded':
          return void res.writeHead(200, dnsMessage).end(Buffer.concat([answerFor('x.acg.test'), Buffer.from([0, 0, 0])]));
        case '/huge':
          return void res.writeHead(200, dnsMessage).end(Buffer.alloc(128 * 1024));
        default:
          return void res.writeHead(500).end();
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    options = { resolverUrl: `https://127.0.0.1:${port}/good`, timeoutMs: 2_000, ca: cert.certPem };
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    cert.remove();
  });

  const at = (path: string, extra: Partial<DohOptions> = {}): DohOptions => ({
    ...options,
    resolverUrl: options.resolverUrl.replace('/good', path),
    ...extra,
  });

  it('reads a well-formed answer (the fake resolver itself works)', async () => {
    expect(await resolveTxt('x.acg.test', options)).toEqual(['x']);
  });

  it('throws ResolverError by timeout when the resolver never answers', async () => {
    const startedMs = Date.now();
    const error = await resolverError(resolveTxt('x.acg.test', at('/hang', { timeoutMs: 300 })));
    expect(error.reason).toBe('timeout');
    expect(Date.now() - startedMs).toBeLessThan(2_000);
  });

  it('does not follow a redirect', async () => {
    requests = [];
    const error = await resolverError(resolveTxt('x.acg.test', at('/redirect')));
    expect(error.reason).toBe('http_status');
    // The redirect target is never asked (a request of the hanging test may still arrive late under load).
    expect(requests).toContain('/redirect');
    expect(requests).not.toContain('/good');
  });

  it('throws ResolverError on an HTTP error status', async () => {
    expect((await resolverError(resolveTxt('x.acg.test', at('/missing')))).reason).toBe('http_status');
  });

  it('throws ResolverError on a wrong content type, a garbled message or an answer to another question', async () => {
    expect((await resolverError(resolveTxt('x.acg.test', at('/html')))).reason).toBe('malformed');
    expect((await resolverError(resolveTxt('x.acg.test', at('/garbage')))).reason).toBe('malformed');
    expect((await resolverError(resolveTxt('x.acg.test', at('/other-question')))).reason).toBe('malformed');
  });

  it('counts only TXT records at the asked name or along its CNAME chain inside the answer', async () => {
    expect(await resolveTxt('x.acg.test', at('/unrelated-txt'))).toEqual([]);
    expect(await resolveTxt('x.acg.test', at('/unrelated-cname-target'))).toEqual([]);
    expect(await resolveTxt('x.acg.test', at('/cname-loop'))).toEqual([]);
    expect(await resolveTxt('x.acg.test', at('/cname-chain'))).toEqual(['x']);
  });

  it('throws ResolverError on a message shorter or longer than its own lengths say, never reading a cut value as the record', async () => {
    // Whole, the record is "xzzzz", not "x".
    expect(await resolveTxt('x.acg.test', at('/cut-0'))).toEqual(['xzzzz']);
    for (const path of ['/cut-1', '/cut-5', '/padded']) {
      const error = await resolverError(hasTxtValue('x.acg.test', 'x', at(path)));
      expect([path, error.reason]).toEqual([path, 'malformed']);
      expect(error.message).toMatch(path === '/padded' ? /3 bytes follow its end \(padded\)/ : /its own lengths run past its end \(cut short\)/);
    }
  });

  it('throws ResolverError on SERVFAIL and on a truncated answer', async () => {
    expect((await resolverError(resolveTxt('x.acg.test', at('/servfail')))).reason).toBe('rcode');
    expect((await resolverError(resolveTxt('x.acg.test', at('/truncated')))).reason).toBe('malformed');
  });

  it('throws ResolverError when the answer is over the size limit', async () => {
    expect((await resolverError(resolveTxt('x.acg.test', at('/huge')))).reason).toBe('too_large');
  });

  it('refuses a resolver without TLS', async () => {
    await resolverError(resolveTxt('x.acg.test', { ...options, resolverUrl: 'http://127.0.0.1:1/dns-query' }));
  });

  it('refuses a name that is not a DNS name, as a programming error', async () => {
    await expect(resolveTxt(`${'a'.repeat(64)}.acg.test`, options)).rejects.toThrow(RangeError);
    await expect(resolveTxt('a..b', options)).rejects.toThrow(RangeError);
  });
});
