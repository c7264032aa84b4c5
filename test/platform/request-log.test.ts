// A request writes one log line, when it is answered: method, path, status and response time, and for a
// refusal its code at info (docs/decisions.md "One log line per request"). Read from the production logger.
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/platform/gateway.ts';
import { waitFor } from '../support/wait.ts';
import { envelope, LEGACY, MODERN } from '../mcp/helpers.ts';
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

type Init = { method?: string; headers?: Record<string, string>; body?: string };

/** Sends a request with its own request id and answers the log lines of that request once it has one. */
async function linesOf(path: string, init: Init = {}): Promise<Array<Record<string, any>>> {
  return (await exchange(path, init)).lines;
}

/** The same, with the response (its body read). */
async function exchange(path: string, init: Init = {}): Promise<{ res: Response; text: string; lines: Array<Record<string, any>> }> {
  const id = `one-line-${++counter}`;
  const res = await fetch(`${world.url}${path}`, { method: init.method, body: init.body, headers: { ...init.headers, 'x-request-id': id } });
  const text = await res.text();
  const of = () => lines.filter((line) => line.reqId === id);
  await waitFor(() => of().length, { until: (n) => n > 0, what: `a log line of request ${id}` });
  // One more round trip: any second line of the request would have been written by now.
  await fetch(`${world.url}/healthz`);
  return { res, text, lines: of() };
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

  // Noticed from outside (bb79): an MCP tool call answered from its idempotencyKey logged as any other /mcp request.
  it('says so for an MCP tool call answered from its idempotencyKey too, on the line and in the JSON answer\'s header, and only then', async () => {
    const owner = await world.humanToken('logged-mcp-replay@example.com');
    const call = (era: 'modern' | 'legacy', key: string) =>
      exchange('/mcp', {
        method: 'POST',
        headers: {
          authorization: `Bearer ${owner}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...(era === 'modern' ? { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'register_agent' } : { 'mcp-protocol-version': LEGACY }),
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: {
            name: 'register_agent',
            arguments: { name: `Logged ${key}`, identity: { issuer: world.agentIssuer.issuer, subject: key }, idempotencyKey: key },
            ...(era === 'modern' ? { _meta: envelope() } : {}),
          },
        }),
      });
    const first = await call('modern', 'mcp-log-replay-1');
    expect(first.res.status).toBe(200);
    expect(first.res.headers.get('idempotent-replayed')).toBeNull();
    expect(first.lines).toHaveLength(1);
    expect(first.lines[0]).toMatchObject({ msg: 'request completed', req: { method: 'POST', path: '/mcp' }, res: { statusCode: 200 } });
    expect(first.lines[0]).not.toHaveProperty('idempotentReplay');
    const again = await call('modern', 'mcp-log-replay-1');
    expect(JSON.parse(again.text).result.structuredContent.id).toBe(JSON.parse(first.text).result.structuredContent.id);
    expect(again.res.headers.get('idempotent-replayed')).toBe('true');
    expect(again.lines[0]).toMatchObject({ msg: 'request completed', res: { statusCode: 200 }, idempotentReplay: true });
    // A legacy exchange answers with a stream, whose headers leave before the tool answers: the line says it.
    await call('legacy', 'mcp-log-replay-2');
    const streamed = await call('legacy', 'mcp-log-replay-2');
    expect(streamed.text).toContain('mcp-log-replay-2');
    expect(streamed.lines[0]).toMatchObject({ msg: 'request completed', res: { statusCode: 200 }, idempotentReplay: true });
  });

  it('writes one line for an unknown route', async () => {
    const written = await linesOf('/v1/no-such-route');
    expect(written).toHaveLength(1);
    expect(written[0]).toMatchObject({ code: 'not_found', res: { statusCode: 404 } });
  });
});
