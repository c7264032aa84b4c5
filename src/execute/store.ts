// SQL of metered execution: mail connectors, executions and retained intents.
import type { Queryable, Tx } from '../platform/db/database.ts';

export interface MailConnectorRow {
  agent_id: string;
  host: string;
  port: number;
  tls: 'implicit' | 'starttls' | 'none';
  username: string;
  password_sealed: string;
  ca_pem: string | null;
  created_at_s: bigint;
  updated_at_s: bigint;
}

export type ExecutionState = 'running' | 'succeeded' | 'failed' | 'abandoned';

export interface ExecutionRow {
  id: string;
  agent_id: string;
  service_id: string;
  action: string;
  hold_id: string;
  state: ExecutionState;
  error_code: string | null;
  instance_id: string;
  idem_scope: string;
  idem_route: string;
  idem_key: string;
  idem_token: string;
  started_at_ms: bigint;
  heartbeat_at_ms: bigint;
  deadline_at_ms: bigint;
  finished_at_ms: bigint | null;
}

export type IntentState = 'pending' | 'executed' | 'failed' | 'cancelled';

export interface IntentRow {
  id: string;
  agent_id: string;
  service_id: string;
  action: string;
  input: unknown;
  price_uc: bigint;
  requested_by: string;
  idempotency_key: string;
  state: IntentState;
  execution_id: string | null;
  request_fingerprint: string | null;
  cancellation_reason: string | null;
  created_at_s: bigint;
  updated_at_s: bigint;
  expires_at_s: bigint;
  /** The gateway's last run of this intent on its own that left it pending (all three null when none, or since the agent's retry retained it anew). */
  last_attempt_at_s: bigint | null;
  /** That run's problem body, as JSON text. */
  last_attempt_error: string | null;
  /** Whether the gateway runs it again (the back-off), or only the agent's retry with its key can now. */
  last_attempt_retried: boolean | null;
}

// ---- mail connectors ----

export async function findMailConnector(db: Queryable, agentId: string): Promise<MailConnectorRow | undefined> {
  const { rows } = await db.query<MailConnectorRow>('SELECT * FROM mail_connectors WHERE agent_id = $1', [agentId]);
  return rows[0];
}

/** Inserts or replaces the agent's connector; created_at_s survives a replacement. */
export async function upsertMailConnector(db: Queryable, row: MailConnectorRow): Promise<MailConnectorRow> {
  const { rows } = await db.query<MailConnectorRow>(
    `INSERT INTO mail_connectors (agent_id, host, port, tls, username, password_sealed, ca_pem, created_at_s, updated_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (agent_id) DO UPDATE SET
       host = EXCLUDED.host, port = EXCLUDED.port, tls = EXCLUDED.tls, username = EXCLUDED.username,
       password_sealed = EXCLUDED.password_sealed, ca_pem = EXCLUDED.ca_pem, updated_at_s = EXCLUDED.updated_at_s
     RETURNING *`,
    [row.agent_id, row.host, row.port, row.tls, row.username, row.password_sealed, row.ca_pem, row.created_at_s, row.updated_at_s],
  );
  return rows[0]!;
}

export async function deleteMailConnector(db: Queryable, agentId: string): Promise<boolean> {
  const result = await db.query('DELETE FROM mail_connectors WHERE agent_id = $1', [agentId]);
  return result.rowCount === 1;
}

// ---- executions ----

/** Inserts executions in one statement (one round trip, whatever their number). */
export async function insertExecutions(db: Queryable, rows: readonly ExecutionRow[]): Promise<void> {
  if (rows.length === 0) return;
  const column = <K extends keyof ExecutionRow>(name: K) => rows.map((row) => (typeof row[name] === 'bigint' ? String(row[name]) : row[name]));
  await db.query(
    `INSERT INTO service_executions (id, agent_id, service_id, action, hold_id, state, error_code, instance_id,
       idem_scope, idem_route, idem_key, idem_token, started_at_ms, heartbeat_at_ms, deadline_at_ms, finished_at_ms)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
       $9::text[], $10::text[], $11::text[], $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[])`,
    [
      column('id'), column('agent_id'), column('service_id'), column('action'), column('hold_id'), column('state'), column('error_code'),
      column('instance_id'), column('idem_scope'), column('idem_route'), column('idem_key'), column('idem_token'), column('started_at_ms'),
      column('heartbeat_at_ms'), column('deadline_at_ms'), column('finished_at_ms'),
    ],
  );
}

// The statements below that lock or finish executions find them by id, and tell a running one by
// `finished_at_ms IS NULL` (the same rows: the table's check ties the two), never by `state = 'running'`: that is
// the predicate of the running executions' partial index, and a plan made while few were running read that index
// whole, with the ids as a filter, on every call as they grew (docs/decisions.md "A batch's statements probe,
// never scan").

/** Locks a still-running execution; undefined when it has already finished (or was recovered). */
export async function lockRunningExecution(tx: Tx, executionId: string): Promise<ExecutionRow | undefined> {
  const { rows } = await tx.query<ExecutionRow>(`SELECT * FROM service_executions WHERE id = $1 AND finished_at_ms IS NULL FOR UPDATE`, [executionId]);
  return rows[0];
}

/** Locks the running ones of these executions, in sorted order (one statement). */
export async function lockRunningExecutions(tx: Tx, executionIds: readonly string[]): Promise<Map<string, ExecutionRow>> {
  if (executionIds.length === 0) return new Map();
  const { rows } = await tx.query<ExecutionRow>(`SELECT * FROM service_executions WHERE id = ANY($1::text[]) AND finished_at_ms IS NULL ORDER BY id FOR UPDATE`, [
    [...executionIds],
  ]);
  return new Map(rows.map((row) => [row.id, row]));
}

export async function finishExecution(db: Queryable, executionId: string, state: Exclude<ExecutionState, 'running'>, errorCode: string | null, nowMs: number): Promise<void> {
  await finishExecutions(db, [executionId], state, errorCode, nowMs);
}

/** Finishes running executions in one statement. */
export async function finishExecutions(db: Queryable, executionIds: readonly string[], state: Exclude<ExecutionState, 'running'>, errorCode: string | null, nowMs: number): Promise<void> {
  if (executionIds.length === 0) return;
  await db.query(`UPDATE service_executions SET state = $2, error_code = $3, finished_at_ms = $4 WHERE id = ANY($1::text[]) AND finished_at_ms IS NULL`, [
    [...executionIds],
    state,
    errorCode,
    nowMs,
  ]);
}

export async function heartbeat(db: Queryable, executionIds: readonly string[], nowMs: number): Promise<void> {
  // A JSON array parameter binds the same way on both drivers.
  await db.query(
    `UPDATE service_executions SET heartbeat_at_ms = $2
      WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb)) AND state = 'running'`,
    [JSON.stringify(executionIds), nowMs],
  );
}

/** Running executions whose heartbeat is older than `staleBeforeMs` or whose deadline has passed. */
export async function orphanedExecutionIds(db: Queryable, staleBeforeMs: number, nowMs: number, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM service_executions
      WHERE state = 'running' AND (heartbeat_at_ms < $1 OR deadline_at_ms <= $2)
      ORDER BY heartbeat_at_ms LIMIT $3`,
    [staleBeforeMs, nowMs, limit],
  );
  return rows.map((row) => row.id);
}

// ---- intents ----

/**
 * Retains an intent once per (caller, key): a retry of the same request (the caller checked the row's
 * fingerprint: `Intents.retain`) refreshes and returns the same row.
 */
export async function upsertIntent(db: Queryable, row: Omit<IntentRow, 'last_attempt_at_s' | 'last_attempt_error' | 'last_attempt_retried'>): Promise<IntentRow> {
  const { rows } = await db.query<IntentRow>(
    `INSERT INTO service_intents (id, agent_id, service_id, action, input, price_uc, requested_by, idempotency_key, state,
       execution_id, created_at_s, updated_at_s, expires_at_s, request_fingerprint, cancellation_reason)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, NULL)
     ON CONFLICT (requested_by, idempotency_key) DO UPDATE SET
       state = 'pending', execution_id = NULL, cancellation_reason = NULL, updated_at_s = EXCLUDED.updated_at_s,
       expires_at_s = EXCLUDED.expires_at_s, request_fingerprint = EXCLUDED.request_fingerprint,
       last_attempt_at_s = NULL, last_attempt_error = NULL, last_attempt_retried = NULL
     RETURNING *`,
    [
      row.id, row.agent_id, row.service_id, row.action, JSON.stringify(row.input), row.price_uc, row.requested_by,
      row.idempotency_key, row.state, row.execution_id, row.created_at_s, row.updated_at_s, row.expires_at_s,
      row.request_fingerprint,
    ],
  );
  return rows[0]!;
}

export async function countPendingIntents(db: Queryable, agentId: string, nowS: number): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>(
    `SELECT count(*)::bigint AS n FROM service_intents WHERE agent_id = $1 AND state = 'pending' AND expires_at_s > $2`,
    [agentId, nowS],
  );
  return Number(rows[0]!.n);
}

export async function findIntentByKey(db: Queryable, requestedBy: string, key: string): Promise<IntentRow | undefined> {
  const { rows } = await db.query<IntentRow>('SELECT * FROM service_intents WHERE requested_by = $1 AND idempotency_key = $2', [requestedBy, key]);
  return rows[0];
}

export async function findIntent(db: Queryable, intentId: string): Promise<IntentRow | undefined> {
  const { rows } = await db.query<IntentRow>('SELECT * FROM service_intents WHERE id = $1', [intentId]);
  return rows[0];
}

/**
 * Records how the intent of this (caller, key) ended, if there is one still open and it is this request's (its
 * fingerprint): `executed` or `failed` by `executionId`, and returns it. A cancelled intent counts as open here:
 * its request may still run on a retry with credit.
 */
export async function finishIntent(
  db: Queryable,
  claim: { scope: string; key: string; fingerprint?: string },
  state: 'executed' | 'failed',
  executionId: string,
  nowS: number,
): Promise<IntentRow | undefined> {
  const { rows } = await db.query<IntentRow>(
    `UPDATE service_intents SET state = $3, execution_id = $4, cancellation_reason = NULL, updated_at_s = $5
      WHERE requested_by = $1 AND idempotency_key = $2 AND state IN ('pending', 'cancelled')
        AND request_fingerprint IS NOT DISTINCT FROM $6
      RETURNING *`,
    [claim.scope, claim.key, state, executionId, nowS, claim.fingerprint ?? null],
  );
  return rows[0];
}

/** Cancels every pending intent of these agents (in the transaction of the freeze or retirement that stops them); answers the cancelled rows. */
export async function cancelPendingIntentsOf(db: Queryable, agentIds: readonly string[], reason: string, nowS: number): Promise<IntentRow[]> {
  if (agentIds.length === 0) return [];
  const { rows } = await db.query<IntentRow>(
    `UPDATE service_intents SET state = 'cancelled', cancellation_reason = $2, updated_at_s = $3
      WHERE agent_id = ANY($1::text[]) AND state = 'pending' RETURNING *`,
    [[...agentIds], reason, nowS],
  );
  return rows.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** Records the gateway's own run of a pending intent that left it pending (nothing when it is no longer pending). */
export async function recordIntentAttempt(db: Queryable, intentId: string, attempt: { atS: number; error: Record<string, unknown>; retried: boolean }): Promise<void> {
  await db.query(
    `UPDATE service_intents SET last_attempt_at_s = $2, last_attempt_error = $3, last_attempt_retried = $4 WHERE id = $1 AND state = 'pending'`,
    [intentId, attempt.atS, JSON.stringify(attempt.error), attempt.retried],
  );
}

/** Closes a pending intent without running it; false when it was not pending. */
export async function cancelIntent(db: Queryable, intentId: string, reason: string, nowS: number): Promise<boolean> {
  const result = await db.query(
    `UPDATE service_intents SET state = 'cancelled', cancellation_reason = $2, updated_at_s = $3 WHERE id = $1 AND state = 'pending'`,
    [intentId, reason, nowS],
  );
  return result.rowCount === 1;
}

export async function findExecution(db: Queryable, executionId: string): Promise<ExecutionRow | undefined> {
  const { rows } = await db.query<ExecutionRow>('SELECT * FROM service_executions WHERE id = $1', [executionId]);
  return rows[0];
}

export async function deleteExpiredIntents(db: Queryable, nowS: number, limit: number): Promise<number> {
  const result = await db.query(
    `DELETE FROM service_intents WHERE id IN (
       SELECT id FROM service_intents WHERE state IN ('pending', 'cancelled') AND expires_at_s <= $1 LIMIT $2)`,
    [nowS, limit],
  );
  return result.rowCount;
}
