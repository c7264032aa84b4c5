// SQL of the spending policy: its one read, the usage its period caps count. It reads the ledger's `holds`
// table (the ledger writes it; nothing here writes) and sums each agent's holds in its cap window.
import type { Queryable } from '../platform/db/database.ts';

/**
 * Credit each agent's holds took in its cap window (each agent with its own window start): open holds count
 * in full, captured ones by what was captured (one statement; none for no agent).
 */
export async function spentInWindowOf(db: Queryable, windows: ReadonlyArray<{ agentId: string; sinceS: number }>): Promise<Map<string, bigint>> {
  const spent = new Map<string, bigint>(windows.map((w) => [w.agentId, 0n]));
  if (windows.length === 0) return spent;
  const { rows } = await db.query<{ agent_id: string; spent: bigint }>(
    `SELECT w.agent_id, COALESCE(SUM(CASE h.state WHEN 'held' THEN h.amount_uc WHEN 'captured' THEN h.captured_uc ELSE 0 END), 0)::bigint AS spent
       FROM unnest($1::text[], $2::bigint[]) AS w(agent_id, since_s)
       JOIN holds h ON h.agent_id = w.agent_id AND h.created_at_s > w.since_s
      GROUP BY w.agent_id`,
    [windows.map((w) => w.agentId), windows.map((w) => w.sinceS)],
  );
  for (const row of rows) spent.set(row.agent_id, row.spent);
  return spent;
}
