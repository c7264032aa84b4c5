// POST /oauth/revoke (RFC 7009): a client gives back what it holds, as on sign-out. Revoking an access token
// revokes the grant behind it for the token's owner or agent (the remembered consents in every browser, the codes
// not yet exchanged, every live token of that client for it), and nothing of another client or subject.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import { authorizeQuery, authorizeRaw, newClient, pkcePair, selectIdentity, startConsent, token, type AuthorizeParams, type AuthorizeResult, type Json } from './helpers.ts';

let world: World;
let url: string;
let agent: { id: string; token: string; ownerToken: string };
const redirect = 'http://127.0.0.1:9/callback';
const owner = 'revoke-owner@example.com';

beforeAll(async () => {
  world = await startWorld();
  url = world.url;
  agent = await world.createAgent(owner, 'revoke-agent');
});
afterAll(() => world.close());

interface Request extends AuthorizeParams {
  verifier: string;
}

function request(overrides: AuthorizeParams): Request {
  const { verifier, challenge } = pkcePair();
  return { response_type: 'code', code_challenge_method: 'S256', redirect_uri: redirect, code_challenge: challenge, resource: url, state: `st-${Math.random()}`, scope: 'svc:owner', verifier, ...overrides };
}

function query(req: Request, extra = ''): string {
  const { verifier: _verifier, ...params } = req;
  return authorizeQuery(params) + extra;
}

async function consent(req: Request, provider: 'human' | 'agent', cookie?: string): Promise<string> {
  const { verifier: _verifier, ...params } = req;
  const pending = await startConsent(url, params, cookie);
  const selected = await selectIdentity(url, pending, provider, { token: provider === 'human' ? await world.humanToken(owner) : agent.token });
  expect(selected.status, JSON.stringify(selected.body)).toBe(200);
  return pending.cookie;
}

/** A token through a remembered consent in `cookie`'s browser (prompt=none: no page). */
async function silentToken(req: Request, cookie: string): Promise<string> {
  const res = await authorizeRaw(url, query(req, '&prompt=none'), cookie);
  const code = new URL(res.location!).searchParams.get('code');
  expect(code, res.location ?? '').toBeTruthy();
  const issued = await token(url, { grant_type: 'authorization_code', code: code!, client_id: req.client_id!, redirect_uri: req.redirect_uri!, code_verifier: req.verifier, resource: req.resource! });
  expect(issued.status, JSON.stringify(issued.body)).toBe(200);
  return issued.body.access_token;
}

function consentRequired(res: AuthorizeResult): boolean {
  return res.status === 303 && new URL(res.location!).searchParams.get('error') === 'consent_required';
}

async function revoke(params: Record<string, string>, headers: Record<string, string> = {}): Promise<Json> {
  const res = await fetch(`${url}/oauth/revoke`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(params) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text === '' ? undefined : JSON.parse(text) };
}

async function live(accessToken: string): Promise<number> {
  return (await world.api('GET', '/v1/me', { token: accessToken })).status;
}

describe('a replayed authorization code', () => {
  it("takes back the grant behind it, as a revocation does: every token of the client for that owner (not only the code's), its remembered consents and codes; another client's stays (found from outside)", async () => {
    const client = await newClient(url, [redirect]);
    const other = await newClient(url, [redirect]);
    const browser = await consent(request({ client_id: client }), 'human');
    const otherBrowser = await consent(request({ client_id: other }), 'human');
    const first = request({ client_id: client });
    const code = new URL((await authorizeRaw(url, query(first, '&prompt=none'), browser)).location!).searchParams.get('code')!;
    const exchange = () => token(url, { grant_type: 'authorization_code', code, client_id: client, redirect_uri: redirect, code_verifier: first.verifier, resource: url });
    const firstToken = (await exchange()).body.access_token as string;
    const laterToken = await silentToken(request({ client_id: client }), browser);
    const otherClients = await silentToken(request({ client_id: other }), otherBrowser);
    expect([await live(firstToken), await live(laterToken)]).toEqual([200, 200]);

    const replay = await exchange();
    expect([replay.status, replay.body.error]).toEqual([400, 'invalid_grant']);
    expect(replay.body.error_description).toContain('already been used');
    expect([await live(firstToken), await live(laterToken)]).toEqual([401, 401]);
    // The remembered consent went with it: no more codes without the page.
    expect(consentRequired(await authorizeRaw(url, query(request({ client_id: client }), '&prompt=none'), browser))).toBe(true);
    expect(await live(otherClients)).toBe(200);
    expect(consentRequired(await authorizeRaw(url, query(request({ client_id: other }), '&prompt=none'), otherBrowser))).toBe(false);
  });
});

describe('POST /oauth/revoke', () => {
  it("takes back the token, its client's other tokens and remembered consents for the same owner, in every browser: prompt=none then needs the page", async () => {
    const client = await newClient(url, [redirect]);
    const other = await newClient(url, [redirect]);
    const firstBrowser = await consent(request({ client_id: client }), 'human');
    const secondBrowser = await consent(request({ client_id: client }), 'human');
    const otherClientBrowser = await consent(request({ client_id: other }), 'human');
    const agentBrowser = await consent(request({ client_id: client, scope: 'svc:agent' }), 'agent');
    const signingOut = await silentToken(request({ client_id: client }), firstBrowser);
    const elsewhere = await silentToken(request({ client_id: client }), secondBrowser);
    const otherClients = await silentToken(request({ client_id: other }), otherClientBrowser);
    const agents = await silentToken(request({ client_id: client, scope: 'svc:agent' }), agentBrowser);
    const unexchanged = request({ client_id: client });
    const code = new URL((await authorizeRaw(url, query(unexchanged, '&prompt=none'), firstBrowser)).location!).searchParams.get('code')!;

    const res = await revoke({ token: signingOut, token_type_hint: 'access_token', client_id: client });
    expect([res.status, res.body, res.headers.get('cache-control')]).toEqual([200, undefined, 'no-store']);

    expect([await live(signingOut), await live(elsewhere)]).toEqual([401, 401]);
    for (const browser of [firstBrowser, secondBrowser]) expect(consentRequired(await authorizeRaw(url, query(request({ client_id: client }), '&prompt=none'), browser))).toBe(true);
    const exchanged = await token(url, { grant_type: 'authorization_code', code, client_id: client, redirect_uri: redirect, code_verifier: unexchanged.verifier, resource: url });
    expect(exchanged.body.error).toBe('invalid_grant');
    // Another client's hold, and the same client's hold on the owner's agent, are not this grant.
    expect([await live(otherClients), await live(agents)]).toEqual([200, 200]);
    expect(consentRequired(await authorizeRaw(url, query(request({ client_id: other }), '&prompt=none'), otherClientBrowser))).toBe(false);
    expect(consentRequired(await authorizeRaw(url, query(request({ client_id: client, scope: 'svc:agent' }), '&prompt=none'), agentBrowser))).toBe(false);

    // Revoking again, or a token that is not a live one of ours, is no error: nothing to revoke (RFC 7009 §2.2).
    for (const stale of [signingOut, 'not-a-token', `${signingOut.slice(0, -4)}AAAA`]) {
      expect((await revoke({ token: stale, client_id: client })).status, stale).toBe(200);
    }
    // A revoked token revokes nothing more: the owner signs in again in that browser, and whoever still holds the
    // old token cannot take the new sign-in back (found from outside).
    const again = await consent(request({ client_id: client }), 'human', firstBrowser);
    const fresh = await silentToken(request({ client_id: client }), again);
    expect((await revoke({ token: signingOut, client_id: client })).status).toBe(200);
    expect(await live(fresh)).toBe(200);
    expect(consentRequired(await authorizeRaw(url, query(request({ client_id: client }), '&prompt=none'), again))).toBe(false);
  });

  it('refuses a token issued to another client, and revokes nothing', async () => {
    const client = await newClient(url, [redirect]);
    const thief = await newClient(url, [redirect]);
    const browser = await consent(request({ client_id: client }), 'human');
    const held = await silentToken(request({ client_id: client }), browser);
    const res = await revoke({ token: held, client_id: thief });
    expect([res.status, res.body.error]).toEqual([400, 'invalid_request']);
    expect(await live(held)).toBe(200);
    expect(consentRequired(await authorizeRaw(url, query(request({ client_id: client }), '&prompt=none'), browser))).toBe(false);
  });

  it('answers each malformed request with its OAuth error', async () => {
    const client = await newClient(url, [redirect]);
    const cases: Array<[string, Record<string, string> | string, Record<string, string>, number, string]> = [
      ['no token', { client_id: client }, {}, 400, 'invalid_request'],
      ['no client_id', { token: 'x' }, {}, 400, 'invalid_request'],
      ['unknown client', { token: 'x', client_id: 'cli_unknown' }, {}, 400, 'invalid_client'],
      ['a secret in the body', { token: 'x', client_id: client, client_secret: 's' }, {}, 400, 'invalid_client'],
      ['an Authorization header', { token: 'x', client_id: client }, { authorization: 'Basic eDp5' }, 401, 'invalid_client'],
      ['a repeated parameter', `token=a&token=b&client_id=${client}`, {}, 400, 'invalid_request'],
    ];
    for (const [name, params, headers, status, error] of cases) {
      const res =
        typeof params === 'string'
          ? await (async () => {
              const raw = await fetch(`${url}/oauth/revoke`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: params });
              return { status: raw.status, body: await raw.json() };
            })()
          : await revoke(params, headers);
      expect([res.status, res.body?.error], name).toEqual([status, error]);
    }
    const json = await fetch(`${url}/oauth/revoke`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: 'x', client_id: client }) });
    expect([json.status, (await json.json()).error]).toEqual([415, 'invalid_request']);
  });

  it('is in the discovery document and the OpenAPI document', async () => {
    const metadata = (await world.api('GET', '/.well-known/oauth-authorization-server')).body;
    expect(metadata.revocation_endpoint).toBe(`${url}/oauth/revoke`);
    expect(metadata.revocation_endpoint_auth_methods_supported).toEqual(['none']);
    const document = (await world.api('GET', '/openapi.json')).body;
    expect(document.paths['/oauth/revoke'].post.operationId).toBe('revokeToken');
  });
});
