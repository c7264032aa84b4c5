// SQL of the dev DNS zone. Nothing but queries.
import type { Queryable } from '../platform/db/database.ts';

export async function insertRecord(db: Queryable, name: string, value: string, nowS: number): Promise<void> {
  await db.query('INSERT INTO dev_dns_records (name, value, created_at_s) VALUES ($1, $2, $3) ON CONFLICT (name, value) DO NOTHING', [name, value, nowS]);
}

export async function countRecords(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>('SELECT count(*) AS n FROM dev_dns_records');
  return Number(rows[0]!.n);
}

/** The TXT values at `name`, oldest first. */
export async function valuesAt(db: Queryable, name: string): Promise<string[]> {
  const { rows } = await db.query<{ value: string }>('SELECT value FROM dev_dns_records WHERE name = $1 ORDER BY created_at_s, value', [name]);
  return rows.map((row) => row.value);
}
