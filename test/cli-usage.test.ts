// The `acg` command's own messages that need no gateway of the run's database: parsing mistakes (commander's parse,
// no action runs), commands aimed at a server that is not the gateway, and `acg migrate` and `acg credit check` on
// a data directory of their own or a PostgreSQL that refuses. What a command finds at a running gateway is in
// test/cli.test.ts.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { execFile, spawn } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { buildCli } from '../src/cli.ts';
import { ENV_VARS } from '../src/platform/config.ts';
import { listMigrations, migrationName } from '../src/platform/db/migrate.ts';
import { ACG, acg, commandPath, everyCommand, inherited, localServer, parse } from './support/acg-cli.ts';
import { freePort } from './support/doh-server.ts';

const run = promisify(execFile);


describe('acg --help', () => {
  it('works on every command: its usage line and its description', async () => {
    const commands = everyCommand(buildCli());
    expect(commands.length).toBeGreaterThan(10);
    for (const command of commands) {
      const route = commandPath(command);
      const { out, code } = await parse(...route, '--help');
      expect(code, route.join(' ')).toBe('commander.helpDisplayed');
      expect(out).toContain(`Usage: ${['acg', ...route].join(' ')}`);
      expect(command.description().length, route.join(' ')).toBeGreaterThan(10);
      expect(out).toContain(command.description().slice(0, 30));
    }
  });

  it('is printed by the built module run directly, `node dist/cli.js --help`, as by acg (found from outside: it printed nothing)', async () => {
    const { stdout } = await run(process.execPath, [path.resolve('dist/cli.js'), '--help']);
    expect(stdout).toContain('Usage: acg [options] [command]');
  });

  it('acg help <command> <subcommand> shows the subcommand\'s help, not its group\'s (found from outside: `help credit grant` showed `credit`)', async () => {
    for (const command of everyCommand(buildCli()).filter((one) => commandPath(one).length >= 2)) {
      const route = commandPath(command);
      const { out, code } = await parse('help', ...route);
      expect(code, route.join(' ')).toBe('commander.helpDisplayed');
      expect(out, route.join(' ')).toContain(`Usage: ${['acg', ...route].join(' ')}`);
    }
    // A name no command has is refused as `acg nosuch` is, at any depth, with commander's suggestion (found from outside:
    // `acg help foo` printed nothing, and `acg help credit foo` showed credit's help).
    for (const args of [['help', 'nosuch'], ['help', 'nosuch', 'thing'], ['help', 'credit', 'nosuch']]) {
      const refused = await parse(...args);
      expect([refused.code, refused.exitCode, refused.err], args.join(' ')).toEqual(['commander.unknownCommand', 2, "error: unknown command 'nosuch'\n(add --help for usage)\n"]);
    }
    const pastTheLeaf = await parse('help', 'credit', 'grant', 'nosuch');
    expect([pastTheLeaf.exitCode, pastTheLeaf.err]).toEqual([2, expect.stringMatching(/^error: too many arguments for 'grant'/)]);
    expect((await parse('help', 'credti')).err).toContain("error: unknown command 'credti'\n(Did you mean credit?)");
    expect((await parse('help', 'credit')).code).toBe('commander.helpDisplayed');
  });
});

describe('acg --help shows an example', () => {
  it('on every command page (found from outside: migrate, credit check, demo, dev token and dev dns publish had none; keys is its own change)', async () => {
    const pages = everyCommand(buildCli()).filter((command) => command.commands.length === 0 && commandPath(command)[0] !== 'keys');
    expect(pages.length).toBeGreaterThan(12);
    for (const command of pages) {
      const route = commandPath(command);
      expect((await parse(...route, '--help')).out, route.join(' ')).toMatch(new RegExp(`\\nExample: .*npx acg ${route.join(' ')}`));
    }
  });

  it('says, for a dev token, what to do with it: where it is sent, and which gateway takes it', async () => {
    for (const kind of ['human', 'agent']) {
      const { out } = await parse('dev', 'token', kind, '--help');
      const words = out.replace(/\s+/g, ' ');
      expect(words, kind).toContain('It prints the token alone on stdout, so $(…) takes it.');
      expect(words, kind).toContain('"authorization: Bearer <token>"');
      expect(words, kind).toContain('Only the dev gateway started with this ACG_BASE_URL and ACG_DATA_DIR accepts it');
    }
  });
});

describe('acg --help lists the environment', () => {
  it("names every variable of the gateway's, and the OTEL_* variables of tracing with where they are listed", async () => {
    const { out } = await parse('--help');
    for (const variable of ENV_VARS) expect(out).toMatch(new RegExp(`^  ${variable.name} +\\S`, 'm'));
    expect(out).toMatch(/^ {2}OTEL_\* +tracing .*OTEL_EXPORTER_OTLP_ENDPOINT.*docs\/configuration\.md, "Tracing \(OpenTelemetry\)"$/m);
  });
});

describe('exit codes', () => {
  it('every usage error exits 2, as the commands own argument checks do; 1 is left to credit check (an invariant broken)', async () => {
    for (const args of [
      ['credit', 'check', '--bogus'],
      ['credit', 'check', 'extra'],
      ['credit', 'grant', '--amount-uc', '5'],
      ['credit', 'grant', '--agent', '', '--amount-uc', '5'],
      ['no-such-command'],
      ['credit'],
    ]) {
      const { exitCode, code } = await parse(...args);
      expect([args.join(' '), code, exitCode]).toEqual([args.join(' '), code, 2]);
    }
    expect(process.exitCode ?? 0).toBe(0);
    expect((await parse('credit', 'check', '--help')).exitCode).toBe(0);
  });
});

describe('options the command does not have', () => {
  it('suggests --amount-uc for --amount, before complaining that --amount-uc is missing', async () => {
    const { err } = await parse('credit', 'grant', '--agent', 'agt_x', '--amount', '5');
    expect(err).toBe("error: unknown option '--amount'\n(Did you mean --amount-uc?)\n(add --help for usage)\n");
  });

  it('suggests the closest option on every command, for a cut-short flag and for two letters swapped', async () => {
    let checked = 0;
    for (const command of everyCommand(buildCli())) {
      for (const option of command.options) {
        const flag = option.long!;
        if (flag === '--help' || flag === '--version') continue;
        const cut = flag.slice(0, -1);
        const swapped = `${flag.slice(0, 3)}${flag[4]}${flag[3]}${flag.slice(5)}`;
        for (const typo of [cut, swapped]) {
          const { err } = await parse(...commandPath(command), typo);
          expect(err, `acg ${commandPath(command).join(' ')} ${typo}`).toContain(`(Did you mean ${flag}?)`);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(20);
  });

  it('points an option that names a setting at its environment variable: acg serve --port 9090 → PORT=9090 npx acg serve (in a clone `acg` is not on the PATH; found from outside)', async () => {
    expect((await parse('serve', '--port', '9090')).err).toBe(
      'error: acg serve has no option --port: settings are environment variables. Use PORT=9090 npx acg serve\n(add --help for usage)\n',
    );
    expect((await parse('serve', '--port=9090')).err).toContain('Use PORT=9090 npx acg serve\n');
    expect((await parse('serve', '--data-dir', '/srv/acg')).err).toContain('Use ACG_DATA_DIR=/srv/acg npx acg serve\n');
    expect((await parse('credit', 'grant', '--agent', 'agt_x', '--base-url', 'http://gw.example')).err).toContain(
      'acg credit grant has no option --base-url: settings are environment variables. Use ACG_BASE_URL=http://gw.example npx acg credit grant …\n',
    );
  });
});

describe('option values', () => {
  it('refuses an empty value, and an option where the value belongs (an empty shell variable), by name', async () => {
    expect((await parse('credit', 'grant', '--agent', '', '--amount-uc', '5000000')).err).toBe(
      "error: option '--agent <agentId>' argument '' is invalid. It is empty (was a shell variable empty?).\n(add --help for usage)\n",
    );
    expect((await parse('credit', 'grant', '--agent', '--amount-uc', '5000000')).err).toBe(
      "error: option '--agent <agentId>' argument '--amount-uc' is invalid. That is the next option, so the value is missing (was a shell variable empty?).\n(add --help for usage)\n",
    );
    expect((await parse('dev', 'dns', 'publish', '--merchant', '')).err).toContain("option '--merchant <merchantId>' argument '' is invalid. It is empty");
    // An argument too (found from outside: "no agent  among …" from the gateway, after a request to /v1/owner/agents//freeze).
    expect((await parse('agent', 'freeze', '')).err).toBe("error: command-argument value '' is invalid for argument 'agentId'. It is empty (was a shell variable empty?).\n(add --help for usage)\n");
    expect((await parse('agent', 'delegates', 'create', '', '--name', 'n', '--subject', 's')).err).toContain("invalid for argument 'parentId'. It is empty");
  });

  it('refuses an option without a default given twice, rather than take the last (found from outside: a grant went to the second --agent)', async () => {
    expect((await parse('credit', 'grant', '--agent', 'agt_a', '--amount-uc', '5000000', '--agent', 'agt_b')).err).toBe(
      "error: option '--agent <agentId>' argument 'agt_b' is invalid. It was given before (agt_a): give it once.\n(add --help for usage)\n",
    );
    expect((await parse('dev', 'token', 'human', '--email', 'a@example.com', '--email', 'b@example.com')).err).toContain('It was given before (a@example.com): give it once.');
  });

  it('names a required option that is missing', async () => {
    expect((await parse('credit', 'grant', '--amount-uc', '5000000')).err).toBe(
      "error: required option '--agent <agentId>' not specified\n(add --help for usage)\n",
    );
    expect((await parse('dev', 'token', 'human')).err).toContain("error: required option '--email <email>' not specified\n");
  });
});

describe('acg demo against something that is not the gateway', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-demo-other-'));
  // Another dev server on the port: it answers every request 404 with a page, not JSON.
  const other = localServer((_request, response) => response.writeHead(404, { 'content-type': 'text/html' }).end('<!DOCTYPE html><pre>Cannot GET /v1/me</pre>'), dataDir);

  it('stops with one line asking whether the gateway is at the address, exit 2, when the answer is not JSON', async () => {
    const stopped = await acg(dataDir, { ACG_BASE_URL: other.url, ACG_DATA_DIR: dataDir, ACG_OPERATOR_TOKEN: 'acg_op_test' }, 'demo');
    expect(stopped.code).toBe(2);
    expect(stopped.stderr).toBe(`\nacg demo stopped: GET /v1/me answered HTTP 404 with a body that is not JSON: is the gateway at ${other.url}?\n`);
  });

  it('sends a request the gateway answered 503 with Retry-After again, at most three times in all (found in CI: four runs at once on a loaded machine)', async () => {
    const seen: string[] = [];
    let retryAfter: Record<string, string> = { 'retry-after': '0' };
    const busy = createServer((request, response) => {
      seen.push(`${request.method} ${request.url}`);
      response
        .writeHead(503, { 'content-type': 'application/problem+json', ...retryAfter })
        .end('{"code":"storage_unavailable","detail":"the database is unavailable or did not answer in time; retry shortly"}');
    });
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    try {
      const busyUrl = `http://127.0.0.1:${(busy.address() as { port: number }).port}`;
      const stopped = await acg(dataDir, { ACG_BASE_URL: busyUrl, ACG_DATA_DIR: dataDir, ACG_OPERATOR_TOKEN: 'acg_op_test' }, 'demo');
      expect(seen).toEqual(['GET /healthz', 'GET /v1/me', 'GET /v1/me', 'GET /v1/me']);
      expect(stopped.stdout.match(/← {3}503 the gateway is busy \(Retry-After: 0\): sending it again in 0 s\n/g)).toHaveLength(2);
      expect([stopped.code, stopped.stderr]).toEqual([2, '\nacg demo stopped: GET /v1/me answered HTTP 503 storage_unavailable: the database is unavailable or did not answer in time; retry shortly\n']);
      // A 503 without Retry-After says nothing of when: not sent again.
      retryAfter = {};
      seen.length = 0;
      expect((await acg(dataDir, { ACG_BASE_URL: busyUrl, ACG_DATA_DIR: dataDir, ACG_OPERATOR_TOKEN: 'acg_op_test' }, 'demo')).code).toBe(2);
      expect(seen).toEqual(['GET /healthz', 'GET /v1/me']);
    } finally {
      busy.close();
    }
  });
});

describe('acg commands against a server that refuses with an empty body', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-empty-404-'));
  // A proxy or another app on the port: every request is 404 with no body, which the gateway never answers (it
  // refuses with a problem). Read as the gateway's "not found", it blamed the agent id (found from outside).
  const other = localServer((_request, response) => response.writeHead(404).end(), dataDir);

  it('asks whether the gateway is at the address, exit 2: credit grant and demo', async () => {
    const env = { ACG_BASE_URL: other.url, ACG_DATA_DIR: dataDir, ACG_OPERATOR_TOKEN: 'acg_op_test' };
    const granted = await acg(dataDir, env, 'credit', 'grant', '--agent', 'agt_someone', '--amount-uc', '1000000');
    expect(granted.code).toBe(2);
    expect(granted.stderr).toBe(
      `${other.url} answered POST /v1/operator/credit-grants with HTTP 404 and no problem body, which the gateway always gives: is the gateway at ${other.url}? Set ACG_BASE_URL (or PORT) to where it runs\n`,
    );
    const stopped = await acg(dataDir, env, 'demo');
    expect(stopped.code).toBe(2);
    expect(stopped.stderr).toBe(`\nacg demo stopped: GET /v1/me answered HTTP 404 with no problem body: is the gateway at ${other.url}?\n`);
  });
});

describe('acg owner commands against a server that answers 200 to everything', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-catch-all-'));
  // Another server at the address, answering every request 200 with JSON: its answer is no change made (found from
  // outside: printed as the mandate, exit 0).
  const other = localServer((_request, response) => response.writeHead(200, { 'content-type': 'application/json' }).end('{"hello":"not a gateway"}'), dataDir);

  it('refuses an answer that does not name the agent, exit 2: mandate show and freeze', async () => {
    const env = { ACG_BASE_URL: other.url, ACG_DATA_DIR: dataDir, ACG_OWNER_TOKEN: 'not-checked-here' };
    for (const args of [['agent', 'mandate', 'show', 'agt_someone'], ['agent', 'freeze', 'agt_someone']]) {
      const refused = await acg(dataDir, env, ...args);
      expect([refused.code, refused.stdout], args.join(' ')).toEqual([2, '']);
      expect(refused.stderr).toContain('and a body that does not name the agent: is the gateway at');
    }
  });
});

describe('acg migrate on the embedded database', () => {
  const workDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-migrate-embedded-'));
  afterAll(() => rmSync(workDir, { recursive: true, force: true }));
  // One migrated data directory for the tests of `acg credit check`, which only read it (a migration of a new
  // embedded database costs about 5 s of CPU).
  let checked: Promise<string> | undefined;
  const migratedDataDir = () =>
    (checked ??= (async () => {
      const dataDir = path.join(workDir, 'checked');
      expect((await acg(workDir, { ACG_DATA_DIR: dataDir }, 'migrate')).code).toBe(0);
      return dataDir;
    })());

  it('says on stderr what it is doing before the seconds a first run takes, and keeps stdout the list of what it applied (found from outside: silent for about ten seconds)', async () => {
    const dataDir = path.join(workDir, 'data');
    const where = path.join(dataDir, 'pglite');
    const migrations = listMigrations();
    const count = migrations.length;
    const first = await acg(workDir, { ACG_DATA_DIR: dataDir }, 'migrate');
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr.split('\n').slice(0, 2)).toEqual([
      `creating the embedded database in ${where} (a few seconds)…`,
      `applying ${count} migration(s) in one transaction (${migrationName(migrations[0]!)} … ${migrationName(migrations.at(-1)!)})…`,
    ]);
    expect(first.stdout.split('\n').filter((line) => line.startsWith('applied '))).toHaveLength(count);
    expect(first.stdout).toContain(`${count} migration(s) applied, 0 already present (PGlite in ${dataDir})`);
    const again = await acg(workDir, { ACG_DATA_DIR: dataDir }, 'migrate');
    expect([again.code, again.stdout, again.stderr.split('\n')[0]]).toEqual([0, `0 migration(s) applied, ${count} already present (PGlite in ${dataDir})\n`, `opening the embedded database in ${where}…`]);
  }, 90_000);

  it('credit check whose reader stops after its first line ends quietly with 141, not 1 (a broken ledger) and a stack (found from outside: `| head -1`)', async () => {
    const dataDir = await migratedDataDir();
    const child = spawn(process.execPath, [ACG, 'credit', 'check'], { cwd: workDir, env: { ...inherited(), ACG_DATA_DIR: dataDir }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
    child.stdout.once('data', () => child.stdout.destroy());
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    expect([code, stderr]).toEqual([141, expect.not.stringContaining('EPIPE')]);
  }, 90_000);

  it.runIf(existsSync('/dev/full'))('credit check that cannot write its output says so and exits 2, not 1 (a broken ledger) with a stack (found from outside: `> /dev/full`)', async () => {
    const dataDir = await migratedDataDir();
    const full = openSync('/dev/full', 'w');
    try {
      const child = spawn(process.execPath, [ACG, 'credit', 'check'], { cwd: workDir, env: { ...inherited(), ACG_DATA_DIR: dataDir }, stdio: ['ignore', full, 'pipe'] });
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
      const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
      expect([code, stderr.trim().split('\n').at(-1)]).toEqual([2, 'acg: cannot write its output (ENOSPC)']);
    } finally {
      closeSync(full);
    }
  }, 90_000);
});

describe('acg migrate against a PostgreSQL that refuses the connection', () => {
  const workDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-migrate-'));
  afterAll(() => rmSync(workDir, { recursive: true, force: true }));

  it('says it cannot open the database in one line, exit 2, without a stack trace or the password, when nothing listens', async () => {
    const port = await freePort();
    const refused = await acg(workDir, { DATABASE_URL: `postgres://acg:s3cret-pw@127.0.0.1:${port}/acg` }, 'migrate');
    // Where it connects first, on stderr (found from outside: silent until the connection's timeout), never who as.
    expect(refused).toEqual({
      code: 2,
      stdout: '',
      stderr: `connecting to PostgreSQL at 127.0.0.1:${port}/acg…\ncannot open the database: the database is unavailable (connect ECONNREFUSED 127.0.0.1:${port})\n`,
    });
  });

  it('credit grant says the same, and writes nothing on stdout (found from outside: a server log line about 503 answers)', async () => {
    const port = await freePort();
    const refused = await acg(workDir, { DATABASE_URL: `postgres://acg:s3cret-pw@127.0.0.1:${port}/acg`, ACG_BASE_URL: `http://127.0.0.1:${await freePort()}`, ACG_OPERATOR_TOKEN: 'acg_op_test' }, 'credit', 'grant', '--agent', 'agt_x', '--amount-uc', '1000000');
    expect(refused).toEqual({
      code: 2,
      stdout: '',
      stderr: `cannot open the database: the database is unavailable (connect ECONNREFUSED 127.0.0.1:${port})\n`,
    });
  });
});
