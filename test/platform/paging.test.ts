// Every list route's `startingAfter`: the id of the list's own last item ends the list (200, empty, hasMore
// false); an id that is no item of the list (unknown, or another owner's) is 400 invalid_input, never an empty
// page that would read as the list's end.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
let shopOwner: string;
let agent: { id: string; token: string; ownerToken: string };
let stranger: { id: string; token: string; ownerToken: string };
let holdId: string;

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world, 'paging-shop@example.com');
  shopOwner = await world.humanToken('paging-shop@example.com');
  agent = await world.createAgent('paging@example.com', 'paging-agent');
  stranger = await world.createAgent('paging-stranger@example.com', 'paging-stranger');
  await grant(world, agent.id, 10_000_000n);
  const offer = await shop.offer();
  const minted = await mint(world, agent.token, offer.id);
  expect(minted.status).toBe(200);
  holdId = minted.body.redemption.id;
});
afterAll(() => world.close());

const UNKNOWN = 'agt_00000000000000000000000000';

async function list(path: string, token: string, startingAfter: string) {
  return world.api('GET', `${path}${path.includes('?') ? '&' : '?'}startingAfter=${encodeURIComponent(startingAfter)}`, { token });
}

function expectUnknownCursor(res: { status: number; body: Record<string, unknown> }, startingAfter: string) {
  expect([res.status, res.body.code]).toEqual([400, 'invalid_input']);
  expect(res.body.detail).toContain(`startingAfter names no item of this list: ${startingAfter}`);
  // Named as the schema names a member of the query, with `errors` (found from outside: a bare member name).
  expect(res.body.errors).toEqual([{ path: 'querystring/startingAfter', message: expect.stringContaining(`names no item of this list: ${startingAfter}`) }]);
}

describe('startingAfter', () => {
  it('ends each list at its own last item, and refuses an id that is no item of it', async () => {
    const cases: Array<{ path: string; token: string; items: string; idField?: string; foreign?: string }> = [
      { path: '/v1/owner/agents', token: agent.ownerToken, items: 'agents', foreign: stranger.id },
      { path: `/v1/owner/agents/${agent.id}/holds`, token: agent.ownerToken, items: 'redemptions' },
      { path: '/v1/merchants', token: shopOwner, items: 'merchants' },
      { path: `/v1/merchants/${shop.merchantId}/offers`, token: shop.key, items: 'offers' },
      { path: '/v1/offers', token: agent.token, items: 'offers', foreign: holdId },
      { path: `/v1/merchants/${shop.merchantId}/events`, token: shop.key, items: 'events', foreign: agent.id },
      { path: `/v1/merchants/${shop.merchantId}/api-keys`, token: shopOwner, items: 'apiKeys', idField: 'keyId' },
    ];
    for (const { path, token, items, idField = 'id', foreign } of cases) {
      const all = await world.api('GET', `${path}${path.includes('?') ? '&' : '?'}limit=100`, { token });
      expect([path, all.status]).toEqual([path, 200]);
      expect([path, Object.keys(all.body)]).toEqual([path, [items, 'hasMore']]);
      const last = (all.body[items] as Array<Record<string, string>>).at(-1)![idField]!;
      const end = await list(path, token, last);
      expect([path, end.status, end.body[items], end.body.hasMore]).toEqual([path, 200, [], false]);
      expectUnknownCursor(await list(path, token, UNKNOWN), UNKNOWN);
      if (foreign) expectUnknownCursor(await list(path, token, foreign), foreign);
    }
  });

  it('refuses an unknown id on the lists that are empty here too (deliveries, top-ups, approvals)', async () => {
    for (const [path, token] of [
      [`/v1/merchants/${shop.merchantId}/webhook/deliveries`, shop.key],
      ['/v1/owner/webhook/deliveries', agent.ownerToken],
      ['/v1/owner/events', stranger.ownerToken],
      [`/v1/payments/topups?agentId=${agent.id}`, agent.ownerToken],
      ['/v1/owner/approvals', agent.ownerToken],
    ] as const) {
      expectUnknownCursor(await list(path, token, UNKNOWN), UNKNOWN);
    }
  });

  it('ends the mandate versions at version 1, and refuses a version the agent never had', async () => {
    const path = `/v1/owner/agents/${agent.id}/mandate/versions`;
    const all = await world.api('GET', path, { token: agent.ownerToken });
    const newest = all.body.versions[0].version as number;
    const end = await list(path, agent.ownerToken, '1');
    expect([end.status, end.body.versions, end.body.hasMore]).toEqual([200, [], false]);
    const page = await list(path, agent.ownerToken, String(newest + 1));
    expectUnknownCursor(page, String(newest + 1));
    // Its items are named by their version, and so is the cursor it asks for (found from outside: "send the id").
    expect(page.body.detail).toContain('(send the version of the last item of the previous page');
  });

  it("refuses another owner's hold as a cursor of this agent's holds", async () => {
    const res = await list(`/v1/owner/agents/${stranger.id}/holds`, stranger.ownerToken, holdId);
    expectUnknownCursor(res, holdId);
  });
});
