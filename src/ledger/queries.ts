// The ledger's reads, for every face: a hold, an agent's holds, balance and lots, a merchant's earnings, a
// hold's signed evidence (./evidence.ts), and an owner's spending per agent and day.
// The agent reads are its owner's (or its own); each reclaims the agent's holds past their deadline first,
// so the balance, the lots and the holds agree whichever face asks.
import { Type, type Static } from '@sinclair/typebox';
import type { AgentService } from '../agents/service.ts';
import type { MerchantService } from '../merchants/service.ts';
import { Microcredits, PAGE_LIMIT_MAX, PageQuery, idOf, type Page } from '../platform/schemas.ts';
import type { Queryable } from '../platform/db/database.ts';
import { formatUc } from '../platform/money.ts';
import type { Query, QueryCall } from '../platform/queries.ts';
import type { EvidenceService } from './evidence.ts';
import type { Balance, HoldScope, LedgerService, Lot, Redemption } from './service.ts';

const Id = (resource: string) => Type.Object({ id: idOf(resource) }, { additionalProperties: false });
export const AgentLotsInput = Type.Object({ id: idOf('agent (agt_…)'), ...PageQuery.properties }, { additionalProperties: false });
export const RedemptionIdInput = Id('redemption: the hold (hold_…)');
export const AgentIdInput = Id('agent (agt_…)');
export const AgentHoldsInput = Type.Object(
  {
    agentId: idOf('agent (agt_…)'),
    ...PageQuery.properties,
    order: Type.Optional(
      Type.Union([Type.Literal('asc'), Type.Literal('desc')], {
        default: 'asc',
        description: 'asc: oldest first (by creation time); desc: newest first. `startingAfter` continues in the same order',
      }),
    ),
    expand: Type.Optional(
      Type.Literal('offer', {
        description: 'offer: each redemption carries `offer`, what was bought as it was sold (the merchant offer with its `name` and `merchantDomain`, or the built-in service action)',
      }),
    ),
  },
  { additionalProperties: false },
);
export const SPENDING_DAYS_MAX = 90;
export const OwnerSpendingInput = Type.Object(
  { days: Type.Optional(Type.Integer({ minimum: 1, maximum: SPENDING_DAYS_MAX, default: 30, description: `UTC days, today included, 1–${SPENDING_DAYS_MAX}` })) },
  { additionalProperties: false },
);
export const OwnerSpending = Type.Object({
  timeZone: Type.Literal('UTC', { description: 'days are UTC calendar days' }),
  days: Type.Array(Type.String({ format: 'date' }), { description: 'the period, oldest first; today (UTC) last' }),
  agents: Type.Array(
    Type.Object({
      agentId: Type.String(),
      name: Type.String(),
      totalUc: Microcredits('spent over the period'),
      spentUc: Type.Array(Microcredits(), { description: 'spent per day, in the order of `days`' }),
    }),
    { description: 'each of your agents that made a hold in the period, most spent first' },
  ),
});

/** The owner's agents, all of them (their ids and names): what a read over every agent of an owner needs. */
async function ownersAgents(agents: AgentService, db: Queryable, ownerId: string): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  for (let page = await agents.listAgents(db, ownerId, { limit: PAGE_LIMIT_MAX }); ; ) {
    for (const agent of page.agents) names.set(agent.id, agent.name);
    if (!page.hasMore) return names;
    page = await agents.listAgents(db, ownerId, { limit: PAGE_LIMIT_MAX, startingAfter: page.agents.at(-1)!.id });
  }
}

type ById = { id: string };
type AgentPage = { agentId: string; expand?: 'offer' } & Page;

export interface LedgerQueries {
  getRedemption: Query<ById, Redemption, HoldScope>;
  listAgentHolds: Query<AgentPage, { redemptions: Redemption[]; hasMore: boolean }, unknown>;
  getAgentBalance: Query<ById, Balance, unknown>;
  listAgentLots: Query<Static<typeof AgentLotsInput>, { lots: Lot[]; hasMore: boolean }, unknown>;
  getMerchantEarnings: Query<ById, { merchantId: string; earnedUc: string }, unknown>;
  getRedemptionEvidence: Query<ById, { evidence: string }, void>;
  getOwnerSpending: Query<{ days: number }, Static<typeof OwnerSpending>, Map<string, string>>;
}

export function ledgerQueries(ledger: LedgerService, agents: AgentService, merchants: MerchantService, evidence: EvidenceService): LedgerQueries {
  // The agent reads: its owner (or the agent itself) only; its overdue holds are reclaimed before the read.
  const agentRead = <I>(agentIdOf: (input: I) => string) => ({
    access: (db: Queryable, { principal, input }: QueryCall<I>) => agents.agentFor(db, principal, agentIdOf(input)),
    settle: ({ input }: QueryCall<I>) => ledger.expireDue({ agentId: agentIdOf(input) }),
  });
  const byId = agentRead<ById>((input) => input.id);
  return {
    getRedemption: {
      name: 'getRedemption',
      input: RedemptionIdInput,
      output: Type.Ref('Redemption'),
      access: (_db, { principal }) => ledger.holdReader(principal),
      read: (db, { input }, scope) => ledger.getHold(db, input.id, scope),
    },
    listAgentHolds: {
      name: 'listAgentHolds',
      input: AgentHoldsInput,
      output: Type.Object({ redemptions: Type.Array(Type.Ref('Redemption')), hasMore: Type.Boolean() }),
      ...agentRead<AgentPage>((input) => input.agentId),
      read: (db, { input }) => ledger.listHolds(db, input.agentId, input),
    },
    getAgentBalance: {
      name: 'getAgentBalance',
      input: AgentIdInput,
      output: Type.Ref('Balance'),
      ...byId,
      read: (db, { input }) => ledger.balance(db, input.id),
    },
    listAgentLots: {
      name: 'listAgentLots',
      input: AgentLotsInput,
      output: Type.Object({ lots: Type.Array(Type.Ref('Lot')), hasMore: Type.Boolean() }),
      ...agentRead<Static<typeof AgentLotsInput>>((input) => input.id),
      read: (db, { input }) => ledger.lots(db, input.id, input as Page),
    },
    getMerchantEarnings: {
      name: 'getMerchantEarnings',
      input: Id('merchant (mer_…)'),
      output: Type.Object({ merchantId: Type.String(), earnedUc: Microcredits() }),
      access: (db, { principal, input }) => merchants.reach(db, principal, input.id),
      read: async (db, { input }) => ({ merchantId: input.id, earnedUc: await ledger.merchantEarnings(db, input.id) }),
    },
    // The hold's owner or its merchant; a hold past its deadline is reclaimed first, so its history shows the expiry.
    getRedemptionEvidence: {
      name: 'getRedemptionEvidence',
      input: RedemptionIdInput,
      output: Type.Ref('Evidence'),
      access: (db, { principal, input }) => evidence.reach(db, principal, input.id),
      settle: ({ input }) => ledger.expireDue({ holdId: input.id }),
      read: (_db, { input }) => evidence.evidence(input.id),
    },
    getOwnerSpending: {
      name: 'getOwnerSpending',
      input: OwnerSpendingInput,
      output: OwnerSpending,
      access: (db, { principal }) => ownersAgents(agents, db, principal.ownerId!),
      read: async (db, { input }, names) => {
        const { days, spent } = await ledger.spendingByDay(db, [...names.keys()], input.days);
        const rows = [...spent].map(([agentId, series]) => ({ agentId, series, totalUc: series.reduce((sum, uc) => sum + uc, 0n) }));
        rows.sort((a, b) => (b.totalUc > a.totalUc ? 1 : b.totalUc < a.totalUc ? -1 : a.agentId.localeCompare(b.agentId)));
        return {
          timeZone: 'UTC' as const,
          days,
          agents: rows.map((row) => ({ agentId: row.agentId, name: names.get(row.agentId)!, totalUc: formatUc(row.totalUc), spentUc: row.series.map(formatUc) })),
        };
      },
    },
  };
}
