// The spending policy, in one place: may this agent spend here, and this much? One pure evaluation over the
// agent's settings (status, allowances, caps) and its usage (what its caps already count), asked by
//   - the hold, under the agent's row lock and inside the batch (each hold against what the earlier holds of
//     the pass took), so a freeze, a narrowed allowance or a cap cannot be raced;
//   - execute, before it takes its hold (status, service, category: nothing is taken yet);
//   - the merchant check, which answers `allowed` instead of refusing (nothing is taken).
// Refusals in the spec's order: FROZEN, SCOPE_FORBIDDEN (service, then category), CAP_EXCEEDED (per hold,
// then per period). The connector's own allowlist (the mail inbox) depends on the action's input and is
// checked by the connector's clearance step. What is counted as usage is read by `usageOf` (./store.ts).
import type { Queryable } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import { spentInWindowOf } from './store.ts';

/** What the policy reads of an agent: its status, its allowances and its caps (an agent row has them all). */
export interface SpendingSettings {
  status: string;
  allowed_services: readonly string[];
  allowed_categories: readonly string[];
  cap_per_hold_uc: bigint | null;
  cap_per_period_uc: bigint | null;
  cap_period_s: number;
}

/** Where the agent wants to spend: always a category; a service id when a built-in service runs. */
export interface SpendTarget {
  category: string;
  serviceId?: string;
}

/** What the caps count before this spend: credit the agent's holds took in its current period window. */
export interface Usage {
  periodSpentUc: bigint;
}

/** A spend to evaluate: where, and, when credit is taken (a hold), how much against what usage. */
export interface Spend extends SpendTarget {
  take?: { amountUc: bigint; usage: Usage };
}

/** Which rule refused: the hold pass reclaims overdue holds and asks again only for `periodCap`. */
export type SpendingRule = 'frozen' | 'service' | 'category' | 'holdCap' | 'periodCap';

export interface SpendingRefusal {
  rule: SpendingRule;
  error: ApiError;
}

function permits(allowed: readonly string[], id: string): boolean {
  return allowed.includes('*') || allowed.includes(id);
}

/** The evaluation: the first refusal in the spec's order, or undefined when the agent may spend. */
export function spendingRefusal(agent: SpendingSettings, spend: Spend): SpendingRefusal | undefined {
  if (agent.status !== 'active') return { rule: 'frozen', error: new ApiError('FROZEN', { detail: 'the agent is frozen by its owner' }) };
  if (spend.serviceId !== undefined && !permits(agent.allowed_services, spend.serviceId)) {
    return { rule: 'service', error: new ApiError('SCOPE_FORBIDDEN', { detail: `the agent may not use service "${spend.serviceId}"` }) };
  }
  if (!permits(agent.allowed_categories, spend.category)) {
    return { rule: 'category', error: new ApiError('SCOPE_FORBIDDEN', { detail: `the agent may not spend in category "${spend.category}"` }) };
  }
  if (!spend.take) return undefined;
  const { amountUc, usage } = spend.take;
  if (agent.cap_per_hold_uc !== null && amountUc > agent.cap_per_hold_uc) {
    return { rule: 'holdCap', error: new ApiError('CAP_EXCEEDED', { detail: `the hold of ${amountUc} µc exceeds the per-hold cap of ${agent.cap_per_hold_uc} µc` }) };
  }
  if (agent.cap_per_period_uc !== null && usage.periodSpentUc + amountUc > agent.cap_per_period_uc) {
    return {
      rule: 'periodCap',
      error: new ApiError('CAP_EXCEEDED', { detail: `the hold of ${amountUc} µc would exceed the cap of ${agent.cap_per_period_uc} µc per ${agent.cap_period_s} s` }),
    };
  }
  return undefined;
}

/** Usage once `amountUc` more is taken: a later spend of the same pass is evaluated against it. */
export function afterTaking(usage: Usage, amountUc: bigint): Usage {
  return { periodSpentUc: usage.periodSpentUc + amountUc };
}

/** Clearance before anything is taken (execute): throws the refusal when the agent may not spend at `target`. */
export function clearAgent(agent: SpendingSettings, target: SpendTarget): void {
  const refusal = spendingRefusal(agent, { category: target.category, serviceId: target.serviceId });
  if (refusal) throw refusal.error;
}

/**
 * Each agent's usage at `nowS`: one statement for the agents with a period cap (none when no agent has one);
 * an agent without one has nothing its caps count.
 */
export async function usageOf(db: Queryable, agents: ReadonlyArray<SpendingSettings & { id: string }>, nowS: number): Promise<Map<string, Usage>> {
  const capped = agents.filter((agent) => agent.cap_per_period_uc !== null);
  const spent = await spentInWindowOf(db, capped.map((agent) => ({ agentId: agent.id, sinceS: nowS - agent.cap_period_s })));
  return new Map(agents.map((agent) => [agent.id, { periodSpentUc: spent.get(agent.id) ?? 0n }]));
}
