// A group-commit batch's statements find their rows by index, on the plans the batch runs them with (generic,
// with sequential scans priced out), on tables of a few hundred rows that were never analyzed: the size at which
// PostgreSQL's cost model prefers a sequential scan and a hash join to the ten index probes it assumes a generic
// plan's array holds, and a connection keeps that plan as the table grows. Every statement of a mint's batch and
// of a capture's is explained here, as the batch sent it, as the prepared statement it is (`preparedPlanOf`), on
// both databases. Against the code before the setting (generic plans only), nearly every statement scanned: the
// agents' lock, the lots read, the hold statement (`credit_lots`, `budget_usage`), the capture's read (`holds`)
// and its settlement, and the answers' update (`idempotency_keys`). A whole read is a sequential scan or an
// index scan with no key: the settlement's update of its holds read the open holds' partial index whole (every
// open hold, on every settlement) while its guard named that index's own state (`state = 'held'`); and, planned
// on tables analyzed while young, the updates joined with their keys read a primary key whole in key order.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable, Tx } from '../../src/platform/db/database.ts';
import { BATCH_PLANS } from '../../src/platform/operations.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { seedAgents, wholeReadsOf } from '../support/scale.ts';
import { startWorld, type World } from '../support/world.ts';

const FILLER_AGENTS = 600;

let world: World;
let shop: Shop;

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
  const { db } = world.gw.gateway;
  // Other agents' lots and budget periods, so that the tables the hold pass probes hold a few hundred rows.
  await seedAgents(db, 'filler', FILLER_AGENTS);
  await db.query(
    `INSERT INTO credit_lots (id, agent_id, source, priority, granted_uc, remaining_uc, created_at_s)
     SELECT 'lot_filler_' || i, 'agt_filler_' || i, 'grant', 100, 1000000, 1000000, 0 FROM generate_series(1, $1::int) AS i`,
    [FILLER_AGENTS],
  );
  await db.query(
    `INSERT INTO budget_usage (agent_id, budget_id, period_start_s, spent_uc)
     SELECT 'agt_filler_' || i, b, 0, 0 FROM generate_series(1, $1::int) AS i, unnest(ARRAY['daily', 'shop', 'books']) AS b`,
    [FILLER_AGENTS],
  );
}, 60_000);
afterAll(() => world?.close());

interface Statement {
  sql: string;
  params: readonly unknown[];
}

/** Records every statement the gateway's transactions send while `fn` runs, by transaction. */
async function recorded(fn: () => Promise<void>): Promise<Statement[][]> {
  const { db } = world.gw.gateway;
  const transactions: Statement[][] = [];
  const recording = (queryable: Queryable, into: Statement[]) =>
    new Proxy(queryable, {
      get(target, property, receiver) {
        if (property === 'query') return (sql: string, params: readonly unknown[] = []) => (into.push({ sql, params }), target.query(sql, params));
        if (property === 'exec') return (sql: string) => (into.push({ sql, params: [] }), target.exec(sql));
        if (property === 'send') return (sql: string, params: readonly unknown[] = []) => (into.push({ sql, params }), (target as Tx).send(sql, params));
        if (property === 'lastStatement') return () => recording((target as Tx).lastStatement(), into);
        const value = Reflect.get(target, property, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  const transaction = db.transaction;
  db.transaction = <T>(body: (tx: Tx) => Promise<T>) => {
    const statements: Statement[] = [];
    transactions.push(statements);
    return transaction.call(db, (tx: Tx) => body(recording(tx, statements) as Tx)) as Promise<T>;
  };
  try {
    await fn();
  } finally {
    db.transaction = transaction;
  }
  return transactions;
}

/** The whole-table reads of each statement of the batches among `transactions`, on the batch's own plans. */
async function scansOfBatches(transactions: Statement[][]): Promise<Array<{ statement: string; scans: string[] }>> {
  const batches = transactions.filter((statements) => statements.some(({ sql }) => sql === BATCH_PLANS));
  expect(batches.length).toBeGreaterThan(0);
  const found = [];
  for (const { sql, params } of batches.flat()) {
    if (sql === BATCH_PLANS) continue;
    const scans = await world.gw.gateway.db.transaction(async (tx) => {
      await tx.exec(BATCH_PLANS);
      return wholeReadsOf(tx, sql, params);
    });
    found.push({ statement: sql.replace(/\s+/g, ' ').slice(0, 60), scans });
  }
  return found;
}

describe("a batch's statements", () => {
  it('probe, and scan no table, in a mint and a capture over tables of a few hundred rows', async () => {
    const offer = await shop.offer({ priceUc: '1000000' });
    const agent = await world.createAgent('plans@example.com', 'plans-agent');
    await grant(world, agent.id, 10_000_000n);
    const mandate = {
      budgets: [
        { id: 'daily', limitUc: '5000000', period: 'day' },
        { id: 'shop', limitUc: '5000000', period: 'month', merchantId: shop.merchantId },
        { id: 'books', limitUc: '5000000', period: 'total', category: 'books' },
      ],
    };
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: 'plans-mandate', body: mandate })).status).toBe(200);
    // The first mint opens the budgets' periods; the second runs the pass every later mint runs.
    expect((await mint(world, agent.token, offer.id, 'plans-first')).status).toBe(200);
    let redemptionId = '';
    const minted = await recorded(async () => {
      const res = await mint(world, agent.token, offer.id, 'plans-second');
      expect(res.status).toBe(200);
      redemptionId = res.body.redemption.id;
    });
    const captured = await recorded(async () => {
      const res = await world.api('POST', `/v1/redemptions/${redemptionId}/capture`, { token: shop.key, key: 'plans-capture', body: {} });
      expect(res.status).toBe(200);
    });
    const mintScans = await scansOfBatches(minted);
    // The pass that matters was explained: the lots read with the budget totals, and the hold statement.
    expect(mintScans.map(({ statement }) => statement)).toEqual(expect.arrayContaining([expect.stringMatching(/^WITH lot AS/), expect.stringMatching(/^WITH h AS/)]));
    expect(mintScans.filter(({ scans }) => scans.length > 0)).toEqual([]);
    expect((await scansOfBatches(captured)).filter(({ scans }) => scans.length > 0)).toEqual([]);

    // The same statements planned once the tables they write were analyzed while young (a handful of holds and
    // keys: a new gateway's first minute), the plan a connection then kept for its life while they grew. Against
    // the code before, the settlement read the holds' primary key whole (twice) and the allocations' lot index
    // whole, and the answers' update the keys' primary key: a settlement took 2–3 ms and up to 18,000 buffers
    // after two minutes of a 300 req/s open loop, whose p99 rose to 1.5 s until the connections were renewed.
    await world.gw.gateway.db.query('ANALYZE holds, hold_allocations, idempotency_keys');
    expect((await scansOfBatches(minted)).filter(({ scans }) => scans.length > 0)).toEqual([]);
    expect((await scansOfBatches(captured)).filter(({ scans }) => scans.length > 0)).toEqual([]);
  });

  it('probe in a mint that uses an approved purchase, planned once purchase approvals were analyzed while few', async () => {
    const offer = await shop.offer({ priceUc: '1000000' });
    const agent = await world.createAgent('plans-approval@example.com', 'plans-approval-agent');
    await grant(world, agent.id, 10_000_000n);
    const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: 'plans-approval-mandate', body: { approvalAboveUc: '500000' } });
    expect(put.status).toBe(200);
    const asked = await mint(world, agent.token, offer.id, 'plans-approval');
    expect(asked.status).toBe(402);
    const approvalId = new URL(asked.body.approvalUrl).pathname.split('/').pop()!;
    expect((await world.api('POST', `/v1/payments/purchases/${approvalId}/approve`, { token: agent.ownerToken, body: {} })).body.status).toBe('approved');
    // A gateway's first approvals analyzed: the plans a connection then keeps while approvals accumulate.
    await world.gw.gateway.db.query('ANALYZE purchase_approvals');
    const minted = await recorded(async () => {
      const res = await mint(world, agent.token, offer.id, 'plans-approval');
      expect(res.status).toBe(200);
    });
    const scans = await scansOfBatches(minted);
    // Explained: the approvals' lock (with the claims) and their marking as used. Against the statements before,
    // the lock's semi-join with the batch's keys and the marking's join with its ids both read an index whole.
    expect(scans.map(({ statement }) => statement)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^SELECT p\.\* FROM unnest/), expect.stringMatching(/^UPDATE purchase_approvals p SET status = 'used'/)]),
    );
    expect(scans.filter(({ scans }) => scans.length > 0)).toEqual([]);
    const { rows } = await world.gw.gateway.db.query<{ status: string; closed: boolean }>('SELECT status, closed_at_s IS NOT NULL AS closed FROM purchase_approvals WHERE id = $1', [approvalId]);
    expect(rows).toEqual([{ status: 'used', closed: true }]);
  });
});
