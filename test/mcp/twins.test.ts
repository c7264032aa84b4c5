// Every MCP read tool and its HTTP twin (the route whose operationId is the tool's query) answer the same
// JSON for the same state: both run one query through one runner. The state covers what used to differ:
// a hold past its deadline (reclaimed on read, releasedAt = expiresAt), a refunded capture (its refunds),
// balances and lots, a retained intent and its top-up, pages with a cursor, and refusals (the same problem body).
// request_topup, a write, is compared too: one key space, the same top-up on both faces.
import { createHash } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOOLS, twinName } from '../../src/mcp/tools.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, toolBody } from './helpers.ts';

let world: World;
let shop: Shop;
let agent: { id: string; token: string; ownerToken: string };
let poor: { id: string };
let ownerId: string;
let intentId: string;
let topupId: string;
const holdIds: string[] = [];
const ownerEmail = 'twins-owner@example.com';

/** The two faces of one principal: an access token for the API, one for /mcp (the same credential kind). */
interface Faces {
  http: string;
  mcp: Client;
}
let agentFaces: Faces;
let ownerFaces: Faces;

async function faces(claims: { sub: string; scope: 'svc:agent' | 'svc:owner'; email?: string }): Promise<Faces> {
  const http = await world.accessToken(claims);
  const mcp = await connect(world.url, await world.accessToken(claims, `${world.url}/mcp`), 'modern');
  return { http, mcp };
}

beforeAll(async () => {
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local' } });
  agent = await world.createAgent(ownerEmail, 'twins-agent', { allowedCategories: ['books'] });
  poor = await world.createAgent(ownerEmail, 'twins-poor-agent');
  ownerId = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id;
  shop = await openShop(world);
  const book = await shop.offer({ priceUc: '1000000', category: 'books' });
  const shortLived = await shop.offer({ priceUc: '500000', category: 'books', holdLifetimeS: 60 });
  await shop.offer({ category: 'music' });
  await grant(world, agent.id, 10_000_000n);
  await grant(world, agent.id, 2_000_000n, { priority: 10 });

  // One hold past its deadline, one captured and partly refunded, one still held.
  for (const offerId of [shortLived.id, book.id, book.id]) {
    const minted = await mint(world, agent.token, offerId);
    expect(minted.status).toBe(200);
    holdIds.push(minted.body.redemption.id);
  }
  const capture = await world.api('POST', `/v1/redemptions/${holdIds[1]}/capture`, { token: shop.key, key: 'twins-capture', body: {} });
  expect(capture.status).toBe(200);
  const refund = await world.api('POST', `/v1/redemptions/${holdIds[1]}/refunds`, { token: shop.key, key: 'twins-refund', body: { amountUc: '250000', reason: 'late' } });
  expect(refund.status).toBe(201);
  world.gw.clock.advance(120_000);

  // A retained intent: the poor agent's credit does not cover an execution.
  const poorToken = await world.accessToken({ sub: poor.id, scope: 'svc:agent' });
  const retained = await world.api('POST', '/v1/services/execute', {
    token: poorToken,
    key: 'twins-intent',
    body: { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } },
  });
  expect(retained.status).toBe(402);
  intentId = retained.body.intentId;
  // The gateway's own top-up of that intent (the local rail).
  topupId = retained.body.payment.id;

  agentFaces = await faces({ sub: agent.id, scope: 'svc:agent' });
  ownerFaces = await faces({ sub: ownerId, scope: 'svc:owner', email: ownerEmail });
});

afterAll(async () => {
  await agentFaces?.mcp.close();
  await ownerFaces?.mcp.close();
  await world?.close();
});

/** The tool's structured answer (its result, or the problem of a tool error) and the HTTP body. */
async function both(faces: Faces, tool: string, args: Record<string, unknown>, httpPath: string): Promise<{ mcp: any; http: any; status: number; isError: boolean }> {
  const result = (await faces.mcp.callTool({ name: tool, arguments: args })) as { structuredContent: unknown; isError?: boolean };
  const res = await world.api('GET', httpPath, { token: faces.http });
  return { mcp: toolBody(result), http: res.body, status: res.status, isError: result.isError === true };
}

describe('MCP read tools answer what their HTTP twins answer', () => {
  it('every read tool is covered here', () => {
    const covered = ['whoami', 'list_offers', 'get_hold', 'get_intent', 'get_topup', 'list_agents', 'list_agent_holds', 'get_mandate', 'list_mandate_versions', 'get_mandate_version', 'list_delegates', 'list_agent_delegates'];
    expect(TOOLS.filter((tool) => 'query' in tool).map((tool) => tool.name).sort()).toEqual(covered.sort());
    // The twin's operationId is the query's name.
    for (const tool of TOOLS) expect(twinName(tool)).toMatch(/^[a-z][A-Za-z]+$/);
  });

  it('whoami ↔ GET /v1/me, for an agent: settings, the whole balance and the lots, its overdue hold reclaimed', async () => {
    const { mcp, http, status } = await both(agentFaces, 'whoami', {}, '/v1/me');
    expect(status).toBe(200);
    expect(mcp).toEqual(http);
    expect(Object.keys(http.balance).sort()).toEqual(['agentId', 'availableUc', 'capturedUc', 'grantedUc', 'heldUc', 'lapsedUc', 'refundedUc']);
    // Held: only the last hold (the overdue one was reclaimed on read, the second captured).
    expect(http.balance.heldUc).toBe('1000000');
    expect(http.lots).toHaveLength(3);
  });

  it('whoami ↔ GET /v1/me, for an owner', async () => {
    const { mcp, http } = await both(ownerFaces, 'whoami', {}, '/v1/me');
    expect(mcp).toEqual(http);
    expect(http.owner).toEqual({ id: ownerId, email: ownerEmail });
  });

  it('list_offers ↔ GET /v1/offers, with and without a cursor', async () => {
    const first = await both(agentFaces, 'list_offers', { limit: 1 }, '/v1/offers?limit=1');
    expect(first.mcp).toEqual(first.http);
    expect(first.http.hasMore).toBe(true);
    const cursor = first.http.offers[0].id;
    const rest = await both(agentFaces, 'list_offers', { startingAfter: cursor }, `/v1/offers?startingAfter=${cursor}`);
    expect(rest.mcp).toEqual(rest.http);
    expect(rest.http.offers.every((offer: { category: string }) => offer.category === 'books')).toBe(true);
  });

  it('get_hold ↔ GET /v1/redemptions/{id}: held, captured with its refund, and expired at its deadline', async () => {
    for (const id of holdIds) {
      const { mcp, http, status } = await both(agentFaces, 'get_hold', { id }, `/v1/redemptions/${id}`);
      expect(status).toBe(200);
      expect(mcp).toEqual(http);
    }
    const expired = (await world.api('GET', `/v1/redemptions/${holdIds[0]}`, { token: agentFaces.http })).body;
    expect(expired).toMatchObject({ state: 'expired', releasedUc: expired.amountUc, releasedAt: expired.expiresAt });
    const refunded = (await world.api('GET', `/v1/redemptions/${holdIds[1]}`, { token: agentFaces.http })).body;
    expect(refunded.refunds).toHaveLength(1);
  });

  it('get_hold of an unknown hold: the same problem body on both faces', async () => {
    const { mcp, http, status, isError } = await both(agentFaces, 'get_hold', { id: 'hold_unknown' }, '/v1/redemptions/hold_unknown');
    expect(status).toBe(404);
    expect(isError).toBe(true);
    expect(mcp).toEqual(http);
  });

  it('get_intent ↔ GET /v1/intents/{id}: its agent reads it, another agent gets the same 404', async () => {
    const poorFaces = await faces({ sub: poor.id, scope: 'svc:agent' });
    try {
      const own = await both(poorFaces, 'get_intent', { id: intentId }, `/v1/intents/${intentId}`);
      expect(own.status).toBe(200);
      expect(own.mcp).toEqual(own.http);
      expect(own.http).toMatchObject({ id: intentId, state: 'pending', agentId: poor.id });
    } finally {
      await poorFaces.mcp.close();
    }
    const stranger = await both(agentFaces, 'get_intent', { id: intentId }, `/v1/intents/${intentId}`);
    expect(stranger.status).toBe(404);
    expect(stranger.mcp).toEqual(stranger.http);
  });

  it('get_topup ↔ GET /v1/payments/topups/{id}: its agent and its owner read it, another agent gets the same 404', async () => {
    const poorFaces = await faces({ sub: poor.id, scope: 'svc:agent' });
    try {
      const own = await both(poorFaces, 'get_topup', { id: topupId }, `/v1/payments/topups/${topupId}`);
      expect(own.status).toBe(200);
      expect(own.mcp).toEqual(own.http);
      expect(own.http).toMatchObject({ id: topupId, agentId: poor.id, intentId, status: 'pending_approval' });
    } finally {
      await poorFaces.mcp.close();
    }
    const owners = await both(ownerFaces, 'get_topup', { id: topupId }, `/v1/payments/topups/${topupId}`);
    expect(owners.mcp).toEqual(owners.http);
    const stranger = await both(agentFaces, 'get_topup', { id: topupId }, `/v1/payments/topups/${topupId}`);
    expect([stranger.status, stranger.isError, stranger.mcp.code]).toEqual([404, true, 'not_found']);
    expect(stranger.mcp).toEqual(stranger.http);
  });

  it("request_topup ↔ POST /v1/payments/topups: one key space, the same top-up; another agent's id is the same refusal (found from outside: an agent over MCP could not ask for credit)", async () => {
    const body = {
      agentId: agent.id,
      amountUsdCents: 200,
      reason: 'Twins needs two more dollars of credit to buy the books its owner asked it to compare this week; each book costs one credit.',
    };
    const called = (await agentFaces.mcp.callTool({ name: 'request_topup', arguments: { ...body, idempotencyKey: 'twins-topup' } })) as { structuredContent: any; isError?: boolean };
    expect(called.isError).toBeFalsy();
    const topup = toolBody(called);
    expect(topup).toMatchObject({ agentId: agent.id, amountUsdCents: 200, status: 'pending_approval', approvalUrl: `${world.url}/payments/topups/${topup.id}` });
    const replayed = await world.api('POST', '/v1/payments/topups', { token: agentFaces.http, key: 'twins-topup', body });
    expect([replayed.status, replayed.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
    expect(replayed.body).toEqual(topup);
    // The owner's request for its agent, over either face: the same record shape.
    const owners = (await ownerFaces.mcp.callTool({ name: 'request_topup', arguments: { ...body, idempotencyKey: 'twins-owner-topup' } })) as { structuredContent: any };
    expect(toolBody(owners)).toMatchObject({ agentId: agent.id, status: 'pending_approval' });
    const refusedOverMcp = (await agentFaces.mcp.callTool({ name: 'request_topup', arguments: { ...body, agentId: poor.id, idempotencyKey: 'twins-other-topup' } })) as { structuredContent: any; isError?: boolean };
    const refusedOverHttp = await world.api('POST', '/v1/payments/topups', { token: agentFaces.http, key: 'twins-other-topup-http', body: { ...body, agentId: poor.id } });
    expect(refusedOverMcp.isError).toBe(true);
    expect(refusedOverHttp.status).toBe(403);
    expect(toolBody(refusedOverMcp)).toEqual(refusedOverHttp.body);
  });

  it('list_agents ↔ GET /v1/owner/agents, paged', async () => {
    const first = await both(ownerFaces, 'list_agents', { limit: 1 }, '/v1/owner/agents?limit=1');
    expect(first.mcp).toEqual(first.http);
    expect(first.http).toMatchObject({ hasMore: true });
    const all = await both(ownerFaces, 'list_agents', {}, '/v1/owner/agents');
    expect(all.mcp).toEqual(all.http);
    expect(all.http.agents.map((a: { id: string }) => a.id)).toEqual([agent.id, poor.id]);
  });

  it('list_agent_holds ↔ GET /v1/owner/agents/{agentId}/holds: the Redemption shape with refunds and expiry', async () => {
    const all = await both(ownerFaces, 'list_agent_holds', { agentId: agent.id }, `/v1/owner/agents/${agent.id}/holds`);
    expect(all.status).toBe(200);
    expect(all.mcp).toEqual(all.http);
    expect(all.http.redemptions.map((r: { id: string }) => r.id)).toEqual(holdIds);
    // The list shows each hold exactly as GET /v1/redemptions/{id} does.
    for (const redemption of all.http.redemptions) {
      expect(redemption).toEqual((await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: agentFaces.http })).body);
    }
    const page = await both(ownerFaces, 'list_agent_holds', { agentId: agent.id, limit: 1, startingAfter: holdIds[0] }, `/v1/owner/agents/${agent.id}/holds?limit=1&startingAfter=${holdIds[0]}`);
    expect(page.mcp).toEqual(page.http);
    expect(page.http).toMatchObject({ hasMore: true, redemptions: [{ id: holdIds[1] }] });
  });

  it('get_mandate ↔ GET /v1/owner/agents/{id}/mandate, with budgets and their usage', async () => {
    const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: ownerFaces.http,
      key: 'twins-mandate',
      body: { allowedCategories: ['books'], budgets: [{ id: 'daily', limitUc: '9000000', period: 'day' }, { id: 'shop', limitUc: '5000000', period: 'total', merchantId: shop.merchantId }] },
    });
    expect(put.status).toBe(200);
    const { mcp, http, status } = await both(ownerFaces, 'get_mandate', { id: agent.id }, `/v1/owner/agents/${agent.id}/mandate`);
    expect(status).toBe(200);
    expect(mcp).toEqual(http);
    expect(http).toMatchObject({ agentId: agent.id, hash: put.body.hash, version: put.body.version });
    expect(http.usage.map((budget: { budgetId: string }) => budget.budgetId)).toEqual(['daily', 'shop']);

    // set_mandate's ifVersion is HTTP's If-Match: a stale version is the same refusal, and nothing changes.
    const stale = (await ownerFaces.mcp.callTool({
      name: 'set_mandate',
      arguments: { id: agent.id, ifVersion: put.body.version - 1, allowedCategories: ['books', 'music'], idempotencyKey: 'twins-stale-mandate' },
    })) as { structuredContent: any; isError?: boolean };
    expect(stale.isError).toBe(true);
    expect(stale.structuredContent).toMatchObject({ code: 'precondition_failed', status: 412, currentVersion: put.body.version });
    const viaHttp = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: ownerFaces.http,
      key: 'twins-stale-mandate-http',
      body: { allowedCategories: ['books', 'music'] },
      headers: { 'if-match': `"${put.body.version - 1}"` },
    });
    expect(stale.structuredContent).toEqual(viaHttp.body);
    const kept = (await ownerFaces.mcp.callTool({
      name: 'set_mandate',
      arguments: { id: agent.id, ifVersion: put.body.version, allowedCategories: ['books', 'music'], budgets: http.budgets, idempotencyKey: 'twins-kept-mandate' },
    })) as { structuredContent: any; isError?: boolean };
    expect([kept.isError ?? false, kept.structuredContent.version]).toEqual([false, put.body.version + 1]);
  });

  it('list_mandate_versions and get_mandate_version ↔ GET …/mandate/versions[/{version}]: an owner over MCP can check the hash a voucher names (found from outside: only the version in force, without its canonical JSON)', async () => {
    const list = await both(ownerFaces, 'list_mandate_versions', { id: agent.id, limit: 2 }, `/v1/owner/agents/${agent.id}/mandate/versions?limit=2`);
    expect(list.status).toBe(200);
    expect(list.mcp).toEqual(list.http);
    expect(list.http.versions.length).toBe(2);
    const [newest] = list.http.versions;
    const one = await both(ownerFaces, 'get_mandate_version', { id: agent.id, version: newest.version - 1 }, `/v1/owner/agents/${agent.id}/mandate/versions/${newest.version - 1}`);
    expect(one.status).toBe(200);
    expect(one.mcp).toEqual(one.http);
    expect(one.http).toEqual(list.http.versions[1]);
    expect(createHash('sha256').update(one.http.canonical).digest('base64url')).toBe(one.http.hash);
    const missing = await both(ownerFaces, 'get_mandate_version', { id: agent.id, version: newest.version + 1 }, `/v1/owner/agents/${agent.id}/mandate/versions/${newest.version + 1}`);
    expect([missing.status, missing.isError, missing.mcp.code]).toEqual([404, true, 'not_found']);
    expect(missing.mcp).toEqual(missing.http);
  });

  it("list_delegates ↔ GET /v1/agents/{id}/delegates and list_agent_delegates ↔ GET /v1/owner/agents/{id}/delegates: the subtree with each one's usage (found from outside: an agent over MCP could create delegates but not see them)", async () => {
    const own = await both(agentFaces, 'list_delegates', { id: agent.id }, `/v1/agents/${agent.id}/delegates`);
    expect(own.status).toBe(200);
    expect(own.mcp).toEqual(own.http);
    expect(own.http.agentId).toBe(agent.id);
    expect(own.http.nodes[0].agent.id).toBe(agent.id);
    const owners = await both(ownerFaces, 'list_agent_delegates', { id: agent.id }, `/v1/owner/agents/${agent.id}/delegates`);
    expect(owners.status).toBe(200);
    expect(owners.mcp).toEqual(owners.http);
    expect(owners.http).toEqual(own.http);
    // Another agent's subtree: the same 404 on both faces.
    const stranger = await world.createAgent('twins-delegates-stranger@example.com', 'twins-delegates-stranger');
    const refused = await both(agentFaces, 'list_delegates', { id: stranger.id }, `/v1/agents/${stranger.id}/delegates`);
    expect([refused.status, refused.isError, refused.mcp.code]).toEqual([404, true, 'not_found']);
    expect(refused.mcp).toEqual(refused.http);
  });

  it("list_agent_holds of another owner's agent: the same 404 on both faces", async () => {
    const stranger = await world.createAgent('twins-stranger@example.com', 'twins-stranger-agent');
    const { mcp, http, status } = await both(ownerFaces, 'list_agent_holds', { agentId: stranger.id }, `/v1/owner/agents/${stranger.id}/holds`);
    expect(status).toBe(404);
    expect(mcp).toEqual(http);
  });
});
