// Payments' reads, for every face: a top-up, an agent's top-ups, a purchase approval, and the owner's list of
// approvals (top-ups and purchases) that wait for it. Who may read one is the acting-for rule
// (agents/acting.ts): the agent itself or its owner; anyone else gets 404. Reads need no rail: they answer
// whatever ACG_PAYMENT_PROVIDER is.
import { Type } from '@sinclair/typebox';
import { idOf, PageQuery, ResourceId, type Page } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import { ApiError } from '../platform/errors.ts';
import type { OwnerApproval, PurchaseApproval } from './purchases.ts';
import { toTopup, type PaymentsService, type Topup } from './service.ts';
import type { ApprovalsShown, PurchaseApprovalRow, TopupRow } from './store.ts';

export const ListTopupsInput = Type.Object({ agentId: Type.Optional(ResourceId), ...PageQuery.properties }, { additionalProperties: false });

export const ListApprovalsInput = Type.Object(
  {
    status: Type.Optional(
      Type.String({
        enum: ['pending', 'approved', 'all'],
        default: 'pending',
        description:
          "`pending` (default): what waits for your answer now; `approved`: purchases you approved that the agent's retry has not used yet, " +
          'before their deadline (decline one to withdraw it); `all`: every top-up and purchase approval, whatever its status',
      }),
    ),
    ...PageQuery.properties,
  },
  { additionalProperties: false },
);

export interface PaymentQueries {
  /** Access: the agent whose top-ups are listed. */
  listTopups: Query<{ agentId?: string } & Page, { topups: Topup[]; hasMore: boolean }, string>;
  getTopup: Query<{ id: string }, Topup, TopupRow>;
  getPurchaseApproval: Query<{ id: string }, PurchaseApproval, PurchaseApprovalRow>;
  /** Access: the owner whose approvals are listed. */
  listApprovals: Query<{ status: ApprovalsShown } & Page, { approvals: OwnerApproval[]; hasMore: boolean }, string>;
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
      read: async (_db, _call, row) => toTopup(row, payments.nowS()),
    },
    getPurchaseApproval: {
      name: 'getPurchaseApproval',
      input: Type.Object({ id: idOf('purchase approval (pur_…)') }, { additionalProperties: false }),
      output: Type.Ref('PurchaseApproval'),
      access: (db, { principal, input }) => payments.purchases.approvalFor(db, principal, input.id),
      // Expiry-on-read: past its deadline an open approval is closed (and its events sent) before it is read.
      settle: ({ input }) => payments.purchases.settle(input.id),
      read: async (db, { principal, input }) => payments.purchases.view(await payments.purchases.approvalFor(db, principal, input.id)),
    },
    listApprovals: {
      name: 'listApprovals',
      input: ListApprovalsInput,
      output: Type.Object({ approvals: Type.Array(Type.Ref('OwnerApproval')), hasMore: Type.Boolean() }),
      access: (_db, { principal }) => {
        if (principal.ownerId === undefined) throw new ApiError('owner_required', { detail: 'only an owner lists the approvals that wait for it' });
        return principal.ownerId;
      },
      read: (db, { input }, ownerId) => payments.purchases.ownerApprovals(db, ownerId, input.status, input),
    },
  };
}
