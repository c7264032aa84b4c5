// Payments' resources as every face shows them, registered once by the composition root: the Top-up
// request record, the purchase approval, and an entry of the owner's list of approvals.
import { Type, type TSchema } from '@sinclair/typebox';
import { Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import { RAIL_KINDS, RAILS } from './rails/index.ts';

/** The rails' names: a top-up's `provider`, and what /v1/integrations can report as configured. */
export { RAIL_KINDS };

const RESOLUTIONS = [...new Set(Object.values(RAILS).map((rail) => rail.resolution)), 'none'];

const TopupRequesterSchema = Type.String({
  enum: ['agent', 'owner', 'gateway'],
  description:
    'who asked for the top-up, and so wrote its `reason`: the agent, its owner, or the gateway itself (an execute that found the credit short ' +
    'opens one for its retained intent; its reason is the gateway\'s, not the agent\'s)',
});

export const TopupSchema = Type.Object(
  {
    id: Type.String(),
    agentId: Type.String(),
    amountUsdCents: Type.Integer(),
    amountUc: Microcredits('the credit the top-up adds'),
    reason: Type.String({ description: 'why the credit is asked for, shown to the owner who approves, in the words of `requestedBy`' }),
    requestedBy: TopupRequesterSchema,
    status: Type.String({ enum: ['pending_approval', 'settled', 'declined', 'expired', 'failed'] }),
    kind: Type.Literal('checkout'),
    provider: Type.String({ enum: RAIL_KINDS }),
    approvalUrl: Type.String({ format: 'uri' }),
    checkoutUrl: Type.String({ format: 'uri' }),
    nextAction: Type.Object({
      resolution: Type.String({ enum: RESOLUTIONS, description: 'what must happen next: the owner approves on our page, pays at Checkout, or nothing (final)' }),
      actionUrl: Type.String({ format: 'uri' }),
    }),
    intentId: Nullable(Type.String()),
    livemode: Type.Boolean({ description: 'false: a test-mode payment (dev mode, or Stripe test keys)' }),
    lotId: Nullable(Type.String({ description: 'the credit lot of a settled top-up' })),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
    expiresAt: UnixSeconds('a pending top-up expires at'),
    finishedAt: Nullable(UnixSeconds('settled, declined, expired or failed at')),
  },
  { $id: 'Topup', description: 'Top-up request record' },
);

const MerchantShown = Type.Object(
  { id: Type.String(), name: Type.String(), domain: Type.String({ description: "the merchant's verified domain" }) },
  { description: 'the merchant as it was when the approval was asked' },
);
const OfferShown = Type.Object(
  { id: Type.String(), name: Type.String() },
  { description: "the offer (for an execute, the built-in service's action `{serviceId}:{action}`) as it was when the approval was asked" },
);
const PURCHASE_STATUSES = ['pending_approval', 'approved', 'declined', 'expired', 'used'];

export const PurchaseApprovalSchema = Type.Object(
  {
    id: Type.String({ description: 'pur_…' }),
    agentId: Type.String(),
    status: Type.String({
      enum: PURCHASE_STATUSES,
      description:
        '`pending_approval` → `approved` (the owner said yes) → `used` (the request\'s retry took the hold: `holdId`) | `expired`; ' +
        '`pending_approval` → `declined` | `expired`; `approved` → `declined` (withdrawn before use); `pending_approval` → `used` when the ' +
        "request's retry took the hold without it, the mandate no longer asking (the owner lifted or raised the threshold; `decidedAt` stays null). " +
        'Past `expiresAt` an open approval reads `expired`.',
    }),
    operation: Type.String({
      enum: ['mintVoucher', 'authorizeX402Payment', 'executeService'],
      description: 'the request the approval belongs to (with its Idempotency-Key): a voucher mint, an x402 authorize, or an execute',
    }),
    amountUc: Microcredits('the price of the purchase: what the hold takes'),
    merchant: Nullable(MerchantShown),
    offer: OfferShown,
    resource: Nullable(
      Type.String({
        description:
          "what an x402 authorize pays for: the resource (the server's `extra.resource`, e.g. the URL) its attestation will be bound to, " +
          'as the approval page shows it to the owner; null for a voucher mint or an execute',
      }),
    ),
    intentId: Nullable(Type.String({ description: "the retained purchase: this approval's id for a voucher mint, the retained intent (int_…) for an execute" })),
    intent: Type.Object({}, { additionalProperties: true, description: 'the purchase as it was asked: `{offerId, agentId, maxUc?, amountUc?, resource?}` for a voucher mint or an x402 authorize (`amountUc` and `resource`: the price and the resource the authorize named), the Service intent for an execute' }),
    approvalUrl: Type.String({ format: 'uri', description: "the gateway's approval page" }),
    holdId: Nullable(Type.String({ description: 'the hold taken under the approval, once used' })),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
    expiresAt: UnixSeconds('until then the owner may answer (pending) or the request be retried (approved)'),
    decidedAt: Nullable(UnixSeconds('approved or declined at')),
    usedAt: Nullable(UnixSeconds('used at')),
  },
  { $id: 'PurchaseApproval', description: "A purchase above the agent's mandate approval threshold, and its owner's answer" },
);

export const OwnerApprovalSchema = Type.Object(
  {
    kind: Type.String({ enum: ['topup', 'purchase'] }),
    id: Type.String({ description: 'the top-up (top_…) or purchase approval (pur_…)' }),
    agentId: Type.String(),
    agentName: Type.String({ description: "the agent's name, as it (or, for a delegate, its parent agent) chose it: see agentParent" }),
    agentParent: Nullable(
      Type.Object(
        { id: Type.String(), name: Type.String() },
        {
          description:
            "a delegate's parent: the agent that registered it and named it, whose root's credit it spends; null for an agent the owner registered. " +
            "A delegate may take any name, another agent's too, so this says whose it is",
        },
      ),
    ),
    agentEffectiveStatus: Type.String({
      enum: ['active', 'frozen', 'retired'],
      description:
        "the agent's `effectiveStatus` now (its ancestors' freezes included): approving a frozen or retired agent's purchase is refused " +
        '(409 `agent_frozen` or `agent_retired`: its retry would be refused), and a top-up approved for it credits a balance it cannot spend while it is so',
    }),
    amountUc: Microcredits('what the top-up credits, or what the purchase takes'),
    merchant: Type.Optional(MerchantShown),
    offer: Type.Optional(OfferShown),
    resource: Type.Optional(
      Type.String({ description: "what an x402 authorize pays for: the resource its attestation will be bound to (as the purchase approval's `resource`); absent otherwise" }),
    ),
    reason: Type.Optional(Type.String({ description: "a top-up's reason, as `requestedBy` wrote it (shown to the owner who approves); absent for a purchase" })),
    requestedBy: Type.Optional(TopupRequesterSchema),
    status: Type.String({ description: "the top-up's or the purchase approval's status (`pending_approval` while it waits for the owner)" }),
    approvalUrl: Type.String({ format: 'uri' }),
    createdAt: UnixSeconds('creation'),
    expiresAt: UnixSeconds('a pending approval expires at'),
  },
  { $id: 'OwnerApproval', description: "An approval that is (or was) the owner's to give: a top-up or a purchase" },
);

export const PAYMENT_SCHEMAS: TSchema[] = [TopupSchema, PurchaseApprovalSchema, OwnerApprovalSchema];
