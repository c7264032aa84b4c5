// The `acg` command's own messages: what a person typing a command is told when it cannot do what was
// asked. Parsing mistakes are checked in process (commander's parse, no action runs); what a command
// finds at ACG_BASE_URL and in ACG_DATA_DIR is checked by running bin/acg.js, from a directory of its
// own, against an in-process gateway (or a port where nothing listens).
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { CommanderError, type Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildCli } from '../src/cli.ts';
import { freePort } from './support/doh-server.ts';
import { startWorld, type World } from './support/world.ts';

const ACG = path.resolve('bin/acg.js');
const run = promisify(execFile);

function everyCommand(command: Command): Command[] {
  return [command, ...command.commands.flatMap(everyCommand)];
}

/** The words after `acg` that reach this command. */
function commandPath(command: Command): string[] {
  const names: string[] = [];
  for (let at: Command = command; at.parent; at = at.parent) names.unshift(at.name());
  return names;
}

/** Parses `args` as `acg` would, without running any action; returns what commander printed and why it stopped. */
async function parse(...args: string[]): Promise<{ out: string; err: string; code: string | undefined }> {
  const program = buildCli();
  let out = '';
  let err = '';
  for (const command of everyCommand(program)) {
    command.exitOverride().configureOutput({ writeOut: (text) => void (out += text), writeErr: (text) => void (err += text) });
  }
  try {
    await program.parseAsync(args, { from: 'user' });
  } catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    return { out, err, code: error.code };
  }
  throw new Error(`acg ${args.join(' ')} parsed without an error: its action would have run`);
}

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

  it('points an option that names a setting at its environment variable: acg serve --port 9090 → PORT=9090 acg serve', async () => {
    expect((await parse('serve', '--port', '9090')).err).toBe(
      'error: acg serve has no option --port: settings are environment variables. Use PORT=9090 acg serve\n(add --help for usage)\n',
    );
    expect((await parse('serve', '--port=9090')).err).toContain('Use PORT=9090 acg serve\n');
    expect((await parse('serve', '--data-dir', '/srv/acg')).err).toContain('Use ACG_DATA_DIR=/srv/acg acg serve\n');
    expect((await parse('credit', 'grant', '--agent', 'agt_x', '--base-url', 'http://gw.example')).err).toContain(
      'acg credit grant has no option --base-url: settings are environment variables. Use ACG_BASE_URL=http://gw.example acg credit grant …\n',
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
  });

  it('names a required option that is missing', async () => {
    expect((await parse('credit', 'grant', '--amount-uc', '5000000')).err).toBe(
      "error: required option '--agent <agentId>' not specified\n(add --help for usage)\n",
    );
    expect((await parse('dev', 'token', 'human')).err).toContain("error: required option '--email <email>' not specified\n");
  });
});

/** Runs bin/acg.js in `cwd` with only the given settings (none inherited from the test's environment). */
async function acg(cwd: string, env: Record<string, string>, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(ACG_|DATABASE_URL$|PORT$|HOST$)/.test(name)));
  try {
    const { stdout, stderr } = await run(process.execPath, [ACG, ...args], { cwd, env: { ...inherited, ...env }, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

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
