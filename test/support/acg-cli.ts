// Runs the `acg` command for the CLI's tests: commander's parse in process (no action runs), or bin/acg.js as a
// child process from a directory of the test's own, with only the settings the test gives.
import { execFile, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CommanderError, type Command } from 'commander';
import { afterAll, beforeAll } from 'vitest';
import { buildCli } from '../../src/cli.ts';

export const ACG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/acg.js');
const run = promisify(execFile);

export function everyCommand(command: Command): Command[] {
  return [command, ...command.commands.flatMap(everyCommand)];
}

/** The words after `acg` that reach this command. */
export function commandPath(command: Command): string[] {
  const names: string[] = [];
  for (let at: Command = command; at.parent; at = at.parent) names.unshift(at.name());
  return names;
}

/** Parses `args` as `acg` would, without running any action; returns what commander printed and why it stopped. */
export async function parse(...args: string[]): Promise<{ out: string; err: string; code: string | undefined; exitCode: number }> {
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
    return { out, err, code: error.code, exitCode: error.exitCode };
  }
  throw new Error(`acg ${args.join(' ')} parsed without an error: its action would have run`);
}

/** The test's environment without any setting of the gateway's (so a command sees only the settings a test gives). */
export const inherited = () => Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(ACG_|DATABASE_URL$|PORT$|HOST$)/.test(name)));

/** Runs bin/acg.js in `cwd` with only the given settings (none inherited from the test's environment). */
export async function acg(cwd: string, env: Record<string, string>, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [ACG, ...args], { cwd, env: { ...inherited(), ...env }, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

/** The same, with `input` on its standard input. */
export async function acgWithInput(cwd: string, env: Record<string, string>, input: string, ...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [ACG, ...args], { cwd, env: { ...inherited(), ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => void (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
  child.stdin.on('error', () => {}); // a command may stop reading early (a refusal): not the test's failure
  child.stdin.end(input);
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  return { code, stdout, stderr };
}

/**
 * A server that is not the gateway, for the describe that calls this: it listens on a free port from the describe's
 * first test to its end, when `dataDir` (the commands' data directory) is removed too. `url` is its address once it
 * listens.
 */
export function localServer(handler: RequestListener, dataDir: string): { readonly url: string } {
  const server = createServer(handler);
  const at = { url: '' };
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    at.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => {
    server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  return at;
}
