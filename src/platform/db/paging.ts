// Keyset paging, oldest first, for tables with a `seq` identity column: one rule for every list route.
import { ApiError } from '../errors.ts';
import type { Queryable } from './database.ts';

/** Tables and scope columns are constants of the code (never request input), so they may be spliced in. */
export type PagedTable = 'agents' | 'merchants' | 'offers' | 'holds';
export type PageScope = 'owner_id' | 'merchant_id' | 'agent_id';

export interface Page<R> {
  items: R[];
  hasMore: boolean;
}

/**
 * Up to `limit` rows of `table` whose `scope` column equals `scopeValue`, after the row `startingAfter`
 * (which must be in the same scope, so another owner's id cannot be used as a cursor).
 */
export async function pageBySeq<R>(
  db: Queryable,
  table: PagedTable,
  scope: PageScope,
  scopeValue: string,
  page: { limit: number; startingAfter?: string },
): Promise<Page<R>> {
  const { rows } = await db.query<R>(
    `SELECT * FROM ${table} WHERE ${scope} = $1
       AND ($2::text IS NULL OR seq > (SELECT seq FROM ${table} WHERE id = $2 AND ${scope} = $1))
     ORDER BY seq LIMIT $3`,
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
  throw new ApiError('invalid_input', { detail: `startingAfter names no item of this list: ${startingAfter} (send the id of the last item of the previous page, or leave it out for the first page)` });
}
