// The event catalogue as the OpenAPI 3.1 document shows it (top-level `webhooks`): one entry per event
// type, with the envelope a merchant's endpoint receives, the Standard Webhooks headers, and what counts as
// delivered. The payload bytes are exactly the `events.payload` the outbox stored (src/events/outbox.ts).
import { Type } from '@sinclair/typebox';
import { EVENT_TYPES, type EventType } from './outbox.ts';
import { RETRY_SCHEDULE_S } from './webhook-sender.ts';
import { AUTO_DISABLE_AFTER_S } from './worker.ts';

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** The `data` of `webhook.disabled`: why the gateway stopped delivering to the endpoint. */
const WEBHOOK_DISABLED_DATA = {
  type: 'object',
  required: ['reason', 'failingSince', 'consecutiveFailures'],
  additionalProperties: false,
  properties: {
    reason: { type: 'string', const: 'failing' },
    failingSince: { type: 'integer', description: 'the first failed attempt of the run (Unix seconds)' },
    consecutiveFailures: { type: 'integer' },
  },
};

const EVENTS: Record<EventType, { summary: string; dataMember: 'merchant' | 'redemption' | 'webhook'; schema: string | object }> = {
  'merchant.verified': {
    summary: "The merchant's domain was verified (its DNS TXT record was found)",
    dataMember: 'merchant',
    schema: 'Merchant',
  },
  'redemption.held': { summary: 'An agent took a hold on one of your offers', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.captured': { summary: 'A hold was captured (you are paid)', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.released': { summary: 'A hold was released back to the agent', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.expired': { summary: 'A hold expired before it was captured', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.refunded': { summary: 'Captured credit was refunded to the agent (the last of `refunds` is this one)', dataMember: 'redemption', schema: 'Redemption' },
  'webhook.disabled': {
    summary: `The gateway disabled the webhook after every attempt failed for ${AUTO_DISABLE_AFTER_S / 86_400} days (listed by GET …/events; not delivered, the webhook being off)`,
    dataMember: 'webhook',
    schema: WEBHOOK_DISABLED_DATA,
  },
};

const HEADERS = [
  ['webhook-id', 'The event id; the same on every attempt of this event, so use it to drop duplicates.'],
  ['webhook-timestamp', 'Unix seconds of this attempt; refuse messages far from your clock (the reference libraries allow 5 minutes).'],
  ['webhook-signature', 'Space-separated `v1,<base64 HMAC-SHA256>` of `{webhook-id}.{webhook-timestamp}.{body}` under your webhook secret (Standard Webhooks v1).'],
] as const;

/** "5 s, 5 min, 30 min, …": the waits after each failed attempt (the first attempt is immediate). */
function retryWaits(): string {
  return RETRY_SCHEDULE_S.slice(1)
    .map((s) => (s < 60 ? `${s} s` : s < 3600 ? `${s / 60} min` : `${s / 3600} h`))
    .join(', ');
}

function envelope(type: EventType) {
  const { dataMember, schema } = EVENTS[type];
  return {
    type: 'object',
    required: ['id', 'type', 'createdAt', 'merchantId', 'data'],
    additionalProperties: false,
    properties: {
      id: { type: 'string', description: 'event id (also the webhook-id header)' },
      type: { type: 'string', const: type },
      createdAt: { type: 'integer', description: 'when the event happened (Unix seconds)' },
      merchantId: { type: 'string' },
      data: { type: 'object', required: [dataMember], additionalProperties: false, properties: { [dataMember]: typeof schema === 'string' ? ref(schema) : schema } },
    },
  };
}

/** The OpenAPI 3.1 `webhooks` object: what the gateway POSTs to a merchant's webhook URL. */
export function webhooksDocument(): Record<string, unknown> {
  return Object.fromEntries(
    EVENT_TYPES.map((type) => [
      type,
      {
        post: {
          // A stable name per event for generated receivers: redemption.held → onRedemptionHeld.
          operationId: `on${type.split(/[._]/).map((word) => word[0]!.toUpperCase() + word.slice(1)).join('')}`,
          tags: ['webhooks'],
          summary: EVENTS[type].summary,
          description:
            `Sent to the merchant's webhook URL as \`${type}\`, signed with Standard Webhooks. Only a 2xx answer counts as ` +
            `delivered (redirects are not followed). The first attempt is immediate; after a failure the next comes ` +
            `${retryWaits()} later (each wait counted from the end of the failed attempt); after ${RETRY_SCHEDULE_S.length} ` +
            'failed attempts the delivery is dead-lettered and can be re-sent. No order is guaranteed between events: ' +
            'attempts run concurrently and retries overtake. During a secret rotation the signature header carries one ' +
            '`v1,` signature per secret.',
          // The receiver authenticates the gateway by the Standard Webhooks signature, not by a credential.
          security: [],
          parameters: HEADERS.map(([name, description]) => ({ name, in: 'header', required: true, description, schema: { type: 'string' } })),
          requestBody: { required: true, content: { 'application/json': { schema: envelope(type) } } },
          responses: { '2XX': { description: 'Delivered. Any other status, a timeout or a connection failure is retried.' } },
        },
      },
    ]),
  );
}
