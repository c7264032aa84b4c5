// The journal's one door. Every balance change is journaled as an operation (one id, one kind) whose
// lines sum to zero: TigerBeetle's rule asserted in the code path, before any SQL, for every movement
// (grant, hold, capture, release, expiry, refund). `balancedEntries` is the only maker of a
// `BalancedJournal`, and `journalInsert` (the only SQL that inserts into journal_entries) takes nothing
// else, so an unbalanced or unchecked journal cannot reach the table. A set-based statement embeds the
// insert as one of its parts, so a batch still writes in the same round trip.
import type { Queryable } from '../platform/db/database.ts';

export type JournalKind = 'grant' | 'hold' | 'capture' | 'release' | 'expire' | 'refund';

export interface JournalLine {
  account: string;
  amountUc: bigint;
}

export interface JournalEntry extends JournalLine {
  operationId: string;
  kind: JournalKind;
}

declare const balanced: unique symbol;

/** Journal entries whose every operation sums to zero, each line moving something: made by `balancedEntries` only. */
export type BalancedJournal = { readonly entries: readonly JournalEntry[] } & { readonly [balanced]: true };

function brand(entries: readonly JournalEntry[]): BalancedJournal {
  return Object.freeze({ entries: Object.freeze(entries) }) as BalancedJournal;
}

/**
 * One operation's lines, checked: each line moves a non-zero amount, there is at least one, and they sum to
 * zero. An operation that does not balance stops here, before any SQL.
 */
export function balancedEntries(operationId: string, kind: JournalKind, lines: readonly JournalLine[]): BalancedJournal {
  if (lines.length === 0) throw new Error(`ledger invariant: journal operation ${operationId} moves nothing`);
  let sumUc = 0n;
  for (const line of lines) {
    if (line.amountUc === 0n) throw new Error(`ledger invariant: journal operation ${operationId} has a zero line for ${line.account}`);
    sumUc += line.amountUc;
  }
  if (sumUc !== 0n) throw new Error(`ledger invariant: journal operation ${operationId} sums to ${sumUc}`);
  return brand(lines.map((line) => ({ operationId, kind, account: line.account, amountUc: line.amountUc })));
}

/** Several balanced operations as one journal (each stays balanced): what one batch statement writes. */
export function combined(journals: readonly BalancedJournal[]): BalancedJournal {
  return brand(journals.flatMap((journal) => journal.entries));
}

/**
 * The SQL that inserts a balanced journal, as a statement or a CTE part of a larger one, and its five
 * parameters, numbered from `$firstParameter`.
 */
export function journalInsert(journal: BalancedJournal, createdAtS: number, firstParameter: number): { sql: string; params: unknown[] } {
  const [operations, kinds, accounts, amounts, createdAt] = [0, 1, 2, 3, 4].map((offset) => `$${firstParameter + offset}`);
  return {
    sql: `INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s)
       SELECT operation_id, kind, account, amount_uc, ${createdAt}::bigint
         FROM unnest(${operations}::text[], ${kinds}::text[], ${accounts}::text[], ${amounts}::bigint[]) AS j(operation_id, kind, account, amount_uc)`,
    params: [
      journal.entries.map((entry) => entry.operationId),
      journal.entries.map((entry) => entry.kind),
      journal.entries.map((entry) => entry.account),
      journal.entries.map((entry) => entry.amountUc.toString()),
      createdAtS,
    ],
  };
}

/** Writes a balanced journal in its own statement (grants and refunds). */
export async function appendJournal(db: Queryable, journal: BalancedJournal, createdAtS: number): Promise<void> {
  const insert = journalInsert(journal, createdAtS, 1);
  await db.query(insert.sql, insert.params);
}
