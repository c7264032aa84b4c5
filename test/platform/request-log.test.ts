// A request writes one log line, when it is answered: method, path, status and response time, and for a
// refusal its code at info (docs/decisions.md "One log line per request"). Read from the production logger.
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/platform/gateway.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';

const lines: Array<Record<string, any>> = [];
const sink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) lines.push(JSON.parse(line));
    done();
  },
});

let world: World;

beforeAll(async () => {
  world = await startWorld({ env: { LOG_LEVEL: 'info' }, log: createLogger({ logLevel: 'info' }, sink) });
});
afterAll(() => world?.close());

let counter = 0;

/** Sends a request with its own request id and answers the log lines of that request once it has one. */
async function linesOf(path: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Array<Record<string, any>>> {
  const id = `one-line-${++counter}`;
  const res = await fetch(`${world.url}${path}`, { method: init.method, body: init.body, headers: { ...init.headers, 'x-request-id': id } });
  await res.arrayBuffer();
  const of = () => lines.filter((line) => line.reqId === id);
  await waitFor(() => of().length, { until: (n) => n > 0, what: `a log line of request ${id}` });
  // One more round trip: any second line of the request would have been written by now.
  await fetch(`${world.url}/healthz`);
  return of();
}

describe('request log', () => {
  it('writes one info line for a successful request, with method, path, status and response time', async () => {
    const owner = await world.humanToken('logged-owner@example.com');
    const written = await linesOf('/v1/owner/agents?limit=1', { headers: { authorization: `Bearer ${owner}` } });
    expect(written).toHaveLength(1);
    expect(written[0]).toMatchObject({ level: 30, msg: 'request completed', req: { method: 'GET', path: '/v1/owner/agents' }, res: { statusCode: 200 } });
    expect(written[0]!.responseTime).toEqual(expect.any(Number));
    expect(JSON.stringify(written[0])).not.toContain(owner);
  });

  it('writes one info line for a refusal, carrying its code', async () => {
    const written = await linesOf('/v1/me', { headers: { authorization: 'Bearer not-a-token' } });
    expect(written).toHaveLength(1);
    expect(written[0]).toMatchObject({ level: 30, code: 'unauthorized', status: 401, req: { method: 'GET', path: '/v1/me' }, res: { statusCode: 401 } });
    expect(JSON.stringify(written[0])).not.toContain('not-a-token');
  });

  it('writes one line for what Fastify refuses before routing (a bad percent-encoding)', async () => {
    const written = await linesOf('/v1/owner/agents/%E0%A4%A');
    expect(written).toHaveLength(1);
    expect(written[0]).toMatchObject({ level: 30, code: 'invalid_input', res: { statusCode: 400 } });
  });

  // Found from outside (bb71): an operator reading why an agent was charged once for two requests could not tell from
  // the log which answer was a stored one.
  it('says when the answer is an Idempotency-Key replay, and only then', async () => {
    const agent = await world.createAgent('logged-replay@example.com', 'logged-replay');
    const put = () => linesOf(`/v1/owner/agents/${agent.id}/mandate`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${agent.ownerToken}`, 'content-type': 'application/json', 'idempotency-key': 'log-replay-1' },
      body: JSON.stringify({ budgets: [{ id: 'daily', limitUc: '1000000', period: 'day' }] }),
    });
    const [first] = await put();
    expect(first).toMatchObject({ msg: 'request completed', res: { statusCode: 200 } });
    expect(first).not.toHaveProperty('idempotentReplay');
    const [again] = await put();
    expect(again).toMatchObject({ msg: 'request completed', res: { statusCode: 200 }, idempotentReplay: true });
  });

  it('writes one line for an unknown route', async () => {
    const written = await linesOf('/v1/no-such-route');
    expect(written).toHaveLength(1);
    expect(written[0]).toMatchObject({ code: 'not_found', res: { statusCode: 404 } });
  });
});
