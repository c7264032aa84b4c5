// An agent over MCP alone asks its owner for credit: a mint refused INSUFFICIENT_CREDITS names request_topup, the
// tool opens the top-up and answers its approval page, get_topup follows it, and once the owner approves, a new
// mint goes through (found from outside: the refusal said "MCP has no tool for it", and none there was).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, openShop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, toolBody } from './helpers.ts';

let world: World;
let offerId: string;

beforeAll(async () => {
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local' } });
  const shop = await openShop(world);
  offerId = (await shop.offer({ priceUc: '3000000', category: 'books' })).id;
});

afterAll(async () => {
  await world?.close();
});

const REASON =
  'Reader needs three more dollars of credit to buy the book you asked it to summarise; it holds one credit and the book costs three.';

describe('request_topup: an agent over MCP asks its owner for credit', () => {
  it('a mint refused for credit names request_topup; the top-up it opens carries the page the owner approves, get_topup follows it, and the next mint is served', async () => {
    const agent = await world.createAgent('mcp-topup-owner@example.com', 'mcp-topup-agent', { allowedCategories: ['books'] });
    await grant(world, agent.id, 1_000_000n);
    const client = await connect(world.url, await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`), 'modern');
    try {
      const refused = await client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'mcp-topup-mint-1' } });
      expect(refused.isError).toBe(true);
      const problem = toolBody(refused);
      expect(problem.code).toBe('INSUFFICIENT_CREDITS');
      expect(problem.detail).toContain('over MCP the request_topup tool');
      expect(problem.detail).not.toContain('MCP has no tool');

      const tools = (await client.listTools()).tools.map((tool) => tool.name);
      expect(tools).toEqual(expect.arrayContaining(['request_topup', 'get_topup']));

      const asked = await client.callTool({ name: 'request_topup', arguments: { agentId: agent.id, amountUsdCents: 300, reason: REASON, idempotencyKey: 'mcp-topup-1' } });
      expect(asked.isError).toBeFalsy();
      const topup = toolBody(asked);
      expect(topup).toMatchObject({ agentId: agent.id, amountUsdCents: 300, amountUc: '300000000', reason: REASON, status: 'pending_approval', provider: 'local' });
      expect(topup.approvalUrl).toBe(`${world.url}/payments/topups/${topup.id}`);
      // A retry with the key answers the same top-up; nothing second is opened.
      expect(toolBody(await client.callTool({ name: 'request_topup', arguments: { agentId: agent.id, amountUsdCents: 300, reason: REASON, idempotencyKey: 'mcp-topup-1' } }))).toEqual(topup);
      expect(toolBody(await client.callTool({ name: 'get_topup', arguments: { id: topup.id } }))).toEqual(topup);

      const approved = await world.api('POST', `/v1/payments/topups/${topup.id}/approve`, { token: agent.ownerToken, body: {} });
      expect(approved.status).toBe(200);
      expect(toolBody(await client.callTool({ name: 'get_topup', arguments: { id: topup.id } }))).toMatchObject({ id: topup.id, status: 'settled', lotId: expect.any(String) });

      const minted = await client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'mcp-topup-mint-2' } });
      expect(minted.isError).toBeFalsy();
      expect(toolBody(minted).redemption).toMatchObject({ amountUc: '3000000', state: 'held' });
    } finally {
      await client.close();
    }
  });
});
