// OpenTelemetry's HTTP server conventions for an answer that fails: a 5xx sets the span's status to error AND its
// `error.type` to the status code as text; an answer that never finished is `aborted` (found from outside: a 503's
// span said it only through its status). The server spans come from `tracedRequests`, around any handler.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tracedRequests } from '../../src/platform/http/tracing.ts';
import { startTracedWorld, type TracedWorld } from '../support/traced-world.ts';
import { waitFor } from '../support/wait.ts';

let traced: TracedWorld;
let server: Server;
let url: string;

beforeAll(async () => {
  traced = await startTracedWorld();
  server = createServer(
    tracedRequests((request, response) => {
      response.statusCode = Number(new URL(request.url ?? '/', 'http://x').searchParams.get('status'));
      response.end();
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => server?.close(() => resolve()));
  await traced?.close();
});

describe('server spans of failed answers', () => {
  it('name a 5xx in error.type, and leave a 4xx and a 2xx without one', async () => {
    for (const status of [503, 500, 404, 200]) expect((await fetch(`${url}/probe?status=${status}`)).status).toBe(status);
    const spanOf = (status: number) => traced.otlp.spans.find((span) => span.attributes['url.path'] === '/probe' && span.attributes['http.response.status_code'] === status);
    await waitFor(() => [503, 500, 404, 200].every((status) => spanOf(status) !== undefined), { until: Boolean, what: 'the four server spans', timeoutMs: 10_000 });
    expect(spanOf(503)!.attributes['error.type']).toBe('503');
    expect(spanOf(500)!.attributes['error.type']).toBe('500');
    expect(spanOf(404)!.attributes['error.type']).toBeUndefined();
    expect(spanOf(200)!.attributes['error.type']).toBeUndefined();
  });
});
