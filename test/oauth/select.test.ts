import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { startWorld, type World } from '../support/world.ts';
import { newClient, pkcePair, selectIdentity, startConsent, type AuthorizeParams, type Pending } from './helpers.ts';

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

  it('an identityProvider other than human or agent with 400 invalid_request', async () => {
    expectOAuthError(await selectIdentity(url, await pending(), 'google', { token: await world.humanToken(owner) }), 400, 'invalid_request');
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
