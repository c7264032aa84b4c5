// HTTP edge of the owner's webhook: PUT, GET and DELETE /v1/owner/webhook (a human session or an owner
// token; the owner is the caller). What it receives is the owner part of the event catalogue (the
// OpenAPI document's top-level `webhooks`).
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { OWNER_EVENT_TYPES } from '../events/outbox.ts';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { Nullable, UnixSeconds } from '../platform/schemas.ts';
import { OwnerWebhookPut, type OwnerWebhookOperations } from './operations.ts';
import type { OwnerWebhookService } from './service.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;

export const OwnerWebhookConfigurationSchema = Type.Object(
  {
    configured: Type.Boolean(),
    enabled: Type.Boolean({ description: 'false: events happen but no delivery is created' }),
    ownerId: Type.String(),
    url: Type.String({ description: 'canonical https URL; "" while not configured' }),
    eventTypes: Type.Array(Type.String({ enum: [...OWNER_EVENT_TYPES] }), { description: 'the event types this webhook receives' }),
    createdAt: Nullable(UnixSeconds('first configuration; null while not configured')),
    updatedAt: Nullable(UnixSeconds('last change; null while not configured')),
    disabledReason: Nullable(
      Type.Union([Type.Literal('owner'), Type.Literal('failing')], {
        description: '`owner`: PUT with enabled false; `failing`: the gateway disabled it after every attempt failed for 5 days (PUT enabled true resumes)',
      }),
    ),
  },
  { $id: 'OwnerWebhookConfiguration' },
);

const Configured = Type.Object({
  configuration: Type.Ref('OwnerWebhookConfiguration'),
  webhookSecret: Type.Optional(Type.String({ description: 'whsec_…; shown once, absent from replays and from PUTs that keep the secret' })),
  notice: Type.String(),
});
const One = Type.Object({ configuration: Type.Ref('OwnerWebhookConfiguration') });
const Deleted = Type.Object({
  configuration: Type.Ref('OwnerWebhookConfiguration'),
  deleted: Type.Boolean({ description: 'false when no webhook was configured' }),
});

export function ownerWebhookRoutes(ownerWebhooks: OwnerWebhookService, ops: OwnerWebhookOperations) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.addSchema(OwnerWebhookConfigurationSchema);
    const tags = ['webhooks'];
    const events = OWNER_EVENT_TYPES.map((type) => `\`${type}\``).join(', ');

    app.put('/v1/owner/webhook', {
      config: { auth: OWNER, operation: ops.configureOwnerWebhook },
      schema: {
        tags,
        summary: "Configure the owner's webhook (its agents' top-up and intent events)",
        description:
          `Receives ${events}, signed with Standard Webhooks and retried like merchant webhooks. Requires Idempotency-Key. ` +
          'URL: https on port 443 to a public DNS name (no IP address, no localhost or other special-use name, no query, fragment ' +
          'or credentials); every address the name resolves to must be public when a delivery is made. The first PUT issues the ' +
          'signing secret, returned once in `webhookSecret` (a replay omits it); later PUTs keep it unless `rotateSecret` is true. ' +
          '503 runtime_configuration_required in live mode without ACG_SECRET_BOX_KEY.',
        body: OwnerWebhookPut,
        response: { 200: Configured, ...problems(400, 503) },
      },
      handler: (request, reply) => serve(request, reply, ops.configureOwnerWebhook, request.body as Static<typeof OwnerWebhookPut>),
    });

    app.get('/v1/owner/webhook', {
      config: { auth: OWNER },
      schema: {
        operationId: 'getOwnerWebhook',
        tags,
        summary: "Read the owner's webhook configuration (never the secret)",
        response: { 200: One },
      },
      handler: async (request) => ownerWebhooks.configuration(principalOf(request).ownerId!),
    });

    app.delete('/v1/owner/webhook', {
      config: { auth: OWNER, operation: ops.deleteOwnerWebhook },
      schema: {
        tags,
        summary: "Delete the owner's webhook",
        description:
          'Events still waiting for delivery are dropped (their deliveries end `dead`, `endpoint_deleted`); a later PUT starts a new ' +
          'webhook with a new secret. Deleting when none is configured answers `deleted: false`. Idempotency-Key is honoured when sent.',
        response: { 200: Deleted },
      },
      handler: (request, reply) => serve(request, reply, ops.deleteOwnerWebhook, {}),
    });
  };
}
