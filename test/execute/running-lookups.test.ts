// Executions are found by id, whatever the statistics say of the running ones. The statements that lock or finish
// running executions named `state = 'running'`, the predicate of the running executions' partial
// index: analyzed while none was running, the planner read that index whole with the ids as a filter (priced at
// the one row it expected), and under load every call read every running execution. They now tell a running one
// by `finished_at_ms IS NULL` (the table's check ties the two). Both databases, custom and generic plans.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable, Tx } from '../../src/platform/db/database.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { finishExecutions, lockRunningExecution, lockRunningExecutions } from '../../src/execute/store.ts';
import { openTestDatabase, type TestDatabase } from '../support/database.ts';
import { wholeReadsOf } from '../support/scale.ts';

const FINISHED = 2_000;
const RUNNING = 500;

let test: TestDatabase;

/** `count` executions `<prefix><n>` (and their holds, from one agent), finished or running. */
async function insertExecutions(db: Queryable, prefix: string, count: number, running: boolean): Promise<void> {
  await db.query(
    `INSERT INTO holds (id, agent_id, payer_id, acceptor_id, offer_id, category, amount_uc, state, expires_at_s, created_at_s, resolved_at_s)
     SELECT 'hold_' || $2 || i, 'agt_plans', 'agt_plans', 'svc_echo', 'echo', 'utility', 1000, CASE WHEN $3 THEN 'held' ELSE 'captured' END, 0, 0,
            CASE WHEN $3 THEN NULL ELSE 0 END
       FROM generate_series(1, $1::int) AS i`,
    [count, prefix, running],
  );
  await db.query(
    `INSERT INTO service_executions (id, agent_id, service_id, action, hold_id, state, instance_id, idem_scope, idem_route, idem_key,
       idem_token, started_at_ms, heartbeat_at_ms, deadline_at_ms, finished_at_ms)
     SELECT $2 || i, 'agt_plans', 'svc_echo', 'echo', 'hold_' || $2 || i, CASE WHEN $3 THEN 'running' ELSE 'succeeded' END, 'inst',
            'agt_plans', 'POST /v1/services/{id}/execute', $2 || i, 'token', 0, 0, 0, CASE WHEN $3 THEN NULL ELSE 1 END
       FROM generate_series(1, $1::int) AS i`,
    [count, prefix, running],
  );
}

beforeAll(async () => {
  test = await openTestDatabase();
  const { db } = test;
  await migrate(db);
  await db.query(
    `INSERT INTO owners (id, human_issuer, human_subject, email, email_verified, created_at_s, updated_at_s)
     VALUES ('own_plans', 'https://issuer.test', 'owner', 'owner@example.com', true, 0, 0)`,
  );
  await db.query(
    `INSERT INTO agents (id, owner_id, name, identity_issuer, identity_subject, status, allowed_services, allowed_categories, inbox_allowlist,
       cap_period_s, profile_name, profile_preset, profile_color, created_at_s, updated_at_s)
     VALUES ('agt_plans', 'own_plans', 'agent', 'https://issuer.test', 'agent', 'active', '["*"]', '["*"]', '[]', 86400, 'agent', 'letter', '#4f46e5', 0, 0)`,
  );
  // Analyzed with none running, then many start: the statistics say what a quiet moment said.
  await insertExecutions(db, 'exe_done_', FINISHED, false);
  await db.exec('ANALYZE');
  await insertExecutions(db, 'exe_live_', RUNNING, true);
}, 60_000);

afterAll(() => test?.drop());

class Rollback extends Error {}

/** Every statement `fn` sends in a transaction (rolled back afterwards), with its parameters. */
async function statementsOf(fn: (tx: Tx) => Promise<unknown>): Promise<Array<{ sql: string; params: readonly unknown[] }>> {
  const sent: Array<{ sql: string; params: readonly unknown[] }> = [];
  await test.db
    .transaction(async (tx) => {
      const recording = new Proxy(tx, {
        get(target, property, receiver) {
          if (property === 'query') return (sql: string, params: readonly unknown[] = []) => (sent.push({ sql, params }), target.query(sql, params));
          const value = Reflect.get(target, property, receiver);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
      await fn(recording);
      throw new Rollback();
    })
    .catch((error: unknown) => {
      if (!(error instanceof Rollback)) throw error;
    });
  return sent;
}

describe('running executions', () => {
  it('are locked and finished by their ids, never by reading every running one', async () => {
    const ids = ['exe_live_7', 'exe_live_300', 'exe_live_499'];
    const statements = [
      ...(await statementsOf((tx) => lockRunningExecution(tx, ids[0]!))),
      ...(await statementsOf((tx) => lockRunningExecutions(tx, ids))),
      ...(await statementsOf((tx) => finishExecutions(tx, ids, 'succeeded', null, 5))),
    ];
    expect(statements).toHaveLength(3);
    for (const mode of ['auto', 'force_generic_plan']) {
      const reads = await test.db.transaction(async (tx) => {
        await tx.exec(`SET LOCAL plan_cache_mode = ${mode}`);
        const found: string[] = [];
        for (const { sql, params } of statements) found.push(...(await wholeReadsOf(tx, sql, params)).map((read) => `${read} (${mode}): ${sql.slice(0, 60)}`));
        return found;
      });
      expect(reads).toEqual([]);
    }
  });

  it('are told from finished ones by the same rows either way', async () => {
    const { rows } = await test.db.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM service_executions WHERE (state = 'running') IS DISTINCT FROM (finished_at_ms IS NULL)`,
    );
    expect(rows[0]!.n).toBe('0');
    const locked = await statementsOf(async (tx) => {
      expect(await lockRunningExecution(tx, 'exe_done_1')).toBeUndefined();
      expect((await lockRunningExecution(tx, 'exe_live_1'))?.state).toBe('running');
      expect([...(await lockRunningExecutions(tx, ['exe_done_2', 'exe_live_2', 'exe_live_3'])).keys()]).toEqual(['exe_live_2', 'exe_live_3']);
    });
    expect(locked).toHaveLength(3);
  });
});
