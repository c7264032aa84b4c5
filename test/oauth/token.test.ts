import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { startWorld, type World } from '../support/world.ts';
import { startTestGateway } from '../support/gateway.ts';
import { onPostgres } from '../support/database.ts';
import { holdRows } from '../support/row-locks.ts';
import { hashCode } from '../../src/oauth/code.ts';
import { newClient, obtainCode, token, tokenParams, type IssuedCode } from './helpers.ts';

let world: World;
let url: string;
let clientId: string;
let otherClientId: string;
let agent: { id: string; token: string };
const owner = 'token-owner@example.com';
const redirect = 'http://127.0.0.1:9/callback';

beforeAll(async () => {
  world = await startWorld();
  url = world.url;
  clientId = await newClient(url, [redirect, 'http://127.0.0.1/loop']);
  otherClientId = await newClient(url, [redirect]);
  agent = await world.createAgent(owner, 'agent-token');
});
afterAll(() => world.close());

async function ownerCode(options: { resource?: string; redirectUri?: string } = {}): Promise<IssuedCode> {
  return obtainCode(url, 'human', await world.humanToken(owner), { clientId, ...options });
}

function expectOAuthError(res: { status: number; body: any; headers: Headers }, status: number, error: string) {
  expect(res.status).toBe(status);
  expect(res.body).toEqual({ error, error_description: expect.any(String) });
  expect(res.headers.get('cache-control')).toBe('no-store');
  expect(res.headers.get('pragma')).toBe('no-cache');
}

describe('POST /oauth/token issues', () => {
  it('an owner token: ES256 at+jwt with the RFC 9068 claims, never cached, no refresh token', async () => {
    const issued = await ownerCode();
    const res = await token(url, tokenParams(issued));
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.headers.get('pragma')).toBe('no-cache');
    expect(res.body).toEqual({ access_token: expect.any(String), token_type: 'Bearer', expires_in: 600, scope: 'svc:owner' });
    const header = decodeProtectedHeader(res.body.access_token);
    expect(header).toEqual({ alg: 'ES256', typ: 'at+jwt', kid: expect.any(String) });
    const claims = decodeJwt(res.body.access_token);
    expect(claims).toEqual({
      iss: url,
      sub: expect.stringMatching(/^own_/),
      aud: url,
      client_id: clientId,
      scope: 'svc:owner',
      actor_type: 'owner',
      email: owner,
      jti: expect.any(String),
      iat: expect.any(Number),
      exp: (claims.iat as number) + 600,
    });
    const me = await world.api('GET', '/v1/me', { token: res.body.access_token });
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ kind: 'owner', credential: 'oauth', owner: { email: owner } });
  });

  it('an agent token (svc:agent) that authenticates as the agent', async () => {
    const issued = await obtainCode(url, 'agent', agent.token, { clientId });
    const res = await token(url, tokenParams(issued));
    expect(res.status).toBe(200);
    expect(res.body.scope).toBe('svc:agent');
    expect(decodeJwt(res.body.access_token)).toMatchObject({ sub: agent.id, actor_type: 'agent', scope: 'svc:agent', aud: url });
    const me = await world.api('GET', '/v1/me', { token: res.body.access_token });
    expect(me.body).toMatchObject({ kind: 'agent', credential: 'oauth', agent: { id: agent.id } });
  });

  it("an agent token bound to its owner's verified email: it stops when that email changes, as the agent identity does", async () => {
    const ownerEmail = 'token-moving-owner@example.com';
    const moving = await world.createAgent(ownerEmail, 'agent-token-moving');
    const res = await token(url, tokenParams(await obtainCode(url, 'agent', moving.token, { clientId })));
    expect(res.status).toBe(200);
    expect(decodeJwt(res.body.access_token)).toMatchObject({ sub: moving.id, actor_type: 'agent', email: ownerEmail });
    expect((await world.api('GET', '/v1/me', { token: res.body.access_token })).status).toBe(200);
    // The owner's email changes at the human provider (same subject): the agent's identity and its token both stop.
    await world.api('GET', '/v1/me', { token: await world.humanToken('token-moved-owner@example.com', { subject: `human-${ownerEmail}` }) });
    for (const credential of [moving.token, res.body.access_token]) {
      const refused = await world.api('GET', '/v1/me', { token: credential });
      expect(refused.status).toBe(403);
      expect(refused.body.code).toBe('owner_claim_required');
    }
  });

  it('an MCP-audience token that the API refuses (wrong audience)', async () => {
    const issued = await ownerCode({ resource: `${url}/mcp` });
    const res = await token(url, tokenParams(issued));
    expect(res.status).toBe(200);
    expect(decodeJwt(res.body.access_token).aud).toBe(`${url}/mcp`);
    const me = await world.api('GET', '/v1/me', { token: res.body.access_token });
    expect(me.status).toBe(401);
  });

  it('for a loopback redirect requested on another port, bound to that exact URI', async () => {
    const issued = await ownerCode({ redirectUri: 'http://127.0.0.1:61234/loop' });
    expectOAuthError(await token(url, { ...tokenParams(issued), redirect_uri: 'http://127.0.0.1/loop' }), 400, 'invalid_grant');
    expect((await token(url, tokenParams(issued))).status).toBe(200);
  });
});

describe('POST /oauth/token refuses', () => {
  it('a JSON body, or none, with 415 invalid_request', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, tokenParams(issued), 'application/json'), 415, 'invalid_request');
    const bare = await fetch(`${url}/oauth/token`, { method: 'POST' });
    expect(bare.status).toBe(415);
    expect((await bare.json()).error).toBe('invalid_request');
  });

  it('a body it would have to decode with 415 invalid_request: a Content-Encoding, or a charset other than UTF-8 (found from outside: read as plain UTF-8)', async () => {
    const issued = await ownerCode();
    const form = new URLSearchParams(tokenParams(issued)).toString();
    const send = (headers: Record<string, string>, body: string | Uint8Array<ArrayBuffer> = form) =>
      fetch(`${url}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body });
    const refusals: Array<[Record<string, string>, string | Uint8Array<ArrayBuffer>, string]> = [
      [{ 'content-encoding': 'br' }, form, 'request bodies are read as sent, not decoded: send it without Content-Encoding (br)'],
      [{ 'content-encoding': 'gzip' }, new Uint8Array(gzipSync(form)), 'request bodies are read as sent, not decoded: send it without Content-Encoding (gzip)'],
      [{ 'content-type': 'application/x-www-form-urlencoded; charset=iso-8859-1' }, form, 'a form body is UTF-8 (WHATWG URL, application/x-www-form-urlencoded): charset=iso-8859-1 is not taken'],
    ];
    for (const [headers, body, description] of refusals) {
      const res = await send(headers, body);
      expect([res.status, await res.json()], JSON.stringify(headers)).toEqual([415, { error: 'invalid_request', error_description: description }]);
      expect([res.headers.get('cache-control'), res.headers.get('pragma')]).toEqual(['no-store', 'no-cache']);
    }
    // Nothing of the code was spent; UTF-8 named, and the identity coding, are read as sent.
    const taken = await send({ 'content-type': 'application/x-www-form-urlencoded; charset=UTF-8', 'content-encoding': 'identity' });
    expect(taken.status, await taken.clone().text()).toBe(200);
  });

  for (const [param, error] of [
    ['grant_type', 'invalid_request'],
    ['code', 'invalid_request'],
    ['client_id', 'invalid_request'],
    ['redirect_uri', 'invalid_request'],
    ['resource', 'invalid_request'],
    ['code_verifier', 'invalid_grant'],
  ] as const) {
    it(`a missing ${param} with 400 ${error}`, async () => {
      const issued = await ownerCode();
      expectOAuthError(await token(url, { ...tokenParams(issued), [param]: undefined }), 400, error);
      // The refusal did not spend the code.
      expect((await token(url, tokenParams(issued))).status).toBe(200);
    });
  }

  it('a repeated parameter with 400 invalid_request', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, { ...tokenParams(issued), resource: [url, `${url}/mcp`] }), 400, 'invalid_request');
  });

  it('another grant type with 400 unsupported_grant_type', async () => {
    const issued = await ownerCode();
    for (const grant of ['refresh_token', 'client_credentials', 'password', 'urn:ietf:params:oauth:grant-type:device_code']) {
      expectOAuthError(await token(url, { ...tokenParams(issued), grant_type: grant }), 400, 'unsupported_grant_type');
    }
  });

  it('an unknown client with 400 invalid_client', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, { ...tokenParams(issued), client_id: 'cli_unknown' }), 400, 'invalid_client');
  });

  it('client credentials with invalid_client (every client is public): 401 with a challenge for a header, 400 in the body; the code stays usable', async () => {
    const issued = await ownerCode();
    const basic = `Basic ${Buffer.from(`${clientId}:made-up`).toString('base64')}`;
    const byHeader = await token(url, tokenParams(issued), undefined, { authorization: basic });
    expectOAuthError(byHeader, 401, 'invalid_client');
    expect(byHeader.headers.get('www-authenticate')).toBe('Basic realm="oauth"');
    const bearer = await token(url, tokenParams(issued), undefined, { authorization: 'Bearer abc' });
    expectOAuthError(bearer, 401, 'invalid_client');
    expect(bearer.headers.get('www-authenticate')).toBe('Bearer realm="oauth"');
    for (const extra of [{ client_secret: 'made-up' }, { client_assertion: 'e30.e30.', client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer' }]) {
      expectOAuthError(await token(url, { ...tokenParams(issued), ...extra }), 400, 'invalid_client');
    }
    expect((await token(url, tokenParams(issued))).status).toBe(200);
  });

  it('a code issued to another client with 400 invalid_grant', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, { ...tokenParams(issued), client_id: otherClientId }), 400, 'invalid_grant');
  });

  it('a malformed code_verifier with 400 invalid_request', async () => {
    const issued = await ownerCode();
    for (const verifier of ['a'.repeat(42), 'a'.repeat(129), `${'a'.repeat(42)}!`]) {
      expectOAuthError(await token(url, { ...tokenParams(issued), code_verifier: verifier }), 400, 'invalid_request');
    }
  });

  it('a PKCE mismatch with 400 invalid_grant, leaving the code usable by its holder', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, { ...tokenParams(issued), code_verifier: 'b'.repeat(43) }), 400, 'invalid_grant');
    expect((await token(url, tokenParams(issued))).status).toBe(200);
  });

  it('a redirect_uri mismatch with 400 invalid_grant', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, { ...tokenParams(issued), redirect_uri: 'http://127.0.0.1:9/callback/' }), 400, 'invalid_grant');
  });

  it('a resource mismatch with 400 invalid_target', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, { ...tokenParams(issued), resource: `${url}/mcp` }), 400, 'invalid_target');
    expectOAuthError(await token(url, { ...tokenParams(issued), resource: 'https://other.example' }), 400, 'invalid_target');
  });

  it('an unknown code with 400 invalid_grant', async () => {
    const issued = await ownerCode();
    expectOAuthError(await token(url, { ...tokenParams(issued), code: 'c'.repeat(43) }), 400, 'invalid_grant');
  });

  it('a code older than one minute with 400 invalid_grant', async () => {
    const issued = await ownerCode();
    world.gw.clock.advance(61_000);
    try {
      expectOAuthError(await token(url, tokenParams(issued)), 400, 'invalid_grant');
    } finally {
      world.gw.clock.advance(-61_000);
    }
  });

  it('a replayed code with 400 invalid_grant, and revokes the token the code issued', async () => {
    const issued = await ownerCode();
    const first = await token(url, tokenParams(issued));
    expect(first.status).toBe(200);
    expect((await world.api('GET', '/v1/me', { token: first.body.access_token })).status).toBe(200);
    const replay = await token(url, tokenParams(issued));
    expectOAuthError(replay, 400, 'invalid_grant');
    const revoked = await world.api('GET', '/v1/me', { token: first.body.access_token });
    expect(revoked.status).toBe(401);
    expect(revoked.headers.get('www-authenticate')).toContain('error="invalid_token"');
  });

  it('a replay without the verifier with 400 invalid_grant, but revokes nothing', async () => {
    const issued = await ownerCode();
    const first = await token(url, tokenParams(issued));
    expectOAuthError(await token(url, { ...tokenParams(issued), code_verifier: 'b'.repeat(43) }), 400, 'invalid_grant');
    expect((await world.api('GET', '/v1/me', { token: first.body.access_token })).status).toBe(200);
  });

  it('concurrent exchanges of one code: one token, and it ends up revoked', async () => {
    const issued = await ownerCode();
    const results = await Promise.all(Array.from({ length: 4 }, () => token(url, tokenParams(issued))));
    const winners = results.filter((r) => r.status === 200);
    expect(winners).toHaveLength(1);
    expect(results.filter((r) => r.status === 400).every((r) => r.body.error === 'invalid_grant')).toBe(true);
    expect((await world.api('GET', '/v1/me', { token: winners[0]!.body.access_token })).status).toBe(401);
  });
});

describe('POST /oauth/token racing a withdrawal', () => {
  it.runIf(onPostgres())('says the grant was withdrawn, not that the code was used, when the withdrawal takes the code between its read and its use (found from outside)', async () => {
    const issued = await ownerCode();
    const codeHash = hashCode(issued.code);
    // Another transaction holds the code's row, then deletes it (as withdrawing the grant does) once the exchange waits on it.
    const withdrawal = await holdRows(world.gw.database.url!, 'SELECT 1 FROM oauth_codes WHERE code_hash = $1 FOR UPDATE', [codeHash], async (tx) => {
      await tx.query('DELETE FROM oauth_codes WHERE code_hash = $1', [codeHash]);
    });
    let released = false;
    try {
      const exchanging = token(url, tokenParams(issued));
      await expect
        .poll(async () => (await world.gw.gateway.db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0]!.n, { timeout: 10_000 })
        .toBeGreaterThanOrEqual(1);
      released = true;
      await withdrawal.release();
      const res = await exchanging;
      expectOAuthError(res, 400, 'invalid_grant');
      expect(res.body.error_description).toMatch(/withdrew the grant/);
    } finally {
      if (!released) await withdrawal.release();
    }
  });
});

describe('POST /oauth/token without a signing key', () => {
  it('answers 503 temporarily_unavailable in live mode without ACG_SIGNING_KEY, as registration does', async () => {
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1' } });
    try {
      const res = await token(live.url, { grant_type: 'authorization_code', code: 'x', client_id: 'y', redirect_uri: redirect, code_verifier: 'v'.repeat(43), resource: 'http://127.0.0.1:1' });
      expectOAuthError(res, 503, 'temporarily_unavailable');
      const registration = await fetch(`${live.url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ redirect_uris: ['https://a.example/cb'] }),
      });
      expect(registration.status).toBe(503);
      expect((await registration.json()).error).toBe('temporarily_unavailable');
      // The dev-mode login of the built-in issuers never exists in live mode.
      const devLogin = await fetch(`${live.url}/dev/issuers/human/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'a@b.c' }) });
      expect(devLogin.status).toBe(404);
    } finally {
      await live.close();
    }
  });
});
