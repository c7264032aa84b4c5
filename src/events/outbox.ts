// Emitting an event: one row in `events`, and one in the `webhook_deliveries` outbox when its account (a
// merchant, or an owner) has an enabled webhook and its type is delivered at all (UNDELIVERED_EVENT_TYPES) —
// both in the caller's transaction, so an event exists exactly when its cause committed. The delivery worker
// sends outbox rows later, from any instance. Events of a pause have no delivery until the merchant resumes
// with `deliverMissed` or re-sends them (src/events/service.ts).
import type { Queryable } from '../platform/db/database.ts';
import { newId } from '../platform/ids.ts';
import { activeSpan, traceContextOf, tracing, type SpanRef } from '../platform/telemetry.ts';

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

/**
 * Types recorded and listed but never delivered: `webhook.disabled` reports that the webhook is off. Every
 * path that queues a delivery honours it: the emit (`eventsPart`), a resume with deliverMissed
 * (`queueEventsSince`) and the re-sends (src/events/service.ts).
 */
export const UNDELIVERED_EVENT_TYPES: readonly string[] = ['webhook.disabled'] satisfies EventType[];

/**
 * Types whose deliveries are claimed before the other due ones of their endpoint (migration 0038): a merchant that
 * verifies vouchers offline must hear of a revocation before anything else, and a freeze that releases many holds
 * writes a `redemption.released` per hold first (it reached the merchant after all of them, found from outside).
 */
export const URGENT_EVENT_TYPES: readonly string[] = ['voucher.revoked'] satisfies EventType[];

/** Whether an event of this type may be delivered to a webhook (see UNDELIVERED_EVENT_TYPES). */
export function isDeliverable(type: string): boolean {
  return !UNDELIVERED_EVENT_TYPES.includes(type);
}

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
 * The trace context a delivery keeps, in `webhook_deliveries.traceparent`: the W3C `traceparent`, then, when the trace
 * carries vendor state, one space and the `tracestate` as it would be sent. A traceparent holds no space, so the first
 * space parts the two, and a row of the older release (a traceparent alone) reads as it did. The tracestate was
 * dropped before, so a merchant never received the caller's vendor state (found from outside). An instance of the
 * older release that claims a row with both starts a trace of its own for it, as for a row with no context.
 */
function storedTraceContext(span: SpanRef | undefined): string | undefined {
  const context = traceContextOf(span);
  if (!context) return undefined;
  return context.tracestate === undefined ? context.traceparent : `${context.traceparent} ${context.tracestate}`;
}

/** The W3C carrier (`traceparent`, and `tracestate` when kept) of a delivery's stored trace context (storedTraceContext). */
export function deliveryTraceCarrier(stored: string | null): { traceparent: string; tracestate?: string } | undefined {
  if (stored === null) return undefined;
  const space = stored.indexOf(' ');
  return space < 0 ? { traceparent: stored } : { traceparent: stored.slice(0, space), tracestate: stored.slice(space + 1) };
}

/**
 * Emits events in one statement (one round trip, whatever their number): each event, and its outbox row
 * when its account has an enabled webhook, with the trace context its attempts continue.
 */
export async function emitEvents(tx: Queryable, events: readonly EventToEmit[], nowMs: number): Promise<EventEnvelope[]> {
  if (events.length === 0) return [];
  const write = eventsPart(events, nowMs, 1);
  await tx.query(`WITH ${write.sql} SELECT count(*) FROM event_row`, write.params);
  return write.envelopes;
}

/** Events ready to be written by a statement: their envelopes, and the statement's part that writes them. */
export interface EventsWrite {
  envelopes: EventEnvelope[];
  /** CTE parts: `event_row` (one row per event written) and `event_delivery` (its outbox rows). */
  sql: string;
  params: unknown[];
}

/**
 * The part of a statement that emits events, for a statement with more to write in the same round trip (a
 * hold pass writes its holds and their events at once, src/ledger/store.ts): each event, and its outbox row
 * when its account has an enabled webhook, with the trace context its attempts continue. Its parameters are
 * numbered from `$firstParameter`.
 */
export function eventsPart(events: readonly EventToEmit[], nowMs: number, firstParameter: number): EventsWrite {
  const createdAt = Math.floor(nowMs / 1000);
  // Event ids contain no '.', which Standard Webhooks reserves as the separator of the signed text.
  const envelopes = events.map((event) => {
    const account: EventAccount = event.ownerId !== undefined ? { ownerId: event.ownerId } : { merchantId: event.merchantId! };
    return { id: newId('evt'), type: event.type, createdAt, ...account, data: event.data } as EventEnvelope;
  });
  // Untraced, the array is empty: unnest pads a shorter array with NULLs, so no delivery has a trace context.
  const traceContexts = tracing() ? events.map((event) => storedTraceContext(event.trace ?? activeSpan()) ?? null) : [];
  const p = (n: number) => `$${firstParameter + n - 1}`;
  return {
    envelopes,
    sql: `event_in AS (
       SELECT * FROM unnest(${p(1)}::text[], ${p(2)}::text[], ${p(3)}::text[], ${p(4)}::text[], ${p(5)}::text[], ${p(6)}::text[], ${p(9)}::text[])
         WITH ORDINALITY AS e(id, merchant_id, owner_id, type, payload, delivery_id, traceparent, position)
     ), event_row AS (
       INSERT INTO events (id, merchant_id, owner_id, type, payload, created_at_s)
       SELECT id, merchant_id, owner_id, type, payload, ${p(7)}::bigint FROM event_in ORDER BY position RETURNING id
     ), event_delivery AS (
       INSERT INTO webhook_deliveries (id, event_id, merchant_id, owner_id, state, next_attempt_at_ms, created_at_s, traceparent, urgent)
       SELECT e.delivery_id, event_row.id, e.merchant_id, e.owner_id, 'pending', ${p(8)}::bigint, ${p(7)}::bigint, e.traceparent,
              e.type IN (${URGENT_EVENT_TYPES.map((type) => `'${type}'`).join(', ')})
         FROM event_row JOIN event_in e ON e.id = event_row.id
         JOIN webhook_endpoints w ON w.account_id = COALESCE(e.merchant_id, e.owner_id) AND w.enabled
        WHERE e.delivery_id IS NOT NULL
        ORDER BY e.position
       RETURNING 1
     )`,
    params: [
      envelopes.map((e) => e.id),
      events.map((e) => e.merchantId ?? null),
      events.map((e) => e.ownerId ?? null),
      events.map((e) => e.type),
      envelopes.map((e) => JSON.stringify(e)),
      // An undelivered type gets no delivery id, hence no outbox row.
      events.map((e) => (isDeliverable(e.type) ? newId('whd') : null)),
      createdAt,
      nowMs,
      traceContexts,
    ],
  };
}
