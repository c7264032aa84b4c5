// Keyset paging, oldest first (or newest first), for tables with a `seq` identity column: one rule for every list
// route.
import { memberRefusal } from '../errors.ts';
import type { Queryable } from './database.ts';

/** Tables and scope columns are constants of the code (never request input), so they may be spliced in. */
export type PagedTable = 'agents' | 'merchants' | 'offers' | 'holds';
export type PageScope = 'owner_id' | 'merchant_id' | 'agent_id';
export type PageOrder = 'asc' | 'desc';

/**
 * Each table's order: its scope's index, so a page reads only its own rows, however deep the cursor. Holds are
 * ordered by creation time, then `seq`: their scope's index is `(agent_id, created_at_s)`, which the spending
 * caps' window needs anyway, and a `(agent_id, seq)` one would cost every hold's insert (docs/decisions.md "Paging").
 */
const ORDER_KEY: Record<PagedTable, readonly [string, ...string[]]> = {
  agents: ['seq'],
  merchants: ['seq'],
  offers: ['seq'],
  holds: ['created_at_s', 'seq'],
};
const BIGINT_MIN = '-9223372036854775808';
const BIGINT_MAX = '9223372036854775807';

export interface Page<R> {
  items: R[];
  hasMore: boolean;
}

/**
 * Up to `limit` rows of `table` whose `scope` column equals `scopeValue`, after the row `startingAfter` in the
 * page's order (oldest first unless `order` is desc); the cursor must be in the same scope, so another owner's id
 * cannot be used as one. The key's first column is bounded in the index condition (a CASE over the cursor's own
 * row, which the planner evaluates once): an `$2 IS NULL OR …` alone would leave it a filter, and a deep page would
 * read every row before it.
 */
export async function pageBySeq<R>(
  db: Queryable,
  table: PagedTable,
  scope: PageScope,
  scopeValue: string,
  page: { limit: number; startingAfter?: string; order?: PageOrder },
): Promise<Page<R>> {
  const key = ORDER_KEY[table];
  const descending = page.order === 'desc';
  const after = descending ? '<' : '>';
  const cursor = (columns: string) => `(SELECT ${columns} FROM ${table} WHERE id = $2 AND ${scope} = $1)`;
  const lead = `${key[0]} ${after}${key.length > 1 ? '=' : ''} CASE WHEN $2::text IS NULL THEN ${descending ? BIGINT_MAX : BIGINT_MIN} ELSE ${cursor(key[0])} END`;
  const rest = key.length > 1 ? ` AND ($2::text IS NULL OR (${key.join(', ')}) ${after} ${cursor(key.join(', '))})` : '';
  const { rows } = await db.query<R>(
    `SELECT * FROM ${table} WHERE ${scope} = $1 AND ${lead}${rest}
     ORDER BY ${key.map((column) => `${column}${descending ? ' DESC' : ''}`).join(', ')} LIMIT $3`,
    [scopeValue, page.startingAfter ?? null, page.limit + 1],
  );
  await refuseUnknownCursor(db, rows, page.startingAfter, `SELECT 1 FROM ${table} WHERE id = $1 AND ${scope} = $2`, [scopeValue]);
  return { items: rows.slice(0, page.limit), hasMore: rows.length > page.limit };
}

/**
 * Refuses a page cursor that names no item of its list (an unknown id, another list's, another owner's): the
 * list's query finds nothing after it, and an empty page would read as the list's end, so a client with a
 * mistyped cursor would stop paging early without knowing. Stripe answers such a `starting_after` with an error
 * too. Asked only when the page came back empty, the one case its rows cannot tell (a row after the cursor proves
 * it was found). `lookupSql` is the list's own lookup of the cursor in its scope: the cursor is its `$1`, and
 * `scopeParams` its `$2`, …. Every list with a `startingAfter` calls it (docs/decisions.md "Paging").
 */
export async function refuseUnknownCursor(
  db: Queryable,
  rows: readonly unknown[],
  startingAfter: string | number | undefined,
  lookupSql: string,
  scopeParams: readonly unknown[] = [],
): Promise<void> {
  if (startingAfter === undefined || rows.length > 0) return;
  if ((await db.query(lookupSql, [startingAfter, ...scopeParams])).rows.length > 0) return;
  // A list paged by a number (mandate versions) names its items by it, not by an id (found from outside).
  const key = typeof startingAfter === 'number' ? 'version' : 'id';
  throw memberRefusal('startingAfter', `names no item of this list: ${startingAfter} (send the ${key} of the last item of the previous page, or leave it out for the first page)`);
}
