// POST /v1/access/merchant-check: may this independently verified agent identity use one of my offers?
// The rule and its SQL live in ./service.ts and ./store.ts.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { principalOf } from '../platform/http/auth.ts';
import { problems } from '../platform/http/openapi.ts';
import { Microcredits } from '../platform/schemas.ts';
import { checkMerchantAccess } from './service.ts';

const Body = Type.Object(
  {
    offerId: Type.String({ minLength: 1, maxLength: 200 }),
    agentIdentity: Type.Object(
      { issuer: Type.String({ minLength: 1, maxLength: 500 }), subject: Type.String({ minLength: 1, maxLength: 200 }) },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, examples: [{ offerId: 'off_01JD0S4W6Q6Z7T0YJ2V7C8M9KX', agentIdentity: { issuer: 'https://agents.example', subject: 'agent-42' } }] },
);

const Decision = Type.Object({
  agentId: Type.String(),
  agentIdentity: Type.Object({ issuer: Type.String(), subject: Type.String() }),
  merchantId: Type.String(),
  offerId: Type.String(),
  allowed: Type.Boolean({ description: "the agent is active, its owner is a verified human, and the offer's category is allowed to it" }),
  paymentRequired: Type.Boolean({ description: 'using the offer takes a voucher (a hold of priceUc); always true for priced offers' }),
  priceUc: Microcredits(),
  voucherEndpoint: Type.Optional(Type.String()),
});

export async function accessRoutes(app: FastifyInstance): Promise<void> {
  app.post('/v1/access/merchant-check', {
    config: { auth: { kinds: ['merchant'], scopes: ['access:check'] }, notAnOperation: 'a read with a body: it creates nothing' },
    schema: { operationId: 'checkMerchantAccess',
      tags: ['access'],
      summary: 'Check whether an agent identity may use one of your offers',
      description: 'Creates no registration, grant, hold, capture or fee; the answer holds no owner identity or balance. 404 when the offer is not an active offer of your merchant, or no agent is registered for the identity.',
      body: Body,
      response: { 200: Decision, ...problems(400, 404) },
    },
    handler: async (request) => {
      const body = request.body as Static<typeof Body>;
      return checkMerchantAccess(app.gateway.db, principalOf(request).merchantId!, body.offerId, body.agentIdentity);
    },
  });
}
