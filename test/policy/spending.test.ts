// The spending policy's one evaluation (src/policy/spending.ts): refusals in the spec's order, caps only
// when credit is taken, and the usage as an input.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { afterTaking, clearAgent, spendingDecisionAttributes, spendingRefusal, type SpendingSettings } from '../../src/policy/spending.ts';

const agent: SpendingSettings = {
  status: 'active',
  allowed_services: ['github'],
  allowed_categories: ['data'],
  cap_per_hold_uc: 100n,
  cap_per_period_uc: 250n,
  cap_period_s: 3600,
};
const nothingSpent = { periodSpentUc: 0n, budgets: new Map() };
const atS = 1_800_000_000;

describe('the spending policy', () => {
  it('refuses in the spec order: frozen, then service, then category, then per hold, then per period', () => {
    const everything = { atS, category: 'mail', serviceId: 'mail', take: { amountUc: 300n, usage: { periodSpentUc: 1000n, budgets: new Map() } } };
    expect(spendingRefusal({ ...agent, status: 'frozen' }, everything)?.rule).toBe('frozen');
    expect(spendingRefusal(agent, everything)?.rule).toBe('service');
    expect(spendingRefusal(agent, { ...everything, serviceId: 'github' })?.rule).toBe('category');
    expect(spendingRefusal(agent, { ...everything, serviceId: 'github', category: 'data' })?.rule).toBe('holdCap');
    expect(spendingRefusal(agent, { atS, category: 'data', take: { amountUc: 100n, usage: { periodSpentUc: 151n, budgets: new Map() } } })?.rule).toBe('periodCap');
    expect(spendingRefusal(agent, { atS, category: 'data', take: { amountUc: 100n, usage: { periodSpentUc: 150n, budgets: new Map() } } })).toBeUndefined();
  });

  it('answers with the codes and messages of the wire', () => {
    expect(spendingRefusal({ ...agent, status: 'frozen' }, { atS, category: 'data' })?.error).toMatchObject({ code: 'FROZEN', status: 403, message: 'the agent is frozen by its owner' });
    expect(spendingRefusal(agent, { atS, category: 'data', serviceId: 'mail' })?.error).toMatchObject({ code: 'SCOPE_FORBIDDEN', status: 403, message: 'the agent may not use service "mail"' });
    expect(spendingRefusal(agent, { atS, category: 'mail' })?.error).toMatchObject({ code: 'SCOPE_FORBIDDEN', message: 'the agent may not spend in category "mail"' });
    // An empty list allows nothing, and the refusal says so (found from outside: [] written for "no restriction").
    const closed = { ...agent, allowed_services: [], allowed_categories: [] };
    expect(spendingRefusal(closed, { atS, category: 'data', serviceId: 'mail' })?.error.message).toBe('the agent may not use service "mail": its allowedServices is an empty list, which allows no service (["*"] allows every one)');
    expect(spendingRefusal({ ...closed, allowed_services: ['*'] }, { atS, category: 'data', serviceId: 'mail' })?.error.message).toBe('the agent may not spend in category "data": its allowedCategories is an empty list, which allows no category (["*"] allows every one)');
    expect(spendingRefusal(agent, { atS, category: 'data', take: { amountUc: 101n, usage: nothingSpent } })?.error).toMatchObject({
      code: 'CAP_EXCEEDED',
      status: 402,
      message: 'the hold of 101 µc exceeds the per-hold cap of 100 µc',
    });
    expect(spendingRefusal(agent, { atS, category: 'data', take: { amountUc: 100n, usage: { periodSpentUc: 200n, budgets: new Map() } } })?.error).toMatchObject({
      code: 'CAP_EXCEEDED',
      message: 'the hold of 100 µc would exceed the cap of 250 µc per 3600 s',
    });
  });

  it('checks no cap when nothing is taken (execute before its hold, the merchant check)', () => {
    expect(spendingRefusal({ ...agent, cap_per_hold_uc: 0n, cap_per_period_uc: 0n }, { atS, category: 'data', serviceId: 'github' })).toBeUndefined();
    expect(() => clearAgent({ ...agent, allowed_categories: ['*'], allowed_services: ['*'] }, { category: 'anything', serviceId: 'any' }, atS)).not.toThrow();
    expect(() => clearAgent(agent, { category: 'mail' }, atS)).toThrow('the agent may not spend in category "mail"');
  });

  it('counts what a pass took before the next spend of the same agent', () => {
    const usage = afterTaking(afterTaking(nothingSpent, 100n, []), 100n, []);
    expect(usage.periodSpentUc).toBe(200n);
    expect(spendingRefusal(agent, { atS, category: 'data', take: { amountUc: 51n, usage } })?.rule).toBe('periodCap');
    expect(spendingRefusal({ ...agent, cap_per_period_uc: null }, { atS, category: 'data', take: { amountUc: 51n, usage } })).toBeUndefined();
  });

  it('traces the room a decision leaves, never below zero when an owner lowered a limit under what was spent', () => {
    const budgeted: SpendingSettings = { ...agent, mandate_rules: { budgets: [{ id: 'books', limitUc: '100', period: 'total' }] } };
    const spent = (budgetUc: bigint, periodUc: bigint) => ({ periodSpentUc: periodUc, budgets: new Map([['books', { spentUc: budgetUc, alertedPct: 0 }]]) });
    const allowed = { atS, category: 'data', take: { amountUc: 30n, usage: spent(60n, 200n) } };
    expect(spendingDecisionAttributes(budgeted, allowed, spendingRefusal(budgeted, allowed))).toMatchObject({
      'acg.mandate.decision': 'allowed',
      'acg.mandate.budget_id': 'books',
      'acg.mandate.budget_remaining_uc': '10',
      'acg.mandate.period_cap_remaining_uc': '20',
    });
    // Lowered to 100 µc after 160 µc were spent (and a cap of 250 µc after 300): the refusal, and its trace, say 0 left.
    const over = { atS, category: 'data', take: { amountUc: 1n, usage: spent(160n, 300n) } };
    const refusal = spendingRefusal({ ...budgeted, cap_per_period_uc: null }, over);
    expect(refusal?.error.options.extra).toMatchObject({ reason: 'budget_exceeded', budget: { remainingUc: '0' } });
    expect(spendingDecisionAttributes({ ...budgeted, cap_per_period_uc: null }, over, refusal)).toMatchObject({ 'acg.mandate.decision': 'refused', 'acg.mandate.budget_remaining_uc': '0' });
    expect(spendingDecisionAttributes(budgeted, over, spendingRefusal(budgeted, over))).toMatchObject({ 'acg.mandate.rule': 'periodCap', 'acg.mandate.period_cap_remaining_uc': '0' });
  });
});
