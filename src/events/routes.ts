// HTTP edge of events and of the webhook's lifecycle: the events a merchant had (kept
// EVENT_RETENTION_DAYS), re-sending any of them, pausing and resuming the webhook, rotating its secret
// with an overlap, and the attempts of one delivery. Access is the merchants service's rule (its owner, or
// one of its API keys with the scope); the rules of webhooks live in WebhookService.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { merchantActor, type MerchantService } from '../merchants/service.ts';
import { WebhookConfigurationSchema, WebhookDeliverySchema } from '../merchants/routes.ts';
import type { Queryable } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { IdParams, Nullable, ResourceId, UnixSeconds } from '../platform/schemas.ts';
import { MERCHANT_EVENT_TYPES } from './outbox.ts';
import { EventParams, RotateBody, WebhookPatch, type EventOperations } from './operations.ts';
import { EVENT_RETENTION_DAYS, ROTATION_OVERLAP_DEFAULT_S, type WebhookService } from './service.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;
const OWNER_OR_KEY = (scope: string) => ({ kinds: ['human', 'owner', 'merchant'], scopes: [scope] }) as const;

const EventSchema = Type.Object(
  {
    id: Type.String({ description: 'the event id; also the webhook-id header of its deliveries' }),
    type: Type.String({ enum: [...MERCHANT_EVENT_TYPES] }),
    createdAt: UnixSeconds('when it happened'),
    payload: Type.Object({}, { additionalProperties: true, description: 'the envelope exactly as delivered (see the top-level `webhooks`)' }),
  },
  { $id: 'Event' },
);

const AttemptSchema = Type.Object(
  {
    id: Type.String(),
    attempt: Type.Integer({ minimum: 1, description: '1 for the first attempt of the delivery' }),
    outcome: Type.String({
      enum: ['in_progress', 'succeeded', 'failed', 'interrupted'],
      description: '`interrupted`: the instance making it stopped (e.g. a crash) before it finished, and another took the delivery over',
    }),
    status: Nullable(Type.Integer({ description: 'HTTP status of the answer; null when none came' })),
    error: Nullable(Type.String()),
    durationMs: Nullable(Type.Integer()),
    startedAtMs: Type.Integer({ description: 'Unix milliseconds' }),
    finishedAtMs: Nullable(Type.Integer({ description: 'Unix milliseconds; null while in progress' })),
  },
  { $id: 'WebhookAttempt' },
);

// The merchants feature registers these two under its own scope; here they are inlined.
const { $id: _configurationId, ...Configuration } = WebhookConfigurationSchema;
const { $id: _deliveryId, ...DeliveryInline } = WebhookDeliverySchema;

const EventsQuery = Type.Object(
  {
    type: Type.Optional(Type.String({ maxLength: 500, description: `comma-separated event types (${MERCHANT_EVENT_TYPES.join(', ')}); all when absent` })),
    from: Type.Optional(UnixSeconds('only events created at or after')),
    to: Type.Optional(UnixSeconds('only events created at or before')),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'page size, 1–100' })),
    startingAfter: Type.Optional(Type.String({ maxLength: 200, description: 'id of the last event of the previous page' })),
  },
  { additionalProperties: false },
);

const DeliveryParams = Type.Object({ id: ResourceId, deliveryId: ResourceId });

export function eventRoutes(merchants: MerchantService, webhooks: WebhookService, ops: EventOperations) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.addSchema(EventSchema);
    app.addSchema(AttemptSchema);
    const tags = ['webhooks'];

    /** 404 unless the caller may act for the merchant (its owner, or one of its keys). */
    const reach = async (request: Parameters<typeof principalOf>[0], merchantId: string, db: Queryable = app.gateway.db) => {
      await merchants.facts(db, merchantActor(principalOf(request)), merchantId);
    };

    app.get('/v1/merchants/:id/events', {
      config: { auth: OWNER_OR_KEY('events:read') },
      schema: {
        operationId: 'listEvents',
        tags,
        summary: "List the merchant's events (newest first)",
        description:
          `Every event is kept ${EVENT_RETENTION_DAYS} days, whether or not a webhook was enabled when it happened. ` +
          'Filter by `type` (comma-separated) and by time (`from`, `to`, Unix seconds); page with `startingAfter`.',
        params: IdParams,
        querystring: EventsQuery,
        response: { 200: Type.Object({ events: Type.Array(Type.Ref('Event')), hasMore: Type.Boolean() }), ...problems(400, 404) },
      },
      handler: async (request) => {
        const { id } = request.params as { id: string };
        const query = request.query as Static<typeof EventsQuery>;
        const types = query.type === undefined ? [] : query.type.split(',').map((t) => t.trim());
        const unknown = types.find((t) => !(MERCHANT_EVENT_TYPES as readonly string[]).includes(t));
        if (unknown !== undefined) throw new ApiError('invalid_input', { detail: `type: unknown event type "${unknown}"; known: ${MERCHANT_EVENT_TYPES.join(', ')}` });
        await reach(request, id);
        return webhooks.listEvents(id, { types, from: query.from, to: query.to, limit: query.limit ?? 20, startingAfter: query.startingAfter });
      },
    });

    app.post('/v1/merchants/:id/events/:eventId/resend', {
      config: { auth: OWNER_OR_KEY('webhooks:write'), operation: ops.resendEvent },
      schema: {
        tags,
        summary: 'Re-send a past event to the webhook',
        description:
          'No body. Delivers the event again with its original webhook-id, to the endpoint as configured now: its delivery ' +
          'is made due now, or created when the event happened while the webhook was paused. 409 while the webhook is disabled ' +
          'or an attempt is in progress. Idempotency-Key is honoured when sent.',
        params: EventParams,
        response: { 202: Type.Object({ delivery: DeliveryInline }), ...problems(404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.resendEvent, request.params as Static<typeof EventParams>, { status: 202 }),
    });

    app.patch('/v1/merchants/:id/webhook', {
      config: { auth: OWNER, operation: ops.setWebhookEnabled },
      schema: {
        tags,
        summary: 'Pause or resume the webhook (the secret is untouched)',
        description:
          'Requires Idempotency-Key. `enabled: false` stops deliveries at once (an attempt already running finishes). ' +
          '`enabled: true` resumes: with `deliverMissed` (the default) every event of the pause is delivered; with ' +
          '`deliverMissed: false` only new events are. Deliveries pending before the pause continue either way. Resuming ' +
          'also closes the circuit of an endpoint the gateway disabled for failing.',
        params: IdParams,
        body: WebhookPatch,
        response: { 200: Type.Object({ configuration: Configuration }), ...problems(400, 404) },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.setWebhookEnabled, { ...(request.body as Static<typeof WebhookPatch>), id: (request.params as { id: string }).id }),
    });

    app.post('/v1/merchants/:id/webhook/rotate-secret', {
      config: { auth: OWNER, operation: ops.rotateWebhookSecret },
      schema: {
        tags,
        summary: "Rotate the webhook's signing secret, with an overlap",
        description:
          'Requires Idempotency-Key. Issues a new secret, returned once in `webhookSecret` (a replay omits it). For ' +
          `\`overlapSeconds\` (default ${ROTATION_OVERLAP_DEFAULT_S / 3600} h) every delivery carries two signatures in ` +
          '`webhook-signature` (`v1,<new> v1,<old>`), so a receiver knowing either secret verifies; then only the new one. ' +
          'Rotating again during an overlap ends the older overlap: only the secret being replaced keeps signing.',
        params: IdParams,
        body: RotateBody,
        response: {
          200: Type.Object({
            configuration: Configuration,
            webhookSecret: Type.Optional(Type.String({ description: 'whsec_…; shown once, absent from replays' })),
          }),
          ...problems(400, 404, 503),
        },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.rotateWebhookSecret, { ...((request.body ?? {}) as Static<typeof RotateBody>), id: (request.params as { id: string }).id }),
    });

    app.get('/v1/merchants/:id/webhook/deliveries/:deliveryId/attempts', {
      config: { auth: OWNER_OR_KEY('webhooks:read') },
      schema: {
        operationId: 'listDeliveryAttempts',
        tags,
        summary: 'Every attempt of one delivery (oldest first)',
        description: 'Including an attempt in progress, and one cut off by a crashed instance (`interrupted`).',
        params: DeliveryParams,
        response: { 200: Type.Object({ delivery: DeliveryInline, attempts: Type.Array(Type.Ref('WebhookAttempt')) }), ...problems(404) },
      },
      handler: async (request) => {
        const { id, deliveryId } = request.params as Static<typeof DeliveryParams>;
        await reach(request, id);
        return webhooks.listAttempts(id, deliveryId);
      },
    });
  };
}
