// Runs the real `acg` command as a child process, for tests about start-up, crashes and restarts.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inject } from 'vitest';
import { embeddedDatabaseDir } from '../../src/platform/db/open.ts';

const ACG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/acg.js');

export interface GatewayProcess {
  child: ChildProcess;
  url: string;
  /** Every JSON log line the process printed so far. */
  logs: Array<Record<string, unknown>>;
  /** Sends `signal` (default SIGTERM) and resolves with the exit code; a process still running after {@link STOP_GRACE_MS} is killed (-9), and so resolves with null. */
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

/** How long a stopped gateway may take to exit before it is killed: a graceful stop takes well under a second. */
export const STOP_GRACE_MS = 15_000;

// Every gateway this test process started and that still runs. None may outlive the test file: one that
// failed to start, or hangs in its shutdown, would otherwise hold its port, its database connections and CPU
// under every later test on the machine.
const running = new Set<ChildProcess>();
process.once('exit', () => killLeftoverGateways());

/**
 * Kills (-9) every gateway this process started that still runs: at its exit, and after each test file
 * (test/support/each-file.ts), since a worker stopped by its pool ends without its 'exit' event (found here: a test
 * that failed before its gateway stopped left it running after the run).
 */
export function killLeftoverGateways(): void {
  for (const child of running) child.kill('SIGKILL');
  running.clear();
}

export interface SpawnOptions {
  /** Resolve once the process listens, or (default) once it is ready to serve every route. */
  waitFor?: 'listening' | 'ready';
  timeoutMs?: number;
}

/**
 * On the embedded database (no DATABASE_URL), gives a data directory without a database a copy of the run's migrated
 * one (test/support/global-setup.ts), which the gateway opens as one it made before: about 5 s of CPU less than its
 * initdb and migrations. The tests of a first start (the first purchase, `acg migrate`) run `acg` themselves.
 */
function seedEmbeddedDatabase(env: Record<string, string>): void {
  const dataDir = env.ACG_DATA_DIR;
  if (env.DATABASE_URL || (env.DATABASE_URL === undefined && process.env.DATABASE_URL) || !dataDir) return;
  const database = embeddedDatabaseDir(dataDir);
  const migrated = inject('migratedPgliteDir');
  if (!migrated || existsSync(database)) return;
  cpSync(migrated, database, { recursive: true });
  chmodSync(database, 0o700);
}

export async function spawnGateway(env: Record<string, string>, options: SpawnOptions = {}): Promise<GatewayProcess> {
  const { waitFor = 'ready', timeoutMs = 45_000 } = options;
  seedEmbeddedDatabase(env);
  const awaited = waitFor === 'ready' ? 'gateway ready' : 'gateway listening';
  const child = spawn(process.execPath, [ACG, 'serve'], {
    // ACG_PRECOMPILE_SCHEMAS=0: the schemas' background compile (about 4 s of CPU) is not what these processes
    // are started to test, and on a two-core machine it would slow every test beside them; test/server.test.ts
    // turns it on to test it.
    env: { ...process.env, PORT: '0', LOG_LEVEL: 'info', ACG_PRECOMPILE_SCHEMAS: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  const logs: Array<Record<string, unknown>> = [];
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      running.delete(child);
      resolve(code);
    }),
  );
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gateway did not log "${awaited}" in ${timeoutMs} ms: ${stderr}`));
    }, timeoutMs);
    let buffered = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      let newline: number;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        try {
          const entry = JSON.parse(line) as Record<string, unknown>;
          logs.push(entry);
          if (typeof entry.url === 'string' && String(entry.msg).startsWith(awaited)) {
            clearTimeout(timer);
            resolve(entry.url);
          }
        } catch {
          // not a log line
        }
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited with ${code} before listening: ${stderr}`));
    });
  });
  return {
    child,
    url,
    logs,
    async kill(signal: NodeJS.Signals = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
