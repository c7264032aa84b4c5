// An agent's credit lots page as every list does (found while reviewing: the list and `GET /v1/me` answered every
// lot, and every refund adds one): burn-down order across pages, a delegate's read of its root's lots, a cursor
// that names no lot of this payer refused, and `GET /v1/me` showing the first 100 with `lotsHasMore`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import { grant } from '../support/ledger-fixture.ts';

let world: World;
beforeAll(async () => {
  world = await startWorld();
});
afterAll(() => world.close());

const CREDIT = 1_000_000n;

describe('GET /v1/owner/agents/{id}/lots', () => {
  it('pages in burn-down order (priority, soonest expiry, a lot that never expires last, then age), the same order as one page', async () => {
    const agent = await world.createAgent('lots-paging@example.com', 'lots-paging');
    const nowS = world.gw.clock.nowS();
    // Seven lots whose order is neither their creation order nor their ids'.
    await grant(world, agent.id, 1n * CREDIT, { priority: 200 });
    await grant(world, agent.id, 2n * CREDIT, { priority: 100 });
    await grant(world, agent.id, 3n * CREDIT, { priority: 100, expiresAtS: nowS + 9_000 });
    await grant(world, agent.id, 4n * CREDIT, { priority: 100, expiresAtS: nowS + 3_000 });
    await grant(world, agent.id, 5n * CREDIT, { priority: 50 });
    await grant(world, agent.id, 6n * CREDIT, { priority: 100, expiresAtS: nowS + 3_000 });
    await grant(world, agent.id, 7n * CREDIT, { priority: 100 });
    const read = (query: string) => world.api('GET', `/v1/owner/agents/${agent.id}/lots${query}`, { token: agent.ownerToken });

    const whole = await read('?limit=100');
    expect(whole.status).toBe(200);
    expect(whole.body.hasMore).toBe(false);
    expect(whole.body.lots.map((lot: { grantedUc: string }) => lot.grantedUc)).toEqual(['5000000', '4000000', '6000000', '3000000', '2000000', '7000000', '1000000']);

    const paged: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 10; pages++) {
      const page = await read(`?limit=2${cursor ? `&startingAfter=${cursor}` : ''}`);
      expect(page.status, JSON.stringify(page.body)).toBe(200);
      paged.push(...page.body.lots.map((lot: { id: string }) => lot.id));
      if (!page.body.hasMore) break;
      cursor = page.body.lots.at(-1).id;
    }
    expect(paged).toEqual(whole.body.lots.map((lot: { id: string }) => lot.id));
    expect((await read('')).body.lots).toHaveLength(7); // the default page is 20

    // A delegate reads its root's lots, paged the same way.
    const allowed = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: 'lots-allow-delegates', body: { delegation: { allowed: true, maxDepth: 1 } } });
    expect(allowed.status, JSON.stringify(allowed.body)).toBe(200);
    const delegate = await world.api('POST', `/v1/agents/${agent.id}/delegates`, {
      token: agent.ownerToken,
      key: 'lots-delegate',
      body: { name: 'lots-delegate', identity: { issuer: world.agentIssuer.issuer, subject: 'lots-delegate' } },
    });
    expect(delegate.status, JSON.stringify(delegate.body)).toBe(201);
    const ofDelegate = await world.api('GET', `/v1/owner/agents/${delegate.body.id}/lots?limit=3`, { token: agent.ownerToken });
    expect([ofDelegate.body.lots.map((lot: { id: string }) => lot.id), ofDelegate.body.hasMore]).toEqual([whole.body.lots.slice(0, 3).map((lot: { id: string }) => lot.id), true]);
    const next = await world.api('GET', `/v1/owner/agents/${delegate.body.id}/lots?limit=3&startingAfter=${ofDelegate.body.lots[2].id}`, { token: agent.ownerToken });
    expect(next.body.lots.map((lot: { id: string }) => lot.id)).toEqual(whole.body.lots.slice(3, 6).map((lot: { id: string }) => lot.id));
  });

  it("refuses a cursor that is no lot of this payer's, and an agent of another owner is 404", async () => {
    const agent = await world.createAgent('lots-cursor@example.com', 'lots-cursor');
    const other = await world.createAgent('lots-cursor-other@example.com', 'lots-cursor-other');
    await grant(world, agent.id, CREDIT);
    const foreign = await grant(world, other.id, CREDIT);
    for (const cursor of ['lot_doesnotexist', foreign.id]) {
      const res = await world.api('GET', `/v1/owner/agents/${agent.id}/lots?startingAfter=${cursor}`, { token: agent.ownerToken });
      expect([res.status, res.body.code], cursor).toEqual([400, 'invalid_input']);
    }
    expect((await world.api('GET', `/v1/owner/agents/${other.id}/lots`, { token: agent.ownerToken })).status).toBe(404);
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/lots?limit=101`, { token: agent.ownerToken })).status).toBe(400);
  });

  it('GET /v1/me shows an agent the first 100 lots, the next to be spent, and whether there are more', async () => {
    const agent = await world.createAgent('lots-me@example.com', 'lots-me');
    for (let i = 0; i < 101; i++) await grant(world, agent.id, BigInt(i + 1) * 1000n, { priority: 1000 - i });
    const me = await world.api('GET', '/v1/me', { token: agent.token });
    expect(me.status).toBe(200);
    expect([me.body.lots.length, me.body.lotsHasMore, me.body.lots[0].grantedUc]).toEqual([100, true, '101000']);
  });
});
