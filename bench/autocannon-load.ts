// The fallback load generator when wrk is not installed: autocannon, in its own process (so its CPU is not
// the bench's), doing what bench/load.lua does. Reads a LoadSpec as JSON on stdin, writes a LoadResult on stdout.
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import type { LoadResult, LoadSpec } from './load.ts';

const HOLD_ID = /"(hold_[a-z2-7]+)"/;
const SAMPLES_MAX = 3;

async function main(): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const spec = JSON.parse(Buffer.concat(chunks).toString()) as LoadSpec;
  const holdIds: string[] = [];
  const rejected: Record<string, number> = {};
  const samples: string[] = [];
  let next = 0;
  const capture = spec.mode === 'capture';
  let stopTimer: NodeJS.Timeout | undefined;
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url: spec.baseUrl,
        connections: spec.connections,
        timeout: 10,
        ...(capture ? { amount: spec.items.length } : { duration: spec.durationS }),
        requests: [
          {
            method: 'POST',
            setupRequest: (request) => {
              const item = spec.items[next++ % spec.items.length]!;
              const headers = { 'content-type': 'application/json', 'idempotency-key': `${spec.keyPrefix}-${randomUUID()}` };
              return capture
                ? { ...request, path: `/v1/redemptions/${item}/capture`, body: '{}', headers: { ...headers, authorization: `Bearer ${spec.merchantKey}` } }
                : spec.mode === 'execute'
                  ? { ...request, path: '/v1/services/execute', body: spec.body ?? '', headers: { ...headers, authorization: `Bearer ${item}` } }
                  : { ...request, path: '/v1/vouchers', body: '{"offerId":"off_bench"}', headers: { ...headers, authorization: `Bearer ${item}` } };
            },
            onResponse: (status, body) => {
              if (status === 200) {
                const id = HOLD_ID.exec(body)?.[1];
                if (id) holdIds.push(id);
                return;
              }
              rejected[status] = (rejected[status] ?? 0) + 1;
              if (samples.length < SAMPLES_MAX) samples.push(`${status} ${body.slice(0, 300)}`);
            },
          },
        ],
      },
      (error, result) => (error ? reject(error) : resolve(result)),
    );
    // A capture cell ends when every hold is captured, or at the cell's duration, as with wrk.
    if (capture) stopTimer = setTimeout(() => instance.stop(), spec.durationS * 1000);
  });
  clearTimeout(stopTimer);
  const seconds = result.duration;
  const requests = result.requests.total;
  const rejectedCount = Object.values(rejected).reduce((a, b) => a + b, 0);
  const answer: LoadResult = {
    tool: 'autocannon',
    seconds,
    requests,
    ok: requests - rejectedCount,
    rejected,
    socketErrors: result.errors - result.timeouts,
    timeouts: result.timeouts,
    throughputPerS: requests / seconds,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    holdIds,
    samples,
  };
  process.stdout.write(JSON.stringify(answer));
}

await main();
