import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { purgeUsedAuthorizationRequests, USED_REQUEST_KEPT_AFTER_EXP_S } from '../../src/oauth/authorization-request.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { startWorld, type World } from '../support/world.ts';
import { authorizeQuery, authorizeRaw, newClient, pkcePair, selectIdentity, startConsent, type AuthorizeParams, type Pending } from './helpers.ts';

let world: World;
let url: string;
let clientId: string;
let agent: { id: string; token: string; ownerToken: string };
const redirect = 'http://127.0.0.1:9/callback';
const owner = 'owner@example.com';

beforeAll(async () => {
  world = await startWorld();
  url = world.url;
  clientId = await newClient(url, [redirect]);
  agent = await world.createAgent(owner, 'agent-select');
});
afterAll(() => world.close());

function pending(overrides: AuthorizeParams = {}): Promise<Pending> {
  return startConsent(url, { client_id: clientId, redirect_uri: redirect, code_challenge: pkcePair().challenge, resource: url, state: 'st-9', ...overrides });
}

function expectOAuthError(res: { status: number; body: any }, status: number, error: string) {
  expect(res.status).toBe(status);
  expect(res.body).toEqual({ error, error_description: expect.any(String) });
}

describe('POST /oauth/select succeeds', () => {
  it('for the longest request authorize takes, whatever the base URL (found from outside: a consent past 8,192 characters was refused after sign-in)', async () => {
    // The registration limit (2,000 characters), of characters JSON writes as two, and the state's limit (512), of
    // characters UTF-8 writes as three: the request id carries both, and the base URL three times.
    const longest = `http://127.0.0.1:9/cb?${'\\'.repeat(2000 - 'http://127.0.0.1:9/cb?'.length)}`;
    const client = await newClient(url, [longest]);
    const humanToken = await world.humanToken(owner);
    const config = world.gw.gateway.config as { baseUrl: string };
    const served = config.baseUrl;
    // The same server under a base URL with a path prefix (as behind a proxy): only the names it signs grow.
    config.baseUrl = `${served}/${'gateway-behind-a-prefix/'.repeat(8)}acg`;
    try {
      const started = await authorizeRaw(url, authorizeQuery({ client_id: client, redirect_uri: longest, response_type: 'code', code_challenge: pkcePair().challenge, code_challenge_method: 'S256', resource: config.baseUrl, state: '\uFFEE'.repeat(512) }));
      expect(started.status).toBe(303);
      const requestId = new URL(started.location!).searchParams.get('request_id')!;
      expect(requestId.length).toBeGreaterThan(8192);
      const page = await fetch(`${url}/oauth/consent?request_id=${requestId}`, { headers: { cookie: started.cookie! } });
      const html = await page.text();
      expect(page.status, html.slice(0, 300)).toBe(200);
      const consented = { requestId, consentToken: /data-consent-token="([^"]+)"/.exec(html)![1]!, cookie: started.cookie!, html };
      const res = await selectIdentity(url, consented, 'human', { token: humanToken });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(new URL(res.body.redirectUrl).searchParams.get('code')).toMatch(/^[A-Za-z0-9_-]{43}$/);
      // Under a base URL so long that the longest request cannot be carried, authorize refuses it, before anyone signs in.
      config.baseUrl = `${served}/${'p'.repeat(1500)}`;
      const refused = await authorizeRaw(url, authorizeQuery({ client_id: client, redirect_uri: longest, response_type: 'code', code_challenge: pkcePair().challenge, code_challenge_method: 'S256', resource: config.baseUrl, state: '\uFFEE'.repeat(512) }));
      const location = new URL(refused.location!);
      expect([location.searchParams.get('error'), location.searchParams.get('error_description')]).toEqual(['invalid_request', expect.stringContaining('send a shorter state')]);
    } finally {
      config.baseUrl = served;
    }
  });

  it('for a human owner: only the registered callback with code, state and iss', async () => {
    const p = await pending();
    const res = await selectIdentity(url, p, 'human', { token: await world.humanToken(owner) });
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(Object.keys(res.body)).toEqual(['redirectUrl']);
    const callback = new URL(res.body.redirectUrl);
    expect(`${callback.origin}${callback.pathname}`).toBe(redirect);
    expect(callback.searchParams.get('code')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(callback.searchParams.get('state')).toBe('st-9');
    expect(callback.searchParams.get('iss')).toBe(url);
  });

  it('to the registered callback with its query byte for byte, code, state and iss appended (found from outside, bb119)', async () => {
    const registered = 'https://app.example/cb?x&y=a%20b&z=%7E&w=a+b';
    const client = await newClient(url, [registered]);
    const res = await selectIdentity(url, await pending({ client_id: client, redirect_uri: registered }), 'human', { token: await world.humanToken(owner) });
    expect(res.status).toBe(200);
    expect(res.body.redirectUrl).toMatch(new RegExp(`^${registered.replace(/[?+]/g, '\\$&')}&code=[A-Za-z0-9_-]{43}&state=st-9&iss=${encodeURIComponent(url)}$`));
  });

  it('for a registered agent', async () => {
    const res = await selectIdentity(url, await pending(), 'agent', { token: agent.token });
    expect(res.status).toBe(200);
    expect(new URL(res.body.redirectUrl).searchParams.get('code')).toBeTruthy();
  });

  it('after a refused identity, since only a successful consent uses the request', async () => {
    const p = await pending();
    expectOAuthError(await selectIdentity(url, p, 'human', { token: agent.token }), 403, 'access_denied');
    expect((await selectIdentity(url, p, 'human', { token: await world.humanToken(owner) })).status).toBe(200);
  });
});

describe('POST /oauth/select refuses', () => {
  it('a wrong Origin with 403 access_denied', async () => {
    const p = await pending();
    const token = await world.humanToken(owner);
    for (const origin of ['https://evil.example', url.replace('127.0.0.1', 'localhost'), `${url}/`, 'null']) {
      expectOAuthError(await selectIdentity(url, p, 'human', { token, origin }), 403, 'access_denied');
    }
  });

  it('a missing Origin with 403 access_denied', async () => {
    expectOAuthError(await selectIdentity(url, await pending(), 'human', { token: await world.humanToken(owner), origin: null }), 403, 'access_denied');
  });

  it('credentials in the query string with 400 invalid_request', async () => {
    const token = await world.humanToken(owner);
    const res = await selectIdentity(url, await pending(), 'human', { query: `?access_token=${token}` });
    expectOAuthError(res, 400, 'invalid_request');
  });

  it('a body that is not JSON with 415 invalid_request', async () => {
    expectOAuthError(await selectIdentity(url, await pending(), 'human', { token: await world.humanToken(owner), contentType: 'text/plain' }), 415, 'invalid_request');
  });

  it('an identityProvider other than human or agent with 400 invalid_request, naming the member as OAuth does', async () => {
    const res = await selectIdentity(url, await pending(), 'google', { token: await world.humanToken(owner) });
    expectOAuthError(res, 400, 'invalid_request');
    expect(res.body.error_description).toBe('identityProvider must be one of "human", "agent"');
  });

  it('an unknown request with 400 invalid_request', async () => {
    const p = await pending();
    expectOAuthError(await selectIdentity(url, { ...p, requestId: 'areq_unknown' }, 'human', { token: await world.humanToken(owner) }), 400, 'invalid_request');
  });

  it('a call without the browser cookie or the page token with 403 access_denied', async () => {
    const p = await pending();
    const token = await world.humanToken(owner);
    expectOAuthError(await selectIdentity(url, p, 'human', { token, cookie: null }), 403, 'access_denied');
    expectOAuthError(await selectIdentity(url, p, 'human', { token, consentToken: null }), 403, 'access_denied');
    expectOAuthError(await selectIdentity(url, p, 'human', { token, consentToken: 'A'.repeat(43) }), 403, 'access_denied');
    // Another browser (a fresh cookie from its own request) holding the leaked page token.
    const otherBrowser = await pending();
    expect(otherBrowser.cookie).not.toBe(p.cookie);
    expectOAuthError(await selectIdentity(url, p, 'human', { token, cookie: otherBrowser.cookie }), 403, 'access_denied');
  });

  it('no session, or an invalid one, with 403 access_denied', async () => {
    const p = await pending();
    expectOAuthError(await selectIdentity(url, p, 'human'), 403, 'access_denied');
    expectOAuthError(await selectIdentity(url, p, 'human', { token: 'not-a-jwt' }), 403, 'access_denied');
    const expired = await world.human.mint({ sub: 'h1', email: owner, email_verified: true }, { expiresInS: -120 });
    expectOAuthError(await selectIdentity(url, p, 'human', { token: expired }), 403, 'access_denied');
    const forged = await world.human.mint({ sub: 'h1', email: owner, email_verified: true }, { foreignKey: true });
    expectOAuthError(await selectIdentity(url, p, 'human', { token: forged }), 403, 'access_denied');
    const unverified = await world.humanToken('nobody@example.com', { verified: false });
    expectOAuthError(await selectIdentity(url, p, 'human', { token: unverified }), 403, 'access_denied');
  });

  it('an agent identity on human consent with 403 access_denied', async () => {
    const res = await selectIdentity(url, await pending(), 'human', { token: agent.token });
    expectOAuthError(res, 403, 'access_denied');
    expect(res.body.error_description).toContain('agent identity cannot give human owner consent');
  });

  it('a human session, an OAuth token or an unregistered agent on agent consent with 403 access_denied', async () => {
    const p = await pending();
    expectOAuthError(await selectIdentity(url, p, 'agent', { token: await world.humanToken(owner) }), 403, 'access_denied');
    expectOAuthError(await selectIdentity(url, p, 'agent', { token: await world.accessToken({ sub: agent.id, scope: 'svc:agent' }) }), 403, 'access_denied');
    expectOAuthError(await selectIdentity(url, p, 'agent', { token: await world.agentToken('never-registered', owner) }), 403, 'access_denied');
  });

  it('our own owner token on human consent with 403 access_denied', async () => {
    const me = await world.api('GET', '/v1/me', { token: await world.humanToken(owner) });
    const oToken = await world.accessToken({ sub: me.body.owner.id, scope: 'svc:owner', email: owner });
    expectOAuthError(await selectIdentity(url, await pending(), 'human', { token: oToken }), 403, 'access_denied');
  });

  it('a merchant API key on either consent with 403 access_denied', async () => {
    const { key } = await seedMerchantKey(world);
    for (const provider of ['human', 'agent']) expectOAuthError(await selectIdentity(url, await pending(), provider, { token: key }), 403, 'access_denied');
  });

  it('a scope mismatch with 403 access_denied', async () => {
    const res = await selectIdentity(url, await pending({ scope: 'svc:agent' }), 'human', { token: await world.humanToken(owner) });
    expectOAuthError(res, 403, 'access_denied');
    expect(res.body.error_description).toContain('scope mismatch');
  });

  it("keeps a used request's row past its exp for longer than instances' clocks may differ, then forgets it", async () => {
    const used = await pending();
    const { jti, exp } = JSON.parse(Buffer.from(used.requestId.split('.')[1]!, 'base64url').toString()) as { jti: string; exp: number };
    expect((await selectIdentity(url, used, 'human', { token: await world.humanToken(owner) })).status).toBe(200);
    const { db } = world.gw.gateway;
    const kept = async () => (await db.query('SELECT 1 FROM oauth_authorization_requests WHERE id = $1', [jti])).rows.length;
    // Just past its exp here, an instance whose clock is behind could still accept it: the row must say it was used.
    await purgeUsedAuthorizationRequests(db, exp + 60);
    expect(await kept()).toBe(1);
    await purgeUsedAuthorizationRequests(db, exp + USED_REQUEST_KEPT_AFTER_EXP_S);
    expect(await kept()).toBe(0);
  });

  it('a replayed consent with 400 invalid_request', async () => {
    const p = await pending();
    const token = await world.humanToken(owner);
    expect((await selectIdentity(url, p, 'human', { token })).status).toBe(200);
    const again = await selectIdentity(url, p, 'human', { token });
    expectOAuthError(again, 400, 'invalid_request');
    expect(again.body.error_description).toContain('already been used');
  });

  it('two consents racing for one request: exactly one wins', async () => {
    const p = await pending();
    const token = await world.humanToken(owner);
    const results = await Promise.all(Array.from({ length: 5 }, () => selectIdentity(url, p, 'human', { token })));
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
    expect(results.filter((r) => r.status === 400).every((r) => r.body.error === 'invalid_request')).toBe(true);
  });

  it('an expired request with 400 invalid_request', async () => {
    const p = await pending();
    world.gw.clock.advance(601_000);
    expectOAuthError(await selectIdentity(url, p, 'human', { token: await world.humanToken(owner) }), 400, 'invalid_request');
  });
});

describe('POST /oauth/deny', () => {
  /** The consent page's Decline: the same bindings as select, no sign-in. */
  async function deny(p: Pending, options: { origin?: string | null; consentToken?: string | null; cookie?: string | null } = {}) {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const origin = options.origin === undefined ? url : options.origin;
    if (origin !== null) headers.origin = origin;
    const cookie = options.cookie === undefined ? p.cookie : options.cookie;
    if (cookie !== null) headers.cookie = cookie;
    const consentToken = options.consentToken === undefined ? p.consentToken : options.consentToken;
    if (consentToken !== null) headers['x-consent-token'] = consentToken;
    const res = await fetch(`${url}/oauth/deny`, { method: 'POST', headers, body: JSON.stringify({ requestId: p.requestId }) });
    return { status: res.status, body: await res.json(), headers: res.headers };
  }

  it('sends the person back to the client at once with access_denied, state and iss; the request is then used (found from outside: the client waited out the request)', async () => {
    const p = await pending();
    expect(p.html).toContain('id="decline"');
    const res = await deny(p);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const back = new URL(res.body.redirectUrl);
    expect(`${back.origin}${back.pathname}`).toBe(redirect);
    expect([back.searchParams.get('error'), back.searchParams.get('state'), back.searchParams.get('iss'), back.searchParams.get('code')]).toEqual(['access_denied', 'st-9', url, null]);
    expect(back.searchParams.get('error_description')).toBeTruthy();
    const consented = await selectIdentity(url, p, 'human', { token: await world.humanToken(owner) });
    expectOAuthError(consented, 400, 'invalid_request');
    expect((await deny(p)).body.error_description).toContain('already been used');
  });

  it('takes only the consent page in the browser that started the request', async () => {
    const p = await pending();
    expectOAuthError(await deny(p, { origin: 'https://evil.example' }), 403, 'access_denied');
    expectOAuthError(await deny(p, { consentToken: null }), 403, 'access_denied');
    expectOAuthError(await deny(p, { cookie: null }), 403, 'access_denied');
    expectOAuthError(await deny({ ...p, requestId: 'areq_unknown' }), 400, 'invalid_request');
    const queried = await fetch(`${url}/oauth/deny?x=1`, { method: 'POST', headers: { 'content-type': 'application/json', origin: url, cookie: p.cookie, 'x-consent-token': p.consentToken }, body: JSON.stringify({ requestId: p.requestId }) });
    expect(((await queried.json()) as { error_description: string }).error_description).toBe("the consent page's calls take no query parameters; credentials are never accepted in the query string");
    // Still open: the person can sign in.
    expect((await selectIdentity(url, p, 'human', { token: await world.humanToken(owner) })).status).toBe(200);
  });
});
