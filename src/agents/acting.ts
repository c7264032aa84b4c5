// Who may act for an agent, decided in one place for every operation and query: the agent itself, or its
// owner (a human session or an owner token). Merchants and the operator never act for an agent here.
import { ApiError } from '../platform/errors.ts';
import type { Principal } from '../platform/principal.ts';

/** The two facts of an agent the rule reads. */
export interface AgentOwnership {
  id: string;
  owner_id: string;
}

export type Actor = Pick<Principal, 'kind' | 'agentId' | 'ownerId'>;

/** True when `principal` may act for `agent`: it is that agent, or that agent's owner. */
export function actsFor(principal: Actor, agent: AgentOwnership): boolean {
  if (principal.kind === 'agent') return principal.agentId === agent.id;
  return (principal.kind === 'human' || principal.kind === 'owner') && principal.ownerId !== undefined && principal.ownerId === agent.owner_id;
}

/**
 * Which agent an operation acts for when the request may name one (execute, top-ups). An agent acts as
 * itself: naming another agent is 403 agent_mismatch. A human or owner must name one of the owner's agents:
 * 400 agent_required without one, 403 owner_required for any other id, known or not, so ids cannot be probed.
 * `lookup` reads the named agent (undefined when there is none).
 */
export async function actingAgent<A extends AgentOwnership>(
  principal: Actor,
  requestedAgentId: string | undefined,
  lookup: (agentId: string) => Promise<A | undefined>,
): Promise<A> {
  if (principal.kind === 'agent') {
    const self = principal.agentId!;
    if (requestedAgentId !== undefined && requestedAgentId !== self) {
      throw new ApiError('agent_mismatch', { detail: 'an agent acts only for itself; omit agentId or send your own id' });
    }
    const agent = await lookup(self);
    if (!agent) throw new ApiError('not_found', { detail: `no agent ${self}` });
    return agent;
  }
  if (requestedAgentId === undefined) throw new ApiError('agent_required', { detail: 'an owner credential must name the agent in agentId' });
  const agent = await lookup(requestedAgentId);
  if (!agent || !actsFor(principal, agent)) throw new ApiError('owner_required', { detail: 'agentId must name one of your own agents' });
  return agent;
}
