// HTTP edge of the ledger: redemptions (read, capture, release, refund), an agent's balance and lots,
// and a merchant's earnings.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import type { AgentService } from '../agents/service.ts';
import { merchantActor, type MerchantService } from '../merchants/service.ts';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems, sharesSchemas } from '../platform/http/openapi.ts';
import { AgentIdParams, IdParams, MerchantIdParams, Microcredits, RedemptionIdParams, Nullable, UnixSeconds } from '../platform/schemas.ts';
import { CaptureRedemptionInput, RefundRedemptionInput, ReleaseRedemptionInput, type LedgerOperations } from './operations.ts';
import { REFUND_WINDOW_S_DEFAULT, REFUNDS_PER_REDEMPTION_MAX, type LedgerService } from './service.ts';

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
    releasedAt: Nullable(UnixSeconds('when credit went back to the agent (release, expiry, or the uncaptured rest of a partial capture); null when nothing went back')),
    refundedUc: Microcredits('refunded so far; never more than capturedUc'),
    refunds: Type.Array(Type.Ref('Refund'), { description: `oldest first; at most ${REFUNDS_PER_REDEMPTION_MAX}` }),
    captureReceipt: Receipt('the signed capture receipt; null unless captured'),
    allocations: Type.Array(Type.Object({ lotId: Type.String(), amountUc: Microcredits() }), { description: 'one per lot the hold took credit from, in burn-down order' }),
  },
  { $id: 'Redemption' },
);

const BalanceSchema = Type.Object({
  agentId: Type.String(),
  availableUc: Microcredits('spendable now'),
  heldUc: Microcredits('reserved by open holds'),
  capturedUc: Microcredits('spent'),
  lapsedUc: Microcredits('left in expired lots'),
  grantedUc: Microcredits('ever credited (grants, top-ups and refunds); = available + held + captured + lapsed'),
  refundedUc: Microcredits('of grantedUc, what merchants refunded'),
});

export const LotSchema = Type.Object({
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
});

const CaptureBody = Type.Omit(CaptureRedemptionInput, ['id'], { examples: [{ amountUc: '1500000' }] });
const EmptyBody = Type.Omit(ReleaseRedemptionInput, ['id'], { examples: [{}] });
const RefundBody = Type.Omit(RefundRedemptionInput, ['id'], { examples: [{ amountUc: '500000', reason: 'delivered late' }] });

export interface LedgerRouteDeps {
  ledger: LedgerService;
  operations: LedgerOperations;
  identity: AgentService;
  merchants: MerchantService;
}

export function ledgerRoutes({ ledger, operations, identity, merchants }: LedgerRouteDeps) {
  const { captureRedemption, releaseRedemption, refundRedemption } = operations;
  return sharesSchemas(async function routes(app: FastifyInstance): Promise<void> {
    app.addSchema(RefundSchema);
    app.addSchema(RedemptionSchema);
    const { db } = app.gateway;
    const tags = ['redemptions'];

    app.get('/v1/redemptions/:id', {
      config: { auth: { kinds: ['merchant', 'agent'], scopes: ['offers:read'] } },
      schema: { operationId: 'getRedemption',
        tags,
        summary: 'Read a hold',
        description: 'A merchant key (offers:read) reads its own merchant\'s holds; others are 404. In dev mode an agent may read its own holds; in live mode an agent token answers 503 provider_configuration_required.',
        params: RedemptionIdParams,
        response: { 200: Type.Ref('Redemption'), ...problems(404, 503) },
      },
      handler: async (request) => ledger.readHold(db, principalOf(request), (request.params as Static<typeof IdParams>).id),
    });

    app.post('/v1/redemptions/:id/release', {
      config: { auth: { kinds: ['merchant'], scopes: ['redemptions:release'] }, operation: releaseRedemption },
      schema: {
        tags,
        summary: 'Release a hold: its credit returns to the agent',
        description: 'Body: an empty JSON object. Idempotency-Key required (1–255 characters). Releasing a released hold returns it unchanged; a captured or expired hold answers 409 hold_resolved. Group commit: concurrent captures and releases share one transaction, each with its own answer, one hold\'s calls in arrival order; when too many wait, 503 overloaded with Retry-After (nothing changed, the key not kept).',
        params: RedemptionIdParams,
        body: EmptyBody,
        response: { 200: Type.Ref('Redemption'), ...problems(400, 404, 409, 503) },
      },
      handler: (request, reply) => serve(request, reply, releaseRedemption, { id: (request.params as Static<typeof IdParams>).id }),
    });

    app.post('/v1/redemptions/:id/capture', {
      config: { auth: { kinds: ['merchant'], scopes: ['redemptions:capture'] }, operation: captureRedemption },
      schema: {
        tags,
        summary: 'Capture a hold, fully or partly',
        description: 'Moves `amountUc` (default: the whole hold) to the merchant\'s earnings and returns the rest to the agent\'s lots in the same transaction. More than held → 400; a resolved or expired hold → 409 hold_resolved. Idempotency-Key required. Group commit: concurrent captures and releases share one transaction, each with its own answer, one hold\'s calls in arrival order; when too many wait, 503 overloaded with Retry-After (nothing changed, the key not kept).',
        params: RedemptionIdParams,
        body: CaptureBody,
        response: { 200: Type.Ref('Redemption'), ...problems(400, 404, 409, 503) },
      },
      handler: (request, reply) =>
        serve(request, reply, captureRedemption, { ...(request.body as Static<typeof CaptureBody>), id: (request.params as Static<typeof IdParams>).id }),
    });

    app.post('/v1/redemptions/:id/refunds', {
      config: { auth: { kinds: ['merchant'], scopes: ['redemptions:refund'] }, operation: refundRedemption },
      schema: {
        tags,
        summary: 'Refund captured credit to the agent, fully or partly',
        description:
          'Credits `amountUc` (default: all captured and not yet refunded) back to the agent as a new lot (source `refund`) and ' +
          "takes it out of the merchant's earnings, in one transaction; it may be called several times up to the captured amount. " +
          'More than is left → 400 refund_exceeds_captured; a hold that is not captured → 409 conflict; past the offer\'s refund ' +
          `window (default ${REFUND_WINDOW_S_DEFAULT} s after capture) → 409 refund_window_closed; earnings short of the amount → ` +
          '409 insufficient_earnings (nothing changes). Another merchant\'s redemption → 404. Idempotency-Key required. ' +
          'Emits `redemption.refunded`. 201 carries the refund (with its signed receipt) and the redemption after it.',
        params: RedemptionIdParams,
        body: RefundBody,
        response: { 201: Type.Object({ refund: Type.Ref('Refund'), redemption: Type.Ref('Redemption') }), ...problems(400, 404, 409, 503) },
      },
      handler: (request, reply) =>
        serve(request, reply, refundRedemption, { ...(request.body as Static<typeof RefundBody>), id: (request.params as Static<typeof IdParams>).id }, { status: 201 }),
    });

    app.get('/v1/owner/agents/:id/balance', {
      config: { auth: { kinds: ['human', 'owner'] } },
      schema: { operationId: 'getAgentBalance', tags: ['ledger'], summary: "An agent's balance", params: AgentIdParams, response: { 200: BalanceSchema, ...problems(404) } },
      handler: async (request) => {
        const { id } = request.params as Static<typeof IdParams>;
        await identity.ownedAgentRow(db, principalOf(request).ownerId!, id);
        return ledger.currentBalance(id);
      },
    });

    app.get('/v1/owner/agents/:id/lots', {
      config: { auth: { kinds: ['human', 'owner'] } },
      schema: { operationId: 'listAgentLots',
        tags: ['ledger'],
        summary: "An agent's credit lots, in burn-down order",
        params: AgentIdParams,
        response: { 200: Type.Object({ lots: Type.Array(LotSchema) }), ...problems(404) },
      },
      handler: async (request) => {
        const { id } = request.params as Static<typeof IdParams>;
        await identity.ownedAgentRow(db, principalOf(request).ownerId!, id);
        return { lots: await ledger.currentLots(id) };
      },
    });

    app.get('/v1/merchants/:id/earnings', {
      config: { auth: { kinds: ['human', 'owner', 'merchant'], scopes: ['earnings:read'] } },
      schema: { operationId: 'getMerchantEarnings',
        tags: ['ledger'],
        summary: "A merchant's earnings: everything captured from its holds",
        params: MerchantIdParams,
        response: { 200: Type.Object({ merchantId: Type.String(), earnedUc: Microcredits() }), ...problems(404) },
      },
      handler: async (request) => {
        const { id } = request.params as Static<typeof IdParams>;
        await merchants.facts(db, merchantActor(principalOf(request)), id);
        return { merchantId: id, earnedUc: await ledger.merchantEarnings(db, id) };
      },
    });
  });
}
