// Every authenticated route × every kind of credential, good and bad, gets exactly the documented
// status and code. The route list comes from the served OpenAPI document, so new routes join the
// matrix automatically.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/operator/credential.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { startWorld, type World } from '../support/world.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { ALL_SCOPES, grant, mint, openShop } from '../support/ledger-fixture.ts';
import { authorizeQuery, authorizeRaw, newClient, pkcePair } from '../oauth/helpers.ts';

interface Route {
  method: string;
  path: string;
  /** The path as documented, with its `{parameters}`. */
  template: string;
  kinds: string[];
}

const LETTER_KIND: Record<string, string> = { H: 'human', A: 'agent', O: 'owner', M: 'merchant' };

let world: World;
let routes: Route[];
const tokens: Record<string, string> = {};

beforeAll(async () => {
  world = await startWorld();
  const owner = await world.createAgent('owner@example.com', 'matrix-agent');
  await world.createAgent('owner@example.com', 'frozen-agent');
  const frozen = (await world.api('GET', '/v1/owner/agents', { token: owner.ownerToken })).body.agents.find(
    (a: { identity: { subject: string } }) => a.identity.subject === 'frozen-agent',
  );
  await world.api('POST', `/v1/owner/agents/${frozen.id}/freeze`, { token: owner.ownerToken });
  const me = await world.api('GET', '/v1/me', { token: owner.ownerToken });
  const merchant = await seedMerchantKey(world, { scopes: ['access:check', 'offers:read', 'offers:write', 'redemptions:release', 'redemptions:capture', 'redemptions:refund', 'earnings:read', 'webhooks:read', 'webhooks:write', 'events:read', 'evidence:read'] });
  const revoked = await seedMerchantKey(world, { revoked: true });
  const nowS = world.gw.clock.nowS();
  Object.assign(tokens, {
    human: owner.ownerToken,
    agent: owner.token,
    agentOAuth: await world.accessToken({ sub: owner.id, scope: 'svc:agent' }),
    owner: await world.accessToken({ sub: me.body.owner.id, scope: 'svc:owner', email: 'owner@example.com' }),
    merchant: merchant.key,
    frozenAgent: await world.agentToken('frozen-agent', 'owner@example.com'),
    expired: await world.human.mint({ sub: 'x', email: 'owner@example.com', email_verified: true }, { expiresInS: -120 }),
    wrongIssuer: await world.human.mint({ sub: 'x', email: 'owner@example.com', email_verified: true }, { issuer: 'https://evil.example' }),
    wrongAudience: await world.human.mint({ sub: 'x', email: 'owner@example.com', email_verified: true }, { audience: 'someone-else' }),
    badSignature: await world.human.mint({ sub: 'x', email: 'owner@example.com', email_verified: true }, { foreignKey: true }),
    algNone: world.human.mintUnsigned({ sub: 'x', email: 'owner@example.com', email_verified: true }),
    hmacWithPublicKey: world.human.mintHmacWithPublicKey({ sub: 'x', email: 'owner@example.com', email_verified: true }),
    voucherTyped: await world.gw.gateway.signing.sign(
      { iss: world.gw.config.baseUrl, aud: world.gw.config.baseUrl, sub: owner.id, scope: 'svc:agent', actor_type: 'agent', exp: Math.floor(Date.now() / 1000) + 600 },
      'voucher+jwt',
    ),
    accessTokenForMcp: await world.accessToken({ sub: owner.id, scope: 'svc:agent' }, `${world.gw.config.baseUrl}/mcp`),
    // Signed with our own key, but not as the token endpoint signs: no exp, a life beyond 600 s, an iat ahead
    // (found from outside: each was accepted).
    ...Object.fromEntries(
      await Promise.all(
        (
          [
            ['accessTokenWithoutExp', { iat: nowS }],
            ['accessTokenOfTenYears', { iat: nowS, exp: nowS + 10 * 365 * 86_400 }],
            ['accessTokenIssuedAhead', { iat: nowS + 3_000, exp: nowS + 3_300 }],
            ['accessTokenWithoutIat', { exp: nowS + 600 }],
          ] as const
        ).map(async ([name, times]) => [
          name,
          await world.gw.gateway.signing.sign(
            { iss: world.gw.config.baseUrl, aud: world.gw.config.baseUrl, sub: me.body.owner.id, scope: 'svc:owner', actor_type: 'owner', email: 'owner@example.com', client_id: 'test-client', jti: `matrix-${name}`, ...times },
            'at+jwt',
          ),
        ]),
      ),
    ),
    // Genuine tokens spelled another way: the signature's last character changed within the bits base64url ignores
    // (found from outside: each verified).
    respelledHuman: respelled(owner.ownerToken),
    respelledAccessToken: respelled(await world.accessToken({ sub: owner.id, scope: 'svc:agent' })),
    unregisteredAgent: await world.agentToken('nobody-registered-me', 'owner@example.com'),
    wrongOwnerEmail: await world.agentToken('matrix-agent', 'someone-else@example.com'),
    unverifiedOwner: await world.humanToken('unverified@example.com', { verified: false }),
    revokedKey: revoked.key,
    malformedKey: 'acg_mk_not-a-real-key',
  });
  const document = (await world.api('GET', '/openapi.json')).body;
  routes = [];
  for (const [path, operations] of Object.entries<Record<string, { security?: unknown[]; description?: string }>>(document.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      // The matrix is about the four credential kinds; operator routes take their own credential (test/sandbox/).
      // /mcp is its own resource (its challenge, its audience, no agent identity JWTs): test/mcp/endpoint.test.ts.
      if (!operation.security?.length || path === '/mcp' || operation.security.some((scheme) => 'operator' in (scheme as object))) continue;
      const letters = /Authentication: ([HAOM, ]+)/.exec(operation.description ?? '')?.[1] ?? '';
      routes.push({ method: method.toUpperCase(), path: path.replace(/\{[^}]+\}/g, 'unknown_id'), template: path, kinds: letters.split(', ').map((l) => LETTER_KIND[l]!) });
    }
  }
});
afterAll(() => world.close());

const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** The same token with its ES256 signature's last character moved within the 4 bits a decoder ignores (64 bytes in 86 characters). */
function respelled(token: string): string {
  const last = BASE64URL.indexOf(token.at(-1)!);
  const other = token.slice(0, -1) + BASE64URL[last ^ 1];
  expect(Buffer.from(other.split('.')[2]!, 'base64url')).toEqual(Buffer.from(token.split('.')[2]!, 'base64url'));
  return other;
}

function call(route: Route, token?: string) {
  const body = ['POST', 'PUT', 'PATCH'].includes(route.method) ? {} : undefined;
  return world.api(route.method, route.path, { token, body, key: body ? `matrix-${Math.random()}` : undefined });
}

const INVALID = [
  'expired', 'wrongIssuer', 'wrongAudience', 'badSignature', 'algNone', 'hmacWithPublicKey', 'voucherTyped', 'accessTokenForMcp', 'revokedKey', 'malformedKey',
  'accessTokenWithoutExp', 'accessTokenOfTenYears', 'accessTokenIssuedAhead', 'accessTokenWithoutIat', 'respelledHuman', 'respelledAccessToken',
];

describe('the auth matrix', () => {
  it('covers the routes that exist', () => {
    expect(routes.length).toBeGreaterThan(8);
    expect(routes.every((r) => r.kinds.length > 0)).toBe(true);
  });

  it('answers no credential with 401 and a resource_metadata challenge without an error', async () => {
    for (const route of routes) {
      const res = await call(route);
      expect(res.status, `${route.method} ${route.path}`).toBe(401);
      expect(res.body.code).toBe('unauthorized');
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer resource_metadata="http:\/\/127\.0\.0\.1:\d+\/\.well-known\/oauth-protected-resource"$/);
    }
  });

  it('answers every invalid credential with 401 invalid_token', async () => {
    for (const route of routes) {
      for (const name of INVALID) {
        const res = await call(route, tokens[name]);
        expect(res.status, `${name} on ${route.method} ${route.path}`).toBe(401);
        expect(res.body.code).toBe('unauthorized');
        expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"');
        // An expired token says when it expired (found from outside: jose's "exp" claim timestamp check failed).
        if (name === 'expired') expect(res.body.detail).toMatch(/^invalid human identity token: it expired at \d{4}-\d\d-\d\dT[\d:.]+Z \(now \d{4}-/);
      }
    }
  });

  it('refuses valid tokens of identities that do not hold with 403 and the specific code', async () => {
    for (const route of routes) {
      const cases = [
        ['unregisteredAgent', 'agent_not_registered'],
        ['wrongOwnerEmail', 'owner_claim_required'],
        ['unverifiedOwner', 'owner_claim_required'],
      ] as const;
      for (const [name, code] of cases) {
        const res = await call(route, tokens[name]);
        expect(res.status, `${name} on ${route.method} ${route.path}`).toBe(403);
        expect(res.body.code).toBe(code);
      }
    }
  });

  it('lets each credential kind through exactly where the route admits it, and names the refusal elsewhere', async () => {
    const kinds = [
      ['human', 'human'],
      ['agent', 'agent'],
      ['agentOAuth', 'agent'],
      ['owner', 'owner'],
      ['merchant', 'merchant'],
      ['frozenAgent', 'agent'],
    ] as const;
    for (const route of routes) {
      for (const [name, kind] of kinds) {
        const res = await call(route, tokens[name]);
        const where = `${name} on ${route.method} ${route.path}`;
        if (route.kinds.includes(kind)) {
          expect(res.status, where).not.toBe(401);
          if (res.status === 403) expect(res.body.code, where).toBe('FROZEN');
        } else {
          expect(res.status, where).toBe(403);
          const expected =
            kind === 'merchant' || route.kinds.every((k) => k === 'merchant')
              ? 'forbidden'
              : kind === 'owner' && route.kinds.includes('human')
                ? 'human_required'
                : kind === 'agent'
                  ? 'owner_required'
                  : 'forbidden';
          expect(res.body.code, where).toBe(expected);
          // The sentence names who the route is for (found from outside: a merchant's route told an agent it was for
          // "the agent's owner"; another said "a owner credential").
          if (expected === 'owner_required') {
            // Evidence names its own readers: the hold's agent's owner, not a merchant's (found from outside).
            const readers = route.template === '/v1/redemptions/{id}/evidence' ? "the owner of the hold's agent or the holding merchant's API key (scope evidence:read), not an agent" : undefined;
            expect(res.body.detail, where).toBe(readers ? `this route is for ${readers}` : route.kinds.includes('merchant') ? "this route is for a merchant's owner or its API key, not an agent" : "this route is for the agent's owner");
          }
          expect(res.body.detail, where).not.toMatch(/\ba [aeiou]/);
          // An OAuth token that the other scope we issue would let through is told which (RFC 6750 §3.1), so a client
          // knows to authorize again for it; no other refusal carries a challenge (found from outside).
          const needed = name === 'agentOAuth' && route.kinds.includes('owner') ? 'svc:owner' : name === 'owner' && route.kinds.includes('agent') ? 'svc:agent' : undefined;
          const challenge = res.headers.get('www-authenticate');
          if (needed) {
            expect(challenge, where).toMatch(new RegExp(`^Bearer resource_metadata="${world.url}/\\.well-known/oauth-protected-resource", error="insufficient_scope", error_description="[^"]+", scope="${needed}"$`));
          } else {
            expect(challenge, where).toBeNull();
          }
        }
      }
    }
  });

  it("keeps an API key to its own merchant: another merchant's resources look like missing ones on merchant routes, 403 elsewhere", async () => {
    const owner = await openShop(world);
    const offer = await owner.offer();
    const buyer = await world.createAgent('buyer@example.com', 'matrix-buyer');
    await grant(world, buyer.id, 5_000_000n);
    const hold = (await mint(world, buyer.token, offer.id)).body.redemption.id as string;
    const stranger = await seedMerchantKey(world, { ownerEmail: 'stranger@example.com', scopes: ALL_SCOPES });
    const fill = (template: string) =>
      template
        .replace(/^\/v1\/merchants\/\{id\}/, `/v1/merchants/${owner.merchantId}`)
        .replace(/^\/v1\/redemptions\/\{id\}/, `/v1/redemptions/${hold}`)
        .replace('{offerId}', offer.id)
        .replace(/\{[^}]+\}/g, 'unknown_id');
    const merchantScoped = routes.filter((r) => /^\/v1\/(merchants|redemptions)\/\{id\}/.test(r.template));
    expect(merchantScoped.length).toBeGreaterThan(5);
    for (const route of merchantScoped) {
      const res = await call({ ...route, path: fill(route.template) }, stranger.key);
      const where = `${route.method} ${route.template}`;
      if (route.kinds.includes('merchant')) {
        // Exactly what an id that does not exist gets (404, or the body's 400 where the body is checked
        // first): nothing about the other merchant's resource shows through.
        const unknown = await call(route, stranger.key);
        expect([res.status, res.body.code], where).toEqual([unknown.status, unknown.body.code]);
        expect([400, 404], where).toContain(res.status);
      } else {
        expect([res.status, res.body.code], where).toEqual([403, 'forbidden']);
      }
    }
    // The owner's own key reaches the same hold.
    expect((await world.api('GET', `/v1/redemptions/${hold}`, { token: owner.key })).status).toBe(200);
  });

  it('refuses a token we signed for another purpose as not an access token, before its claims (found from outside, bb119: "missing required sub")', async () => {
    const { url } = world;
    const clientId = await newClient(url, ['http://127.0.0.1:9/callback']);
    const query = { response_type: 'code', client_id: clientId, redirect_uri: 'http://127.0.0.1:9/callback', code_challenge: pkcePair().challenge, code_challenge_method: 'S256', resource: url };
    const started = await authorizeRaw(url, authorizeQuery(query));
    const requestId = new URL(started.location!).searchParams.get('request_id')!;
    const receiptWithoutSub = await world.gw.gateway.signing.sign({ iss: url, aud: url, exp: world.gw.clock.nowS() + 60 }, 'receipt+jwt');
    for (const [token, typ] of [[requestId, 'oauth-authz-request+jwt'], [receiptWithoutSub, 'receipt+jwt']] as const) {
      for (const [path, method] of [['/v1/me', 'GET'], ['/v1/owner/agents', 'GET'], ['/mcp', 'POST']] as const) {
        const res = await fetch(`${url}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: method === 'POST' ? '{}' : undefined });
        const detail = `invalid access token: token typ is ${typ}, expected at+jwt`;
        expect([path, typ, res.status, ((await res.json()) as { detail: string }).detail]).toEqual([path, typ, 401, detail]);
        expect(res.headers.get('www-authenticate')).toContain(`error_description="${detail}"`);
      }
    }
  });

  it('never accepts a credential in the query string', async () => {
    const res = await world.api('GET', `/v1/me?access_token=${tokens.human}`);
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('invalid_input');
  });

  it('answers a non-Bearer or empty Authorization header as no credential: 401 with a challenge without an error (RFC 6750 §3.1)', async () => {
    for (const authorization of [`Basic ${Buffer.from('a:b').toString('base64')}`, 'Bearer', 'Bearer ', 'Token abc']) {
      const res = await world.api('GET', '/v1/me', { headers: { authorization } });
      expect([res.status, res.body.code], authorization).toEqual([401, 'unauthorized']);
      expect(res.body.detail, authorization).toBe('the Authorization header must be "Bearer <token>"');
      expect(res.headers.get('www-authenticate'), authorization).toMatch(/^Bearer resource_metadata="[^"]+"$/);
    }
  });
});

describe('operator routes: 401 before anything about the configuration', () => {
  const credential = 'acg_op_matrix-operator-credential';
  const forged = `acg_op_${'A'.repeat(43)}`;
  let unconfigured: TestGateway;
  let configured: TestGateway;
  beforeAll(async () => {
    const live = { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com' };
    unconfigured = await startTestGateway({ env: live });
    configured = await startTestGateway({ env: { ...live, ACG_OPERATOR_TOKEN_SHA256: sha256Hex(credential) } });
  });
  afterAll(async () => {
    await unconfigured?.close();
    await configured?.close();
  });

  const grantCredit = async (gw: TestGateway, authorization?: string) => {
    const res = await fetch(`${gw.url}/v1/operator/credit-grants`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': `operator-${Math.random()}`, ...(authorization === undefined ? {} : { authorization }) },
      body: JSON.stringify({ agentId: 'agt_missing', amountUc: '1000000' }),
    });
    return { status: res.status, challenge: res.headers.get('www-authenticate'), type: res.headers.get('content-type'), body: (await res.json()) as Record<string, unknown> };
  };

  it('answers no credential, a malformed one and a forged one with 401 and a challenge, configured or not, and identically', async () => {
    for (const authorization of [undefined, '', 'Bearer', `Basic ${Buffer.from('operator:x').toString('base64')}`, `Bearer ${forged}`, 'Bearer acg_op_guess']) {
      const [without, withOne] = [await grantCredit(unconfigured, authorization), await grantCredit(configured, authorization)];
      expect(without, String(authorization)).toMatchObject({ status: 401, challenge: 'Bearer realm="operator"', body: { code: 'unauthorized', status: 401 } });
      expect(without.type).toMatch(/^application\/problem\+json/);
      expect(JSON.stringify(without.body)).not.toMatch(/configur|ACG_|503/i);
      expect({ ...without, body: { ...without.body, type: undefined } }).toEqual({ ...withOne, body: { ...withOne.body, type: undefined } });
    }
  });

  it('lets the configured credential through to the operation (an unknown agent is 404)', async () => {
    expect(await grantCredit(configured, `Bearer ${credential}`)).toMatchObject({ status: 404, body: { code: 'not_found' } });
  });
});
