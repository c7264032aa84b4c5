// POST /v1/vouchers: an agent takes a hold for an offer and receives the signed voucher.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ApiError } from '../platform/errors.ts';
import { principalOf } from '../platform/http/auth.ts';
import { respondIdempotently } from '../platform/http/idempotent.ts';
import { problems } from '../platform/http/openapi.ts';
import { Microcredits, ResourceId } from '../platform/http/schemas.ts';
import { parseUc } from '../platform/money.ts';
import type { VoucherService } from './service.ts';

const MintBody = Type.Object(
  {
    offerId: ResourceId,
    maxUc: Type.Optional(Microcredits('the most the agent lets this hold take; above it the mint is refused with 402 CAP_EXCEEDED')),
    maxAmount: Type.Optional(Microcredits('the same limit under its older name; when both are sent they must be equal')),
  },
  { additionalProperties: false },
);

export function voucherRoutes(vouchers: VoucherService) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.post('/v1/vouchers', {
      config: { auth: { kinds: ['agent'] } },
      schema: {
        tags: ['vouchers'],
        summary: 'Take a hold for an offer and get its signed voucher',
        description:
          'One transaction takes a hold of the offer price against the agent\'s credit (lots in burn-down order) and returns an ES256 JWT ' +
          '(`typ` voucher+jwt, `iss` the gateway, `aud` the merchant id, `sub` the agent id, `jti` the hold id, `exp` the hold deadline, ' +
          '`offer_id`, `category`, `amount_uc`) that the merchant verifies offline with /.well-known/jwks.json. Requires Idempotency-Key, ' +
          'so a retry never takes two holds.',
        body: MintBody,
        response: {
          200: Type.Object({ voucher: Type.String(), redemption: Type.Ref('Redemption') }),
          ...problems(400, 402, 503),
        },
      },
      handler: async (request, reply) => {
        const principal = principalOf(request);
        const body = request.body as Static<typeof MintBody>;
        if (body.maxUc !== undefined && body.maxAmount !== undefined && body.maxUc !== body.maxAmount) {
          throw new ApiError('invalid_input', { detail: 'maxUc and maxAmount are the same limit; send one, or equal values' });
        }
        const max = body.maxUc ?? body.maxAmount;
        if (!app.gateway.signing.configured) throw new ApiError('signing_configuration_required', { detail: 'set ACG_SIGNING_KEY' });
        return respondIdempotently(request, reply, {}, async (tx) => ({
          body: await vouchers.mint(tx, { agentId: principal.agentId!, offerId: body.offerId, maxUc: max === undefined ? undefined : parseUc(max) }),
        }));
      },
    });
  };
}
