// SQL of the ledger: lots, holds, allocations, accounts and the journal. Nothing but queries.
import type { Queryable, Tx } from '../platform/db/database.ts';

export interface LotRow {
  id: string;
  agent_id: string;
  source: 'grant' | 'topup' | 'refund';
  source_ref: string | null;
  priority: number;
  granted_uc: bigint;
  remaining_uc: bigint;
  expires_at_s: bigint | null;
  created_at_s: bigint;
}

export interface HoldRow {
  id: string;
  agent_id: string;
  acceptor_id: string;
  merchant_id: string | null;
  offer_id: string;
  category: string;
  amount_uc: bigint;
  captured_uc: bigint;
  state: 'held' | 'captured' | 'released' | 'expired';
  expires_at_s: bigint;
  created_at_s: bigint;
  resolved_at_s: bigint | null;
  /** Seconds after capture during which the merchant may refund (fixed at mint from the offer). */
  refund_window_s: number;
  refunded_uc: bigint;
  capture_receipt: string | null;
}

export interface RefundRow {
  id: string;
  hold_id: string;
  merchant_id: string;
  lot_id: string;
  amount_uc: bigint;
  reason: string | null;
  receipt: string | null;
  created_at_s: bigint;
}

export interface AllocationRow {
  hold_id: string;
  lot_id: string;
  position: number;
  amount_uc: bigint;
  captured_uc: bigint;
}

export interface JournalLine {
  account: string;
  amountUc: bigint;
}

/** Inserts a lot and counts it in its agent's running totals (granted, and refunded for a refund lot). */
export async function insertLot(db: Queryable, lot: LotRow): Promise<LotRow> {
  const { rows } = await db.query<LotRow>(
    `WITH lot AS (
       INSERT INTO credit_lots (id, agent_id, source, source_ref, priority, granted_uc, remaining_uc, expires_at_s, created_at_s)
       VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8) RETURNING *
     ), account AS (
       INSERT INTO agent_balances (agent_id, granted_uc, refunded_uc)
       SELECT agent_id, granted_uc, CASE WHEN source = 'refund' THEN granted_uc ELSE 0 END FROM lot
       ON CONFLICT (agent_id) DO UPDATE
         SET granted_uc = agent_balances.granted_uc + EXCLUDED.granted_uc, refunded_uc = agent_balances.refunded_uc + EXCLUDED.refunded_uc
       RETURNING 1
     )
     SELECT lot.* FROM lot, (SELECT count(*) FROM account) AS accounted`,
    [lot.id, lot.agent_id, lot.source, lot.source_ref, lot.priority, lot.granted_uc, lot.expires_at_s, lot.created_at_s],
  );
  return rows[0]!;
}

/** Lots that can fund a hold now, in burn-down order (priority, earliest expiry, oldest), locked. */
export async function lockSpendableLots(db: Tx, agentId: string, nowS: number): Promise<LotRow[]> {
  const { rows } = await db.query<LotRow>(
    `SELECT * FROM credit_lots
      WHERE agent_id = $1 AND remaining_uc > 0 AND (expires_at_s IS NULL OR expires_at_s > $2)
      ORDER BY priority, expires_at_s NULLS LAST, seq
      FOR UPDATE`,
    [agentId, nowS],
  );
  return rows;
}

export async function listLots(db: Queryable, agentId: string): Promise<LotRow[]> {
  const { rows } = await db.query<LotRow>('SELECT * FROM credit_lots WHERE agent_id = $1 ORDER BY priority, expires_at_s NULLS LAST, seq', [agentId]);
  return rows;
}

export interface BalanceTotals {
  available_uc: bigint;
  lapsed_uc: bigint;
  held_uc: bigint;
  captured_uc: bigint;
  granted_uc: bigint;
  refunded_uc: bigint;
}

/**
 * An agent's balance: its running totals, and what its lots with credit left hold now (available) or held
 * when they expired (lapsed). Reads one balance row and the lots with `remaining_uc > 0` (the burn-order
 * index), never the agent's holds.
 */
export async function readBalance(db: Queryable, agentId: string, nowS: number): Promise<BalanceTotals> {
  const { rows } = await db.query<BalanceTotals>(
    `SELECT lots.available_uc, lots.lapsed_uc,
            COALESCE(b.held_uc, 0)::bigint AS held_uc, COALESCE(b.captured_uc, 0)::bigint AS captured_uc,
            COALESCE(b.granted_uc, 0)::bigint AS granted_uc, COALESCE(b.refunded_uc, 0)::bigint AS refunded_uc
       FROM (SELECT COALESCE(SUM(remaining_uc) FILTER (WHERE expires_at_s IS NULL OR expires_at_s > $2), 0)::bigint AS available_uc,
                    COALESCE(SUM(remaining_uc) FILTER (WHERE expires_at_s <= $2), 0)::bigint AS lapsed_uc
               FROM credit_lots WHERE agent_id = $1 AND remaining_uc > 0) AS lots
       LEFT JOIN agent_balances b ON b.agent_id = $1`,
    [agentId, nowS],
  );
  return rows[0]!;
}

/**
 * Writes a new hold in one statement (one round trip): the hold, its allocations, the debit of each lot,
 * the balanced journal lines, and the agent's held total. The caller holds the agent's and the lots' row
 * locks; the agent's balance row is locked last, after its lots, as every settlement does too.
 */
export async function recordHold(db: Queryable, hold: HoldRow, allocations: ReadonlyArray<{ lotId: string; amountUc: bigint }>): Promise<void> {
  const lotIds = allocations.map((a) => a.lotId);
  const amounts = allocations.map((a) => a.amountUc.toString());
  const result = await db.query(
    `WITH alloc AS (
       SELECT lot_id, amount_uc, position - 1 AS position FROM unnest($10::text[], $11::bigint[]) WITH ORDINALITY AS a(lot_id, amount_uc, position)
     ), new_hold AS (
       INSERT INTO holds (id, agent_id, acceptor_id, merchant_id, offer_id, category, amount_uc, captured_uc, state, expires_at_s, created_at_s, refund_window_s)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 'held', $8, $9, $12) RETURNING id
     ), allocations AS (
       INSERT INTO hold_allocations (hold_id, lot_id, position, amount_uc)
       SELECT new_hold.id, alloc.lot_id, alloc.position, alloc.amount_uc FROM new_hold, alloc RETURNING lot_id
     ), debits AS (
       UPDATE credit_lots l SET remaining_uc = l.remaining_uc - alloc.amount_uc FROM alloc WHERE l.id = alloc.lot_id RETURNING l.id
     ), journal AS (
       INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s)
       SELECT $1, 'hold', 'lot:' || alloc.lot_id, -alloc.amount_uc, $9 FROM alloc
       UNION ALL
       SELECT $1, 'hold', 'hold:' || $1, alloc.amount_uc, $9 FROM alloc
       RETURNING 1
     ), account AS (
       INSERT INTO agent_balances (agent_id, held_uc) VALUES ($2, $7)
       ON CONFLICT (agent_id) DO UPDATE SET held_uc = agent_balances.held_uc + EXCLUDED.held_uc
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM debits) AS debited, (SELECT count(*) FROM allocations) AS allocated, (SELECT count(*) FROM journal) AS journaled,
            (SELECT count(*) FROM account) AS accounted`,
    [hold.id, hold.agent_id, hold.acceptor_id, hold.merchant_id, hold.offer_id, hold.category, hold.amount_uc, hold.expires_at_s, hold.created_at_s, lotIds, amounts, hold.refund_window_s],
  );
  const counts = result.rows[0] as { debited: bigint; allocated: bigint; journaled: bigint; accounted: bigint };
  const expected = BigInt(allocations.length);
  if (counts.debited !== expected || counts.allocated !== expected || counts.journaled !== 2n * expected || counts.accounted !== 1n) {
    throw new Error(`ledger invariant: hold ${hold.id} wrote ${counts.debited}/${counts.allocated}/${counts.journaled}/${counts.accounted} rows for ${expected} allocations`);
  }
}

export async function findHold(db: Queryable, holdId: string): Promise<HoldRow | undefined> {
  const { rows } = await db.query<HoldRow>('SELECT * FROM holds WHERE id = $1', [holdId]);
  return rows[0];
}

export async function lockHold(tx: Tx, holdId: string): Promise<HoldRow | undefined> {
  const { rows } = await tx.query<HoldRow>('SELECT * FROM holds WHERE id = $1 FOR UPDATE', [holdId]);
  return rows[0];
}

/** Locks holds in one statement, in one fixed order (sorted ids), for a batch that resolves them. */
export async function lockHolds(tx: Tx, holdIds: readonly string[]): Promise<void> {
  await tx.query('SELECT id FROM holds WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE', [holdIds]);
}

export async function allocationsOf(db: Queryable, holdIds: readonly string[]): Promise<AllocationRow[]> {
  if (holdIds.length === 0) return [];
  const { rows } = await db.query<AllocationRow>('SELECT * FROM hold_allocations WHERE hold_id = ANY($1::text[]) ORDER BY hold_id, position', [holdIds]);
  return rows;
}

export interface SettlementLine {
  lotId: string;
  capturedUc: bigint;
  returnedUc: bigint;
}

/**
 * Resolves a held hold in one statement (one round trip): marks it, records what each allocation had
 * captured, returns the rest to each allocation's lot, credits the earnings account, moves the hold from
 * the agent's held total to its captured total (by what was captured), and writes the balanced journal.
 * Returns the resolved row, or undefined when the hold was not held (resolved twice).
 *
 * Lock order: the hold (the caller's), its lots, the earnings account, then the agent's balance row. The
 * balance row comes last (its update waits for the lots and the account, which it names) because a hold
 * locks the agent's lots before its balance row and a refund locks the account before it: the same order
 * everywhere, so none of them can deadlock another.
 */
export async function recordSettlement(
  db: Queryable,
  settlement: { holdId: string; state: 'captured' | 'released' | 'expired'; capturedUc: bigint; earningsAccount: string; kind: string; nowS: number; receipt: string | null },
  lines: readonly SettlementLine[],
): Promise<HoldRow | undefined> {
  const { rows } = await db.query<HoldRow>(
    `WITH line AS (
       SELECT * FROM unnest($7::text[], $8::bigint[], $9::bigint[]) AS l(lot_id, captured_uc, returned_uc)
     ), resolved AS (
       UPDATE holds SET state = $2, captured_uc = $3, resolved_at_s = $6, capture_receipt = $10 WHERE id = $1 AND state = 'held' RETURNING *
     ), captured AS (
       UPDATE hold_allocations a SET captured_uc = line.captured_uc FROM line, resolved
        WHERE a.hold_id = resolved.id AND a.lot_id = line.lot_id AND line.captured_uc > 0 RETURNING 1
     ), returned AS (
       UPDATE credit_lots c SET remaining_uc = c.remaining_uc + line.returned_uc FROM line, resolved
        WHERE c.id = line.lot_id AND line.returned_uc > 0 RETURNING 1
     ), earned AS (
       INSERT INTO ledger_accounts (id, balance_uc) SELECT $4, $3 FROM resolved WHERE $3 > 0
       ON CONFLICT (id) DO UPDATE SET balance_uc = ledger_accounts.balance_uc + EXCLUDED.balance_uc RETURNING 1
     ), journal AS (
       INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s)
       SELECT $1 || ':' || $5, $5, entries.account, entries.amount_uc, $6 FROM resolved, (
         SELECT 'hold:' || $1 AS account, -line.returned_uc AS amount_uc FROM line WHERE line.returned_uc > 0
         UNION ALL SELECT 'lot:' || line.lot_id, line.returned_uc FROM line WHERE line.returned_uc > 0
         UNION ALL SELECT 'hold:' || $1, -$3::bigint WHERE $3 > 0
         UNION ALL SELECT $4, $3::bigint WHERE $3 > 0
       ) AS entries
       RETURNING 1
     ), account AS (
       UPDATE agent_balances b SET held_uc = b.held_uc - resolved.amount_uc, captured_uc = b.captured_uc + resolved.captured_uc
         FROM resolved
        WHERE b.agent_id = resolved.agent_id AND (SELECT count(*) FROM returned) >= 0 AND (SELECT count(*) FROM earned) >= 0
       RETURNING 1
     )
     SELECT resolved.*, (SELECT count(*) FROM account) AS accounted
       FROM resolved, (SELECT count(*) FROM captured) c, (SELECT count(*) FROM returned) r, (SELECT count(*) FROM earned) e, (SELECT count(*) FROM journal) j`,
    [
      settlement.holdId,
      settlement.state,
      settlement.capturedUc,
      settlement.earningsAccount,
      settlement.kind,
      settlement.nowS,
      lines.map((l) => l.lotId),
      lines.map((l) => l.capturedUc.toString()),
      lines.map((l) => l.returnedUc.toString()),
      settlement.receipt,
    ],
  );
  const row = rows[0];
  if (!row) return undefined;
  const { accounted, ...hold } = row as HoldRow & { accounted: bigint };
  if (accounted !== 1n) throw new Error(`ledger invariant: hold ${settlement.holdId} settled without its agent's balance row`);
  return hold;
}

/** Held holds of one agent (or of everyone) whose deadline has passed, oldest deadline first. */
export async function dueHoldIds(db: Queryable, nowS: number, options: { agentId?: string; holdId?: string; limit: number }): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM holds
      WHERE state = 'held' AND expires_at_s <= $1
        AND ($2::text IS NULL OR agent_id = $2) AND ($3::text IS NULL OR id = $3)
      ORDER BY expires_at_s, seq LIMIT $4`,
    [nowS, options.agentId ?? null, options.holdId ?? null, options.limit],
  );
  return rows.map((r) => r.id);
}

/** Credit the agent's holds took in the cap window: open holds count in full, captured ones by what was captured. */
export async function spentInWindow(db: Queryable, agentId: string, sinceS: number): Promise<bigint> {
  const { rows } = await db.query<{ spent: bigint }>(
    `SELECT COALESCE(SUM(CASE state WHEN 'held' THEN amount_uc WHEN 'captured' THEN captured_uc ELSE 0 END), 0)::bigint AS spent
       FROM holds WHERE agent_id = $1 AND created_at_s > $2`,
    [agentId, sinceS],
  );
  return rows[0]!.spent;
}

export async function accountBalance(db: Queryable, accountId: string): Promise<bigint> {
  const { rows } = await db.query<{ balance_uc: bigint }>('SELECT balance_uc FROM ledger_accounts WHERE id = $1', [accountId]);
  return rows[0]?.balance_uc ?? 0n;
}

export async function appendJournal(db: Queryable, operationId: string, kind: string, lines: readonly JournalLine[], nowS: number): Promise<void> {
  const nonZero = lines.filter((l) => l.amountUc !== 0n);
  const sum = nonZero.reduce((total, l) => total + l.amountUc, 0n);
  // TigerBeetle's rule in the code path: an operation that does not balance stops here.
  if (sum !== 0n) throw new Error(`ledger invariant: journal operation ${operationId} sums to ${sum}`);
  if (nonZero.length === 0) return;
  await db.query(
    `INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s)
     SELECT $1, $2, account, amount_uc, $5 FROM unnest($3::text[], $4::bigint[]) AS j(account, amount_uc)`,
    [operationId, kind, nonZero.map((l) => l.account), nonZero.map((l) => l.amountUc.toString()), nowS],
  );
}


/** The earnings (or revenue) account's balance, locked: refunds take from it and must not overdraw it. */
export async function lockAccountBalance(tx: Tx, accountId: string): Promise<bigint> {
  const { rows } = await tx.query<{ balance_uc: bigint }>('SELECT balance_uc FROM ledger_accounts WHERE id = $1 FOR UPDATE', [accountId]);
  return rows[0]?.balance_uc ?? 0n;
}

export async function refundsOf(db: Queryable, holdIds: readonly string[]): Promise<RefundRow[]> {
  if (holdIds.length === 0) return [];
  const { rows } = await db.query<RefundRow>('SELECT * FROM refunds WHERE hold_id = ANY($1::text[]) ORDER BY hold_id, seq', [holdIds]);
  return rows;
}

/** The lots a hold's captured credit came from (its allocations with a captured part), in burn order. */
export async function capturedSourceLots(db: Queryable, holdId: string): Promise<LotRow[]> {
  const { rows } = await db.query<LotRow>(
    `SELECT l.* FROM hold_allocations a JOIN credit_lots l ON l.id = a.lot_id WHERE a.hold_id = $1 AND a.captured_uc > 0 ORDER BY a.position`,
    [holdId],
  );
  return rows;
}

/**
 * Records a refund whose lot the caller has just inserted: the refund row, the hold's refunded total and
 * the earnings debit, each guarded so that the hold never refunds past its capture and the account never
 * goes negative. Returns false (having written nothing the caller must keep) when a guard refused.
 */
export async function recordRefund(db: Queryable, refund: RefundRow, earningsAccount: string): Promise<boolean> {
  const { rows } = await db.query<{ refunded: bigint; debited: bigint }>(
    `WITH refunded AS (
       UPDATE holds SET refunded_uc = refunded_uc + $5 WHERE id = $2 AND state = 'captured' AND refunded_uc + $5 <= captured_uc RETURNING id
     ), debited AS (
       UPDATE ledger_accounts SET balance_uc = balance_uc - $5 WHERE id = $9 AND balance_uc >= $5 AND EXISTS (SELECT 1 FROM refunded) RETURNING id
     ), inserted AS (
       INSERT INTO refunds (id, hold_id, merchant_id, lot_id, amount_uc, reason, receipt, created_at_s)
       SELECT $1, $2, $3, $4, $5, $6, $7, $8 FROM refunded, debited RETURNING id
     )
     SELECT (SELECT count(*) FROM refunded) AS refunded, (SELECT count(*) FROM inserted) AS debited`,
    [refund.id, refund.hold_id, refund.merchant_id, refund.lot_id, refund.amount_uc, refund.reason, refund.receipt, refund.created_at_s, earningsAccount],
  );
  return rows[0]!.refunded === 1n && rows[0]!.debited === 1n;
}
