// The gateway under test: `bin/acg.js serve` in its own process, as an operator starts it, and what the
// kernel says it cost (CPU time and peak resident memory from /proc).
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const READY_WAIT_MS_MAX = 120_000;
const STOP_WAIT_MS_MAX = 15_000;
const CLOCK_TICKS_PER_S = 100;

export interface Gateway {
  pid: number;
  baseUrl: string;
  /** Wall time from spawn to the first ready /readyz. */
  startMs: number;
  /** The PostgreSQL it runs on (its DATABASE_URL), whose CPU each cell measures too; absent on PGlite. */
  databaseUrl?: string;
  stop(): Promise<void>;
}

/** Refuses a port something else listens on: its /readyz would answer for our gateway, and we would load it. */
async function assertPortFree(port: number): Promise<void> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) =>
      reject(error.code === 'EADDRINUSE' ? new Error(`port ${port} is in use by another process; set BENCH_PORT to a free one`) : error),
    );
    server.listen(port, '127.0.0.1', () => server.close(() => resolve()));
  });
}

/** `root`: the checkout whose bin/acg.js runs (another ref's worktree for BENCH_BASELINE_REF). */
export async function startGateway(env: Record<string, string>, port: number, nodeOptions: readonly string[], root = ROOT): Promise<Gateway> {
  await assertPortFree(port);
  const baseUrl = `http://127.0.0.1:${port}`;
  const started = Date.now();
  const child: ChildProcess = spawn(process.execPath, [...nodeOptions, path.join(root, 'bin/acg.js'), 'serve'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/', ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let exitCode: number | null | undefined;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code) => {
      exitCode = code;
      resolve();
    }),
  );
  const stop = async () => {
    if (exitCode !== undefined) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_WAIT_MS_MAX);
    await exited;
    clearTimeout(timer);
  };
  while (Date.now() - started < READY_WAIT_MS_MAX) {
    if (exitCode !== undefined) throw new Error(`the gateway exited with ${exitCode} before it was ready`);
    const ready = await fetch(`${baseUrl}/readyz`).then((r) => r.ok, () => false);
    if (ready) {
      const databaseUrl = /^postgres(ql)?:/.test(env.DATABASE_URL ?? '') ? env.DATABASE_URL : undefined;
      return { pid: child.pid!, baseUrl, startMs: Date.now() - started, ...(databaseUrl ? { databaseUrl } : {}), stop };
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await stop();
  throw new Error(`the gateway was not ready within ${READY_WAIT_MS_MAX / 1000} s`);
}

/** User + system CPU seconds the process has used (all its threads), from /proc/<pid>/stat. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces) start at field 3; utime and stime are 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_S;
}

/** Peak resident set size in MB (VmHWM). */
export function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN);
  return kb / 1024;
}

/** Resets the peak (Linux: "5" to clear_refs), so the next VmHWM is this cell's own; false if refused. */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** A port nothing listens on now (the kernel's pick): the BENCH_BASELINE_REF gateway's, beside BENCH_PORT. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
