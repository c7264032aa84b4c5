// The order in which a hold pass takes its locks, on real PostgreSQL: lots, then balance rows, whatever the batch
// holds. A settlement takes the same (holds, lots, earnings accounts, balance rows), and a refund its earnings account
// before its payer's balance row; a hold pass that took a balance row and then waited for a lot closed a cycle with
// them (found from outside: 67 deadlocks in ten minutes of mints, captures and refunds over roots and delegates, and
// 503s where the waits behind them passed the lock timeout). Here another transaction holds the lots of a delegate's
// root, as a settlement returning credit to them does, while one pass holds for a root and for that delegate: the
// pass must wait for those lots before it takes any balance row, so the other transaction can still take the root's.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../support/database.ts';
import { grant, openShop, type Shop } from '../support/ledger-fixture.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

const CREDIT_UC = 1_000_000n;
const OWNER = 'lock-order@example.com';

let world: World;
let shop: Shop;

describe.runIf(onPostgres())('the lock order of a hold pass (PostgreSQL)', () => {
  beforeAll(async () => {
    world = await startWorld();
    shop = await openShop(world);
  });
  afterAll(() => world?.close());

  it('a pass over a root and another root’s delegate waits for that root’s lots before it locks any balance row', async () => {
    const root = await world.createAgent(OWNER, 'lock-order-root');
    const parent = await world.createAgent(OWNER, 'lock-order-parent');
    await grant(world, root.id, 10n * CREDIT_UC);
    await grant(world, parent.id, 10n * CREDIT_UC);
    const allowed = await world.api('PUT', `/v1/owner/agents/${parent.id}/mandate`, { token: parent.ownerToken, key: 'lock-order-mandate', body: { delegation: { allowed: true, maxDepth: 1 } } });
    expect(allowed.status).toBe(200);
    const created = await world.api('POST', `/v1/agents/${parent.id}/delegates`, {
      token: parent.token,
      key: 'lock-order-delegate',
      body: { name: 'lock-order-child', identity: { issuer: world.agentIssuer.issuer, subject: 'lock-order-child' } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const child = created.body.id as string;

    // The other transaction: the parent's lots, as a settlement that returns credit to them locks them first.
    const other = new pg.Client({ connectionString: world.gw.database.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query('SELECT id FROM credit_lots WHERE agent_id = $1 FOR UPDATE', [parent.id]);

      const { ledger } = world.gw.services;
      const hold = (agentId: string) => ({ agentId, acceptorId: shop.merchantId, merchantId: shop.merchantId, offerId: 'off_lock_order', category: 'books', amountUc: CREDIT_UC, lifetimeS: 900 });
      const pass = world.gw.gateway.db.transaction((tx) => ledger.holdMany(tx, [hold(root.id), hold(child)]));
      pass.catch(() => {});
      // The pass is waiting for a lock (the parent's lots, which the other transaction holds).
      await expect
        .poll(async () => (await other.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0].n, { timeout: 10_000 })
        .toBe(1);
      // Meanwhile the other transaction goes on to the root's balance row, as a settlement of the root's holds does
      // after its lots: free, since the pass has not taken it. (Taken, this would be a deadlock.)
      const balance = await other.query('SELECT agent_id FROM agent_balances WHERE agent_id = $1 FOR UPDATE NOWAIT', [root.id]);
      expect(balance.rowCount).toBe(1);
      await other.query('COMMIT');

      const outcomes = await pass;
      expect(outcomes.map((outcome) => outcome.ok)).toEqual([true, true]);
      expect(outcomes.map((outcome) => (outcome.ok ? outcome.value.agentId : undefined))).toEqual([root.id, child]);
    } finally {
      await other.end();
    }
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('a pass that reclaims overdue holds after its lots skips one another transaction holds (a sweep or a capture takes the hold first)', async () => {
    const agent = await world.createAgent(OWNER, 'lock-order-reclaim');
    await grant(world, agent.id, CREDIT_UC);
    const { ledger } = world.gw.services;
    const db = world.gw.gateway.db;
    const hold = { agentId: agent.id, acceptorId: shop.merchantId, merchantId: shop.merchantId, offerId: 'off_lock_order', category: 'books', amountUc: CREDIT_UC, lifetimeS: 60 };
    const [first] = await db.transaction((tx) => ledger.holdMany(tx, [hold]));
    expect(first?.ok).toBe(true);
    const overdue = first!.ok ? first!.value.id : '';
    world.gw.clock.advance(61_000);
    const other = new pg.Client({ connectionString: world.gw.database.url });
    await other.connect();
    try {
      // The other transaction: the overdue hold, as the sweeper (or a capture) locks it before its lots.
      await other.query('BEGIN');
      await other.query('SELECT id FROM holds WHERE id = $1 FOR UPDATE', [overdue]);
      // The agent's credit is all in that hold: the pass must reclaim to pay, and so asks for the hold after
      // locking the lots. Waiting for it would close a cycle with the other transaction's next lock (the lots).
      let settled: Array<{ ok: boolean; code?: string }> | undefined;
      const pass = db.transaction((tx) => ledger.holdMany(tx, [hold]));
      pass.then((outcomes) => (settled = outcomes.map((o) => ({ ok: o.ok, code: o.ok ? undefined : (o.error as { code?: string }).code })))).catch(() => {});
      await expect.poll(() => settled, { timeout: 10_000, message: 'the pass waited for the hold another transaction holds' }).toEqual([{ ok: false, code: 'INSUFFICIENT_CREDITS' }]);
      // Done, so the lots are free for the other transaction's next step.
      const lots = await other.query('SELECT id FROM credit_lots WHERE agent_id = $1 FOR UPDATE NOWAIT', [agent.id]);
      expect(lots.rowCount).toBe(1);
      await other.query('ROLLBACK');
      // Once the hold is free, the next pass reclaims it and pays.
      const [again] = await db.transaction((tx) => ledger.holdMany(tx, [hold]));
      expect(again?.ok).toBe(true);
    } finally {
      await other.query('ROLLBACK').catch(() => {});
      await other.end();
      world.gw.clock.advance(-61_000);
    }
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});
