// Delegation as every face shows it: a subtree with each agent's budget usage, and a retirement's report.
import { Type } from '@sinclair/typebox';
import { Microcredits } from '../platform/schemas.ts';
import { DELEGATES_READ_MAX } from '../agents/service.ts';

export const DelegateTreeSchema = Type.Object(
  {
    agentId: Type.String({ description: 'the agent whose subtree this is (the first node)' }),
    nodes: Type.Array(
      Type.Object({
        agent: Type.Ref('Agent'),
        usage: Type.Array(Type.Ref('BudgetUsage'), {
          description: "each budget of the agent's mandate in its current period (as GET …/mandate shows it): a parent's budgets count its delegates' holds too",
        }),
      }),
      { description: `the agent first, then its delegates, shallowest first; each names its parentId and depth. At most ${DELEGATES_READ_MAX}` },
    ),
    truncated: Type.Boolean({ description: `true when the subtree has more than ${DELEGATES_READ_MAX} agents (the deepest are left out)` }),
  },
  { $id: 'DelegateTree', description: 'An agent and the delegates below it, with what each budget has spent and has left' },
);

export const RetirementSchema = Type.Object(
  {
    agent: Type.Ref('Agent'),
    retiredAgentIds: Type.Array(Type.String(), { description: 'the delegate and every delegate below it, now retired' }),
    releasedHolds: Type.Integer({ minimum: 0, description: 'open holds of the subtree released (their credit back to the root\'s lots, their budgets given back)' }),
    releasedUc: Microcredits('what those holds had reserved'),
  },
  { $id: 'Retirement' },
);

export const DELEGATION_SCHEMAS = [DelegateTreeSchema, RetirementSchema];
