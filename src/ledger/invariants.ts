// The ledger's invariants over a whole database: what every committed state must satisfy, whatever ran before it
// (a crash, a failover, two instances racing). One definition, run by `acg ledger check` (an operator's look after a
// failover or a restore), by the tests that drive the gateway from outside, and by the bench after its load.
//
// Each invariant is a query of the rows that break it (`subject`: the lot, hold, agent or operation; `detail`: the
// figures that disagree), so a broken one names what broke, not only that something did. They all run in one
// read-only REPEATABLE READ transaction: one snapshot, so a gateway writing meanwhile cannot make them disagree.
// Anchor: TigerBeetle's invariants (debits = credits for every transfer, no balance below its floor), checked
// from the outside as its `inspect` does.
import type { Database, Queryable } from '../platform/db/database.ts';

export interface LedgerInvariant {
  name: string;
  /** The rows that break it: `subject` (what broke) and `detail` (its figures), both text. */
  sql: string;
}

/** What one invariant found: how many rows break it, and the first few. */
export interface InvariantResult {
  name: string;
  violations: number;
  examples: Array<{ subject: string; detail: string }>;
}

const HELD_OR_KEPT = `CASE h.state WHEN 'held' THEN h.amount_uc WHEN 'captured' THEN h.captured_uc - h.refunded_uc ELSE 0 END`;

export const LEDGER_INVARIANTS: readonly LedgerInvariant[] = [
  {
    name: 'every operation\'s journal entries sum to zero (each change moves credit, never makes or loses it)',
    sql: `SELECT operation_id AS subject, 'sums to ' || SUM(amount_uc) AS detail FROM journal_entries GROUP BY operation_id HAVING SUM(amount_uc) <> 0`,
  },
  {
    name: 'no lot and no ledger account below zero',
    sql: `SELECT id AS subject, 'lot remaining ' || remaining_uc AS detail FROM credit_lots WHERE remaining_uc < 0
          UNION ALL
          SELECT id, 'account balance ' || balance_uc FROM ledger_accounts WHERE balance_uc < 0`,
  },
  {
    name: "each lot: granted = remaining + its open holds' allocations + its captured holds' allocations",
    sql: `SELECT l.id AS subject, 'granted ' || l.granted_uc || ', remaining ' || l.remaining_uc || ', open ' || COALESCE(o.open_uc, 0) || ', captured ' || COALESCE(o.captured_uc, 0) AS detail
            FROM credit_lots l
            LEFT JOIN (SELECT a.lot_id, SUM(a.amount_uc) FILTER (WHERE h.state = 'held') AS open_uc, SUM(a.captured_uc) FILTER (WHERE h.state = 'captured') AS captured_uc
                         FROM hold_allocations a JOIN holds h ON h.id = a.hold_id GROUP BY a.lot_id) o ON o.lot_id = l.id
           WHERE l.granted_uc <> l.remaining_uc + COALESCE(o.open_uc, 0) + COALESCE(o.captured_uc, 0)`,
  },
  {
    name: "each lot's journal account replays to its remainder",
    sql: `SELECT l.id AS subject, 'remaining ' || l.remaining_uc || ', journal ' || COALESCE(j.sum_uc, 0) AS detail
            FROM credit_lots l
            LEFT JOIN (SELECT account, SUM(amount_uc) AS sum_uc FROM journal_entries WHERE account LIKE 'lot:%' GROUP BY account) j ON j.account = 'lot:' || l.id
           WHERE l.remaining_uc <> COALESCE(j.sum_uc, 0)`,
  },
  {
    name: 'each hold: its allocations add up to its amount (and to its captured part once captured), and it captured at most what it held',
    sql: `SELECT h.id AS subject, h.state || ' amount ' || h.amount_uc || ', captured ' || h.captured_uc || ', allocated ' || COALESCE(a.amount_uc, 0) || ', allocated captured ' || COALESCE(a.captured_uc, 0) AS detail
            FROM holds h
            LEFT JOIN (SELECT hold_id, SUM(amount_uc) AS amount_uc, SUM(captured_uc) AS captured_uc FROM hold_allocations GROUP BY hold_id) a ON a.hold_id = h.id
           WHERE a.amount_uc IS DISTINCT FROM h.amount_uc
              OR a.captured_uc <> CASE WHEN h.state = 'captured' THEN h.captured_uc ELSE 0 END
              OR h.captured_uc > h.amount_uc`,
  },
  {
    name: "each hold's journal account carries its amount while held, nothing once resolved",
    sql: `SELECT h.id AS subject, h.state || ' amount ' || h.amount_uc || ', journal ' || COALESCE(j.sum_uc, 0) AS detail
            FROM holds h
            LEFT JOIN (SELECT account, SUM(amount_uc) AS sum_uc FROM journal_entries WHERE account LIKE 'hold:%' GROUP BY account) j ON j.account = 'hold:' || h.id
           WHERE COALESCE(j.sum_uc, 0) <> CASE WHEN h.state = 'held' THEN h.amount_uc ELSE 0 END`,
  },
  {
    name: "each hold is paid for by the root of its agent's tree, and no delegate owns a lot",
    sql: `SELECT h.id AS subject, 'payer ' || h.payer_id || ', root ' || COALESCE(a.ancestor_ids[1], a.id) AS detail
            FROM holds h JOIN agents a ON a.id = h.agent_id
           WHERE h.payer_id <> COALESCE(a.ancestor_ids[1], a.id)
          UNION ALL
          SELECT l.id, 'a lot of delegate ' || a.id FROM credit_lots l JOIN agents a ON a.id = l.agent_id WHERE a.parent_id IS NOT NULL`,
  },
  {
    name: "each agent's balance row: held, captured and granted are what its holds and lots say, and granted = remaining + held + captured",
    // Set-based (each table read once): a lookup per agent read the holds whole for each, having no index by payer for
    // settled holds.
    sql: `SELECT b.agent_id AS subject,
                 'held ' || b.held_uc || '/' || COALESCE(h.held_uc, 0) || ', captured ' || b.captured_uc || '/' || COALESCE(h.captured_uc, 0) ||
                 ', granted ' || b.granted_uc || '/' || COALESCE(l.granted_uc, 0) || ', remaining ' || COALESCE(l.remaining_uc, 0) || ' (row/holds and lots)' AS detail
            FROM agent_balances b
            LEFT JOIN (SELECT payer_id, SUM(amount_uc) FILTER (WHERE state = 'held') AS held_uc, SUM(captured_uc) FILTER (WHERE state = 'captured') AS captured_uc
                         FROM holds GROUP BY payer_id) h ON h.payer_id = b.agent_id
            LEFT JOIN (SELECT agent_id, SUM(granted_uc) AS granted_uc, SUM(remaining_uc) AS remaining_uc FROM credit_lots GROUP BY agent_id) l ON l.agent_id = b.agent_id
           WHERE b.held_uc <> COALESCE(h.held_uc, 0) OR b.captured_uc <> COALESCE(h.captured_uc, 0) OR b.granted_uc <> COALESCE(l.granted_uc, 0)
              OR b.granted_uc <> COALESCE(l.remaining_uc, 0) + b.held_uc + b.captured_uc`,
  },
  {
    name: "merchants' earnings = everything captured for merchants and not refunded",
    sql: `SELECT 'merchants' AS subject, 'earned ' || t.earned_uc || ', captured and kept ' || t.kept_uc AS detail
            FROM (SELECT (SELECT COALESCE(SUM(balance_uc), 0) FROM ledger_accounts WHERE id LIKE 'merchant:%') AS earned_uc,
                         (SELECT COALESCE(SUM(captured_uc - refunded_uc), 0) FROM holds WHERE merchant_id IS NOT NULL) AS kept_uc) t
           WHERE t.earned_uc <> t.kept_uc`,
  },
  {
    name: "each budget period's running total = its holds (held, or captured − refunded)",
    sql: `SELECT agent_id || ' ' || budget_id || ' from ' || period_start_s AS subject,
                 'running total ' || COALESCE(u.spent_uc::text, 'missing') || ', holds ' || COALESCE(c.covered_uc, 0) AS detail
            FROM budget_usage u
            FULL JOIN (SELECT c.agent_id, c.budget_id, c.period_start_s, SUM(${HELD_OR_KEPT}) AS covered_uc
                         FROM hold_budget_charges c JOIN holds h ON h.id = c.hold_id
                        GROUP BY c.agent_id, c.budget_id, c.period_start_s) c USING (agent_id, budget_id, period_start_s)
           WHERE COALESCE(u.spent_uc, -1) <> COALESCE(c.covered_uc, 0)`,
  },
];

/** How many rows that break an invariant are shown by default. */
export const INVARIANT_EXAMPLES_DEFAULT = 5;

/** Runs one invariant on `db`: how many rows break it, and the first `examples`. */
async function runInvariant(db: Queryable, invariant: LedgerInvariant, examples: number): Promise<InvariantResult> {
  // The rows are found once, by the invariant's own plan (MATERIALIZED), then counted and the first few taken: an
  // ORDER BY … LIMIT over the query itself was planned as an ordered nested loop over every hold (minutes on the
  // bench's database, where the query alone takes a second).
  const { rows } = await db.query<{ subject: string; detail: string; total: bigint | number | string }>(
    `WITH v AS MATERIALIZED (${invariant.sql})
     SELECT v.subject::text AS subject, v.detail::text AS detail, (SELECT count(*) FROM v) AS total FROM v ORDER BY 1 LIMIT ${Math.max(1, examples)}`,
  );
  return { name: invariant.name, violations: rows.length === 0 ? 0 : Number(rows[0]!.total), examples: rows.slice(0, examples).map(({ subject, detail }) => ({ subject, detail })) };
}

/** Every invariant on `db` as it stands, in order; `progress` hears each result as it comes. */
export async function ledgerViolations(db: Queryable, options: { examples?: number; progress?: (result: InvariantResult, ms: number) => void } = {}): Promise<InvariantResult[]> {
  const examples = options.examples ?? INVARIANT_EXAMPLES_DEFAULT;
  const results: InvariantResult[] = [];
  for (const invariant of LEDGER_INVARIANTS) {
    const startedMs = performance.now();
    const result = await runInvariant(db, invariant, examples);
    options.progress?.(result, performance.now() - startedMs);
    results.push(result);
  }
  return results;
}

/**
 * ledgerViolations in one read-only snapshot (REPEATABLE READ): a database in use may be checked, since every
 * invariant then reads the same committed state.
 */
export async function checkLedgerInvariants(db: Database, options: Parameters<typeof ledgerViolations>[1] = {}): Promise<InvariantResult[]> {
  return db.transaction(async (tx) => {
    await tx.exec('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
    return ledgerViolations(tx, options);
  });
}
