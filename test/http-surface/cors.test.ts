// CORS on exactly the routes a browser client of another origin needs and that take no cookies: discovery and
// JWKS, registration, the token endpoint and /mcp (docs/decisions.md "CORS for browser clients, without
// credentials"). Everything else, the API, the console and the cookie-bearing OAuth pages, answers no CORS header.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

const ORIGIN = 'http://localhost:6274';

async function preflight(path: string, method: string, requestHeaders?: string) {
  const headers: Record<string, string> = { origin: ORIGIN, 'access-control-request-method': method };
  if (requestHeaders) headers['access-control-request-headers'] = requestHeaders;
  const res = await fetch(`${gw.url}${path}`, { method: 'OPTIONS', headers });
  return { status: res.status, headers: res.headers, body: await res.text() };
}

const CORS_ROUTES: Array<[string, string]> = [
  ['/.well-known/oauth-authorization-server', 'GET, HEAD'],
  ['/.well-known/openid-configuration', 'GET, HEAD'],
  ['/.well-known/oauth-protected-resource', 'GET, HEAD'],
  ['/.well-known/oauth-protected-resource/mcp', 'GET, HEAD'],
  ['/mcp/.well-known/oauth-protected-resource', 'GET, HEAD'],
  ['/.well-known/jwks.json', 'GET, HEAD'],
  ['/oauth/register', 'POST'],
  ['/oauth/token', 'POST'],
  ['/mcp', 'POST'],
];

describe('a preflight on a route browser clients call', () => {
  it('answers 204 with any origin, the route’s methods, the headers a client sends and a max age, never with credentials', async () => {
    for (const [path, methods] of CORS_ROUTES) {
      const res = await preflight(path, methods.split(', ')[0]!, 'authorization, content-type, mcp-protocol-version');
      expect(res.status, path).toBe(204);
      expect(res.body, path).toBe('');
      expect(res.headers.get('access-control-allow-origin'), path).toBe('*');
      expect(res.headers.get('access-control-allow-credentials'), path).toBeNull();
      expect(res.headers.get('access-control-allow-methods'), path).toBe(methods);
      const allowed = (res.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/,\s*/);
      for (const header of ['authorization', 'content-type', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id']) expect(allowed, path).toContain(header);
      expect(Number(res.headers.get('access-control-max-age')), path).toBeGreaterThan(0);
    }
  });

  it('is answered before authentication and rate limits of the route: /mcp without a credential still gets 204', async () => {
    expect((await preflight('/mcp', 'POST', 'authorization, content-type')).status).toBe(204);
  });
});

describe('the answers of those routes', () => {
  it('carry Access-Control-Allow-Origin: * and expose the headers a client reads, on success and on refusal', async () => {
    const discovery = await fetch(`${gw.url}/.well-known/oauth-authorization-server`, { headers: { origin: ORIGIN } });
    expect(discovery.status).toBe(200);
    expect(discovery.headers.get('access-control-allow-origin')).toBe('*');

    const jwks = await fetch(`${gw.url}/.well-known/jwks.json`, { headers: { origin: ORIGIN } });
    expect(jwks.headers.get('access-control-allow-origin')).toBe('*');

    // A refusal too: the client must read the OAuth error (and a 401's challenge) to act on it.
    const token = await fetch(`${gw.url}/oauth/token`, { method: 'POST', headers: { origin: ORIGIN, 'content-type': 'application/x-www-form-urlencoded' }, body: 'grant_type=nothing' });
    expect(token.status).toBe(400);
    expect(token.headers.get('access-control-allow-origin')).toBe('*');

    const mcp = await fetch(`${gw.url}/mcp`, { method: 'POST', headers: { origin: ORIGIN, 'content-type': 'application/json' }, body: '{}' });
    expect(mcp.status).toBe(401);
    expect(mcp.headers.get('access-control-allow-origin')).toBe('*');
    const exposed = (mcp.headers.get('access-control-expose-headers') ?? '').toLowerCase().split(/,\s*/);
    for (const header of ['www-authenticate', 'mcp-session-id', 'mcp-protocol-version', 'retry-after']) expect(exposed).toContain(header);
    expect(mcp.headers.get('access-control-allow-credentials')).toBeNull();
  });

  it('a method the route does not take is still 405 (with CORS, so the browser can read why)', async () => {
    const res = await fetch(`${gw.url}/oauth/token`, { method: 'GET', headers: { origin: ORIGIN } });
    expect(res.status).toBe(405);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
  });
});

describe('every other route', () => {
  const PLAIN = ['/v1/me', '/v1/offers', '/console', '/oauth/authorize', '/oauth/consent', '/oauth/select', '/healthz', '/openapi.json', '/docs/errors'];

  it('answers a preflight as any OPTIONS request (405), with no CORS header', async () => {
    for (const path of PLAIN) {
      const res = await preflight(path, path === '/oauth/select' ? 'POST' : 'GET', 'authorization');
      expect(res.status, path).toBe(405);
      expect(res.headers.get('access-control-allow-origin'), path).toBeNull();
      expect(res.headers.get('access-control-allow-methods'), path).toBeNull();
    }
  });

  it('answers a request with an Origin without Access-Control-Allow-Origin', async () => {
    for (const path of PLAIN) {
      const res = await fetch(`${gw.url}${path}`, { headers: { origin: ORIGIN }, redirect: 'manual' });
      expect(res.headers.get('access-control-allow-origin'), path).toBeNull();
    }
  });

  it('an OPTIONS request that is not a preflight is the 405 it was, on a CORS route too', async () => {
    const res = await fetch(`${gw.url}/oauth/token`, { method: 'OPTIONS' });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
  });
});
