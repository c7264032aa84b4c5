// Emitting an event: one row in `events`, and one in the `webhook_deliveries` outbox when its account (a
// merchant, or an owner) has an enabled webhook — both in the caller's transaction, so an event exists
// exactly when its cause committed. The delivery worker sends outbox rows later, from any instance. Events
// of a pause have no delivery until the merchant resumes with `deliverMissed` or re-sends them
// (src/events/service.ts).
import type { Queryable } from '../platform/db/database.ts';
import { newId } from '../platform/ids.ts';

/** What a merchant's webhook receives. */
export const MERCHANT_EVENT_TYPES = [
  'merchant.verified',
  'redemption.held',
  'redemption.captured',
  'redemption.released',
  'redemption.expired',
  'redemption.refunded',
  'webhook.disabled',
] as const;

/** What an owner's webhook receives: its agents' top-ups and retained intents reaching a final state. */
export const OWNER_EVENT_TYPES = [
  'topup.settled',
  'topup.declined',
  'topup.expired',
  'topup.failed',
  'intent.completed',
  'intent.failed',
  'intent.cancelled',
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

export async function emitEvent(tx: Queryable, event: EmittedEvent & { data: Record<string, unknown>; nowMs: number }): Promise<EventEnvelope> {
  // Event ids contain no '.', which Standard Webhooks reserves as the separator of the signed text.
  const id = newId('evt');
  const createdAt = Math.floor(event.nowMs / 1000);
  const account: EventAccount = event.ownerId !== undefined ? { ownerId: event.ownerId } : { merchantId: event.merchantId! };
  const envelope = { id, type: event.type, createdAt, ...account, data: event.data } as EventEnvelope;
  // One statement (one round trip): the event, and its outbox row when the account has an enabled webhook.
  await tx.query(
    `WITH event AS (
       INSERT INTO events (id, merchant_id, owner_id, type, payload, created_at_s) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id
     )
     INSERT INTO webhook_deliveries (id, event_id, merchant_id, owner_id, state, next_attempt_at_ms, created_at_s)
     SELECT $7, event.id, $2, $3, 'pending', $8, $6 FROM event JOIN webhook_endpoints w ON w.account_id = COALESCE($2::text, $3::text) AND w.enabled`,
    [id, event.merchantId ?? null, event.ownerId ?? null, event.type, JSON.stringify(envelope), createdAt, newId('whd'), event.nowMs],
  );
  return envelope;
}
