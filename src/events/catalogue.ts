// The event catalogue as the OpenAPI 3.1 document shows it (top-level `webhooks`): one entry per event
// type, with the envelope a merchant's (or an owner's) endpoint receives, the Standard Webhooks headers,
// and what counts as delivered. The payload bytes are exactly the `events.payload` the outbox stored
// (src/events/outbox.ts).
import { EVENT_TYPES, UNDELIVERED_EVENT_TYPES, type AnyEventType } from './outbox.ts';
import { RETRY_SCHEDULE_S } from './webhook-sender.ts';
import { AUTO_DISABLE_AFTER_S, CIRCUIT_FAILURES_THRESHOLD, CIRCUIT_OPEN_BASE_MS, CIRCUIT_OPEN_MAX_MS } from './worker.ts';

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

interface EventEntry {
  summary: string;
  /** Whose webhook receives it; the envelope names that account (`merchantId` or `ownerId`). */
  account: 'merchant' | 'owner';
  /** `data` holds one member (a resource by schema name, or a schema); or `data` is the schema given. */
  dataMember?: 'merchant' | 'redemption' | 'revocation' | 'webhook' | 'topup' | 'intent' | 'purchase';
  schema: string | object;
  /** What a receiver should know beyond how every event is delivered (the end of its webhook's description). */
  note?: string;
}

/** The `data` of `budget.threshold`: which agent, which threshold, and the budget's period as it stands. */
const BUDGET_THRESHOLD_DATA = {
  type: 'object',
  required: ['agentId', 'thresholdPct', 'budget'],
  additionalProperties: false,
  properties: {
    agentId: { type: 'string' },
    thresholdPct: { type: 'integer', description: "the mandate's alert threshold crossed (percent of the budget's limit)" },
    budget: {
      type: 'object',
      required: ['id', 'limitUc', 'period', 'spentUc', 'remainingUc', 'periodStart', 'resetsAt'],
      additionalProperties: false,
      properties: {
        id: { type: 'string' },
        limitUc: ref('Microcredits'),
        period: { type: 'string', enum: ['day', 'week', 'month', 'total'] },
        merchantId: { type: 'string' },
        category: { type: 'string' },
        serviceId: { type: 'string' },
        spentUc: ref('Microcredits'),
        remainingUc: ref('Microcredits'),
        periodStart: { type: 'integer', description: 'the period the spend counts in (Unix seconds; 0 for total)' },
        resetsAt: { type: ['integer', 'null'], description: 'when the next period starts (Unix seconds); null for total' },
      },
    },
  },
};

/** The `data` of `purchase.declined`: the approval, and whether the owner declined it or never answered. */
const PURCHASE_DECLINED_DATA = {
  type: 'object',
  required: ['purchase', 'reason'],
  additionalProperties: false,
  properties: {
    purchase: ref('PurchaseApproval'),
    reason: {
      type: 'string',
      enum: ['declined', 'expired'],
      description: '`declined`: the owner declined it (or withdrew an approval not used yet); `expired`: the owner did not answer in time',
    },
  },
};

const topup = (summary: string): EventEntry => ({ summary, account: 'owner', dataMember: 'topup', schema: 'Topup' });
const intent = (summary: string): EventEntry => ({ summary, account: 'owner', dataMember: 'intent', schema: 'IntentStatus' });

const EVENTS: Record<AnyEventType, EventEntry> = {
  'merchant.verified': {
    summary: "The merchant's domain was verified (its DNS TXT record was found)",
    account: 'merchant',
    dataMember: 'merchant',
    schema: 'Merchant',
    note:
      'It happens before the merchant can have a webhook (a webhook URL needs the verified domain), so it is recorded and ' +
      'listed by GET /v1/merchants/{id}/events, and reaches a webhook only when re-sent (POST /v1/merchants/{id}/events/{eventId}/resend).',
  },
  'redemption.held': { summary: 'An agent took a hold on one of your offers', account: 'merchant', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.captured': { summary: 'A hold was captured (you are paid)', account: 'merchant', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.released': { summary: 'A hold was released back to the agent', account: 'merchant', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.expired': { summary: 'A hold expired before it was captured', account: 'merchant', dataMember: 'redemption', schema: 'Redemption' },
  'redemption.refunded': { summary: 'Captured credit was refunded to the agent (the last of `refunds` is this one)', account: 'merchant', dataMember: 'redemption', schema: 'Redemption' },
  'voucher.revoked': {
    summary:
      "The owner froze an agent and released its outstanding holds, or retired a delegate: the vouchers of `revocation.holdIds` (their `jti`) are revoked. " +
      'Refuse them from now on; a capture of one answers 409 voucher_revoked. One event per freeze or retirement lists all of your holds it released; ' +
      'GET /v1/merchants/{id}/revocations lists the same holds for a merchant without a webhook',
    account: 'merchant',
    dataMember: 'revocation',
    schema: 'VoucherRevocation',
  },
  'webhook.disabled': {
    summary: `The gateway disabled the webhook after every attempt failed for ${AUTO_DISABLE_AFTER_S / 86_400} days (listed by GET …/events; not delivered, the webhook being off)`,
    account: 'merchant',
    dataMember: 'webhook',
    schema: WEBHOOK_DISABLED_DATA,
  },
  'topup.settled': topup("A top-up of one of your agents settled: its lot is credited (`lotId`), and a bound intent runs next"),
  'topup.declined': topup('A top-up of one of your agents was declined; its retained intent, if any, is cancelled'),
  'topup.expired': topup(
    'A top-up of one of your agents expired unapproved, or was closed because a freeze or retirement cancelled the retained intent it was opened for; its retained intent, if any, is cancelled',
  ),
  'topup.failed': topup('The provider reported the payment of a top-up failed; its retained intent, if any, is cancelled'),
  'intent.completed': intent("A retained intent of one of your agents ran and was charged once: its `result` and `receipt`"),
  'intent.failed': intent('A retained intent of one of your agents ran and failed definitively (`error`); nothing was charged'),
  'intent.cancelled': intent('A retained intent of one of your agents was closed without running (`cancellationReason`); nothing was charged'),
  'budget.threshold': {
    summary: "A budget of one of your agents' mandates crossed one of its alert thresholds (80% and 100% unless the mandate says otherwise), once per threshold and period (again after the owner changes the budget or the thresholds, for those its spend has not reached yet)",
    account: 'owner',
    schema: BUDGET_THRESHOLD_DATA,
  },
  'purchase.approval_requested': {
    summary: "A purchase of one of your agents is above its mandate's approval threshold and waits for your answer at `purchase.approvalUrl`; nothing is taken until then",
    account: 'owner',
    dataMember: 'purchase',
    schema: 'PurchaseApproval',
  },
  'purchase.approved': {
    summary: "You approved a purchase of one of your agents: the agent's retry of the same request (same Idempotency-Key) takes it, once, before `purchase.expiresAt`",
    account: 'owner',
    dataMember: 'purchase',
    schema: 'PurchaseApproval',
  },
  'purchase.declined': {
    summary: "A purchase of one of your agents will not be made: you declined it (`reason: declined`), or did not answer in time (`reason: expired`); nothing was taken",
    account: 'owner',
    schema: PURCHASE_DECLINED_DATA,
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

function envelope(type: AnyEventType) {
  const { dataMember, schema, account } = EVENTS[type];
  const accountMember = account === 'merchant' ? 'merchantId' : 'ownerId';
  return {
    type: 'object',
    required: ['id', 'type', 'createdAt', accountMember, 'data'],
    additionalProperties: false,
    properties: {
      id: { type: 'string', description: 'event id (also the webhook-id header)' },
      type: { type: 'string', const: type },
      createdAt: { type: 'integer', description: 'when the event happened (Unix seconds)' },
      [accountMember]: { type: 'string' },
      data:
        dataMember === undefined
          ? schema
          : { type: 'object', required: [dataMember], additionalProperties: false, properties: { [dataMember]: typeof schema === 'string' ? ref(schema) : schema } },
    },
  };
}

/** The OpenAPI 3.1 `webhooks` object: what the gateway POSTs to a merchant's or an owner's webhook URL. */
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
          description: UNDELIVERED_EVENT_TYPES.includes(type)
            ? `Never sent to a webhook, and never re-sent (409): the gateway records \`${type}\` as it turns the webhook off, so it is ` +
              'listed by GET /v1/merchants/{id}/events, with the body below, and the webhook configuration shows why (`disabledReason`).'
            : `Sent to the ${EVENTS[type].account === 'merchant' ? "merchant's webhook URL (PUT /v1/merchants/{id}/webhook)" : "owner's webhook URL (PUT /v1/owner/webhook)"} ` +
            `as \`${type}\`, signed with Standard Webhooks. Only a 2xx answer counts as ` +
            `delivered (redirects are not followed). The first attempt is immediate; after a failure the next comes ` +
            `${retryWaits()} later (each wait counted from the end of the failed attempt); after ${RETRY_SCHEDULE_S.length} ` +
            `failed attempts the delivery is dead-lettered and can be re-sent (${EVENTS[type].account === 'merchant' ? 'POST /v1/merchants/{id}/webhook/deliveries/{deliveryId}/resend' : 'POST /v1/owner/webhook/deliveries/{deliveryId}/resend'}). ` +
            `${CIRCUIT_FAILURES_THRESHOLD} failed attempts in a row to the endpoint, whatever their events, pause it: no attempt for ` +
            `${CIRCUIT_OPEN_BASE_MS / 1000} s, doubling with each further failure up to ${CIRCUIT_OPEN_MAX_MS / 60_000} min, so an attempt may come ` +
            'later than that schedule (the webhook configuration shows the pause; a success, a re-send or a new URL ends it). No order is guaranteed between events: ' +
            'attempts run concurrently and retries overtake. During a secret rotation the signature header carries one ' +
            `\`v1,\` signature per secret.${EVENTS[type].note === undefined ? '' : ` ${EVENTS[type].note}`}`,
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
