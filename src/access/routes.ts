// POST /v1/access/merchant-check: may this independently verified agent identity use one of my offers?
// One SQL statement reads the offer, the registration and the clearance together (one snapshot), and
// nothing is written.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ApiError } from '../platform/errors.ts';
import { principalOf } from '../platform/http/auth.ts';
import { problems } from '../platform/http/openapi.ts';
import { Microcredits } from '../platform/schemas.ts';
import { formatUc } from '../platform/money.ts';

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

interface CheckRow {
  offer_id: string;
  merchant_id: string;
  price_uc: bigint;
  category: string;
  merchant_verified: boolean;
  agent_id: string | null;
  agent_status: string | null;
  allowed_categories: string[] | null;
  owner_verified: boolean | null;
}

export async function accessRoutes(app: FastifyInstance): Promise<void> {
  app.post('/v1/access/merchant-check', {
    config: { auth: { kinds: ['merchant'], scopes: ['access:check'] } },
    schema: { operationId: 'checkMerchantAccess',
      tags: ['access'],
      summary: 'Check whether an agent identity may use one of your offers',
      description: 'Creates no registration, grant, hold, capture or fee; the answer holds no owner identity or balance. 404 when the offer is not an active offer of your merchant, or no agent is registered for the identity.',
      body: Body,
      response: { 200: Decision, ...problems(400, 404) },
    },
    handler: async (request) => {
      const { merchantId } = principalOf(request);
      const body = request.body as Static<typeof Body>;
      const { rows } = await app.gateway.db.query<CheckRow>(
        `SELECT o.id AS offer_id, o.merchant_id, o.price_uc, o.category, m.verified AS merchant_verified,
                a.id AS agent_id, a.status AS agent_status, a.allowed_categories, ow.email_verified AS owner_verified
           FROM offers o
           JOIN merchants m ON m.id = o.merchant_id
           LEFT JOIN agents a ON a.identity_issuer = $3 AND a.identity_subject = $4
           LEFT JOIN owners ow ON ow.id = a.owner_id
          WHERE o.id = $1 AND o.merchant_id = $2 AND o.active`,
        [body.offerId, merchantId, body.agentIdentity.issuer, body.agentIdentity.subject],
      );
      const row = rows[0];
      if (!row) throw new ApiError('not_found', { detail: `no active offer ${body.offerId} of your merchant` });
      if (!row.agent_id) throw new ApiError('not_found', { detail: 'no agent is registered for this identity' });
      const categoryAllowed = row.allowed_categories!.includes('*') || row.allowed_categories!.includes(row.category);
      return {
        agentId: row.agent_id,
        agentIdentity: body.agentIdentity,
        merchantId: row.merchant_id,
        offerId: row.offer_id,
        allowed: row.agent_status === 'active' && row.owner_verified === true && categoryAllowed && row.merchant_verified,
        paymentRequired: row.price_uc > 0n,
        priceUc: formatUc(row.price_uc),
        voucherEndpoint: '/v1/vouchers',
      };
    },
  });
}
