// The `acg` command's own messages at a running gateway: what a person typing a command is told when it cannot do
// what was asked, from what the command finds at ACG_BASE_URL and in ACG_DATA_DIR. Each runs bin/acg.js, from a
// directory of its own, against an in-process gateway on the run's database (or a port where nothing listens).
// Parsing mistakes, servers that are not the gateway and `acg migrate` are in test/cli-usage.test.ts.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { describeRefusal } from '../src/operator/client.ts';
import { sha256Hex } from '../src/operator/credential.ts';
import { embeddedDatabaseDir } from '../src/platform/db/open.ts';
import { loadDevIssuerKeys, mintDevToken } from '../src/identity/dev-issuers.ts';
import { acg, acgWithInput, parse } from './support/acg-cli.ts';
import { freePort } from './support/doh-server.ts';
import { startTestGateway, type TestGateway } from './support/gateway.ts';
import { startWorld, type World } from './support/world.ts';

describe('commands aimed at a running gateway', () => {
  const gatewayDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-gateway-'));
  const elsewhere = mkdtempSync(path.join(tmpdir(), 'acg-cli-elsewhere-'));
  let world: World;
  let agentId: string;
  let nobody: string;

  beforeAll(async () => {
    world = await startWorld({ env: { ACG_DATA_DIR: gatewayDir } });
    agentId = (await world.createAgent('cli-owner@example.com', 'cli-agent')).id;
    nobody = `http://127.0.0.1:${await freePort()}`;
  });
  afterAll(async () => {
    await world?.close();
    rmSync(gatewayDir, { recursive: true, force: true });
    rmSync(elsewhere, { recursive: true, force: true });
  });

  const stray = path.join(elsewhere, '.acg-data');

  it('grants below one credit as given, with a warning naming 1 credit = 1,000,000 µc', async () => {
    const granted = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '5');
    expect(granted.code).toBe(0);
    expect(granted.stderr).toBe(
      'warning: --amount-uc 5 is 5 µc, less than one credit (1 credit = 1,000,000 µc); granting it as given. For 5 credits, give --amount-uc 5000000\n',
    );
    expect(granted.stdout).toMatch(new RegExp(`^granted 5 µc to ${agentId} as lot lot_\\w+ \\(through the gateway at ${world.url}\\)\\n$`));
    const quiet = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '1000000');
    expect(quiet).toMatchObject({ code: 0, stderr: '' });
  });

  it('a grant whose answer was lost says it may have been applied and names its key; the same command with --idempotency-key grants nothing again (found from outside)', async () => {
    // A proxy that passes the grant on and spoils its answer: the gateway applied it. `drop` closes the connection before
    // the answer, `midway` after its first bytes, `gateway-timeout` answers a proxy's 504 page.
    let spoil: 'drop' | 'midway' | 'gateway-timeout' = 'drop';
    // Only the grant's answer is spoiled: the probe of the gateway's mode (GET /readyz) passes as it is.
    const lossy = createServer(async (request, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const answer = await fetch(`${world.url}${request.url}`, { method: request.method, headers: request.headers as Record<string, string>, body: request.method === 'GET' ? undefined : Buffer.concat(chunks) });
      if (request.method === 'GET') {
        response.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' }).end(await answer.text());
      } else if (spoil === 'midway') {
        response.writeHead(201, { 'content-type': 'application/json', 'content-length': '400' });
        response.write('{"lot":{"id":"lot_');
        setTimeout(() => response.socket?.destroy(), 20);
      } else if (spoil === 'gateway-timeout') {
        response.writeHead(504, { 'content-type': 'text/html' }).end('<html><body>504 Gateway Time-out</body></html>');
      } else {
        response.socket?.destroy();
      }
    });
    await new Promise<void>((resolve) => lossy.listen(0, '127.0.0.1', resolve));
    const lotCount = async () => (await world.gw.gateway.db.query('SELECT id FROM credit_lots WHERE agent_id = $1', [agentId])).rows.length;
    try {
      const before = await lotCount();
      const lossyUrl = `http://127.0.0.1:${(lossy.address() as { port: number }).port}`;
      const lost = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: lossyUrl }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '2000000');
      expect(lost.code).toBe(2);
      const key = /its Idempotency-Key was ([\w-]+)/.exec(lost.stderr)?.[1];
      expect(lost.stderr).toContain(`no answer from the gateway at ${lossyUrl} (UND_ERR_SOCKET): the change may have been applied; its Idempotency-Key was ${key}.`);
      expect(lost.stderr).toContain(`or run the same command with --idempotency-key ${key}: the gateway then grants it at most once.`);
      expect(await lotCount()).toBe(before + 1);
      const retried = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '2000000', '--idempotency-key', key!);
      expect(retried.code, retried.stderr).toBe(0);
      expect(retried.stdout).toContain(`(through the gateway at ${world.url}, the first answer to this --idempotency-key (nothing granted again))`);
      expect(await lotCount()).toBe(before + 1);
      // The answer broken off after it began, and a proxy's 504: the same (found from outside: "terminated", and "is
      // the gateway at …?", each after a grant that went through).
      for (const [mode, reason] of [['midway', 'UND_ERR_SOCKET'], ['gateway-timeout', "HTTP 504 without the gateway's problem body, a proxy's answer"]] as const) {
        spoil = mode;
        const spoiled = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: lossyUrl }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '2000000');
        expect(spoiled.code, mode).toBe(2);
        expect(spoiled.stderr, mode).toContain(`no answer from the gateway at ${lossyUrl} (${reason}): the change may have been applied; its Idempotency-Key was `);
      }
      expect(await lotCount()).toBe(before + 3);
      // The key is the gateway's: with no gateway, the command does not grant in the database behind its back.
      const offline = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: nobody }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '2000000', '--idempotency-key', key!);
      expect([offline.code, offline.stderr]).toEqual([2, `no gateway answers at ${nobody}: with --idempotency-key the grant goes through the gateway only; start it, then run this again\n`]);
      // The same without the operator credential in this shell (none given, none in the data directory), beside a
      // database it could write to: the key was ignored there, and each run granted again (found from outside).
      const bare = mkdtempSync(path.join(tmpdir(), 'acg-cli-bare-'));
      try {
        // The run's migrated embedded database, which the PGlite project has (the PostgreSQL one runs without it).
        const migrated = inject('migratedPgliteDir');
        if (migrated) cpSync(migrated, embeddedDatabaseDir(bare), { recursive: true });
        const keyless = await acg(elsewhere, { ACG_DATA_DIR: bare, ACG_BASE_URL: nobody }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '2000000', '--idempotency-key', key!);
        expect([keyless.code, keyless.stdout, keyless.stderr]).toEqual([2, '', `no gateway answers at ${nobody}: with --idempotency-key the grant goes through the gateway only; start it, then run this again\n`]);
      } finally {
        rmSync(bare, { recursive: true, force: true });
      }
    } finally {
      lossy.close();
    }
  });

  it('refuses a credential a header cannot carry (a line break inside) without showing it (found from outside: fetch\'s error quoted it whole)', async () => {
    const token = `acg_op_wrapped${'x'.repeat(30)}\n${'y'.repeat(30)}`;
    for (const args of [['credit', 'grant', '--agent', agentId, '--amount-uc', '1000000'], ['agent', 'mandate', 'show', agentId]]) {
      const refused = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url, ACG_OPERATOR_TOKEN: token, ACG_OWNER_TOKEN: token }, ...args);
      expect(refused.code, args.join(' ')).toBe(2);
      expect(refused.stderr, args.join(' ')).toContain('the credential holds a line break, a space or another character a header cannot carry (was it pasted wrapped?): set it again in one piece');
      expect(`${refused.stdout}${refused.stderr}`, args.join(' ')).not.toMatch(/xxxxx|yyyyy/);
    }
  });

  it('says a default subject made from a long --email is that, not a --subject that was never given (found from outside)', async () => {
    const email = `${'a'.repeat(190)}@x.co`;
    const refused = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'dev', 'token', 'human', '--email', email);
    expect(refused).toEqual({
      code: 2,
      stdout: '',
      stderr: '--subject must be at most 200 characters, as the gateway takes a subject; it is 201, made from --email (human:<email>); give a shorter --subject\n',
    });
  });

  it('says "1 credit", not "1 credits", when warning that --amount-uc 1 is below one credit', async () => {
    const granted = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '1');
    expect(granted).toMatchObject({
      code: 0,
      stderr: 'warning: --amount-uc 1 is 1 µc, less than one credit (1 credit = 1,000,000 µc); granting it as given. For 1 credit, give --amount-uc 1000000\n',
    });
  });

  it('refuses an amount of more than 18 digits, saying the bound, before asking anything', async () => {
    const refused = await acg(elsewhere, { ACG_BASE_URL: nobody }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '99999999999999999999');
    expect(refused).toMatchObject({
      code: 2,
      stdout: '',
      stderr: '--amount-uc must be a whole number of microcredits of at most 18 digits, e.g. 5000000 for 5 credits\n',
    });
    expect(existsSync(stray)).toBe(false);
  });

  it('mints no dev token for a gateway that runs in live mode, and says so (found from outside: it printed one the gateway never accepts)', async () => {
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com', ACG_OPERATOR_TOKEN_SHA256: sha256Hex('acg_op_cli-live') } });
    try {
      const minted = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: live.url }, 'dev', 'token', 'human', '--email', 'ada@example.com');
      expect(minted).toEqual({
        code: 2,
        stdout: '',
        stderr: `the gateway at ${live.url} runs in live mode: it accepts no dev token, only tokens of its configured identity providers\n`,
      });
      // The other dev commands say the same of it, rather than "no operator credential here" or a bare 404.
      const published = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: live.url }, 'dev', 'dns', 'publish', 'shop.example.com', 'v=1');
      expect(published).toMatchObject({ code: 2, stderr: `the gateway at ${live.url} runs in live mode: it has no dev zone, and verifies domains against real DNS\n` });
      for (const env of [{ ACG_BASE_URL: live.url }, { ACG_BASE_URL: live.url, ACG_OPERATOR_TOKEN: 'acg_op_cli-live' }] as Array<Record<string, string>>) {
        const demo = await acg(elsewhere, env, 'demo');
        expect(demo).toMatchObject({ code: 2, stderr: `the gateway at ${live.url} runs in live mode: acg demo is for a dev gateway: it uses the built-in identity issuers and the dev DNS zone\n` });
      }
      // The same with a dev gateway's operator credential in ACG_DATA_DIR: not presented to the live gateway (found from outside).
      for (const env of [{ ACG_BASE_URL: live.url }, { ACG_BASE_URL: live.url, ACG_DATA_DIR: gatewayDir }] as Array<Record<string, string>>) {
        const granted = await acg(elsewhere, env, 'credit', 'grant', '--agent', 'agt_x', '--amount-uc', '1000000');
        expect(granted).toMatchObject({ code: 2, stderr: `the gateway at ${live.url} runs in live mode: run this with ACG_MODE=live and ACG_OPERATOR_TOKEN set to its operator credential\n` });
      }
    } finally {
      await live.close();
    }
  });

  it("sends the data directory's dev operator credential only to a gateway that says it runs in dev mode: never to a live one, nor to one that does not say (found from outside: a live gateway was sent it)", async () => {
    // A server that answers as a live gateway would (its /healthz naming its mode), or as something else (no mode), and
    // records every credential it is sent. Its /readyz is not ready: the mode is read where no database is asked.
    let healthz = '{"status":"ok","mode":"live"}';
    const presented: string[] = [];
    const server = createServer((request, response) => {
      if (request.headers.authorization) presented.push(request.headers.authorization);
      const [status, body] =
        request.url === '/healthz' ? [200, healthz] : request.url === '/readyz' ? [503, '{"code":"storage_unavailable"}'] : [401, '{"code":"unauthorized"}'];
      response.writeHead(status, { 'content-type': 'application/json' }).end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const env = { ACG_BASE_URL: url, ACG_DATA_DIR: gatewayDir };
    const commands = [['credit', 'grant', '--agent', 'agt_x', '--amount-uc', '1000000'], ['dev', 'dns', 'publish', '--merchant', 'mer_x'], ['demo']];
    try {
      const live = await acg(elsewhere, env, ...commands[0]!);
      expect(live).toEqual({ code: 2, stdout: '', stderr: `the gateway at ${url} runs in live mode: run this with ACG_MODE=live and ACG_OPERATOR_TOKEN set to its operator credential\n` });
      for (const args of commands.slice(1)) expect((await acg(elsewhere, env, ...args)).stderr, args.join(' ')).toMatch(new RegExp(`^the gateway at ${url} runs in live mode: `));
      healthz = '{"status":"ok"}';
      for (const args of commands) {
        expect(await acg(elsewhere, env, ...args), args.join(' ')).toEqual({
          code: 2,
          stdout: '',
          stderr:
            `${url} answers, but does not say it is a dev gateway (its /healthz names no mode: it is not the gateway, or not this release of it), ` +
            `and ${path.join(gatewayDir, 'operator-token')} is a dev gateway's credential, sent to no other: set ACG_BASE_URL (or PORT) to where the dev ` +
            "gateway runs, or ACG_OPERATOR_TOKEN to the gateway's operator credential\n",
        });
      }
      expect(presented).toEqual([]);
      // ACG_OPERATOR_TOKEN is the operator's own choice of credential for that gateway: it is presented.
      const given = await acg(elsewhere, { ...env, ACG_OPERATOR_TOKEN: 'acg_op_given' }, ...commands[0]!);
      expect(given.code).toBe(2);
      expect(presented).toEqual(['Bearer acg_op_given']);
      // A dev gateway whose database is slow or away (its /readyz 503) still says its mode, and is sent the credential
      // (found in CI: four `acg demo` at once on a loaded machine went without it).
      healthz = '{"status":"ok","mode":"dev"}';
      presented.length = 0;
      await acg(elsewhere, env, ...commands[1]!);
      expect(presented).toEqual([`Bearer ${readFileSync(path.join(gatewayDir, 'operator-token'), 'utf8').trim()}`]);
    } finally {
      server.close();
    }
  });

  it('mints no dev token under another base URL than the gateway names its issuers with, and says which to set (found from outside: localhost for 127.0.0.1)', async () => {
    const other = world.url.replace('127.0.0.1', 'localhost');
    for (const kind of [['human', '--email', 'ada@example.com'], ['agent', '--subject', 'scout', '--owner-email', 'ada@example.com']]) {
      const minted = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: other }, 'dev', 'token', ...kind);
      expect(minted).toEqual({
        code: 2,
        stdout: '',
        stderr:
          `the gateway at ${other} names its ${kind[0]} issuer ${world.url}/dev/issuers/${kind[0]}, so it would refuse a token issued as ` +
          `${other}/dev/issuers/${kind[0]}: set ACG_BASE_URL=${world.url}, the base URL the gateway was started with\n`,
      });
    }
  });

  it('mints a dev token with no dev gateway answering, and warns which gateway alone will take it (found from outside: it was silent; "no gateway" was said of any other server too)', async () => {
    const minted = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: nobody }, 'dev', 'token', 'human', '--email', 'ada@example.com');
    expect(minted.code).toBe(0);
    expect(minted.stdout).toMatch(/^ey[\w-]+\.[\w-]+\.[\w-]+\n$/);
    expect(minted.stderr).toBe(
      `warning: no dev gateway answered at ${nobody}; the token names the issuer ${nobody}/dev/issuers/human, which only a dev gateway ` +
        `started with ACG_BASE_URL=${nobody} and this ACG_DATA_DIR accepts\n`,
    );
  });

  it('mints no dev token for an email that is not one (the gateway would refuse it): one line, exit 2', async () => {
    const human = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'dev', 'token', 'human', '--email', 'notanemail');
    expect(human).toMatchObject({
      code: 2,
      stdout: '',
      stderr: '--email "notanemail" is not an email address: give one like ada@example.com (one @, no spaces, at most 254 characters)\n',
    });
    const agent = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'dev', 'token', 'agent', '--subject', 'scout', '--owner-email', 'ada at example.com');
    expect(agent).toMatchObject({
      code: 2,
      stdout: '',
      stderr: '--owner-email "ada at example.com" is not an email address: give one like ada@example.com (one @, no spaces, at most 254 characters)\n',
    });
    const good = await acg(elsewhere, { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url }, 'dev', 'token', 'human', '--email', 'ada@example.com');
    expect(good.code, good.stderr).toBe(0);
    expect(good.stdout).toMatch(/^ey[\w-]+\.[\w-]+\.[\w-]+\n$/);
  });

  it('mints no dev token for a subject longer than the gateway takes (200 characters): one line, exit 2 (found from outside: 3000 were minted)', async () => {
    const env = { ACG_DATA_DIR: gatewayDir, ACG_BASE_URL: world.url };
    const long = 's'.repeat(3000);
    for (const args of [['human', '--email', 'ada@example.com', '--subject', long], ['agent', '--subject', long, '--owner-email', 'ada@example.com']]) {
      expect(await acg(elsewhere, env, 'dev', 'token', ...args), args[0]).toEqual({
        code: 2,
        stdout: '',
        stderr: '--subject must be at most 200 characters, as the gateway takes a subject; it is 3000\n',
      });
    }
    // At the bound, as an agent's registration takes it: minted.
    const minted = await acg(elsewhere, env, 'dev', 'token', 'agent', '--subject', 'a'.repeat(200), '--owner-email', 'edge@example.com');
    expect(minted.code, minted.stderr).toBe(0);
    expect(minted.stdout).toMatch(/^ey[\w-]+\.[\w-]+\.[\w-]+\n$/);
  });

  it('says a gateway runs but the operator credential is not here, and creates no database, when run from another directory', async () => {
    const refused = await acg(elsewhere, { ACG_BASE_URL: world.url }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '5000000');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toBe(
      `a gateway answers at ${world.url}, but there is no operator credential for it here: ${path.join(stray, 'operator-token')} does not exist. ` +
        "A dev gateway writes it into its own ACG_DATA_DIR: run this in the directory the gateway was started from, or set ACG_DATA_DIR to the gateway's data directory (or ACG_OPERATOR_TOKEN to its credential)\n",
    );
    expect(existsSync(stray)).toBe(false);
  });

  it('says so the same way for acg demo and acg dev dns publish', async () => {
    for (const args of [['demo'], ['dev', 'dns', 'publish', '--merchant', 'mer_x']]) {
      const refused = await acg(elsewhere, { ACG_BASE_URL: world.url }, ...args);
      expect(refused.code, args.join(' ')).toBe(2);
      expect(refused.stderr).toContain(`a gateway answers at ${world.url}, but there is no operator credential for it here`);
    }
    expect(existsSync(stray)).toBe(false);
  });

  it('says no gateway answers and there is no database here, and creates none', async () => {
    const refused = await acg(elsewhere, { ACG_BASE_URL: nobody }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '5000000');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toBe(
      `no gateway answers at ${nobody}, and there is no database in ${stray}: start the gateway (npm start) and run this again in its directory, ` +
        'or set ACG_BASE_URL (or PORT) to where it runs and ACG_DATA_DIR to its data directory (DATABASE_URL to its database on PostgreSQL)\n',
    );
    const demo = await acg(elsewhere, { ACG_BASE_URL: nobody }, 'demo');
    expect(demo).toMatchObject({ code: 2, stderr: `no gateway answers at ${nobody}: start it first (npm start), or set ACG_BASE_URL (or PORT) to where it runs\n` });
    expect(existsSync(stray)).toBe(false);
  });

  it('says a gateway holds the database but does not answer at the address, when it serves on another port', async () => {
    // A data directory whose embedded database a live process holds (its lock file names this test's process).
    const held = mkdtempSync(path.join(tmpdir(), 'acg-cli-held-'));
    try {
      mkdirSync(path.join(held, 'pglite'), { recursive: true });
      writeFileSync(path.join(held, 'pglite', 'acg.lock'), String(process.pid));
      const refused = await acg(elsewhere, { ACG_DATA_DIR: held, ACG_BASE_URL: nobody }, 'credit', 'grant', '--agent', agentId, '--amount-uc', '5000000');
      expect(refused.code).toBe(2);
      expect(refused.stderr).toBe(
        `no gateway answers at ${nobody}, yet the embedded database in ${path.join(held, 'pglite')} is in use by process ${process.pid}: a gateway serves on another address. ` +
          'Set ACG_BASE_URL (or PORT) to it and run this again, e.g. PORT=9090 npx acg credit grant …\n',
      );
    } finally {
      rmSync(held, { recursive: true, force: true });
    }
  });

  it("names the credential a gateway does not accept: another data directory's", async () => {
    const otherDir = path.join(elsewhere, 'other-data');
    try {
      const other = { ACG_DATA_DIR: otherDir, ACG_BASE_URL: world.url };
      mkdirSync(otherDir);
      writeFileSync(path.join(otherDir, 'operator-token'), 'acg_op_from-another-gateway\n', { mode: 0o600 });
      const refused = await acg(elsewhere, other, 'credit', 'grant', '--agent', agentId, '--amount-uc', '5000000');
      expect(refused.code).toBe(2);
      expect(refused.stderr).toBe(
        `the gateway at ${world.url} does not accept the operator credential from ${path.join(otherDir, 'operator-token')}: it was started with another ` +
          "ACG_DATA_DIR (or another ACG_OPERATOR_TOKEN_SHA256). Run this with the gateway's ACG_DATA_DIR, or ACG_OPERATOR_TOKEN set to its credential\n",
      );
    } finally {
      rmSync(otherDir, { recursive: true, force: true });
    }
  });

  it('names, in live mode, the setting that holds the operator credential there: not a data directory (found from outside)', () => {
    const refusal = describeRefusal(
      { mode: 'live', baseUrl: 'https://gateway.example', dataDir: '/var/lib/acg', operatorToken: 'acg_op_wrong' },
      { status: 401, body: { code: 'unauthorized' }, replayed: false },
    );
    expect(refusal).toBe(
      'the gateway at https://gateway.example does not accept the operator credential from ACG_OPERATOR_TOKEN: its ACG_OPERATOR_TOKEN_SHA256 is another\'s. ' +
        'Set ACG_OPERATOR_TOKEN to the credential whose SHA-256 the gateway runs with',
    );
  });

  it("mints no dev token without the gateway's issuer keys, and makes none", async () => {
    const running = await acg(elsewhere, { ACG_BASE_URL: world.url }, 'dev', 'token', 'human', '--email', 'ada@example.com');
    expect(running.code).toBe(2);
    expect(running.stderr).toBe(
      `a gateway answers at ${world.url}, but its dev issuer keys are not here: ${path.join(stray, 'dev-issuers.json')} does not exist. A dev gateway makes them ` +
        "in its own ACG_DATA_DIR: run this in the directory the gateway was started from, or set ACG_DATA_DIR to the gateway's data directory\n",
    );
    const stopped = await acg(elsewhere, { ACG_BASE_URL: nobody }, 'dev', 'token', 'agent', '--subject', 'scout', '--owner-email', 'ada@example.com');
    expect(stopped).toMatchObject({
      code: 2,
      stderr: `no gateway answers at ${nobody}, and ${path.join(stray, 'dev-issuers.json')} does not exist: start the gateway first (npm start), which makes the dev issuers' keys, then run this in its directory\n`,
    });
    expect(readdirSync(elsewhere)).toEqual([]);
  });
});

describe('acg agent mandate show and set', () => {
  const workDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-mandate-'));
  const devDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-dev-gateway-'));
  let world: World;
  let dev: TestGateway;
  let agent: { id: string; token: string; ownerToken: string };
  let nobody: string;
  let env: Record<string, string>;
  let counter = 0;

  beforeAll(async () => {
    world = await startWorld();
    agent = await world.createAgent('cli-mandate@example.com', 'cli-mandate-agent');
    nobody = `http://127.0.0.1:${await freePort()}`;
    env = { ACG_BASE_URL: world.url, ACG_OWNER_TOKEN: agent.ownerToken };
    // A dev gateway with the built-in identity issuers, whose keys are in its data directory.
    dev = await startTestGateway({ env: { ACG_DATA_DIR: devDir } });
  });
  afterAll(async () => {
    await world?.close();
    await dev?.close();
    rmSync(workDir, { recursive: true, force: true });
    rmSync(devDir, { recursive: true, force: true });
  });

  /** A file of the working directory holding `content` (JSON unless a string). */
  function file(content: unknown): string {
    const name = path.join(workDir, `mandate-${++counter}.json`);
    writeFileSync(name, typeof content === 'string' ? content : JSON.stringify(content));
    return name;
  }

  const mandateNow = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken })).body;

  it('show prints the mandate in force as JSON; set takes a file, what show printed, or standard input, and prints the new version', async () => {
    const shown = await acg(workDir, env, 'agent', 'mandate', 'show', agent.id);
    expect(shown).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(shown.stdout)).toEqual(await mandateNow());

    const rules = { budgets: [{ id: 'daily', limitUc: '20000000', period: 'day' }], timeZone: 'Asia/Kolkata' };
    const set = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file(rules));
    expect(set).toMatchObject({ code: 0, stderr: '' });
    const written = JSON.parse(set.stdout);
    expect(written).toMatchObject({ agentId: agent.id, version: 2, ...rules, usage: [expect.objectContaining({ budgetId: 'daily', spentUc: '0' })] });
    expect(written).toEqual(await mandateNow());

    // What show printed, edited, is what set takes: the members besides the rules are left out for it.
    const edited = JSON.parse((await acg(workDir, env, 'agent', 'mandate', 'show', agent.id)).stdout);
    edited.budgets[0].limitUc = '30000000';
    const again = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file(edited));
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ version: 3, budgets: [{ id: 'daily', limitUc: '30000000' }], timeZone: 'Asia/Kolkata' });

    // A byte order mark, as some Windows editors save, is read past (RFC 8259 §8.1; found from outside: "not JSON").
    const piped = await acgWithInput(workDir, env, `\uFEFF${JSON.stringify({ allowedCategories: ['books'] })}`, 'agent', 'mandate', 'set', agent.id, '--file', '-');
    expect(piped).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(piped.stdout)).toMatchObject({ version: 4, allowedCategories: ['books'], budgets: [] });

    // The file show printed at version 2 is stale now: set changes nothing and says so, unless --force.
    const stale = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file(edited));
    expect(stale).toMatchObject({ code: 2, stdout: '' });
    expect(stale.stderr).toMatch(/^not set: .*mandate-\d+\.json was read at mandate version 2, and the mandate has changed since \(version 4 is in force\)\. Run `npx acg agent mandate show agt_\w+` again .* or give --force /);
    expect((await mandateNow()).version).toBe(4);
    const forced = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file(edited), '--force');
    expect(forced.code, forced.stderr).toBe(0);
    expect(JSON.parse(forced.stdout)).toMatchObject({ version: 5, budgets: [{ id: 'daily', limitUc: '30000000' }] });

    // A version that is no version is refused, not sent without If-Match (found from outside: "2" replaced version 3).
    for (const version of ['5', 0, -1, 1.5, null, true, 1e30]) {
      const odd = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file({ ...edited, version }));
      expect(odd, JSON.stringify(version)).toMatchObject({ code: 2, stdout: '' });
      expect(odd.stderr).toMatch(new RegExp(`says "version": ${JSON.stringify(version).replace(/[.+]/g, '\\$&')}, which is no mandate version .* or give --force `));
    }
    expect((await mandateNow()).version).toBe(5);
  });

  it('says no gateway answers, with or without a credential', async () => {
    const message = `no gateway answers at ${nobody}: start it first (npm start), or set ACG_BASE_URL (or PORT) to where it runs\n`;
    expect(await acg(workDir, { ...env, ACG_BASE_URL: nobody }, 'agent', 'mandate', 'show', agent.id)).toMatchObject({ code: 2, stdout: '', stderr: message });
    expect(await acg(workDir, { ...env, ACG_BASE_URL: nobody }, 'agent', 'mandate', 'set', agent.id, '--file', file({}))).toMatchObject({ code: 2, stderr: message });
    expect(await acg(workDir, { ACG_BASE_URL: nobody }, 'agent', 'mandate', 'show', agent.id)).toMatchObject({ code: 2, stderr: message });
  });

  it('says a gateway answers but no owner credential was given, and how to give one', async () => {
    expect(await acg(workDir, { ACG_BASE_URL: world.url }, 'agent', 'mandate', 'show', agent.id)).toMatchObject({
      code: 2,
      stderr:
        `a gateway answers at ${world.url}, but no owner credential was given: this command acts as the agent's owner. Set ACG_OWNER_TOKEN ` +
        "to the owner's session token (a human session JWT, or an OAuth access token with scope svc:owner), or give --owner-email <email> to sign in " +
        "as that owner with the dev gateway's built-in issuer\n",
    });
    // With a human identity provider configured, there is no dev sign-in to offer.
    expect((await acg(workDir, { ACG_BASE_URL: world.url, ACG_HUMAN_ISSUER: world.human.issuer }, 'agent', 'mandate', 'show', agent.id)).stderr).toMatch(/scope svc:owner\)\n$/);
  });

  it('names the agent it did not find among the owner\'s (404): an unknown id, another owner\'s agent', async () => {
    const other = await world.createAgent('cli-mandate-other@example.com', 'cli-mandate-other');
    for (const id of ['agt_nosuchagent', other.id]) {
      const refused = await acg(workDir, env, 'agent', 'mandate', 'show', id);
      expect(refused).toMatchObject({
        code: 2,
        stdout: '',
        stderr: `no agent ${id} among the agents of the owner of ACG_OWNER_TOKEN (HTTP 404 not_found: no agent ${id} among your agents): check the agent id, and that the credential is its owner's\n`,
      });
    }
    expect((await acg(workDir, env, 'agent', 'mandate', 'set', other.id, '--file', file({}))).stderr).toMatch(new RegExp(`^no agent ${other.id} among the agents of the owner of ACG_OWNER_TOKEN \\(HTTP 404`));
  });

  it('names each bad member of the file by its path (400), and writes no version', async () => {
    const before = (await mandateNow()).version;
    const schema = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file({ budgets: [{ id: 'daily', limitUc: 5, period: 'day' }] }));
    expect(schema.code).toBe(2);
    expect(schema.stderr).toMatch(new RegExp(`^the gateway refused the mandate in ${workDir}/mandate-\\d+\\.json \\(HTTP 400 invalid_input\\):\\n  /budgets/0/limitUc: must be microcredits as a string of 1 to 18 digits, e.g. "1500000" \\(a JSON number loses microcredits past 2\\^53\\)\\n$`));
    // A member the mandate does not have: the gateway's problem names it.
    const unknownMember = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file({ budgets: [], budget: [] }));
    expect(unknownMember.stderr).toMatch(/\(HTTP 400 invalid_input\):\n {2}\S*\/budget: is not a known member here\n$/);
    const rule = await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', file({ budgets: [{ id: 'a', limitUc: '1', period: 'day' }, { id: 'a', limitUc: '2', period: 'week' }] }));
    // A rule the schema cannot state names its member as the schema's refusals do.
    expect(rule.stderr).toMatch(/\(HTTP 400 invalid_input\):\n {2}\/budgets\/1\/id: "a" is used twice; budget ids are unique within a mandate\n$/);
    const piped = await acgWithInput(workDir, env, JSON.stringify({ timeZone: 'Mars/Olympus' }), 'agent', 'mandate', 'set', agent.id, '--file', '-');
    expect(piped.stderr).toMatch(/^the gateway refused the mandate in standard input \(HTTP 400 invalid_input\):\n {2}\/timeZone: "Mars\/Olympus" is not an IANA time zone/);
    expect((await mandateNow()).version).toBe(before);
  });

  it('refuses a file it cannot use before asking the gateway: missing, not JSON, not an object, another agent\'s', async () => {
    const before = (await mandateNow()).version;
    const cases: Array<[string, string]> = [
      [path.join(workDir, 'nowhere.json'), `cannot read ${path.join(workDir, 'nowhere.json')}: no such file\n`],
      [file('{"budgets": ['), `is not JSON: `],
      [file([1, 2]), 'must hold a JSON object: the mandate\'s rules, as `acg agent mandate show` prints them\n'],
      [file({ agentId: 'agt_someoneelse', budgets: [] }), `is the mandate of agent agt_someoneelse, not of ${agent.id}: remove its agentId to give these rules to ${agent.id}\n`],
      [file(' '.repeat(1_048_577)), 'holds more than 1048576 bytes: that is no mandate\n'],
    ];
    for (const [name, message] of cases) {
      const refused = await acg(workDir, { ...env, ACG_BASE_URL: nobody }, 'agent', 'mandate', 'set', agent.id, '--file', name);
      expect(refused.code, name).toBe(2);
      expect(refused.stderr, name).toContain(message);
    }
    const flood = await acgWithInput(workDir, { ...env, ACG_BASE_URL: nobody }, ' '.repeat(1_048_577), 'agent', 'mandate', 'set', agent.id, '--file', '-');
    expect(flood).toMatchObject({ code: 2, stderr: 'standard input holds more than 1048576 bytes: that is no mandate\n' });
    expect((await mandateNow()).version).toBe(before);
  });

  it('refuses a directory given as --file in one line, exit 2, for mandate set and delegates create', async () => {
    const before = (await mandateNow()).version;
    for (const args of [['agent', 'mandate', 'set', agent.id], ['agent', 'delegates', 'create', agent.id, '--name', 'Dir', '--subject', 'cli-dir']]) {
      const refused = await acg(workDir, env, ...args, '--file', workDir);
      expect(refused, args.join(' ')).toEqual({ code: 2, stdout: '', stderr: `cannot read ${workDir}: it is a directory\n` });
    }
    const notADirectory = path.join(file({}), 'rules.json');
    expect(await acg(workDir, env, 'agent', 'mandate', 'set', agent.id, '--file', notADirectory)).toEqual({
      code: 2,
      stdout: '',
      stderr: `cannot read ${notADirectory}: a part of its path is not a directory\n`,
    });
    expect((await mandateNow()).version).toBe(before);
  });

  it('says the gateway does not accept the credential (401), or that it is not an owner\'s (403)', async () => {
    expect(await acg(workDir, { ...env, ACG_OWNER_TOKEN: 'not-a-token' }, 'agent', 'mandate', 'show', agent.id)).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(
        new RegExp(`^the gateway at ${world.url} does not accept the owner credential from ACG_OWNER_TOKEN \\(HTTP 401 unauthorized: .+\\): it has expired, or is not a session of this gateway's human identity provider\\n$`),
      ),
    });
    // An owner token for the MCP endpoint: said so, not "expired" (found from outside).
    const ownerId = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id;
    const mcpToken = await world.accessToken({ sub: ownerId, scope: 'svc:owner', email: 'cli-mandate@example.com' }, `${world.url}/mcp`);
    expect((await acg(workDir, { ...env, ACG_OWNER_TOKEN: mcpToken }, 'agent', 'mandate', 'show', agent.id)).stderr).toMatch(
      new RegExp(`: it was issued for another resource \\(a token for ${world.url}/mcp serves MCP only\\); ask for one whose resource is ${world.url}\\n$`),
    );
    expect(await acg(workDir, { ...env, ACG_OWNER_TOKEN: agent.token }, 'agent', 'mandate', 'show', agent.id)).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/^the credential from ACG_OWNER_TOKEN is not an owner's \(HTTP 403 .+\): a mandate is read and set with its owner's session, not an agent's or a merchant's credential\n$/),
    });
  });

  it('signs in with --owner-email on a dev gateway with the built-in issuer, and says why it cannot elsewhere', async () => {
    const keys = await loadDevIssuerKeys(devDir);
    const devOwner = await mintDevToken(keys, {
      baseUrl: dev.url, audience: 'agent-credit-gateway', kind: 'human', subject: 'human:dev-owner@example.com', email: 'dev-owner@example.com', ownerEmailClaim: 'owner_email', nowS: Math.floor(Date.now() / 1000),
    });
    const registered = await fetch(`${dev.url}/v1/owner/agents`, {
      method: 'POST',
      headers: { authorization: `Bearer ${devOwner}`, 'content-type': 'application/json', 'idempotency-key': 'cli-dev-agent' },
      body: JSON.stringify({ name: 'Dev agent', identity: { issuer: `${dev.url}/dev/issuers/agent`, subject: 'cli-dev-agent' } }),
    });
    expect(registered.status).toBe(201);
    const devAgentId = ((await registered.json()) as { id: string }).id;
    const devEnv = { ACG_BASE_URL: dev.url, ACG_DATA_DIR: devDir };

    const set = await acg(workDir, devEnv, 'agent', 'mandate', 'set', devAgentId, '--owner-email', 'Dev-Owner@example.com', '--file', file({ approvalAboveUc: '5000000' }));
    expect(set, set.stderr).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(set.stdout)).toMatchObject({ agentId: devAgentId, version: 2, approvalAboveUc: '5000000' });
    const shown = await acg(workDir, devEnv, 'agent', 'mandate', 'show', devAgentId, '--owner-email', 'dev-owner@example.com');
    expect(JSON.parse(shown.stdout)).toEqual(JSON.parse(set.stdout));
    // Another owner's session does not reach the agent.
    expect((await acg(workDir, devEnv, 'agent', 'mandate', 'show', devAgentId, '--owner-email', 'someone@example.com')).stderr).toBe(
      `no agent ${devAgentId} among the agents of the owner of --owner-email someone@example.com (a dev session) (HTTP 404 not_found: no agent ${devAgentId} among your agents): check the agent id, and that the credential is its owner's\n`,
    );
    // Without the gateway's data directory, there are no keys to sign with: said, and none made.
    const stray = path.join(workDir, '.acg-data');
    expect(await acg(workDir, { ACG_BASE_URL: dev.url }, 'agent', 'mandate', 'show', devAgentId, '--owner-email', 'dev-owner@example.com')).toMatchObject({
      code: 2,
      stderr:
        `a gateway answers at ${dev.url}, but its dev issuer keys are not here: ${path.join(stray, 'dev-issuers.json')} does not exist. A dev gateway makes them ` +
        "in its own ACG_DATA_DIR: run this in the directory the gateway was started from, or set ACG_DATA_DIR to the gateway's data directory\n",
    });
    expect(existsSync(stray)).toBe(false);
    // A configured human identity provider, or live mode: no dev sign-in.
    expect((await acg(workDir, { ...devEnv, ACG_HUMAN_ISSUER: world.human.issuer }, 'agent', 'mandate', 'show', devAgentId, '--owner-email', 'dev-owner@example.com')).stderr).toBe(
      `a human identity issuer is configured (ACG_HUMAN_ISSUER), so --owner-email cannot sign in: set ACG_OWNER_TOKEN to the owner's session token from ${world.human.issuer}\n`,
    );
    expect((await acg(workDir, { ...devEnv, ACG_MODE: 'live' }, 'agent', 'mandate', 'show', devAgentId, '--owner-email', 'dev-owner@example.com')).stderr).toBe(
      '--owner-email signs in with the built-in dev issuer, which only dev mode has: set ACG_OWNER_TOKEN to a session token of the owner\n',
    );
  });

  it('says a live gateway takes no --owner-email, on every command that takes it (found from outside: its 401 was said as an expired session)', async () => {
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com' } });
    try {
      // The dev gateway's data directory, with the dev issuer's keys a session would be signed with.
      const liveEnv = { ACG_BASE_URL: live.url, ACG_DATA_DIR: devDir };
      for (const args of [
        ['agent', 'mandate', 'show', 'agt_x'],
        ['agent', 'mandate', 'set', 'agt_x', '--file', file({})],
        ['agent', 'freeze', 'agt_x'],
        ['agent', 'unfreeze', 'agt_x'],
        ['agent', 'delegates', 'list', 'agt_x'],
        ['agent', 'delegates', 'create', 'agt_x', '--name', 'Buyer', '--subject', 'cli-live'],
      ]) {
        expect(await acg(workDir, liveEnv, ...args, '--owner-email', 'ada@example.com'), args.join(' ')).toEqual({
          code: 2,
          stdout: '',
          stderr:
            `the gateway at ${live.url} runs in live mode: --owner-email works in dev mode only (it signs a session with the dev gateway's built-in issuer): ` +
            "set ACG_OWNER_TOKEN to the owner's session token\n",
        });
      }
    } finally {
      await live.close();
    }
  });

  it('--help says which owner credential wins when both are given: --owner-email over ACG_OWNER_TOKEN', async () => {
    for (const route of [['agent', 'mandate', 'show'], ['agent', 'mandate', 'set'], ['agent', 'freeze'], ['agent', 'unfreeze'], ['agent', 'delegates', 'list'], ['agent', 'delegates', 'create']]) {
      const { out } = await parse(...route, '--help');
      expect(out.replace(/\s+/g, ' '), route.join(' ')).toContain('it wins over ACG_OWNER_TOKEN when both are given');
      expect(out.replace(/\s+/g, ' '), route.join(' ')).toMatch(/given both, --owner-email wins/);
    }
  });

  it('signs in with --owner-email when ACG_OWNER_TOKEN is set too: the option given wins over the environment, on every command that takes it', async () => {
    const devEnv = { ACG_BASE_URL: dev.url, ACG_DATA_DIR: devDir, ACG_OWNER_TOKEN: 'not-a-token' };
    const missing = 'agt_nosuchagent';
    const commands = [
      ['agent', 'mandate', 'show', missing],
      ['agent', 'mandate', 'set', missing, '--file', file({})],
      ['agent', 'freeze', missing],
      ['agent', 'unfreeze', missing],
      ['agent', 'delegates', 'list', missing],
      ['agent', 'delegates', 'create', missing, '--name', 'Buyer', '--subject', 'cli-precedence'],
    ];
    for (const args of commands) {
      const refused = await acg(workDir, devEnv, ...args, '--owner-email', 'someone@example.com');
      expect(refused.code, args.join(' ')).toBe(2);
      // The dev session reached the gateway (a 404 among its agents), not ACG_OWNER_TOKEN (a 401).
      expect(refused.stderr, args.join(' ')).toMatch(new RegExp(`^no agent ${missing} among the agents of the owner of --owner-email someone@example\\.com \\(a dev session\\) \\(HTTP 404 `));
    }
    // Without the option, the environment's credential is the one presented.
    expect((await acg(workDir, devEnv, 'agent', 'mandate', 'show', missing)).stderr).toMatch(/^the gateway at .* does not accept the owner credential from ACG_OWNER_TOKEN \(HTTP 401 /);
    // A malformed --owner-email is refused before anything is signed or sent.
    expect(await acg(workDir, devEnv, 'agent', 'mandate', 'show', missing, '--owner-email', 'someone')).toEqual({
      code: 2,
      stdout: '',
      stderr: '--owner-email "someone" is not an email address: give one like ada@example.com (one @, no spaces, at most 254 characters)\n',
    });
  });

  it('agent delegates create registers a delegate under a mandate within its parent\'s (a wider one refused naming the rule); list prints the tree', async () => {
    const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: agent.ownerToken,
      key: 'cli-delegation',
      body: { budgets: [{ id: 'daily', limitUc: '10000000', period: 'day' }], delegation: { allowed: true, maxDepth: 1 } },
    });
    expect(put.status).toBe(200);
    const wider = await acg(workDir, env, 'agent', 'delegates', 'create', agent.id, '--name', 'Wide', '--subject', 'cli-wide', '--file', file({ budgets: [{ id: 'daily', limitUc: '20000000', period: 'day' }] }));
    expect(wider.code).toBe(2);
    expect(wider.stderr).toMatch(/^the gateway refused the delegate: HTTP 400 invalid_input, reason budget_wider_than_parent: \S/);
    const created = await acg(workDir, env, 'agent', 'delegates', 'create', agent.id, '--name', 'Buyer', '--subject', 'cli-buyer', '--file', file({ budgets: [{ id: 'daily', limitUc: '4000000', period: 'day' }] }));
    expect(created.code, created.stderr).toBe(0);
    const delegate = JSON.parse(created.stdout);
    expect(delegate).toMatchObject({ name: 'Buyer', parentId: agent.id, depth: 1, identity: { subject: 'cli-buyer' } });
    const listed = await acg(workDir, env, 'agent', 'delegates', 'list', agent.id);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual((await world.api('GET', `/v1/owner/agents/${agent.id}/delegates`, { token: agent.ownerToken })).body);
    expect(JSON.parse(listed.stdout).nodes.map((node: { agent: { id: string } }) => node.agent.id)).toEqual([agent.id, delegate.id]);
  });
});
