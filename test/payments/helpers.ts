// Shared by the payments tests: a valid top-up body, and reading the ledger's effects of top-ups.
import type { World } from '../support/world.ts';

export const REASON = 'The agent is about to read a repository for its owner and needs credit to pay for the metered GitHub calls it makes.';

export function topupBody(agentId: string, extra: Record<string, unknown> = {}) {
  return { agentId, amountUsdCents: 500, reason: REASON, ...extra };
}

export const repoRequest = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'Hello-World' } };

export async function topupLots(world: World, agentId: string): Promise<Array<{ id: string; granted_uc: bigint; source_ref: string }>> {
  const { rows } = await world.gw.gateway.db.query<{ id: string; granted_uc: bigint; source_ref: string }>(
    `SELECT id, granted_uc, source_ref FROM credit_lots WHERE agent_id = $1 AND source = 'topup' ORDER BY seq`,
    [agentId],
  );
  return rows;
}

/** The journal of top-up lots of this agent: each is one operation of two entries summing to zero. */
export async function topupJournal(world: World, agentId: string): Promise<Array<{ account: string; amount_uc: bigint }>> {
  const { rows } = await world.gw.gateway.db.query<{ account: string; amount_uc: bigint }>(
    `SELECT j.account, j.amount_uc FROM journal_entries j JOIN credit_lots l ON j.operation_id = l.id
      WHERE l.agent_id = $1 AND l.source = 'topup' ORDER BY j.account`,
    [agentId],
  );
  return rows;
}

export async function ownerId(world: World, ownerToken: string): Promise<string> {
  return (await world.api('GET', '/v1/me', { token: ownerToken })).body.owner.id;
}
