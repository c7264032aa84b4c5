import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';

let world: World;
let shop: Shop;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(() => world.close());

describe('hold expiry', () => {
  it('a hold past expiresAt cannot be captured or released, reads as expired, and its credit is back in its lots', async () => {
    const agent = await world.createAgent('exp@example.com', 'exp-agent');
    const lot = await grant(world, agent.id, 4_000_000n);
    const offer = await shop.offer({ priceUc: '3000000', holdLifetimeS: 60 });
    const { redemption } = (await mint(world, agent.token, offer.id)).body;
    world.gw.clock.advance(60_000); // exactly at the deadline: expired
    try {
      // Before any sweep, reads already say expired.
      const read = await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: shop.key });
      expect(read.body.state).toBe('expired');
      const capture = await world.api('POST', `/v1/redemptions/${redemption.id}/capture`, { token: shop.key, key: 'exp-cap', body: {} });
      expect([capture.status, capture.body.code]).toEqual([409, 'hold_resolved']);
      const release = await world.api('POST', `/v1/redemptions/${redemption.id}/release`, { token: shop.key, key: 'exp-rel', body: {} });
      expect([release.status, release.body.code]).toEqual([409, 'hold_resolved']);
      const lots = (await world.api('GET', `/v1/owner/agents/${agent.id}/lots`, { token: agent.ownerToken })).body.lots;
      expect(lots).toEqual([expect.objectContaining({ id: lot.id, remainingUc: '4000000', status: 'active' })]);
      const balance = (await world.api('GET', `/v1/owner/agents/${agent.id}/balance`, { token: agent.ownerToken })).body;
      expect(balance).toMatchObject({ availableUc: '4000000', heldUc: '0', capturedUc: '0' });
      const stored = await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: shop.key });
      expect(stored.body.state).toBe('expired');
      const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(
        `SELECT count(*) AS n FROM events WHERE type = 'redemption.expired' AND payload LIKE $1`,
        [`%${redemption.id}%`],
      );
      expect(rows[0]!.n).toBe(1n);
    } finally {
      world.gw.clock.advance(-60_000);
    }
  });

  it("an expired hold's releasedAt is its expiresAt before and after the sweeper reclaims it, and in its redemption.expired event", async () => {
    const agent = await world.createAgent('released-at@example.com', 'released-at-agent');
    await grant(world, agent.id, 4_000_000n);
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    // Two holds: one read before the sweeper reaches it, one the sweeper reaches unread.
    const [read, unread] = [(await mint(world, agent.token, offer.id)).body.redemption, (await mint(world, agent.token, offer.id)).body.redemption];
    const asMerchant = async (id: string) => (await world.api('GET', `/v1/redemptions/${id}`, { token: shop.key })).body;
    const released = (hold: { state: string; expiresAt: number; releasedAt: number | null; releasedUc: string }) => [hold.state, hold.releasedAt, hold.releasedUc];
    world.gw.clock.advance(61_000);
    try {
      const before = await asMerchant(read.id);
      expect(released(before)).toEqual(['expired', read.expiresAt, '1000000']);
      const stored = await world.gw.gateway.db.query<{ state: string }>('SELECT state FROM holds WHERE id = $1', [read.id]);
      expect(stored.rows[0]!.state).toBe('held'); // read before the sweeper: nothing reclaimed yet

      // The sweeper comes by 8.8 s later (the delay seen from outside), then every channel is read again.
      world.gw.clock.advance(8_800);
      expect(await world.gw.services.ledger.expireDue({ agentId: agent.id })).toBe(2);
      for (const hold of [read, unread]) {
        expect(released(await asMerchant(hold.id)), hold.id).toEqual(['expired', hold.expiresAt, '1000000']);
      }
      expect(await asMerchant(read.id)).toEqual(before);
      const listed = (await world.api('GET', `/v1/owner/agents/${agent.id}/holds`, { token: agent.ownerToken })).body.redemptions;
      for (const hold of [read, unread]) {
        expect(released(listed.find((h: { id: string }) => h.id === hold.id)), hold.id).toEqual(['expired', hold.expiresAt, '1000000']);
      }
      const events = (await world.api('GET', `/v1/merchants/${shop.merchantId}/events?type=redemption.expired&limit=100`, { token: shop.key })).body.events;
      for (const hold of [read, unread]) {
        const event = events.find((e: { payload: { data: { redemption: { id: string } } } }) => e.payload.data.redemption.id === hold.id);
        expect(released(event.payload.data.redemption), hold.id).toEqual(['expired', hold.expiresAt, '1000000']);
      }
    } finally {
      world.gw.clock.advance(-69_800);
    }
  });

  it('one sweep reclaims the due holds of several agents together (one transaction): each credit back, each event once, a live hold untouched', async () => {
    const agents = [await world.createAgent('sweep-a@example.com', 'sweep-a'), await world.createAgent('sweep-b@example.com', 'sweep-b')];
    for (const agent of agents) await grant(world, agent.id, 5_000_000n);
    const shortOffer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    const longOffer = await shop.offer({ priceUc: '500000', holdLifetimeS: 3600 });
    const due: string[] = [];
    for (const agent of agents) for (let i = 0; i < 3; i++) due.push((await mint(world, agent.token, shortOffer.id)).body.redemption.id);
    const live = (await mint(world, agents[0]!.token, longOffer.id)).body.redemption.id;
    world.gw.clock.advance(61_000);
    try {
      const { ledger } = world.gw.services;
      expect(await ledger.expireDue()).toBe(6);
      const { db } = world.gw.gateway;
      const states = await db.query<{ id: string; state: string }>('SELECT id, state FROM holds WHERE id = ANY($1::text[])', [[...due, live]]);
      expect(new Map(states.rows.map((row) => [row.id, row.state]))).toEqual(new Map([...due.map((id) => [id, 'expired'] as const), [live, 'held']]));
      const events = await db.query<{ payload: string }>(`SELECT payload FROM events WHERE type = 'redemption.expired'`);
      for (const id of due) expect(events.rows.filter((row) => row.payload.includes(id))).toHaveLength(1);
      expect(await ledger.balance(db, agents[0]!.id)).toMatchObject({ availableUc: '4500000', heldUc: '500000' });
      expect(await ledger.balance(db, agents[1]!.id)).toMatchObject({ availableUc: '5000000', heldUc: '0' });
      expect(await ledger.expireDue()).toBe(0);
    } finally {
      world.gw.clock.advance(-61_000);
    }
  });

  it('a sweeper pass takes batch after batch while each is full: a backlog clears in one pass (found from outside: 100 per 5 s)', async () => {
    const agent = await world.createAgent('backlog@example.com', 'backlog-agent');
    await grant(world, agent.id, 130_000_000n);
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    for (let i = 0; i < 130; i++) expect((await mint(world, agent.token, offer.id)).status).toBe(200);
    world.gw.clock.advance(61_000);
    try {
      const { ledger } = world.gw.services;
      expect(await ledger.sweepDue()).toBe(130);
      expect(await ledger.sweepDue()).toBe(0);
      expect(await ledger.balance(world.gw.gateway.db, agent.id)).toMatchObject({ availableUc: '130000000', heldUc: '0' });
      await expectLedgerInvariants(world.gw.gateway.db);
    } finally {
      world.gw.clock.advance(-61_000);
    }
  });

  it('the sweeper reclaims due holds of every agent, once, from any number of runs', async () => {
    const agent = await world.createAgent('sweep@example.com', 'sweep-agent');
    await grant(world, agent.id, 3_000_000n);
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    for (let i = 0; i < 3; i++) await mint(world, agent.token, offer.id);
    world.gw.clock.advance(61_000);
    try {
      const { ledger } = world.gw.services;
      const results = await Promise.all([ledger.expireDue(), ledger.expireDue()]);
      expect(results[0]! + results[1]!).toBeGreaterThanOrEqual(3);
      expect(await ledger.expireDue()).toBe(0);
      const balance = await ledger.balance(world.gw.gateway.db, agent.id);
      expect(balance).toMatchObject({ availableUc: '3000000', heldUc: '0' });
    } finally {
      world.gw.clock.advance(-61_000);
    }
  });

  it('credit returned to a lot that expired meanwhile lapses', async () => {
    const agent = await world.createAgent('lapse@example.com', 'lapse-agent');
    const nowS = world.gw.clock.nowS();
    await grant(world, agent.id, 2_000_000n, { expiresAtS: nowS + 30 });
    const offer = await shop.offer({ priceUc: '1500000', holdLifetimeS: 120 });
    const { redemption } = (await mint(world, agent.token, offer.id)).body;
    world.gw.clock.advance(40_000); // the lot has expired; the hold has not
    try {
      const release = await world.api('POST', `/v1/redemptions/${redemption.id}/release`, { token: shop.key, key: 'lapse-rel', body: {} });
      expect(release.status).toBe(200);
      const balance = await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id);
      expect(balance).toEqual({ agentId: agent.id, refundedUc: '0', availableUc: '0', heldUc: '0', capturedUc: '0', lapsedUc: '2000000', grantedUc: '2000000' });
      const refused = await mint(world, agent.token, offer.id);
      expect(refused.body.code).toBe('INSUFFICIENT_CREDITS');
    } finally {
      world.gw.clock.advance(-40_000);
    }
  });

  it('one hold that cannot expire holds back no other: the sweep expires the rest, sets it aside, and its agent still reads', async () => {
    const poisoned = await world.createAgent('unexpirable@example.com', 'unexpirable-agent');
    const bystander = await world.createAgent('bystander@example.com', 'bystander-agent');
    for (const agent of [poisoned, bystander]) await grant(world, agent.id, 4_000_000n);
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    const stuck = (await mint(world, poisoned.token, offer.id)).body.redemption;
    const sibling = (await mint(world, poisoned.token, offer.id)).body.redemption;
    const other = (await mint(world, bystander.token, offer.id)).body.redemption;
    // A row this release cannot settle: budget charges in the form an older release wrote (found from outside).
    await world.gw.gateway.db.query(`UPDATE holds SET budget_charges = '[{"agent_id": "agt_x", "budget_id": "b", "period_start_s": 0}]'::jsonb WHERE id = $1`, [stuck.id]);
    world.gw.clock.advance(61_000);
    try {
      const { ledger } = world.gw.services;
      const states = async () =>
        (await world.gw.gateway.db.query<{ id: string; state: string }>('SELECT id, state FROM holds WHERE id = ANY($1::text[]) ORDER BY id', [[stuck.id, sibling.id, other.id]])).rows;
      expect(await ledger.expireDue()).toBeGreaterThanOrEqual(2);
      expect(await states()).toEqual(
        [
          { id: stuck.id, state: 'held' },
          { id: sibling.id, state: 'expired' },
          { id: other.id, state: 'expired' },
        ].sort((a, b) => (a.id < b.id ? -1 : 1)),
      );
      // Set aside: the next sweeps, the agent's tree and its reads go on without it.
      expect(await ledger.expireDue()).toBe(0);
      expect(await ledger.expireDue({ agentId: poisoned.id })).toBe(0);
      const balance = await world.api('GET', `/v1/owner/agents/${poisoned.id}/balance`, { token: poisoned.ownerToken });
      expect([balance.status, balance.body.heldUc]).toEqual([200, '1000000']);
    } finally {
      world.gw.clock.advance(-61_000);
      await world.gw.gateway.db.query(`UPDATE holds SET budget_charges = NULL WHERE id = $1`, [stuck.id]).catch(() => {});
    }
  });
});
