// Emitting an event: one row in `events`, and one in the `webhook_deliveries` outbox when its account (a
// merchant, or an owner) has an enabled webhook — both in the caller's transaction, so an event exists
// exactly when its cause committed. The delivery worker sends outbox rows later, from any instance. Events
// of a pause have no delivery until the merchant resumes with `deliverMissed` or re-sends them
// (src/events/service.ts).
import type { Queryable } from '../platform/db/database.ts';
import { newId } from '../platform/ids.ts';
import { activeSpan, tracing, traceparentOf, type SpanRef } from '../platform/telemetry.ts';

/** What a merchant's webhook receives. */
export const MERCHANT_EVENT_TYPES = [
  'merchant.verified',
  'redemption.held',
  'redemption.captured',
  'redemption.released',
  'redemption.expired',
  'redemption.refunded',
  'voucher.revoked',
  'webhook.disabled',
] as const;

/**
 * What an owner's webhook receives: its agents' top-ups and retained intents reaching a final state, budget
 * alerts, and purchases above a mandate's approval threshold asking for, and getting, the owner's answer.
 */
export const OWNER_EVENT_TYPES = [
  'topup.settled',
  'topup.declined',
  'topup.expired',
  'topup.failed',
  'intent.completed',
  'intent.failed',
  'intent.cancelled',
  'budget.threshold',
  'purchase.approval_requested',
  'purchase.approved',
  'purchase.declined',
] as const;

/** Every type the gateway emits: the OpenAPI document's `webhooks`. */
export const EVENT_TYPES = [...MERCHANT_EVENT_TYPES, ...OWNER_EVENT_TYPES] as const;
/** A merchant's event type (the name predates owner events). */
export type EventType = (typeof MERCHANT_EVENT_TYPES)[number];
export type OwnerEventType = (typeof OWNER_EVENT_TYPES)[number];
export type AnyEventType = EventType | OwnerEventType;

/** The account an event belongs to; its envelope names it (`merchantId` or `ownerId`). */
export type EventAccount = { merchantId: string; ownerId?: never } | { ownerId: string; merchantId?: never };

export type EventEnvelope = {
  id: string;
  type: AnyEventType;
  createdAt: number;
  data: Record<string, unknown>;
} & EventAccount;

type EmittedEvent =
  | { merchantId: string; ownerId?: never; type: EventType }
  | { ownerId: string; merchantId?: never; type: OwnerEventType };

export type EventToEmit = EmittedEvent & {
  data: Record<string, unknown>;
  /**
   * The span of the request the event reports, when tracing: its delivery continues that trace. Absent, the
   * active span at the emit (a batch names each call's own, since the batch's span is not the request's).
   */
  trace?: SpanRef;
};
/** An owner's event, as a feature hands it to `emitEvents`. */
export type OwnerEventInput = Extract<EventToEmit, { ownerId: string }>;

export async function emitEvent(tx: Queryable, event: EventToEmit & { nowMs: number }): Promise<EventEnvelope> {
  const [envelope] = await emitEvents(tx, [event], event.nowMs);
  return envelope!;
}

/**
 * Emits events in one statement (one round trip, whatever their number): each event, and its outbox row
 * when its account has an enabled webhook, with the trace context its attempts continue.
 */
export async function emitEvents(tx: Queryable, events: readonly EventToEmit[], nowMs: number): Promise<EventEnvelope[]> {
  if (events.length === 0) return [];
  const createdAt = Math.floor(nowMs / 1000);
  // Event ids contain no '.', which Standard Webhooks reserves as the separator of the signed text.
  const envelopes = events.map((event) => {
    const account: EventAccount = event.ownerId !== undefined ? { ownerId: event.ownerId } : { merchantId: event.merchantId! };
    return { id: newId('evt'), type: event.type, createdAt, ...account, data: event.data } as EventEnvelope;
  });
  // Untraced, the array is empty: unnest pads a shorter array with NULLs, so no delivery has a trace context.
  const traceparents = tracing() ? events.map((event) => traceparentOf(event.trace ?? activeSpan()) ?? null) : [];
  await tx.query(
    `WITH e AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $9::text[])
         WITH ORDINALITY AS e(id, merchant_id, owner_id, type, payload, delivery_id, traceparent, position)
     ), event AS (
       INSERT INTO events (id, merchant_id, owner_id, type, payload, created_at_s)
       SELECT id, merchant_id, owner_id, type, payload, $7 FROM e ORDER BY position RETURNING id
     )
     INSERT INTO webhook_deliveries (id, event_id, merchant_id, owner_id, state, next_attempt_at_ms, created_at_s, traceparent)
     SELECT e.delivery_id, event.id, e.merchant_id, e.owner_id, 'pending', $8, $7, e.traceparent
       FROM event JOIN e ON e.id = event.id
       JOIN webhook_endpoints w ON w.account_id = COALESCE(e.merchant_id, e.owner_id) AND w.enabled
      ORDER BY e.position`,
    [
      envelopes.map((e) => e.id),
      events.map((e) => e.merchantId ?? null),
      events.map((e) => e.ownerId ?? null),
      events.map((e) => e.type),
      envelopes.map((e) => JSON.stringify(e)),
      events.map(() => newId('whd')),
      createdAt,
      nowMs,
      traceparents,
    ],
  );
  return envelopes;
}
