import { createLocalJWKSet, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import { authorizeQuery, authorizeRaw, newClient, pkcePair, startConsent, type AuthorizeParams } from './helpers.ts';

let world: World;
let url: string;
let clientId: string;
const redirect = 'http://127.0.0.1:9/callback';
const tenantRedirect = 'https://app.example/cb?tenant=1';
/** A query a form encoder would write otherwise (`x=`, `a+b`, `~`): the redirect must keep it as registered. */
const queryAsWritten = 'https://app.example/cb?x&y=a%20b&z=%7E&w=a+b&v=%2F';
const { challenge } = pkcePair();

beforeAll(async () => {
  world = await startWorld();
  url = world.url;
  clientId = await newClient(url, [redirect, tenantRedirect, queryAsWritten]);
});
afterAll(() => world.close());

function valid(overrides: AuthorizeParams = {}): AuthorizeParams {
  return { response_type: 'code', client_id: clientId, redirect_uri: redirect, state: 'xyz', code_challenge: challenge, code_challenge_method: 'S256', resource: url, ...overrides };
}

function expectPageHeaders(headers: Headers) {
  expect(headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
  expect(headers.get('x-frame-options')).toBe('DENY');
  expect(headers.get('referrer-policy')).toBe('no-referrer');
}

describe('GET /oauth/authorize shows, and never redirects, errors it cannot trust to the client', () => {
  const cases: Array<[string, () => string, string]> = [
    ['a missing client_id', () => authorizeQuery(valid({ client_id: undefined })), 'invalid_request'],
    ['an unknown client_id', () => authorizeQuery(valid({ client_id: 'cli_nope' })), 'invalid_client'],
    ['a repeated client_id', () => `${authorizeQuery(valid())}&client_id=${clientId}`, 'invalid_request'],
    ['a missing redirect_uri', () => authorizeQuery(valid({ redirect_uri: undefined })), 'invalid_request'],
    ['an unregistered redirect_uri', () => authorizeQuery(valid({ redirect_uri: 'https://evil.example/cb' })), 'invalid_redirect_uri'],
    ['a redirect_uri with another path', () => authorizeQuery(valid({ redirect_uri: 'http://127.0.0.1:9/other' })), 'invalid_redirect_uri'],
    ['a redirect_uri with an extra query', () => authorizeQuery(valid({ redirect_uri: 'https://app.example/cb?tenant=2' })), 'invalid_redirect_uri'],
    ['a redirect_uri with localhost for 127.0.0.1', () => authorizeQuery(valid({ redirect_uri: 'http://localhost:9/callback' })), 'invalid_redirect_uri'],
    ['a bad redirect_uri with every other parameter wrong too', () => authorizeQuery({ client_id: clientId, redirect_uri: 'https://evil.example/' }), 'invalid_redirect_uri'],
  ];
  for (const [name, query, error] of cases) {
    it(`${name}: 400 page with ${error}`, async () => {
      const res = await authorizeRaw(url, query());
      expect(res.status).toBe(400);
      expect(res.location).toBeNull();
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      expect(res.html).toContain(`data-error="${error}"`);
      expectPageHeaders(res.headers);
    });
  }
});

describe('GET /oauth/authorize redirects other errors with 303, error, state and iss', () => {
  const cases: Array<[string, () => string, string]> = [
    ['a missing response_type', () => authorizeQuery(valid({ response_type: undefined })), 'invalid_request'],
    ['response_type=token', () => authorizeQuery(valid({ response_type: 'token' })), 'unsupported_response_type'],
    ['a missing code_challenge', () => authorizeQuery(valid({ code_challenge: undefined })), 'invalid_request'],
    ['a missing code_challenge_method', () => authorizeQuery(valid({ code_challenge_method: undefined })), 'invalid_request'],
    ['code_challenge_method=plain', () => authorizeQuery(valid({ code_challenge_method: 'plain' })), 'invalid_request'],
    ['a malformed code_challenge', () => authorizeQuery(valid({ code_challenge: 'short' })), 'invalid_request'],
    ['a repeated code_challenge', () => `${authorizeQuery(valid())}&code_challenge=${challenge}`, 'invalid_request'],
    ['a state over 512 characters', () => authorizeQuery(valid({ state: 's'.repeat(513) })), 'invalid_request'],
    ['a missing resource', () => authorizeQuery(valid({ resource: undefined })), 'invalid_target'],
    ['a foreign resource', () => authorizeQuery(valid({ resource: 'https://other.example' })), 'invalid_target'],
    ['a resource with a trailing slash', () => authorizeQuery(valid({ resource: `${url}/` })), 'invalid_target'],
    ['two resources', () => `${authorizeQuery(valid())}&resource=${encodeURIComponent(`${url}/mcp`)}`, 'invalid_target'],
    ['an unknown scope', () => authorizeQuery(valid({ scope: 'openid' })), 'invalid_scope'],
    // What the metadata says is not supported is refused, not silently ignored (found from outside: the answer came
    // by query to a client that asked for a fragment, and a request object was dropped unread).
    ['response_mode=fragment', () => `${authorizeQuery(valid())}&response_mode=fragment`, 'invalid_request'],
    ['response_mode=form_post', () => `${authorizeQuery(valid())}&response_mode=form_post`, 'invalid_request'],
    ['a request object', () => `${authorizeQuery(valid())}&request=eyJhbGciOiJub25lIn0.e30.`, 'request_not_supported'],
    ['a request_uri', () => `${authorizeQuery(valid())}&request_uri=urn%3Aexample%3Ax`, 'request_uri_not_supported'],
  ];
  for (const [name, query, error] of cases) {
    it(`${name}: ${error}`, async () => {
      const res = await authorizeRaw(url, query());
      expect(res.status).toBe(303);
      const location = new URL(res.location!);
      expect(`${location.origin}${location.pathname}`).toBe(redirect);
      expect(location.searchParams.get('error')).toBe(error);
      expect(location.searchParams.get('error_description')).toBeTruthy();
      expect(location.searchParams.get('iss')).toBe(url);
      expect(location.searchParams.get('code')).toBeNull();
      if (!name.includes('state')) expect(location.searchParams.get('state')).toBe('xyz');
    });
  }

  it('takes response_mode=query, the one it supports', async () => {
    const res = await authorizeRaw(url, `${authorizeQuery(valid())}&response_mode=query`);
    expect(res.location).toContain('/oauth/consent?request_id=');
  });

  it('keeps the registered query byte for byte and appends its parameters (found from outside: `?x&y=a%20b` came back as `?x=&y=a+b`)', async () => {
    const res = await authorizeRaw(url, authorizeQuery(valid({ redirect_uri: queryAsWritten, resource: 'https://other.example', state: 'a b' })));
    expect(res.status).toBe(303);
    expect(res.location!.startsWith(`${queryAsWritten}&error=invalid_target&error_description=`)).toBe(true);
    expect(res.location!.endsWith(`&state=a+b&iss=${encodeURIComponent(url)}`)).toBe(true);
  });

  it('keeps the query that is part of the registered redirect URI', async () => {
    const res = await authorizeRaw(url, authorizeQuery(valid({ redirect_uri: tenantRedirect, resource: 'https://other.example' })));
    expect(res.status).toBe(303);
    const location = new URL(res.location!);
    expect(location.searchParams.get('tenant')).toBe('1');
    expect(location.searchParams.get('error')).toBe('invalid_target');
  });

  it('a scope outside the client\'s registered scope: invalid_scope', async () => {
    const limited = await newClient(url, [redirect], { scope: 'svc:agent' });
    const res = await authorizeRaw(url, authorizeQuery(valid({ client_id: limited, scope: 'svc:owner' })));
    expect(new URL(res.location!).searchParams.get('error')).toBe('invalid_scope');
  });
});

describe('GET /oauth/authorize on success', () => {
  it('signs the request into the consent URL, stores nothing, binds the browser with a cookie and sends it to the consent page', async () => {
    const { db } = world.gw.gateway;
    const count = async () => Number((await db.query<{ n: bigint }>('SELECT count(*)::bigint AS n FROM oauth_authorization_requests')).rows[0]!.n);
    const before = await count();
    const res = await authorizeRaw(url, authorizeQuery(valid({ state: 'xyz' })));
    expect(res.status).toBe(303);
    const requestId = new URL(res.location!).searchParams.get('request_id')!;
    expect(res.location).toBe(`${url}/oauth/consent?request_id=${requestId}`);
    // Nothing is stored before the person acts, so no party can fill a store that everyone's sign-in needs (found
    // from outside: 10,000 pending rows, shared by the whole gateway, filled by one client at 17 requests a second).
    expect(await count()).toBe(before);
    const { payload, protectedHeader } = await jwtVerify(requestId, createLocalJWKSet(await (await fetch(`${url}/.well-known/jwks.json`)).json()), {
      issuer: url,
      audience: `${url}/oauth/consent`,
      typ: 'oauth-authz-request+jwt',
      algorithms: ['ES256'],
    });
    expect(protectedHeader.alg).toBe('ES256');
    expect(payload).toMatchObject({ jti: expect.stringMatching(/^areq_[a-z2-7]{26}$/), client_id: clientId, redirect_uri: redirect, state: 'xyz', code_challenge: challenge, resource: url });
    expect(payload.exp! - payload.iat!).toBe(600);
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(/^acg-oauth-browser=[A-Za-z0-9_-]{43}; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax$/);
  });

  it('reuses the browser cookie for a second request in the same browser', async () => {
    const first = await authorizeRaw(url, authorizeQuery(valid()));
    const second = await authorizeRaw(url, authorizeQuery(valid()), first.cookie);
    expect(second.status).toBe(303);
    expect(second.headers.get('set-cookie')).toBeNull();
  });

  it('lets a loopback IP redirect URI use any port (RFC 8252 §7.3)', async () => {
    const res = await authorizeRaw(url, authorizeQuery(valid({ redirect_uri: 'http://127.0.0.1:53123/callback' })));
    expect(res.status).toBe(303);
    expect(res.location).toContain('/oauth/consent');
  });

  it('lets the port vary only over 1–65535 as the URL parser writes it: any other port is the unregistered-URI page, never a 5xx or a redirect (found from outside)', async () => {
    const ipv6 = await newClient(url, ['http://[::1]/cb']);
    const requests: Array<[string, string]> = [
      [clientId, 'http://127.0.0.1:65536/callback'],
      [clientId, 'http://127.0.0.1:99999/callback'],
      [clientId, 'http://127.0.0.1:03001/callback'],
      [clientId, 'http://127.0.0.1:0/callback'],
      [clientId, 'http://127.0.0.1:80/callback'],
      [ipv6, 'http://[::1]:70000/cb'],
    ];
    for (const [client, redirectUri] of requests) {
      // A valid request (else its consent page) and one whose error would be sent back by redirect.
      for (const overrides of [{}, { code_challenge_method: 'plain' }]) {
        const res = await authorizeRaw(url, authorizeQuery(valid({ client_id: client, redirect_uri: redirectUri, ...overrides })));
        expect([res.status, res.location], redirectUri).toEqual([400, null]);
        expect(res.html, redirectUri).toContain('data-error="invalid_redirect_uri"');
      }
    }
    for (const [client, redirectUri] of [[clientId, 'http://127.0.0.1:1/callback'], [clientId, 'http://127.0.0.1:65535/callback'], [ipv6, 'http://[::1]:65535/cb']]) {
      const res = await authorizeRaw(url, authorizeQuery(valid({ client_id: client, redirect_uri: redirectUri })));
      expect(res.status, redirectUri).toBe(303);
      expect(res.location, redirectUri).toContain('/oauth/consent');
    }
  });

  it('refuses a redirect URI with port 0 that a client registered before registration refused it: the unregistered-URI page, never a 5xx', async () => {
    const legacy = await newClient(url, ['http://127.0.0.1:9/legacy']);
    await world.gw.gateway.db.query('UPDATE oauth_clients SET redirect_uris = $2 WHERE id = $1', [legacy, JSON.stringify(['http://127.0.0.1:0/legacy'])]);
    const res = await authorizeRaw(url, authorizeQuery(valid({ client_id: legacy, redirect_uri: 'http://127.0.0.1:0/legacy' })));
    expect([res.status, res.location]).toEqual([400, null]);
    expect(res.html).toContain('data-error="invalid_redirect_uri"');
  });

  it('refuses a redirect URI whose query holds a response parameter that a client registered before registration refused it', async () => {
    const legacy = await newClient(url, ['https://app.example/legacy']);
    for (const registered of ['https://app.example/legacy?error=x', 'https://app.example/legacy?a=1&state=fixed']) {
      await world.gw.gateway.db.query('UPDATE oauth_clients SET redirect_uris = $2 WHERE id = $1', [legacy, JSON.stringify([registered])]);
      const res = await authorizeRaw(url, authorizeQuery(valid({ client_id: legacy, redirect_uri: registered })));
      expect([registered, res.status, res.location]).toEqual([registered, 400, null]);
      expect(res.html).toContain('data-error="invalid_redirect_uri"');
    }
  });

  it('lets only the port vary: a loopback URI the parser would read as the registered one is another string, refused', async () => {
    for (const redirectUri of ['http://127.0.0.1/x/../callback', 'http://127.1/callback', 'HTTP://127.0.0.1/callback', 'http://127.0.0.1/callback?', 'http://0x7f000001:99/callback', 'http://127.0.0.1/Callback']) {
      const res = await authorizeRaw(url, authorizeQuery(valid({ redirect_uri: redirectUri })));
      expect(res.status, redirectUri).toBe(400);
      expect(res.location, redirectUri).toBeNull();
    }
  });
});

describe('the consent page', () => {
  it('is hardened: nonce CSP, no framing, no referrer, no caching', async () => {
    const pending = await startConsent(url, valid());
    const res = await fetch(`${url}/oauth/consent?request_id=${pending.requestId}`, { headers: { cookie: pending.cookie } });
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy')!;
    const nonce = /script-src 'nonce-([^']+)'/.exec(csp)![1];
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("connect-src 'self'");
    expectPageHeaders(res.headers);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const html = await res.text();
    expect(html).toContain(`<script nonce="${nonce}">`);
    expect(html.match(/<script/g)).toHaveLength(1);
    expect(html).toContain('data-provider="human"');
    expect(html).toContain('data-provider="agent"');
  });

  it('escapes the attacker-controlled client name', async () => {
    const hostile = await newClient(url, [redirect], { client_name: '<img src=x onerror=alert(1)>' });
    const pending = await startConsent(url, valid({ client_id: hostile }));
    expect(pending.html).not.toContain('<img src=x');
    expect(pending.html).toContain('&#60;img src=x onerror=alert(1)&#62;');
  });

  it("says a registered client is its developer's, not the gateway's, and names where it returns you in the heading (found from outside: a client named as the console got the console's page)", async () => {
    const pending = await startConsent(url, valid());
    expect(pending.html).toMatch(/<h1><strong>[^<]*<\/strong> at <strong>127\.0\.0\.1:9<\/strong> wants access/);
    expect(pending.html).toContain('An application registered by its own developer');
  });

  it('offers only the provider that can grant the requested scope', async () => {
    const pending = await startConsent(url, valid({ scope: 'svc:agent' }));
    expect(pending.html).toContain('data-provider="agent"');
    expect(pending.html).not.toContain('data-provider="human"');
  });

  it('is refused to another browser (403 access_denied) and for an unknown request (400 invalid_request)', async () => {
    const pending = await startConsent(url, valid());
    const elsewhere = await fetch(`${url}/oauth/consent?request_id=${pending.requestId}`);
    expect(elsewhere.status).toBe(403);
    expect(await elsewhere.text()).toContain('data-error="access_denied"');
    const unknown = await fetch(`${url}/oauth/consent?request_id=areq_unknown`, { headers: { cookie: pending.cookie } });
    expect(unknown.status).toBe(400);
    expect(await unknown.text()).toContain('data-error="invalid_request"');
  });

  it('is no request when its id was changed, or is another token of the gateway (400 invalid_request)', async () => {
    const pending = await startConsent(url, valid());
    const [header, body, signature] = pending.requestId.split('.') as [string, string, string];
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString());
    const elsewhere = `${header}.${Buffer.from(JSON.stringify({ ...claims, redirect_uri: 'https://attacker.example/cb' })).toString('base64url')}.${signature}`;
    const voucherLike = await world.gw.gateway.signing.sign({ ...claims }, 'voucher+jwt');
    for (const forged of [elsewhere, voucherLike, `${header}.${body}`]) {
      const res = await fetch(`${url}/oauth/consent?request_id=${forged}`, { headers: { cookie: pending.cookie } });
      expect(res.status, forged).toBe(400);
      expect(await res.text()).toContain('no such authorization request');
    }
  });

  it('is gone once the request expires', async () => {
    const pending = await startConsent(url, valid());
    world.gw.clock.advance(601_000);
    const res = await fetch(`${url}/oauth/consent?request_id=${pending.requestId}`, { headers: { cookie: pending.cookie } });
    expect(res.status).toBe(400);
    expect(await res.text()).toContain('expired');
  });
});
