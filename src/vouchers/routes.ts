// POST /v1/vouchers: an agent takes a hold for an offer and receives the signed voucher.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { MintVoucherInput, type VoucherOperations } from './operations.ts';

export function voucherRoutes({ mintVoucher }: VoucherOperations) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.post('/v1/vouchers', {
      config: { auth: { kinds: ['agent'] }, operation: mintVoucher },
      schema: {
        tags: ['vouchers'],
        summary: 'Take a hold for an offer and get its signed voucher',
        description:
          'One transaction takes a hold of the offer price against the agent\'s credit (lots in burn-down order) and returns an ES256 JWT ' +
          '(`typ` voucher+jwt, `iss` the gateway, `aud` the merchant id, `sub` the agent id, `jti` the hold id, `exp` the hold deadline, ' +
          '`offer_id`, `category`, `amount_uc`) that the merchant verifies offline with /.well-known/jwks.json. Requires Idempotency-Key, ' +
          'so a retry never takes two holds. ' +
          'Group commit: concurrent mints share one transaction, each with its own answer exactly as if minted one by one, one agent\'s mints in arrival order; ' +
          'when too many wait, 503 overloaded with Retry-After (nothing taken, the key not kept). ' +
          "Above the agent's mandate `approvalAboveUc` the purchase waits for its owner: 402 approval_required (`reason: " +
          'above_approval_threshold`) with `approvalUrl` (the gateway\'s approval page), `intentId` (the purchase approval, pur_…: a mint retains no intent, unlike execute, whose `intentId` is its int_…) and `intent` (`{offerId, agentId, maxUc?}`), ' +
          '`purchase` (the approval) and `instructions`; nothing is taken and the answer is not kept, so after the owner approves, the retry ' +
          'with the same Idempotency-Key takes the hold and returns the voucher, once (a further retry replays it). If the owner declined, or ' +
          'the approval expired (15 minutes to answer, then as long to retry) or was used, the retry answers 409 conflict (`reason` ' +
          '`purchase_declined`, `approval_expired`, `approval_used`, `approval_amount_changed`), kept under the key; the same key for another ' +
          'request (another offer) answers 409 idempotency_key_reused. A purchase at or below the threshold is not asked about. A price above ' +
          "the request's `maxUc` is 402 CAP_EXCEEDED with `reason` max_uc; the mandate's caps and budgets name theirs (per_hold_cap, per_period_cap, budget_exceeded).",
        body: MintVoucherInput,
        response: {
          200: Type.Object({ voucher: Type.String(), redemption: Type.Ref('Redemption') }),
          ...problems(400, 409, 503),
          402: Type.Ref('SpendingProblem'),
        },
      },
      handler: (request, reply) => serve(request, reply, mintVoucher, request.body as MintVoucherInput),
    });
  };
}
