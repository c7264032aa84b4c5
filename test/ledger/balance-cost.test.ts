// The agent's running totals: the backfill of migration 0015 rebuilds what the ledger keeps live, and a
// balance read costs the same whatever the agent's history: it reads the running totals and the lots with
// credit left, never the holds. Proved by the plan, not a timing: the same statements, touching the same
// number of rows, for an agent with 10,000 settled holds as for a new one.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/platform/db/database.ts';
import { MIGRATIONS_DIR } from '../../src/platform/db/migrate.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

const SETTLED_HOLDS = 10_000;
const PRICE_UC = 1_000_000n;

let world: World;
let shop: Shop;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(() => world.close());

/**
 * Writes `count` captured holds of one lot in one statement, as the ledger would have: the holds, their
 * allocations, the lot's debit, the agent's captured total, the merchant's earnings, and the journal of
 * each hold and its capture.
 */
async function settleHoldsInBulk(agentId: string, lotId: string, count: number): Promise<void> {
  const nowS = world.gw.clock.nowS();
  await world.gw.gateway.db.query(
    `WITH n AS (
       SELECT g, 'hold_bulk_' || $1 || '_' || g AS id FROM generate_series(1, $5::int) AS g
     ), held AS (
       INSERT INTO holds (id, agent_id, payer_id, acceptor_id, merchant_id, offer_id, category, amount_uc, captured_uc, state, expires_at_s, created_at_s, resolved_at_s)
       SELECT id, $1, $1, $2, $2, 'off_bulk', 'books', $6, $6, 'captured', $3 + 900, $3, $3 FROM n RETURNING id
     ), allocated AS (
       INSERT INTO hold_allocations (hold_id, lot_id, position, amount_uc, captured_uc) SELECT id, $4, 0, $6, $6 FROM held RETURNING 1
     ), debited AS (
       UPDATE credit_lots SET remaining_uc = remaining_uc - $5::bigint * $6 WHERE id = $4 RETURNING 1
     ), accounted AS (
       UPDATE agent_balances SET captured_uc = captured_uc + $5::bigint * $6 WHERE agent_id = $1 RETURNING 1
     ), earned AS (
       INSERT INTO ledger_accounts (id, balance_uc) VALUES ('merchant:' || $2, $5::bigint * $6)
       ON CONFLICT (id) DO UPDATE SET balance_uc = ledger_accounts.balance_uc + EXCLUDED.balance_uc RETURNING 1
     ), journal AS (
       INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s)
       SELECT id, 'hold', 'lot:' || $4, -$6::bigint, $3 FROM n
       UNION ALL SELECT id, 'hold', 'hold:' || id, $6, $3 FROM n
       UNION ALL SELECT id || ':capture', 'capture', 'hold:' || id, -$6::bigint, $3 FROM n
       UNION ALL SELECT id || ':capture', 'capture', 'merchant:' || $2, $6, $3 FROM n
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM allocated), (SELECT count(*) FROM debited), (SELECT count(*) FROM accounted), (SELECT count(*) FROM earned), (SELECT count(*) FROM journal)`,
    [agentId, shop.merchantId, nowS, lotId, count, PRICE_UC],
  );
}

interface PlanNode {
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  'Rows Removed by Join Filter'?: number;
  Plans?: PlanNode[];
}

/** Every row a plan produced or looked at and threw away, over all its nodes (subplans included). */
function rowsVisited(node: PlanNode): number {
  const own = node['Actual Rows'] * node['Actual Loops'] + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0) + (node['Rows Removed by Join Filter'] ?? 0);
  return own + (node.Plans ?? []).reduce((sum, child) => sum + rowsVisited(child), 0);
}

/** The statements a balance read sends, and the rows their executed plans visit. */
async function balanceReadCost(agentId: string) {
  const db = world.gw.gateway.db;
  const statements: Array<{ sql: string; params: readonly unknown[] }> = [];
  const recording: Queryable = {
    query: (sql, params) => {
      statements.push({ sql, params: params ?? [] });
      return db.query(sql, params);
    },
    exec: (sql) => db.exec(sql),
  };
  const balance = await world.gw.services.ledger.balance(recording, agentId);
  const rows: number[] = [];
  for (const statement of statements) {
    const { rows: explained } = await db.query<Record<string, unknown>>(`EXPLAIN (ANALYZE, FORMAT JSON) ${statement.sql}`, statement.params);
    const cell = Object.values(explained[0]!)[0];
    const plan = (typeof cell === 'string' ? JSON.parse(cell) : cell) as Array<{ Plan: PlanNode }>;
    rows.push(rowsVisited(plan[0]!.Plan));
  }
  return { balance, statements: statements.length, rows };
}

describe('the running totals', () => {
  it('are rebuilt from existing holds and lots by the backfill of migration 0015, to the values kept live', async () => {
    const agent = await world.createAgent('backfill@example.com', 'backfill-agent');
    await grant(world, agent.id, 10n * PRICE_UC);
    const offer = await shop.offer({ priceUc: String(PRICE_UC) });
    const holdIds: string[] = [];
    for (let i = 0; i < 4; i++) holdIds.push((await mint(world, agent.token, offer.id)).body.redemption.id);
    const resolve = (id: string, action: string, body: object) => world.api('POST', `/v1/redemptions/${id}/${action}`, { token: shop.key, key: `backfill-${action}-${id}`, body });
    expect((await resolve(holdIds[0]!, 'capture', { amountUc: String(PRICE_UC / 4n) })).status).toBe(200);
    expect((await resolve(holdIds[1]!, 'capture', {})).status).toBe(200);
    expect((await resolve(holdIds[2]!, 'release', {})).status).toBe(200);
    expect((await resolve(holdIds[1]!, 'refunds', { amountUc: String(PRICE_UC / 2n) })).status).toBe(201);
    const db = world.gw.gateway.db;
    const read = async () => (await db.query('SELECT * FROM agent_balances ORDER BY agent_id')).rows;
    const live = await read();
    expect(live.find((row) => row.agent_id === agent.id)).toEqual({
      agent_id: agent.id,
      held_uc: PRICE_UC,
      captured_uc: PRICE_UC / 4n + PRICE_UC,
      granted_uc: 10n * PRICE_UC + PRICE_UC / 2n,
      refunded_uc: PRICE_UC / 2n,
    });
    const migration = readFileSync(path.join(MIGRATIONS_DIR, '0015_agent_balances.sql'), 'utf8');
    const backfill = migration.slice(migration.indexOf('INSERT INTO agent_balances'));
    await db.transaction(async (tx) => {
      await tx.query('DELETE FROM agent_balances');
      await tx.exec(backfill);
    });
    expect(await read()).toEqual(live);
  });
});

describe('the balance read', () => {
  it('costs the same for an agent with 10,000 settled holds as for a new agent (same statements, same rows visited)', async () => {
    const veteran = await world.createAgent('cost@example.com', 'cost-veteran');
    const newcomer = await world.createAgent('cost@example.com', 'cost-newcomer');
    const lot = await grant(world, veteran.id, 2n * BigInt(SETTLED_HOLDS) * PRICE_UC);
    await grant(world, newcomer.id, PRICE_UC);
    await settleHoldsInBulk(veteran.id, lot.id, SETTLED_HOLDS);
    const { rows: holds } = await world.gw.gateway.db.query<{ n: bigint }>(`SELECT count(*) AS n FROM holds WHERE agent_id = $1 AND state = 'captured'`, [veteran.id]);
    expect(holds[0]!.n).toBe(BigInt(SETTLED_HOLDS));
    await expectLedgerInvariants(world.gw.gateway.db);

    const heavy = await balanceReadCost(veteran.id);
    const light = await balanceReadCost(newcomer.id);
    expect(heavy.balance).toMatchObject({
      availableUc: String(BigInt(SETTLED_HOLDS) * PRICE_UC),
      capturedUc: String(BigInt(SETTLED_HOLDS) * PRICE_UC),
      heldUc: '0',
      grantedUc: String(2n * BigInt(SETTLED_HOLDS) * PRICE_UC),
    });
    expect(light.balance).toMatchObject({ availableUc: String(PRICE_UC), capturedUc: '0', grantedUc: String(PRICE_UC) });
    expect(heavy.statements).toBe(1);
    expect(heavy.statements).toBe(light.statements);
    expect(heavy.rows).toEqual(light.rows);
    // Nothing here grows with the history: a handful of rows, far from the 10,000 holds.
    expect(heavy.rows[0]!).toBeLessThan(100);
  }, 120_000);
});
