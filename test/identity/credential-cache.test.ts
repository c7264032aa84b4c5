// The credential verifier reuses a bearer JWT's verification (docs/decisions.md "Verified-token cache"),
// and that reuse never outlives what it may not: the token's expiry (on the gateway's clock), its signing
// key, or a revocation. Revocation is state in the database, so a second instance on the same database
// refuses a revoked token at once, though it had verified it before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../../src/platform/gateway.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
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
