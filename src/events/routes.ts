// HTTP edge of events and webhooks. A merchant's: configuring its webhook, reading it, the events it had
// (kept EVENT_RETENTION_DAYS), its deliveries and their attempts, re-sending a delivery or any past event,
// pausing and resuming the webhook, rotating its secret with an overlap; access is the merchants feature's
// rule (its owner, or one of its API keys with the scope). An owner's: PUT, GET and DELETE
// /v1/owner/webhook (the owner is the caller), receiving the owner part of the event catalogue (the OpenAPI
// document's top-level `webhooks`), the owner's events and deliveries with their attempts, and re-sending a
// delivery or any past event as a merchant does. Routes translate; the rules live in the operations, queries and services.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { IdParams, MerchantIdParams } from '../platform/schemas.ts';
import { OWNER_EVENT_TYPES } from './outbox.ts';
import {
  DeliveryParams,
  EventParams,
  OwnerDeliveryParams,
  OwnerEventParams,
  OwnerWebhookPut,
  RotateBody,
  WebhookPatch,
  WebhookPut,
  type EventOperations,
  type OwnerWebhookOperations,
} from './operations.ts';
import type { EventQueries } from './queries.ts';
import { EVENT_RETENTION_DAYS, ROTATION_OVERLAP_DEFAULT_S } from './service.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;
const OWNER_OR_KEY = (scope: string) => ({ kinds: ['human', 'owner', 'merchant'], scopes: [scope] }) as const;

const WebhookConfigured = Type.Object({
  configuration: Type.Ref('WebhookConfiguration'),
  webhookSecret: Type.Optional(Type.String({ description: 'whsec_…; shown once, absent from replays' })),
  notice: Type.String(),
});
const DeliveryOne = Type.Object({ delivery: Type.Ref('WebhookDelivery') });
/** A rotation's answer, a merchant's or an owner's: the configuration after it, and the new secret once. */
const Rotated = (configuration: 'WebhookConfiguration' | 'OwnerWebhookConfiguration') =>
  Type.Object({
    configuration: Type.Ref(configuration),
    webhookSecret: Type.Optional(Type.String({ description: 'whsec_…; shown once, absent from replays' })),
    notice: Type.Optional(Type.String({ description: 'on a replay only: the secret was shown once, in the first answer, and what to do if it was lost' })),
  });
const OwnerConfigured = Type.Object({
  configuration: Type.Ref('OwnerWebhookConfiguration'),
  webhookSecret: Type.Optional(Type.String({ description: 'whsec_…; shown once, absent from replays and from PUTs that keep the secret' })),
  notice: Type.String(),
});
const OwnerDeleted = Type.Object({
  configuration: Type.Ref('OwnerWebhookConfiguration'),
  deleted: Type.Boolean({ description: 'false when no webhook was configured' }),
});

export function eventRoutes(ops: EventOperations, queries: EventQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const tags = ['webhooks'];

    app.put('/v1/merchants/:id/webhook', {
      config: { auth: OWNER, operation: ops.configureMerchantWebhook },
      schema: {
        tags,
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

    app.route(
      queryRoute('GET', '/v1/merchants/:id/webhook', queries.getMerchantWebhook, {
        auth: OWNER_OR_KEY('webhooks:read'),
        tags,
        summary: "Read the merchant's webhook configuration (never the secret)",
        errors: [404],
      }),
    );

    app.route(
      queryRoute('GET', '/v1/merchants/:id/webhook/deliveries', queries.listWebhookDeliveries, {
        auth: OWNER_OR_KEY('webhooks:read'),
        tags,
        summary: 'List recent webhook deliveries (newest first)',
        errors: [404],
      }),
    );

    app.post('/v1/merchants/:id/webhook/deliveries/:deliveryId/resend', {
      config: { auth: OWNER_OR_KEY('webhooks:write'), operation: ops.resendWebhookDelivery },
      schema: {
        tags,
        summary: 'Re-send a webhook delivery now',
        description:
          'No body. The next worker pass sends the event again with the same webhook-id to the endpoint as configured now. ' +
          '409 while an attempt is in progress, when the webhook is disabled, or for a `webhook.disabled` event (never delivered). ' +
          'Idempotency-Key is honoured when sent.',
        params: DeliveryParams,
        response: { 202: DeliveryOne, ...problems(404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.resendWebhookDelivery, request.params as Static<typeof DeliveryParams>, { status: 202 }),
    });

    app.route(
      queryRoute('GET', '/v1/merchants/:id/events', queries.listEvents, {
        auth: OWNER_OR_KEY('events:read'),
        tags,
        summary: "List the merchant's events (newest first)",
        description:
          `Every event is kept ${EVENT_RETENTION_DAYS} days, whether or not a webhook was enabled when it happened. ` +
          'Filter by `type` (comma-separated) and by time (`from`, `to`, Unix seconds); page with `startingAfter`.',
        errors: [400, 404],
      }),
    );

    app.post('/v1/merchants/:id/events/:eventId/resend', {
      config: { auth: OWNER_OR_KEY('webhooks:write'), operation: ops.resendEvent },
      schema: {
        tags,
        summary: 'Re-send a past event to the webhook',
        description:
          'No body. Delivers the event again with its original webhook-id, to the endpoint as configured now: its delivery ' +
          'is made due now, or created when the event happened while the webhook was paused. 409 while the webhook is disabled ' +
          'or an attempt is in progress, and for a `webhook.disabled` event (listed, never delivered). Idempotency-Key is honoured when sent.',
        params: EventParams,
        response: { 202: DeliveryOne, ...problems(404, 409) },
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
        response: { 200: Type.Object({ configuration: Type.Ref('WebhookConfiguration') }), ...problems(400, 404) },
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
          200: Rotated('WebhookConfiguration'),
          ...problems(400, 404, 503),
        },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.rotateWebhookSecret, { ...((request.body ?? {}) as Static<typeof RotateBody>), id: (request.params as { id: string }).id }),
    });

    app.route(
      queryRoute('GET', '/v1/merchants/:id/webhook/deliveries/:deliveryId/attempts', queries.listDeliveryAttempts, {
        auth: OWNER_OR_KEY('webhooks:read'),
        tags,
        summary: 'Every attempt of one delivery (oldest first)',
        description: 'Including an attempt in progress, and one cut off by a crashed instance (`interrupted`).',
        errors: [404],
      }),
    );
  };
}

export function ownerWebhookRoutes(ops: OwnerWebhookOperations, queries: EventQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
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
          'signing secret, returned once in `webhookSecret` (a replay omits it); later PUTs keep it unless `rotateSecret` is true (the old ' +
          'secret then stops signing at once; POST /v1/owner/webhook/rotate-secret gives an overlap). 503 runtime_configuration_required in live mode without ACG_SECRET_BOX_KEY.',
        body: OwnerWebhookPut,
        response: { 200: OwnerConfigured, ...problems(400, 503) },
      },
      handler: (request, reply) => serve(request, reply, ops.configureOwnerWebhook, request.body as Static<typeof OwnerWebhookPut>),
    });

    app.post('/v1/owner/webhook/rotate-secret', {
      config: { auth: OWNER, operation: ops.rotateOwnerWebhookSecret },
      schema: {
        tags,
        summary: "Rotate the owner webhook's signing secret, with an overlap",
        description:
          'Requires Idempotency-Key. Issues a new secret, returned once in `webhookSecret` (a replay omits it). For ' +
          `\`overlapSeconds\` (default ${ROTATION_OVERLAP_DEFAULT_S / 3600} h) every delivery, retries of earlier events included, carries two ` +
          'signatures in `webhook-signature` (`v1,<new> v1,<old>`), so a receiver knowing either secret verifies; then only the new one ' +
          '(`configuration.previousSecretExpiresAt` says until when). Rotating again during an overlap ends the older overlap. 404 when no ' +
          'webhook is configured.',
        body: RotateBody,
        response: {
          200: Rotated('OwnerWebhookConfiguration'),
          ...problems(400, 404, 503),
        },
      },
      handler: (request, reply) => serve(request, reply, ops.rotateOwnerWebhookSecret, (request.body ?? {}) as Static<typeof RotateBody>),
    });

    app.route(queryRoute('GET', '/v1/owner/webhook', queries.getOwnerWebhook, { auth: OWNER, tags, summary: "Read the owner's webhook configuration (never the secret)" }));

    app.route(
      queryRoute('GET', '/v1/owner/events', queries.listOwnerEvents, {
        auth: OWNER,
        tags,
        summary: "List the owner's events (newest first)",
        description:
          `The events of your agents (${events}), kept ${EVENT_RETENTION_DAYS} days whether or not a webhook was enabled when they ` +
          'happened. Filter by `type` (comma-separated) and by time (`from`, `to`, Unix seconds); page with `startingAfter`.',
        errors: [400],
      }),
    );

    app.route(
      queryRoute('GET', '/v1/owner/webhook/deliveries', queries.listOwnerWebhookDeliveries, {
        auth: OWNER,
        tags,
        summary: "List the owner webhook's recent deliveries (newest first)",
      }),
    );

    app.post('/v1/owner/webhook/deliveries/:deliveryId/resend', {
      config: { auth: OWNER, operation: ops.resendOwnerWebhookDelivery },
      schema: {
        tags,
        summary: "Re-send one of the owner webhook's deliveries now",
        description:
          'No body. The next worker pass sends the event again with the same webhook-id to the webhook as configured now, a ' +
          'dead delivery (all its attempts failed) too; a failure continues its retry schedule. 404 for another owner\'s ' +
          'delivery; 409 while an attempt is in progress, or when the webhook is disabled or not configured. Idempotency-Key ' +
          'is honoured when sent.',
        params: OwnerDeliveryParams,
        response: { 202: DeliveryOne, ...problems(404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.resendOwnerWebhookDelivery, request.params as Static<typeof OwnerDeliveryParams>, { status: 202 }),
    });

    app.post('/v1/owner/events/:eventId/resend', {
      config: { auth: OWNER, operation: ops.resendOwnerEvent },
      schema: {
        tags,
        summary: 'Re-send a past event to the owner webhook',
        description:
          'No body. Delivers one of your events (`GET /v1/owner/events`) again with its original webhook-id, to the webhook as ' +
          'configured now: its delivery is made due now, or created when the event happened while the webhook was paused or not ' +
          'configured. 404 for another owner\'s event; 409 while the webhook is disabled or not configured, or an attempt is in ' +
          'progress. Idempotency-Key is honoured when sent.',
        params: OwnerEventParams,
        response: { 202: DeliveryOne, ...problems(404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.resendOwnerEvent, request.params as Static<typeof OwnerEventParams>, { status: 202 }),
    });

    app.route(
      queryRoute('GET', '/v1/owner/webhook/deliveries/:deliveryId/attempts', queries.listOwnerDeliveryAttempts, {
        auth: OWNER,
        tags,
        summary: "Every attempt of one of the owner webhook's deliveries (oldest first)",
        description: "Including an attempt in progress, and one cut off by a crashed instance (`interrupted`). Another owner's delivery is 404.",
        errors: [404],
      }),
    );

    app.delete('/v1/owner/webhook', {
      config: { auth: OWNER, operation: ops.deleteOwnerWebhook },
      schema: {
        tags,
        summary: "Delete the owner's webhook",
        description:
          'Events still waiting for delivery are dropped (their deliveries end `dead`, `endpoint_deleted`); a later PUT starts a new ' +
          'webhook with a new secret. Deleting when none is configured answers `deleted: false`. Idempotency-Key is honoured when sent.',
        response: { 200: OwnerDeleted },
      },
      handler: (request, reply) => serve(request, reply, ops.deleteOwnerWebhook, {}),
    });
  };
}
