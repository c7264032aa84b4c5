// SQL of webhook endpoints and the delivery outbox. Nothing but queries.
import type { Queryable } from '../platform/db/database.ts';

export interface EndpointRow {
  merchant_id: string;
  url: string;
  enabled: boolean;
  secret_sealed: string;
  created_at_s: bigint;
  updated_at_s: bigint;
}

export type DeliveryState = 'pending' | 'succeeded' | 'dead';

export interface DeliveryRow {
  id: string;
  event_id: string;
  event_type: string;
  merchant_id: string;
  state: DeliveryState;
  attempts: number;
  next_attempt_at_ms: bigint;
  locked_until_ms: bigint;
  last_status: number | null;
  last_error: string | null;
  last_attempt_at_s: bigint | null;
  last_duration_ms: number | null;
  created_at_s: bigint;
  delivered_at_s: bigint | null;
}

/** A delivery a worker has claimed, with everything it needs to send it. */
export interface ClaimedDeliveryRow {
  id: string;
  event_id: string;
  merchant_id: string;
  attempts: number;
  payload: string;
  url: string;
  secret_sealed: string;
}

export async function findEndpoint(db: Queryable, merchantId: string): Promise<EndpointRow | undefined> {
  const { rows } = await db.query<EndpointRow>('SELECT * FROM webhook_endpoints WHERE merchant_id = $1', [merchantId]);
  return rows[0];
}

export async function endpointUrls(db: Queryable, merchantIds: readonly string[]): Promise<Array<{ merchant_id: string; url: string }>> {
  if (merchantIds.length === 0) return [];
  const { rows } = await db.query<{ merchant_id: string; url: string }>(
    'SELECT merchant_id, url FROM webhook_endpoints WHERE merchant_id IN (SELECT jsonb_array_elements_text($1::jsonb))',
    [JSON.stringify(merchantIds)],
  );
  return rows;
}

export async function upsertEndpoint(db: Queryable, endpoint: EndpointRow): Promise<EndpointRow> {
  const { rows } = await db.query<EndpointRow>(
    `INSERT INTO webhook_endpoints (merchant_id, url, enabled, secret_sealed, created_at_s, updated_at_s)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (merchant_id) DO UPDATE
       SET url = EXCLUDED.url, enabled = EXCLUDED.enabled, secret_sealed = EXCLUDED.secret_sealed, updated_at_s = EXCLUDED.updated_at_s
     RETURNING *`,
    [endpoint.merchant_id, endpoint.url, endpoint.enabled, endpoint.secret_sealed, endpoint.created_at_s, endpoint.updated_at_s],
  );
  return rows[0]!;
}

const DELIVERY_COLUMNS = `d.id, d.event_id, ev.type AS event_type, d.merchant_id, d.state, d.attempts, d.next_attempt_at_ms,
  d.locked_until_ms, d.last_status, d.last_error, d.last_attempt_at_s, d.last_duration_ms, d.created_at_s, d.delivered_at_s`;

/** Most recent first. */
export async function listDeliveries(db: Queryable, merchantId: string, limit: number, startingAfter?: string): Promise<DeliveryRow[]> {
  const { rows } = await db.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN events ev ON ev.id = d.event_id
      WHERE d.merchant_id = $1
        AND ($2::text IS NULL OR d.seq < (SELECT seq FROM webhook_deliveries WHERE id = $2 AND merchant_id = $1))
      ORDER BY d.seq DESC LIMIT $3`,
    [merchantId, startingAfter ?? null, limit],
  );
  return rows;
}

export async function findDelivery(db: Queryable, merchantId: string, deliveryId: string, lock = false): Promise<DeliveryRow | undefined> {
  const { rows } = await db.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN events ev ON ev.id = d.event_id
      WHERE d.id = $1 AND d.merchant_id = $2${lock ? ' FOR UPDATE OF d' : ''}`,
    [deliveryId, merchantId],
  );
  return rows[0];
}

/** Makes the delivery due now; a finished one (succeeded or dead) becomes pending again. */
export async function scheduleNow(db: Queryable, deliveryId: string, nowMs: number): Promise<void> {
  await db.query(`UPDATE webhook_deliveries SET state = 'pending', next_attempt_at_ms = $2 WHERE id = $1`, [deliveryId, nowMs]);
}

/**
 * Claims up to `limit` due deliveries of enabled endpoints for this worker until `lockedUntilMs`. One
 * statement: rows another worker is claiming right now are skipped (SKIP LOCKED), and a row claimed and
 * committed meanwhile is re-checked against `locked_until_ms` and left alone, so each row has one owner.
 */
export async function claimDueDeliveries(
  db: Queryable,
  claim: { nowMs: number; limit: number; lockedUntilMs: number; token: string },
): Promise<ClaimedDeliveryRow[]> {
  const { rows } = await db.query<ClaimedDeliveryRow>(
    `WITH due AS (
       SELECT d.id FROM webhook_deliveries d
         JOIN webhook_endpoints e ON e.merchant_id = d.merchant_id
        WHERE d.state = 'pending' AND d.next_attempt_at_ms <= $1 AND d.locked_until_ms <= $1 AND e.enabled
        ORDER BY d.next_attempt_at_ms
        LIMIT $2
        FOR UPDATE OF d SKIP LOCKED
     )
     UPDATE webhook_deliveries w SET locked_until_ms = $3, claim_token = $4
       FROM due, events ev, webhook_endpoints e
      WHERE w.id = due.id AND ev.id = w.event_id AND e.merchant_id = w.merchant_id
     RETURNING w.id, w.event_id, w.merchant_id, w.attempts, ev.payload, e.url, e.secret_sealed`,
    [claim.nowMs, claim.limit, claim.lockedUntilMs, claim.token],
  );
  return rows;
}

export interface AttemptRecord {
  id: string;
  token: string;
  state: DeliveryState;
  attempts: number;
  nextAttemptAtMs: number;
  status: number | null;
  error: string | null;
  attemptAtS: number;
  durationMs: number;
  deliveredAtS: number | null;
}

/** Records one attempt and releases the claim; false when the claim was lost (lease over, taken over). */
export async function recordAttempt(db: Queryable, record: AttemptRecord): Promise<boolean> {
  const result = await db.query(
    `UPDATE webhook_deliveries
        SET state = $3, attempts = $4, next_attempt_at_ms = $5, last_status = $6, last_error = $7,
            last_attempt_at_s = $8, last_duration_ms = $9, delivered_at_s = COALESCE($10, delivered_at_s),
            locked_until_ms = 0, claim_token = NULL
      WHERE id = $1 AND claim_token = $2`,
    [
      record.id,
      record.token,
      record.state,
      record.attempts,
      record.nextAttemptAtMs,
      record.status,
      record.error,
      record.attemptAtS,
      record.durationMs,
      record.deliveredAtS,
    ],
  );
  return result.rowCount === 1;
}
