// HTTP edge of the x402 facilitator, under /x402 so that `HTTPFacilitatorClient({ url: <gateway>/x402 })` of
// @x402/core finds /supported, /verify and /settle; /authorize is the credit binding's client-facing step.
// A verify or settle answers 200 with its outcome (isValid / success false and a reason), as x402's
// facilitators do and its client reads; a malformed request or a refused credential is a problem body.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ApiError } from '../platform/errors.ts';
import { runOperation } from '../platform/operations.ts';
import { principalOf } from '../platform/http/auth.ts';
import { idempotencyKeyOf } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { sendsReplay } from '../platform/http/replay.ts';
import { queryRoute } from '../platform/http/query.ts';
import type { X402Operations } from './operations.ts';
import type { X402Queries } from './queries.ts';
import { ATTESTATION_PRESENTATION_S_MAX, ATTESTATION_TYP, AuthorizeX402Body, FacilitatorRequest, X402_ASSET, X402_NETWORK, X402_SCHEME, X402_VERSION } from './schemas.ts';
import type { X402Service } from './service.ts';

export interface X402RouteDeps {
  x402: X402Service;
  operations: X402Operations;
  queries: X402Queries;
  /** Whether the facilitator is configured now (a signing key, merchant API keys): /x402/supported lists the scheme only then. */
  configured: () => boolean;
}

const MERCHANT_CAPTURE = { kinds: ['merchant'], scopes: ['redemptions:capture'] } as const;
/**
 * The paying client's part of a facilitator request, passed on by the resource server: whatever it holds (text
 * the gateway would not store too) is that payment's defect, answered `attestation_invalid` or ignored where it is
 * not read, never a malformed request (nothing of it is stored).
 */
const PAYING_CLIENTS = ['paymentPayload'] as const;
const SCHEME = `\`${X402_SCHEME}\` on \`${X402_NETWORK}\` in \`${X402_ASSET}\``;
/** The reasons of a request this facilitator does not settle (x402 v2's own, service.ts `notForThisFacilitator`), as verify and settle describe them. */
const NOT_FOR_US =
  "x402's own reasons for a request that is not for this facilitator (a misconfigured server, never a forgery or a price): " +
  `invalid_x402_version (\`x402Version\`, at the top or in the payload, not ${X402_VERSION}), invalid_scheme (not \`${X402_SCHEME}\`), ` +
  `invalid_network (not \`${X402_NETWORK}\`), invalid_payment_requirements (an \`asset\` other than \`${X402_ASSET}\`). Requirements of ` +
  'another scheme or network are read for their `scheme` and `network` only, whatever else they hold (an x402 v1 body, an `exact` amount)';
const MALFORMED =
  `A malformed request is 400 invalid_input, and so are requirements of ${X402_SCHEME} on ${X402_NETWORK} without a member this scheme ` +
  'needs (`amount` in µc, `payTo`, `maxTimeoutSeconds`, `extra.authority`, `extra.offerId`, `extra.resource`): they are the calling server\'s own.';

export function x402Routes({ x402, operations, queries, configured }: X402RouteDeps) {
  const { authorizeX402Payment, settleX402Payment } = operations;
  return async function routes(app: FastifyInstance): Promise<void> {
    const tags = ['x402'];

    app.get('/x402/supported', {
      schema: {
        operationId: 'getX402Supported',
        tags,
        summary: 'The x402 payment kinds this facilitator settles',
        description:
          `x402 SupportedResponse: one kind, ${SCHEME} (x402Version 2), whose \`extra.authority\` is this gateway's base URL, the ` +
          'trust anchor of the scheme; no kind while the gateway cannot sign or hold merchant API keys. Public.',
        response: { 200: Type.Ref('X402Supported') },
      },
      handler: async () => x402.supported(configured()),
    });

    app.post('/x402/authorize', {
      config: { auth: { kinds: ['agent'] }, operation: authorizeX402Payment },
      schema: {
        tags,
        summary: 'Take a hold for an x402 payment and get its signed attestation',
        description:
          'The credit binding\'s /authorize: a mint (as POST /v1/vouchers) of a hold of `amount` µc, at most the price of the offer `offerId` of ' +
          'the merchant `payTo`, under the agent\'s mandate (caps, budgets, merchant rules, the approval threshold), in the same group commit. ' +
          `It answers an attestation: a compact ES256 JWS (\`typ\` ${ATTESTATION_TYP}, a key of /.well-known/jwks.json) with \`iss\` this gateway, ` +
          '`sub` the agent, `aud` the merchant, `jti` the hold id, `exp` the end of the presentation window (at most ' +
          `${ATTESTATION_PRESENTATION_S_MAX} s, or \`maxTimeoutSeconds\`), \`holdExp\` the hold's deadline (the offer's hold lifetime, at most the ` +
          'Idempotency-Key retention), `amount`, `asset`, `resource`, `offer_id` and `mandate` (the hash of the mandate in force). ' +
          'The key is required, in the header or as `idempotencyKey` (both: equal): a retry answers the same attestation (201 again, as every ' +
          'replay answers its first status, with Idempotent-Replayed) and takes no second hold; the key with another request answers 409 idempotency_key_reused. ' +
          'Refusals are problem bodies whose `error` member carries the draft\'s code where it has one: 402 INSUFFICIENT_CREDITS ' +
          '(`insufficient_credits`), 403 FROZEN for a frozen or retired agent (`bundle_revoked`), 404 not_found for a `bundleId` that is ' +
          'not the agent (`bundle_not_found`), 409 idempotency_key_reused (`idempotency_conflict`); a mandate\'s refusals as for ' +
          'vouchers (402 CAP_EXCEEDED, 403 SCOPE_FORBIDDEN, 402 approval_required); 400 invalid_input for an amount above the offer\'s ' +
          'price, an offer that is not the merchant\'s, or a resource that is not an absolute URI.',
        body: AuthorizeX402Body,
        response: {
          201: Type.Ref('X402Authorization'),
          ...problems(400, 404, 409, 503),
          402: Type.Ref('SpendingProblem'),
        },
      },
      handler: async (request, reply) => {
        const { idempotencyKey, ...input } = request.body as AuthorizeX402Body;
        try {
          const { result, replayed } = await runOperation(request.server.gateway, authorizeX402Payment, {
            principal: principalOf(request),
            input,
            idempotencyKey: x402.authorizeKey(idempotencyKeyOf(request), idempotencyKey),
          });
          if (replayed) sendsReplay(reply, 201);
          return reply.code(201).send(result);
        } catch (error) {
          throw x402.withDraftCode(error);
        }
      },
    });

    app.route(
      queryRoute('POST', '/x402/verify', queries.verifyX402Payment, {
        auth: MERCHANT_CAPTURE,
        tags,
        summary: 'Verify an x402 payment (facilitator /verify)',
        description:
          `x402 VerifyRequest for ${SCHEME}; always 200 with a VerifyResponse. Valid: the attestation verifies (ES256, its \`typ\`, a key of ` +
          "ours, `iss` = the requirements' `extra.authority` = this gateway, not expired), its `aud` is the calling merchant (and `payTo`), its " +
          "`resource` is the requirements' `extra.resource`, its offer is `extra.offerId` and its amount covers `amount`, and its hold is " +
          `held. Otherwise \`isValid\` false with one \`invalidReason\` each. First, before the attestation is read, ${NOT_FOR_US}. Then ` +
          'attestation_invalid (structure, signature, typ, alg, iss: the draft\'s forgery signal), ' +
          'attestation_expired (valid signature, `exp` past), attestation_revoked (a freeze or a retirement revoked the hold), unauthorized_server (another ' +
          'merchant\'s), resource_mismatch, price_not_acceptable (less than asked, or another offer), already_settled, ' +
          `hold_expired. \`payer\` is the agent id. ${MALFORMED}`,
        errors: [400],
        relayedBody: PAYING_CLIENTS,
      }),
    );

    app.post('/x402/settle', {
      config: { auth: MERCHANT_CAPTURE, operation: settleX402Payment, relayedBody: PAYING_CLIENTS },
      schema: {
        tags,
        summary: 'Settle an x402 payment (facilitator /settle): capture, or release at "0"',
        description:
          `x402 SettleRequest for ${SCHEME}; always 200 with a SettleResponse. The charge is the settlement-time \`paymentRequirements.amount\` ` +
          '(at most what the attestation authorized; the rest goes back to the agent); "0" releases the hold (the API key then needs scope ' +
          'redemptions:release too). The payment verifies as for /verify (the version, scheme, network and asset, the attestation, its merchant, `resource` and offer against ' +
          "the requirements) except its presentation `exp`, since settlement is accepted until the hold's deadline, and the amount, " +
          "which is the charge and at most what the attestation authorized. Exactly once per `jti`: the jti is the Idempotency-Key (none is sent), so concurrent settles on any " +
          'instances charge once, and an identical repeat answers the same SettleResponse (Idempotent-Replayed). Success: `amount` and ' +
          '`extra.chargedAmount` the charge, `extra.commitmentId` the jti, `extra.receipt` the signed capture receipt (receipt+jwt; null for a ' +
          `release), \`payer\` the agent. Otherwise \`success\` false with one \`errorReason\`: first ${NOT_FOR_US}; then settle_conflict (the jti was settled otherwise), ` +
          'hold_expired, unauthorized_server (another merchant\'s), revoked (a freeze or a retirement revoked the hold), attestation_invalid, ' +
          `resource_mismatch, price_not_acceptable (another offer), amount_exceeds_authorized. ${MALFORMED} No \`bundleState\` (an agent's balance is its owner's business).`,
        body: FacilitatorRequest,
        response: { 200: Type.Ref('X402SettleResponse'), ...problems(400, 503) },
      },
      handler: async (request, reply) => {
        const principal = principalOf(request);
        const settlement = await x402.settlementOf(principal.merchantId!, request.body as FacilitatorRequest);
        if ('refused' in settlement) return settlement.refused;
        try {
          const { result, replayed } = await runOperation(request.server.gateway, settleX402Payment, { principal, input: settlement.input });
          if (replayed) sendsReplay(reply, 200);
          return result;
        } catch (error) {
          if (error instanceof ApiError && error.code === 'idempotency_key_reused') return x402.conflictOf(principal.merchantId!, settlement.input);
          throw error;
        }
      },
    });
  };
}
