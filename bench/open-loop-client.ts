// The open-loop generator's process (bench/open-loop.ts spawns it and describes the exchange on the pipes):
// reads an OpenLoopSpec, sends the mix on schedule through an undici pool with one connection per request that
// may wait, and writes an OpenLoopResult.
import { writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Pool } from 'undici';
import { OPEN_OPERATIONS, pickOperation, scheduledMs, type OpenLoopResult, type OpenLoopSpec, type OpenOperation } from './open-loop.ts';
import { percentile } from './proc.ts';

const HOLD_ID = /"(hold_[a-z2-7]+)"/;
const SAMPLES_MAX = 5;

async function main(): Promise<void> {
  const input = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const spec = JSON.parse((await input.next()).value as string) as OpenLoopSpec;
  const pool = new Pool(spec.baseUrl, { connections: spec.inFlightMax, pipelining: 1, headersTimeout: spec.timeoutS * 1000, bodyTimeout: spec.timeoutS * 1000 });
  process.stdout.write('ready\n');
  if ((await input.next()).value !== 'go') throw new Error('the bench did not say go');
  const held: string[] = [];
  const known: string[] = [];
  const minted: string[] = [];
  const captured: string[] = [];
  const released: string[] = [];
  const latencies: number[] = [];
  // BENCH_OPEN_TRACE names a file for every answer (due ms, latency ms, operation, status): where the tail comes from.
  const trace: string[] | undefined = process.env.BENCH_OPEN_TRACE ? [] : undefined;
  const byOperation = Object.fromEntries(OPEN_OPERATIONS.map((op) => [op, { sent: 0, ok: 0, latencies: [] as number[] }])) as Record<OpenOperation, { sent: number; ok: number; latencies: number[] }>;
  const failed: Record<string, number> = {};
  const samples: string[] = [];
  const scheduled = Math.round(spec.ratePerS * spec.durationS);
  let inFlight = 0;
  let shed = 0;
  let sent = 0;
  let ok = 0;
  let sendLagMaxMs = 0;
  let lastAnswerMs = 0;
  let pending = 0;
  let scheduleDone = false;
  let allAnswered: () => void = () => {};

  const agentHeaders = (i: number) => ({ authorization: `Bearer ${spec.agentTokens[i % spec.agentTokens.length]!}` });
  const merchantHeaders = { authorization: `Bearer ${spec.merchantKey}` };
  const takeHeld = () => held.splice(Math.floor(Math.random() * held.length), 1)[0]!;

  const send = (i: number, dueMs: number, start: number) => {
    const operation = pickOperation(Math.random(), held.length, known.length);
    const key = { 'idempotency-key': `${spec.keyPrefix}-${i}` };
    const json = { 'content-type': 'application/json' };
    let request: { method: 'GET' | 'POST'; path: string; headers: Record<string, string>; body?: string };
    let holdId: string | undefined;
    switch (operation) {
      case 'mint':
        request = { method: 'POST', path: '/v1/vouchers', headers: { ...agentHeaders(i), ...json, ...key }, body: '{"offerId":"off_bench"}' };
        break;
      case 'capture':
      case 'release':
        holdId = takeHeld();
        request = { method: 'POST', path: `/v1/redemptions/${holdId}/${operation}`, headers: { ...merchantHeaders, ...json, ...key }, body: '{}' };
        break;
      case 'me':
        request = { method: 'GET', path: '/v1/me', headers: agentHeaders(i) };
        break;
      case 'redemption':
        request = { method: 'GET', path: `/v1/redemptions/${known[Math.floor(Math.random() * known.length)]!}`, headers: merchantHeaders };
        break;
    }
    const stats = byOperation[operation];
    stats.sent += 1;
    sent += 1;
    inFlight += 1;
    pending += 1;
    const answered = (status: string, body: string) => {
      const now = performance.now();
      const latencyMs = now - (start + dueMs);
      lastAnswerMs = now;
      latencies.push(latencyMs);
      trace?.push(`${dueMs.toFixed(1)} ${latencyMs.toFixed(1)} ${operation} ${status}`);
      stats.latencies.push(latencyMs);
      inFlight -= 1;
      if (status === '200') {
        ok += 1;
        stats.ok += 1;
        const id = HOLD_ID.exec(body)?.[1];
        if (operation === 'mint' && id) {
          minted.push(id);
          held.push(id);
          known.push(id);
        } else if (operation === 'capture' && id) captured.push(id);
        else if (operation === 'release' && id) released.push(id);
      } else {
        failed[status] = (failed[status] ?? 0) + 1;
        if (samples.length < SAMPLES_MAX) samples.push(`${operation} ${status} ${body.slice(0, 200)}`);
        // A capture or release that did not happen leaves its hold held: it may be drawn again.
        if (holdId && /^[0-9]+$/.test(status) && Number(status) >= 500) held.push(holdId);
      }
      pending -= 1;
      if (pending === 0 && scheduleDone) allAnswered();
    };
    pool
      .request(request)
      .then(async (res) => answered(String(res.statusCode), await res.body.text()))
      .catch((error: Error & { code?: string }) => answered(error.code === 'UND_ERR_HEADERS_TIMEOUT' || error.code === 'UND_ERR_BODY_TIMEOUT' ? 'timeout' : (error.code ?? 'socket error'), error.message));
  };

  const start = performance.now();
  trace?.push(`# start ${Date.now()} (ms since the epoch; each line: due ms after it, latency ms, operation, status)`);
  let next = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const elapsed = performance.now() - start;
      while (next < scheduled && scheduledMs(next, spec.ratePerS) <= elapsed) {
        const dueMs = scheduledMs(next, spec.ratePerS);
        sendLagMaxMs = Math.max(sendLagMaxMs, elapsed - dueMs);
        if (inFlight >= spec.inFlightMax) shed += 1;
        else send(next, dueMs, start);
        next += 1;
      }
      if (next < scheduled) setTimeout(tick, Math.max(0, scheduledMs(next, spec.ratePerS) - (performance.now() - start)));
      else resolve();
    };
    tick();
  });
  scheduleDone = true;
  if (pending > 0) await new Promise<void>((resolve) => (allAnswered = resolve));
  const endMs = lastAnswerMs || performance.now();
  process.stdout.write('\ndone\n');
  if (trace) writeFileSync(process.env.BENCH_OPEN_TRACE!, `${trace.join('\n')}\n`);
  await pool.close();
  latencies.sort((a, b) => a - b);
  const result: OpenLoopResult = {
    scheduled,
    sent,
    ok,
    shed,
    failed,
    seconds: (endMs - start) / 1000,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    byOperation: Object.fromEntries(
      OPEN_OPERATIONS.map((op) => {
        const { sent: n, ok: good, latencies: l } = byOperation[op];
        l.sort((a, b) => a - b);
        return [op, { sent: n, ok: good, p50Ms: percentile(l, 50), p99Ms: percentile(l, 99) }];
      }),
    ) as OpenLoopResult['byOperation'],
    minted,
    captured,
    released,
    samples,
    sendLagMaxMs,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

await main();
