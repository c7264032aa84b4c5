// Recovery of executions in one process: a live execution keeps its hold while its heartbeat is fresh;
// one past its deadline is released and its Idempotency-Key given back; a result that arrives after that
// is never captured. (test/execute/crash.test.ts kills a real process instead.)
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repositoryJson } from '../support/fake-github.ts';
import { grant } from '../support/ledger-fixture.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { ONE_CREDIT_UC, execute, executionsOf, expectNothingCharged, holdsOf, newKey } from './helpers.ts';

const EXECUTE_TIMEOUT_MS = 20_000;
const PAST_DEADLINE_MS = EXECUTE_TIMEOUT_MS + 6_000;

let world: World;
let upstream: Server;
const waiting: ServerResponse[] = [];
/** Requests for /repos/late/* wait here until the test answers them. */
function answerLate(): void {
  for (const res of waiting.splice(0)) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(repositoryJson('late', 'repo')));
  }
}

beforeAll(async () => {
  upstream = createServer((req, res) => {
    if (req.url?.startsWith('/repos/late/')) waiting.push(res);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const { port } = upstream.address() as AddressInfo;
  world = await startWorld({
    env: {
      ACG_GITHUB_API_URL: `http://127.0.0.1:${port}`,
      ACG_GITHUB_TIMEOUT_MS: String(EXECUTE_TIMEOUT_MS),
      ACG_MAIL_OPERATION_TIMEOUT_MS: String(EXECUTE_TIMEOUT_MS),
      ACG_EXECUTE_TIMEOUT_MS: String(EXECUTE_TIMEOUT_MS),
    },
  });
});
afterAll(async () => {
  answerLate();
  await world?.close();
  upstream.closeAllConnections();
  await new Promise<void>((resolve) => upstream.close(() => resolve()));
});

describe('execution recovery', () => {
  it('keeps a live execution, releases it past its deadline, gives the key back, and never captures the late result', async () => {
    const agent = await world.createAgent('recover@example.com', 'recover-agent');
    await grant(world, agent.id, 3n * ONE_CREDIT_UC);
    const { execute: service } = world.gw.services;
    const key = newKey('late');
    const body = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'late', repo: 'repo' } };
    const inFlight = execute(world, agent.token, body, key);
    await waitFor(() => waiting.length, { until: (n) => n === 1, what: 'the execution to reach the upstream', timeoutMs: 5_000 });
    expect((await holdsOf(world, agent.id)).map((h) => h.state)).toEqual(['held']);

    // Its own instance keeps the heartbeat fresh: a stale-looking clock alone does not take it away.
    world.gw.clock.advance(11_000);
    try {
      expect(await service.recoverOrphans()).toBe(0);
      expect((await holdsOf(world, agent.id)).map((h) => h.state)).toEqual(['held']);

      // Past the execution deadline it is abandoned: hold released, the key's lease ended (it stays the request's).
      world.gw.clock.advance(PAST_DEADLINE_MS - 11_000);
      expect(await service.recoverOrphans()).toBe(1);
      expect((await holdsOf(world, agent.id)).map((h) => h.state)).toEqual(['released']);
      expect(await executionsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'abandoned', error_code: 'deadline_passed' })]);
      const { rows } = await world.gw.gateway.db.query<{ state: string; locked_until_ms: bigint }>('SELECT state, locked_until_ms FROM idempotency_keys WHERE key = $1', [key]);
      expect(rows.map((row) => [row.state, Number(row.locked_until_ms)])).toEqual([['running', 0]]);
      // Another request under the key is refused; the key is the first request's (found from outside: after a crash,
      // a different request took it and ran).
      const other = await execute(world, agent.token, { ...body, input: { owner: 'late', repo: 'other' } }, key);
      expect([other.status, other.body.code]).toEqual([409, 'idempotency_key_reused']);
    } finally {
      world.gw.clock.advance(-PAST_DEADLINE_MS);
    }

    // The upstream answers now: the result is not handed out unpaid and nothing is captured.
    answerLate();
    const res = await inFlight;
    expect(res.status).toBe(504);
    expect(res.body).toMatchObject({ code: 'upstream_timeout', charged: false });
    await expectNothingCharged(world, agent.id, 3n * ONE_CREDIT_UC);
  });

  it("releases the hold of another instance's execution whose heartbeat stopped", async () => {
    const agent = await world.createAgent('orphan@example.com', 'orphan-agent');
    await grant(world, agent.id, 3n * ONE_CREDIT_UC);
    const { db } = world.gw.gateway;
    const hold = await db.transaction((tx) =>
      world.gw.services.ledger.hold(tx, {
        agentId: agent.id,
        acceptorId: 'gateway',
        merchantId: null,
        offerId: 'github-public:repository.get',
        category: 'developer-tools',
        amountUc: ONE_CREDIT_UC,
        lifetimeS: 600,
      }),
    );
    // What a process that died right after tx1 leaves behind: a running execution nobody heartbeats.
    const nowMs = world.gw.clock.nowMs();
    await db.query(
      `INSERT INTO service_executions (id, agent_id, service_id, action, hold_id, state, instance_id, idem_scope, idem_route, idem_key,
         idem_token, started_at_ms, heartbeat_at_ms, deadline_at_ms)
       VALUES ('exe_orphan', $1, 'github-public', 'repository.get', $2, 'running', 'ins_dead', 'agent:x', 'POST /v1/services/execute', 'k', 't', $3, $3, $4)`,
      [agent.id, hold.id, nowMs - 12_000, nowMs + 60_000],
    );
    expect(await world.gw.services.execute.recoverOrphans()).toBe(1);
    expect(await executionsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'abandoned', error_code: 'instance_lost' })]);
    await expectNothingCharged(world, agent.id, 3n * ONE_CREDIT_UC);
  });
});
