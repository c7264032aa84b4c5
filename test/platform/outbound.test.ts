// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPublicAddress, OutboundError, safeRequest, trustingAlso, type SafeRequestOptions } from '../../src/platform/outbound.ts';
import { makeTestCertificate, type TestCertificate } from '../support/test-certificate.ts';

// One local server whose behaviour depends on the path, counting every TCP connection it accepts.
let connections = 0;
const seen: Array<{ path: string; host: string | undefined }> = [];
function handler(req: http.IncomingMessage, res: http.ServerResponse): void {
  seen.push({ path: req.url ?? '', host: req.headers.host });
  if (req.url === '/redirect') return void res.writeHead(302, { location: '/elsewhere' }).end();
  if (req.url === '/hang') return; // never answers
  if (req.url === '/big') return void res.writeHead(200).end(Buffer.alloc(100 * 1024, 'a'));
  if (req.url === '/trickle') {
    // The status and headers at once, then a byte every 100 ms, never ending.
    res.writeHead(200).flushHeaders();
    const timer = setInterval(() => res.write('.'), 100);
    res.on('close', () => clearInterval(timer));
    return;
  }
  if (req.url === '/endless') {
    res.writeHead(200);
    const chunk = Buffer.alloc(16 * 1024, 'b');
    const pump = () => { while (res.write(chunk)); };
    res.on('drain', pump);
    pump();
    return;
  }
  res.writeHead(200, { 'content-type': 'text/plain' }).end('hello');
}

let server: http.Server;
let port: number;
let cert: TestCertificate;
let tlsServer: https.Server;
let tlsPort: number;

beforeAll(async () => {
  server = http.createServer(handler);
  server.on('connection', () => { connections += 1; });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  // Valid only for the name, not for 127.0.0.1: a request reaches it only if SNI and the check use the name.
  cert = makeTestCertificate({ dns: ['hooks.shop.example'] });
  tlsServer = https.createServer({ cert: cert.certPem, key: cert.keyPem }, handler);
  await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
  tlsPort = (tlsServer.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  tlsServer.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await new Promise((resolve) => tlsServer.close(resolve));
  cert.remove();
});

const strict: SafeRequestOptions = { timeoutMs: 2_000, responseBytesMax: 4096, allowPrivateNetworkTargets: false };
const relaxed: SafeRequestOptions = { ...strict, allowPrivateNetworkTargets: true };

async function reason(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(OutboundError);
  return (error as OutboundError).reason;
}

describe('isPublicAddress', () => {
  it('accepts only public unicast addresses', () => {
    for (const address of ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '::ffff:8.8.8.8']) expect(isPublicAddress(address), address).toBe(true);
    const refused = [
      '127.0.0.1', '127.8.9.10', '::1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1',
      '0.0.0.0', '::', '255.255.255.255', '224.0.0.1', '240.0.0.1', '192.0.2.1', '198.18.0.1', 'fd00::1', 'fe80::1',
      'ff02::1', '::ffff:127.0.0.1', '::ffff:10.0.0.1', '64:ff9b::7f00:1', '2002:7f00:1::', '2001:db8::1', 'not-an-ip', '',
      // IPv4-compatible (::/96, deprecated): ::127.0.0.1, ::8.8.8.8 and the like are none of them public.
      '::7f00:1', '::127.0.0.1', '::a00:1', '::808:808',
    ];
    for (const address of refused) expect(isPublicAddress(address), address).toBe(false);
  });

  it('judges an IPv4-mapped IPv6 address as the IPv4 address it carries', () => {
    fc.assert(fc.property(fc.ipV4(), (v4) => isPublicAddress(`::ffff:${v4}`) === isPublicAddress(v4)));
  });

  it('refuses every address in the private and loopback IPv4 blocks', () => {
    const octet = fc.integer({ min: 0, max: 255 });
    const privateV4 = fc.oneof(
      fc.tuple(octet, octet, octet).map(([b, c, d]) => `127.${b}.${c}.${d}`),
      fc.tuple(octet, octet, octet).map(([b, c, d]) => `10.${b}.${c}.${d}`),
      fc.tuple(fc.integer({ min: 16, max: 31 }), octet, octet).map(([b, c, d]) => `172.${b}.${c}.${d}`),
      fc.tuple(octet, octet).map(([c, d]) => `192.168.${c}.${d}`),
      fc.tuple(octet, octet).map(([c, d]) => `169.254.${c}.${d}`),
    );
    fc.assert(fc.property(privateV4, (address) => !isPublicAddress(address) && !isPublicAddress(`::ffff:${address}`)));
  });
});

describe('safeRequest address rule', () => {
  it('refuses loopback, private, link-local and mapped literals without connecting', async () => {
    const before = connections;
    const targets = [
      `http://127.0.0.1:${port}/`, `http://[::1]:${port}/`, 'http://10.0.0.1/', 'http://169.254.169.254/latest/meta-data/',
      `http://[::ffff:127.0.0.1]:${port}/`, `http://0x7f.1:${port}/`, `http://2130706433:${port}/`, 'http://0.0.0.0/', 'http://100.64.0.1/',
    ];
    for (const target of targets) expect(await reason(safeRequest(target, strict)), target).toBe('forbidden_address');
    expect(connections).toBe(before);
  });

  it('refuses a hostname that resolves to loopback', async () => {
    const before = connections;
    expect(await reason(safeRequest(`http://localhost:${port}/`, strict))).toBe('forbidden_address');
    expect(connections).toBe(before);
  });

  it('refuses a hostname when any one of its addresses is private', async () => {
    const lookupHost = async () => ['8.8.8.8', '127.0.0.1'];
    expect(await reason(safeRequest('https://mixed.shop.example/', { ...strict, lookupHost }))).toBe('forbidden_address');
  });

  it('reports a failed resolution as dns_failed', async () => {
    const lookupHost = async () => { throw Object.assign(new Error('nope'), { code: 'ENOTFOUND' }); };
    expect(await reason(safeRequest('https://gone.shop.example/', { ...strict, lookupHost }))).toBe('dns_failed');
    expect(await reason(safeRequest('https://empty.shop.example/', { ...strict, lookupHost: async () => [] }))).toBe('dns_failed');
  });

  it('refuses non-http schemes and credentials', async () => {
    expect(await reason(safeRequest('file:///etc/passwd', relaxed))).toBe('invalid_url');
    expect(await reason(safeRequest('ftp://example.com/', relaxed))).toBe('invalid_url');
    expect(await reason(safeRequest(`http://user:pw@127.0.0.1:${port}/`, relaxed))).toBe('invalid_url');
    expect(await reason(safeRequest('not a url', relaxed))).toBe('invalid_url');
  });
});

describe('safeRequest with allowPrivateNetworkTargets', () => {
  it('reaches a local server', async () => {
    const response = await safeRequest(`http://127.0.0.1:${port}/`, relaxed);
    expect(response.status).toBe(200);
    expect(response.body.toString()).toBe('hello');
    expect(response.headers['content-type']).toBe('text/plain');
  });

  it('connects to the checked address and keeps the Host header', async () => {
    // The name does not exist in any DNS: the request works only if the socket uses our pinned address.
    const lookupHost = async () => ['127.0.0.1'];
    const response = await safeRequest(`http://pinned.shop.example:${port}/pinned`, { ...relaxed, lookupHost });
    expect(response.status).toBe(200);
    expect(seen.at(-1)).toEqual({ path: '/pinned', host: `pinned.shop.example:${port}` });
  });

  it('verifies TLS for the hostname (SNI) while connecting to the pinned address', async () => {
    const lookupHost = async () => ['127.0.0.1'];
    const response = await safeRequest(`https://hooks.shop.example:${tlsPort}/tls`, { ...relaxed, lookupHost, ca: cert.certPem });
    expect(response.status).toBe(200);
    // The same server by address fails: its certificate names only the host.
    expect(await reason(safeRequest(`https://127.0.0.1:${tlsPort}/tls`, { ...relaxed, ca: cert.certPem }))).toBe('tls_failed');
    // And without the extra CA the self-signed certificate is not trusted: TLS failed, not the connection (found from outside).
    expect(await reason(safeRequest(`https://hooks.shop.example:${tlsPort}/tls`, { ...relaxed, lookupHost }))).toBe('tls_failed');
  });

  it('trusts an extra CA through one TLS context made once, not one per connection (each parsed every root again: 34 ms)', async () => {
    const lookupHost = async () => ['127.0.0.1'];
    const context = trustingAlso(cert.certPem);
    expect(trustingAlso(cert.certPem)).toBe(context);
    for (let i = 0; i < 3; i++) expect((await safeRequest(`https://hooks.shop.example:${tlsPort}/tls`, { ...relaxed, lookupHost, ca: cert.certPem })).status).toBe(200);
    expect(trustingAlso(cert.certPem)).toBe(context);
    // Another CA has its own context, which does not trust this server.
    const other = makeTestCertificate({ dns: ['other.example'] });
    try {
      expect(trustingAlso(other.certPem)).not.toBe(context);
      expect(await reason(safeRequest(`https://hooks.shop.example:${tlsPort}/tls`, { ...relaxed, lookupHost, ca: other.certPem }))).toBe('tls_failed');
    } finally {
      other.remove();
    }
  });

  it('does not follow a redirect', async () => {
    const response = await safeRequest(`http://127.0.0.1:${port}/redirect`, relaxed);
    expect(response.status).toBe(302);
    expect(response.headers.location).toBe('/elsewhere');
    expect(seen.some((entry) => entry.path === '/elsewhere')).toBe(false);
  });

  it('times out on a server that never answers', async () => {
    const startedMs = Date.now();
    expect(await reason(safeRequest(`http://127.0.0.1:${port}/hang`, { ...relaxed, timeoutMs: 300 }))).toBe('timeout');
    expect(Date.now() - startedMs).toBeLessThan(2_000);
  });

  it('times out on a server that accepts TCP but never speaks TLS', async () => {
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const silentPort = (silent.address() as AddressInfo).port;
    try {
      expect(await reason(safeRequest(`https://127.0.0.1:${silentPort}/`, { ...relaxed, timeoutMs: 300 }))).toBe('timeout');
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('refuses a body over the cap', async () => {
    expect(await reason(safeRequest(`http://127.0.0.1:${port}/big`, { ...relaxed, responseBytesMax: 1024 }))).toBe('too_large');
  });

  it('stops reading an endless body at the cap instead of waiting for the timeout', async () => {
    const startedMs = Date.now();
    expect(await reason(safeRequest(`http://127.0.0.1:${port}/endless`, { ...relaxed, timeoutMs: 5_000, responseBytesMax: 64 * 1024 }))).toBe('too_large');
    expect(Date.now() - startedMs).toBeLessThan(2_000);
  });

  it('answers the status of a body that never ends at once when only the status is wanted; reading the body still times out', async () => {
    const startedMs = Date.now();
    const response = await safeRequest(`http://127.0.0.1:${port}/trickle`, { ...relaxed, timeoutMs: 1_000, responseBody: 'status_only' });
    expect([response.status, response.body.length]).toEqual([200, 0]);
    expect(Date.now() - startedMs).toBeLessThan(500);
    expect(await reason(safeRequest(`http://127.0.0.1:${port}/trickle`, { ...relaxed, timeoutMs: 300 }))).toBe('timeout');
  });

  it('times out before the status even when only the status is wanted', async () => {
    expect(await reason(safeRequest(`http://127.0.0.1:${port}/hang`, { ...relaxed, timeoutMs: 300, responseBody: 'status_only' }))).toBe('timeout');
  });

  it('reports a refused connection as connect_failed', async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedPort = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    expect(await reason(safeRequest(`http://127.0.0.1:${closedPort}/`, relaxed))).toBe('connect_failed');
  });

  it('reports an answer that is not HTTP as invalid_response, naming the parser code (found from outside: "the request failed")', async () => {
    const garbled = net.createServer((socket) => socket.once('data', () => socket.end('NOT HTTP AT ALL\r\n\r\n')));
    await new Promise<void>((resolve) => garbled.listen(0, '127.0.0.1', resolve));
    try {
      const failure = await safeRequest(`http://127.0.0.1:${(garbled.address() as AddressInfo).port}/`, relaxed).catch((error: unknown) => error as OutboundError);
      expect((failure as OutboundError).reason).toBe('invalid_response');
      expect((failure as OutboundError).message).toMatch(/^the answer is not valid HTTP \((HPE_[A-Z_]+|HTTPParserError)\)$/);
    } finally {
      await new Promise((resolve) => garbled.close(resolve));
    }
  });

  it('reports a receiver that read the request and closed the connection without answering as connection_closed, naming the code (found from outside: "could not connect")', async () => {
    const rude = net.createServer((socket) => socket.once('data', () => socket.destroy()));
    await new Promise<void>((resolve) => rude.listen(0, '127.0.0.1', resolve));
    try {
      const failure = await safeRequest(`http://127.0.0.1:${(rude.address() as AddressInfo).port}/`, relaxed).catch((error: unknown) => error as OutboundError);
      expect((failure as OutboundError).reason).toBe('connection_closed');
      expect((failure as OutboundError).message).toMatch(/^the receiver closed the connection before answering \((ECONNRESET|UND_ERR_SOCKET|EPIPE)\)$/);
    } finally {
      await new Promise((resolve) => rude.close(resolve));
    }
  });
});
