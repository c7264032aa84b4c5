// HTTP edge of merchants: registration and settings, domain verification, API keys. Routes translate; the
// rules live in the operations, queries and MerchantService. (The merchant's webhook routes are the events
// feature's.)
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { MerchantIdParams } from '../platform/schemas.ts';
import { ApiKeyCreate, KeyParams, MerchantCreate, MerchantPatch, type MerchantOperations } from './operations.ts';
import type { MerchantQueries } from './queries.ts';
import { ACTIVE_API_KEYS_PER_MERCHANT_MAX, MERCHANTS_PER_OWNER_MAX, VERIFICATION_LABEL } from './service.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;
const HUMAN = { kinds: ['human'] } as const;

const MerchantCreated = Type.Object({ merchant: Type.Ref('Merchant'), dnsRecord: Type.Ref('DnsRecord') });
const MerchantOne = Type.Object({ merchant: Type.Ref('Merchant') });
const Verified = Type.Object({ merchant: Type.Ref('Merchant'), verified: Type.Boolean() });
const VerificationPending = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    code: Type.String({ description: 'domain_verification_pending, or an idempotency conflict' }),
    detail: Type.Optional(Type.String()),
    verified: Type.Optional(Type.Boolean({ description: 'false (domain_verification_pending)' })),
    dnsRecord: Type.Optional(Type.Ref('DnsRecord')),
  },
  { additionalProperties: true, description: 'domain_verification_pending carries `verified: false` and the DNS record to publish' },
);
const ApiKeyCreated = Type.Object({
  apiKey: Type.Ref('ApiKeyMetadata'),
  secretKey: Type.Optional(Type.String({ description: 'the key (acg_mk_…); shown once, absent from replays' })),
  notice: Type.String(),
});
const ApiKeyOne = Type.Object({ apiKey: Type.Ref('ApiKeyMetadata') });

export function merchantRoutes(ops: MerchantOperations, queries: MerchantQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const tags = ['merchants'];

    app.post('/v1/merchants', {
      config: { auth: OWNER, operation: ops.registerMerchant, location: true },
      schema: {
        tags,
        summary: 'Register a merchant',
        description: `Requires Idempotency-Key. Answers the DNS TXT record to publish at ${VERIFICATION_LABEL}.<domain> before calling verify-domain. At most ${MERCHANTS_PER_OWNER_MAX} merchants per owner.`,
        body: MerchantCreate,
        response: { 201: MerchantCreated, ...problems(400, 409, 503) },
      },
      handler: (request, reply) => serve(request, reply, ops.registerMerchant, request.body as Static<typeof MerchantCreate>, {
          status: 201,
          headers: ({ merchant }) => ({ location: `/v1/merchants/${merchant.id}` }),
        }),
    });

    app.route(queryRoute('GET', '/v1/merchants', queries.listMerchants, { auth: OWNER, tags, summary: 'List your merchants (oldest first)' }));
    app.route(queryRoute('GET', '/v1/merchants/:id', queries.getMerchant, { auth: OWNER, tags, summary: 'Read one of your merchants', errors: [404] }));

    app.patch('/v1/merchants/:id', {
      config: { auth: HUMAN, operation: ops.updateMerchant },
      schema: {
        tags,
        summary: "Update a merchant's name and categories",
        description:
          'Human owner session only. Requires Idempotency-Key. The domain is immutable (400). Removing a category that an ' +
          'active offer uses is refused with 409 category_in_use.',
        params: MerchantIdParams,
        body: MerchantPatch,
        response: { 200: MerchantOne, ...problems(400, 404, 409) },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.updateMerchant, { ...(request.body as Static<typeof MerchantPatch>), id: (request.params as { id: string }).id }),
    });

    app.post('/v1/merchants/:id/verify-domain', {
      config: { auth: OWNER, operation: ops.verifyMerchantDomain },
      schema: {
        tags,
        summary: "Verify the merchant's domain through its DNS TXT record",
        description:
          'No body. Requires Idempotency-Key. Asks the DNS-over-HTTPS resolver for the TXT record at ' +
          `${VERIFICATION_LABEL}.<domain>. Found: 200 and the event merchant.verified. Not visible yet: 409 ` +
          'domain_verification_pending with the record (retry with a new key once published). Resolver failure: 503 ' +
          'runtime_unavailable, and nothing changes (a verified merchant stays verified).',
        params: MerchantIdParams,
        response: { 200: Verified, 409: VerificationPending, ...problems(404, 503) },
      },
      handler: (request, reply) => serve(request, reply, ops.verifyMerchantDomain, { id: (request.params as { id: string }).id }),
    });

    app.post('/v1/merchants/:id/api-keys', {
      config: { auth: OWNER, operation: ops.createMerchantApiKey },
      schema: {
        tags,
        summary: 'Create a merchant API key',
        description:
          `Requires Idempotency-Key. The key is in \`secretKey\`, shown once: a replay omits it. At most ${ACTIVE_API_KEYS_PER_MERCHANT_MAX} ` +
          'active keys per merchant. 503 runtime_configuration_required in live mode without ACG_API_KEY_PEPPER.',
        params: MerchantIdParams,
        body: ApiKeyCreate,
        response: { 201: ApiKeyCreated, ...problems(400, 404, 409, 503) },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.createMerchantApiKey, { ...(request.body as Static<typeof ApiKeyCreate>), id: (request.params as { id: string }).id }, { status: 201 }),
    });

    app.route(
      queryRoute('GET', '/v1/merchants/:id/api-keys', queries.listMerchantApiKeys, {
        auth: OWNER,
        tags,
        summary: "List a merchant's API keys (metadata only, newest first)",
        errors: [404],
      }),
    );

    app.post('/v1/merchants/:id/api-keys/:keyId/revoke', {
      config: { auth: OWNER, operation: ops.revokeMerchantApiKey },
      schema: {
        tags,
        summary: 'Revoke a merchant API key',
        description: 'No body. The answer comes once the revocation holds on every gateway instance (up to the longest `ACG_CREDENTIAL_FACTS_MS` of the instances, 2 s by default, after it is committed): every request made with the key after it is refused. Revoking again changes nothing. Idempotency-Key is honoured when sent.',
        params: KeyParams,
        response: { 200: ApiKeyOne, ...problems(404) },
      },
      handler: (request, reply) => serve(request, reply, ops.revokeMerchantApiKey, request.params as Static<typeof KeyParams>),
    });
  };
}
