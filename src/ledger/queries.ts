// The ledger's reads, for every face: a hold, an agent's holds, balance and lots, a merchant's earnings.
// The agent reads are its owner's (or its own); each reclaims the agent's holds past their deadline first,
// so the balance, the lots and the holds agree whichever face asks.
import { Type } from '@sinclair/typebox';
import type { AgentService } from '../agents/service.ts';
import type { MerchantService } from '../merchants/service.ts';
import { Microcredits, PageQuery, idOf, type Page } from '../platform/schemas.ts';
import type { Queryable } from '../platform/db/database.ts';
import type { Query, QueryCall } from '../platform/queries.ts';
import type { Balance, HoldScope, LedgerService, Lot, Redemption } from './service.ts';

const Id = (resource: string) => Type.Object({ id: idOf(resource) }, { additionalProperties: false });
export const RedemptionIdInput = Id('redemption: the hold (hold_…)');
export const AgentIdInput = Id('agent (agt_…)');
export const AgentHoldsInput = Type.Object({ agentId: idOf('agent (agt_…)'), ...PageQuery.properties }, { additionalProperties: false });

type ById = { id: string };
type AgentPage = { agentId: string } & Page;

export interface LedgerQueries {
  getRedemption: Query<ById, Redemption, HoldScope>;
  listAgentHolds: Query<AgentPage, { redemptions: Redemption[]; hasMore: boolean }, unknown>;
  getAgentBalance: Query<ById, Balance, unknown>;
  listAgentLots: Query<ById, { lots: Lot[] }, unknown>;
  getMerchantEarnings: Query<ById, { merchantId: string; earnedUc: string }, unknown>;
}

export function ledgerQueries(ledger: LedgerService, agents: AgentService, merchants: MerchantService): LedgerQueries {
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
      input: AgentIdInput,
      output: Type.Object({ lots: Type.Array(Type.Ref('Lot')) }),
      ...byId,
      read: async (db, { input }) => ({ lots: await ledger.lots(db, input.id) }),
    },
    getMerchantEarnings: {
      name: 'getMerchantEarnings',
      input: Id('merchant (mer_…)'),
      output: Type.Object({ merchantId: Type.String(), earnedUc: Microcredits() }),
      access: (db, { principal, input }) => merchants.reach(db, principal, input.id),
      read: async (db, { input }) => ({ merchantId: input.id, earnedUc: await ledger.merchantEarnings(db, input.id) }),
    },
  };
}
