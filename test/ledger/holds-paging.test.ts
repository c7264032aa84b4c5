// An agent's holds, page by page, oldest or newest first: the order is the order they were taken, a cursor
// continues in the page's own order, and a page reads only its own rows from the index, however many holds the
// agent has and however deep the cursor (the list once sorted all of an agent's holds for every page). Both
// databases.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/platform/db/database.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { pageBySeq } from '../../src/platform/db/paging.ts';
import { openTestDatabase, type TestDatabase } from '../support/database.ts';
import { grant, mint, openShop } from '../support/ledger-fixture.ts';
import { seedAgents, type PlanNode } from '../support/scale.ts';
import { startWorld, type World } from '../support/world.ts';

describe('GET /v1/owner/agents/{id}/holds, page by page', () => {
  let world: World;
  afterAll(() => world?.close());

  it('lists the holds oldest first or, with order=desc, newest first; a cursor continues in the same order', async () => {
    world = await startWorld();
    const shop = await openShop(world);
    const offer = await shop.offer({ priceUc: '1000' });
    const agent = await world.createAgent('holds-paging@example.com', 'holds-paging-agent');
    await grant(world, agent.id, 1_000_000n);
    const taken: string[] = [];
    for (let index = 0; index < 5; index++) {
      // Two holds in each second, and seconds apart: the order holds within a second and across seconds.
      if (index % 2 === 0) world.gw.clock.advance(1_000);
      const minted = await mint(world, agent.token, offer.id);
      expect(minted.status).toBe(200);
      taken.push(minted.body.redemption.id);
    }
    const walk = async (order?: string) => {
      const seen: string[] = [];
      let startingAfter: string | undefined;
      for (;;) {
        const query = new URLSearchParams({ limit: '2', ...(order ? { order } : {}), ...(startingAfter ? { startingAfter } : {}) });
        const page = await world.api('GET', `/v1/owner/agents/${agent.id}/holds?${query}`, { token: agent.ownerToken });
        expect(page.status, JSON.stringify(page.body)).toBe(200);
        seen.push(...page.body.redemptions.map((hold: { id: string }) => hold.id));
        if (!page.body.hasMore) return seen;
        startingAfter = seen.at(-1);
      }
    };
    expect(await walk()).toEqual(taken);
    expect(await walk('asc')).toEqual(taken);
    expect(await walk('desc')).toEqual([...taken].reverse());
    const refused = await world.api('GET', `/v1/owner/agents/${agent.id}/holds?order=newest`, { token: agent.ownerToken });
    expect([refused.status, refused.body.code]).toEqual([400, 'invalid_input']);
    // The refusal names every choice, not the first one alone (found from outside: "must be \"asc\"" for DESC).
    expect(refused.body.detail).toBe('querystring/order must be one of "asc", "desc"');
    // A number is written in decimal digits: 0x5, 5e0 or +5 are not read as 5 (found from outside).
    for (const limit of ['0x5', '5e0', '+5', '5.0', ' 5', '05']) {
      const loose = await world.api('GET', `/v1/owner/agents/${agent.id}/holds?limit=${encodeURIComponent(limit)}`, { token: agent.ownerToken });
      expect([limit, loose.status, loose.body.detail]).toEqual([limit, 400, 'querystring/limit must be an integer in decimal digits, like 20']);
    }
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/holds?limit=5`, { token: agent.ownerToken })).status).toBe(200);
  });

  it('with expand=offer, each hold carries what was bought as it was sold, whatever the offer became; without it, no offer', async () => {
    const shop = await openShop(world);
    const offer = await shop.offer({ priceUc: '1000' });
    const agent = await world.createAgent('holds-expand@example.com', 'holds-expand-agent');
    await grant(world, agent.id, 1_000_000n);
    const minted = await mint(world, agent.token, offer.id);
    expect(minted.status).toBe(200);
    // The offer is renamed after the sale: the hold shows the name it was bought under.
    const renamed = await world.api('PATCH', `/v1/merchants/${shop.merchantId}/offers/${offer.id}`, { token: shop.key, body: { name: 'Renamed later' } });
    expect(renamed.status, JSON.stringify(renamed.body)).toBe(200);
    const { rows } = await world.gw.gateway.db.query<{ domain: string }>('SELECT domain FROM merchants WHERE id = $1', [shop.merchantId]);
    const path = `/v1/owner/agents/${agent.id}/holds`;
    const expanded = await world.api('GET', `${path}?expand=offer`, { token: agent.ownerToken });
    expect(expanded.status, JSON.stringify(expanded.body)).toBe(200);
    const [hold] = expanded.body.redemptions;
    expect(hold.offer).toMatchObject({ id: offer.id, merchantId: shop.merchantId, merchantDomain: rows[0]!.domain, name: 'Book', priceUc: '1000' });
    expect(hold.offer.name).not.toBe('Renamed later');
    const plain = await world.api('GET', path, { token: agent.ownerToken });
    expect(plain.body.redemptions[0]).not.toHaveProperty('offer');
    expect(plain.body.redemptions[0]).toEqual({ ...hold, offer: undefined });
    const refused = await world.api('GET', `${path}?expand=merchant`, { token: agent.ownerToken });
    expect([refused.status, refused.body.code, refused.body.detail]).toEqual([400, 'invalid_input', 'querystring/expand must be "offer"']);
  });
});

describe('a page of an agent with many holds reads only its own rows', () => {
  const HOLDS = 20_000;
  let test: TestDatabase;

  beforeAll(async () => {
    test = await openTestDatabase();
    const { db } = test;
    await migrate(db);
    await seedAgents(db, 'paging', 2);
    await db.query(
      `INSERT INTO holds (id, agent_id, payer_id, acceptor_id, offer_id, category, amount_uc, state, expires_at_s, created_at_s, resolved_at_s)
       SELECT 'hld_paging_' || i, agent, agent, 'mer_paging', 'off_paging', 'books', 1000,
              'released', 1700000000 + i / 7 + 600, 1700000000 + i / 7, 1700000000 + i / 7
         FROM generate_series(1, $1::int) AS i, LATERAL (SELECT CASE WHEN i % 10 = 0 THEN 'agt_paging_2' ELSE 'agt_paging_1' END AS agent) AS a`,
      [HOLDS],
    );
    await db.exec('ANALYZE holds');
  }, 60_000);
  afterAll(() => test?.drop());

  /** The rows each scan of `holds` in the plan produced: what a page costs the database. */
  function holdsRead(node: PlanNode & { 'Actual Rows'?: number; 'Actual Loops'?: number; 'Rows Removed by Filter'?: number }): number {
    const own = node['Relation Name'] === 'holds' ? ((node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0)) * (node['Actual Loops'] ?? 1) : 0;
    return own + (node.Plans ?? []).reduce((sum, child) => sum + holdsRead(child), 0);
  }

  async function pageCost(db: Queryable, page: { limit: number; startingAfter?: string; order?: 'asc' | 'desc' }) {
    let statement: { sql: string; params: readonly unknown[] } | undefined;
    const recording: Queryable = {
      query: (sql, params = []) => {
        statement ??= { sql, params };
        return db.query(sql, params);
      },
      exec: (sql) => db.exec(sql),
    };
    const found = await pageBySeq<{ id: string }>(recording, 'holds', 'agent_id', 'agt_paging_1', page);
    const { rows } = await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${statement!.sql}`, statement!.params);
    const raw = rows[0]!['QUERY PLAN'];
    const plan = ((typeof raw === 'string' ? JSON.parse(raw) : raw) as Array<{ Plan: PlanNode }>)[0]!.Plan;
    return { ids: found.items.map((row) => row.id), read: holdsRead(plan) };
  }

  it('the first page, a deep one, and the same newest first', async () => {
    const first = await pageCost(test.db, { limit: 20 });
    expect(first.ids.slice(0, 3)).toEqual(['hld_paging_1', 'hld_paging_2', 'hld_paging_3']);
    const deep = await pageCost(test.db, { limit: 20, startingAfter: 'hld_paging_18001' });
    expect(deep.ids.slice(0, 2)).toEqual(['hld_paging_18002', 'hld_paging_18003']);
    const newest = await pageCost(test.db, { limit: 20, order: 'desc' });
    expect(newest.ids.slice(0, 2)).toEqual(['hld_paging_19999', 'hld_paging_19998']);
    const deepNewest = await pageCost(test.db, { limit: 20, order: 'desc', startingAfter: 'hld_paging_2001' });
    expect(deepNewest.ids.slice(0, 2)).toEqual(['hld_paging_1999', 'hld_paging_1998']);
    // A page of 21 rows (one to tell hasMore) reads them, the cursor's row, and the rest of the seconds they share.
    for (const page of [first, deep, newest, deepNewest]) expect(page.read).toBeLessThan(60);
  });
});
