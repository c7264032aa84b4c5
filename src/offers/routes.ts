// HTTP edge of offers: /v1/merchants/{id}/offers.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { principalOf } from '../platform/http/auth.ts';
import { respondIdempotently } from '../platform/http/idempotent.ts';
import { problems, sharesSchemas } from '../platform/http/openapi.ts';
import { Category, Microcredits, PageQuery, ResourceId, UnixSeconds } from '../platform/http/schemas.ts';
import { parseUc } from '../platform/money.ts';
import { REFUND_WINDOW_S_DEFAULT } from '../ledger/service.ts';
import { HOLD_LIFETIME_S_DEFAULT, HOLD_LIFETIME_S_MAX, HOLD_LIFETIME_S_MIN, REFUND_WINDOW_S_MAX, type OfferService } from './service.ts';

export const OfferSchema = Type.Object(
  {
    id: Type.String(),
    merchantId: Type.String(),
    name: Type.String(),
    category: Type.String(),
    priceUc: Microcredits('the hold a voucher for this offer takes'),
    active: Type.Boolean(),
    holdLifetimeS: Type.Integer({ description: 'seconds from minting until an uncaptured hold expires' }),
    refundWindowS: Type.Integer({ description: 'seconds after capture during which the merchant may refund; 0 = no refunds. A hold keeps the window of its mint.' }),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'Offer' },
);

const HoldLifetime = Type.Integer({ minimum: HOLD_LIFETIME_S_MIN, maximum: HOLD_LIFETIME_S_MAX, description: `seconds, ${HOLD_LIFETIME_S_MIN}–${HOLD_LIFETIME_S_MAX}; default ${HOLD_LIFETIME_S_DEFAULT}` });
const RefundWindow = Type.Integer({ minimum: 0, maximum: REFUND_WINDOW_S_MAX, description: `seconds after capture, 0–${REFUND_WINDOW_S_MAX} (0: no refunds); default ${REFUND_WINDOW_S_DEFAULT} (30 days)` });
const OfferCreate = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    category: Category,
    priceUc: Microcredits(),
    active: Type.Optional(Type.Boolean({ default: true })),
    holdLifetimeS: Type.Optional(HoldLifetime),
    refundWindowS: Type.Optional(RefundWindow),
  },
  { additionalProperties: false },
);
const OfferPatch = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    priceUc: Type.Optional(Microcredits()),
    active: Type.Optional(Type.Boolean()),
    holdLifetimeS: Type.Optional(HoldLifetime),
    refundWindowS: Type.Optional(RefundWindow),
  },
  { additionalProperties: false, minProperties: 1 },
);
const MerchantParams = Type.Object({ id: ResourceId });
const OfferParams = Type.Object({ id: ResourceId, offerId: ResourceId });

export function offerRoutes(offers: OfferService) {
  return sharesSchemas(async function routes(app: FastifyInstance): Promise<void> {
    app.addSchema(OfferSchema);
    const tags = ['offers'];
    const write = { kinds: ['human', 'owner', 'merchant'], scopes: ['offers:write'] } as const;
    const read = { kinds: ['human', 'owner', 'merchant'], scopes: ['offers:read'] } as const;

    app.post('/v1/merchants/:id/offers', {
      config: { auth: write },
      schema: {
        tags,
        summary: 'Create an offer',
        description: "The category must be one of the merchant's categories. Requires Idempotency-Key.",
        params: MerchantParams,
        body: OfferCreate,
        response: { 201: Type.Ref('Offer'), ...problems(400, 404, 409) },
      },
      handler: async (request, reply) => {
        const { id } = request.params as Static<typeof MerchantParams>;
        const body = request.body as Static<typeof OfferCreate>;
        return respondIdempotently(request, reply, {}, async (tx) => ({
          status: 201,
          body: await offers.create(tx, principalOf(request), id, { ...body, priceUc: parseUc(body.priceUc) }),
        }));
      },
    });

    app.get('/v1/merchants/:id/offers', {
      config: { auth: read },
      schema: {
        tags,
        summary: "List a merchant's offers (oldest first)",
        params: MerchantParams,
        querystring: PageQuery,
        response: { 200: Type.Object({ offers: Type.Array(Type.Ref('Offer')), hasMore: Type.Boolean() }), ...problems(404) },
      },
      handler: async (request) => {
        const { id } = request.params as Static<typeof MerchantParams>;
        const query = request.query as Static<typeof PageQuery>;
        return offers.list(principalOf(request), id, query.limit ?? 20, query.startingAfter);
      },
    });

    app.get('/v1/merchants/:id/offers/:offerId', {
      config: { auth: read },
      schema: { tags, summary: 'Read an offer', params: OfferParams, response: { 200: Type.Ref('Offer'), ...problems(404) } },
      handler: async (request) => {
        const { id, offerId } = request.params as Static<typeof OfferParams>;
        return offers.get(principalOf(request), id, offerId);
      },
    });

    app.patch('/v1/merchants/:id/offers/:offerId', {
      config: { auth: write },
      schema: {
        tags,
        summary: "Change an offer's name, price, lifetime or active flag",
        description: 'Existing holds keep the amount, deadline and refund window they were taken with. Idempotency-Key is honoured when sent.',
        params: OfferParams,
        body: OfferPatch,
        response: { 200: Type.Ref('Offer'), ...problems(400, 404, 409) },
      },
      handler: async (request, reply) => {
        const { id, offerId } = request.params as Static<typeof OfferParams>;
        const body = request.body as Static<typeof OfferPatch>;
        return respondIdempotently(request, reply, { required: false }, async (tx) => ({
          body: await offers.update(tx, principalOf(request), id, offerId, {
            ...body,
            priceUc: body.priceUc === undefined ? undefined : parseUc(body.priceUc),
          }),
        }));
      },
    });
  });
}
