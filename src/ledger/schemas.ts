// The ledger's resources as every face shows them: one schema each, registered once by the composition
// root, referred to by name (`Type.Ref('Redemption')`) from routes, queries and MCP tools alike.
import { Type } from '@sinclair/typebox';
import { Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import { REFUNDS_PER_REDEMPTION_MAX } from './service.ts';

const Receipt = (description: string) =>
  Nullable(Type.String({ description: `${description}: a compact ES256 JWS (typ \`receipt+jwt\`) signed with a key of /.well-known/jwks.json; null without a signing key. Claims: see docs/decisions.md "Signed receipts".` }));

export const RefundSchema = Type.Object(
  {
    id: Type.String(),
    redemptionId: Type.String(),
    amountUc: Microcredits('refunded to the agent, as a new lot'),
    reason: Nullable(Type.String()),
    createdAt: UnixSeconds('creation'),
    receipt: Receipt('the signed refund receipt'),
  },
  { $id: 'Refund' },
);

export const RedemptionSchema = Type.Object(
  {
    id: Type.String({ description: 'hold id; the `jti` of the voucher' }),
    agentId: Type.String(),
    acceptorId: Type.String({ description: 'the merchant id, or "gateway" for built-in services' }),
    offerId: Type.String(),
    category: Type.String(),
    amountUc: Microcredits('held amount'),
    state: Type.String({ enum: ['held', 'captured', 'released', 'expired'] }),
    expiresAt: UnixSeconds('deadline: at or after it the hold is expired'),
    createdAt: UnixSeconds('creation'),
    capturedUc: Microcredits('captured amount (0 unless captured)'),
    releasedUc: Microcredits('what went back to the agent when the hold resolved; once not held, amountUc = capturedUc + releasedUc'),
    capturedAt: Nullable(UnixSeconds('when it was captured; null unless captured')),
    releasedAt: Nullable(
      UnixSeconds('when credit went back to the agent (release, the uncaptured rest of a partial capture, or expiry, whose time is always expiresAt); null when nothing went back'),
    ),
    refundedUc: Microcredits('refunded so far; never more than capturedUc'),
    refunds: Type.Array(Type.Ref('Refund'), { description: `oldest first; at most ${REFUNDS_PER_REDEMPTION_MAX}` }),
    captureReceipt: Receipt('the signed capture receipt; null unless captured'),
    allocations: Type.Array(Type.Object({ lotId: Type.String(), amountUc: Microcredits() }), { description: 'one per lot the hold took credit from, in burn-down order' }),
  },
  { $id: 'Redemption' },
);

export const BalanceSchema = Type.Object(
  {
    agentId: Type.String(),
    availableUc: Microcredits('spendable now'),
    heldUc: Microcredits('reserved by open holds'),
    capturedUc: Microcredits('spent'),
    lapsedUc: Microcredits('left in expired lots'),
    grantedUc: Microcredits('ever credited (grants, top-ups and refunds); = available + held + captured + lapsed'),
    refundedUc: Microcredits('of grantedUc, what merchants refunded'),
  },
  { $id: 'Balance', description: "an agent's balance; holds past their deadline are reclaimed before it is read" },
);

export const LotSchema = Type.Object(
  {
    id: Type.String(),
    agentId: Type.String(),
    source: Type.String({ enum: ['grant', 'topup', 'refund'] }),
    sourceRef: Nullable(Type.String()),
    priority: Type.Integer({ description: 'lower burns first' }),
    grantedUc: Microcredits(),
    remainingUc: Microcredits(),
    expiresAt: Nullable(UnixSeconds('after this the remainder lapses')),
    createdAt: UnixSeconds('creation'),
    status: Type.String({ enum: ['active', 'expired', 'spent'] }),
  },
  { $id: 'Lot' },
);

export const LEDGER_SCHEMAS = [RefundSchema, RedemptionSchema, BalanceSchema, LotSchema];
