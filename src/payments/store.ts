// SQL of top-ups.
import type { Queryable, Tx } from '../platform/db/database.ts';
import type { RailKind } from './rails/index.ts';

export type TopupStatus = 'pending_approval' | 'settled' | 'declined' | 'expired' | 'failed';

export interface TopupRow {
  id: string;
  agent_id: string;
  owner_id: string;
  amount_usd_cents: number;
  reason: string;
  intent_id: string | null;
  /** The rail it went through. */
  provider: RailKind;
  provider_ref: string | null;
  approval_url: string;
  checkout_url: string;
  livemode: boolean;
  status: TopupStatus;
  requested_by: string;
  lot_id: string | null;
  settlement_ref: string | null;
  created_at_s: bigint;
  updated_at_s: bigint;
  expires_at_s: bigint;
  finished_at_s: bigint | null;
  resume_due: boolean;
  resume_attempts: number;
  next_resume_at_s: bigint | null;
}

export type NewTopupRow = Omit<TopupRow, 'lot_id' | 'settlement_ref' | 'finished_at_s' | 'resume_due' | 'resume_attempts' | 'next_resume_at_s'>;

/** Inserts a pending top-up; undefined when its intent already has one pending (the unique index says so). */
export async function insertTopup(db: Queryable, row: NewTopupRow): Promise<TopupRow | undefined> {
  const { rows } = await db.query<TopupRow>(
    `INSERT INTO topups (id, agent_id, owner_id, amount_usd_cents, reason, intent_id, provider, provider_ref, approval_url,
       checkout_url, livemode, status, requested_by, created_at_s, updated_at_s, expires_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
     ON CONFLICT (intent_id) WHERE status = 'pending_approval' DO NOTHING
     RETURNING *`,
    [
      row.id, row.agent_id, row.owner_id, row.amount_usd_cents, row.reason, row.intent_id, row.provider, row.provider_ref,
      row.approval_url, row.checkout_url, row.livemode, row.status, row.requested_by, row.created_at_s, row.updated_at_s,
      row.expires_at_s,
    ],
  );
  return rows[0];
}

export async function findTopup(db: Queryable, id: string): Promise<TopupRow | undefined> {
  const { rows } = await db.query<TopupRow>('SELECT * FROM topups WHERE id = $1', [id]);
  return rows[0];
}

/** The top-up locked for this transaction: every notification and the owner's approval lock it first. */
export async function lockTopup(tx: Tx, id: string): Promise<TopupRow | undefined> {
  const { rows } = await tx.query<TopupRow>('SELECT * FROM topups WHERE id = $1 FOR UPDATE', [id]);
  return rows[0];
}

export async function findPendingForIntent(db: Queryable, intentId: string): Promise<TopupRow | undefined> {
  const { rows } = await db.query<TopupRow>(`SELECT * FROM topups WHERE intent_id = $1 AND status = 'pending_approval'`, [intentId]);
  return rows[0];
}

/** True when another top-up of this intent is still pending or settled (so the intent stays open). */
export async function intentStillFunded(db: Queryable, intentId: string, exceptTopupId: string): Promise<boolean> {
  const { rows } = await db.query<{ n: bigint }>(
    `SELECT count(*)::bigint AS n FROM topups WHERE intent_id = $1 AND id <> $2 AND status IN ('pending_approval', 'settled')`,
    [intentId, exceptTopupId],
  );
  return rows[0]!.n > 0n;
}

/** An agent's top-ups, oldest first, after the top-up `startingAfter` of the same agent. */
export async function listTopups(db: Queryable, agentId: string, limit: number, startingAfter?: string): Promise<{ items: TopupRow[]; hasMore: boolean }> {
  const { rows } = await db.query<TopupRow>(
    `SELECT * FROM topups WHERE agent_id = $1
       AND ($2::text IS NULL OR (created_at_s, id) > (SELECT created_at_s, id FROM topups WHERE id = $2 AND agent_id = $1))
     ORDER BY created_at_s, id LIMIT $3`,
    [agentId, startingAfter ?? null, limit + 1],
  );
  return { items: rows.slice(0, limit), hasMore: rows.length > limit };
}

export async function markSettled(db: Queryable, id: string, lotId: string, settlementRef: string, nowS: number): Promise<TopupRow> {
  const { rows } = await db.query<TopupRow>(
    `UPDATE topups SET status = 'settled', lot_id = $2, settlement_ref = $3, updated_at_s = $4::bigint, finished_at_s = $4::bigint,
            resume_due = intent_id IS NOT NULL, next_resume_at_s = CASE WHEN intent_id IS NULL THEN NULL ELSE $4::bigint END
      WHERE id = $1 AND status = 'pending_approval' RETURNING *`,
    [id, lotId, settlementRef, nowS],
  );
  if (!rows[0]) throw new Error(`top-up ${id} was not pending when it settled`);
  return rows[0];
}

export async function markClosed(db: Queryable, id: string, status: 'declined' | 'expired' | 'failed', reference: string | null, nowS: number): Promise<TopupRow> {
  const { rows } = await db.query<TopupRow>(
    `UPDATE topups SET status = $2, settlement_ref = $3, updated_at_s = $4, finished_at_s = $4
      WHERE id = $1 AND status = 'pending_approval' RETURNING *`,
    [id, status, reference, nowS],
  );
  if (!rows[0]) throw new Error(`top-up ${id} was not pending when it closed`);
  return rows[0];
}

export async function expiredPendingIds(db: Queryable, nowS: number, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM topups WHERE status = 'pending_approval' AND expires_at_s <= $1 ORDER BY expires_at_s LIMIT $2`,
    [nowS, limit],
  );
  return rows.map((row) => row.id);
}

export async function dueResumes(db: Queryable, nowS: number, limit: number): Promise<Array<{ id: string; intent_id: string | null }>> {
  const { rows } = await db.query<{ id: string; intent_id: string | null }>(
    `SELECT id, intent_id FROM topups WHERE resume_due AND next_resume_at_s <= $1 ORDER BY next_resume_at_s LIMIT $2`,
    [nowS, limit],
  );
  return rows;
}

export async function finishResume(db: Queryable, id: string, nowS: number): Promise<void> {
  await db.query(`UPDATE topups SET resume_due = false, next_resume_at_s = NULL, updated_at_s = $2 WHERE id = $1 AND resume_due`, [id, nowS]);
}

/**
 * Tries again later: in `busyRetryS` when another instance holds the intent's key, else after a back-off that
 * doubles with each attempt from 30 s up to an hour (an upstream outage must not be hammered).
 */
export async function postponeResume(db: Queryable, id: string, nowS: number, busy: boolean, busyRetryS: number): Promise<void> {
  await db.query(
    `UPDATE topups SET
       next_resume_at_s = $2::bigint + CASE WHEN $3::boolean THEN $4::bigint ELSE LEAST(3600, 30 * power(2, LEAST(resume_attempts, 10))::bigint) END,
       resume_attempts = resume_attempts + CASE WHEN $3::boolean THEN 0 ELSE 1 END
     WHERE id = $1 AND resume_due`,
    [id, nowS, busy, busyRetryS],
  );
}
