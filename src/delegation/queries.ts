// Delegation's read, for every face: an agent's subtree with each agent's budget usage. Its owner reads it,
// and so does the agent itself or any ancestor of it (an agent reads its own subtree); anyone else gets 404.
import { Type } from '@sinclair/typebox';
import type { AgentRow, AgentService, DelegateTree } from '../agents/service.ts';
import type { Query } from '../platform/queries.ts';
import { idOf } from '../platform/schemas.ts';

const TreeInput = Type.Object({ id: idOf('agent (agt_…)') }, { additionalProperties: false });

export interface DelegationQueries {
  /** The owner's read (GET /v1/owner/agents/{id}/delegates). */
  listDelegates: Query<{ id: string }, DelegateTree, AgentRow>;
  /** An agent's read of its own subtree (GET /v1/agents/{id}/delegates): the same read, one name per route. */
  listOwnDelegates: Query<{ id: string }, DelegateTree, AgentRow>;
}

/** `reclaimOverdue` reclaims the holds past their deadline of an agent's tree (the ledger's): usage counts them until then. */
export function delegationQueries(agents: AgentService, reclaimOverdue: (agentId: string) => Promise<unknown>): DelegationQueries {
  const tree = (name: string): Query<{ id: string }, DelegateTree, AgentRow> => ({
    name,
    input: TreeInput,
    output: Type.Ref('DelegateTree'),
    access: (db, { principal, input }) => agents.subtreeReader(db, principal, input.id),
    settle: (_call, row) => reclaimOverdue(row.id),
    read: (db, _call, row) => agents.delegateTree(db, row),
  });
  return { listDelegates: tree('listDelegates'), listOwnDelegates: tree('listOwnDelegates') };
}
