// widerThanParent, the one check of a delegate's mandate against its parent's, says where as well as which rule:
// the delegate's member that is wider (an RFC 6901 pointer into its rules) and the parent's member it is held to.
// Merchant rules compare by the merchants each entry names, so an entry is found by its place in the list as sent.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { defaultExtendedRules, sameRules, widerThanParent, type MandateRules } from '../../src/policy/mandate.ts';

const rules = (over: Partial<MandateRules> = {}): MandateRules => ({
  ...defaultExtendedRules(),
  allowedServices: ['*'],
  allowedCategories: ['*'],
  caps: { perHoldUc: null, perPeriodUc: null, periodS: 86_400 },
  ...over,
});

describe('widerThanParent', () => {
  it('names the child budget whose limit is too large, and the parent budget it must match', () => {
    const parent = rules({ budgets: [{ id: 'a', limitUc: '5', period: 'total' }, { id: 'b', limitUc: '10', period: 'day', category: 'books' }] });
    const child = rules({ budgets: [{ id: 'x', limitUc: '5', period: 'total' }, { id: 'y', limitUc: '1', period: 'week', category: 'books' }, { id: 'z', limitUc: '11', period: 'day', category: 'books' }] });
    expect(widerThanParent(child, parent)).toMatchObject({
      reason: 'budget_wider_than_parent',
      pointer: '/budgets/2/limitUc',
      parent: { pointer: '/budgets/1', value: { id: 'b', limitUc: '10', period: 'day', category: 'books' } },
    });
    expect(widerThanParent(rules({ budgets: [child.budgets[0]!] }), parent)).toMatchObject({ pointer: '/budgets', parent: { pointer: '/budgets/1' } });
  });

  it("finds a merchant entry by the merchants it names: a domain two merchants share is outside a parent allowing one", () => {
    const merchantsOf = (name: string) => (name === 'twins.example.com' ? ['mer_1', 'mer_2'] : [name]);
    const parent = rules({ merchants: { allow: ['mer_1', 'mer_3'], deny: ['spam.example.com', 'twins.example.com'] } });
    const allowing = rules({ merchants: { allow: ['mer_3', 'twins.example.com'], deny: ['spam.example.com', 'twins.example.com'] } });
    expect(widerThanParent(allowing, parent, merchantsOf)).toMatchObject({ reason: 'merchant_outside_parent', pointer: '/merchants/allow/1', parent: { pointer: '/merchants/allow', value: ['mer_1', 'mer_3'] } });
    const denyingOne = rules({ merchants: { allow: ['mer_1'], deny: ['spam.example.com', 'mer_1'] } });
    const wider = widerThanParent(denyingOne, parent, merchantsOf);
    expect(wider).toMatchObject({ reason: 'merchant_outside_parent', pointer: '/merchants/deny', parent: { pointer: '/merchants/deny/1', value: 'twins.example.com' } });
    expect(wider!.detail).toContain('mer_2');
    expect(widerThanParent(rules({ merchants: { allow: ['mer_1'], deny: ['spam.example.com', 'mer_2', 'mer_1'] } }), parent, merchantsOf)).toBeUndefined();
  });
});

describe('sameRules', () => {
  it('is one mandate exactly when the canonical JSON is one: key order aside, a list in another order is another mandate', () => {
    const a = rules({ allowedCategories: ['books', 'music'], caps: { perHoldUc: '5', perPeriodUc: null, periodS: 60 } });
    const reordered = { ...a, caps: { periodS: 60, perPeriodUc: null, perHoldUc: '5' } };
    expect(sameRules(a, reordered)).toBe(true);
    expect(sameRules(a, { ...a, allowedCategories: ['music', 'books'] })).toBe(false);
    expect(sameRules(a, { ...a, approvalAboveUc: '1' })).toBe(false);
  });
});
