// Payments' reads, for every face: a top-up, and an agent's top-ups. Who may read is the acting-for rule
// (agents/acting.ts): the agent itself or its owner; anyone else gets 404 for one top-up. Reads need no rail:
// they answer whatever ACG_PAYMENT_PROVIDER is.
import { Type } from '@sinclair/typebox';
import { idOf, PageQuery, ResourceId, type Page } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import { toTopup, type PaymentsService, type Topup } from './service.ts';
import type { TopupRow } from './store.ts';

export const ListTopupsInput = Type.Object({ agentId: Type.Optional(ResourceId), ...PageQuery.properties }, { additionalProperties: false });

export interface PaymentQueries {
  /** Access: the agent whose top-ups are listed. */
  listTopups: Query<{ agentId?: string } & Page, { topups: Topup[]; hasMore: boolean }, string>;
  getTopup: Query<{ id: string }, Topup, TopupRow>;
}

export function paymentQueries(payments: PaymentsService): PaymentQueries {
  return {
    listTopups: {
      name: 'listTopups',
      input: ListTopupsInput,
      output: Type.Object({ topups: Type.Array(Type.Ref('Topup')), hasMore: Type.Boolean() }),
      access: (db, { principal, input }) => payments.listedAgentId(db, principal, input.agentId),
      read: (db, { input }, agentId) => payments.list(db, agentId, input),
    },
    getTopup: {
      name: 'getTopup',
      input: Type.Object({ id: idOf('top-up (top_…)') }, { additionalProperties: false }),
      output: Type.Ref('Topup'),
      access: (db, { principal, input }) => payments.topupFor(db, principal, input.id),
      read: async (_db, _call, row) => toTopup(row),
    },
  };
}
