// A crash between hold and capture, for real: the `acg serve` process is killed with SIGKILL while an
// execution waits on a GitHub that never answers, then a new process starts on the same database. Its
// recovery job finds the execution whose heartbeat stopped and releases the hold: nothing stays `held`,
// and nothing is captured.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { startIssuer, type TestIssuer } from '../support/issuer.ts';
import { spawnGateway, type GatewayProcess } from '../support/process.ts';
import { waitFor } from '../support/wait.ts';

const run = promisify(execFile);
const ACG = path.resolve('bin/acg.js');
const OWNER_EMAIL = 'crash-owner@example.com';
const GRANTED_UC = '5000000';

let human: TestIssuer;
let agentIssuer: TestIssuer;
let github: FakeGitHub;
let env: Record<string, string>;
let dropDatabase: () => Promise<void> = async () => {};
const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-crash-'));
const processes: GatewayProcess[] = [];

beforeAll(async () => {
  human = await startIssuer();
  agentIssuer = await startIssuer();
  github = await startFakeGitHub();
  let databaseUrl = '';
  if (onPostgres()) {
    const created = await createPostgresDatabase();
    databaseUrl = created.url;
    dropDatabase = created.drop;
  }
  env = {
    ACG_DATA_DIR: dataDir,
    DATABASE_URL: databaseUrl,
    LOG_LEVEL: 'info',
    ACG_HUMAN_ISSUER: human.issuer,
    ACG_AGENT_ISSUER: agentIssuer.issuer,
    ACG_GITHUB_API_URL: github.url,
    // Long budgets: the action is still in flight when the process dies, and the hold's own deadline is far
    // away, so only recovery can release it within the test.
    ACG_GITHUB_TIMEOUT_MS: '30000',
    ACG_EXECUTE_TIMEOUT_MS: '40000',
  };
});

afterAll(async () => {
  for (const gateway of processes) await gateway.kill('SIGKILL');
  await github?.close();
  await human?.close();
  await agentIssuer?.close();
  await dropDatabase();
  rmSync(dataDir, { recursive: true, force: true });
});

async function start(): Promise<GatewayProcess> {
  const gateway = await spawnGateway(env);
  processes.push(gateway);
  return gateway;
}

async function call(gateway: GatewayProcess, method: string, route: string, token: string, body?: unknown, key?: string) {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (key) headers['idempotency-key'] = key;
  const res = await fetch(`${gateway.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

/** What this test follows of the agent's balance (GET /v1/me shows all of it). */
async function balance(gateway: GatewayProcess, agentToken: string): Promise<{ availableUc: string; heldUc: string }> {
  const { availableUc, heldUc } = (await call(gateway, 'GET', '/v1/me', agentToken)).body.balance;
  return { availableUc, heldUc };
}

describe('a crash between hold and capture', () => {
  it('leaves no hold held after the restarted gateway recovers, and captures nothing', async () => {
    const ownerToken = await human.mint({ sub: 'crash-owner', email: OWNER_EMAIL, email_verified: true });
    const agentToken = await agentIssuer.mint({ sub: 'crash-agent', owner_email: OWNER_EMAIL });

    // 1. Register the agent, then fund it with the operator command (the embedded database admits one process).
    const first = await start();
    const created = await call(first, 'POST', '/v1/owner/agents', ownerToken, { name: 'Crash', identity: { issuer: agentIssuer.issuer, subject: 'crash-agent' } }, 'crash-agent');
    expect(created.status).toBe(201);
    const agentId = created.body.id as string;
    await first.kill('SIGTERM');
    await run(process.execPath, [ACG, 'credit', 'grant', '--agent', agentId, '--amount-uc', GRANTED_UC], { env: { ...process.env, ...env } });

    // 2. Start an execution against a GitHub that never answers, wait for its hold, and kill the process.
    const second = await start();
    const key = 'crash-execution-1';
    const body = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'slow', repo: 'forever' } };
    const inFlight = call(second, 'POST', '/v1/services/execute', agentToken, body, key).catch((error: unknown) => error);
    const held = await waitFor(() => balance(second, agentToken), { until: (b) => b.heldUc === '1000000', what: "the execution's hold", intervalMs: 50 });
    expect(held).toEqual({ availableUc: '4000000', heldUc: '1000000' });
    await second.kill('SIGKILL');
    expect(await inFlight).toBeInstanceOf(Error);

    // 3. A new process on the same database releases the orphaned hold well before the hold's own deadline.
    const third = await start();
    const recovered = await waitFor(() => balance(third, agentToken), { until: (b) => b.heldUc === '0', what: 'the restarted gateway to release the orphaned hold', timeoutMs: 30_000, intervalMs: 50 });
    expect(recovered).toEqual({ availableUc: GRANTED_UC, heldUc: '0' });
    // The line is written before the release commits, but reaches this process through the child's stdout, which
    // may come after the HTTP answer that shows the release.
    const released = await waitFor(() => third.logs.find((line) => line.msg === 'released the hold of an abandoned execution'), { what: "the recovery's log line" });
    expect(released.reason).toBe('instance_lost');

    // 4. The gateway still executes and charges normally.
    const retried = await call(third, 'POST', '/v1/services/execute', agentToken, { ...body, input: { owner: 'octocat', repo: 'Hello-World' } }, 'crash-execution-2');
    expect(retried.status).toBe(200);
    expect(await balance(third, agentToken)).toEqual({ availableUc: '4000000', heldUc: '0' });
    await third.kill('SIGTERM');
  }, 120_000);
});
