// HTTP edge of offers: /v1/merchants/{id}/offers.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems, sharesSchemas } from '../platform/http/openapi.ts';
import { Microcredits, PageQuery, UnixSeconds } from '../platform/schemas.ts';
import { MerchantParams, OfferCreate, OfferParams, OfferPatch, type OfferOperations } from './operations.ts';
import type { OfferService } from './service.ts';

export const OfferSchema = Type.Object(
  {
    id: Type.String(),
    merchantId: Type.String(),
    name: Type.String(),
    category: Type.String(),
    priceUc: Microcredits('the hold a voucher for this offer takes'),
    active: Type.Boolean(),
    holdLifetimeS: Type.Integer({ description: 'seconds from minting until an uncaptured hold expires' }),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'Offer' },
);


export function offerRoutes(offers: OfferService, { createOffer, updateOffer }: OfferOperations) {
  return sharesSchemas(async function routes(app: FastifyInstance): Promise<void> {
    app.addSchema(OfferSchema);
    const tags = ['offers'];
    const write = { kinds: ['human', 'owner', 'merchant'], scopes: ['offers:write'] } as const;
    const read = { kinds: ['human', 'owner', 'merchant'], scopes: ['offers:read'] } as const;

    app.post('/v1/merchants/:id/offers', {
      config: { auth: write, operation: createOffer, location: true },
      schema: {
        tags,
        summary: 'Create an offer',
        description: "The category must be one of the merchant's categories. Requires Idempotency-Key.",
        params: MerchantParams,
        body: OfferCreate,
        response: { 201: Type.Ref('Offer'), ...problems(400, 404, 409) },
      },
      handler: (request, reply) =>
        serve(request, reply, createOffer, { ...(request.body as Static<typeof OfferCreate>), ...(request.params as Static<typeof MerchantParams>) }, {
          status: 201,
          headers: (offer) => ({ location: `/v1/merchants/${offer.merchantId}/offers/${offer.id}` }),
        }),
    });

    app.get('/v1/merchants/:id/offers', {
      config: { auth: read },
      schema: { operationId: 'listOffers',
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
      schema: { operationId: 'getOffer', tags, summary: 'Read an offer', params: OfferParams, response: { 200: Type.Ref('Offer'), ...problems(404) } },
      handler: async (request) => {
        const { id, offerId } = request.params as Static<typeof OfferParams>;
        return offers.get(principalOf(request), id, offerId);
      },
    });

    app.patch('/v1/merchants/:id/offers/:offerId', {
      config: { auth: write, operation: updateOffer },
      schema: {
        tags,
        summary: "Change an offer's name, price, lifetime or active flag",
        description: 'Existing holds keep the amount and deadline they were taken with. Idempotency-Key is honoured when sent.',
        params: OfferParams,
        body: OfferPatch,
        response: { 200: Type.Ref('Offer'), ...problems(400, 404, 409) },
      },
      handler: (request, reply) =>
        serve(request, reply, updateOffer, { ...(request.body as Static<typeof OfferPatch>), ...(request.params as Static<typeof OfferParams>) }),
    });
  });
}
