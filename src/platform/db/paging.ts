// Keyset paging, oldest first, for tables with a `seq` identity column: one rule for every list route.
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
  return { items: rows.slice(0, page.limit), hasMore: rows.length > page.limit };
}
