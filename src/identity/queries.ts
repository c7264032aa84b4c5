// Who the credential belongs to (GET /v1/me, MCP `whoami`): one query, so both faces answer the same. For an
// agent: its settings, its balance and its lots, read after its holds past their deadline are reclaimed.
import { Type } from '@sinclair/typebox';
import { toAgent, type Agent, type AgentService, type BudgetUsage } from '../agents/service.ts';
import { Nullable, PAGE_LIMIT_MAX } from '../platform/schemas.ts';
import type { Balance, LedgerService, Lot } from '../ledger/service.ts';
import type { Queryable } from '../platform/db/database.ts';
import type { Query } from '../platform/queries.ts';

export interface Me {
  kind: string;
  credential: string;
  owner?: { id: string; email: string };
  agent?: Agent;
  balance?: Balance;
  lots?: Lot[];
  mandate?: { version: number; hash: string | null };
  budgets?: BudgetUsage[];
  ancestorBudgets?: Array<{ agentId: string; budgets: BudgetUsage[] }>;
  merchant?: { merchantId: string; keyId: string; scopes: string[] };
}

export const MeSchema = Type.Object(
  {
    kind: Type.String({ enum: ['human', 'agent', 'owner', 'merchant'] }),
    credential: Type.String({ description: 'human_session, agent_identity, oauth or api_key' }),
    owner: Type.Optional(Type.Object({ id: Type.String(), email: Type.String() }, { description: 'a human session or owner token: the owner' })),
    agent: Type.Optional(Type.Ref('Agent')),
    balance: Type.Optional(Type.Ref('Balance')),
    lots: Type.Optional(Type.Array(Type.Ref('Lot'), { description: `the credit lots that fund the agent (its root's, for a delegate), in burn-down order: the first ${PAGE_LIMIT_MAX}, the next to be spent` })),
    lotsHasMore: Type.Optional(Type.Boolean({ description: `whether it has more than the ${PAGE_LIMIT_MAX} lots shown (its owner pages through them all at GET /v1/owner/agents/{id}/lots)` })),
    mandate: Type.Optional(Type.Object({ version: Type.Integer(), hash: Nullable(Type.String()) }, { description: "the agent's mandate in force (its rules: GET /v1/owner/agents/{id}/mandate, for the owner)" })),
    budgets: Type.Optional(Type.Array(Type.Ref('BudgetUsage'), { description: "each budget of the agent's mandate in its current period: what remains, and when it resets" })),
    ancestorBudgets: Type.Optional(
      Type.Array(Type.Object({ agentId: Type.String(), budgets: Type.Array(Type.Ref('BudgetUsage')) }), {
        description:
          "a delegate's: the budgets of each ancestor's mandate, from its parent up to its root, which its purchases count against too (a purchase " +
          'must fit every budget that applies, its own and each ancestor\'s); empty for a root agent',
      }),
    ),
    merchant: Type.Optional(Type.Object({ merchantId: Type.String(), keyId: Type.String(), scopes: Type.Array(Type.String()) })),
  },
  { $id: 'Me' },
);

export interface IdentityQueries {
  getMe: Query<Record<string, never>, Me>;
}

/** Each ancestor's budgets, parent first (ancestor_ids run from the root down). */
async function ancestorBudgets(db: Queryable, agents: AgentService, ancestorIds: readonly string[]): Promise<Array<{ agentId: string; budgets: BudgetUsage[] }>> {
  if (ancestorIds.length === 0) return [];
  const rows = new Map((await agents.agentRows(db, ancestorIds)).map((row) => [row.id, row]));
  const chain = [...ancestorIds].reverse().map((id) => rows.get(id)!);
  return Promise.all(chain.map(async (row) => ({ agentId: row.id, budgets: await agents.budgetUsage(db, row) })));
}

export function identityQueries(agents: AgentService, ledger: LedgerService): IdentityQueries {
  return {
    getMe: {
      name: 'getMe',
      input: Type.Object({}, { additionalProperties: false }),
      output: Type.Ref('Me'),
      settle: async ({ principal }) => {
        if (principal.kind === 'agent') await ledger.expireDue({ agentId: principal.agentId! });
      },
      read: async (db, { principal }) => {
        const base = { kind: principal.kind, credential: principal.credential };
        if (principal.kind === 'merchant') return { ...base, merchant: { merchantId: principal.merchantId!, keyId: principal.apiKeyId!, scopes: [...principal.scopes] } };
        if (principal.kind !== 'agent') return { ...base, owner: { id: principal.ownerId!, email: principal.email! } };
        const agent = await agents.agentFor(db, principal, principal.agentId!);
        return {
          ...base,
          agent: toAgent(agent),
          balance: await ledger.balance(db, agent.id),
          ...(await ledger.lots(db, agent.id, { limit: PAGE_LIMIT_MAX }).then(({ lots, hasMore }) => ({ lots, lotsHasMore: hasMore }))),
          mandate: { version: agent.mandate_version, hash: agent.mandate_hash },
          budgets: await agents.budgetUsage(db, agent),
          ancestorBudgets: await ancestorBudgets(db, agents, agent.ancestor_ids),
        };
      },
    },
  };
}
