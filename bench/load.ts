// One load cell against the gateway, from a separate process: wrk (what the throughput targets were measured with) when it is
// installed, otherwise autocannon in a child process. Both report the same things: throughput, p50/p99,
// the answers by status, and the hold id of every 200 answer (for the ledger check).
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from './gateway.ts';

export type LoadTool = 'wrk' | 'autocannon';
const WRK_THREADS = 2;
/** How long past its nominal duration a cell may run before it is stopped as hung. */
const OVERRUN_MS = 30_000;

export interface LoadSpec {
  baseUrl: string;
  connections: number;
  durationS: number;
  /**
   * mint: rotate over `items` (bearer tokens); execute: the same with POST /v1/services/execute of `body`;
   * capture: capture each hold id in `items` once, then stop.
   */
  mode: 'mint' | 'capture' | 'execute';
  /** execute: the request body. */
  body?: string;
  items: readonly string[];
  /** capture: the merchant's API key. */
  merchantKey?: string;
  /** Prefix of this cell's Idempotency-Keys (unique per cell). */
  keyPrefix: string;
}

export interface LoadResult {
  tool: LoadTool;
  seconds: number;
  requests: number;
  ok: number;
  /** Answers other than 200, by status code. */
  rejected: Record<string, number>;
  socketErrors: number;
  timeouts: number;
  throughputPerS: number;
  p50Ms: number;
  p99Ms: number;
  /** The hold id of every 200 answer. */
  holdIds: string[];
  /** The first few non-200 answers, for the log. */
  samples: string[];
}

export function availableTool(preference: string | undefined): LoadTool {
  if (preference === 'autocannon') return 'autocannon';
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' });
    return 'wrk';
  } catch (error) {
    // wrk --version exits 1 after printing its version; only a missing binary is "not installed".
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') return 'wrk';
    if (preference === 'wrk') throw new Error('BENCH_LOAD=wrk but wrk is not installed (apt-get install wrk)');
    return 'autocannon';
  }
}

function lines(file: string): string[] {
  return readFileSync(file, 'utf8').split('\n').filter((l) => l.length > 0);
}

async function runWrk(spec: LoadSpec): Promise<LoadResult> {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-bench-wrk-'));
  try {
    writeFileSync(path.join(dir, 'items'), `${spec.items.join('\n')}\n`);
    const child = spawn('wrk', ['-t', String(WRK_THREADS), '-c', String(spec.connections), '-d', `${spec.durationS}s`, '--timeout', '10s', '-s', path.join(ROOT, 'bench/load.lua'), spec.baseUrl], {
      env: {
        ...process.env,
        BENCH_LOAD_MODE: spec.mode,
        BENCH_LOAD_ITEMS: path.join(dir, 'items'),
        BENCH_LOAD_TOKEN: spec.merchantKey ?? '',
        BENCH_LOAD_OUT: dir,
        BENCH_LOAD_KEY_PREFIX: spec.keyPrefix,
        BENCH_LOAD_THREADS: String(WRK_THREADS),
        BENCH_LOAD_BODY: spec.body ?? '',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let stdout = '';
    let ended = false;
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      // Every thread has captured its share: end the run now (wrk stops on SIGINT and reports), so its
      // time is the work's time.
      if (!ended && (stdout.match(/^exhausted /gm) ?? []).length === WRK_THREADS) {
        ended = true;
        child.kill('SIGINT');
      }
    });
    const hung = setTimeout(() => child.kill('SIGKILL'), spec.durationS * 1000 + OVERRUN_MS);
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    clearTimeout(hung);
    const result = /^bench-result (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$/m.exec(stdout);
    if (!result) throw new Error(`wrk exited with ${code} without a result:\n${stdout}`);
    const [durationUs, requests, p50Us, p99Us, socketErrors, timeouts] = result.slice(1).map(Number) as [number, number, number, number, number, number];
    const rejected: Record<string, number> = {};
    const samples: string[] = [];
    for (const line of lines(path.join(dir, 'statuses'))) {
      if (line.startsWith('sample ')) samples.push(line.slice(7));
      else {
        const [status, count] = line.split(' ');
        rejected[status!] = (rejected[status!] ?? 0) + Number(count);
      }
    }
    const holdIds = lines(path.join(dir, 'ids'));
    const seconds = durationUs / 1e6;
    const ok = requests - Object.values(rejected).reduce((a, b) => a + b, 0);
    return { tool: 'wrk', seconds, requests, ok, rejected, socketErrors, timeouts, throughputPerS: requests / seconds, p50Ms: p50Us / 1000, p99Ms: p99Us / 1000, holdIds, samples };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function runAutocannon(spec: LoadSpec): Promise<LoadResult> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'bench/autocannon-load.ts')], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin.end(JSON.stringify(spec));
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const hung = setTimeout(() => child.kill('SIGKILL'), spec.durationS * 1000 + OVERRUN_MS);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearTimeout(hung);
  if (code !== 0) throw new Error(`the autocannon process exited with ${code}`);
  return JSON.parse(stdout) as LoadResult;
}

export function runLoad(tool: LoadTool, spec: LoadSpec): Promise<LoadResult> {
  return tool === 'wrk' ? runWrk(spec) : runAutocannon(spec);
}
