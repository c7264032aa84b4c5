// The offers' reads, for every face: a merchant's offers (its owner or its keys), and the offers an agent
// may buy (active offers of verified merchants in its allowed categories).
import { Type } from '@sinclair/typebox';
import type { AgentService } from '../agents/service.ts';
import type { AgentRow } from '../agents/service.ts';
import type { MerchantFacts } from '../merchants/service.ts';
import { idOf, PageQuery, type Page } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import type { Offer, OfferService } from './service.ts';

const OfferPage = Type.Object({ offers: Type.Array(Type.Ref('Offer')), hasMore: Type.Boolean() });
export const MerchantOffersInput = Type.Object({ id: idOf('merchant (mer_…)'), ...PageQuery.properties }, { additionalProperties: false });
export const OfferInput = Type.Object({ id: idOf('merchant (mer_…)'), offerId: idOf('offer (off_…)') }, { additionalProperties: false });

export interface OfferQueries {
  listOffers: Query<{ id: string } & Page, { offers: Offer[]; hasMore: boolean }, MerchantFacts>;
  getOffer: Query<{ id: string; offerId: string }, Offer, MerchantFacts>;
  listSellableOffers: Query<Page, { offers: Offer[]; hasMore: boolean }, AgentRow>;
}

export function offerQueries(offers: OfferService, agents: AgentService): OfferQueries {
  return {
    listOffers: {
      name: 'listOffers',
      input: MerchantOffersInput,
      output: OfferPage,
      access: (db, { principal, input }) => offers.reach(db, principal, input.id),
      read: (db, { input }) => offers.list(db, input.id, input),
    },
    getOffer: {
      name: 'getOffer',
      input: OfferInput,
      output: Type.Ref('Offer'),
      access: (db, { principal, input }) => offers.reach(db, principal, input.id),
      read: (db, { input }) => offers.get(db, input.id, input.offerId),
    },
    listSellableOffers: {
      name: 'listSellableOffers',
      input: PageQuery,
      output: OfferPage,
      access: (db, { principal }) => agents.agentFor(db, principal, principal.agentId!),
      read: (db, { input }, agent) => offers.listSellable(db, agent.allowed_categories, input),
    },
  };
}
