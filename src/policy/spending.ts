// The spending policy, in one place: may this agent spend here, and this much? One pure evaluation of the
// agent's mandate (mandate.ts: its status, allowances, merchant rules, validity window, caps, budgets and
// approval threshold) over its usage, and of each ancestor's mandate when the agent is a delegate, asked by
//   - the hold, under the row locks of the agent and its ancestors and inside the batch (each hold against
//     what the earlier holds of the pass took, per agent), so a freeze, a narrowed allowance, a cap or a
//     budget cannot be raced;
//   - execute, before it takes its hold (status, validity, service, category: nothing is taken yet);
//   - the merchant check, which answers `allowed` instead of refusing (with what a hold would take).
// Refusals in this order, each rule asked of the agent and then of each ancestor (parent first), each naming
// its rule (`reason`): FROZEN (`reason` frozen or retired, naming the agent that is); SCOPE_FORBIDDEN
// (mandate_not_valid, service_not_allowed, category_not_allowed, merchant_not_allowed); CAP_EXCEEDED
// (per_hold_cap; per_period_cap, the agent's own rolling cap or an ancestor's, over the agent's own holds; budget_exceeded with the
// budget and whose it is); approval_required (above a threshold, unless the owner approved this purchase). A
// frozen or retired ancestor so stops its whole subtree at its next request, and unfreezing it gives each
// descendant back its own status. The connector's own allowlist (the mail inbox) depends on the action's
// input and is checked by the connector's clearance step. What is counted as usage is read by `usageOf`.
import type { RefusalReason } from '../platform/reasons.ts';
import type { Queryable } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import { activeSpan, addSpanEvent, type Attributes, type SpanRef } from '../platform/telemetry.ts';
import { extendedRulesOf, periodWords, type Budget, type ExtendedRules } from './mandate.ts';
import { periodOf } from './periods.ts';
import { budgetPeriodKey, budgetUsageOf, type BudgetPeriodKey } from './budget-usage.ts';
import { spentInWindowOf, windowKey } from './store.ts';

/** What the policy reads of an agent: its status, its allowances, its caps and the rest of its mandate. */
export interface SpendingSettings {
  status: string;
  /** Set once the agent is retired (with its subtree): it spends no more, as if frozen. */
  retired_at_s?: bigint | null;
  allowed_services: readonly string[];
  allowed_categories: readonly string[];
  cap_per_hold_uc: bigint | null;
  cap_per_period_uc: bigint | null;
  cap_period_s: number;
  /** The mandate's budgets, merchant rules, threshold and window (the agent row's JSONB; absent members default). */
  mandate_rules?: Partial<ExtendedRules> | null;
  /** A delegate's ancestors, root first: each one's status and mandate bind the delegate too. */
  ancestors?: ReadonlyArray<SpendingSettings & { id: string }>;
}

/** Where the agent wants to spend: always a category; a service id when a built-in service runs; a merchant when it buys an offer. */
export interface SpendTarget {
  category: string;
  serviceId?: string;
  merchant?: { id: string; domain: string };
}

/** One budget's spend in its current period, and the highest alert threshold already announced there. */
export interface BudgetSpend {
  spentUc: bigint;
  alertedPct: number;
}

/** What the caps and budgets count before this spend. */
export interface Usage {
  /** The rolling cap's window: credit the agent's holds took in it. */
  periodSpentUc: bigint;
  /**
   * The agent's own holds in each rolling window an ancestor's cap counts (by the window's length in seconds): an
   * ancestor's rolling cap binds each of its delegates' own spending too, so a parent that narrows its cap narrows
   * its delegates' at once. Absent for an agent with no capped ancestor.
   */
  windowsSpentUc?: ReadonlyMap<number, bigint>;
  /** Each budget's spend in its period containing the pass's time, by budget id. */
  budgets: ReadonlyMap<string, BudgetSpend>;
}

export const NO_USAGE: Usage = { periodSpentUc: 0n, budgets: new Map() };

/**
 * A spend to evaluate: where, when, and, when credit is taken (a hold), how much against what usage: the
 * agent's own, and each ancestor's by id (what its budgets count, the subtree's holds included).
 */
export interface Spend extends SpendTarget {
  atS: number;
  take?: { amountUc: bigint; usage: Usage; ancestorUsage?: ReadonlyMap<string, Usage>; approved?: boolean };
}

/** Which rule refused: the hold pass reclaims overdue holds and asks again for `periodCap` and `budget`. */
export type SpendingRule = 'frozen' | 'validity' | 'service' | 'category' | 'merchant' | 'holdCap' | 'periodCap' | 'budget' | 'approval';

export interface SpendingRefusal {
  rule: SpendingRule;
  error: ApiError;
}

/** A budget a spend counts in, and the period it counts in. */
export interface BudgetCharge {
  budget: Budget;
  limitUc: bigint;
  periodStartS: number;
  resetsAtS: number | null;
}

function permits(allowed: readonly string[], id: string): boolean {
  return allowed.includes('*') || allowed.includes(id);
}

/**
 * What a refusal adds when the list that refused is empty, which allows nothing (found from outside: a mandate
 * written with `[]` for "no restriction" stopped the agent, and the refusal did not say the list was empty).
 */
function emptyList(allowed: readonly string[], member: string, what: string): string {
  return allowed.length === 0 ? `: its ${member} is an empty list, which allows no ${what} (["*"] allows every one)` : '';
}

function forbidden(reason: RefusalReason, detail: string, whose: { agentId?: string }): SpendingRefusal['error'] {
  return new ApiError('SCOPE_FORBIDDEN', { detail, extra: { reason, ...whose } });
}

/** The budgets a spend at `target` counts in: unscoped ones, and those naming its merchant, category or service. */
export function chargesOf(agent: SpendingSettings, target: SpendTarget, atS: number): BudgetCharge[] {
  const rules = extendedRulesOf(agent.mandate_rules);
  return rules.budgets
    .filter((budget) => {
      if (budget.merchantId !== undefined) return target.merchant?.id === budget.merchantId;
      if (budget.category !== undefined) return target.category === budget.category;
      if (budget.serviceId !== undefined) return target.serviceId === budget.serviceId;
      return true;
    })
    .map((budget) => {
      const bounds = periodOf(budget.period, rules.timeZone, atS);
      return { budget, limitUc: BigInt(budget.limitUc), periodStartS: bounds.startS, resetsAtS: bounds.resetsAtS };
    });
}

/** Whether the merchant rules admit a merchant, by id or verified domain. */
/**
 * Why the merchant rules refuse a merchant (by id or verified domain, case-insensitive; a deny wins over an allow), in
 * the words a refusal adds, or undefined when they permit it: '' when it is not on a non-empty allow list.
 */
function merchantRefusal(rules: ExtendedRules, merchant: { id: string; domain: string }): string | undefined {
  const names = [merchant.id.toLowerCase(), merchant.domain.toLowerCase()];
  if (rules.merchants.deny.some((name) => names.includes(name))) return ': merchants.deny names it';
  if (rules.merchants.allow === null || rules.merchants.allow.some((name) => names.includes(name))) return undefined;
  return rules.merchants.allow.length === 0 ? ': its merchants.allow is an empty list, which allows no merchant (null allows every merchant not denied)' : '';
}

/** One agent of a chain: the agent asked about (its id may be absent), or an ancestor. */
type Member = SpendingSettings & { id?: string };

/** The agent, then its ancestors from its parent up to its root: the order each rule is asked in. */
function chainOf(agent: SpendingSettings): Member[] {
  return [agent, ...[...(agent.ancestors ?? [])].reverse()];
}

/** Whose mandate a refusal names: the agent's own, or an ancestor's. */
function whose(agent: SpendingSettings, settings: Member): string {
  return settings === agent ? "the agent's mandate" : `the mandate of its ancestor ${settings.id}`;
}

/** Who a refusal names: the agent, or an ancestor. */
function who(agent: SpendingSettings, settings: Member): string {
  return settings === agent ? 'the agent' : `the agent's ancestor ${settings.id}`;
}

/**
 * What a refusal by an ancestor's rule carries besides its sentence: `agentId`, the ancestor whose rule it is (as
 * FROZEN names the frozen ancestor and a budget refusal `budget.agentId`); nothing for the agent's own rule.
 */
function ancestorMember(agent: SpendingSettings, settings: Member): { agentId?: string } {
  return settings === agent ? {} : { agentId: settings.id! };
}

/** What an ancestor's refusal adds to the message the agent's own refusal reads. */
function ofAncestor(agent: SpendingSettings, settings: Member): string {
  return settings === agent ? '' : ` (of its ancestor ${settings.id})`;
}

/** The first frozen or retired agent of the chain, refused as FROZEN naming it. */
export function frozenRefusal(agent: SpendingSettings): SpendingRefusal | undefined {
  for (const settings of chainOf(agent)) {
    const reason = settings.retired_at_s != null ? 'retired' : settings.status !== 'active' ? 'frozen' : undefined;
    if (!reason) continue;
    const detail = `${who(agent, settings)} is ${reason === 'retired' ? 'retired' : 'frozen by its owner'}`;
    return { rule: 'frozen', error: new ApiError('FROZEN', { detail, extra: settings === agent ? { reason } : { reason, agentId: settings.id } }) };
  }
  return undefined;
}

/** One mandate's rules that need no usage: its window, allowances, merchant rules and per-hold cap. */
function scopeRefusal(agent: SpendingSettings, settings: Member, spend: Spend): SpendingRefusal | undefined {
  const rules = extendedRulesOf(settings.mandate_rules);
  const of = whose(agent, settings);
  if ((rules.notBefore !== null && spend.atS < rules.notBefore) || (rules.notAfter !== null && spend.atS >= rules.notAfter)) {
    const window = `${rules.notBefore ?? '-∞'} to ${rules.notAfter ?? '∞'}`;
    return { rule: 'validity', error: forbidden('mandate_not_valid', `${of} is not in force now (valid from ${window}, Unix seconds)`, ancestorMember(agent, settings)) };
  }
  if (spend.serviceId !== undefined && !permits(settings.allowed_services, spend.serviceId)) {
    const detail = `${who(agent, settings)} may not use service "${spend.serviceId}"${emptyList(settings.allowed_services, 'allowedServices', 'service')}`;
    return { rule: 'service', error: forbidden('service_not_allowed', detail, ancestorMember(agent, settings)) };
  }
  if (!permits(settings.allowed_categories, spend.category)) {
    const detail = `${who(agent, settings)} may not spend in category "${spend.category}"${emptyList(settings.allowed_categories, 'allowedCategories', 'category')}`;
    return { rule: 'category', error: forbidden('category_not_allowed', detail, ancestorMember(agent, settings)) };
  }
  const why = spend.merchant ? merchantRefusal(rules, spend.merchant) : undefined;
  if (spend.merchant && why !== undefined) {
    return { rule: 'merchant', error: forbidden('merchant_not_allowed', `${of} does not allow buying from merchant ${spend.merchant.id} (${spend.merchant.domain})${why}`, ancestorMember(agent, settings)) };
  }
  if (spend.take && settings.cap_per_hold_uc !== null && spend.take.amountUc > settings.cap_per_hold_uc) {
    return {
      rule: 'holdCap',
      error: new ApiError('CAP_EXCEEDED', { detail: `the hold of ${spend.take.amountUc} µc exceeds the per-hold cap of ${settings.cap_per_hold_uc} µc${ofAncestor(agent, settings)}`, extra: { reason: 'per_hold_cap', ...ancestorMember(agent, settings) } }),
    };
  }
  return undefined;
}

/** The first budget of one mandate that the spend would take past its limit, against that agent's usage. */
function budgetRefusal(agent: SpendingSettings, settings: Member, spend: Spend, take: NonNullable<Spend['take']>): SpendingRefusal | undefined {
  const usage = settings === agent ? take.usage : take.ancestorUsage?.get(settings.id!);
  // An ancestor's budgets counted as empty would let its subtree overspend them: its usage must be given.
  if (!usage) throw new Error(`spending policy: no usage given for ancestor ${settings.id} of the agent`);
  for (const charge of chargesOf(settings, spend, spend.atS)) {
    const spentUc = usage.budgets.get(charge.budget.id)?.spentUc ?? 0n;
    if (spentUc + take.amountUc <= charge.limitUc) continue;
    const remainingUc = roomLeftUc(charge.limitUc, spentUc);
    return {
      rule: 'budget',
      error: new ApiError('CAP_EXCEEDED', {
        detail: `the hold of ${take.amountUc} µc would exceed budget "${charge.budget.id}"${ofAncestor(agent, settings)} (${charge.limitUc} µc ${periodWords(charge.budget.period)}; ${remainingUc} µc left)`,
        extra: {
          reason: 'budget_exceeded',
          budget: { id: charge.budget.id, ...(settings === agent ? {} : { agentId: settings.id }), limitUc: charge.budget.limitUc, remainingUc: remainingUc.toString(), resetsAt: charge.resetsAtS },
        },
      }),
    };
  }
  return undefined;
}

/**
 * Whether the answer for this agent can depend on the amount: a per-hold or per-period cap, or a budget, on it or on
 * an ancestor. Without one, a yes or no says nothing of any figure (the merchant check counts only prices that can).
 */
export function hasSpendingFigures(agent: SpendingSettings): boolean {
  if (agent.cap_per_hold_uc !== null || agent.cap_per_period_uc !== null) return true;
  if ((agent.mandate_rules?.budgets?.length ?? 0) > 0) return true;
  return agent.ancestors?.some(hasSpendingFigures) ?? false;
}

/** The evaluation: the first refusal in the order above, or undefined when the agent may spend. */
export function spendingRefusal(agent: SpendingSettings, spend: Spend): SpendingRefusal | undefined {
  const frozen = frozenRefusal(agent);
  if (frozen) return frozen;
  const chain = chainOf(agent);
  for (const settings of chain) {
    const refusal = scopeRefusal(agent, settings, spend);
    if (refusal) return refusal;
  }
  const { take } = spend;
  if (!take) return undefined;
  // The agent's own rolling cap, then each ancestor's, over the agent's own holds: an ancestor's cap is a limit on
  // each agent below it (its subtree's total is a budget's to limit), so one narrowed later binds at once.
  for (const settings of chain) {
    if (settings.cap_per_period_uc === null) continue;
    const spentUc = settings === agent ? take.usage.periodSpentUc : take.usage.windowsSpentUc?.get(settings.cap_period_s);
    // Counted as nothing, an ancestor's cap would not bind: its window must be given.
    if (spentUc === undefined) throw new Error(`spending policy: no usage given for the rolling cap of ancestor ${settings.id} of the agent`);
    if (spentUc + take.amountUc <= settings.cap_per_period_uc) continue;
    return {
      rule: 'periodCap',
      error: new ApiError('CAP_EXCEEDED', {
        detail: `the hold of ${take.amountUc} µc would exceed ${settings === agent ? 'the' : `its ancestor ${settings.id}'s`} cap of ${settings.cap_per_period_uc} µc per ${settings.cap_period_s} s${settings === agent ? '' : ` (the agent took ${spentUc} µc in the last ${settings.cap_period_s} s)`}`,
        extra: { reason: 'per_period_cap', ...ancestorMember(agent, settings) },
      }),
    };
  }
  for (const settings of chain) {
    const refusal = budgetRefusal(agent, settings, spend, take);
    if (refusal) return refusal;
  }
  for (const settings of chain) {
    const { approvalAboveUc } = extendedRulesOf(settings.mandate_rules);
    if (approvalAboveUc === null || take.amountUc <= BigInt(approvalAboveUc) || take.approved) continue;
    return {
      rule: 'approval',
      error: new ApiError('approval_required', {
        detail: `the purchase of ${take.amountUc} µc is above the ${settings === agent ? "agent's" : `ancestor ${settings.id}'s`} approval threshold of ${approvalAboveUc} µc: its owner must approve it`,
        extra: { reason: 'above_approval_threshold', ...ancestorMember(agent, settings) },
      }),
    };
  }
  return undefined;
}

/**
 * Usage once `amountUc` more is taken and counted in `charges`: a later spend of the same pass is evaluated
 * against it. `ownUc` is what counts in the rolling cap: the amount for the agent's own hold, 0 for an
 * ancestor, whose budgets a delegate's hold charges but whose rolling cap counts its own holds only.
 */
export function afterTaking(usage: Usage, amountUc: bigint, charges: readonly BudgetCharge[] = [], ownUc = amountUc): Usage {
  const budgets = new Map(usage.budgets);
  for (const charge of charges) {
    const before = budgets.get(charge.budget.id) ?? { spentUc: 0n, alertedPct: 0 };
    budgets.set(charge.budget.id, { ...before, spentUc: before.spentUc + amountUc });
  }
  const windowsSpentUc = usage.windowsSpentUc && ownUc !== 0n ? new Map([...usage.windowsSpentUc].map(([periodS, spentUc]) => [periodS, spentUc + ownUc])) : usage.windowsSpentUc;
  return { periodSpentUc: usage.periodSpentUc + ownUc, ...(windowsSpentUc === undefined ? {} : { windowsSpentUc }), budgets };
}

/** The alert thresholds a budget crosses going from `before` to `after` (each once per period, above `alertedPct`). */
export function thresholdsCrossed(agent: SpendingSettings, charge: BudgetCharge, before: BudgetSpend, afterUc: bigint): number[] {
  const { alertThresholds } = extendedRulesOf(agent.mandate_rules);
  return alertThresholds.filter((pct) => pct > before.alertedPct && afterUc * 100n >= charge.limitUc * BigInt(pct) && before.spentUc * 100n < charge.limitUc * BigInt(pct));
}

/** Clearance before anything is taken (execute): throws the refusal when the agent may not spend at `target` now. */
export function clearAgent(agent: SpendingSettings, target: SpendTarget, atS: number): void {
  const spend = { ...target, atS };
  const refusal = spendingRefusal(agent, spend);
  traceSpendingDecision(activeSpan(), agent, spend, refusal);
  if (refusal) throw refusal.error;
}

/** What a limit leaves after `usedUc`: never below zero (an owner may lower a limit under what was already spent). */
function roomLeftUc(limitUc: bigint, usedUc: bigint): bigint {
  return limitUc > usedUc ? limitUc - usedUc : 0n;
}

/**
 * A decision as an event (`mandate.decision`) on the span of the call it answers, when tracing (see
 * `spendingDecisionAttributes`).
 */
export function traceSpendingDecision(span: SpanRef | undefined, agent: SpendingSettings, spend: Spend, refusal: SpendingRefusal | undefined): void {
  if (span) addSpanEvent(span, 'mandate.decision', spendingDecisionAttributes(agent, spend, refusal));
}

/**
 * What a `mandate.decision` event says: allowed or refused, the rule and reason that refused, and the agent's own
 * room left after it (its rolling cap's, and its tightest budget's with that budget's id), never below zero. Figures
 * are the agent's own only: never an ancestor's budget, and never recorded on a span another request's trace owns
 * (a batch's).
 */
export function spendingDecisionAttributes(agent: SpendingSettings, spend: Spend, refusal: SpendingRefusal | undefined): Attributes {
  const extra = refusal?.error.options.extra;
  const take = spend.take;
  const takenUc = take && !refusal ? take.amountUc : 0n;
  let tightest: { id: string; remainingUc: bigint } | undefined;
  for (const charge of take ? chargesOf(agent, spend, spend.atS) : []) {
    const spentUc = take!.usage.budgets.get(charge.budget.id)?.spentUc ?? 0n;
    const remainingUc = roomLeftUc(charge.limitUc, spentUc + takenUc);
    if (!tightest || remainingUc < tightest.remainingUc) tightest = { id: charge.budget.id, remainingUc };
  }
  const periodRemainingUc = take && agent.cap_per_period_uc !== null ? roomLeftUc(agent.cap_per_period_uc, take.usage.periodSpentUc + takenUc) : undefined;
  return {
    'acg.mandate.decision': refusal ? 'refused' : 'allowed',
    'acg.mandate.rule': refusal?.rule,
    'acg.mandate.reason': typeof extra?.reason === 'string' ? extra.reason : undefined,
    'acg.mandate.budget_id': tightest?.id,
    'acg.mandate.budget_remaining_uc': tightest?.remainingUc.toString(),
    'acg.mandate.period_cap_remaining_uc': periodRemainingUc?.toString(),
  };
}

/** The budget periods that count at `nowS`: each budget of each agent, in the period containing `nowS`. */
export function budgetPeriodsOf(agents: ReadonlyArray<SpendingSettings & { id: string }>, nowS: number): BudgetPeriodKey[] {
  return agents.flatMap((agent) => {
    const rules = extendedRulesOf(agent.mandate_rules);
    return rules.budgets.map((budget) => ({ agentId: agent.id, budgetId: budget.id, periodStartS: periodOf(budget.period, rules.timeZone, nowS).startS }));
  });
}

/**
 * Each agent's usage at `nowS`: the rolling cap's window (one statement for the agents with a period cap) and
 * each budget's current period (one statement for the agents with budgets, unless the caller read them in
 * its own statement: `budgetsRead`, the running totals of `budgetPeriodsOf(agents, nowS)`); none for agents
 * with neither.
 */
export async function usageOf(
  db: Queryable,
  agents: ReadonlyArray<SpendingSettings & { id: string }>,
  nowS: number,
  budgetsRead?: ReadonlyMap<string, BudgetSpend>,
): Promise<Map<string, Usage>> {
  const known = new Map(agents.map((agent) => [agent.id, agent]));
  // Each agent's own window, and the window of each capped ancestor's cap (its rule binds the agent's own holds).
  const ancestorWindows = new Map(agents.map((agent) => [agent.id, ancestorCapWindowsOf(agent, known)]));
  const windows = agents.flatMap((agent) => {
    const lengths = new Set(ancestorWindows.get(agent.id));
    if (agent.cap_per_period_uc !== null) lengths.add(agent.cap_period_s);
    return [...lengths].map((periodS) => ({ agentId: agent.id, periodS, sinceS: nowS - periodS }));
  });
  const spent = await spentInWindowOf(db, windows);
  const keys = budgetPeriodsOf(agents, nowS);
  const budgets = budgetsRead ?? (await budgetUsageOf(db, keys));
  const byAgent = new Map<string, Map<string, BudgetSpend>>(agents.map((agent) => [agent.id, new Map()]));
  for (const key of keys) byAgent.get(key.agentId)!.set(key.budgetId, budgets.get(budgetPeriodKey(key)) ?? { spentUc: 0n, alertedPct: 0 });
  return new Map(
    agents.map((agent) => {
      const windowed = ancestorWindows.get(agent.id)!;
      const usage: Usage = { periodSpentUc: agent.cap_per_period_uc === null ? 0n : spent.get(windowKey(agent.id, agent.cap_period_s)) ?? 0n, budgets: byAgent.get(agent.id)! };
      if (windowed.length === 0) return [agent.id, usage];
      return [agent.id, { ...usage, windowsSpentUc: new Map(windowed.map((periodS) => [periodS, spent.get(windowKey(agent.id, periodS)) ?? 0n])) }];
    }),
  );
}

/**
 * The lengths of the rolling windows the agent's capped ancestors count: its chain (`ancestors`) when it carries
 * one, else its ancestors among `known` (a tree's rows, by `ancestor_ids`). A read of usage alone (a subtree's
 * figures) may not hold the ancestors: an evaluation that then finds a window missing refuses to decide
 * (`spendingRefusal`), so a cap is never counted as nothing.
 */
function ancestorCapWindowsOf(agent: SpendingSettings & { id: string; ancestor_ids?: readonly string[] }, known: ReadonlyMap<string, SpendingSettings & { id: string }>): number[] {
  const ancestors = agent.ancestors ?? (agent.ancestor_ids ?? []).flatMap((id) => known.get(id) ?? []);
  return [...new Set(ancestors.filter((ancestor) => ancestor.cap_per_period_uc !== null).map((ancestor) => ancestor.cap_period_s))];
}
