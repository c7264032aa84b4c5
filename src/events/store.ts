// SQL of webhook endpoints and the delivery outbox. Nothing but queries; every statement that locks a row
// takes a Tx.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { refuseUnknownCursor } from '../platform/db/paging.ts';
import { UNDELIVERED_EVENT_TYPES, URGENT_EVENT_TYPES } from './outbox.ts';

export interface EndpointRow {
  /** The merchant's id or the owner's id: the endpoint's key (exactly one of merchant_id and owner_id is set). */
  account_id: string;
  merchant_id: string | null;
  owner_id: string | null;
  url: string;
  enabled: boolean;
  secret_sealed: string;
  created_at_s: bigint;
  updated_at_s: bigint;
  previous_secret_sealed: string | null;
  previous_secret_expires_at_s: bigint | null;
  paused_at_s: bigint | null;
  disabled_reason: 'merchant' | 'failing' | null;
  consecutive_failures: number;
  failing_since_s: bigint | null;
  circuit_open_until_ms: bigint;
  /** The receiver at this URL has answered 2xx at least once. */
  proven: boolean;
  last_failed_at_ms: bigint;
}

export type DeliveryState = 'pending' | 'succeeded' | 'dead';

export interface DeliveryRow {
  id: string;
  event_id: string;
  event_type: string;
  /** The endpoint's key: the merchant's or the owner's id. */
  account_id: string;
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
  /** Until when its endpoint's circuit holds it back: the endpoint's `circuit_open_until_ms` while enabled, else 0. */
  circuit_open_until_ms: bigint;
  /** Whether its endpoint takes attempts now (null once an owner deleted it). */
  endpoint_enabled: boolean | null;
}

/** A delivery a worker has claimed, with everything it needs to send it. */
export interface ClaimedDeliveryRow {
  id: string;
  event_id: string;
  /** The endpoint's key: the merchant's or the owner's id (also the associated data its secret is sealed with). */
  account_id: string;
  merchant_id: string | null;
  owner_id: string | null;
  attempts: number;
  payload: string;
  url: string;
  secret_sealed: string;
  /** The secret a rotation replaced, while its overlap lasts; deliveries are signed with both. */
  previous_secret_sealed: string | null;
  /** When this attempt was due (the event's emission for a first attempt, the retry's time for a retry). */
  due_at_ms: bigint;
  /** When this attempt started: the claim (its record's `started_at_ms`). The circuit judges its failure by it. */
  started_at_ms: bigint;
  /** The W3C trace context of the request whose change the event reports (NULL when it was not traced). */
  traceparent: string | null;
  /** Whether the endpoint's last attempt failed (a run of failures is under way): its attempts take the failing share. */
  failing: boolean;
  /** Whether the endpoint's receiver has answered 2xx at this URL: until it has, one attempt at a time. */
  proven: boolean;
}

export interface EventRow {
  id: string;
  type: string;
  payload: string;
  created_at_s: bigint;
}

export type AttemptOutcome = 'in_progress' | 'succeeded' | 'failed' | 'interrupted';

export interface AttemptRow {
  id: string;
  delivery_id: string;
  attempt: number;
  outcome: AttemptOutcome;
  status: number | null;
  error: string | null;
  message: string | null;
  duration_ms: number | null;
  started_at_ms: bigint;
  finished_at_ms: bigint | null;
}

/** Endpoint functions take the account id: a merchant's id, or an owner's id. */
export async function findEndpoint(db: Queryable, accountId: string): Promise<EndpointRow | undefined> {
  const { rows } = await db.query<EndpointRow>('SELECT * FROM webhook_endpoints WHERE account_id = $1', [accountId]);
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

/** The endpoint, locked for the rest of the transaction (a change to it). */
export async function lockEndpoint(tx: Tx, accountId: string): Promise<EndpointRow | undefined> {
  const { rows } = await tx.query<EndpointRow>('SELECT * FROM webhook_endpoints WHERE account_id = $1 FOR UPDATE', [accountId]);
  return rows[0];
}

/** Exactly one of `merchant_id` and `owner_id`. */
export async function insertEndpoint(
  db: Queryable,
  endpoint: { merchant_id?: string; owner_id?: string; url: string; enabled: boolean; secret_sealed: string; now_s: bigint },
): Promise<EndpointRow> {
  const { rows } = await db.query<EndpointRow>(
    `INSERT INTO webhook_endpoints (merchant_id, owner_id, url, enabled, secret_sealed, created_at_s, updated_at_s, paused_at_s, disabled_reason)
     VALUES ($1, $6, $2, $3::boolean, $4, $5::bigint, $5::bigint, CASE WHEN $3::boolean THEN NULL ELSE $5::bigint END, CASE WHEN $3::boolean THEN NULL ELSE 'merchant' END)
     RETURNING *`,
    [endpoint.merchant_id ?? null, endpoint.url, endpoint.enabled, endpoint.secret_sealed, endpoint.now_s, endpoint.owner_id ?? null],
  );
  return rows[0]!;
}

/**
 * Removes an owner's endpoint; its deliveries still pending end `dead` (`endpoint_deleted`), so a later
 * endpoint never receives them. One in flight loses its claim too: the attempt is recorded when it ends, but
 * not as the delivery's state (`recordAttempt`), which stays dead. False when there was none.
 */
export async function deleteOwnerEndpoint(db: Queryable, ownerId: string, nowS: number): Promise<boolean> {
  await db.query(
    `UPDATE webhook_deliveries SET state = 'dead', last_error = 'endpoint_deleted', last_attempt_at_s = COALESCE(last_attempt_at_s, $2),
            claim_token = NULL, locked_until_ms = 0
      WHERE owner_id = $1 AND state = 'pending'`,
    [ownerId, nowS],
  );
  const result = await db.query('DELETE FROM webhook_endpoints WHERE owner_id = $1', [ownerId]);
  return result.rowCount === 1;
}

/**
 * Changes what a merchant controls. Pausing records when; resuming clears the pause and the circuit (the
 * merchant says the receiver is back), and so does another URL (the failures were the old receiver's). `secret` replaces the signing secret; `previous` keeps the old one
 * signing until its expiry (null: it stops at once).
 */
export async function updateEndpoint(
  db: Queryable,
  accountId: string,
  change: {
    url?: string;
    enabled?: boolean;
    secret?: { sealed: string; previousSealed: string | null; previousExpiresAtS: bigint | null };
    disabledReason?: 'merchant' | 'failing';
    nowS: bigint;
  },
): Promise<EndpointRow> {
  const { rows } = await db.query<EndpointRow>(
    `UPDATE webhook_endpoints SET
        url = COALESCE($2, url),
        enabled = COALESCE($3::boolean, enabled),
        paused_at_s = CASE WHEN $3::boolean IS NULL THEN paused_at_s WHEN $3::boolean THEN NULL WHEN enabled THEN $8::bigint ELSE paused_at_s END,
        disabled_reason = CASE WHEN $3::boolean IS NULL THEN disabled_reason WHEN $3::boolean THEN NULL WHEN enabled THEN $7::text ELSE disabled_reason END,
        consecutive_failures = CASE WHEN ($3::boolean AND NOT enabled) OR $2 <> url THEN 0 ELSE consecutive_failures END,
        failing_since_s = CASE WHEN ($3::boolean AND NOT enabled) OR $2 <> url THEN NULL ELSE failing_since_s END,
        circuit_open_until_ms = CASE WHEN ($3::boolean AND NOT enabled) OR $2 <> url THEN 0 ELSE circuit_open_until_ms END,
        proven = CASE WHEN $2 <> url THEN false ELSE proven END,
        last_failed_at_ms = CASE WHEN $2 <> url THEN 0 ELSE last_failed_at_ms END,
        secret_sealed = COALESCE($4::text, secret_sealed),
        previous_secret_sealed = CASE WHEN $4::text IS NULL THEN previous_secret_sealed ELSE $5::text END,
        previous_secret_expires_at_s = CASE WHEN $4::text IS NULL THEN previous_secret_expires_at_s ELSE $6::bigint END,
        updated_at_s = $8::bigint
      WHERE account_id = $1
      RETURNING *`,
    [
      accountId,
      change.url ?? null,
      change.enabled ?? null,
      change.secret?.sealed ?? null,
      change.secret?.previousSealed ?? null,
      change.secret?.previousExpiresAtS ?? null,
      change.disabledReason ?? 'merchant',
      change.nowS,
    ],
  );
  return rows[0]!;
}

/**
 * On resume: a pending delivery for every event of the pause that has none yet (due now), but for the
 * undelivered types (the `webhook.disabled` of an auto-disable is written in the second the pause began). The
 * delivery id is derived from the event id (one delivery per event), so one statement needs no id generator.
 */
export async function queueEventsSince(db: Queryable, merchantId: string, sinceS: bigint, nowMs: number, nowS: bigint): Promise<number> {
  const result = await db.query(
    `INSERT INTO webhook_deliveries (id, event_id, merchant_id, state, next_attempt_at_ms, created_at_s, urgent)
     SELECT 'whd_' || replace(ev.id, 'evt_', ''), ev.id, ev.merchant_id, 'pending', $3, $4, ev.type IN (SELECT jsonb_array_elements_text($6::jsonb))
       FROM events ev
      WHERE ev.merchant_id = $1 AND ev.created_at_s >= $2
        AND ev.type NOT IN (SELECT jsonb_array_elements_text($5::jsonb))
     ON CONFLICT (event_id) DO NOTHING`,
    [merchantId, sinceS, nowMs, nowS, JSON.stringify(UNDELIVERED_EVENT_TYPES), JSON.stringify(URGENT_EVENT_TYPES)],
  );
  return result.rowCount ?? 0;
}

const DELIVERY_COLUMNS = `d.id, d.event_id, ev.type AS event_type, d.account_id, d.state, d.attempts, d.next_attempt_at_ms,
  d.locked_until_ms, d.last_status, d.last_error, d.last_attempt_at_s, d.last_duration_ms, d.created_at_s, d.delivered_at_s,
  CASE WHEN we.enabled THEN we.circuit_open_until_ms ELSE 0 END AS circuit_open_until_ms, we.enabled AS endpoint_enabled`;
/** A delivery with its event and its endpoint (whose circuit may hold it back; none once an owner deleted it). */
const DELIVERY_FROM = `webhook_deliveries d JOIN events ev ON ev.id = d.event_id LEFT JOIN webhook_endpoints we ON we.account_id = d.account_id`;

/** Whose events and deliveries a read lists: a merchant's or an owner's (one outbox holds both). */
export type EventAccount = { kind: 'merchant'; id: string } | { kind: 'owner'; id: string };

/** The account's column: chosen from the type, never from input. */
function accountColumn(account: EventAccount): 'merchant_id' | 'owner_id' {
  return account.kind === 'merchant' ? 'merchant_id' : 'owner_id';
}

/** The account's deliveries, most recent first. */
export async function listDeliveries(db: Queryable, account: EventAccount, limit: number, startingAfter?: string): Promise<DeliveryRow[]> {
  const column = accountColumn(account);
  const { rows } = await db.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM ${DELIVERY_FROM}
      WHERE d.${column} = $1
        AND ($2::text IS NULL OR d.seq < (SELECT seq FROM webhook_deliveries WHERE id = $2 AND ${column} = $1))
      ORDER BY d.seq DESC LIMIT $3`,
    [account.id, startingAfter ?? null, limit],
  );
  await refuseUnknownCursor(db, rows, startingAfter, `SELECT 1 FROM webhook_deliveries WHERE id = $1 AND ${column} = $2`, [account.id]);
  return rows;
}

export async function findDelivery(db: Queryable, account: EventAccount, deliveryId: string): Promise<DeliveryRow | undefined> {
  const { rows } = await db.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM ${DELIVERY_FROM}
      WHERE d.id = $1 AND d.${accountColumn(account)} = $2`,
    [deliveryId, account.id],
  );
  return rows[0];
}

/** The account's delivery, locked for the rest of the transaction (a re-send). */
export async function lockDelivery(tx: Tx, account: EventAccount, deliveryId: string): Promise<DeliveryRow | undefined> {
  const { rows } = await tx.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM ${DELIVERY_FROM}
      WHERE d.id = $1 AND d.${accountColumn(account)} = $2 FOR UPDATE OF d`,
    [deliveryId, account.id],
  );
  return rows[0];
}

/** Makes the delivery due now; a finished one (succeeded or dead) becomes pending again. */
export async function scheduleNow(db: Queryable, deliveryId: string, nowMs: number): Promise<void> {
  await db.query(`UPDATE webhook_deliveries SET state = 'pending', next_attempt_at_ms = $2 WHERE id = $1`, [deliveryId, nowMs]);
}

/** The account asked for an attempt (a re-send): the endpoint's circuit closes so it is made now. */
export async function closeCircuit(db: Queryable, accountId: string): Promise<void> {
  await db.query('UPDATE webhook_endpoints SET circuit_open_until_ms = 0 WHERE account_id = $1 AND circuit_open_until_ms > 0', [accountId]);
}

/** How long after its latest failure an endpoint stays in the failing share, even between successes. */
export const SUSPECT_AFTER_FAILURE_MS = 10 * 60_000;

/**
 * An endpoint held to the failing share of a worker's slots (`e`, at `$1`, now): its latest attempt failed, its
 * receiver has never answered 2xx, or it failed less than SUSPECT_AFTER_FAILURE_MS ago. A receiver that hangs holds
 * a slot for the whole timeout before its failure is recorded, so a new one's first burst, or one that hangs between
 * successes, would otherwise take the slots of receivers that answer.
 */
const SUSPECT_ENDPOINT = `(e.consecutive_failures > 0 OR NOT e.proven OR e.last_failed_at_ms > $1::bigint - ${SUSPECT_AFTER_FAILURE_MS})`;

/**
 * Claims up to `limit` due deliveries for this worker until `lockedUntilMs`, at most `perEndpoint` in flight
 * per endpoint (counting other instances' live claims) and `perUnprovenEndpoint` to one whose receiver has never
 * answered 2xx (urgent ones aside; a new receiver that hangs held four suspect slots for a whole timeout, so four of
 * them took the share and a new receiver that answers waited a timeout per four, found from outside), none of an
 * endpoint whose circuit is open, at most
 * `failingLimit` to suspect endpoints (urgent ones aside: a new merchant's revocation must not wait for receivers
 * that hang), those that never failed first (a new receiver is tried before the retries of ones known to fail: it
 * waited minutes behind them, found from outside); only urgent ones with `urgentOnly` (the worker's reserve). One
 * statement: it takes the rows (SKIP LOCKED, re-checking the lease), counts the attempt, writes its
 * 'in_progress' record, and marks the attempt of a previous owner whose lease ran out (a crash) 'interrupted'.
 * The claim is the lease, not the row lock: the caller commits at once.
 */
export async function claimDueDeliveries(
  tx: Tx,
  claim: {
    nowMs: number;
    limit: number;
    perEndpoint: number;
    perUnprovenEndpoint: number;
    lockedUntilMs: number;
    token: string;
    failingLimit: number;
    urgentOnly?: boolean;
  },
): Promise<ClaimedDeliveryRow[]> {
  const { rows } = await tx.query<ClaimedDeliveryRow>(
    `WITH busy AS (
       SELECT account_id, count(*) AS n FROM webhook_deliveries
        WHERE state = 'pending' AND locked_until_ms > $1::bigint GROUP BY account_id
     ),
     ranked AS (
       SELECT d.id, d.next_attempt_at_ms, d.seq, d.urgent, e.proven, ${SUSPECT_ENDPOINT} AS failing,
              e.consecutive_failures = 0 AND e.last_failed_at_ms = 0 AS untried,
              row_number() OVER (PARTITION BY d.account_id ORDER BY d.urgent DESC, d.next_attempt_at_ms, d.seq) + COALESCE(b.n, 0) AS slot
         FROM webhook_deliveries d
         JOIN webhook_endpoints e ON e.account_id = d.account_id
         LEFT JOIN busy b ON b.account_id = d.account_id
        WHERE d.state = 'pending' AND d.next_attempt_at_ms <= $1::bigint AND d.locked_until_ms <= $1::bigint
          AND e.enabled AND e.circuit_open_until_ms <= $1::bigint AND (NOT $7::boolean OR d.urgent)
     ),
     eligible AS (
       SELECT r.id, r.next_attempt_at_ms, r.urgent, r.failing, r.untried,
              row_number() OVER (PARTITION BY r.failing ORDER BY r.urgent DESC, r.untried DESC, r.next_attempt_at_ms, r.seq) AS failing_rank
         FROM ranked r WHERE r.slot <= CASE WHEN r.proven OR r.urgent THEN $5::bigint ELSE $8::bigint END
     ),
     due AS (
       SELECT d.id, d.claim_token AS previous_token FROM webhook_deliveries d JOIN eligible r ON r.id = d.id
        WHERE (NOT r.failing OR r.failing_rank <= $6 OR r.urgent) AND d.state = 'pending' AND d.locked_until_ms <= $1::bigint
        ORDER BY r.urgent DESC, r.untried DESC, r.next_attempt_at_ms
        LIMIT $2
        FOR UPDATE OF d SKIP LOCKED
     ),
     interrupted AS (
       UPDATE webhook_attempts a SET outcome = 'interrupted', error = 'instance_lost',
              message = 'the instance making the attempt stopped before it finished; another took the delivery over', finished_at_ms = $1::bigint
         FROM due WHERE a.delivery_id = due.id AND a.claim_token = due.previous_token AND a.outcome = 'in_progress'
     ),
     claimed AS (
       UPDATE webhook_deliveries w SET locked_until_ms = $3::bigint, claim_token = $4::text, attempts = w.attempts + 1
         FROM due, events ev, webhook_endpoints e
        WHERE w.id = due.id AND ev.id = w.event_id AND e.account_id = w.account_id
       RETURNING w.id, w.event_id, w.account_id, w.merchant_id, w.owner_id, w.attempts, ev.payload, e.url, e.secret_sealed,
                 CASE WHEN e.previous_secret_expires_at_s * 1000 > $1::bigint THEN e.previous_secret_sealed END AS previous_secret_sealed,
                 w.next_attempt_at_ms AS due_at_ms, $1::bigint AS started_at_ms, w.traceparent, ${SUSPECT_ENDPOINT} AS failing, e.proven
     ),
     started AS (
       INSERT INTO webhook_attempts (id, delivery_id, merchant_id, owner_id, attempt, claim_token, outcome, started_at_ms)
       SELECT 'wha_' || substr(md5($4::text || claimed.id), 1, 26), claimed.id, claimed.merchant_id, claimed.owner_id, claimed.attempts, $4::text, 'in_progress', $1::bigint FROM claimed
     )
     SELECT * FROM claimed`,
    [claim.nowMs, claim.limit, claim.lockedUntilMs, claim.token, claim.perEndpoint, claim.failingLimit, claim.urgentOnly ?? false, claim.perUnprovenEndpoint],
  );
  return rows;
}

/** Extends the leases of claims this instance is still working on; a crashed instance stops doing this. */
export async function extendClaims(db: Queryable, tokens: readonly string[], lockedUntilMs: number): Promise<void> {
  if (tokens.length === 0) return;
  await db.query(
    `UPDATE webhook_deliveries SET locked_until_ms = $2
      WHERE claim_token IN (SELECT jsonb_array_elements_text($1::jsonb)) AND state = 'pending'`,
    [JSON.stringify(tokens), lockedUntilMs],
  );
}

export interface AttemptRecord {
  id: string;
  token: string;
  state: DeliveryState;
  nextAttemptAtMs: number;
  status: number | null;
  error: string | null;
  /** What happened, in words (failures only). */
  message: string | null;
  finishedAtMs: number;
  durationMs: number;
  deliveredAtS: number | null;
}

/**
 * Records how the attempt went, always (even when the claim was lost meanwhile: it did happen), and, while
 * this worker still owns the claim, the delivery's new state, releasing the claim. False when the claim was lost.
 */
export async function recordAttempt(db: Queryable, record: AttemptRecord): Promise<boolean> {
  await db.query(
    `UPDATE webhook_attempts SET outcome = $3, status = $4, error = $5, duration_ms = $6, finished_at_ms = $7, message = $8
      WHERE delivery_id = $1 AND claim_token = $2`,
    [record.id, record.token, record.state === 'succeeded' ? 'succeeded' : 'failed', record.status, record.error, record.durationMs, record.finishedAtMs, record.message],
  );
  const result = await db.query(
    `UPDATE webhook_deliveries
        SET state = $3, next_attempt_at_ms = $4, last_status = $5, last_error = $6,
            last_attempt_at_s = $7, last_duration_ms = $8, delivered_at_s = COALESCE($9, delivered_at_s),
            locked_until_ms = 0, claim_token = NULL
      WHERE id = $1 AND claim_token = $2`,
    [
      record.id,
      record.token,
      record.state,
      record.nextAttemptAtMs,
      record.status,
      record.error,
      Math.floor(record.finishedAtMs / 1000),
      record.durationMs,
      record.deliveredAtS,
    ],
  );
  return result.rowCount === 1;
}

/** A success closes the endpoint's circuit, ends its run of failures and proves its receiver (one write, the first time). */
export async function endpointSucceeded(db: Queryable, accountId: string): Promise<void> {
  await db.query(
    `UPDATE webhook_endpoints SET consecutive_failures = 0, failing_since_s = NULL, circuit_open_until_ms = 0, proven = true
      WHERE account_id = $1 AND (consecutive_failures > 0 OR NOT proven)`,
    [accountId],
  );
}

/**
 * Records a failed attempt against the endpoint; returns its run of failures so the caller can open the circuit
 * or give up. Only an attempt that started with the circuit closed counts (`counted`): one that started before
 * the circuit opened (in flight when another attempt's failure opened it) or while it was open is part of the
 * burst that opened it, and neither adds to the run nor lengthens the circuit. The run's start is set either way.
 */
export async function endpointFailed(
  db: Queryable,
  accountId: string,
  failure: { nowS: number; startedAtMs: number },
): Promise<{ consecutive_failures: number; failing_since_s: bigint; counted: boolean } | undefined> {
  const { rows } = await db.query<{ consecutive_failures: number; failing_since_s: bigint; counted: boolean }>(
    `UPDATE webhook_endpoints
        SET consecutive_failures = consecutive_failures + CASE WHEN circuit_open_until_ms > $3::bigint THEN 0 ELSE 1 END,
            failing_since_s = COALESCE(failing_since_s, $2),
            last_failed_at_ms = GREATEST(last_failed_at_ms, $2 * 1000)
      WHERE account_id = $1 RETURNING consecutive_failures, failing_since_s, circuit_open_until_ms <= $3::bigint AS counted`,
    [accountId, failure.nowS, failure.startedAtMs],
  );
  return rows[0];
}

export async function openCircuit(db: Queryable, accountId: string, untilMs: number): Promise<void> {
  await db.query('UPDATE webhook_endpoints SET circuit_open_until_ms = GREATEST(circuit_open_until_ms, $2) WHERE account_id = $1', [accountId, untilMs]);
}

/** Disables an endpoint the gateway gave up on; false when it was already disabled. */
export async function disableFailingEndpoint(db: Queryable, accountId: string, nowS: number): Promise<boolean> {
  const result = await db.query(
    `UPDATE webhook_endpoints SET enabled = false, paused_at_s = $2, disabled_reason = 'failing', updated_at_s = $2
      WHERE account_id = $1 AND enabled`,
    [accountId, nowS],
  );
  return result.rowCount === 1;
}

/** Every attempt of one delivery, oldest first. */
export async function listAttempts(db: Queryable, deliveryIds: readonly string[]): Promise<AttemptRow[]> {
  if (deliveryIds.length === 0) return [];
  const { rows } = await db.query<AttemptRow>(
    `SELECT id, delivery_id, attempt, outcome, status, error, message, duration_ms, started_at_ms, finished_at_ms FROM webhook_attempts
      WHERE delivery_id IN (SELECT jsonb_array_elements_text($1::jsonb)) ORDER BY seq`,
    [JSON.stringify(deliveryIds)],
  );
  return rows;
}

/** The account's events, newest first, optionally of some types and within [from, to] (Unix seconds). */
export async function listEvents(
  db: Queryable,
  account: EventAccount,
  filter: { types: readonly string[]; fromS?: number; toS?: number; limit: number; startingAfter?: string },
): Promise<EventRow[]> {
  const column = accountColumn(account);
  const { rows } = await db.query<EventRow>(
    `SELECT id, type, payload, created_at_s FROM events
      WHERE ${column} = $1
        AND ($2::jsonb = '[]'::jsonb OR type IN (SELECT jsonb_array_elements_text($2::jsonb)))
        AND ($3::bigint IS NULL OR created_at_s >= $3)
        AND ($4::bigint IS NULL OR created_at_s <= $4)
        AND ($5::text IS NULL OR seq < (SELECT seq FROM events WHERE id = $5 AND ${column} = $1))
      ORDER BY seq DESC LIMIT $6`,
    [account.id, JSON.stringify(filter.types), filter.fromS ?? null, filter.toS ?? null, filter.startingAfter ?? null, filter.limit],
  );
  await refuseUnknownCursor(db, rows, filter.startingAfter, `SELECT 1 FROM events WHERE id = $1 AND ${column} = $2`, [account.id]);
  return rows;
}

export async function findEvent(db: Queryable, account: EventAccount, eventId: string): Promise<EventRow | undefined> {
  const { rows } = await db.query<EventRow>(`SELECT id, type, payload, created_at_s FROM events WHERE id = $1 AND ${accountColumn(account)} = $2`, [
    eventId,
    account.id,
  ]);
  return rows[0];
}

/** The event's delivery, locked for the rest of the transaction (a re-send of the event). */
export async function lockDeliveryOfEvent(tx: Tx, account: EventAccount, eventId: string): Promise<DeliveryRow | undefined> {
  const { rows } = await tx.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM ${DELIVERY_FROM}
      WHERE d.event_id = $1 AND d.${accountColumn(account)} = $2 FOR UPDATE OF d`,
    [eventId, account.id],
  );
  return rows[0];
}

/** The outbox's backlog for the metrics: pending deliveries, and how long the earliest-due one has been due (index `webhook_deliveries_due`). */
export async function outboxBacklog(db: Queryable, nowMs: number): Promise<{ pending: number; oldestDueAgeS: number }> {
  const { rows } = await db.query<{ pending: bigint; oldest_due_at_ms: bigint | null }>(
    `SELECT count(*) AS pending, min(next_attempt_at_ms) AS oldest_due_at_ms FROM webhook_deliveries WHERE state = 'pending'`,
  );
  const oldestDueAtMs = rows[0]?.oldest_due_at_ms;
  const overdueMs = oldestDueAtMs === null || oldestDueAtMs === undefined ? 0 : Math.max(0, nowMs - Number(oldestDueAtMs));
  return { pending: Number(rows[0]?.pending ?? 0n), oldestDueAgeS: overdueMs / 1000 };
}

/**
 * A delivery for a past event of the account that never had one (it happened while no webhook was enabled), due
 * now, urgent as the outbox would have made it.
 */
export async function insertDelivery(
  db: Queryable,
  delivery: { id: string; eventId: string; eventType: string; account: EventAccount; nowMs: number; nowS: number },
): Promise<void> {
  const { account } = delivery;
  await db.query(
    `INSERT INTO webhook_deliveries (id, event_id, merchant_id, owner_id, state, next_attempt_at_ms, created_at_s, urgent)
     VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7)`,
    [
      delivery.id,
      delivery.eventId,
      account.kind === 'merchant' ? account.id : null,
      account.kind === 'owner' ? account.id : null,
      delivery.nowMs,
      delivery.nowS,
      URGENT_EVENT_TYPES.includes(delivery.eventType),
    ],
  );
}

/** Deletes events created before `beforeS`, with their deliveries and attempts (run in one transaction). */
export async function purgeEventsBefore(db: Queryable, beforeS: number): Promise<number> {
  await db.query(
    `DELETE FROM webhook_attempts WHERE delivery_id IN (
       SELECT d.id FROM webhook_deliveries d JOIN events ev ON ev.id = d.event_id WHERE ev.created_at_s < $1)`,
    [beforeS],
  );
  await db.query('DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM events WHERE created_at_s < $1)', [beforeS]);
  const result = await db.query('DELETE FROM events WHERE created_at_s < $1', [beforeS]);
  return result.rowCount ?? 0;
}

/** How far one event got: its delivery (if it has one) and its merchant's endpoint (if it has one). */
export interface EventReachRow {
  event_id: string;
  delivery_state: DeliveryState | null;
  attempts: number | null;
  last_attempt_at_s: bigint | null;
  /** The delivery's scheduled next attempt; null without a delivery. */
  next_attempt_at_ms: bigint | null;
  /** Until when the endpoint's circuit holds the delivery back, as DeliveryRow's: its end while enabled, else 0. */
  circuit_open_until_ms: bigint;
  endpoint_enabled: boolean | null;
  disabled_reason: 'merchant' | 'failing' | null;
}

/** For each merchant event given, its delivery and its merchant's endpoint (one statement). */
export async function eventReach(db: Queryable, events: ReadonlyArray<{ merchantId: string; eventId: string }>): Promise<EventReachRow[]> {
  if (events.length === 0) return [];
  const { rows } = await db.query<EventReachRow>(
    `SELECT e.event_id, d.state AS delivery_state, d.attempts, d.last_attempt_at_s, d.next_attempt_at_ms,
            CASE WHEN w.enabled THEN w.circuit_open_until_ms ELSE 0 END AS circuit_open_until_ms,
            w.enabled AS endpoint_enabled, w.disabled_reason
       FROM unnest($1::text[], $2::text[]) AS e(merchant_id, event_id)
       LEFT JOIN webhook_deliveries d ON d.event_id = e.event_id
       LEFT JOIN webhook_endpoints w ON w.merchant_id = e.merchant_id`,
    [events.map((e) => e.merchantId), events.map((e) => e.eventId)],
  );
  return rows;
}
