// OpenTelemetry's HTTP server conventions for an answer that fails: a 5xx sets the span's status to error AND its
// `error.type` to the status code as text; an answer that never finished is `aborted` (found from outside: a 503's
// span said it only through its status). The server spans come from `tracedRequests`, around any handler.
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tracedRequests } from '../../src/platform/http/tracing.ts';
import { Batcher } from '../../src/platform/batcher.ts';
import { StorageUnavailableError } from '../../src/platform/db/faults.ts';
import { ApiError } from '../../src/platform/errors.ts';
import { inSpan } from '../../src/platform/telemetry.ts';
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

// Found from outside: an unknown method's span was named `_OTHER`, failed statements and operations had no error.type
// (nor the statement its SQLSTATE), and a batch whose transaction failed kept its status unset.
describe('failed work in the conventions', () => {
  it("names an unknown method's server span HTTP, with the method as sent in http.request.method_original", async () => {
    await new Promise<void>((resolve, reject) => {
      const request = httpRequest(`${url}/probe?status=200`, { method: 'PROPFIND' }, (response) => {
        response.resume();
        response.on('end', resolve);
      });
      request.on('error', reject);
      request.end();
    });
    const span = await waitFor(() => traced.otlp.spans.find((s) => s.attributes['http.request.method_original'] === 'PROPFIND'), { what: 'the PROPFIND span', timeoutMs: 10_000 });
    expect(span.name).toBe('HTTP');
    expect(span.attributes['http.request.method']).toBe('_OTHER');
  });

  it('gives a failed statement its SQLSTATE as db.response.status_code and error.type', async () => {
    await inSpan('probe statements', {}, async () => {
      await expect(traced.world.gw.gateway.db.query('SELECT * FROM acg_no_such_table')).rejects.toThrow();
    });
    const span = await waitFor(() => traced.otlp.spans.find((s) => String(s.attributes['db.query.text']).includes('acg_no_such_table')), { what: 'the statement span', timeoutMs: 10_000 });
    expect(span.attributes['db.response.status_code']).toBe('42P01');
    expect(span.attributes['error.type']).toBe('42P01');
    expect(span.status.code).toBe(2);
  });

  it('fails a batch span when an outcome failed for another reason than a refusal, and not for a refusal', async () => {
    const outcomes = { failure: new StorageUnavailableError('unreachable', new Error('gone')), refusal: new ApiError('not_found', { detail: 'no such thing' }) };
    for (const [name, error] of Object.entries(outcomes)) {
      const batcher = new Batcher<number, number>(async (items) => items.map(() => ({ ok: false as const, error })), () => name, { batchSizeMax: 4, batchesInFlightMax: 1, queueLengthMax: 10, retryAfterS: 1 }, { name: `probe-${name}` });
      await inSpan(`probe ${name}`, {}, () => expect(batcher.submit(1)).rejects.toBe(error));
    }
    const batchSpan = (name: string) => waitFor(() => traced.otlp.spans.find((s) => s.name.includes(`probe-${name}`)), { what: `the ${name} batch span`, timeoutMs: 10_000 });
    const failed = await batchSpan('failure');
    expect([failed.status.code, failed.attributes['error.type']]).toEqual([2, 'StorageUnavailableError']);
    expect((await batchSpan('refusal')).status.code).not.toBe(2);
  });
});
