// HTTP edge of the ledger: redemptions (read, capture, release, refund, evidence), an agent's holds, balance
// and lots, and a merchant's earnings. Reads are queries (queries.ts), writes operations (operations.ts).
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { IdParams, RedemptionIdParams } from '../platform/schemas.ts';
import { CaptureRedemptionInput, RefundRedemptionInput, ReleaseRedemptionInput, type LedgerOperations } from './operations.ts';
import type { LedgerQueries } from './queries.ts';
import { REFUND_WINDOW_S_DEFAULT, REFUNDS_PER_REDEMPTION_MAX } from './service.ts';

const CaptureBody = Type.Omit(CaptureRedemptionInput, ['id'], { examples: [{ amountUc: '1500000' }] });
const EmptyBody = Type.Omit(ReleaseRedemptionInput, ['id'], { examples: [{}] });
const RefundBody = Type.Omit(RefundRedemptionInput, ['id'], { examples: [{ amountUc: '500000', reason: 'delivered late' }] });

export interface LedgerRouteDeps {
  operations: LedgerOperations;
  queries: LedgerQueries;
}

const OWNER = { kinds: ['human', 'owner'] } as const;

export function ledgerRoutes({ operations, queries }: LedgerRouteDeps) {
  const { captureRedemption, releaseRedemption, refundRedemption } = operations;
  return async function routes(app: FastifyInstance): Promise<void> {
    const tags = ['redemptions'];

    app.route(
      queryRoute('GET', '/v1/redemptions/:id', queries.getRedemption, {
        auth: { kinds: ['merchant', 'agent'], scopes: ['offers:read'] },
        tags,
        summary: 'Read a hold',
        description:
          "A merchant key (offers:read) reads its own merchant's holds; others are 404. In dev mode an agent may read its own holds; in live mode an agent token answers 503 provider_configuration_required. A hold past its deadline reads as expired (releasedAt = expiresAt) whether or not the sweeper has reclaimed it.",
        errors: [404, 503],
      }),
    );

    app.route(
      queryRoute('GET', '/v1/redemptions/:id/evidence', queries.getRedemptionEvidence, {
        auth: { kinds: ['human', 'owner', 'merchant'], scopes: ['evidence:read'], for: "the owner of the hold's agent or the holding merchant's API key (scope evidence:read)" },
        tags,
        summary: "A redemption's signed evidence, for a dispute",
        description:
          "One compact ES256 JWS (`typ` `evidence+jwt`, a key of /.well-known/jwks.json) whose payload (`EvidenceClaims`) ties the purchase to the " +
          'rules it was made under: `mandate` (the version in force at the hold, its RFC 8785 canonical JSON and `hash` = base64url SHA-256 of it, ' +
          'the `mandate` claim of the voucher and of every receipt), `approval` (the owner\'s approval of a purchase above `approvalAboveUc`, or null), ' +
          '`offer` (as it was sold; for an execution, the built-in service and action), ' +
          '`voucher` (as issued; null for an execution), `receipts` (capture, then each refund), `history` (from the journal: held, captured, ' +
          'released, expired, refunded, each with its time and amount) and `redemption` (as it stands), with `iss`, `iat`, `jti` and `sub` (the ' +
          "redemption id). Signed anew at each read (`iat`, `jti`), from one snapshot. Readable by the owner of the hold's agent (H or O) and by the " +
          "holding merchant's API key with scope `evidence:read`, which so reads the whole mandate version (every budget, merchant rule and " +
          "threshold of the agent's, and its ancestors' for a delegate's hold): the hash the voucher names is of the whole document. Anyone else " +
          'gets 404, as for a missing id. It proves the rules of one purchase (caps per hold, approval, categories, services, merchants, validity); ' +
          "it carries no budget usage, so a budget or the rolling cap holds on the gateway's signature (a hold over one is never made). A hold past its deadline is reclaimed " +
          'first. 503 signing_configuration_required without a signing key.',
        errors: [404, 503],
      }),
    );

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
          'Credits `amountUc` (default: all captured and not yet refunded) back to the agent and ' +
          "takes it out of the merchant's earnings, in one transaction; it may be called several times up to the captured amount. " +
          'The credit goes back to the lots it was spent from, the last-burned first: each part as a new lot (source `refund`, ' +
          '`sourceRef` the refund id) with its source lot\'s priority and expiry, so promotional credit comes back expiring ' +
          '(or lapsed, once its lot has expired), never lasting. ' +
          'More than is left → 400 refund_exceeds_captured; a hold that is not captured → 409 conflict; no `amountUc` on a ' +
          `redemption already fully refunded → 409 conflict (nothing is left to default to); more than ${REFUNDS_PER_REDEMPTION_MAX} refunds → ` +
          '409 conflict; past the offer\'s refund ' +
          `window (default ${REFUND_WINDOW_S_DEFAULT} s after capture) → 409 refund_window_closed; earnings short of the amount → ` +
          '409 insufficient_earnings (nothing changes); a refund that would carry the agent\'s lifetime credit past 10^18 − 1 µc → 409 conflict ' +
          '(reason amount_limit, nothing changes). Another merchant\'s redemption → 404. Idempotency-Key required. ' +
          'Emits `redemption.refunded`. 201 carries the refund (with its signed receipt) and the redemption after it.',
        params: RedemptionIdParams,
        body: RefundBody,
        response: { 201: Type.Object({ refund: Type.Ref('Refund'), redemption: Type.Ref('Redemption') }), ...problems(400, 404, 409, 503) },
      },
      handler: (request, reply) =>
        serve(request, reply, refundRedemption, { ...(request.body as Static<typeof RefundBody>), id: (request.params as Static<typeof IdParams>).id }, { status: 201 }),
    });

    app.route(
      queryRoute('GET', '/v1/owner/agents/:agentId/holds', queries.listAgentHolds, {
        auth: OWNER,
        tags,
        summary: "List an agent's holds (oldest first, or newest first with order=desc)",
        description: 'Redemptions, as GET /v1/redemptions/{id} shows them, in the order they were taken. Holds past their deadline are reclaimed first (as expired).',
        errors: [404],
      }),
    );
    app.route(
      queryRoute('GET', '/v1/owner/agents/:id/balance', queries.getAgentBalance, {
        auth: OWNER,
        tags: ['ledger'],
        summary: "An agent's balance",
        description: 'Holds past their deadline are reclaimed first, so their credit counts as available again.',
        errors: [404],
      }),
    );
    app.route(
      queryRoute('GET', '/v1/owner/spending', queries.getOwnerSpending, {
        auth: OWNER,
        tags: ['ledger'],
        summary: "Your agents' spending per day",
        description:
          'Over the last `days` UTC days (default 30, today included), per agent and per day of the hold: what budgets count, a hold ' +
          'still held (and before its deadline) its amount, a captured one what was captured less what was refunded, a released or ' +
          'expired one nothing. Agents without a hold in the period are left out. A read over the period\'s holds, for charts.',
        errors: [400],
      }),
    );
    app.route(
      queryRoute('GET', '/v1/owner/agents/:id/lots', queries.listAgentLots, {
        auth: OWNER,
        tags: ['ledger'],
        summary: "An agent's credit lots, in burn-down order",
        description:
          "The lots that fund the agent (its root's, for a delegate), in the order holds take from them: priority, then the " +
          'soonest expiry (a lot that never expires last), then age. Paged as every list (`limit`, `startingAfter` the id of the ' +
          "last lot of the previous page, `hasMore`): every refund adds a lot, so a busy agent's list is long.",
        errors: [400, 404],
      }),
    );
    app.route(
      queryRoute('GET', '/v1/merchants/:id/earnings', queries.getMerchantEarnings, {
        auth: { kinds: ['human', 'owner', 'merchant'], scopes: ['earnings:read'] },
        tags: ['ledger'],
        summary: "A merchant's earnings: everything captured from its holds",
        errors: [404],
      }),
    );
  };
}
