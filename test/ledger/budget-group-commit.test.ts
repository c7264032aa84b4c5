// Budgets inside a group-commit batch: each mint of a batch is checked against what the earlier mints of the
// batch took, so a batch mixing mints within and over its budgets answers each exactly as one by one, in
// arrival order, and leaves the same running totals and alerts. The batcher is paused while the test queues
// its mints, so the batch is formed deterministically (no timing), then resumed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATCH_LIMITS, batcherOf } from '../../src/platform/operations.ts';
import { voucherOperations } from '../../src/vouchers/operations.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { budgetPeriodTotals, expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type ApiResponse, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
  mintBatcher().limits = { ...BATCH_LIMITS };
});
afterAll(() => world.close());

const mintBatcher = () => batcherOf(world.gw.gateway, voucherOperations(world.gw.services.vouchers).mintVoucher);

/** Sends the mints one after another into the paused batcher (so their arrival order is theirs), then lets them run as one batch. */
async function asOneBatch(token: string, offerIds: readonly string[], prefix: string): Promise<ApiResponse[]> {
  const batcher = mintBatcher();
  batcher.pause();
  const answers: Array<Promise<ApiResponse>> = [];
  try {
    for (const [index, offerId] of offerIds.entries()) {
      answers.push(mint(world, token, offerId, `${prefix}-${index}`));
      await waitFor(() => batcher.queued, { until: (n) => n >= index + 1, what: `${index + 1} mints to reach the batcher`, intervalMs: 5 });
    }
  } finally {
    batcher.resume();
  }
  expect(batcher.queued).toBe(0);
  return Promise.all(answers);
}

/** What a mint answered, without what differs between two agents (ids, times). */
function shapeOf(res: ApiResponse) {
  if (res.status !== 200) {
    const { code, reason, detail, budget } = res.body;
    return { status: res.status, code, reason, detail, budget: budget && { ...budget, resetsAt: typeof budget.resetsAt } };
  }
  return { status: 200, amountUc: res.body.redemption.amountUc, category: res.body.redemption.category };
}

/** The `budget.threshold` events of one agent, as (budget, threshold) in the order emitted. */
async function alertsOf(agentId: string): Promise<string[]> {
  const { rows } = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE type = 'budget.threshold' ORDER BY seq`);
  return rows.map((row) => JSON.parse(row.payload).data).filter((data) => data.agentId === agentId).map((data) => `${data.budget.id}@${data.thresholdPct}`);
}

describe('budgets in a group-commit batch', () => {
  it('answers a batch mixing mints within and over its budgets exactly as one by one, in arrival order', async () => {
    const offers = {
      book1: (await shop.offer({ priceUc: '1000000' })).id,
      book2_5: (await shop.offer({ priceUc: '2500000' })).id,
      book0_5: (await shop.offer({ priceUc: '500000' })).id,
      music1: (await shop.offer({ priceUc: '1000000', category: 'music' })).id,
      music1_5: (await shop.offer({ priceUc: '1500000', category: 'music' })).id,
    };
    const shortLived = (await shop.offer({ priceUc: '2000000', holdLifetimeS: 60 })).id;
    const mandate = {
      budgets: [
        { id: 'daily', limitUc: '5000000', period: 'day' },
        { id: 'music', limitUc: '2000000', period: 'week', category: 'music' },
        { id: 'shop', limitUc: '4500000', period: 'total', merchantId: shop.merchantId },
      ],
      timeZone: 'Asia/Kolkata',
    };
    const alone = await world.createAgent('budget-batch@example.com', 'budget-batch-alone');
    const batched = await world.createAgent('budget-batch@example.com', 'budget-batch-batched');
    for (const agent of [alone, batched]) {
      await grant(world, agent.id, 10_000_000n);
      const set = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `${agent.id}-mandate`, body: mandate });
      expect(set.status).toBe(200);
      // A hold past its deadline still counts until it is reclaimed: the first mint its budget refuses reclaims it and asks again.
      expect((await mint(world, agent.token, shortLived)).status).toBe(200);
    }
    world.gw.clock.advance(61_000);
    const sequence = [
      offers.music1, // daily 1, music 1, shop 1 (+2 overdue)
      offers.book2_5, // refused at 5.5 of daily until the overdue hold is reclaimed: 3.5
      offers.music1_5, // music: 1 + 1.5 > 2
      offers.music1, // daily 4.5, music 2 (alerts: music 80 and 100, daily 80, shop 100)
      offers.book1, // daily: 5.5 > 5
      offers.book0_5, // shop: 4.5 + 0.5 > 4.5
      offers.music1, // daily (the first budget that refuses, in the mandate's order)
    ];
    const reference: ApiResponse[] = [];
    for (const [i, offerId] of sequence.entries()) reference.push(await mint(world, alone.token, offerId, `budget-alone-${i}`));
    const answers = await asOneBatch(batched.token, sequence, 'budget-batched');

    expect(answers.map(shapeOf)).toEqual(reference.map(shapeOf));
    expect(answers.map((a) => [a.status, a.body.budget?.id ?? null])).toEqual([
      [200, null],
      [200, null],
      [402, 'music'],
      [200, null],
      [402, 'daily'],
      [402, 'shop'],
      [402, 'daily'],
    ]);
    expect(answers.filter((a) => a.status === 402).every((a) => a.body.code === 'CAP_EXCEEDED' && a.body.reason === 'budget_exceeded')).toBe(true);
    // The same running totals, the same alerts, and each period's total equals its holds.
    const totals = async (agentId: string) => (await budgetPeriodTotals(world.gw.gateway.db, [agentId])).map(({ budget_id, period_start_s, spent_uc, covered_uc }) => ({ budget_id, period_start_s, spent_uc, covered_uc }));
    expect(await totals(batched.id)).toEqual(await totals(alone.id));
    expect((await totals(batched.id)).map((t) => [t.budget_id, t.spent_uc])).toEqual([
      ['daily', 4_500_000n],
      ['music', 2_000_000n],
      ['shop', 4_500_000n],
    ]);
    expect(await alertsOf(batched.id)).toEqual(await alertsOf(alone.id));
    expect(await alertsOf(batched.id)).toEqual(['daily@80', 'music@80', 'music@100', 'shop@80', 'shop@100']);
    const balances = await Promise.all([alone, batched].map((agent) => world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)));
    expect({ ...balances[1], agentId: alone.id }).toEqual(balances[0]);
    // Each refusal is its key's stored answer: a retry replays it.
    const retried = await mint(world, batched.token, sequence[2]!, 'budget-batched-2');
    expect([retried.status, retried.headers.get('idempotent-replayed'), retried.body.budget?.id]).toEqual([402, 'true', 'music']);
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 60_000);
});
