// A consent is remembered for the browser that gave it: the same client, asking again for exactly the same
// scope and resource, gets a code without the consent page, until the consent expires or is revoked. It
// never widens scope, client or resource, and every rule of the request is checked as strictly as before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REMEMBERED_CONSENT_LIFETIME_S } from '../../src/oauth/limits.ts';
import { startWorld, type World } from '../support/world.ts';
import {
  authorizeQuery,
  authorizeRaw,
  newClient,
  pkcePair,
  selectIdentity,
  startConsent,
  token,
  type AuthorizeParams,
  type AuthorizeResult,
} from './helpers.ts';

let world: World;
let url: string;
let clientId: string;
let otherClientId: string;
let agent: { id: string; token: string; ownerToken: string };
const redirect = 'http://127.0.0.1:9/callback';
const owner = 'remember-owner@example.com';

beforeAll(async () => {
  world = await startWorld();
  url = world.url;
  [clientId, otherClientId] = [await newClient(url, [redirect]), await newClient(url, [redirect])];
  agent = await world.createAgent(owner, 'remember-agent');
});
afterAll(() => world.close());

interface Request extends AuthorizeParams {
  verifier: string;
}

function request(overrides: AuthorizeParams = {}): Request {
  const { verifier, challenge } = pkcePair();
  return { response_type: 'code', code_challenge_method: 'S256', client_id: clientId, redirect_uri: redirect, code_challenge: challenge, resource: url, state: `st-${Math.random()}`, scope: 'svc:owner', verifier, ...overrides };
}

function query(req: Request): string {
  const { verifier: _verifier, ...params } = req;
  return authorizeQuery(params);
}

function paramsOf(text: string): AuthorizeParams {
  return Object.fromEntries(new URLSearchParams(text));
}

/** Consents on the page in a browser (a new one unless `cookie` names one); returns the browser's cookie. */
async function consent(req: Request, provider: 'human' | 'agent' = 'human', cookie?: string): Promise<string> {
  const { verifier: _verifier, ...params } = req;
  const pending = await startConsent(url, params, cookie);
  const identity = provider === 'human' ? await world.humanToken(owner) : agent.token;
  const selected = await selectIdentity(url, pending, provider, { token: identity });
  expect(selected.status, JSON.stringify(selected.body)).toBe(200);
  return pending.cookie;
}

function wentToConsentPage(res: AuthorizeResult): boolean {
  return res.status === 303 && res.location!.startsWith(`${url}/oauth/consent?request_id=`);
}

/** The callback a remembered consent answered with: code, state and iss, at the requested redirect URI. */
function callbackOf(res: AuthorizeResult, req: Request): URLSearchParams {
  expect(res.status).toBe(303);
  const location = new URL(res.location!);
  expect(`${location.origin}${location.pathname}`).toBe(new URL(req.redirect_uri!).href);
  expect(location.searchParams.get('state')).toBe(req.state);
  expect(location.searchParams.get('iss')).toBe(url);
  expect(location.searchParams.get('code')).toMatch(/^[A-Za-z0-9_-]{43}$/);
  return location.searchParams;
}

async function exchange(req: Request, code: string, overrides: Record<string, string> = {}) {
  return token(url, { grant_type: 'authorization_code', code, client_id: req.client_id, redirect_uri: req.redirect_uri, code_verifier: req.verifier, resource: req.resource, ...overrides });
}

function claimsOf(accessToken: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(accessToken.split('.')[1]!, 'base64url').toString());
}

function revoke(client: string, credential: string | undefined) {
  return world.api('DELETE', `/v1/owner/oauth-grants/${client}`, { token: credential });
}

describe('a remembered consent', () => {
  it('answers a second authorization by the same client, for the same identity, scope and resource, without the consent page', async () => {
    const cookie = await consent(request());
    const again = request({ redirect_uri: 'http://127.0.0.1:53124/callback' });
    const res = await authorizeRaw(url, query(again), cookie);
    expect(res.headers.get('set-cookie')).toBeNull();
    expect(res.headers.get('cache-control')).toBe('no-store');
    const code = callbackOf(res, again).get('code')!;
    const issued = await exchange(again, code);
    expect(issued.status, JSON.stringify(issued.body)).toBe(200);
    expect(issued.body.scope).toBe('svc:owner');
    const me = (await world.api('GET', '/v1/me', { token: await world.humanToken(owner) })).body;
    expect(claimsOf(issued.body.access_token)).toMatchObject({ sub: me.owner.id, aud: url, client_id: clientId, scope: 'svc:owner', actor_type: 'owner', email: owner });
    expect((await world.api('GET', '/v1/me', { token: issued.body.access_token })).status).toBe(200);
  });

  it('remembers an agent consent too, as that agent', async () => {
    const first = request({ scope: 'svc:agent', resource: `${url}/mcp` });
    const cookie = await consent(first, 'agent');
    const again = request({ scope: 'svc:agent', resource: `${url}/mcp` });
    const issued = await exchange(again, callbackOf(await authorizeRaw(url, query(again), cookie), again).get('code')!);
    expect(issued.status).toBe(200);
    expect(claimsOf(issued.body.access_token)).toMatchObject({ sub: agent.id, aud: `${url}/mcp`, scope: 'svc:agent', actor_type: 'agent' });
  });

  it('binds the code to the new request exactly: its own PKCE challenge, redirect URI, resource and single use', async () => {
    const first = request();
    const cookie = await consent(first);
    const again = request({ redirect_uri: 'http://127.0.0.1:53125/callback' });
    const code = callbackOf(await authorizeRaw(url, query(again), cookie), again).get('code')!;
    expect((await exchange(again, code, { code_verifier: first.verifier })).body.error).toBe('invalid_grant');
    expect((await exchange(again, code, { redirect_uri: redirect })).body.error).toBe('invalid_grant');
    expect((await exchange(again, code, { resource: `${url}/mcp` })).body.error).toBe('invalid_target');
    expect((await exchange(again, code)).status).toBe(200);
    expect((await exchange(again, code)).body.error).toBe('invalid_grant');
  });

  it('checks every rule of the request first: a bad request is refused as it always is, never answered with a code', async () => {
    const cookie = await consent(request());
    const unregistered = await authorizeRaw(url, query(request({ redirect_uri: 'https://evil.example/cb' })), cookie);
    expect([unregistered.status, unregistered.location]).toEqual([400, null]);
    // A loopback port no URL can hold is not registered either: before, a code was stored for it, then the
    // redirect failed (503, found from outside).
    const outOfRange = await authorizeRaw(url, query(request({ redirect_uri: 'http://127.0.0.1:65536/callback' })), cookie);
    expect([outOfRange.status, outOfRange.location]).toEqual([400, null]);
    expect(outOfRange.html).toContain('data-error="invalid_redirect_uri"');
    expect((await world.gw.gateway.db.query('SELECT 1 FROM oauth_codes WHERE redirect_uri LIKE $1', ['%:65536/%'])).rows).toEqual([]);
    const refusals: Array<[AuthorizeParams, string]> = [
      [{ code_challenge: undefined }, 'invalid_request'],
      [{ code_challenge_method: 'plain' }, 'invalid_request'],
      [{ response_type: 'token' }, 'unsupported_response_type'],
      [{ state: 'x'.repeat(513) }, 'invalid_request'],
      [{ resource: 'https://elsewhere.example' }, 'invalid_target'],
      [{ scope: 'svc:admin' }, 'invalid_scope'],
    ];
    for (const [overrides, error] of refusals) {
      const res = await authorizeRaw(url, query(request(overrides)), cookie);
      const location = new URL(res.location!);
      expect([res.status, location.searchParams.get('error'), location.searchParams.get('code')], JSON.stringify(overrides)).toEqual([303, error, null]);
    }
    const repeated = await authorizeRaw(url, `${query(request())}&state=second`, cookie);
    expect(new URL(repeated.location!).searchParams.get('error')).toBe('invalid_request');
  });
});

describe('the consent page is shown again', () => {
  it('for a wider scope, or any other scope than the one consented to', async () => {
    const cookie = await consent(request({ scope: 'svc:owner' }));
    for (const scope of ['svc:agent svc:owner', undefined, 'svc:agent']) {
      expect(wentToConsentPage(await authorizeRaw(url, query(request({ scope })), cookie)), String(scope)).toBe(true);
    }
  });

  it('for a different client', async () => {
    const cookie = await consent(request());
    expect(wentToConsentPage(await authorizeRaw(url, query(request({ client_id: otherClientId })), cookie))).toBe(true);
  });

  it('for a different resource', async () => {
    const cookie = await consent(request({ resource: url }));
    expect(wentToConsentPage(await authorizeRaw(url, query(request({ resource: `${url}/mcp` })), cookie))).toBe(true);
  });

  it('in another browser', async () => {
    await consent(request());
    expect(wentToConsentPage(await authorizeRaw(url, query(request())))).toBe(true);
    const other = await authorizeRaw(url, query(request({ client_id: otherClientId })));
    expect(wentToConsentPage(await authorizeRaw(url, query(request()), other.cookie))).toBe(true);
  });

  it('when two identities consented to the same request in one browser: only the person can choose', async () => {
    const both = () => query(request({ scope: undefined, client_id: otherClientId }));
    const browser = (await authorizeRaw(url, both())).cookie!;
    const [asOwner, asAgent] = [await startConsent(url, paramsOf(both()), browser), await startConsent(url, paramsOf(both()), browser)];
    expect((await selectIdentity(url, asOwner, 'human', { token: await world.humanToken(owner) })).status).toBe(200);
    expect(wentToConsentPage(await authorizeRaw(url, both(), browser))).toBe(false);
    expect((await selectIdentity(url, asAgent, 'agent', { token: agent.token })).status).toBe(200);
    expect(wentToConsentPage(await authorizeRaw(url, both(), browser))).toBe(true);
  });

  it("when two owners' agents of one subject consented in one browser: each keeps its consent, and only the person can choose (found from outside)", async () => {
    // Each owner registers an identity once, so two owners' agents may share a subject; a consent of the second replaced the first's.
    const [first, second] = [await world.createAgent('remember-first@example.com', 'remember-shared'), await world.createAgent('remember-second@example.com', 'remember-shared')];
    const client = await newClient(url, [redirect]);
    const asAgent = () => request({ client_id: client, scope: 'svc:agent', resource: `${url}/mcp` });
    const browser = (await authorizeRaw(url, query(asAgent()))).cookie!;
    const [byFirst, bySecond] = [await startConsent(url, paramsOf(query(asAgent())), browser), await startConsent(url, paramsOf(query(asAgent())), browser)];
    expect((await selectIdentity(url, byFirst, 'agent', { token: first.token })).status).toBe(200);
    expect(wentToConsentPage(await authorizeRaw(url, query(asAgent()), browser))).toBe(false);
    expect((await selectIdentity(url, bySecond, 'agent', { token: second.token })).status).toBe(200);
    expect(wentToConsentPage(await authorizeRaw(url, query(asAgent()), browser))).toBe(true);
    for (const agentOf of [first, second]) {
      const listed = await world.api('GET', '/v1/owner/oauth-grants', { token: agentOf.ownerToken });
      expect(listed.body.grants.map((grant: { agentId: string }) => grant.agentId)).toEqual([agentOf.id]);
    }
  });

  it('when the client asks for it with prompt=consent (or login, select_account), so a person can choose again', async () => {
    const cookie = await consent(request());
    for (const prompt of ['consent', 'login', 'select_account', 'login consent']) {
      expect(wentToConsentPage(await authorizeRaw(url, `${query(request())}&prompt=${encodeURIComponent(prompt)}`, cookie)), prompt).toBe(true);
    }
  });

  it("once the owner's verified email changed, for the owner's consent and its agent's: the page asks again", async () => {
    const movingOwner = 'remember-moving-owner@example.com';
    const moving = await world.createAgent(movingOwner, 'remember-moving-agent');
    const client = await newClient(url, [redirect]);
    const give = async (req: Request, identity: string, provider: 'human' | 'agent', cookie?: string) => {
      const { verifier: _verifier, ...params } = req;
      const pending = await startConsent(url, params, cookie);
      expect((await selectIdentity(url, pending, provider, { token: identity })).status).toBe(200);
      return pending.cookie;
    };
    const asOwner = () => request({ client_id: client });
    const asAgent = () => request({ client_id: client, scope: 'svc:agent', resource: `${url}/mcp` });
    const cookie = await give(asOwner(), await world.humanToken(movingOwner), 'human');
    await give(asAgent(), moving.token, 'agent', cookie);
    expect(wentToConsentPage(await authorizeRaw(url, query(asOwner()), cookie))).toBe(false);
    expect(wentToConsentPage(await authorizeRaw(url, query(asAgent()), cookie))).toBe(false);
    await world.api('GET', '/v1/me', { token: await world.humanToken('remember-moved-owner@example.com', { subject: `human-${movingOwner}` }) });
    expect(wentToConsentPage(await authorizeRaw(url, query(asOwner()), cookie))).toBe(true);
    expect(wentToConsentPage(await authorizeRaw(url, query(asAgent()), cookie))).toBe(true);
  });

  it('once the consent has expired', async () => {
    const client = await newClient(url, [redirect]);
    const cookie = await consent(request({ client_id: client }));
    // A margin of 10 s on each side of the deadline: a second may tick between the consent and the reads.
    world.gw.clock.advance((REMEMBERED_CONSENT_LIFETIME_S - 10) * 1000);
    try {
      expect(wentToConsentPage(await authorizeRaw(url, query(request({ client_id: client })), cookie))).toBe(false);
      world.gw.clock.advance(10_000);
      expect(wentToConsentPage(await authorizeRaw(url, query(request({ client_id: client })), cookie))).toBe(true);
    } finally {
      world.gw.clock.advance(-REMEMBERED_CONSENT_LIFETIME_S * 1000);
    }
  });

  it('once the owner revoked it, which also takes back the codes and tokens the client holds', async () => {
    const client = await newClient(url, [redirect]);
    const first = request({ client_id: client });
    const cookie = await consent(first);
    const second = request({ client_id: client });
    const issued = await exchange(second, callbackOf(await authorizeRaw(url, query(second), cookie), second).get('code')!);
    const third = request({ client_id: client });
    const unexchanged = callbackOf(await authorizeRaw(url, query(third), cookie), third).get('code')!;
    const agentRequest = request({ client_id: client, scope: 'svc:agent' });
    await consent(agentRequest, 'agent', cookie);

    const revoked = await revoke(client, agent.ownerToken);
    expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
    expect(revoked.body).toEqual({ clientId: client, revokedGrants: 2, revokedAccessTokens: 1 });
    expect(wentToConsentPage(await authorizeRaw(url, query(request({ client_id: client })), cookie))).toBe(true);
    expect(wentToConsentPage(await authorizeRaw(url, query(request({ client_id: client, scope: 'svc:agent' })), cookie))).toBe(true);
    const refused = await world.api('GET', '/v1/me', { token: issued.body.access_token });
    expect([refused.status, refused.headers.get('www-authenticate')]).toEqual([401, expect.stringContaining('error="invalid_token"')]);
    expect((await exchange(third, unexchanged)).body.error).toBe('invalid_grant');
    expect((await revoke(client, agent.ownerToken)).body).toEqual({ clientId: client, revokedGrants: 0, revokedAccessTokens: 0 });

    // A consent given again is remembered again.
    await consent(request({ client_id: client }), 'human', cookie);
    expect(wentToConsentPage(await authorizeRaw(url, query(request({ client_id: client })), cookie))).toBe(false);
  });
});

describe('GET and DELETE /v1/owner/oauth-grants', () => {
  it("lists the owner's remembered consents and its agents', newest first, with no secret", async () => {
    const client = await newClient(url, [redirect], { client_name: 'Listed client' });
    const cookie = await consent(request({ client_id: client }));
    await consent(request({ client_id: client, scope: 'svc:agent', resource: `${url}/mcp` }), 'agent', cookie);
    const listed = await world.api('GET', '/v1/owner/oauth-grants', { token: agent.ownerToken });
    expect(listed.status).toBe(200);
    const mine = listed.body.grants.filter((g: { clientId: string }) => g.clientId === client);
    expect(mine).toHaveLength(2);
    expect(mine).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ clientName: 'Listed client', scope: 'svc:agent', resource: `${url}/mcp`, agentId: agent.id, identity: { issuer: world.agentIssuer.issuer, subject: 'remember-agent' } }),
        expect.objectContaining({ clientName: 'Listed client', scope: 'svc:owner', resource: url, agentId: null, identity: { issuer: world.human.issuer, subject: `human-${owner}` } }),
      ]),
    );
    for (const grant of mine) {
      expect(grant.id).toMatch(/^grt_/);
      expect(grant.expiresAt - grant.createdAt).toBe(REMEMBERED_CONSENT_LIFETIME_S);
    }
    expect(JSON.stringify(listed.body)).not.toContain(cookie.split('=')[1]);
    const stranger = await world.api('GET', '/v1/owner/oauth-grants', { token: await world.humanToken('stranger@example.com') });
    expect(stranger.body.grants.filter((g: { clientId: string }) => g.clientId === client)).toEqual([]);
  });

  it("revokes only the caller's own consents", async () => {
    const client = await newClient(url, [redirect]);
    const cookie = await consent(request({ client_id: client }));
    const stranger = await revoke(client, await world.humanToken('stranger@example.com'));
    expect(stranger.body).toEqual({ clientId: client, revokedGrants: 0, revokedAccessTokens: 0 });
    expect(wentToConsentPage(await authorizeRaw(url, query(request({ client_id: client })), cookie))).toBe(false);
  });

  it('takes a human session only', async () => {
    const me = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body;
    const ownerOAuth = await world.accessToken({ sub: me.owner.id, scope: 'svc:owner', email: owner });
    for (const [method, path] of [['GET', '/v1/owner/oauth-grants'], ['DELETE', `/v1/owner/oauth-grants/${clientId}`]] as const) {
      const none = await world.api(method, path);
      expect([none.status, none.body.code], path).toEqual([401, 'unauthorized']);
      const oauthToken = await world.api(method, path, { token: ownerOAuth });
      expect([oauthToken.status, oauthToken.body.code], path).toEqual([403, 'human_required']);
      const asAgent = await world.api(method, path, { token: agent.token });
      expect([asAgent.status, asAgent.body.code], path).toEqual([403, 'owner_required']);
    }
    const bad = await revoke('not a client', agent.ownerToken);
    expect([bad.status, bad.body.code]).toEqual([400, 'invalid_input']);
  });

  it('is documented in the OpenAPI document', async () => {
    const document = (await world.api('GET', '/openapi.json')).body;
    expect(document.paths['/v1/owner/oauth-grants'].get.operationId).toBe('listOAuthGrants');
    expect(document.paths['/v1/owner/oauth-grants/{clientId}'].delete.operationId).toBe('revokeOAuthGrants');
    expect(document.paths['/v1/owner/oauth-grants/{clientId}'].delete.security).toEqual([{ humanSession: [] }]);
    expect(document.components.schemas.OAuthGrant).toBeDefined();
  });
});

describe('prompt=none', () => {
  it('is answered by a remembered consent, and otherwise sent back with consent_required, state and iss', async () => {
    const client = await newClient(url, [redirect]);
    const cookie = await consent(request({ client_id: client }));
    const silent = request({ client_id: client });
    callbackOf(await authorizeRaw(url, `${query(silent)}&prompt=none`, cookie), silent);
    for (const [req, browser] of [[request({ client_id: client, scope: 'svc:agent' }), cookie], [request({ client_id: client }), undefined]] as const) {
      const res = await authorizeRaw(url, `${query(req)}&prompt=none`, browser);
      const location = new URL(res.location!);
      expect([res.status, location.searchParams.get('error'), location.searchParams.get('state'), location.searchParams.get('iss')]).toEqual([303, 'consent_required', req.state, url]);
    }
    for (const prompt of ['none consent', 'bogus', '']) {
      const res = await authorizeRaw(url, `${query(request({ client_id: client }))}&prompt=${encodeURIComponent(prompt)}`, cookie);
      expect(new URL(res.location!).searchParams.get('error'), prompt).toBe('invalid_request');
    }
  });
});

describe('over plain http in live mode', () => {
  // Over http the binding cookie is the host's, not the gateway's: every port of 127.0.0.1 reads and sets it (found
  // from outside: a page on another port planted a value, then took codes for the owner who signed in with it). So a
  // live gateway served over http remembers no consent; dev mode keeps its convenience (test credit only).
  it('remembers no consent: the page says so, the same request shows the page again, and prompt=none is consent_required', async () => {
    const { config } = world.gw.gateway;
    expect(config.baseUrl.startsWith('http:')).toBe(true);
    config.mode = 'live';
    try {
      // A browser of its own (no cookie yet), so no consent an earlier test gave is in it.
      const client = clientId;
      const first = request({ client_id: client });
      const { verifier: _verifier, ...params } = first;
      const pending = await startConsent(url, params);
      expect(pending.html).toContain('Your consent is not remembered: this gateway is served over plain http');
      expect(pending.html).not.toContain('Your consent is remembered in this browser');
      const selected = await selectIdentity(url, pending, 'human', { token: await world.humanToken(owner) });
      expect(selected.status, JSON.stringify(selected.body)).toBe(200);

      const again = request({ client_id: client });
      expect(wentToConsentPage(await authorizeRaw(url, query(again), pending.cookie))).toBe(true);
      const silent = request({ client_id: client });
      const res = await authorizeRaw(url, `${query(silent)}&prompt=none`, pending.cookie);
      expect([res.status, new URL(res.location!).searchParams.get('error')]).toEqual([303, 'consent_required']);
    } finally {
      config.mode = 'dev';
    }
    // In dev mode the same browser's consent is remembered, as before.
    const client = otherClientId;
    const cookie = await consent(request({ client_id: client }));
    const pending = await startConsent(url, (({ verifier: _v, ...params }) => params)(request({ client_id: client, scope: 'svc:agent' })), cookie);
    expect(pending.html).toContain('Your consent is remembered in this browser');
    const silent = request({ client_id: client });
    callbackOf(await authorizeRaw(url, `${query(silent)}&prompt=none`, cookie), silent);
  });
});
