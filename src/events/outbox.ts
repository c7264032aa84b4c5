// Emitting an event: one row in `events`, and one in the `webhook_deliveries` outbox when the merchant
// has an enabled webhook — both in the caller's transaction, so an event exists exactly when its cause
// committed. The delivery worker sends outbox rows later, from any instance. Events of a pause have no
// delivery until the merchant resumes with `deliverMissed` or re-sends them (src/events/service.ts).
import type { Queryable } from '../platform/db/database.ts';
import { newId } from '../platform/ids.ts';

export const EVENT_TYPES = [
  'merchant.verified',
  'redemption.held',
  'redemption.captured',
  'redemption.released',
  'redemption.expired',
  'webhook.disabled',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export interface EventEnvelope {
  id: string;
  type: EventType;
  createdAt: number;
  merchantId: string;
  data: Record<string, unknown>;
}

export async function emitEvent(
  tx: Queryable,
  event: { merchantId: string; type: EventType; data: Record<string, unknown>; nowMs: number },
): Promise<EventEnvelope> {
  // Event ids contain no '.', which Standard Webhooks reserves as the separator of the signed text.
  const envelope: EventEnvelope = {
    id: newId('evt'),
    type: event.type,
    createdAt: Math.floor(event.nowMs / 1000),
    merchantId: event.merchantId,
    data: event.data,
  };
  // One statement (one round trip): the event, and its outbox row when the merchant has an enabled webhook.
  await tx.query(
    `WITH event AS (
       INSERT INTO events (id, merchant_id, type, payload, created_at_s) VALUES ($1, $2, $3, $4, $5) RETURNING id
     )
     INSERT INTO webhook_deliveries (id, event_id, merchant_id, state, next_attempt_at_ms, created_at_s)
     SELECT $6, event.id, $2, 'pending', $7, $5 FROM event JOIN webhook_endpoints w ON w.merchant_id = $2 AND w.enabled`,
    [envelope.id, envelope.merchantId, envelope.type, JSON.stringify(envelope), envelope.createdAt, newId('whd'), event.nowMs],
  );
  return envelope;
}
