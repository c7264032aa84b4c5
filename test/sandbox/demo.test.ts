// `acg demo` and `acg credit grant` against a real running gateway (`acg serve` in its own process), on the
// run's database: PGlite (the gateway holds the embedded database, so the CLI must go through it) or
// PostgreSQL. The demo runs twice: both runs succeed, the second reuses what the first made, and the
// ledger invariants hold over everything both wrote.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDevIssuerKeys, mintDevToken } from '../../src/identity/dev-issuers.ts';
import { openPglite } from '../../src/platform/db/pglite.ts';
import { credits } from '../../src/sandbox/demo.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import type { Database } from '../../src/platform/db/database.ts';
import { localServer } from '../support/acg-cli.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { freePort } from '../support/doh-server.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { spawnGateway, type GatewayProcess } from '../support/process.ts';

const run = promisify(execFile);
const ACG = path.resolve('bin/acg.js');

describe("the demo's amounts", () => {
  it('read as credits with the µc beside them, one credit in the singular', () => {
    expect(credits(1_000_000n)).toBe('1 credit (1000000 µc)');
    expect(credits('1500000')).toBe('1.5 credits (1500000 µc)');
    expect(credits(500_000n)).toBe('0.5 credits (500000 µc)');
    expect(credits(0n)).toBe('0 credits (0 µc)');
  });
});

describe('acg demo and acg credit grant against a running gateway', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-demo-'));
  let env: Record<string, string>;
  let gateway: GatewayProcess;
  let databaseUrl: string | undefined;
  let dropDatabase = async () => {};

  beforeAll(async () => {
    if (onPostgres()) {
      const created = await createPostgresDatabase();
      databaseUrl = created.url;
      dropDatabase = created.drop;
    }
    env = { ACG_DATA_DIR: dataDir, PORT: String(await freePort()), DATABASE_URL: databaseUrl ?? '', LOG_LEVEL: 'warn' };
    gateway = await spawnGateway({ ...env, LOG_LEVEL: 'info' }, { timeoutMs: 120_000 });
  }, 150_000);
  afterAll(async () => {
    await gateway?.kill('SIGKILL');
    await dropDatabase();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const acg = (...args: string[]) => run(process.execPath, [ACG, ...args], { env: { ...process.env, ...env }, timeout: 120_000 });

  /** The `done:` line the demo ends with, as numbers. */
  function summary(stdout: string): Record<string, string> {
    const line = stdout.split('\n').find((l) => l.startsWith('done: '));
    expect(line, stdout).toBeDefined();
    return Object.fromEntries([...line!.matchAll(/(\w+)=(\d+)/g)].map((m) => [m[1]!, m[2]!]));
  }

  it('grants credit while the gateway runs, through its operator route', async () => {
    const keys = await loadDevIssuerKeys(dataDir);
    const human = await mintDevToken(keys, {
      baseUrl: gateway.url, audience: 'agent-credit-gateway', kind: 'human', subject: 'human:grant@example.com',
      email: 'grant@example.com', ownerEmailClaim: 'owner_email', nowS: Math.floor(Date.now() / 1000),
    });
    const headers = { authorization: `Bearer ${human}`, 'content-type': 'application/json', 'idempotency-key': 'grant-agent' };
    const created = await fetch(`${gateway.url}/v1/owner/agents`, {
      method: 'POST', headers, body: JSON.stringify({ name: 'Funded', identity: { issuer: `${gateway.url}/dev/issuers/agent`, subject: 'funded' } }),
    });
    const agentId = ((await created.json()) as { id: string }).id;

    const { stdout } = await acg('credit', 'grant', '--agent', agentId, '--amount-uc', '2500000', '--note', 'test grant');
    expect(stdout).toMatch(new RegExp(`^granted 2500000 µc to ${agentId} as lot lot_\\w+ \\(through the gateway at ${gateway.url}\\)\\n$`));
    const refused = await acg('credit', 'grant', '--agent', 'agt_missing', '--amount-uc', '1000000').catch((e: { code: number; stderr: string }) => e);
    expect(refused).toMatchObject({ code: 2, stderr: 'refused: HTTP 404 not_found: no agent agt_missing\n' });

    const balance = await fetch(`${gateway.url}/v1/owner/agents/${agentId}/balance`, { headers: { authorization: `Bearer ${human}` } });
    expect(await balance.json()).toMatchObject({ availableUc: '2500000', grantedUc: '2500000' });
  }, 120_000);

  it('walks the whole purchase twice, reusing what the first run made, and the ledger stays exact', async () => {
    const first = await acg('demo');
    expect(first.stdout).toContain('jwtVerify(voucher');
    expect(summary(first.stdout)).toMatchObject({ available: '3500000', held: '0', captured: '1500000', granted: '5000000', earned: '1500000' });
    // The balance line names each figure as the done line does.
    expect(first.stdout).toMatch(/: available 3\.5 credits \(3500000 µc\), held 0 credits \(0 µc\), captured 1\.5 credits \(1500000 µc\), granted 5 credits \(5000000 µc\)\n/);

    const second = await acg('demo');
    expect(second.stdout).toContain('exists: reusing it');
    // Topped up by what the first run spent, then the same purchase again: one more partial capture.
    expect(summary(second.stdout)).toMatchObject({ available: '3500000', held: '0', captured: '3000000', granted: '6500000', earned: '3000000' });

    // The embedded database belongs to the gateway while it runs: stop it to read the ledger.
    expect(await gateway.kill('SIGTERM')).toBe(0);
    const db: Database = databaseUrl ? openPostgres(databaseUrl) : await openPglite(path.join(dataDir, 'pglite'));
    try {
      await expectLedgerInvariants(db);
      const { rows } = await db.query<{ state: string; n: bigint }>('SELECT state, count(*) AS n FROM holds GROUP BY state ORDER BY state');
      expect(rows).toEqual([{ state: 'captured', n: 2n }, { state: 'released', n: 2n }]);
    } finally {
      await db.close();
    }
  }, 240_000);
});

describe('acg demo against a server whose JSON is not the gateway\'s', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-demo-other-json-'));
  /** What the server answers, by method and path; anything else is a 404 problem. */
  let routes: Record<string, [number, string]> = {};
  const other = localServer((request, response) => {
    const [status, body] = routes[`${request.method} ${request.url}`] ?? [404, '{"code":"not_found"}'];
    response.writeHead(status, { 'content-type': 'application/json' }).end(body);
  }, dataDir);

  /** Runs the demo against the server with only the settings it needs (none of the test's own ACG_* or DATABASE_URL). */
  async function demoAgainst(answers: Record<string, [number, string]>): Promise<{ code: number; stdout: string; stderr: string }> {
    routes = answers;
    const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(ACG_|DATABASE_URL$|PORT$|HOST$)/.test(name)));
    const env = { ...inherited, ACG_BASE_URL: other.url, ACG_DATA_DIR: dataDir, ACG_OPERATOR_TOKEN: 'acg_op_test' };
    return run(process.execPath, [ACG, 'demo'], { env, timeout: 60_000 }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
    );
  }

  const owner = JSON.stringify({ owner: { id: 'own_1', email: 'demo-owner@example.com' } });

  it.each([
    ['an empty object', { 'GET /v1/me': [200, '{}'] }, 'GET /v1/me answered HTTP 200 without owner.id'],
    ['a list', { 'GET /v1/me': [200, '[]'] }, 'GET /v1/me answered HTTP 200 without owner.id'],
    ['null', { 'GET /v1/me': [200, 'null'] }, 'GET /v1/me answered HTTP 200 without owner.id'],
    ['a field of another kind', { 'GET /v1/me': [200, '{"owner":{"id":7}}'] }, 'GET /v1/me answered HTTP 200 with owner.id not a string'],
    [
      'a later step: an element of a list without a field',
      { 'GET /v1/me': [200, owner], 'GET /v1/owner/agents?limit=100': [200, '{"agents":[{"id":"agt_1"}]}'] },
      'GET /v1/owner/agents?limit=100 answered HTTP 200 without agents[0].identity.issuer',
    ],
    [
      'a later step: an amount that is not one',
      {
        'GET /v1/me': [200, owner],
        'GET /v1/owner/agents?limit=100': [200, '{"agents":[]}'],
        'POST /v1/owner/agents': [201, '{"id":"agt_1"}'],
        'GET /v1/owner/agents/agt_1/balance': [200, '{"availableUc":"lots"}'],
      },
      'GET /v1/owner/agents/agt_1/balance answered HTTP 200 with availableUc not an amount in µc',
    ],
  ] as Array<[string, Record<string, [number, string]>, string]>)('stops with one line naming the missing field, exit 2, for %s', async (_case, answers, found) => {
    const stopped = await demoAgainst(answers);
    expect(stopped.code).toBe(2);
    expect(stopped.stderr).toBe(`\nacg demo stopped: ${found}: is the gateway at ${other.url}?\n`);
  }, 60_000);

  it('names an error status whose body is not a problem object, without a stack trace: not the gateway, which always gives one (exit 2)', async () => {
    for (const body of ['null', '', '{}', '{"message":"no"}']) {
      const stopped = await demoAgainst({ 'GET /v1/me': [500, body] });
      expect(stopped, body).toMatchObject({ code: 2, stderr: `\nacg demo stopped: GET /v1/me answered HTTP 500 with no problem body: is the gateway at ${other.url}?\n` });
    }
  }, 60_000);

  it('names a refusal with a problem body as the gateway\'s, exit 2 as every acg command\'s refusal (found from outside: exit 1, which the credit commands keep for a broken invariant)', async () => {
    const stopped = await demoAgainst({ 'GET /v1/me': [403, '{"code":"forbidden","detail":"not you"}'] });
    expect(stopped).toMatchObject({ code: 2, stderr: '\nacg demo stopped: GET /v1/me answered HTTP 403 forbidden: not you\n' });
    // The operator credential refused at the top-up, as with ACG_OPERATOR_TOKEN=wrong.
    const owner = JSON.stringify({ owner: { id: 'own_1', email: 'demo-owner@example.com' } });
    const unauthorized = await demoAgainst({
      'GET /v1/me': [200, owner],
      'GET /v1/owner/agents?limit=100': [200, '{"agents":[]}'],
      'POST /v1/owner/agents': [201, '{"id":"agt_1"}'],
      'GET /v1/owner/agents/agt_1/balance': [200, '{"availableUc":"0"}'],
      'POST /v1/operator/credit-grants': [401, '{"code":"unauthorized","detail":"the operator credential is missing or wrong"}'],
    });
    expect(unauthorized).toMatchObject({ code: 2, stderr: '\nacg demo stopped: POST /v1/operator/credit-grants answered HTTP 401 unauthorized: the operator credential is missing or wrong\n' });
  }, 60_000);
});

describe('acg demo runs started together on a fresh gateway', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-demo-together-'));
  let env: Record<string, string>;
  let gateway: GatewayProcess;
  let dropDatabase = async () => {};

  beforeAll(async () => {
    let databaseUrl = '';
    if (onPostgres()) {
      const created = await createPostgresDatabase();
      databaseUrl = created.url!;
      dropDatabase = created.drop;
    }
    env = { ACG_DATA_DIR: dataDir, PORT: String(await freePort()), DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' };
    gateway = await spawnGateway({ ...env, LOG_LEVEL: 'info' }, { timeoutMs: 120_000 });
  }, 150_000);
  afterAll(async () => {
    await gateway?.kill('SIGKILL');
    await dropDatabase();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('all four finish: a run whose registration of the agent comes second reuses the one made first (found from outside: it stopped with 409), and a run whose topped-up credit another spent tops up again', async () => {
    const acg = () => run(process.execPath, [ACG, 'demo'], { env: { ...process.env, ...env }, timeout: 120_000 });
    // Four runs make both races likely: two registrations of one agent, and a hold taking what another run topped up.
    const together = await Promise.all([acg(), acg(), acg(), acg()]);
    for (const ran of together) expect(ran.stdout).toContain('done: ');
    expect(together.map((ran) => ran.stdout).join('\n')).toMatch(/registered meanwhile by another run: reusing it|exists: reusing it/);
  }, 150_000);
});
