// The hold and settlement statements check what they wrote against what they were given, in SQL
// (`ledger_invariant`), since they are sent without awaiting their answers (`Tx.send`) and the batch's answers
// and COMMIT follow them: a wrong count must abort the transaction itself, with its message, and leave nothing
// written. Here each is handed something the ledger's own code never gives it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { balancedEntries } from '../../src/ledger/journal.ts';
import * as store from '../../src/ledger/store.ts';
import { budgetPeriodKey } from '../../src/policy/budget-usage.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(() => world.close());

/** Rows of the tables a hold or a settlement writes, to show that a refused statement left them as they were. */
async function written(): Promise<Record<string, bigint>> {
  const { rows } = await world.gw.gateway.db.query<Record<string, bigint>>(
    `SELECT (SELECT count(*) FROM holds) AS holds, (SELECT count(*) FROM hold_allocations) AS allocations,
            (SELECT count(*) FROM journal_entries) AS journal, (SELECT count(*) FROM events) AS events,
            (SELECT COALESCE(sum(remaining_uc), 0) FROM credit_lots)::bigint AS remaining,
            (SELECT COALESCE(sum(held_uc), 0) FROM agent_balances)::bigint AS held,
            (SELECT count(*) FROM holds WHERE state = 'held') AS open`,
  );
  return rows[0]!;
}

/** A held hold of a new agent, minted through the API, with the lot it took from; `budget`: under a daily budget. */
async function heldHold(name: string, options: { budget?: boolean } = {}): Promise<{ hold: store.HoldRow; lotId: string; agentId: string }> {
  const offer = (await shop.offer({ priceUc: '1000000' })).id;
  const agent = await world.createAgent('checks@example.com', name);
  await grant(world, agent.id, 5_000_000n);
  if (options.budget) {
    const body = { budgets: [{ id: 'daily', limitUc: '3000000', period: 'day' }] };
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `${name}-mandate`, body })).status).toBe(200);
  }
  const minted = await mint(world, agent.token, offer);
  expect(minted.status).toBe(200);
  const hold = (await store.findHold(world.gw.gateway.db, minted.body.redemption.id))!;
  const [allocation] = await store.allocationsOf(world.gw.gateway.db, [hold.id]);
  return { hold, lotId: allocation!.lot_id, agentId: agent.id };
}

describe('statements that check themselves (ledger_invariant)', () => {
  it('a hold statement told a budget period has a row it has not: refused with its counts, nothing written', async () => {
    const { hold: template, lotId, agentId } = await heldHold('checks-hold');
    const before = await written();
    const hold: store.HoldRow = { ...template, id: 'hold_checks_1', amount_uc: 1_000_000n, voucher: null };
    const allocations = [{ lotId, amountUc: 1_000_000n }];
    const journal = balancedEntries(hold.id, 'hold', [
      { account: `lot:${lotId}`, amountUc: -1_000_000n },
      { account: `hold:${hold.id}`, amountUc: 1_000_000n },
    ]);
    const charge = { holdId: hold.id, agentId, budgetId: 'never-opened', periodStartS: 0, amountUc: 1_000_000n, alertedPct: 0 };
    const refused = world.gw.gateway.db.transaction(async (tx) => {
      // The period is said to have a row (the pass "read" it), so the statement updates it, and updates none.
      store.recordHolds(tx, [{ hold, allocations }], journal, [charge], new Set([budgetPeriodKey(charge)]));
      await tx.lastStatement().query('SELECT 1');
    });
    await expect(refused).rejects.toMatchObject({
      code: 'XX000',
      message: 'ledger invariant: 1 holds wrote (holds, lots debited, allocations, journal lines, balance rows, budget charges, budget periods, events) {1,1,1,2,1,1,0,0}, not {1,1,1,2,1,1,1,0}',
    });
    expect(await written()).toEqual(before);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('a settlement of a hold that is no longer held: refused with its counts, nothing written', async () => {
    const { hold, lotId } = await heldHold('checks-settle');
    const released = await world.api('POST', `/v1/redemptions/${hold.id}/release`, { token: shop.key, key: 'checks-release', body: {} });
    expect(released.status).toBe(200);
    const before = await written();
    const settlement: store.Settlement = {
      holdId: hold.id,
      state: 'captured',
      capturedUc: hold.amount_uc,
      earningsAccount: `merchant:${shop.merchantId}`,
      receipt: null,
      resolvedAtS: BigInt(Math.floor(Date.now() / 1000)),
      lines: [{ lotId, capturedUc: hold.amount_uc, returnedUc: 0n }],
      budgetCharged: false,
    };
    const journal = balancedEntries(`${hold.id}:capture`, 'capture', [
      { account: `hold:${hold.id}`, amountUc: -hold.amount_uc },
      { account: settlement.earningsAccount, amountUc: hold.amount_uc },
    ]);
    const refused = world.gw.gateway.db.transaction(async (tx) => {
      store.recordSettlements(tx, [settlement], journal, Number(settlement.resolvedAtS));
    });
    await expect(refused).rejects.toMatchObject({
      code: 'XX000',
      message: 'ledger invariant: 1 settlements wrote (holds resolved, payers without their balance row, journal lines, events) {0,0,2,0}, not {1,0,2,0}',
    });
    expect(await written()).toEqual(before);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it("a settlement's give-back to a budget period that has lost its running total: refused with its count, nothing written", async () => {
    const { hold, lotId, agentId } = await heldHold('checks-give-back', { budget: true });
    const db = world.gw.gateway.db;
    // A broken ledger, made here: the period the hold counted in has no running total any more.
    const { rows: periods } = await db.query<Record<string, unknown>>('DELETE FROM budget_usage WHERE agent_id = $1 RETURNING *', [agentId]);
    expect(periods).toHaveLength(1);
    const before = await written();
    const settlement: store.Settlement = {
      holdId: hold.id,
      state: 'released',
      capturedUc: 0n,
      earningsAccount: `merchant:${shop.merchantId}`,
      receipt: null,
      resolvedAtS: BigInt(Math.floor(Date.now() / 1000)),
      lines: [{ lotId, capturedUc: 0n, returnedUc: hold.amount_uc }],
      budgetCharged: true,
    };
    const journal = balancedEntries(`${hold.id}:release`, 'release', [
      { account: `hold:${hold.id}`, amountUc: -hold.amount_uc },
      { account: `lot:${lotId}`, amountUc: hold.amount_uc },
    ]);
    const refused = db.transaction(async (tx) => {
      store.recordSettlements(tx, [settlement], journal, Number(settlement.resolvedAtS));
      await tx.lastStatement().query('SELECT 1');
    });
    await expect(refused).rejects.toMatchObject({ code: 'XX000', message: 'ledger invariant: settled holds owed a give-back to 1 budget periods without a running total' });
    expect(await written()).toEqual(before);
    const period = periods[0]!;
    await db.query('INSERT INTO budget_usage (agent_id, budget_id, period_start_s, spent_uc, alerted_pct) VALUES ($1, $2, $3, $4, $5)', [
      period.agent_id,
      period.budget_id,
      period.period_start_s,
      period.spent_uc,
      period.alerted_pct,
    ]);
    await expectLedgerInvariants(db);
  });
});
