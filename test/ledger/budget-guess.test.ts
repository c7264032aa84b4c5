// A hold pass reads the budgets' running totals with the lots, in the statement sent beside the agents' lock,
// for the budget periods the agents' mandates had at their last hold (LedgerService.lockHolders). Here a budget
// is added after that hold, or a budget's period changes back to one the last hold did not count in: the guess
// misses it, and the hold must still count against the budget in force. (A period boundary crossed since the
// last hold: budget-periods.test.ts; a delegate's ancestors: delegation-concurrency.test.ts.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { budgetPeriodTotals, expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(() => world.close());

const spent = async (agentId: string) => (await budgetPeriodTotals(world.gw.gateway.db, [agentId])).map((t) => [t.budget_id, t.spent_uc, t.covered_uc]);

describe('budgets read with the lots, for the periods of the last hold', () => {
  it('counts a budget added after the agent’s last hold, and refuses past it at once', async () => {
    const book = (await shop.offer({ priceUc: '1000000' })).id;
    const agent = await world.createAgent('guess@example.com', 'guess-added');
    await grant(world, agent.id, 10_000_000n);
    const setMandate = async (budgets: unknown[], key: string) =>
      expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key, body: { budgets } })).status).toBe(200);
    await setMandate([{ id: 'daily', limitUc: '5000000', period: 'day' }], 'guess-1');
    expect((await mint(world, agent.token, book)).status).toBe(200);
    expect((await mint(world, agent.token, book)).status).toBe(200);
    expect(await spent(agent.id)).toEqual([['daily', 2_000_000n, 2_000_000n]]);

    await setMandate(
      [
        { id: 'daily', limitUc: '5000000', period: 'day' },
        { id: 'tight', limitUc: '3500000', period: 'total' },
      ],
      'guess-2',
    );
    // Added, it counts what was spent already (recountRedefinedBudgets): 2 of its 3.5 credits.
    expect(await spent(agent.id)).toEqual([
      ['daily', 2_000_000n, 2_000_000n],
      ['tight', 2_000_000n, 2_000_000n],
    ]);
    expect((await mint(world, agent.token, book)).status).toBe(200);
    const refused = await mint(world, agent.token, book);
    expect([refused.status, refused.body.code, refused.body.budget?.id]).toEqual([402, 'CAP_EXCEEDED', 'tight']);
    expect(await spent(agent.id)).toEqual([
      ['daily', 3_000_000n, 3_000_000n],
      ['tight', 3_000_000n, 3_000_000n],
    ]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('reads the running total of a period the last hold did not count in (a budget’s period changed back)', async () => {
    const book = (await shop.offer({ priceUc: '1000000' })).id;
    const two = (await shop.offer({ priceUc: '2000000' })).id;
    const agent = await world.createAgent('guess@example.com', 'guess-period');
    await grant(world, agent.id, 10_000_000n);
    const setBudget = async (period: string, limitUc: string, key: string) =>
      expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key, body: { budgets: [{ id: 'b', limitUc, period }] } })).status).toBe(200);
    await setBudget('total', '10000000', 'guess-p1');
    expect((await mint(world, agent.token, two)).status).toBe(200);
    // The day counts the hold made today (recountRedefinedBudgets), and the next one.
    await setBudget('day', '10000000', 'guess-p2');
    expect((await mint(world, agent.token, book)).status).toBe(200);
    // Back to the total, which counts both holds again; the last hold was made counting in the day's period.
    await setBudget('total', '4000000', 'guess-p3');
    const refused = await mint(world, agent.token, two);
    expect([refused.status, refused.body.code, refused.body.budget?.id]).toEqual([402, 'CAP_EXCEEDED', 'b']);
    expect((await mint(world, agent.token, book)).status).toBe(200);
    expect((await budgetPeriodTotals(world.gw.gateway.db, [agent.id])).map((t) => t.spent_uc).sort()).toEqual([0n, 4_000_000n]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});
