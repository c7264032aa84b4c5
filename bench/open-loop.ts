// The open-loop cell's load: requests sent on a fixed schedule (BENCH_OPEN_RATE a second) whether or not the
// earlier ones have answered, as users arrive, unlike wrk's closed loop where a slow answer delays the next
// request. Each request's latency is measured from the time it was scheduled, not the time it went out, so a
// gateway that falls behind shows it (no coordinated omission). When BENCH_OPEN_INFLIGHT requests are already
// waiting, the next one is shed (not sent) and counted. The generator runs in its own process
// (bench/open-loop-client.ts), so its CPU is not the bench's; this module holds its pure parts and the spawn.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { ROOT } from './gateway.ts';

/** The mix of issue 30: 60% mint, 20% capture, 10% release, 10% reads (half GET /v1/me, half GET /v1/redemptions/{id}). */
export type OpenOperation = 'mint' | 'capture' | 'release' | 'me' | 'redemption';
export const OPEN_OPERATIONS: readonly OpenOperation[] = ['mint', 'capture', 'release', 'me', 'redemption'];

/**
 * The operation for a uniform draw `u` in [0, 1). A capture or release needs a hold still held, and a
 * redemption read a hold of any state: without one (the first instants of the cell) it is a mint instead.
 */
export function pickOperation(u: number, holdsHeld: number, holdsKnown: number): OpenOperation {
  const wanted: OpenOperation = u < 0.6 ? 'mint' : u < 0.8 ? 'capture' : u < 0.9 ? 'release' : u < 0.95 ? 'me' : 'redemption';
  if ((wanted === 'capture' || wanted === 'release') && holdsHeld === 0) return 'mint';
  if (wanted === 'redemption' && holdsKnown === 0) return 'mint';
  return wanted;
}

/** When request i (from 0) is due, in ms after the start, at `ratePerS` evenly spaced. */
export function scheduledMs(i: number, ratePerS: number): number {
  return (i * 1000) / ratePerS;
}

export interface OpenLoopSpec {
  baseUrl: string;
  ratePerS: number;
  durationS: number;
  /** Requests waiting at once beyond which the next is shed. */
  inFlightMax: number;
  /** Bearer tokens of the agents (each request takes the next). */
  agentTokens: readonly string[];
  merchantKey: string;
  keyPrefix: string;
  /** Seconds a request may wait for its answer before it counts as timed out. */
  timeoutS: number;
}

export interface OperationResult {
  sent: number;
  ok: number;
  p50Ms: number;
  p99Ms: number;
}

export interface OpenLoopResult {
  /** Requests scheduled over the cell: rate × duration. */
  scheduled: number;
  sent: number;
  ok: number;
  /** Not sent: too many were waiting when it was due. */
  shed: number;
  /** Sent, and answered with something other than 200 (by status), or not answered (timeout, socket error). */
  failed: Record<string, number>;
  /** Wall time from the first scheduled send to the last answer. */
  seconds: number;
  /** Over every sent request, from its scheduled time. */
  p50Ms: number;
  p99Ms: number;
  byOperation: Record<OpenOperation, OperationResult>;
  /** Hold ids of the 200 answers, by kind, for the ledger check. */
  minted: string[];
  captured: string[];
  released: string[];
  /** The first few failed answers, for the log. */
  samples: string[];
  /** How late, at worst, the generator itself sent a request after its scheduled time (ms): its own lag. */
  sendLagMaxMs: number;
}

const OVERRUN_MS = 60_000;

/**
 * What the cell measures around the load, called at its edges: `started` once the generator is up (its own
 * start-up, a Node process compiling TypeScript, is not the cell's cost) and before the first request is due;
 * `ended` as soon as the last answer came in.
 */
export interface OpenLoopHooks {
  started(): Promise<void>;
  ended(): void;
}

/**
 * Runs the generator. The exchange on its pipes: the spec as one JSON line on stdin; "ready" on stdout once its
 * pool is made; "go" on stdin when the measurements have started; "done" on stdout after the last answer, then
 * the result as one JSON line.
 */
export async function runOpenLoop(spec: OpenLoopSpec, hooks: OpenLoopHooks): Promise<OpenLoopResult> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'bench/open-loop-client.ts')], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin.write(`${JSON.stringify(spec)}\n`);
  let stdout = '';
  let phase = 'starting' as 'starting' | 'running' | 'done';
  let hookFailure: unknown;
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    if (phase === 'starting' && stdout.startsWith('ready\n')) {
      phase = 'running';
      hooks.started().then(
        () => child.stdin.end('go\n'),
        (error: unknown) => {
          hookFailure = error;
          child.kill('SIGKILL');
        },
      );
    }
    if (phase === 'running' && stdout.includes('\ndone\n')) {
      phase = 'done';
      hooks.ended();
    }
  });
  const hung = setTimeout(() => child.kill('SIGKILL'), (spec.durationS + spec.timeoutS) * 1000 + OVERRUN_MS);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearTimeout(hung);
  if (hookFailure) throw hookFailure;
  if (code !== 0 || phase !== 'done') throw new Error(`the open-loop generator exited with ${code} (${phase})`);
  return JSON.parse(stdout.slice(stdout.indexOf('\ndone\n') + 6)) as OpenLoopResult;
}
