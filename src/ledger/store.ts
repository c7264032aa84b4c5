// SQL of the ledger: lots, holds, allocations and accounts. Nothing but queries. Journal entries are
// written only through ./journal.ts: a statement that journals takes a BalancedJournal and embeds its insert.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { budgetChargeParts, budgetGiveBackPart, budgetReadPart, sendBudgetGiveBack, budgetUsageFrom, type BudgetChargeRow, type BudgetPeriodKey, type BudgetUsageRow } from '../policy/budget-usage.ts';
import type { EventsWrite } from '../events/outbox.ts';
import { journalInsert, type BalancedJournal, type JournalKind } from './journal.ts';
import { refuseUnknownCursor } from '../platform/db/paging.ts';

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
  /** The agent whose lots fund the hold (the root of agent_id's tree) and whose running totals count it. */
  payer_id: string;
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
  /** The agent's mandate version in force when the hold was taken, and its hash (evidence names it). */
  mandate_version: number | null;
  mandate_hash: string | null;
  /** What the hold was bought with, as issued: the voucher, or an x402 attestation (none for an execution). */
  voucher: string | null;
  /** What was bought, as it was sold (the offer at mint; the service and action of an execution). */
  offer_snapshot: Record<string, unknown> | null;
  /**
   * Set when a freeze or a retirement released the hold and withdrew its voucher (a capture then answers voucher_revoked);
   * absent from a hold being written, which is never revoked.
   */
  revoked_at_s?: bigint | null;
  revocation_reason?: string | null;
  /**
   * The budget periods the hold counts in, as stored (each `[agent_id or null for the hold's own, budget_id,
   * period_start_s]`, migration 0026), or null for none; absent from a hold being written, whose charges are
   * given apart (`recordHolds`).
   */
  budget_charges?: unknown[] | null;
  /**
   * A delegate's ancestors' mandate versions in force when the hold was taken, root first (`[agent_id, version,
   * hash]`, migration 0037); null for a root's hold, and for a delegate's hold taken before they were recorded.
   */
  ancestor_mandates?: AncestorMandate[] | null;
}

/** An ancestor's mandate version as a delegate's hold records it: `[agent_id, version, hash]`. */
export type AncestorMandate = [agentId: string, version: number, hash: string | null];

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

/**
 * The lots that can fund a hold now by several agents: their payers' (a root pays for itself, a delegate's root
 * for the delegate; resolved in the statement), each payer's in burn-down order (priority, earliest expiry,
 * oldest), locked, and then the payers' running-total rows (`agent_balances`, the lock order: lots, then
 * balance rows), so the hold statement that follows begins with its payers' locks held and finds their budget
 * rows where its snapshot says they are (src/policy/budget-usage.ts); and, in the same statement (one round
 * trip, after the agents' rows are locked, so the totals are the ones their holds left), the running totals of
 * the budget periods `budgetPeriods`. Every payer's lots in one statement: a second statement for a payer found
 * later would wait for lots while holding balance rows, which a settlement (lots, then balance rows) or a refund
 * (its earnings account, then its payer's balance row) waiting for those rows turns into a deadlock (found from
 * outside). The lots are keyed by payer; a payer with none spendable has no entry.
 */
export async function lockSpendableLotsOf(
  tx: Tx,
  agentIds: readonly string[],
  nowS: number,
  budgetPeriods: readonly BudgetPeriodKey[] = [],
): Promise<{ lots: Map<string, LotRow[]>; budgets: ReturnType<typeof budgetUsageFrom> }> {
  const lots = new Map<string, LotRow[]>();
  if (agentIds.length === 0) return { lots, budgets: new Map() };
  // The payers as an array computed once (an initplan), so the lots are still probed by their burn-order index.
  const payerIds = `ARRAY(SELECT DISTINCT ${PAYER_OF('k.id')} FROM unnest($1::text[]) AS k(id))`;
  const spendable = `SELECT * FROM credit_lots
      WHERE agent_id = ANY(${payerIds}) AND remaining_uc > 0 AND (expires_at_s IS NULL OR expires_at_s > $2)
      ORDER BY agent_id, priority, expires_at_s NULLS LAST, seq
      FOR UPDATE`;
  // The payers' balance rows, after the lots (a condition naming `lot` makes the planner lock those first); the
  // statement's answer names this part, so it runs.
  const payers = `payer_locked AS (
       SELECT agent_id FROM agent_balances WHERE agent_id = ANY(${payerIds}) AND (SELECT count(*) FROM lot) >= 0 ORDER BY agent_id FOR UPDATE
     )`;
  if (budgetPeriods.length === 0) {
    const { rows } = await tx.query<LotRow>(
      `WITH lot AS (${spendable}), ${payers}
       SELECT * FROM lot WHERE (SELECT count(*) FROM payer_locked) >= 0 ORDER BY agent_id, priority, expires_at_s NULLS LAST, seq`,
      [[...agentIds], nowS],
    );
    for (const row of rows) lotsOfPayer(lots, row.agent_id).push(row);
    return { lots, budgets: new Map() };
  }
  // Lots and budget rows in one result: `budget_id` tells them apart; lots come first, in burn-down order.
  const read = budgetReadPart(budgetPeriods, 3);
  const { rows } = await tx.query<LotRow & { seq: bigint; budget_id: string | null; period_start_s: bigint | null; alerted_pct: number | null }>(
    `WITH lot AS (${spendable}), ${payers}, ${read.sql}
     SELECT * FROM (
       SELECT 0 AS part, id, agent_id, source, source_ref, priority, granted_uc, remaining_uc, expires_at_s, created_at_s, seq,
              NULL::text AS budget_id, NULL::bigint AS period_start_s, NULL::int AS alerted_pct FROM lot
        WHERE (SELECT count(*) FROM payer_locked) >= 0
       UNION ALL
       SELECT 1, NULL, agent_id, NULL, NULL, NULL, NULL, spent_uc, NULL, NULL, NULL, budget_id, period_start_s, alerted_pct FROM budget_read
     ) AS result
     ORDER BY part, agent_id, priority, expires_at_s NULLS LAST, seq`,
    [[...agentIds], nowS, ...read.params],
  );
  const budgetRows: BudgetUsageRow[] = [];
  for (const row of rows) {
    if (row.budget_id === null) {
      const { budget_id: _budget, period_start_s: _period, alerted_pct: _alerted, part: _part, ...lot } = row as typeof row & { part: number };
      lotsOfPayer(lots, row.agent_id).push(lot);
    } else {
      budgetRows.push({ agent_id: row.agent_id, budget_id: row.budget_id, period_start_s: row.period_start_s!, spent_uc: row.remaining_uc, alerted_pct: row.alerted_pct! });
    }
  }
  return { lots, budgets: budgetUsageFrom(budgetRows) };
}

function lotsOfPayer(lots: Map<string, LotRow[]>, payerId: string): LotRow[] {
  let list = lots.get(payerId);
  if (!list) lots.set(payerId, (list = []));
  return list;
}

/** Lots less what allocations (not yet written) take from them, in the same order. */
export function lessTaken(lots: readonly LotRow[], allocations: ReadonlyArray<{ lotId: string; amountUc: bigint }>): LotRow[] {
  const takenUc = new Map<string, bigint>();
  for (const a of allocations) takenUc.set(a.lotId, (takenUc.get(a.lotId) ?? 0n) + a.amountUc);
  return lots.map((lot) => (takenUc.has(lot.id) ? { ...lot, remaining_uc: lot.remaining_uc - takenUc.get(lot.id)! } : lot));
}

/** The payer of an agent's holds, in SQL: the root of its tree (the agent itself for a root, or an unknown id). */
const PAYER_OF = (agentId: string) => `COALESCE((SELECT ancestor_ids[1] FROM agents WHERE id = ${agentId}), ${agentId})`;
const PAYER_OF_$1 = PAYER_OF('$1');

/** A lot's place in burn-down order, as the columns of one comparable row (a lot that never expires after every one that does). */
const BURN_ORDER = 'priority, COALESCE(expires_at_s, 9223372036854775807), seq';

/**
 * A page of the lots that fund an agent (its root's, for a delegate), in burn-down order: up to `limit` after the
 * lot `startingAfter` (one of the same payer's; another is 400). Every refund adds a lot, so a busy agent's list
 * is long: it pages as every other list does.
 */
export async function listLots(db: Queryable, agentId: string, page: { limit: number; startingAfter?: string }): Promise<{ items: LotRow[]; hasMore: boolean }> {
  const { rows } = await db.query<LotRow>(
    `SELECT * FROM credit_lots WHERE agent_id = ${PAYER_OF_$1}
        AND ($2::text IS NULL OR (${BURN_ORDER}) > (SELECT ${BURN_ORDER} FROM credit_lots WHERE id = $2 AND agent_id = ${PAYER_OF_$1}))
      ORDER BY priority, expires_at_s NULLS LAST, seq LIMIT $3`,
    [agentId, page.startingAfter ?? null, page.limit + 1],
  );
  await refuseUnknownCursor(db, rows, page.startingAfter, `SELECT 1 FROM credit_lots WHERE id = $1 AND agent_id = ${PAYER_OF_$1.replaceAll('$1', '$2')}`, [agentId]);
  return { items: rows.slice(0, page.limit), hasMore: rows.length > page.limit };
}

export interface BalanceTotals {
  /** Whose totals these are: the agent's root for a delegate, the agent itself otherwise. */
  payer_id: string;
  available_uc: bigint;
  lapsed_uc: bigint;
  held_uc: bigint;
  captured_uc: bigint;
  granted_uc: bigint;
  refunded_uc: bigint;
}

/**
 * An agent's balance: its running totals, and what its lots with credit left hold now (available) or held
 * when they expired (lapsed); a delegate's are its root's. Reads the agent's row, one balance row and the
 * lots with `remaining_uc > 0` (the burn-order index), never the agent's holds.
 */
export async function readBalance(db: Queryable, agentId: string, nowS: number): Promise<BalanceTotals> {
  const { rows } = await db.query<BalanceTotals>(
    `WITH payer AS (SELECT ${PAYER_OF_$1} AS id)
     SELECT payer.id AS payer_id, lots.available_uc, lots.lapsed_uc,
            COALESCE(b.held_uc, 0)::bigint AS held_uc, COALESCE(b.captured_uc, 0)::bigint AS captured_uc,
            COALESCE(b.granted_uc, 0)::bigint AS granted_uc, COALESCE(b.refunded_uc, 0)::bigint AS refunded_uc
       FROM (SELECT COALESCE(SUM(remaining_uc) FILTER (WHERE expires_at_s IS NULL OR expires_at_s > $2), 0)::bigint AS available_uc,
                    COALESCE(SUM(remaining_uc) FILTER (WHERE expires_at_s <= $2), 0)::bigint AS lapsed_uc
               FROM credit_lots WHERE agent_id = (SELECT id FROM payer) AND remaining_uc > 0) AS lots
       CROSS JOIN payer
       LEFT JOIN agent_balances b ON b.agent_id = payer.id`,
    [agentId, nowS],
  );
  return rows[0]!;
}

/** A new hold and the lots it takes credit from, in burn-down order. */
export interface NewHold {
  hold: HoldRow;
  allocations: ReadonlyArray<{ lotId: string; amountUc: bigint }>;
}

/**
 * Records new holds in one statement (one round trip, whatever their number): each hold and its
 * allocations, every lot's debit (summed over the holds that take from it), the holds' balanced journal
 * (lot → hold, per allocation) and each agent's held total; with `charges`, each budget period's running total
 * (`periodsWithRows`: the periods whose row the caller read, by `budgetPeriodKey`; `budgetChargeParts`: the caller
 * locked the payers' balance rows with their lots, before this statement began); with
 * `events` (the outbox's part, given the number of its first parameter), the events of the holds too. The caller
 * holds the agents' and the lots' row locks; the agents' balance rows are locked last, after their lots, as every
 * settlement does too.
 *
 * The statement checks itself: it counts the rows each part wrote against what it was given, and a wrong count
 * raises `ledger invariant: …` (`ledger_invariant`, migration 0027), which aborts the transaction. So it is sent
 * without waiting for its answer (`Tx.send`): the transaction's next statements, its answers and COMMIT, follow
 * it in the same round trip, and its failure is theirs.
 */
export function recordHolds(
  tx: Tx,
  holds: readonly NewHold[],
  journal: BalancedJournal,
  charges: readonly BudgetChargeRow[],
  periodsWithRows: ReadonlySet<string>,
  events?: (firstParameter: number) => EventsWrite,
): void {
  if (holds.length === 0) return;
  const allocations = holds.flatMap(({ hold, allocations }) => allocations.map((a, position) => ({ holdId: hold.id, lotId: a.lotId, position, amountUc: a.amountUc })));
  const createdAtS = holds[0]!.hold.created_at_s;
  if (holds.some(({ hold }) => hold.created_at_s !== createdAtS)) throw new Error('recordHolds: the holds of one call share one creation time');
  // The statement's own parameters are $1…$21; its parts' follow.
  const firstPartParameter = 22;
  const journaled = journalInsert(journal, Number(createdAtS), firstPartParameter);
  // Budget charges only when a hold counts in a budget: each hold's periods go in its own row (budget_charges);
  // the running totals' parts are in the statement only when there is one.
  const budgets = budgetChargeParts(charges, holds.map(({ hold }) => ({ id: hold.id, agentId: hold.agent_id })), periodsWithRows, 'account', firstPartParameter + journaled.params.length);
  const counting = charges.length > 0;
  const evented = events?.(firstPartParameter + journaled.params.length + (counting ? budgets.params.length : 0));
  const expectedParameter = firstPartParameter + journaled.params.length + (counting ? budgets.params.length : 0) + (evented?.params.length ?? 0);
  // What each part must have written, in the order of the statement's counts: holds, lots debited,
  // allocations, journal lines, balance rows (one per payer), budget charges, budget periods, events.
  const expected = [
    holds.length,
    new Set(allocations.map((a) => a.lotId)).size,
    allocations.length,
    journal.entries.length,
    new Set(holds.map(({ hold }) => hold.payer_id)).size,
    charges.length,
    budgets.periods,
    evented?.envelopes.length ?? 0,
  ];
  tx.send(
    `WITH h AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::int[],
                            $15::int[], $16::text[], $17::text[], $18::jsonb[], $19::text[], $20::jsonb[], $21::jsonb[])
         WITH ORDINALITY AS h(id, agent_id, acceptor_id, merchant_id, offer_id, category, amount_uc, expires_at_s, refund_window_s,
                              mandate_version, mandate_hash, voucher, offer_snapshot, payer_id, budget_charges, ancestor_mandates, position)
     ), alloc AS (
       SELECT * FROM unnest($10::text[], $11::text[], $12::int[], $13::bigint[]) AS a(hold_id, lot_id, position, amount_uc)
     ), new_holds AS (
       INSERT INTO holds (id, agent_id, payer_id, acceptor_id, merchant_id, offer_id, category, amount_uc, captured_uc, state, expires_at_s, created_at_s, refund_window_s,
                          mandate_version, mandate_hash, voucher, offer_snapshot, budget_charges, ancestor_mandates)
       SELECT id, agent_id, payer_id, acceptor_id, merchant_id, offer_id, category, amount_uc, 0, 'held', expires_at_s, $14, refund_window_s,
              mandate_version, mandate_hash, voucher, offer_snapshot, budget_charges, ancestor_mandates FROM h ORDER BY position
       RETURNING id, budget_charges
     ), allocations AS (
       INSERT INTO hold_allocations (hold_id, lot_id, position, amount_uc)
       SELECT alloc.hold_id, alloc.lot_id, alloc.position, alloc.amount_uc FROM alloc JOIN new_holds ON new_holds.id = alloc.hold_id RETURNING lot_id
     ), debits AS (
       -- By the lots' ids as an array, each lot's debit looked up in the batch's allocations: no join, so no plan
       -- reads the lots' primary key whole (see the settlement's holds, \`recordSettlements\`).
       UPDATE credit_lots l SET remaining_uc = l.remaining_uc - (SELECT SUM(a.amount_uc)::bigint FROM alloc a WHERE a.lot_id = l.id)
        WHERE l.id = ANY($11::text[]) RETURNING l.id
     ), journal AS (
       ${journaled.sql}
       RETURNING 1
     ), account AS (
       INSERT INTO agent_balances (agent_id, held_uc)
       SELECT payer_id, SUM(amount_uc)::bigint FROM h GROUP BY payer_id ORDER BY payer_id
       ON CONFLICT (agent_id) DO UPDATE SET held_uc = agent_balances.held_uc + EXCLUDED.held_uc
       RETURNING 1
     )${counting ? `, ${budgets.sql}` : ''}${evented ? `, ${evented.sql}` : ''}
     SELECT ledger_invariant(wrote = expected,
              format('%s holds wrote (holds, lots debited, allocations, journal lines, balance rows, budget charges, budget periods, events) %s, not %s',
                     expected[1], wrote, expected))
       FROM (SELECT ARRAY[(SELECT count(*) FROM new_holds), (SELECT count(*) FROM debits), (SELECT count(*) FROM allocations),
                          (SELECT count(*) FROM journal), (SELECT count(*) FROM account),
                          ${counting ? `(SELECT COALESCE(SUM(jsonb_array_length(budget_charges)), 0) FROM new_holds)::bigint` : '0::bigint'},
                          ${counting ? budgets.counted : '0::bigint'},
                          ${evented ? '(SELECT count(*) FROM event_row)' : '0::bigint'}] AS wrote,
                    $${expectedParameter}::bigint[] AS expected) AS checked`,
    [
      holds.map(({ hold }) => hold.id),
      holds.map(({ hold }) => hold.agent_id),
      holds.map(({ hold }) => hold.acceptor_id),
      holds.map(({ hold }) => hold.merchant_id),
      holds.map(({ hold }) => hold.offer_id),
      holds.map(({ hold }) => hold.category),
      holds.map(({ hold }) => hold.amount_uc.toString()),
      holds.map(({ hold }) => hold.expires_at_s.toString()),
      holds.map(({ hold }) => hold.refund_window_s),
      allocations.map((a) => a.holdId),
      allocations.map((a) => a.lotId),
      allocations.map((a) => a.position),
      allocations.map((a) => a.amountUc.toString()),
      createdAtS,
      holds.map(({ hold }) => hold.mandate_version),
      holds.map(({ hold }) => hold.mandate_hash),
      holds.map(({ hold }) => hold.voucher),
      holds.map(({ hold }) => (hold.offer_snapshot === null ? null : JSON.stringify(hold.offer_snapshot))),
      holds.map(({ hold }) => hold.payer_id),
      budgets.columns,
      holds.map(({ hold }) => (hold.ancestor_mandates ? JSON.stringify(hold.ancestor_mandates) : null)),
      ...journaled.params,
      ...(counting ? budgets.params : []),
      ...(evented ? evented.params : []),
      expected,
    ],
  );
}

export async function findHold(db: Queryable, holdId: string): Promise<HoldRow | undefined> {
  const { rows } = await db.query<HoldRow>('SELECT * FROM holds WHERE id = $1', [holdId]);
  return rows[0];
}

export async function findHolds(db: Queryable, holdIds: readonly string[]): Promise<HoldRow[]> {
  if (holdIds.length === 0) return [];
  const { rows } = await db.query<HoldRow>('SELECT * FROM holds WHERE id = ANY($1::text[])', [[...new Set(holdIds)]]);
  return rows;
}

export async function lockHold(tx: Tx, holdId: string): Promise<HoldRow | undefined> {
  const { rows } = await tx.query<HoldRow>('SELECT * FROM holds WHERE id = $1 FOR UPDATE', [holdId]);
  return rows[0];
}

/**
 * Locks holds in sorted order (as lockHolds) and reads their allocations in the same statement (one round
 * trip): what a settlement pass needs before it decides. `skipLocked`: leaves out one another transaction holds,
 * for a caller that already holds lots or balance rows, which the holder of a hold takes after it.
 */
export async function lockHoldsWithAllocations(tx: Tx, holdIds: readonly string[], options: { skipLocked?: boolean } = {}): Promise<{ holds: Map<string, HoldRow>; allocations: AllocationRow[] }> {
  if (holdIds.length === 0) return { holds: new Map(), allocations: [] };
  const { rows } = await tx.query<HoldRow & { allocation_rows: Array<{ lot_id: string; position: number; amount_uc: string; captured_uc: string }> }>(
    `SELECT h.*, (SELECT COALESCE(json_agg(json_build_object('lot_id', a.lot_id, 'position', a.position, 'amount_uc', a.amount_uc::text, 'captured_uc', a.captured_uc::text) ORDER BY a.position), '[]'::json)
                    FROM hold_allocations a WHERE a.hold_id = h.id) AS allocation_rows
       FROM holds h WHERE h.id = ANY($1::text[]) ORDER BY h.id FOR UPDATE OF h${options.skipLocked ? ' SKIP LOCKED' : ''}`,
    [[...new Set(holdIds)]],
  );
  const holds = new Map<string, HoldRow>();
  const allocations: AllocationRow[] = [];
  for (const { allocation_rows: allocationRows, ...hold } of rows) {
    holds.set(hold.id, hold);
    for (const a of allocationRows) allocations.push({ hold_id: hold.id, lot_id: a.lot_id, position: a.position, amount_uc: BigInt(a.amount_uc), captured_uc: BigInt(a.captured_uc) });
  }
  return { holds, allocations };
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

/** One hold to resolve, and what each of its allocations captures and returns. */
export interface Settlement {
  holdId: string;
  state: 'captured' | 'released' | 'expired';
  capturedUc: bigint;
  earningsAccount: string;
  receipt: string | null;
  /** When it resolved: now, or for an expired hold its deadline, whenever the sweeper reclaimed it (a settled fact reads the same every time). */
  resolvedAtS: bigint;
  lines: readonly SettlementLine[];
  /** The hold counted in budget periods (its `budget_charges`), which its uncaptured rest goes back to. */
  budgetCharged: boolean;
}

/** Locks holds in one fixed order (sorted ids), so batches on any instance cannot deadlock on them. */
export async function lockHolds(tx: Tx, holdIds: readonly string[]): Promise<Map<string, HoldRow>> {
  if (holdIds.length === 0) return new Map();
  const { rows } = await tx.query<HoldRow>('SELECT * FROM holds WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE', [[...new Set(holdIds)]]);
  return new Map(rows.map((row) => [row.id, row]));
}

/**
 * Resolves held holds in one statement whatever their number: it locks the lots they return credit to in
 * the order every hold locks lots (agent, then burn-down order), so batches never deadlock; marks each hold
 * (its state, captured amount, receipt and resolution time as the caller computed them: `Settlement`),
 * records what each allocation captured, returns the rest to the lots (summed per lot), credits the earnings
 * accounts, writes the settlements' balanced journal and updates the agents' running totals, the accounts and
 * totals in sorted order; with `events` (the outbox's part, given the number of its first parameter), the
 * settlements' events too.
 *
 * The statement checks itself, as the holds' does (`recordHolds`): a hold that was no longer held, a balance
 * row, journal line or event that was not written raises `ledger invariant: …`, which aborts the transaction (its journal must not commit). So it is sent without
 * waiting for its answer (`Tx.send`): nothing reads its rows, and the transaction's answers and COMMIT follow it
 * in the same round trip.
 *
 * Lock order: the holds (the caller's), their lots, the earnings accounts, then the agents' balance rows.
 * Inside the statement the order is forced as its other parts do it: a part that must come later names the
 * earlier one in a condition that is always true (`(SELECT count(*) FROM part) >= 0`), which the planner runs
 * first, once. A balance row comes last because a hold locks the agent's lots before its balance row and a
 * refund locks the account before it: the same order everywhere, so none of them can deadlock another. The
 * budget periods the settled holds counted in get their uncaptured rest back in the statement that follows
 * (`sendBudgetGiveBack`), which begins after this one took the balance rows that guard them
 * (src/policy/budget-usage.ts).
 */
export function recordSettlements(
  tx: Tx,
  settlements: readonly Settlement[],
  journal: BalancedJournal,
  nowS: number,
  events?: (firstParameter: number) => EventsWrite,
): void {
  if (settlements.length === 0) return;
  const lines = settlements.flatMap((s) => s.lines.map((line) => ({ holdId: s.holdId, ...line })));
  const returning = [...new Set(lines.filter((line) => line.returnedUc > 0n).map((line) => line.lotId))];
  const journaled = journalInsert(journal, nowS, 12);
  const evented = events?.(12 + journaled.params.length);
  const expectedParameter = 12 + journaled.params.length + (evented?.params.length ?? 0);
  // What the statement must have written: every hold resolved, one balance row per payer beyond those
  // (so 0), every journal line, every event.
  const expected = [settlements.length, 0, journal.entries.length, evented?.envelopes.length ?? 0];
  tx.send(
    `WITH lots_locked AS (
       SELECT id FROM credit_lots WHERE id = ANY($11::text[]) ORDER BY agent_id, priority, expires_at_s NULLS LAST, seq FOR UPDATE
     ), s AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $10::bigint[])
         AS s(hold_id, state, captured_uc, earnings_account, receipt, resolved_at_s)
     ), line AS (
       SELECT * FROM unnest($6::text[], $7::text[], $8::bigint[], $9::bigint[]) AS l(hold_id, lot_id, captured_uc, returned_uc)
     ), resolved AS (
       -- Each hold by its key, still held: unresolved, which the table's check ties to state = 'held'. Not
       -- that predicate itself: it is the open holds' partial indexes', and a plan made while few holds were
       -- open read one of them whole (every open hold) on every settlement as they grew. Nor a join with \`s\`:
       -- a join lets the planner read the primary key whole in key order (for a merge join, or beside a hash
       -- join once sequential scans are priced out), which a plan made on a young table did on every settlement
       -- for the connection's life; the ids as an array are a key the scan must probe, and each hold's new
       -- values are looked up in \`s\` (a batch's few rows).
       UPDATE holds h SET (state, captured_uc, capture_receipt, resolved_at_s) =
              (SELECT s.state, s.captured_uc, s.receipt, s.resolved_at_s FROM s WHERE s.hold_id = h.id)
        WHERE h.id = ANY($1::text[]) AND h.resolved_at_s IS NULL RETURNING h.*
     ), done AS (
       SELECT s.* FROM s JOIN resolved ON resolved.id = s.hold_id
     ), done_line AS (
       SELECT line.* FROM line JOIN resolved ON resolved.id = line.hold_id
     ), captured AS (
       -- By the holds' ids as an array, as above: a join with \`done_line\` read the allocations' lot index whole.
       UPDATE hold_allocations a SET captured_uc = (SELECT d.captured_uc FROM done_line d WHERE d.hold_id = a.hold_id AND d.lot_id = a.lot_id)
        WHERE a.hold_id = ANY($1::text[]) AND (SELECT d.captured_uc FROM done_line d WHERE d.hold_id = a.hold_id AND d.lot_id = a.lot_id) > 0
       RETURNING 1
     ), returned AS (
       -- The lots given credit back ($11), each one's sum looked up in the resolved holds' lines: no join, as above.
       UPDATE credit_lots c SET remaining_uc = c.remaining_uc + (SELECT SUM(d.returned_uc)::bigint FROM done_line d WHERE d.lot_id = c.id AND d.returned_uc > 0)
        WHERE c.id = ANY($11::text[]) AND (SELECT count(*) FROM lots_locked) >= 0
          AND (SELECT SUM(d.returned_uc) FROM done_line d WHERE d.lot_id = c.id AND d.returned_uc > 0) > 0
       RETURNING 1
     ), earned AS (
       INSERT INTO ledger_accounts (id, balance_uc)
       SELECT earnings_account, SUM(captured_uc)::bigint FROM done WHERE captured_uc > 0 AND (SELECT count(*) FROM lots_locked) >= 0
        GROUP BY earnings_account ORDER BY earnings_account
       ON CONFLICT (id) DO UPDATE SET balance_uc = ledger_accounts.balance_uc + EXCLUDED.balance_uc RETURNING 1
     ), journal AS (
       ${journaled.sql}
       RETURNING 1
     ), account AS (
       -- An upsert only to update the rows in sorted order (an UPDATE's order is the plan's): every row
       -- exists (the hold's creation made it), so each proposed row only carries what leaves held_uc;
       -- a row that was inserted instead (xmax 0) is not counted, and the check below fails.
       INSERT INTO agent_balances (agent_id, held_uc, captured_uc)
       SELECT payer_id, SUM(amount_uc)::bigint, SUM(captured_uc)::bigint FROM resolved
        WHERE (SELECT count(*) FROM returned) >= 0 AND (SELECT count(*) FROM earned) >= 0
        GROUP BY payer_id ORDER BY payer_id
       ON CONFLICT (agent_id) DO UPDATE
         SET held_uc = agent_balances.held_uc - EXCLUDED.held_uc, captured_uc = agent_balances.captured_uc + EXCLUDED.captured_uc
       RETURNING xmax::text <> '0' AS existed
     )${evented ? `, ${evented.sql}` : ''}
     SELECT ledger_invariant(wrote = expected,
              format('%s settlements wrote (holds resolved, payers without their balance row, journal lines, events) %s, not %s',
                     expected[1], wrote, expected))
       FROM (SELECT ARRAY[(SELECT count(*) FROM resolved),
                          (SELECT count(DISTINCT payer_id) FROM resolved) - (SELECT count(*) FROM account WHERE existed),
                          (SELECT count(*) FROM journal),
                          ${evented ? '(SELECT count(*) FROM event_row)' : '0::bigint'}] AS wrote,
                    $${expectedParameter}::bigint[] AS expected) AS checked`,
    [
      settlements.map((s) => s.holdId),
      settlements.map((s) => s.state),
      settlements.map((s) => s.capturedUc.toString()),
      settlements.map((s) => s.earningsAccount),
      settlements.map((s) => s.receipt),
      lines.map((l) => l.holdId),
      lines.map((l) => l.lotId),
      lines.map((l) => l.capturedUc.toString()),
      lines.map((l) => l.returnedUc.toString()),
      settlements.map((s) => s.resolvedAtS.toString()),
      returning,
      ...journaled.params,
      ...(evented ? evented.params : []),
      expected,
    ],
  );
  sendBudgetGiveBack(
    tx,
    settlements.filter((s) => s.budgetCharged).map((s) => s.holdId),
  );
}

/**
 * The holds still held whose deadline is after `afterS`: how many, and the latest deadline (for a key rotation, whose
 * replaced key must verify their vouchers until then).
 */
export async function heldPast(db: Queryable, afterS: number): Promise<{ count: number; latestS: number | null }> {
  const { rows } = await db.query<{ n: bigint; latest: bigint | null }>("SELECT count(*) AS n, max(expires_at_s) AS latest FROM holds WHERE state = 'held' AND expires_at_s > $1", [afterS]);
  return { count: Number(rows[0]!.n), latestS: rows[0]!.latest === null ? null : Number(rows[0]!.latest) };
}

/**
 * Held holds whose deadline has passed, oldest deadline first: those one payer funds (`payerId`), those of the
 * tree an agent belongs to (`treeOf`: the holds its root funds), one hold, or everyone's.
 */
export async function dueHoldIds(
  db: Queryable,
  nowS: number,
  options: { payerId?: string; treeOf?: string; holdId?: string; limit: number; except?: readonly string[] },
): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM holds
      WHERE state = 'held' AND expires_at_s <= $1
        AND ($2::text IS NULL OR payer_id = $2) AND ($3::text IS NULL OR id = $3)
        AND ($5::text IS NULL OR payer_id = (SELECT COALESCE(ancestor_ids[1], id) FROM agents WHERE id = $5))
        AND ($6::text[] IS NULL OR NOT (id = ANY($6::text[])))
      ORDER BY expires_at_s, seq LIMIT $4`,
    [nowS, options.payerId ?? null, options.holdId ?? null, options.limit, options.treeOf ?? null, options.except === undefined ? null : [...options.except]],
  );
  return rows.map((r) => r.id);
}

/**
 * What holds made since `sinceS` count as spending, per agent and per UTC day of the hold (Unix day number):
 * a hold still held and before its deadline its amount, a captured one what was captured less what was
 * refunded, a released or expired one nothing (the budgets' rule: docs/decisions.md "Spending policy").
 * A read over the period's holds (holds_agent_window), for charts; not the running totals of the hot path.
 */
export async function spendingByDay(db: Queryable, agentIds: readonly string[], sinceS: number, nowS: number): Promise<Array<{ agent_id: string; day: bigint; spent_uc: bigint }>> {
  if (agentIds.length === 0) return [];
  const { rows } = await db.query<{ agent_id: string; day: bigint; spent_uc: bigint }>(
    `SELECT agent_id, created_at_s / 86400 AS day,
            sum(CASE WHEN state = 'held' AND expires_at_s > $3 THEN amount_uc
                     WHEN state = 'captured' THEN captured_uc - refunded_uc
                     ELSE 0 END)::bigint AS spent_uc
       FROM holds
      WHERE agent_id = ANY($1::text[]) AND created_at_s >= $2
      GROUP BY agent_id, created_at_s / 86400
      ORDER BY agent_id, day`,
    [agentIds, sinceS, nowS],
  );
  return rows;
}

export async function accountBalance(db: Queryable, accountId: string): Promise<bigint> {
  const { rows } = await db.query<{ balance_uc: bigint }>('SELECT balance_uc FROM ledger_accounts WHERE id = $1', [accountId]);
  return rows[0]?.balance_uc ?? 0n;
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

/** The lots a hold's captured credit came from (its allocations with a captured part), in burn order, each with what the hold captured from it. */
export async function capturedSourceLots(db: Queryable, holdId: string): Promise<Array<LotRow & { captured_from_uc: bigint }>> {
  const { rows } = await db.query<LotRow & { captured_from_uc: bigint }>(
    `SELECT l.*, a.captured_uc AS captured_from_uc FROM hold_allocations a JOIN credit_lots l ON l.id = a.lot_id
      WHERE a.hold_id = $1 AND a.captured_uc > 0 ORDER BY a.position`,
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
  // The budgets: the refund goes back to the periods its hold counted in (the caller's lot insert took the payer's
  // balance row, which guards them).
  const givenBack = budgetGiveBackPart('SELECT $5::bigint AS amount_uc, r.agent_id, r.budget_charges FROM refunded r, inserted', 'debited');
  const { rows } = await db.query<{ refunded: bigint; debited: bigint; budget_missing: bigint }>(
    `WITH refunded AS (
       UPDATE holds SET refunded_uc = refunded_uc + $5 WHERE id = $2 AND state = 'captured' AND refunded_uc + $5 <= captured_uc
       RETURNING id, agent_id, budget_charges
     ), debited AS (
       UPDATE ledger_accounts SET balance_uc = balance_uc - $5 WHERE id = $9 AND balance_uc >= $5 AND EXISTS (SELECT 1 FROM refunded) RETURNING id
     ), inserted AS (
       INSERT INTO refunds (id, hold_id, merchant_id, lot_id, amount_uc, reason, receipt, created_at_s)
       SELECT $1, $2, $3, $4, $5, $6, $7, $8 FROM refunded, debited RETURNING id
     ), ${givenBack.sql}
     SELECT (SELECT count(*) FROM refunded) AS refunded, (SELECT count(*) FROM inserted) AS debited,
            ${givenBack.missing} AS budget_missing`,
    [refund.id, refund.hold_id, refund.merchant_id, refund.lot_id, refund.amount_uc, refund.reason, refund.receipt, refund.created_at_s, earningsAccount],
  );
  if (rows[0]!.budget_missing !== 0n) throw new Error(`ledger invariant: refund ${refund.id} gave back to budget periods its hold was never counted in`);
  return rows[0]!.refunded === 1n && rows[0]!.debited === 1n;
}

/** One journal line, as read back. */
export interface JournalRow {
  operation_id: string;
  kind: JournalKind;
  account: string;
  amount_uc: bigint;
  created_at_s: bigint;
}

/**
 * The journal entries of the given operations, in the order they were written (the operation index). The
 * journal is append-only; what is read of it is what the one door (./journal.ts) wrote.
 */
export async function journalOf(db: Queryable, operationIds: readonly string[]): Promise<JournalRow[]> {
  const { rows } = await db.query<JournalRow>(
    'SELECT operation_id, kind, account, amount_uc, created_at_s FROM journal_entries WHERE operation_id = ANY($1::text[]) ORDER BY id',
    [[...operationIds]],
  );
  return rows;
}

/** The ids of these agents' holds still held (deadline passed or not: resolving reclaims an overdue one as expired). */
export async function heldHoldIdsOf(db: Queryable, agentIds: readonly string[]): Promise<string[]> {
  if (agentIds.length === 0) return [];
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM holds WHERE agent_id = ANY($1::text[]) AND state = 'held' ORDER BY id`, [[...agentIds]]);
  return rows.map((row) => row.id);
}

/** Marks released holds revoked (the caller released them in the same transaction); the ids it marked. */
export async function markRevoked(tx: Tx, holdIds: readonly string[], reason: string, nowS: number): Promise<string[]> {
  if (holdIds.length === 0) return [];
  const { rows } = await tx.query<{ id: string }>(
    `UPDATE holds SET revoked_at_s = $2, revocation_reason = $3 WHERE id = ANY($1::text[]) AND state = 'released' AND revoked_at_s IS NULL RETURNING id`,
    [[...holdIds], nowS, reason],
  );
  return rows.map((row) => row.id);
}
