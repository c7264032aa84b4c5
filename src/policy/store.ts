// SQL of the spending policy: its one read, the usage its period caps count. It reads the ledger's `holds`
// table (the ledger writes it; nothing here writes) and sums each agent's holds in its cap window.
import type { Queryable } from '../platform/db/database.ts';

/** A window's key in `spentInWindowOf`'s answer: the agent and the window's length. */
export function windowKey(agentId: string, periodS: number): string {
  return `${agentId} ${periodS}`;
}

/**
 * Credit each agent's own holds took in each window asked (an agent's own cap's, and its capped ancestors'): open
 * holds count in full, captured ones by what was captured (one statement; none for no window).
 */
export async function spentInWindowOf(db: Queryable, windows: ReadonlyArray<{ agentId: string; periodS: number; sinceS: number }>): Promise<Map<string, bigint>> {
  const spent = new Map<string, bigint>(windows.map((w) => [windowKey(w.agentId, w.periodS), 0n]));
  if (windows.length === 0) return spent;
  const { rows } = await db.query<{ agent_id: string; period_s: number; spent: bigint }>(
    `SELECT w.agent_id, w.period_s, COALESCE(SUM(CASE h.state WHEN 'held' THEN h.amount_uc WHEN 'captured' THEN h.captured_uc ELSE 0 END), 0)::bigint AS spent
       FROM unnest($1::text[], $2::bigint[], $3::int[]) AS w(agent_id, since_s, period_s)
       JOIN holds h ON h.agent_id = w.agent_id AND h.created_at_s > w.since_s
      GROUP BY w.agent_id, w.period_s`,
    [windows.map((w) => w.agentId), windows.map((w) => w.sinceS), windows.map((w) => w.periodS)],
  );
  for (const row of rows) spent.set(windowKey(row.agent_id, Number(row.period_s)), row.spent);
  return spent;
}
