// HTTP edge of offers: a merchant's offers (/v1/merchants/{id}/offers) and the offers an agent can buy (/v1/offers).
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { MerchantParams, OfferCreate, OfferParams, OfferPatch, type OfferOperations } from './operations.ts';
import type { OfferQueries } from './queries.ts';

export function offerRoutes({ createOffer, updateOffer }: OfferOperations, queries: OfferQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
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

    app.route(queryRoute('GET', '/v1/merchants/:id/offers', queries.listOffers, { auth: read, tags, summary: "List a merchant's offers (oldest first)", errors: [404] }));
    app.route(queryRoute('GET', '/v1/merchants/:id/offers/:offerId', queries.getOffer, { auth: read, tags, summary: 'Read an offer', errors: [404] }));
    app.route(
      queryRoute('GET', '/v1/offers', queries.listSellableOffers, {
        auth: { kinds: ['agent'] },
        tags,
        summary: 'List the offers I (an agent) can buy (oldest first)',
        description:
          "Active offers of verified merchants in the agent's allowed categories. Mint a voucher for one with POST /v1/vouchers. MCP's `list_offers` answers the same.",
      }),
    );

    app.patch('/v1/merchants/:id/offers/:offerId', {
      config: { auth: write, operation: updateOffer },
      schema: {
        tags,
        summary: "Change an offer's name, price, lifetime or active flag",
        description: 'Existing holds keep the amount, deadline and refund window they were taken with. Idempotency-Key is honoured when sent.',
        params: OfferParams,
        body: OfferPatch,
        response: { 200: Type.Ref('Offer'), ...problems(400, 404, 409) },
      },
      handler: (request, reply) =>
        serve(request, reply, updateOffer, { ...(request.body as Static<typeof OfferPatch>), ...(request.params as Static<typeof OfferParams>) }),
    });
  };
}
