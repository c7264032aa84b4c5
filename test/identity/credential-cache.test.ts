// The credential verifier reuses a bearer JWT's verification (docs/decisions.md "Verified-token cache"),
// and that reuse never outlives what it may not: the token's expiry (on the gateway's clock), its signing
// key, or a revocation. Revocation is state in the database, whose credential facts a gateway keeps for two
// seconds at most (src/platform/credential-facts.ts): a second instance refuses a revoked credential from the
// first request after the revocation answered, though it had verified it and kept its facts before: at once
// when it shares this process's facts, and, as another process would, once the revocation's wait has passed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/platform/gateway.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { onPostgres } from '../support/database.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { registerMerchant } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';
import { newClient, obtainCode, token, tokenParams } from '../oauth/helpers.ts';

let world: World;
/** A second gateway on the same database, the same identity providers and the same base URL. */
let second: TestGateway;

beforeAll(async () => {
  world = await startWorld();
  second = await startTestGateway({
    database: world.gw.database,
    env: {
      ACG_HUMAN_ISSUER: world.human.issuer,
      ACG_AGENT_ISSUER: world.agentIssuer.issuer,
      ACG_API_KEY_PEPPER: 'test-pepper-test-pepper-test-pepper-0123',
      ACG_BASE_URL: world.url,
    },
  });
});
afterAll(async () => {
  await second?.close();
  await world?.close();
});

async function verifications(gateway: Gateway, outcome: 'verified' | 'reused'): Promise<number> {
  const metric = await gateway.metrics.tokenVerifications.get();
  return metric.values.find((v) => v.labels.outcome === outcome)?.value ?? 0;
}

async function me(url: string, bearer: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}/v1/me`, { headers: { authorization: `Bearer ${bearer}` } });
  return { status: res.status, body: await res.json() };
}

describe('verified-token cache', () => {
  it('reuses a verification, and refuses the token once it has expired on the gateway clock', async () => {
    const agent = await world.createAgent('expiry-owner@example.com', 'expiring-agent');
    const short = await world.agentIssuer.mint({ sub: 'expiring-agent', owner_email: 'expiry-owner@example.com' }, { expiresInS: 120 });
    const { gateway, clock } = world.gw;
    expect((await me(world.url, short)).status).toBe(200);
    const reusedBefore = await verifications(gateway, 'reused');
    expect((await me(world.url, short)).body).toMatchObject({ kind: 'agent', agent: { id: agent.id } });
    expect(await verifications(gateway, 'reused')).toBe(reusedBefore + 1);

    clock.advance(151_000); // past exp and the 30 s skew, well inside the cache's age limit
    try {
      const verifiedBefore = await verifications(gateway, 'verified');
      const expired = await world.api('GET', '/v1/me', { token: short });
      expect(expired.status).toBe(401);
      expect(expired.headers.get('www-authenticate')).toContain('error="invalid_token"');
      // The cached entry was not used: the token went through the full check, which refused it.
      expect(await verifications(gateway, 'reused')).toBe(reusedBefore + 1);
      expect(await verifications(gateway, 'verified')).toBe(verifiedBefore + 1);
    } finally {
      clock.advance(-151_000);
    }
  });

  it('refuses our access token from its exp on: the leeway for another instance\'s clock is never added to exp', async () => {
    const agent = await world.createAgent('lapse-owner@example.com', 'lapse-agent');
    const issued = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }); // exp: now + 600 s
    expect((await me(world.url, issued)).status).toBe(200);
    const { clock } = world.gw;
    clock.advance(605_000); // 5 s past exp, inside the 30 s that external identity tokens are given
    try {
      const lapsed = await world.api('GET', '/v1/me', { token: issued });
      expect(lapsed.status).toBe(401);
      expect(lapsed.headers.get('www-authenticate')).toContain('error="invalid_token"');
    } finally {
      clock.advance(-605_000);
    }
  });

  it('checks our access token against its resource on every use: one verified for the API is refused at /mcp', async () => {
    const agent = await world.createAgent('resource-owner@example.com', 'resource-agent');
    const forApi = await world.accessToken({ sub: agent.id, scope: 'svc:agent' });
    expect((await me(world.url, forApi)).status).toBe(200);
    expect((await me(world.url, forApi)).status).toBe(200);
    const atMcp = await fetch(`${world.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${forApi}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(atMcp.status).toBe(401);
  });
});

describe('revocation reaches every instance at once', () => {
  it('a replayed code revokes its access token on both instances, though both had verified it', async () => {
    const clientId = await newClient(world.url);
    const issued = await obtainCode(world.url, 'human', await world.humanToken('replay-owner@example.com'), { clientId });
    const first = await token(world.url, tokenParams(issued));
    expect(first.status).toBe(200);
    const accessToken: string = first.body.access_token;
    for (const url of [world.url, second.url]) {
      expect((await me(url, accessToken)).status).toBe(200);
      expect((await me(url, accessToken)).status).toBe(200);
    }
    expect(await verifications(second.gateway, 'reused')).toBeGreaterThan(0);

    expect((await token(world.url, tokenParams(issued))).status).toBe(400);
    for (const url of [world.url, second.url]) {
      const refused = await me(url, accessToken);
      expect(refused.status).toBe(401);
      expect(refused.body.detail).toContain('revoked');
    }
  });

  it("an agent identity stops working on both instances when its owner's verified email changes", async () => {
    const agent = await world.createAgent('old-address@example.com', 'rebound-agent');
    for (const url of [world.url, second.url]) {
      expect((await me(url, agent.token)).status).toBe(200);
      expect((await me(url, agent.token)).status).toBe(200);
    }
    // The same human signs in on the first instance with a new verified email: the owner row follows it.
    const renamed = await world.humanToken('new-address@example.com', { subject: 'human-old-address@example.com' });
    expect((await me(world.url, renamed)).body).toMatchObject({ kind: 'human', owner: { email: 'new-address@example.com' } });
    for (const url of [second.url, world.url]) {
      const refused = await me(url, agent.token);
      expect(refused.status).toBe(403);
      expect(refused.body.code).toBe('owner_claim_required');
    }
  });

  it('a frozen agent is seen frozen on the other instance at its next request', async () => {
    const agent = await world.createAgent('freeze-owner@example.com', 'frozen-agent');
    expect((await me(second.url, agent.token)).body.agent.status).toBe('active');
    const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
    expect(frozen.status).toBe(200);
    expect((await me(second.url, agent.token)).body.agent.status).toBe('frozen');
  });
});

/** Kept or read, as a gateway counted its credential facts of one kind. */
async function factReads(gateway: Gateway, kind: string, outcome: 'kept' | 'read'): Promise<number> {
  const metric = await gateway.metrics.credentialFactReads.get();
  return metric.values.find((v) => v.labels.kind === kind && v.labels.outcome === outcome)?.value ?? 0;
}

// Another process on the same PostgreSQL database: a gateway with a pool of its own shares none of this
// process's credential facts, so only the revocation's wait can keep it from using what it read before.
describe.skipIf(!onPostgres())('revocation reaches a gateway in another process', () => {
  let other: TestGateway;
  const lifetimeMs = 2_000;

  /** A gateway on the same database through a pool of its own, as another process would be (`close` it, then its pool). */
  const gatewayInAnotherProcess = (env: Record<string, string> = {}) => {
    const url = world.gw.database.url!;
    return startTestGateway({
      database: { db: openPostgres(url), url, drop: async () => {} },
      env: { ACG_HUMAN_ISSUER: world.human.issuer, ACG_AGENT_ISSUER: world.agentIssuer.issuer, ACG_API_KEY_PEPPER: 'test-pepper-test-pepper-test-pepper-0123', ACG_BASE_URL: world.url, ...env },
    });
  };

  /**
   * A merchant key `reader` has read twice (the second answer from what it kept), revoked on the world's gateway:
   * the revocation answers no sooner than `waitMs`, and `reader` refuses the key at its next request.
   */
  async function revokeKeyKeptBy(reader: TestGateway, name: string, waitMs: number): Promise<void> {
    const owner = await world.humanToken(`key-${name}-owner@example.com`);
    const { merchant } = await registerMerchant(world, owner, { domain: `key-${name}-shop.com` });
    const created = await world.api('POST', `/v1/merchants/${merchant.id}/api-keys`, { token: owner, key: `key-${name}-1`, body: { name: 'k', scopes: ['offers:read'] } });
    expect(created.status).toBe(201);
    const key: string = created.body.secretKey;
    const keptBefore = await factReads(reader.gateway, 'api_key', 'kept');
    for (let i = 0; i < 2; i++) expect((await me(reader.url, key)).status).toBe(200);
    // The reader answered its second request from what it kept: the revocation is not in its next read.
    expect(await factReads(reader.gateway, 'api_key', 'kept')).toBe(keptBefore + 1);

    const started = performance.now();
    const revoked = await world.api('POST', `/v1/merchants/${merchant.id}/api-keys/${created.body.apiKey.keyId}/revoke`, { token: owner });
    expect(revoked.status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(waitMs);
    const refused = await me(reader.url, key);
    expect([refused.status, refused.body.code]).toEqual([401, 'unauthorized']);
  }

  beforeAll(async () => {
    other = await gatewayInAnotherProcess();
  });
  afterAll(async () => {
    await other?.close();
    await other?.gateway.db.close().catch(() => {});
  });

  it('a revoked merchant key: the revocation answers after the lifetime, and the other gateway refuses the key at its next request', async () => {
    await revokeKeyKeptBy(other, 'process', lifetimeMs);
  });

  it('a gateway that keeps facts longer: the revocation answers once its lifetime has passed, and it refuses the key at its next request', async () => {
    // The revoking gateway keeps facts for 2 s; this one announced 3.5 s, so the answer waits that long.
    const longerMs = 3_500;
    const keeping = await gatewayInAnotherProcess({ ACG_CREDENTIAL_FACTS_MS: String(longerMs) });
    try {
      await revokeKeyKeptBy(keeping, 'longer', longerMs);
    } finally {
      await keeping.close();
      await keeping.gateway.db.close().catch(() => {});
    }
  });

  it("an owner's changed email: the sign-in that changed it goes on after the lifetime, and the other gateway refuses the agent's old binding", async () => {
    const agent = await world.createAgent('process-old@example.com', 'process-rebound-agent');
    for (let i = 0; i < 2; i++) expect((await me(other.url, agent.token)).status).toBe(200);
    const renamed = await world.humanToken('process-new@example.com', { subject: 'human-process-old@example.com' });
    const started = performance.now();
    expect((await me(world.url, renamed)).body).toMatchObject({ kind: 'human', owner: { email: 'process-new@example.com' } });
    expect(performance.now() - started).toBeGreaterThanOrEqual(lifetimeMs);
    const refused = await me(other.url, agent.token);
    expect([refused.status, refused.body.code]).toEqual([403, 'owner_claim_required']);
  });

  it('a revoked consent: its access tokens are refused by the other gateway once the revocation answered', async () => {
    const clientId = await newClient(world.url);
    const human = await world.humanToken('consent-process@example.com');
    const issued = await obtainCode(world.url, 'human', human, { clientId });
    const accessToken: string = (await token(world.url, tokenParams(issued))).body.access_token;
    for (let i = 0; i < 2; i++) expect((await me(other.url, accessToken)).status).toBe(200);
    const revoked = await world.api('DELETE', `/v1/owner/oauth-grants/${clientId}`, { token: human });
    expect([revoked.status, revoked.body.revokedAccessTokens]).toEqual([200, 1]);
    const refused = await me(other.url, accessToken);
    expect(refused.status).toBe(401);
    expect(refused.body.detail).toContain('revoked');
  });
});
