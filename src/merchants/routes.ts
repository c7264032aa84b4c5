// HTTP edge of merchants: registration and settings, domain verification, API keys, the webhook
// configuration and its deliveries. Routes translate; the rules live in MerchantService.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { API_KEY_SCOPES } from '../identity/api-keys.ts';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { MerchantIdParams, Nullable, PageQuery, UnixSeconds } from '../platform/schemas.ts';
import type { Principal } from '../platform/principal.ts';
import { ApiKeyCreate, DeliveryParams, KeyParams, MerchantCreate, MerchantPatch, WebhookPut, type MerchantOperations } from './operations.ts';
import { ACTIVE_API_KEYS_PER_MERCHANT_MAX, MERCHANTS_PER_OWNER_MAX, VERIFICATION_LABEL, merchantActor, type MerchantService } from './service.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;
const HUMAN = { kinds: ['human'] } as const;
const OWNER_OR_KEY = (scope: string) => ({ kinds: ['human', 'owner', 'merchant'], scopes: [scope] }) as const;

export const MerchantSchema = Type.Object(
  {
    id: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    domain: Type.String({ description: 'public DNS hostname, IDNA-ASCII, lower case' }),
    verificationChallenge: Type.String({ description: `the exact value of the TXT record to publish at ${VERIFICATION_LABEL}.<domain>` }),
    verified: Type.Boolean(),
    acceptedPaymentMethods: Type.Array(Type.String(), { description: 'how agents pay this merchant; "credits" (gateway credit)' }),
    webhookUrl: Type.String({ description: 'the configured webhook URL; "" while no webhook is configured' }),
    categories: Type.Array(Type.String()),
    createdAt: UnixSeconds('registration'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'Merchant' },
);

export const DnsRecordSchema = Type.Object(
  {
    type: Type.Literal('TXT'),
    name: Type.String({ description: `${VERIFICATION_LABEL}.<domain>` }),
    value: Type.String({ description: 'publish exactly this value (a long value may be split into several strings of one record)' }),
  },
  { $id: 'DnsRecord' },
);

export const WebhookConfigurationSchema = Type.Object(
  {
    configured: Type.Boolean(),
    enabled: Type.Boolean({ description: 'false pauses deliveries; events still happen and are kept' }),
    queueConfigured: Type.Boolean({ description: 'deliveries go through the database outbox that every instance drains (always true)' }),
    merchantId: Type.String(),
    url: Type.String({ description: 'canonical https URL on the verified domain; "" while not configured' }),
    createdAt: Nullable(UnixSeconds('first configuration; null while not configured')),
    updatedAt: Nullable(UnixSeconds('last change (PUT, PATCH, secret rotation); null while not configured')),
    pausedAt: Nullable(UnixSeconds('since when deliveries are paused; null while enabled')),
    disabledReason: Nullable(
      Type.Union([Type.Literal('merchant'), Type.Literal('failing')], { description: '`failing`: the gateway disabled it after failing attempts' }),
    ),
    previousSecretExpiresAt: Nullable(UnixSeconds('until when the secret replaced by the last rotation still signs; null when none does')),
  },
  { $id: 'WebhookConfiguration' },
);

export const ApiKeyMetadataSchema = Type.Object(
  {
    keyId: Type.String(),
    merchantId: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    scopes: Type.Array(Type.String({ enum: Object.keys(API_KEY_SCOPES) })),
    createdAt: UnixSeconds('creation'),
    revokedAt: Nullable(UnixSeconds('revocation; null while the key is active')),
  },
  { $id: 'ApiKeyMetadata', description: 'Never contains the secret' },
);

export const WebhookDeliverySchema = Type.Object(
  {
    id: Type.String(),
    eventId: Type.String({ description: 'the event; also the webhook-id header, the same on every attempt' }),
    eventType: Type.String(),
    state: Type.String({ enum: ['pending', 'succeeded', 'dead'] }),
    attempts: Type.Integer({ description: 'attempts started so far, including one in progress or cut off by a crash (see …/attempts)' }),
    nextAttemptAt: Nullable(UnixSeconds('next attempt (pending only)')),
    lastAttemptAt: Nullable(UnixSeconds('last attempt')),
    lastStatus: Nullable(Type.Integer({ description: 'HTTP status of the last answer; null when none came' })),
    lastError: Nullable(Type.String({ description: 'why the last attempt failed: status_not_2xx, timeout, connect_failed, dns_failed, forbidden_address, …' })),
    lastDurationMs: Nullable(Type.Integer()),
    deliveredAt: Nullable(UnixSeconds('the last successful attempt')),
    createdAt: UnixSeconds('creation'),
  },
  { $id: 'WebhookDelivery' },
);

const MerchantCreated = Type.Object({ merchant: Type.Ref('Merchant'), dnsRecord: Type.Ref('DnsRecord') });
const MerchantOne = Type.Object({ merchant: Type.Ref('Merchant') });
const MerchantList = Type.Object({ merchants: Type.Array(Type.Ref('Merchant')), hasMore: Type.Boolean() });
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
const ApiKeyList = Type.Object({ apiKeys: Type.Array(Type.Ref('ApiKeyMetadata')), hasMore: Type.Boolean() });
const WebhookConfigured = Type.Object({
  configuration: Type.Ref('WebhookConfiguration'),
  webhookSecret: Type.Optional(Type.String({ description: 'whsec_…; shown once, absent from replays' })),
  notice: Type.String(),
});
const WebhookOne = Type.Object({ configuration: Type.Ref('WebhookConfiguration') });
const DeliveryList = Type.Object({ deliveries: Type.Array(Type.Ref('WebhookDelivery')), hasMore: Type.Boolean() });
const DeliveryOne = Type.Object({ delivery: Type.Ref('WebhookDelivery') });

const ListQuery = PageQuery;

const actorOf = (principal: Principal) => merchantActor(principal);

export function merchantRoutes(merchants: MerchantService, ops: MerchantOperations) {
  return async function routes(app: FastifyInstance): Promise<void> {
    for (const schema of [MerchantSchema, DnsRecordSchema, WebhookConfigurationSchema, ApiKeyMetadataSchema, WebhookDeliverySchema]) {
      app.addSchema(schema);
    }
    const tags = ['merchants'];
    const webhookTags = ['webhooks'];

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

    app.get('/v1/merchants', {
      config: { auth: OWNER },
      schema: { operationId: 'listMerchants', tags, summary: 'List your merchants (oldest first)', querystring: ListQuery, response: { 200: MerchantList } },
      handler: async (request) => {
        const query = request.query as Static<typeof ListQuery>;
        return merchants.list(principalOf(request).ownerId!, query.limit ?? 20, query.startingAfter);
      },
    });

    app.get('/v1/merchants/:id', {
      config: { auth: OWNER },
      schema: { operationId: 'getMerchant', tags, summary: 'Read one of your merchants', params: MerchantIdParams, response: { 200: MerchantOne, ...problems(404) } },
      handler: async (request) => ({ merchant: await merchants.get(principalOf(request).ownerId!, (request.params as { id: string }).id) }),
    });

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

    app.get('/v1/merchants/:id/api-keys', {
      config: { auth: OWNER },
      schema: { operationId: 'listMerchantApiKeys',
        tags,
        summary: "List a merchant's API keys (metadata only, newest first)",
        params: MerchantIdParams,
        querystring: ListQuery,
        response: { 200: ApiKeyList, ...problems(404) },
      },
      handler: async (request) => {
        const query = request.query as Static<typeof ListQuery>;
        const { id } = request.params as { id: string };
        return merchants.listApiKeys(principalOf(request).ownerId!, id, query.limit ?? 20, query.startingAfter);
      },
    });

    app.post('/v1/merchants/:id/api-keys/:keyId/revoke', {
      config: { auth: OWNER, operation: ops.revokeMerchantApiKey },
      schema: {
        tags,
        summary: 'Revoke a merchant API key',
        description: 'No body. Takes effect on the next request made with the key. Revoking again changes nothing. Idempotency-Key is honoured when sent.',
        params: KeyParams,
        response: { 200: ApiKeyOne, ...problems(404) },
      },
      handler: (request, reply) => serve(request, reply, ops.revokeMerchantApiKey, request.params as Static<typeof KeyParams>),
    });

    app.put('/v1/merchants/:id/webhook', {
      config: { auth: OWNER, operation: ops.configureMerchantWebhook },
      schema: {
        tags: webhookTags,
        summary: "Configure the merchant's webhook",
        description:
          'Requires Idempotency-Key. The domain must be verified (409 otherwise). The first PUT issues the signing secret, ' +
          'returned once in `webhookSecret` (a replay omits it). Later PUTs keep it and return no `webhookSecret`, unless ' +
          '`rotateSecret` is true (the old secret then stops signing at once; POST …/webhook/rotate-secret gives an overlap). ' +
          'Resuming a paused webhook delivers the events of the pause unless `deliverMissed` is false. ' +
          '503 runtime_configuration_required in live mode without ACG_SECRET_BOX_KEY.',
        params: MerchantIdParams,
        body: WebhookPut,
        response: { 200: WebhookConfigured, ...problems(400, 404, 409, 503) },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.configureMerchantWebhook, { ...(request.body as Static<typeof WebhookPut>), id: (request.params as { id: string }).id }),
    });

    app.get('/v1/merchants/:id/webhook', {
      config: { auth: OWNER_OR_KEY('webhooks:read') },
      schema: { operationId: 'getMerchantWebhook',
        tags: webhookTags,
        summary: "Read the merchant's webhook configuration (never the secret)",
        params: MerchantIdParams,
        response: { 200: WebhookOne, ...problems(404) },
      },
      handler: async (request) => merchants.webhookConfiguration(actorOf(principalOf(request)), (request.params as { id: string }).id),
    });

    app.get('/v1/merchants/:id/webhook/deliveries', {
      config: { auth: OWNER_OR_KEY('webhooks:read') },
      schema: { operationId: 'listWebhookDeliveries',
        tags: webhookTags,
        summary: 'List recent webhook deliveries (newest first)',
        params: MerchantIdParams,
        querystring: ListQuery,
        response: { 200: DeliveryList, ...problems(404) },
      },
      handler: async (request) => {
        const query = request.query as Static<typeof ListQuery>;
        const { id } = request.params as { id: string };
        return merchants.listDeliveries(actorOf(principalOf(request)), id, query.limit ?? 20, query.startingAfter);
      },
    });

    app.post('/v1/merchants/:id/webhook/deliveries/:deliveryId/resend', {
      config: { auth: OWNER_OR_KEY('webhooks:write'), operation: ops.resendWebhookDelivery },
      schema: {
        tags: webhookTags,
        summary: 'Re-send a webhook delivery now',
        description:
          'No body. The next worker pass sends the event again with the same webhook-id to the endpoint as configured now. ' +
          '409 while an attempt is in progress or when the webhook is disabled. Idempotency-Key is honoured when sent.',
        params: DeliveryParams,
        response: { 202: DeliveryOne, ...problems(404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.resendWebhookDelivery, request.params as Static<typeof DeliveryParams>, { status: 202 }),
    });
  };
}
