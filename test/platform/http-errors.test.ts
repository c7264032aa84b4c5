import net from 'node:net';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import pino from 'pino';
import { ApiError } from '../../src/platform/errors.ts';
import { Microcredits, Nullable } from '../../src/platform/schemas.ts';
import { StorageUnavailableError } from '../../src/platform/db/faults.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { waitFor } from '../support/wait.ts';

// A route with a JSON body schema, registered only in this test, to exercise the HTTP edge.
async function echoRoute(app: FastifyInstance) {
  app.post('/v1/test/echo', {
    config: { notAnOperation: 'a test route that exercises the HTTP edge: it echoes its body' },
    schema: { body: Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: false }) },
    handler: async (request) => request.body,
  });
  app.post('/v1/test/amount', {
    config: { notAnOperation: 'a test route that exercises the HTTP edge: it echoes an amount' },
    schema: { body: Type.Object({ amountUc: Type.Optional(Microcredits()), limitUc: Type.Optional(Nullable(Microcredits())) }, { additionalProperties: false }) },
    handler: async (request) => request.body,
  });
  app.get('/v1/test/boom', { handler: async () => { throw new Error('secret internal detail'); } });
  app.get('/v1/test/unconfigured', { handler: async () => { throw new ApiError('provider_configuration_required', { detail: 'no provider in live mode' }); } });
  // What the drivers throw for a live database that timed out a statement (src/platform/db/faults.ts).
  app.get('/v1/test/storage-down', { handler: async () => { throw new StorageUnavailableError('timeout', Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' })); } });
}

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ features: [echoRoute], env: { ACG_BODY_LIMIT_BYTES: '2048' } });
});
afterAll(() => gw.close());

async function post(body: string, contentType = 'application/json') {
  return fetch(`${gw.url}/v1/test/echo`, { method: 'POST', headers: { 'content-type': contentType }, body });
}

function expectProblem(body: Record<string, unknown>, status: number, code: string) {
  expect(body).toMatchObject({ status, code });
  expect(typeof body.type).toBe('string');
  expect(typeof body.title).toBe('string');
}

describe('the HTTP edge', () => {
  it('answers malformed JSON with 400 invalid_input as a problem body', async () => {
    const res = await post('{"name": ');
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    const body = await res.json();
    expectProblem(body, 400, 'invalid_input');
    expect(body.detail).toBe('the body is not valid JSON: it ends before its last value is complete');
  });

  it('says where a malformed JSON body breaks, by line and column, without quoting the body (found from outside: one text named two causes and no place)', async () => {
    const cases: Array<[string, string]> = [
      ['{"name":"a",}', 'the body is not valid JSON: expected double-quoted property name at line 1, column 13'],
      ['{"name":"a"}x', 'the body is not valid JSON: unexpected non-whitespace character after JSON at line 1, column 13'],
      ["{'name':'secret-value'}", "the body is not valid JSON: expected property name or '}' at line 1, column 2"],
      ['abc-secret', 'the body is not valid JSON: unexpected character at line 1, column 1'],
      ['[1,2,,3]', 'the body is not valid JSON: unexpected character at line 1, column 6'],
      ['{\n  "name": tru\n}', 'the body is not valid JSON: unexpected character at line 2, column 14'],
    ];
    for (const [text, detail] of cases) {
      const res = await post(text);
      const body = await res.json();
      expect([res.status, body.code, body.detail], text).toEqual([400, 'invalid_input', detail]);
    }
  });

  it('answers a body that is not UTF-8 with 400 invalid_input, rather than storing U+FFFD in its place', async () => {
    const bytes = (...parts: Array<string | number[]>) => Buffer.concat(parts.map((part) => (typeof part === 'string' ? Buffer.from(part) : Buffer.from(part))));
    // Latin-1 é, an overlong "/", a UTF-8 encoded surrogate, a truncated sequence.
    for (const bad of [[0xe9], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82]]) {
      const res = await fetch(`${gw.url}/v1/test/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: bytes('{"name":"caf', bad, '"}') });
      expect(res.status).toBe(400);
      const body = await res.json();
      expectProblem(body, 400, 'invalid_input');
      expect(body.detail).toBe('the body is not valid UTF-8 (JSON is UTF-8)');
    }
    const good = await fetch(`${gw.url}/v1/test/echo`, { method: 'POST', headers: { 'content-type': 'application/json; charset=utf-8' }, body: bytes([0xef, 0xbb, 0xbf], '{"name":"café"}') });
    expect(good.status).toBe(200);
    expect(await good.json()).toEqual({ name: 'café' });
  });

  it('answers valid JSON with a prototype key (__proto__, or constructor.prototype) with 400 invalid_input that names them', async () => {
    for (const text of ['{"name":"a","__proto__":{"admin":true}}', '{"name":"a","constructor":{"prototype":{"admin":true}}}']) {
      const res = await post(text);
      expect(res.status).toBe(400);
      const body = await res.json();
      expectProblem(body, 400, 'invalid_input');
      expect(body.detail).toMatch(/"__proto__" key or "constructor" with a "prototype", which are refused/);
    }
  });

  it('answers a body nested past 128 levels with 400 invalid_input naming its member, and reads one of 128 (found from outside: 2,000 levels of an x402 payload were a 500)', async () => {
    const nested = (depth: number) => `${'{"a":'.repeat(depth - 1)}{}${'}'.repeat(depth - 1)}`;
    for (const [text, path] of [
      [`{"name":"a","extra":${nested(200)}}`, 'body/extra'],
      [`{"name":"a","extra":${'['.repeat(1000)}${']'.repeat(1000)}}`, 'body/extra'],
    ] as const) {
      const res = await post(text);
      expect(res.status).toBe(400);
      const body = await res.json();
      expectProblem(body, 400, 'invalid_input');
      expect(body.detail).toBe(`${path} nests objects and arrays more than 128 levels deep; a JSON body may nest 128 at most`);
    }
    // 128 levels are read: the schema then refuses the member it does not take, not the nesting.
    const read = await (await post(`{"name":"a","extra":${nested(127)}}`)).json();
    expect(read.detail).toBe('body/extra is not a known member here');
  });

  it('answers an object that repeats a member name with 400 invalid_input naming it, however the name is written', async () => {
    for (const [text, path] of [
      // Named as the schema's refusals name a member (found from outside: "body.name" beside "body/name").
      ['{"name":"a","name":"b"}', 'body/name'],
      ['{"name":"a","\\u006eame":"b"}', 'body/name'],
      ['{"name":"a","extra":[{"x":1},{"x":2,"x":3}]}', 'body/extra/1/x'],
    ] as const) {
      const res = await post(text);
      expect(res.status, text).toBe(400);
      const body = await res.json();
      expectProblem(body, 400, 'invalid_input');
      expect(body.detail, text).toBe(`${path} appears twice in one object; a member name may appear once (RFC 7493 §2.3), as another reader could take either value`);
    }
    // The same names in different objects, and a value equal to a name, are no repetition.
    const fine = await post('{"name":"name"}');
    expect(fine.status).toBe(200);
  });

  it('answers a request that carries a credential with Cache-Control: no-store, and every answer with nosniff', async () => {
    const withCredential = await fetch(`${gw.url}/v1/test/echo`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer x' }, body: '{"name":"a"}' });
    expect(withCredential.status).toBe(200);
    expect(withCredential.headers.get('cache-control')).toBe('no-store');
    expect(withCredential.headers.get('x-content-type-options')).toBe('nosniff');
    const withCookie = await fetch(`${gw.url}/v1/test/echo`, { method: 'POST', headers: { 'content-type': 'application/json', cookie: 'a=b' }, body: '{"name":"a"}' });
    expect(withCookie.headers.get('cache-control')).toBe('no-store');
    const anonymous = await post('{"name":"a"}');
    expect(anonymous.headers.get('cache-control')).toBeNull();
    expect(anonymous.headers.get('x-content-type-options')).toBe('nosniff');
  });

  it('answers a schema violation with 400 invalid_input naming the field', async () => {
    const res = await post(JSON.stringify({ name: '' }));
    expect(res.status).toBe(400);
    const body = await res.json();
    expectProblem(body, 400, 'invalid_input');
    expect(body.detail).toContain('name');
  });

  it('says what an amount is when one comes as a JSON number or not as digits (found from outside: "must be string")', async () => {
    for (const amountUc of [1500000, '1.5', '-1']) {
      const res = await fetch(`${gw.url}/v1/test/amount`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ amountUc }) });
      expect(res.status).toBe(400);
      const body = await res.json();
      expectProblem(body, 400, 'invalid_input');
      expect(body.detail, String(amountUc)).toBe('body/amountUc must be microcredits as a string of 1 to 18 digits, e.g. "1500000" (a JSON number loses microcredits past 2^53)');
    }
    // Too many digits, and a nullable amount as a number: the same one refusal for the member, nothing else of it.
    for (const sent of [{ amountUc: '1'.repeat(19) }, { limitUc: 5 }]) {
      const res = await fetch(`${gw.url}/v1/test/amount`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(sent) });
      const body = await res.json();
      const member = Object.keys(sent)[0];
      expect(body.errors, JSON.stringify(sent)).toEqual([{ path: `body/${member}`, message: 'must be microcredits as a string of 1 to 18 digits, e.g. "1500000" (a JSON number loses microcredits past 2^53)' }]);
    }
  });

  it('refuses unknown members instead of dropping them', async () => {
    const res = await post(JSON.stringify({ name: 'a', extra: 1 }));
    expect(res.status).toBe(400);
    expectProblem(await res.json(), 400, 'invalid_input');
  });

  it('refuses a query string on an API route that takes none, naming what it got; other paths ignore one', async () => {
    const res = await fetch(`${gw.url}/v1/test/echo?limit=2&startingAfter=x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'a' }) });
    expect(res.status).toBe(400);
    const body = await res.json();
    expectProblem(body, 400, 'invalid_input');
    expect(body.detail).toBe('POST /v1/test/echo takes no query parameters: limit, startingAfter');
    expect((await fetch(`${gw.url}/v1/test/echo?`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'a' }) })).status).toBe(200);
    expect((await fetch(`${gw.url}/healthz?probe=1`)).status).toBe(200);
  });

  it('answers an unknown route with 404 not_found', async () => {
    const res = await fetch(`${gw.url}/v1/nothing-here`);
    expect(res.status).toBe(404);
    expectProblem(await res.json(), 404, 'not_found');
  });

  it('answers a known path with the wrong method with 405 and Allow', async () => {
    const res = await fetch(`${gw.url}/v1/test/echo`, { method: 'DELETE' });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
    expectProblem(await res.json(), 405, 'method_not_allowed');
  });

  it('answers a body over the limit with 413', async () => {
    const res = await post(JSON.stringify({ name: 'x'.repeat(4096) }));
    expect(res.status).toBe(413);
    expectProblem(await res.json(), 413, 'payload_too_large');
  });

  it('reads a refused body of a declared length to its end, so its 413 arrives and the connection stays usable (found from outside: a broken pipe instead of the 413, one time in three)', async () => {
    const { port } = new URL(gw.url);
    const socket = net.connect(Number(port), '127.0.0.1');
    await once(socket, 'connect');
    const received: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    const text = () => Buffer.concat(received).toString('latin1');
    const body = Buffer.alloc(1024 * 1024, 'x');
    // No Expect: 100-continue, as most clients send: the whole body follows the headers at once.
    socket.write(`POST /v1/test/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    await new Promise<void>((resolve, reject) => socket.write(body, (error) => (error ? reject(error) : resolve())));
    await waitFor(() => /\r\n\r\n\{.*\}$/s.test(text()), { what: 'the 413 answer' });
    expect(text()).toMatch(/^HTTP\/1\.1 413 /);
    expect(text()).not.toMatch(/\r\nconnection: close\r\n/i);
    // The same connection answers the next request.
    received.length = 0;
    socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    await waitFor(() => /^HTTP\/1\.1 200 /.test(text()), { what: 'the next answer on the same connection' });
    socket.destroy();
    // A body of no declared length (chunked) is not read on past the limit: that connection closes.
    const chunked = await fetch(`${gw.url}/v1/test/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new ReadableStream({ start: (controller) => (controller.enqueue(new TextEncoder().encode(JSON.stringify({ name: 'x'.repeat(4096) }))), controller.close()) }),
      duplex: 'half',
    } as RequestInit);
    expect(chunked.status).toBe(413);
    expect(chunked.headers.get('connection')).toBe('close');
  });

  it('answers a wrong content type with 415', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const res = await post('name=a', type);
      expect(res.status, type).toBe(415);
      expectProblem(await res.json(), 415, 'unsupported_media_type');
    }
  });

  it('answers an unexpected failure with 500 and no internal detail', async () => {
    const res = await fetch(`${gw.url}/v1/test/boom`);
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(text).not.toContain('secret internal detail');
    expect(text).not.toContain('at ');
    expectProblem(JSON.parse(text), 500, 'internal_error');
  });

  it('echoes a request id, or makes one', async () => {
    const given = await fetch(`${gw.url}/healthz`, { headers: { 'x-request-id': 'abc-123' } });
    expect(given.headers.get('x-request-id')).toBe('abc-123');
    const made = await fetch(`${gw.url}/healthz`, { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(made.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('logging of failures', () => {
  it('logs refusals and availability 503s without a stack, and only unexpected errors at error with the stack', async () => {
    const lines: Array<{ level: number; msg: string; err?: { stack?: string }; status?: number }> = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const logged = await startTestGateway({ features: [echoRoute], log });
    try {
      const statuses = [];
      for (const path of ['/v1/test/unconfigured', '/v1/test/storage-down', '/v1/nothing-here', '/v1/test/boom']) statuses.push((await fetch(`${logged.url}${path}`)).status);
      expect(statuses).toEqual([503, 503, 404, 500]);
      const failures = lines.filter((line) => line.status !== undefined || line.msg === 'request failed');
      const byLevel = (level: number) => failures.filter((line) => line.level === level);
      expect(byLevel(30).map((line) => line.status)).toEqual([404]);
      expect(byLevel(40).map((line) => line.status)).toEqual([503, 503]);
      expect(byLevel(50)).toHaveLength(1);
      expect(byLevel(50)[0]!.err?.stack).toContain('secret internal detail');
      expect(failures.filter((line) => line.level < 50).every((line) => line.err === undefined)).toBe(true);
    } finally {
      await logged.close();
    }
  });
});
