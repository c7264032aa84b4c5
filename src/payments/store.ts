// SQL of top-ups.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { refuseUnknownCursor } from '../platform/db/paging.ts';
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

/**
 * Inserts a pending top-up; undefined when its intent already has one pending (the unique index says so). The
 * database numbers it (`seq`) among its owner's approvals, locking the owner's counter until this transaction
 * ends (migrations 0043, 0044), so numbers become visible in the order they were taken.
 */
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

/**
 * How many top-ups of the agent wait for its owner now: pending and before their expiry (one past it is no
 * longer answerable, whether or not the expiry job has closed it yet).
 */
export async function countPendingTopups(db: Queryable, agentId: string, nowS: number): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>(
    `SELECT count(*)::bigint AS n FROM topups WHERE agent_id = $1 AND status = 'pending_approval' AND expires_at_s > $2`,
    [agentId, nowS],
  );
  return Number(rows[0]!.n);
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
       AND ($2::text IS NULL OR seq > (SELECT seq FROM topups WHERE id = $2 AND agent_id = $1))
     ORDER BY seq LIMIT $3`,
    [agentId, startingAfter ?? null, limit + 1],
  );
  await refuseUnknownCursor(db, rows, startingAfter, 'SELECT 1 FROM topups WHERE id = $1 AND agent_id = $2', [agentId]);
  return { items: rows.slice(0, limit), hasMore: rows.length > limit };
}

// A top-up still pending is told by `finished_at_s IS NULL` (the table's check ties it to status =
// 'pending_approval'), not by that predicate, which is the pending top-ups' partial index's: a lookup by id that
// names it can be planned as a read of that whole index (docs/decisions.md "A batch's statements probe, never scan").
/** Marks a pending top-up settled, or an expired one (a payment collected after the expiry: no intent to resume). */
export async function markSettled(db: Queryable, id: string, lotId: string, settlementRef: string, nowS: number): Promise<TopupRow> {
  const { rows } = await db.query<TopupRow>(
    `UPDATE topups SET status = 'settled', lot_id = $2, settlement_ref = $3, updated_at_s = $4::bigint, finished_at_s = $4::bigint,
            resume_due = intent_id IS NOT NULL AND status = 'pending_approval',
            next_resume_at_s = CASE WHEN intent_id IS NULL OR status <> 'pending_approval' THEN NULL ELSE $4::bigint END
      WHERE id = $1 AND (finished_at_s IS NULL OR status = 'expired') RETURNING *`,
    [id, lotId, settlementRef, nowS],
  );
  if (!rows[0]) throw new Error(`top-up ${id} was not pending when it settled`);
  return rows[0];
}

export async function markClosed(db: Queryable, id: string, status: 'declined' | 'expired' | 'failed', reference: string | null, nowS: number): Promise<TopupRow> {
  const { rows } = await db.query<TopupRow>(
    `UPDATE topups SET status = $2, settlement_ref = $3, updated_at_s = $4, finished_at_s = $4
      WHERE id = $1 AND finished_at_s IS NULL RETURNING *`,
    [id, status, reference, nowS],
  );
  if (!rows[0]) throw new Error(`top-up ${id} was not pending when it closed`);
  return rows[0];
}

/**
 * Locks the pending top-ups bound to retained intents of these agents (id order): the kill switch takes them
 * right after the agents' rows and before any hold, lot or balance row, the order an approval's settlement
 * (top-up, then lot and balance) also follows.
 */
export async function lockPendingIntentTopupsOf(tx: Tx, agentIds: readonly string[]): Promise<void> {
  if (agentIds.length === 0) return;
  await tx.query(
    `SELECT id FROM topups WHERE agent_id = ANY($1::text[]) AND intent_id IS NOT NULL AND finished_at_s IS NULL ORDER BY id FOR UPDATE`,
    [[...agentIds]],
  );
}

/**
 * Closes, with `status`, the pending top-ups of these intents (at most one each: the pending-per-intent index,
 * which this probes), answering them closed in id order. A row another transaction has locked is skipped, never
 * waited for: that is an approval or a rail settling it (or closing it), whose outcome stands. The kill switch
 * locked its rows first (`lockPendingIntentTopupsOf`), so it skips none; an execution's transaction, which holds
 * ledger rows an approval's settlement locks after the top-up, thus cannot deadlock with it.
 */
export async function closePendingOfIntents(tx: Tx, intentIds: readonly string[], status: 'expired', nowS: number): Promise<TopupRow[]> {
  if (intentIds.length === 0) return [];
  const { rows } = await tx.query<TopupRow>(
    `UPDATE topups SET status = $2, updated_at_s = $3, finished_at_s = $3
      WHERE id IN (SELECT id FROM topups WHERE intent_id = ANY($1::text[]) AND status = 'pending_approval' ORDER BY id FOR UPDATE SKIP LOCKED)
      RETURNING *`,
    [[...intentIds], status, nowS],
  );
  return rows.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
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

// SQL of purchase approvals (migration 0019), and of the owner's list of what waits.

export type PurchaseStatus = 'pending_approval' | 'approved' | 'declined' | 'expired' | 'used';

export interface PurchaseApprovalRow {
  id: string;
  agent_id: string;
  owner_id: string;
  operation: string;
  idem_scope: string;
  idem_key: string;
  request_fingerprint: string;
  subject: 'voucher' | 'intent';
  intent: Record<string, unknown>;
  intent_id: string | null;
  amount_uc: bigint;
  merchant_id: string | null;
  merchant_name: string | null;
  merchant_domain: string | null;
  offer_id: string;
  offer_name: string;
  approval_url: string;
  status: PurchaseStatus;
  decided_by: string | null;
  hold_id: string | null;
  created_at_s: bigint;
  updated_at_s: bigint;
  expires_at_s: bigint;
  decided_at_s: bigint | null;
  used_at_s: bigint | null;
  /** When it was declined, expired or used; null while pending or approved (migration 0028). */
  closed_at_s: bigint | null;
}

export type NewPurchaseApprovalRow = Omit<PurchaseApprovalRow, 'status' | 'decided_by' | 'hold_id' | 'updated_at_s' | 'decided_at_s' | 'used_at_s' | 'closed_at_s'>;

/**
 * Inserts a pending purchase approval (what the owner is shown, kept as asked); undefined when its request
 * already has one (the unique index says so). Numbered by the database as a top-up is (`insertTopup`).
 */
export async function insertPurchaseApproval(tx: Tx, row: NewPurchaseApprovalRow): Promise<PurchaseApprovalRow | undefined> {
  const { rows } = await tx.query<PurchaseApprovalRow>(
    `INSERT INTO purchase_approvals (id, agent_id, owner_id, operation, idem_scope, idem_key, request_fingerprint, subject, intent, intent_id,
       amount_uc, merchant_id, merchant_name, merchant_domain, offer_id, offer_name, approval_url, status, created_at_s, updated_at_s, expires_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 'pending_approval', $18, $18, $19)
     ON CONFLICT (idem_scope, operation, idem_key) DO NOTHING
     RETURNING *`,
    [
      row.id, row.agent_id, row.owner_id, row.operation, row.idem_scope, row.idem_key, row.request_fingerprint, row.subject, JSON.stringify(row.intent),
      row.intent_id, row.amount_uc, row.merchant_id, row.merchant_name, row.merchant_domain, row.offer_id, row.offer_name, row.approval_url, row.created_at_s,
      row.expires_at_s,
    ],
  );
  return rows[0];
}

export async function findPurchaseApproval(db: Queryable, id: string): Promise<PurchaseApprovalRow | undefined> {
  const { rows } = await db.query<PurchaseApprovalRow>('SELECT * FROM purchase_approvals WHERE id = $1', [id]);
  return rows[0];
}

/** The approval locked for this transaction: the owner's answer, the expiry job and the hold that uses it lock it first. */
export async function lockPurchaseApproval(tx: Tx, id: string): Promise<PurchaseApprovalRow | undefined> {
  const { rows } = await tx.query<PurchaseApprovalRow>('SELECT * FROM purchase_approvals WHERE id = $1 FOR UPDATE', [id]);
  return rows[0];
}

/** A request, by its Idempotency-Key as claimed. */
export interface RequestKey {
  scope: string;
  operation: string;
  key: string;
}

/** The approval of one request, if it has one. */
export async function findPurchaseApprovalFor(db: Queryable, request: RequestKey): Promise<PurchaseApprovalRow | undefined> {
  const { rows } = await db.query<PurchaseApprovalRow>(
    'SELECT * FROM purchase_approvals WHERE idem_scope = $1 AND operation = $2 AND idem_key = $3',
    [request.scope, request.operation, request.key],
  );
  return rows[0];
}

/**
 * The approvals of these requests, locked (one statement, whatever their number), in the order of their request
 * keys, sorted here, so every batch that locks several takes them in one order (as id order did before). Each is
 * one probe of the requests' unique index (a lateral lookup, never a join, which a plan made while the table was
 * small answers by reading that index whole; see `budgetReadPart`). Returned in that order; callers find each
 * approval by its request key.
 */
export async function lockPurchaseApprovalsFor(tx: Tx, requests: readonly RequestKey[]): Promise<PurchaseApprovalRow[]> {
  if (requests.length === 0) return [];
  const sorted = [...requests].sort((a, b) => compareText(a.scope, b.scope) || compareText(a.operation, b.operation) || compareText(a.key, b.key));
  const { rows } = await tx.query<PurchaseApprovalRow>(
    `SELECT p.* FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS r(idem_scope, operation, idem_key, position)
      CROSS JOIN LATERAL (
            SELECT * FROM purchase_approvals p
             WHERE p.idem_scope = r.idem_scope AND p.operation = r.operation AND p.idem_key = r.idem_key
             LIMIT 1 FOR UPDATE) p
      ORDER BY r.position`,
    [sorted.map((r) => r.scope), sorted.map((r) => r.operation), sorted.map((r) => r.key)],
  );
  return rows;
}

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** The owner's answer: approved (usable until `expiresAtS`) or declined, from pending (or approved, for a decline). */
export async function markPurchaseDecided(tx: Tx, id: string, status: 'approved' | 'declined', decidedBy: string, expiresAtS: number, nowS: number): Promise<PurchaseApprovalRow> {
  const { rows } = await tx.query<PurchaseApprovalRow>(
    `UPDATE purchase_approvals SET status = $2, decided_by = $3, expires_at_s = $4, decided_at_s = $5, updated_at_s = $5,
            closed_at_s = CASE WHEN $2::text = 'declined' THEN $5::bigint END
      WHERE id = $1 AND closed_at_s IS NULL RETURNING *`,
    [id, status, decidedBy, expiresAtS, nowS],
  );
  if (!rows[0]) throw new Error(`purchase approval ${id} was not open when it was ${status}`);
  return rows[0];
}

export async function markPurchaseExpired(tx: Tx, id: string, nowS: number): Promise<PurchaseApprovalRow> {
  const { rows } = await tx.query<PurchaseApprovalRow>(
    `UPDATE purchase_approvals SET status = 'expired', updated_at_s = $2, closed_at_s = $2 WHERE id = $1 AND closed_at_s IS NULL RETURNING *`,
    [id, nowS],
  );
  if (!rows[0]) throw new Error(`purchase approval ${id} was not open when it expired`);
  return rows[0];
}

/**
 * Marks open approvals (approved, or still waiting when the hold passed without one) used by their holds (one
 * statement); returns how many were open and are now used. By the approvals' ids as an array, each one's hold looked
 * up in the batch's pairs: no join with them (see `recordHolds`' lot debits); open is `closed_at_s IS NULL`, as
 * migration 0028's checks tie it to the two open statuses, never the open approvals' partial index predicate.
 */
export async function markPurchasesUsed(tx: Tx, uses: ReadonlyArray<{ approvalId: string; holdId: string }>, nowS: number): Promise<number> {
  if (uses.length === 0) return 0;
  const result = await tx.query(
    `UPDATE purchase_approvals p
        SET status = 'used', used_at_s = $3, updated_at_s = $3, closed_at_s = $3,
            hold_id = (SELECT u.hold_id FROM unnest($1::text[], $2::text[]) AS u(id, hold_id) WHERE u.id = p.id)
      WHERE p.id = ANY($1::text[]) AND p.closed_at_s IS NULL`,
    [uses.map((u) => u.approvalId), uses.map((u) => u.holdId), nowS],
  );
  return result.rowCount;
}

/**
 * Opens again the approval a hold used, as it was before the hold: approved when the owner decided, else still
 * waiting (the hold passed without it). Nothing when no used approval names the hold.
 */
export async function reopenPurchaseUsedBy(tx: Tx, holdId: string, nowS: number): Promise<void> {
  await tx.query(
    `UPDATE purchase_approvals
        SET status = CASE WHEN decided_at_s IS NULL THEN 'pending_approval' ELSE 'approved' END,
            hold_id = NULL, used_at_s = NULL, closed_at_s = NULL, updated_at_s = $2
      WHERE hold_id = $1 AND status = 'used'`,
    [holdId, nowS],
  );
}

/** The approval a hold used, when the owner approved it (one the hold passed without, never decided, is none). */
export async function findApprovalUsedBy(db: Queryable, holdId: string): Promise<PurchaseApprovalRow | undefined> {
  const { rows } = await db.query<PurchaseApprovalRow>(`SELECT * FROM purchase_approvals WHERE hold_id = $1 AND status = 'used' AND decided_at_s IS NOT NULL`, [holdId]);
  return rows[0];
}

/** Pending or approved approvals past their deadline, oldest deadline first. */
export async function overduePurchaseIds(db: Queryable, nowS: number, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM purchase_approvals WHERE status IN ('pending_approval', 'approved') AND expires_at_s <= $1 ORDER BY expires_at_s LIMIT $2`,
    [nowS, limit],
  );
  return rows.map((row) => row.id);
}

/** One entry of the owner's list: a top-up or a purchase approval, with the status its deadline gives it now. */
export interface OwnerApprovalRow {
  kind: 'topup' | 'purchase';
  id: string;
  agent_id: string;
  amount_uc: bigint;
  merchant_id: string | null;
  merchant_name: string | null;
  merchant_domain: string | null;
  offer_id: string | null;
  offer_name: string | null;
  /** The resource an x402 authorize pays for (its intent's `resource`); null for a top-up and any other purchase. */
  resource: string | null;
  /** A top-up's reason (null for a purchase). */
  reason: string | null;
  /** Who asked for a top-up, as `topups.requested_by` (null for a purchase). */
  requested_by: string | null;
  status: string;
  approval_url: string;
  created_at_s: bigint;
  expires_at_s: bigint;
}

/**
 * An owner's top-ups and purchase approvals, oldest first, after `startingAfter` (an id of either, the owner's),
 * only those still waiting for the owner when `pendingOnly`. Each side reads at most one page through its own
 * index; a pending entry past its deadline reads as expired (and is not pending).
 */
/**
 * Which approvals an owner's list shows: those that wait for an answer now, the purchases approved and not used yet
 * (before their deadline), or all.
 */
export type ApprovalsShown = 'pending' | 'approved' | 'all';

export async function listOwnerApprovals(
  db: Queryable,
  query: { ownerId: string; shown: ApprovalsShown; nowS: number; ucPerUsdCent: bigint; limit: number; startingAfter?: string },
): Promise<{ items: OwnerApprovalRow[]; hasMore: boolean }> {
  const { rows } = await db.query<OwnerApprovalRow>(
    `WITH after AS (
       SELECT seq FROM topups WHERE id = $4 AND owner_id = $1
       UNION ALL SELECT seq FROM purchase_approvals WHERE id = $4 AND owner_id = $1
     ), topup AS (
       SELECT 'topup'::text AS kind, t.id, t.agent_id, t.amount_usd_cents::bigint * $6::bigint AS amount_uc,
              NULL::text AS merchant_id, NULL::text AS merchant_name, NULL::text AS merchant_domain, NULL::text AS offer_id, NULL::text AS offer_name,
              NULL::text AS resource, t.reason, t.requested_by,
              CASE WHEN t.status = 'pending_approval' AND t.expires_at_s <= $2 THEN 'expired' ELSE t.status END AS status,
              t.approval_url, t.created_at_s, t.expires_at_s, t.seq
         FROM topups t
        WHERE t.owner_id = $1 AND ($3::text = 'all' OR ($3::text = 'pending' AND t.status = 'pending_approval' AND t.expires_at_s > $2))
          AND ($4::text IS NULL OR t.seq > (SELECT seq FROM after))
        ORDER BY t.seq LIMIT $5
     ), purchase AS (
       SELECT 'purchase'::text AS kind, p.id, p.agent_id, p.amount_uc, p.merchant_id, p.merchant_name, p.merchant_domain, p.offer_id, p.offer_name,
              p.intent->>'resource' AS resource, NULL::text AS reason, NULL::text AS requested_by,
              CASE WHEN p.status IN ('pending_approval', 'approved') AND p.expires_at_s <= $2 THEN 'expired' ELSE p.status END AS status,
              p.approval_url, p.created_at_s, p.expires_at_s, p.seq
         FROM purchase_approvals p
        WHERE p.owner_id = $1
          AND ($3::text = 'all' OR (p.status = CASE $3::text WHEN 'pending' THEN 'pending_approval' ELSE 'approved' END AND p.expires_at_s > $2))
          AND ($4::text IS NULL OR p.seq > (SELECT seq FROM after))
        ORDER BY p.seq LIMIT $5
     )
     SELECT * FROM topup UNION ALL SELECT * FROM purchase ORDER BY seq LIMIT $5`,
    [query.ownerId, query.nowS, query.shown, query.startingAfter ?? null, query.limit + 1, query.ucPerUsdCent],
  );
  await refuseUnknownCursor(
    db,
    rows,
    query.startingAfter,
    'SELECT 1 FROM topups WHERE id = $1 AND owner_id = $2 UNION ALL SELECT 1 FROM purchase_approvals WHERE id = $1 AND owner_id = $2',
    [query.ownerId],
  );
  return { items: rows.slice(0, query.limit), hasMore: rows.length > query.limit };
}
