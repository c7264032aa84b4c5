// Shared by the execute tests: calling execute, and reading the ledger's effects straight from the
// database (holds, captures, the gateway's revenue, retained intents).
import { expect } from 'vitest';
import type { ApiResponse, World } from '../support/world.ts';

export const ONE_CREDIT_UC = 1_000_000n;

let keyCounter = 0;
export function newKey(label = 'exec'): string {
  return `${label}-${++keyCounter}-${Date.now()}`;
}

export function execute(
  world: World,
  token: string,
  body: { serviceId: string; action: string; input: unknown; agentId?: string },
  key: string | null = newKey(),
): Promise<ApiResponse> {
  return world.api('POST', '/v1/services/execute', { token, body, key: key ?? undefined });
}

export interface HoldSummary {
  id: string;
  state: string;
  amountUc: bigint;
  capturedUc: bigint;
  offerId: string;
  acceptorId: string;
}

export async function holdsOf(world: World, agentId: string): Promise<HoldSummary[]> {
  const { rows } = await world.gw.gateway.db.query<{ id: string; state: string; amount_uc: bigint; captured_uc: bigint; offer_id: string; acceptor_id: string }>(
    'SELECT id, state, amount_uc, captured_uc, offer_id, acceptor_id FROM holds WHERE agent_id = $1 ORDER BY seq',
    [agentId],
  );
  return rows.map((row) => ({ id: row.id, state: row.state, amountUc: row.amount_uc, capturedUc: row.captured_uc, offerId: row.offer_id, acceptorId: row.acceptor_id }));
}

/** Sum captured from the agent, as the journal tells it (capture entries credited to revenue:gateway). */
export async function capturedFromAgent(world: World, agentId: string): Promise<bigint> {
  const { rows } = await world.gw.gateway.db.query<{ total: bigint }>(
    `SELECT COALESCE(SUM(j.amount_uc), 0)::bigint AS total
       FROM journal_entries j JOIN holds h ON j.operation_id = h.id || ':capture'
      WHERE h.agent_id = $1 AND j.account = 'revenue:gateway'`,
    [agentId],
  );
  return rows[0]!.total;
}

export async function revenueUc(world: World): Promise<bigint> {
  const { rows } = await world.gw.gateway.db.query<{ balance_uc: bigint }>(`SELECT balance_uc FROM ledger_accounts WHERE id = 'revenue:gateway'`);
  return rows[0]?.balance_uc ?? 0n;
}

export async function availableUc(world: World, agentId: string): Promise<bigint> {
  return BigInt((await world.gw.services.ledger.balance(world.gw.gateway.db, agentId)).availableUc);
}

export async function executionsOf(world: World, agentId: string): Promise<Array<{ id: string; state: string; error_code: string | null; hold_id: string }>> {
  const { rows } = await world.gw.gateway.db.query<{ id: string; state: string; error_code: string | null; hold_id: string }>(
    'SELECT id, state, error_code, hold_id FROM service_executions WHERE agent_id = $1 ORDER BY started_at_ms',
    [agentId],
  );
  return rows;
}

export async function intentsOf(world: World, agentId: string): Promise<Array<{ id: string; state: string; service_id: string; action: string; input: unknown; execution_id: string | null }>> {
  const { rows } = await world.gw.gateway.db.query<{ id: string; state: string; service_id: string; action: string; input: unknown; execution_id: string | null }>(
    'SELECT id, state, service_id, action, input, execution_id FROM service_intents WHERE agent_id = $1 ORDER BY created_at_s, id',
    [agentId],
  );
  return rows;
}

/** No hold of this agent is left `held` or `captured`, its credit is all back, and nothing was captured. */
export async function expectNothingCharged(world: World, agentId: string, grantedUc: bigint): Promise<void> {
  const states = (await holdsOf(world, agentId)).map((hold) => hold.state);
  expect(states.filter((state) => state === 'held' || state === 'captured')).toEqual([]);
  expect(await availableUc(world, agentId)).toBe(grantedUc);
  expect(await capturedFromAgent(world, agentId)).toBe(0n);
}

/** The payments' resume job, run a minute, ten minutes and two hours from now: past any back-off a retained intent waits. */
export async function runResumeJobsLater(world: World): Promise<void> {
  for (const laterMs of [60_000, 600_000, 7_200_000]) {
    world.gw.clock.offsetMs += laterMs;
    try {
      await world.gw.services.payments!.runJobs();
    } finally {
      world.gw.clock.offsetMs -= laterMs;
    }
  }
}
