// MCP `freeze_agent` is the HTTP freeze: `releaseHolds` releases and revokes the agent's holds, and its answer
// is the same `{agent, freeze}`, readable again over HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../mcp/helpers.ts';
import { grant, mint, openShop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;

beforeAll(async () => {
  world = await startWorld();
});
afterAll(async () => {
  await world?.close();
});

describe('MCP freeze_agent', () => {
  it('with releaseHolds releases and revokes the holds, and answers the report GET reads again', async () => {
    const shop = await openShop(world);
    const offer = await shop.offer({ priceUc: '1500000' });
    const agent = await world.createAgent('mcp-freezer@example.com', 'mcp-frozen-agent');
    await grant(world, agent.id, 5_000_000n);
    const holdId = (await mint(world, agent.token, offer.id)).body.redemption.id;
    const owner = await connect(world.url, agent.ownerToken, 'modern');
    try {
      const result = await owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id, releaseHolds: true, idempotencyKey: 'mcp-freeze-1' } });
      expect(result.isError).toBeFalsy();
      const answer = (result as { structuredContent: any }).structuredContent;
      expect(answer.status).toBe('frozen');
      expect(answer.freeze).toMatchObject({ releaseHolds: true, releasedHolds: 1, releasedUc: '1500000', merchants: [{ merchantId: shop.merchantId, holdIds: [holdId] }] });
      const report = await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
      expect(report.body).toEqual(answer.freeze);
      const replay = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: 'mcp-freeze-1', body: { releaseHolds: true } });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body).toEqual(answer);
      const capture = await world.api('POST', `/v1/redemptions/${holdId}/capture`, { token: shop.key, key: 'mcp-capture-1', body: {} });
      expect([capture.status, capture.body.code]).toEqual([409, 'voucher_revoked']);
    } finally {
      await owner.close();
    }
  });
});
