// DNS rebinding on a dev gateway: a page whose domain now points at 127.0.0.1 calls the gateway with its own name in
// Host, and the dev sign-in would give it an owner's token (found from outside). A browser's request (it carries Origin
// or Sec-Fetch-Site) to a dev gateway is answered only under a Host naming an IP address, localhost (or a name under
// it) or ACG_BASE_URL's host; a client that is no browser, under any; a live gateway, which has no dev sign-in, answers any.
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { devHostCheck } from '../../../src/platform/http/dev-hosts.ts';
import { startTestGateway, type TestGateway } from '../../support/gateway.ts';

/** One request with the Host header given (fetch does not let a caller set it). */
function send(url: string, method: string, path: string, host: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const target = new URL(path, url);
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: target.hostname, port: target.port, path: target.pathname, method, headers: { host, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            // a page
          }
          resolve({ status: response.statusCode!, body: parsed });
        });
      },
    );
    request.on('error', reject);
    request.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

describe('a dev gateway and the Host header', () => {
  let gw: TestGateway;
  let port: string;
  beforeAll(async () => {
    gw = await startTestGateway({ env: { ACG_BASE_URL: 'http://acg.test:1' } });
    port = new URL(gw.url).port;
  });
  afterAll(() => gw.close());

  const browser = (page: string) => ({ origin: page, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' });

  it("refuses a browser's request under a name that could be rebound: the dev sign-in, the API and the pages, before any route runs", async () => {
    const rebound = `rebind.evil.example:${port}`;
    const signIn = await send(gw.url, 'POST', '/dev/issuers/human/login', rebound, { email: 'ada@example.com' }, { origin: `http://${rebound}` });
    expect(signIn.status).toBe(403);
    expect(signIn.body).toMatchObject({ status: 403, code: 'forbidden' });
    expect(signIn.body.detail).toContain('DNS rebinding');
    expect(signIn.body.token).toBeUndefined();
    // Even with a token the page got some other way, the API is closed to it under that name.
    const token = (await send(gw.url, 'POST', '/dev/issuers/human/login', `127.0.0.1:${port}`, { email: 'ada@example.com' })).body.token as string;
    expect(typeof token).toBe('string');
    expect((await send(gw.url, 'GET', '/v1/owner/agents', rebound, undefined, { authorization: `Bearer ${token}`, 'sec-fetch-site': 'same-origin' })).status).toBe(403);
    expect((await send(gw.url, 'GET', '/console', rebound, undefined, { 'sec-fetch-site': 'none' })).status).toBe(403);
    expect((await send(gw.url, 'GET', '/healthz', 'localhost.evil.example', undefined, browser('http://localhost.evil.example'))).status).toBe(403);
    expect((await send(gw.url, 'GET', '/healthz', `acg.test.evil.example:${port}`, undefined, browser('http://acg.test.evil.example'))).status).toBe(403);
  });

  it("answers a browser under an IP address, localhost, a name under localhost and the base URL's host", async () => {
    for (const host of [`127.0.0.1:${port}`, `[::1]:${port}`, '10.0.0.7', `localhost:${port}`, 'LOCALHOST.', `app.localhost:${port}`, `acg.test:${port}`, 'ACG.TEST']) {
      expect((await send(gw.url, 'GET', '/healthz', host, undefined, browser(`http://${host}`))).status, host).toBe(200);
    }
    expect((await send(gw.url, 'POST', '/dev/issuers/human/login', `localhost:${port}`, { email: 'ada@example.com' }, browser(`http://localhost:${port}`))).status).toBe(200);
  });

  it('answers a client that is no browser under any name (a container calling the gateway by its service name)', async () => {
    const signIn = await send(gw.url, 'POST', '/dev/issuers/human/login', `gateway:${port}`, { email: 'ada@example.com' });
    expect(signIn.status).toBe(200);
    expect((await send(gw.url, 'GET', '/v1/owner/agents', 'gateway', undefined, { authorization: `Bearer ${signIn.body.token}` })).status).toBe(200);
  });
});

describe('a live gateway and the Host header', () => {
  it('answers any name: it has no dev sign-in, and its API reads bearer tokens only', async () => {
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1' } });
    try {
      const browser = { origin: 'https://gateway.example.com', 'sec-fetch-site': 'same-origin' };
      expect((await send(live.url, 'GET', '/healthz', 'gateway.example.com', undefined, browser)).status).toBe(200);
      expect((await send(live.url, 'POST', '/dev/issuers/human/login', 'gateway.example.com', { email: 'ada@example.com' }, browser)).status).toBe(404);
    } finally {
      await live.close();
    }
  });
});

describe('devHostCheck', () => {
  const check = devHostCheck('http://[::1]:3000');
  it("takes the base URL's host in brackets, and refuses a browser's request under a Host it cannot read", () => {
    expect(() => check({ host: '[::1]:3000', origin: 'http://[::1]:3000' })).not.toThrow();
    expect(() => check({ origin: 'http://evil.example' })).not.toThrow();
    expect(() => check({ host: 'evil.example' })).not.toThrow();
    for (const host of ['', 'evil.example', 'evil.example:3000', '[::1', 'a:b:c', '127.0.0.1.nip.io']) {
      expect(() => check({ host, 'sec-fetch-site': 'same-origin' }), host).toThrow(/DNS rebinding/);
      expect(() => check({ host, origin: 'null' }), host).toThrow(/DNS rebinding/);
    }
  });
});
