// The agent spending policy, in one place: may this agent spend here? Asked by the hold (under the agent's
// row lock, so a freeze or a narrowed allowance cannot be raced), by execute before it takes a hold, and by
// the merchant check (which answers `allowed` instead of refusing). The connector's own allowlist (the mail
// inbox) depends on the action's input and is checked by the connector's clearance step in the same pass.
import { ApiError } from '../platform/errors.ts';

/** What the policy reads of an agent row. */
export interface AgentPolicy {
  status: string;
  allowed_services: readonly string[];
  allowed_categories: readonly string[];
}

/** Where the agent wants to spend: always a category; a service id when a built-in service runs. */
export interface SpendTarget {
  category: string;
  serviceId?: string;
}

function permits(allowed: readonly string[], id: string): boolean {
  return allowed.includes('*') || allowed.includes(id);
}

/** The refusal, in the spec's order (FROZEN, then SCOPE_FORBIDDEN), or undefined when the agent is cleared. */
export function clearanceRefusal(agent: AgentPolicy, target: SpendTarget): ApiError | undefined {
  if (agent.status !== 'active') return new ApiError('FROZEN', { detail: 'the agent is frozen by its owner' });
  if (target.serviceId !== undefined && !permits(agent.allowed_services, target.serviceId)) {
    return new ApiError('SCOPE_FORBIDDEN', { detail: `the agent may not use service "${target.serviceId}"` });
  }
  if (!permits(agent.allowed_categories, target.category)) {
    return new ApiError('SCOPE_FORBIDDEN', { detail: `the agent may not spend in category "${target.category}"` });
  }
  return undefined;
}

/** Throws the refusal when the agent may not spend at `target`. */
export function clearAgent(agent: AgentPolicy, target: SpendTarget): void {
  const refusal = clearanceRefusal(agent, target);
  if (refusal) throw refusal;
}
