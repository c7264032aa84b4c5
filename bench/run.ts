// `npm run bench`: voucher minting and capture through the real gateway on the local PostgreSQL, under
// autocannon, (a) spread over many agents and (b) all on one agent, with a baseline measured in the same
// run: the same SQL driven directly by pgbench (one transaction per operation, durable commits). Prints
// throughput, p50/p99 latency and the ratio to the baseline, then checks the ledger invariants.
//
// Needs a PostgreSQL it may create databases in (BENCH_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/postgres) and `pgbench` on the PATH. Not part of `npm test`.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import pg from 'pg';
import { newApiKey } from '../src/identity/api-keys.ts';
import { loadDevIssuerKeys, mintDevToken } from '../src/identity/dev-issuers.ts';

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ADMIN_URL = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);
const AGENTS = Number(process.env.BENCH_AGENTS ?? 200);
const PORT = Number(process.env.BENCH_PORT ?? 18_080);
const PEPPER = 'bench-pepper-bench-pepper-bench-pepper-00';
const PRICE_UC = 1_000_000n;

function log(line: string): void {
  process.stdout.write(`${line}\n`);
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function startGateway(env: Record<string, string>, base: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [...(process.env.BENCH_NODE_OPTIONS ? process.env.BENCH_NODE_OPTIONS.split(' ') : []), path.join(ROOT, 'bin/acg.js'), 'serve'], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`gateway exited with ${code}`))));
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const ready = await Promise.race([fetch(`${base}/readyz`).then((r) => r.ok, () => false), exited]);
    if (ready) return child;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  child.kill('SIGKILL');
  throw new Error('gateway did not become ready in 60 s');
}

interface LoadResult {
  name: string;
  requestsPerS: number;
  p50Ms: number;
  p99Ms: number;
  ok: number;
  errors: number;
}

/** Loads for DURATION_S, or for exactly `amount` requests when each request consumes something (a hold). */
async function load(name: string, base: string, pick: () => { path: string; token: string; body: string }, amount?: number): Promise<LoadResult> {
  let ok = 0;
  let errors = 0;
  const result = await autocannon({
    url: base,
    connections: CONNECTIONS,
    ...(amount === undefined ? { duration: DURATION_S } : { amount }),
    requests: [
      {
        method: 'POST',
        setupRequest: (request) => {
          const next = pick();
          return {
            ...request,
            path: next.path,
            body: next.body,
            headers: { authorization: `Bearer ${next.token}`, 'content-type': 'application/json', 'idempotency-key': randomUUID() },
          };
        },
        onResponse: (status) => {
          if (status === 200) ok += 1;
          else errors += 1;
        },
      },
    ],
  });
  return { name, requestsPerS: result.requests.average, p50Ms: result.latency.p50, p99Ms: result.latency.p99, ok, errors };
}

/** The mint transaction as SQL: what POST /v1/vouchers does in the database, one transaction per run. */
function pgbenchMintScript(agentRange: string): string {
  return `\\set agent random(1, ${agentRange})
BEGIN;
INSERT INTO idempotency_keys (scope, route, key, fingerprint, state, claim_token, created_at_ms, locked_until_ms, expires_at_ms)
  VALUES ('agent:bench', 'POST /v1/vouchers', gen_random_uuid()::text, 'f', 'running', 't', 0, 0, 9999999999999);
SELECT id FROM agents WHERE id = 'agt_bench_' || :agent FOR UPDATE;
SELECT id, remaining_uc FROM credit_lots WHERE agent_id = 'agt_bench_' || :agent AND remaining_uc > 0 ORDER BY priority, expires_at_s NULLS LAST, seq FOR UPDATE;
UPDATE credit_lots SET remaining_uc = remaining_uc - ${PRICE_UC} WHERE id = 'lot_bench_' || :agent;
INSERT INTO holds (id, agent_id, acceptor_id, merchant_id, offer_id, category, amount_uc, state, expires_at_s, created_at_s)
  VALUES ('hold_pgb_' || gen_random_uuid()::text, 'agt_bench_' || :agent, 'mer_bench', 'mer_bench', 'off_bench', 'books', ${PRICE_UC}, 'held', 9999999999, 0);
INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s) VALUES ('pgb', 'hold', 'lot:x', -${PRICE_UC}, 0), ('pgb', 'hold', 'hold:x', ${PRICE_UC}, 0);
INSERT INTO events (id, merchant_id, type, payload, created_at_s) VALUES ('evt_pgb_' || gen_random_uuid()::text, 'mer_bench', 'redemption.held', '{}', 0);
UPDATE idempotency_keys SET state = 'done', status_code = 200, response_body = '{}' WHERE scope = 'agent:bench' AND key = 'none';
COMMIT;
`;
}

async function pgbench(url: string, name: string, script: string): Promise<LoadResult> {
  const file = path.join(tmpdir(), `acg-bench-${name}.sql`);
  writeFileSync(file, script);
  const { stdout } = await run('pgbench', ['-n', '-c', String(CONNECTIONS), '-j', '2', '-T', String(DURATION_S), '-r', '-f', file, url], { maxBuffer: 1 << 24 });
  rmSync(file, { force: true });
  const tps = Number(/tps = ([0-9.]+)/.exec(stdout)?.[1] ?? 0);
  const avgMs = Number(/latency average = ([0-9.]+) ms/.exec(stdout)?.[1] ?? 0);
  const failed = Number(/number of failed transactions: (\d+)/.exec(stdout)?.[1] ?? 0);
  return { name, requestsPerS: tps, p50Ms: avgMs, p99Ms: NaN, ok: Number(/number of transactions actually processed: (\d+)/.exec(stdout)?.[1] ?? 0), errors: failed };
}

async function checkInvariants(url: string): Promise<string[]> {
  return withClient(url, async (client) => {
    const problems: string[] = [];
    const q = async (sql: string) => (await client.query(sql)).rows[0] as Record<string, string>;
    const negative = await q('SELECT count(*) AS n FROM credit_lots WHERE remaining_uc < 0');
    if (negative.n !== '0') problems.push(`${negative.n} lots below zero`);
    const lots = await q(`SELECT count(*) AS n FROM credit_lots l WHERE l.granted_uc <> l.remaining_uc
      + COALESCE((SELECT SUM(a.amount_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'held'), 0)
      + COALESCE((SELECT SUM(a.captured_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'captured'), 0)`);
    if (lots.n !== '0') problems.push(`${lots.n} lots where granted ≠ remaining + held + captured`);
    const journal = await q(`SELECT COALESCE(SUM(amount_uc), 0) AS s FROM journal_entries WHERE operation_id <> 'pgb'`);
    if (journal.s !== '0') problems.push(`journal sums to ${journal.s}`);
    const earnings = await q(`SELECT (SELECT COALESCE(SUM(balance_uc), 0) FROM ledger_accounts WHERE id LIKE 'merchant:%') AS earned,
      (SELECT COALESCE(SUM(captured_uc), 0) FROM holds WHERE merchant_id IS NOT NULL) AS captured`);
    if (earnings.earned !== earnings.captured) problems.push(`earnings ${earnings.earned} ≠ captured ${earnings.captured}`);
    return problems;
  });
}

async function main(): Promise<void> {
  const dbName = `acg_bench_${Date.now()}`;
  await withClient(ADMIN_URL, (c) => c.query(`CREATE DATABASE ${dbName}`));
  const url = new URL(ADMIN_URL);
  url.pathname = `/${dbName}`;
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-bench-'));
  const base = `http://127.0.0.1:${PORT}`;
  const env = {
    DATABASE_URL: url.toString(),
    PORT: String(PORT),
    ACG_DATA_DIR: dataDir,
    ACG_API_KEY_PEPPER: PEPPER,
    ACG_RATE_LIMIT_PER_ADDRESS: '10000000',
    ACG_RATE_LIMIT_PER_PRINCIPAL: '10000000',
    LOG_LEVEL: 'warn',
  };
  let gateway: ChildProcess | undefined;
  try {
    log(`bench: ${DURATION_S} s per scenario, ${CONNECTIONS} connections, ${AGENTS} agents, database ${dbName}`);
    gateway = await startGateway(env, base);
    const keys = await loadDevIssuerKeys(dataDir);
    const nowS = Math.floor(Date.now() / 1000);
    const human = await mintDevToken(keys, { baseUrl: base, audience: 'agent-credit-gateway', kind: 'human', subject: 'bench-owner', email: 'bench@example.com', ownerEmailClaim: 'owner_email', nowS, lifetimeS: 7200 });
    const me = (await (await fetch(`${base}/v1/me`, { headers: { authorization: `Bearer ${human}` } })).json()) as { owner: { id: string } };
    const merchantKey = newApiKey(PEPPER);
    const agentTokens: string[] = [];
    const agentIds: string[] = [];
    await withClient(url.toString(), async (client) => {
      await client.query(`INSERT INTO merchants (id, owner_id, name, domain, categories, verification_challenge, verified, accepted_payment_methods, created_at_s, updated_at_s)
        VALUES ('mer_bench', $1, 'Bench', 'bench.example.com', '["books"]', 'x', true, '["credits"]', $2, $2)`, [me.owner.id, nowS]);
      await client.query(`INSERT INTO merchant_api_keys (id, merchant_id, owner_id, name, scopes, secret_hash, created_at_s)
        VALUES ($1, 'mer_bench', $2, 'bench', '["redemptions:capture","offers:read","offers:write"]', $3, $4)`, [merchantKey.keyId, me.owner.id, merchantKey.secretHash, nowS]);
      await client.query(`INSERT INTO offers (id, merchant_id, name, category, price_uc, active, hold_lifetime_s, created_at_s, updated_at_s)
        VALUES ('off_bench', 'mer_bench', 'Bench', 'books', $1, true, 3600, $2, $2)`, [PRICE_UC, nowS]);
      for (let i = 1; i <= AGENTS; i++) {
        const subject = `bench-agent-${i}`;
        // Agents and their lots the same way the gateway's services write them; grants journaled too.
        await client.query(`INSERT INTO agents (id, owner_id, name, identity_issuer, identity_subject, status, allowed_services, allowed_categories, inbox_allowlist,
          cap_period_s, profile_name, profile_preset, profile_color, created_at_s, updated_at_s)
          VALUES ($1, $2, $3, $4, $3, 'active', '["*"]', '["*"]', '[]', 86400, $3, 'letter', '#4f46e5', $5, $5)`,
          [`agt_bench_${i}`, me.owner.id, subject, `${base}/dev/issuers/agent`, nowS]);
        await client.query(`INSERT INTO credit_lots (id, agent_id, source, priority, granted_uc, remaining_uc, created_at_s) VALUES ($1, $2, 'grant', 100, $3, $3, $4)`,
          [`lot_bench_${i}`, `agt_bench_${i}`, 1_000_000_000_000n, nowS]);
        await client.query(`INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s) VALUES ($1, 'grant', 'source:grant', $2, $3), ($1, 'grant', $4, $5, $3)`,
          [`lot_bench_${i}`, -1_000_000_000_000n, nowS, `lot:lot_bench_${i}`, 1_000_000_000_000n]);
        agentIds.push(`agt_bench_${i}`);
        agentTokens.push(await mintDevToken(keys, { baseUrl: base, audience: 'agent-credit-gateway', kind: 'agent', subject, ownerEmail: 'bench@example.com', ownerEmailClaim: 'owner_email', nowS, lifetimeS: 7200 }));
      }
    });
    const mintBody = JSON.stringify({ offerId: 'off_bench' });
    const results: LoadResult[] = [];
    let next = 0;
    results.push(await load('mint, spread over agents', base, () => ({ path: '/v1/vouchers', token: agentTokens[next++ % AGENTS]!, body: mintBody })));
    log(`  done: ${results.at(-1)!.name}`);
    results.push(await load('mint, one agent', base, () => ({ path: '/v1/vouchers', token: agentTokens[0]!, body: mintBody })));
    log(`  done: ${results.at(-1)!.name}`);
    const holds = await withClient(url.toString(), async (c) => (await c.query(`SELECT id, agent_id FROM holds WHERE state = 'held' AND id LIKE 'hold_%' ORDER BY seq`)).rows as Array<{ id: string; agent_id: string }>);
    const spreadHolds = holds.filter((h) => h.agent_id !== 'agt_bench_1');
    const hotHolds = holds.filter((h) => h.agent_id === 'agt_bench_1');
    let nextSpread = 0;
    let nextHot = 0;
    const captureBody = '{}';
    results.push(await load('capture, spread over agents', base, () => ({ path: `/v1/redemptions/${spreadHolds[nextSpread++ % spreadHolds.length]!.id}/capture`, token: merchantKey.plaintext, body: captureBody }), spreadHolds.length));
    log(`  done: ${results.at(-1)!.name}`);
    // Every hold of the one agent is captured once; each capture locks that agent's lots.
    results.push(await load('capture, one agent', base, () => ({ path: `/v1/redemptions/${hotHolds[nextHot++ % hotHolds.length]!.id}/capture`, token: merchantKey.plaintext, body: captureBody }), hotHolds.length));
    log(`  done: ${results.at(-1)!.name}`);

    gateway.kill('SIGTERM');
    await new Promise((resolve) => gateway!.once('exit', resolve));
    gateway = undefined;
    const problems = await checkInvariants(url.toString());

    const baselineSpread = await pgbench(url.toString(), 'spread', pgbenchMintScript(String(AGENTS)));
    const baselineHot = await pgbench(url.toString(), 'hot', pgbenchMintScript('1'));
    const row = (r: LoadResult, baseline?: LoadResult) =>
      `| ${r.name} | ${r.requestsPerS.toFixed(0)} | ${r.p50Ms.toFixed(1)} | ${Number.isNaN(r.p99Ms) ? '–' : r.p99Ms.toFixed(1)} | ${r.ok} | ${r.errors} | ${baseline ? (r.requestsPerS / baseline.requestsPerS).toFixed(2) : '1.00'} |`;
    log('');
    log('| scenario | throughput /s | p50 ms | p99 ms | ok | non-200 | ratio to pgbench |');
    log('|---|---|---|---|---|---|---|');
    log(row(results[0]!, baselineSpread));
    log(row(results[1]!, baselineHot));
    log(row(results[2]!, baselineSpread));
    log(row(results[3]!, baselineHot));
    log(row({ ...baselineSpread, name: 'baseline: pgbench mint SQL, spread (p50 = average)' }));
    log(row({ ...baselineHot, name: 'baseline: pgbench mint SQL, one agent (p50 = average)' }));
    log('');
    log(problems.length === 0 ? 'ledger invariants: hold (no negative lot; granted = remaining + held + captured per lot; journal sums to 0; earnings = captured)' : `LEDGER INVARIANTS BROKEN: ${problems.join('; ')}`);
    if (problems.length > 0) process.exitCode = 1;
  } finally {
    gateway?.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
    await withClient(ADMIN_URL, (c) => c.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)).catch(() => {});
  }
}

await main();
