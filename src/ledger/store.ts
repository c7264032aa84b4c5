// SQL of the ledger: lots, holds, allocations, accounts and the journal. Nothing but queries.
import type { Queryable } from '../platform/db/database.ts';

export interface LotRow {
  id: string;
  agent_id: string;
  source: 'grant' | 'topup';
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

export async function insertLot(db: Queryable, lot: LotRow): Promise<LotRow> {
  const { rows } = await db.query<LotRow>(
    `INSERT INTO credit_lots (id, agent_id, source, source_ref, priority, granted_uc, remaining_uc, expires_at_s, created_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8) RETURNING *`,
    [lot.id, lot.agent_id, lot.source, lot.source_ref, lot.priority, lot.granted_uc, lot.expires_at_s, lot.created_at_s],
  );
  return rows[0]!;
}

/** Lots that can fund a hold now, in burn-down order (priority, earliest expiry, oldest), locked. */
export async function lockSpendableLots(db: Queryable, agentId: string, nowS: number): Promise<LotRow[]> {
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

export async function adjustLotRemaining(db: Queryable, lotId: string, deltaUc: bigint): Promise<void> {
  const result = await db.query('UPDATE credit_lots SET remaining_uc = remaining_uc + $2 WHERE id = $1', [lotId, deltaUc]);
  if (result.rowCount !== 1) throw new Error(`ledger invariant: lot ${lotId} vanished`);
}

export async function insertHold(db: Queryable, hold: HoldRow): Promise<void> {
  await db.query(
    `INSERT INTO holds (id, agent_id, acceptor_id, merchant_id, offer_id, category, amount_uc, captured_uc, state, expires_at_s, created_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 'held', $8, $9)`,
    [hold.id, hold.agent_id, hold.acceptor_id, hold.merchant_id, hold.offer_id, hold.category, hold.amount_uc, hold.expires_at_s, hold.created_at_s],
  );
}

export async function insertAllocations(db: Queryable, holdId: string, allocations: Array<{ lotId: string; amountUc: bigint }>): Promise<void> {
  await db.query(
    `INSERT INTO hold_allocations (hold_id, lot_id, position, amount_uc)
     SELECT $1, lot_id, position, amount_uc FROM unnest($2::text[], $3::int[], $4::bigint[]) AS a(lot_id, position, amount_uc)`,
    [holdId, allocations.map((a) => a.lotId), allocations.map((_, i) => i), allocations.map((a) => a.amountUc.toString())],
  );
}

export async function findHold(db: Queryable, holdId: string, lock = false): Promise<HoldRow | undefined> {
  const { rows } = await db.query<HoldRow>(`SELECT * FROM holds WHERE id = $1${lock ? ' FOR UPDATE' : ''}`, [holdId]);
  return rows[0];
}

export async function allocationsOf(db: Queryable, holdIds: readonly string[]): Promise<AllocationRow[]> {
  if (holdIds.length === 0) return [];
  const { rows } = await db.query<AllocationRow>('SELECT * FROM hold_allocations WHERE hold_id = ANY($1::text[]) ORDER BY hold_id, position', [holdIds]);
  return rows;
}

export async function setAllocationCaptured(db: Queryable, holdId: string, lotId: string, capturedUc: bigint): Promise<void> {
  await db.query('UPDATE hold_allocations SET captured_uc = $3 WHERE hold_id = $1 AND lot_id = $2', [holdId, lotId, capturedUc]);
}

export async function resolveHold(db: Queryable, holdId: string, state: 'captured' | 'released' | 'expired', capturedUc: bigint, nowS: number): Promise<HoldRow> {
  const { rows } = await db.query<HoldRow>(
    `UPDATE holds SET state = $2, captured_uc = $3, resolved_at_s = $4 WHERE id = $1 AND state = 'held' RETURNING *`,
    [holdId, state, capturedUc, nowS],
  );
  if (!rows[0]) throw new Error(`ledger invariant: hold ${holdId} resolved twice`);
  return rows[0];
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

export async function creditAccount(db: Queryable, accountId: string, amountUc: bigint): Promise<void> {
  await db.query(
    `INSERT INTO ledger_accounts (id, balance_uc) VALUES ($1, $2)
     ON CONFLICT (id) DO UPDATE SET balance_uc = ledger_accounts.balance_uc + EXCLUDED.balance_uc`,
    [accountId, amountUc],
  );
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

export async function holdsOfAgent(db: Queryable, agentId: string, limit: number): Promise<HoldRow[]> {
  const { rows } = await db.query<HoldRow>('SELECT * FROM holds WHERE agent_id = $1 ORDER BY seq DESC LIMIT $2', [agentId, limit]);
  return rows;
}
