// Agent management's reads, for every face: the owner's agents, one agent, its avatar. Who may read an
// agent is the one acting-for rule (acting.ts): the agent itself or its owner; anyone else gets 404.
import { Type } from '@sinclair/typebox';
import { idOf, PageQuery, type Page } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import { toAgent, type Agent, type AgentService } from './service.ts';
import type { AgentRow } from './store.ts';

export const AgentIdInput = Type.Object({ id: idOf('agent (agt_…)') }, { additionalProperties: false });

export interface AgentQueries {
  listAgents: Query<Page, { agents: Agent[]; hasMore: boolean }>;
  getAgent: Query<{ id: string }, Agent, AgentRow>;
  getAgentAvatar: Query<{ id: string }, { contentType: string; bytes: Uint8Array }, AgentRow>;
}

export function agentQueries(agents: AgentService): AgentQueries {
  const access = agents.agentFor.bind(agents);
  return {
    listAgents: {
      name: 'listAgents',
      input: PageQuery,
      output: Type.Object({ agents: Type.Array(Type.Ref('Agent')), hasMore: Type.Boolean() }),
      read: (db, { principal, input }) => agents.listAgents(db, principal.ownerId!, input),
    },
    getAgent: {
      name: 'getAgent',
      input: AgentIdInput,
      output: Type.Ref('Agent'),
      access: (db, { principal, input }) => access(db, principal, input.id),
      read: async (_db, _call, row) => toAgent(row),
    },
    getAgentAvatar: {
      name: 'getAgentAvatar',
      input: AgentIdInput,
      output: Type.Object({}, { description: 'the avatar image, in the type it was uploaded as' }),
      access: (db, { principal, input }) => access(db, principal, input.id),
      read: (db, _call, row) => agents.readAvatar(db, row),
    },
  };
}
