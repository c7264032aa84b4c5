// Events and webhooks as every face shows them: one schema each, registered once by the composition root.
import { Type } from '@sinclair/typebox';
import { Nullable, UnixSeconds } from '../platform/schemas.ts';
import { MERCHANT_EVENT_TYPES, OWNER_EVENT_TYPES } from './outbox.ts';

export const EventSchema = Type.Object(
  {
    id: Type.String({ description: 'the event id; also the webhook-id header of its deliveries' }),
    type: Type.String({ enum: [...MERCHANT_EVENT_TYPES] }),
    createdAt: UnixSeconds('when it happened'),
    payload: Type.Object({}, { additionalProperties: true, description: 'the envelope exactly as delivered (see the top-level `webhooks`)' }),
  },
  { $id: 'Event' },
);

export const OwnerEventSchema = Type.Object(
  {
    id: Type.String({ description: 'the event id; also the webhook-id header of its deliveries' }),
    type: Type.String({ enum: [...OWNER_EVENT_TYPES] }),
    createdAt: UnixSeconds('when it happened'),
    payload: Type.Object({}, { additionalProperties: true, description: 'the envelope exactly as delivered (see the top-level `webhooks`)' }),
  },
  { $id: 'OwnerEvent' },
);

/** Every code a failed attempt is recorded with: the attempt's `error`, the delivery's `lastError`. */
const ATTEMPT_ERRORS =
  'status_not_2xx, timeout, connect_failed (nothing accepted the connection), connection_closed (accepted, then closed before an answer), ' +
  'tls_failed (a certificate expired, of another name or of an untrusted CA), invalid_response (an answer that is not HTTP the gateway can read, ' +
  'such as headers over 16 KiB), dns_failed, forbidden_address, invalid_url, secret_unavailable (nothing was sent), request_failed (any other ' +
  'failure; the attempt’s message names it)';

export const WebhookAttemptSchema = Type.Object(
  {
    id: Type.String(),
    attempt: Type.Integer({ minimum: 1, description: '1 for the first attempt of the delivery' }),
    outcome: Type.String({
      enum: ['in_progress', 'succeeded', 'failed', 'interrupted'],
      description: '`interrupted`: the instance making it stopped (e.g. a crash) before it finished, and another took the delivery over',
    }),
    status: Nullable(Type.Integer({ description: 'HTTP status of the answer; null when none came' })),
    error: Nullable(Type.String({ description: `why it failed: ${ATTEMPT_ERRORS}; instance_lost when interrupted` })),
    message: Nullable(
      Type.String({ description: 'what happened, in words, with the system’s code when there is one (ECONNREFUSED, CERT_HAS_EXPIRED, UND_ERR_HEADERS_OVERFLOW …); null unless it failed or was interrupted' }),
    ),
    durationMs: Nullable(Type.Integer()),
    startedAtMs: Type.Integer({ description: 'Unix milliseconds' }),
    finishedAtMs: Nullable(Type.Integer({ description: 'Unix milliseconds; null while in progress' })),
  },
  { $id: 'WebhookAttempt' },
);

/** One shape on both configurations (merchant and owner): the endpoint's circuit while it holds deliveries back. */
export const WebhookCircuitSchema = Type.Object(
  {
    openUntil: UnixSeconds('no attempt to the endpoint before this; deliveries due meanwhile stay pending, then go out'),
    consecutiveFailures: Type.Integer({ minimum: 1, description: 'failed attempts in a row; 5 open the circuit (30 s, doubling with each further failure, at most 10 min)' }),
  },
  { $id: 'WebhookCircuit' },
);

const Circuit = Type.Union([Type.Ref('WebhookCircuit'), Type.Null()], {
  description: "the open circuit after failures in a row; null while attempts go out. A success closes it, and so do a resume, a new URL and a merchant's re-send",
});

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
    circuit: Circuit,
  },
  { $id: 'WebhookConfiguration' },
);

export const WebhookDeliverySchema = Type.Object(
  {
    id: Type.String(),
    eventId: Type.String({ description: 'the event; also the webhook-id header, the same on every attempt' }),
    eventType: Type.String(),
    state: Type.String({ enum: ['pending', 'succeeded', 'dead'] }),
    attempts: Type.Integer({ description: 'attempts started so far, including one in progress or cut off by a crash (see …/attempts)' }),
    nextAttemptAt: Nullable(UnixSeconds('when the next attempt is due, rounded up to the second: its schedule, or the end of an open circuit when later; null unless pending, and while the webhook is paused or disabled (nothing is sent until it is enabled again)')),
    lastAttemptAt: Nullable(UnixSeconds('last attempt')),
    lastStatus: Nullable(Type.Integer({ description: 'HTTP status of the last answer; null when none came' })),
    lastError: Nullable(Type.String({ description: `why the last attempt failed (its message is on …/attempts): ${ATTEMPT_ERRORS}` })),
    lastDurationMs: Nullable(Type.Integer()),
    deliveredAt: Nullable(UnixSeconds('the last successful attempt')),
    createdAt: UnixSeconds('creation'),
  },
  { $id: 'WebhookDelivery' },
);

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
    previousSecretExpiresAt: Nullable(UnixSeconds('until when the secret replaced by the last rotation (POST …/rotate-secret) still signs; null when none does')),
    circuit: Circuit,
  },
  { $id: 'OwnerWebhookConfiguration' },
);

export const EVENT_SCHEMAS = [
  EventSchema,
  OwnerEventSchema,
  WebhookAttemptSchema,
  WebhookCircuitSchema,
  WebhookConfigurationSchema,
  WebhookDeliverySchema,
  OwnerWebhookConfigurationSchema,
];
