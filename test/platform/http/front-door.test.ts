// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { Agent, request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { openFrontDoor, type FrontDoor } from '../../../src/platform/http/front-door.ts';
import { createLogger } from '../../../src/platform/gateway.ts';
import { waitFor } from '../../support/wait.ts';

const config = { host: '127.0.0.1', port: 0, baseUrl: 'http://gateway.test', mode: 'dev' as const, requestTimeoutMs: 30_000 };
const log = pino({ level: 'silent' });

async function withFrontDoor(fn: (door: FrontDoor) => Promise<void>): Promise<void> {
  const door = await openFrontDoor(config, log);
  try {
    await fn(door);
  } finally {
    await door.close();
  }
}

describe('the front door of acg serve', () => {
  it('answers before the gateway is ready: /healthz 200, /readyz and API routes 503 storage_unavailable with Retry-After, OAuth temporarily_unavailable', async () => {
    await withFrontDoor(async (door) => {
      const health = await fetch(`${door.url}/healthz`);
      expect([health.status, await health.json()]).toEqual([200, { status: 'ok', mode: 'dev' }]);

      for (const path of ['/readyz', '/v1/vouchers?x=1']) {
        const res = await fetch(`${door.url}${path}`, { method: path === '/readyz' ? 'GET' : 'POST' });
        expect(res.status).toBe(503);
        expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(res.headers.get('retry-after')).toBe('1');
        expect(res.headers.get('x-request-id')).toBeTruthy();
        expect(await res.json()).toMatchObject({ status: 503, code: 'storage_unavailable', type: 'http://gateway.test/docs/errors#storage_unavailable' });
      }

      const oauth = await fetch(`${door.url}/oauth/token`, { method: 'POST' });
      expect(oauth.status).toBe(503);
      expect(oauth.headers.get('retry-after')).toBe('1');
      expect(oauth.headers.get('cache-control')).toBe('no-store');
      expect(((await oauth.json()) as { error: string }).error).toBe('temporarily_unavailable');
    });
  });

  it('answers a page for people as a page, with every page header: the console, the OAuth pages, an approval page, the reference (found from outside: JSON in a browser)', async () => {
    await withFrontDoor(async (door) => {
      for (const path of ['/', '/console', '/console/agents/agt_1', '/oauth/authorize?client_id=x', '/oauth/consent?request=r', '/payments/purchases/pur_1', '/payments/topups/top_1', '/docs', '/docs/', '/docs/errors']) {
        const res = await fetch(`${door.url}${path}`);
        expect([res.status, res.headers.get('content-type'), res.headers.get('retry-after'), res.headers.get('x-frame-options')], path).toEqual([503, 'text/html; charset=utf-8', '1', 'DENY']);
        expect(await res.text(), path).toContain('the gateway is starting and waits for its database; retry shortly');
      }
      // What is not a page keeps its body: a problem, and OAuth's error under /oauth/ (a POST to a page's path too).
      for (const [path, method, type] of [['/console/static/app.js', 'GET', 'application/problem+json'], ['/openapi.json', 'GET', 'application/problem+json'], ['/oauth/authorize', 'POST', 'application/json']] as const) {
        const res = await fetch(`${door.url}${path}`, { method });
        expect([res.status, res.headers.get('content-type')?.split(';')[0]], `${method} ${path}`).toEqual([503, type]);
      }
    });
  });

  it("keeps the caller's request id and writes one log line per answer before the app is ready (found from outside: a random id, no line)", async () => {
    const lines: Array<Record<string, unknown>> = [];
    // The gateway's own logger, whose serializers shape `req` (found from outside: they made the path "" and dropped the address).
    const captured = createLogger({ logLevel: 'info' }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
    const door = await openFrontDoor(config, captured);
    try {
      const refused = await fetch(`${door.url}/v1/me`, { headers: { 'x-request-id': 'caller-id-1' } });
      expect([refused.status, refused.headers.get('x-request-id')]).toEqual([503, 'caller-id-1']);
      const health = await fetch(`${door.url}/healthz`, { headers: { 'x-request-id': 'caller-id-2' } });
      expect([health.status, health.headers.get('x-request-id')]).toEqual([200, 'caller-id-2']);
      // An id that is not a plain token is replaced, as the app replaces it.
      const odd = await fetch(`${door.url}/healthz`, { headers: { 'x-request-id': 'has space' } });
      expect(odd.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
      await waitFor(() => lines.length, { until: (n) => n >= 3, what: 'three log lines' });
      expect(lines[0]).toMatchObject({ level: 30, reqId: 'caller-id-1', req: { method: 'GET', path: '/v1/me', remoteAddress: '127.0.0.1' }, res: { statusCode: 503 }, code: 'storage_unavailable' });
      expect(lines[1]).toMatchObject({ level: 30, reqId: 'caller-id-2', req: { path: '/healthz' }, res: { statusCode: 200 }, msg: 'request completed' });
    } finally {
      await door.close();
    }
  });

  it('hands every request to the app once it is open', async () => {
    await withFrontDoor(async (door) => {
      door.open((req, res) => res.end(`app saw ${req.url}`));
      expect(await (await fetch(`${door.url}/readyz`)).text()).toBe('app saw /readyz');
    });
  });

  it('on close, refuses new connections and waits for the request in flight, which finishes with Connection: close', async () => {
    const door = await openFrontDoor(config, log);
    let finish: (() => void) | undefined;
    door.open((req, res) => {
      // An app that sets its own Connection header (found from outside: an answer sent during the stop kept its
      // connection alive, and held the stop until the client's idle timeout).
      if (req.url === '/slow') finish = () => res.setHeader('connection', 'keep-alive').end('done');
      else res.end('fast');
    });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const get = (path: string) =>
      new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
        httpRequest(`${door.url}${path}`, { agent }, (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, body }));
        }).on('error', reject).end();
      });
    expect((await get('/fast')).body).toBe('fast'); // the socket is now kept alive
    const slow = get('/slow');
    const finishSlow = await waitFor(() => finish, { what: 'the slow request to reach its handler' });
    let closed = false;
    const closing = door.close().then(() => (closed = true));
    // A sleep, not a wait: nothing should happen in it. Closing must not finish while the request is in flight; and
    // the answer comes after the door stopped listening (past its settle and last read), as a slow request's does.
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(closed).toBe(false);
    const startedMs = Date.now();
    finishSlow();
    expect(await slow).toMatchObject({ status: 200, body: 'done' });
    await closing;
    // The stop ended with the answer, not with the kept-alive connection's idle timeout (5 s).
    expect(Date.now() - startedMs).toBeLessThan(2_000);
    await expect(fetch(`${door.url}/healthz`)).rejects.toThrow();
    agent.destroy();
  });

  /** A body announced and never finished, sent by hand; resolves with every byte answered once the door closes the connection. */
  async function shortBody(app: Parameters<FrontDoor['open']>[0], head: string, partialBody: string): Promise<{ answer: string; tookMs: number }> {
    const door = await openFrontDoor({ ...config, requestTimeoutMs: 1000 }, log);
    try {
      door.open(app);
      const socket = connect(Number(new URL(door.url).port), '127.0.0.1');
      let answer = '';
      socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
      const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      const startedMs = Date.now();
      socket.write(`${head}\r\nHost: gateway.test\r\nContent-Length: 100\r\n\r\n${partialBody}`);
      await closed;
      return { answer, tookMs: Date.now() - startedMs };
    } finally {
      await door.close();
    }
  }
  const readsWholeBody: Parameters<FrontDoor['open']>[0] = (req, res) => {
    req.resume();
    req.on('end', () => res.end('whole'));
  };
  const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));

  it('answers 408 request_timeout and closes the connection when a body shorter than its Content-Length stops arriving', async () => {
    const { answer, tookMs } = await shortBody(readsWholeBody, 'POST /v1/vouchers HTTP/1.1\r\nContent-Type: application/json', '{"a":');
    // Node's own default would have held it five minutes.
    expect(tookMs).toBeLessThan(10_000);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toMatch(/\r\nConnection: close\r\n/i);
    expect(bodyOf(answer)).toMatchObject({ status: 408, code: 'request_timeout' });
  });

  it('writes nothing more when the request that stops arriving was already answered (an early refusal), and closes the connection', async () => {
    // Answers before reading the body, as a refusal of the credential does.
    const refusesAtOnce: Parameters<FrontDoor['open']>[0] = (_req, res) => res.writeHead(401, { 'content-type': 'text/plain' }).end('refused');
    const { answer } = await shortBody(refusesAtOnce, 'POST /v1/vouchers HTTP/1.1\r\nContent-Type: application/json', '{"a":');
    expect(answer.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    expect(answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(answer).toContain('refused');
    expect(answer).not.toContain('request_timeout');
  });

  it('answers an /oauth/ request whose body stops arriving with the OAuth error body (408 invalid_request)', async () => {
    const { answer } = await shortBody(readsWholeBody, 'POST /oauth/token HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded', 'grant_type=');
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(bodyOf(answer)).toMatchObject({ error: 'invalid_request' });
  });
  it('on a live gateway served over https, its own answers and what it refuses on the socket carry HSTS and nosniff as the app\'s do (found from outside: a malformed request was answered without them)', async () => {
    const door = await openFrontDoor({ ...config, baseUrl: 'https://gateway.test', mode: 'live' }, log);
    try {
      const starting = await fetch(`${door.url}/v1/me`);
      expect([starting.status, starting.headers.get('strict-transport-security'), starting.headers.get('x-content-type-options')]).toEqual([503, 'max-age=63072000', 'nosniff']);
      door.open((_req, res) => res.end('app'));
      // A request line Node's parser refuses: answered on the socket, before any app.
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = connect(Number(new URL(door.url).port), '127.0.0.1');
        let text = '';
        socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
        socket.on('close', () => resolve(text));
        socket.on('error', reject);
        socket.write('GET / HTTP/1.1\r\nHost: gateway.test\r\nBad Header Line\r\n\r\n');
      });
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
      expect(answer.toLowerCase()).toContain('strict-transport-security: max-age=63072000\r\n');
      expect(answer.toLowerCase()).toContain('x-content-type-options: nosniff\r\n');
    } finally {
      await door.close();
    }
  });
  it('on close, answers (503, Connection: close) a request that was sent before it but not yet read, rather than resetting its connection (found from outside: a busy event loop left them unread)', async () => {
    const door = await openFrontDoor(config, log);
    door.open((_req, res) => res.end('served'));
    const port = Number(new URL(door.url).port);
    /** A raw connection; resolves with everything it was answered once it closes, or with the error that ended it. */
    const exchange = (socket: ReturnType<typeof connect>) =>
      new Promise<string>((resolve) => {
        let text = '';
        socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
        socket.on('close', () => resolve(text));
        socket.on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code}`));
      });
    const request = 'POST /v1/vouchers HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 2\r\n\r\n{}';
    // One kept-alive connection the door has already served, and one it has not yet accepted.
    const served = connect(port, '127.0.0.1');
    const servedAnswer = exchange(served);
    let first = '';
    served.on('data', (chunk: Buffer) => (first += chunk.toString('latin1')));
    served.write('GET /first HTTP/1.1\r\nHost: gateway.test\r\n\r\n');
    await waitFor(() => first.includes('served'), { what: 'the first answer on the kept-alive connection' });
    const fresh = connect(port, '127.0.0.1');
    const freshAnswer = exchange(fresh);
    await new Promise((resolve) => fresh.once('connect', resolve));
    // Both requests are written, then the event loop is kept busy (as the embedded engine keeps it) and the stop comes
    // in the same turn: the door has read neither.
    served.write(request);
    fresh.write(request);
    const until = Date.now() + 100;
    while (Date.now() < until) {
      // busy: nothing is read
    }
    const closing = door.close();
    const [keptAlive, accepted] = await Promise.all([servedAnswer, freshAnswer]);
    await closing;
    for (const answer of [keptAlive.slice(keptAlive.lastIndexOf('HTTP/1.1 ')), accepted]) {
      expect(answer).toMatch(/^HTTP\/1\.1 503 /);
      expect(answer.toLowerCase()).toContain('connection: close');
      expect(answer).toContain('storage_unavailable');
    }
  });
  it('on close, a connection accepted before the door closed may still deliver its request, and is answered 503, not reset (found from outside: resets under a stream of new connections)', async () => {
    const door = await openFrontDoor(config, log);
    door.open((_req, res) => res.end('served'));
    const port = Number(new URL(door.url).port);
    const closing = door.close();
    // Accepted during the settle, with nothing sent yet.
    const late = connect(port, '127.0.0.1');
    let answer = '';
    late.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
    const ended = new Promise<string>((resolve) => {
      late.on('close', () => resolve(answer));
      late.on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code}`));
    });
    await new Promise((resolve) => late.once('connect', resolve));
    // The request goes out once the listening socket is closed (a new connection is refused).
    await waitFor(
      () =>
        new Promise<boolean>((resolve) => {
          const probe = connect(port, '127.0.0.1');
          probe.once('connect', () => {
            probe.destroy();
            resolve(false);
          });
          probe.once('error', () => resolve(true));
        }),
      { what: 'the listening socket to close', intervalMs: 5 },
    );
    late.write('POST /v1/vouchers HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 2\r\n\r\n{}');
    const text = await ended;
    await closing;
    expect(text).toMatch(/^HTTP\/1\.1 503 /);
    expect(text.toLowerCase()).toContain('connection: close');
  });
});
