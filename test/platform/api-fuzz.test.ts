// No bad input reaches a 500. Named cases for each failure once seen, then a fuzz run over every
// operation of the served OpenAPI document: generated bad input, on the run's database, asserting that
// every answer is a 4xx in the body its clients expect and leaks nothing internal.
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { openFrontDoor, type FrontDoor } from '../../src/platform/http/front-door.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { onPostgres } from '../support/database.ts';
import { startWorld, type World } from '../support/world.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';

const OVER_LIMIT_UC = '9999999999999999999';

let world: World;
let shop: Shop;
let agent: { id: string; token: string; ownerToken: string };
let offer: { id: string };
let keyCounter = 0;
const key = () => `fuzz-${++keyCounter}`;

beforeAll(async () => {
  // With a payment provider (dev mode's default), so the top-up routes answer their inputs rather than 503.
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local' } });
  agent = await world.createAgent('fuzz-owner@example.com', 'fuzz-agent');
  shop = await openShop(world, 'fuzz-shop@example.com');
  offer = await shop.offer({ priceUc: '1000' });
  await grant(world, agent.id, 1_000_000n);
});
afterAll(() => world.close());

function expectInvalidInput(res: { status: number; headers: Headers; body: any }, where: string) {
  expect(res.status, `${where}: ${JSON.stringify(res.body)}`).toBe(400);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(res.body).toMatchObject({ status: 400, code: 'invalid_input' });
}

/** Sends raw bytes over one connection, so headers and paths reach the server exactly as written. */
function rawRequest(path: string, headers: Record<string, string> = {}): Promise<{ status: number; type: string; body: any }> {
  const url = new URL(world.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, path, method: 'GET', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('amounts above the limit are 400 invalid_input', () => {
  it('refuses a 19-digit maxUc and maxAmount on POST /v1/vouchers', async () => {
    for (const field of ['maxUc', 'maxAmount']) {
      expectInvalidInput(await mint(world, agent.token, offer.id, key(), { [field]: OVER_LIMIT_UC }), field);
    }
  });

  it('refuses a 19-digit amountUc on capture', async () => {
    const voucher = await mint(world, agent.token, offer.id, key());
    expect(voucher.status, JSON.stringify(voucher.body)).toBe(200);
    const res = await world.api('POST', `/v1/redemptions/${voucher.body.redemption.id}/capture`, { token: shop.key, key: key(), body: { amountUc: OVER_LIMIT_UC } });
    expectInvalidInput(res, 'capture');
  });

  it('refuses a 19-digit priceUc on offer create and patch', async () => {
    const create = await world.api('POST', `/v1/merchants/${shop.merchantId}/offers`, {
      token: shop.key,
      key: key(),
      body: { name: 'Big', category: 'books', priceUc: OVER_LIMIT_UC, holdLifetimeS: 900, active: true },
    });
    expectInvalidInput(create, 'offer create');
    const patch = await world.api('PATCH', `/v1/merchants/${shop.merchantId}/offers/${offer.id}`, { token: shop.key, body: { priceUc: OVER_LIMIT_UC } });
    expectInvalidInput(patch, 'offer patch');
  });

  it('refuses 19-digit agent caps on create and patch', async () => {
    for (const caps of [{ perHoldUc: OVER_LIMIT_UC }, { perPeriodUc: OVER_LIMIT_UC }]) {
      const create = await world.api('POST', '/v1/owner/agents', {
        token: agent.ownerToken,
        key: key(),
        body: { name: 'capped', identity: { issuer: world.agentIssuer.issuer, subject: `capped-${key()}` }, caps },
      });
      expectInvalidInput(create, `create ${JSON.stringify(caps)}`);
      const patch = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { caps } });
      expectInvalidInput(patch, `patch ${JSON.stringify(caps)}`);
    }
  });

  it('accepts the largest amount, 18 nines, as a cap', async () => {
    const res = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { caps: { perHoldUc: '999999999999999999' } } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.caps.perHoldUc).toBe('999999999999999999');
  });
});

describe('NUL and other controls, lone surrogates and bidirectional controls are 400 invalid_input', () => {
  it('refuses startingAfter=%00 on GET /v1/owner/agents', async () => {
    expectInvalidInput(await world.api('GET', '/v1/owner/agents?startingAfter=%00', { token: agent.ownerToken }), 'query');
  });

  it('refuses an api-key name of \\u0000', async () => {
    const ownerToken = await world.humanToken('fuzz-shop@example.com');
    const res = await world.api('POST', `/v1/merchants/${shop.merchantId}/api-keys`, { token: ownerToken, key: key(), body: { name: '\u0000', scopes: ['offers:read'] } });
    expectInvalidInput(res, 'api-key name');
  });

  it('refuses a merchant-check issuer of \\u0000', async () => {
    const res = await world.api('POST', '/v1/access/merchant-check', {
      token: shop.key,
      body: { offerId: offer.id, agentIdentity: { issuer: '\u0000', subject: 'fuzz-agent' } },
    });
    expectInvalidInput(res, 'merchant-check issuer');
  });

  it('refuses a lone surrogate in a body member name, a body value and a path parameter', async () => {
    expectInvalidInput(await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { name: 'a\uD800b' } }), 'value');
    expectInvalidInput(await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { '\uDC00': 1 } }), 'member name');
    expectInvalidInput(await world.api('GET', '/v1/owner/agents/%00', { token: agent.ownerToken }), 'path');
  });

  it('refuses a bidirectional control in a name (a merchant named "Books \\u202e" would reverse the domain shown after it)', async () => {
    const ownerToken = await world.humanToken('fuzz-bidi@example.com');
    for (const control of ['\u202a', '\u202e', '\u2066', '\u2069']) {
      const res = await world.api('POST', '/v1/merchants', { token: ownerToken, key: key(), body: { name: `Trusted Books ${control}`, domain: 'moc.koobecaf.ni', categories: ['books'] } });
      expectInvalidInput(res, `merchant name with U+${control.codePointAt(0)!.toString(16)}`);
      expect(res.body.detail).toMatch(/^body\/name holds .*bidirectional control/);
    }
    // Right-to-left text itself is accepted: it needs no control character.
    const hebrew = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { name: 'סוכן קניות' } });
    expect(hebrew.status).toBe(200);
  });

  it('refuses the other control characters in a name (an escape sequence a terminal would run), and keeps tab and line breaks', async () => {
    for (const control of ['\u0007', '\u001b', '\u0008', '\u007f']) {
      const res = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { name: `Scout${control}[31m` } });
      expectInvalidInput(res, `agent name with U+${control.codePointAt(0)!.toString(16)}`);
      // Named as the schema's refusals name a member (found from outside: "body.name" beside "body/name").
      expect(res.body.detail).toMatch(/^body\/name holds a control character/);
    }
    const spaced = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { name: 'Scout\tone' } });
    expect(spaced.status).toBe(200);
  });

  it('refuses a JSON null as the body of a route whose body may be left out (it read as no body, and froze the agent)', async () => {
    for (const route of ['freeze', 'unfreeze']) {
      const res = await fetch(`${world.url}/v1/owner/agents/${agent.id}/${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${agent.ownerToken}`, 'content-type': 'application/json', 'idempotency-key': key() },
        body: 'null',
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe('invalid_input');
    }
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.status).toBe('active');
  });

  it('takes an empty chunked body without a media type as no body, and refuses one with content or another media type (415)', async () => {
    const post = (route: string, headers: Record<string, string>, body: string) =>
      new Promise<{ status: number; code?: string }>((resolve, reject) => {
        const req = httpRequest(`${world.url}/v1/owner/agents/${agent.id}/${route}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${agent.ownerToken}`, 'idempotency-key': key(), 'transfer-encoding': 'chunked', ...headers },
        });
        req.on('response', (res) => {
          let text = '';
          res.on('data', (chunk) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode!, code: text ? (JSON.parse(text) as { code?: string }).code : undefined }));
        });
        req.on('error', reject);
        req.end(body);
      });
    expect(await post('freeze', {}, '')).toMatchObject({ status: 200 });
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.status).toBe('frozen');
    expect(await post('unfreeze', {}, '{}')).toEqual({ status: 415, code: 'unsupported_media_type' });
    expect(await post('unfreeze', { 'content-type': 'text/plain' }, '')).toEqual({ status: 415, code: 'unsupported_media_type' });
    expect(await post('unfreeze', { 'content-type': 'text/plain' }, 'hello')).toEqual({ status: 415, code: 'unsupported_media_type' });
    expect(await post('unfreeze', {}, '')).toMatchObject({ status: 200 });
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.status).toBe('active');
  });

  it('refuses an empty startingAfter (it read as a cursor past everything: an empty first page)', async () => {
    const res = await world.api('GET', '/v1/owner/agents?startingAfter=', { token: agent.ownerToken });
    expectInvalidInput(res, 'empty startingAfter');
    expect(res.body.detail).toMatch(/startingAfter/);
  });

  it('refuses a query number no column holds (limit=1e309 coerces to Infinity)', async () => {
    expectInvalidInput(await world.api('GET', '/v1/owner/agents?limit=1e309', { token: agent.ownerToken }), 'limit');
  });

  it('refuses before the credential is looked up', async () => {
    const res = await world.api('GET', '/v1/owner/agents?startingAfter=%00', { token: 'acg_mk_not-a-real-key' });
    expectInvalidInput(res, 'unauthenticated query');
  });

  it('answers an OAuth page with its HTML error page, as its document declares (no redirect, nothing echoed)', async () => {
    const res = await world.api('GET', '/oauth/authorize?client_id=%00');
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
  });
});

describe("Fastify's and Node's own refusals use our bodies", () => {
  it('answers bad percent-encoding in a path (FST_ERR_BAD_URL) with 400 invalid_input', async () => {
    const res = await rawRequest('/v1/merchants/%E0%A4%A');
    expect(res.status).toBe(400);
    expect(res.type).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ status: 400, code: 'invalid_input' });
    const oauth = await rawRequest('/oauth/%E0%A4%A');
    expect(oauth.status).toBe(400);
    expect(oauth.body).toMatchObject({ error: 'invalid_request' });
  });

  it('answers an over-long path parameter (FST_ERR_MAX_PARAM_LENGTH) with 414 uri_too_long', async () => {
    const res = await rawRequest(`/v1/merchants/${'a'.repeat(600)}`);
    expect(res.status).toBe(414);
    expect(res.type).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ status: 414, code: 'uri_too_long' });
  });

  it('answers an oversized header with 431 headers_too_large', async () => {
    const res = await rawRequest('/v1/me', { 'x-padding': 'a'.repeat(40_000) });
    expect(res.status).toBe(431);
    expect(res.type).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ status: 431, code: 'headers_too_large' });
    const oauth = await rawRequest('/oauth/authorize', { 'x-padding': 'a'.repeat(40_000) });
    expect(oauth.body).toMatchObject({ error: 'invalid_request' });
  });
});

// ---------------------------------------------------------------------------------------------------
// What Node's HTTP parser refuses before any route runs, sent over raw sockets (node:net) so the bytes reach
// the server exactly as written: to Fastify's own listener, and to the front door of `acg serve` (the
// server that listens in production, serving the same app, and before the app is ready).

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

const RAW_ANSWER_TIMEOUT_MS = 10_000;

/** Writes `bytes` on a fresh connection and reads one HTTP/1.1 answer (Content-Length or close delimited). */
function rawExchange(base: string, bytes: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    let received = Buffer.alloc(0);
    const socket = connect(Number(port), hostname, () => socket.write(bytes, 'latin1', () => {}));
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to ${JSON.stringify(bytes.slice(0, 80))} within ${RAW_ANSWER_TIMEOUT_MS} ms`));
    }, RAW_ANSWER_TIMEOUT_MS);
    const parse = (final: boolean): RawAnswer | undefined => {
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) return undefined;
      const [statusLine, ...lines] = received.subarray(0, end).toString('latin1').split('\r\n');
      const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
      const status = Number(statusLine!.split(' ')[1]);
      const body = received.subarray(end + 4);
      if (headers['transfer-encoding'] === 'chunked') {
        const chunks = dechunk(body);
        return chunks === undefined ? undefined : { status, headers, body: chunks.toString('utf8') };
      }
      const length = headers['content-length'] === undefined ? undefined : Number(headers['content-length']);
      if (length === undefined ? !final : body.length < length) return undefined;
      return { status, headers, body: body.subarray(0, length).toString('utf8') };
    };
    const finish = (final: boolean) => {
      const answer = parse(final);
      if (!answer && !final) return;
      clearTimeout(timer);
      socket.destroy();
      if (answer) resolve(answer);
      else reject(new Error(`the connection closed without an answer to ${JSON.stringify(bytes.slice(0, 80))}: ${JSON.stringify(received.toString('latin1').slice(0, 200))}`));
    };
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      finish(false);
    });
    // The server may answer and close while we are still writing (an oversized request): what it said counts.
    socket.on('error', () => {});
    socket.on('close', () => finish(true));
  });
}

/** A chunked body decoded, or undefined while its last chunk has not arrived. */
function dechunk(body: Buffer): Buffer | undefined {
  const parts: Buffer[] = [];
  for (let at = 0; ; ) {
    const lineEnd = body.indexOf('\r\n', at);
    if (lineEnd < 0) return undefined;
    const size = parseInt(body.subarray(at, lineEnd).toString('latin1'), 16);
    if (size === 0) return Buffer.concat(parts);
    if (body.length < lineEnd + 2 + size + 2) return undefined;
    parts.push(body.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}

/** The problem with an answer on an API route, or undefined when it is a matching problem body. */
function notAProblemBody(answer: RawAnswer): string | undefined {
  const where = `${answer.status} ${answer.headers['content-type'] ?? '(no content type)'} ${answer.body.slice(0, 200)}`;
  if (answer.status < 400 || answer.status >= 600) return `not a refusal: ${where}`;
  if (!answer.headers['content-type']?.startsWith('application/problem+json')) return `not problem+json: ${where}`;
  try {
    const body = JSON.parse(answer.body);
    if (body.status !== answer.status || typeof body.code !== 'string' || typeof body.type !== 'string' || typeof body.title !== 'string') return `not a matching problem: ${where}`;
  } catch {
    return `not JSON: ${where}`;
  }
  return undefined;
}

const API_TARGETS = ['/v1/me', '/v1/owner/agents', '/v1/vouchers', '/v1/operator/credit-grants'];
const PARSER_METHODS = ['GET', 'POST', 'DELETE', 'PATCH'];

/** A request line and headers too large for Node (16 KiB): many headers, one huge one, or a huge cookie. */
const oversizedHeaders = fc
  .tuple(fc.constantFrom(...PARSER_METHODS), fc.constantFrom(...API_TARGETS), fc.integer({ min: 17_000, max: 80_000 }), fc.constantFrom('one', 'many', 'cookie'))
  .map(([method, target, size, shape]) => {
    const fill =
      shape === 'one' ? `X-Fill: ${'a'.repeat(size)}\r\n`
      : shape === 'cookie' ? `Cookie: ${'c=1; '.repeat(Math.ceil(size / 5))}\r\n`
      : Array.from({ length: Math.ceil(size / 1000) }, (_, i) => `X-Fill-${i}: ${'b'.repeat(990)}\r\n`).join('');
    return { what: `headers ${shape} ${size}`, bytes: `${method} ${target} HTTP/1.1\r\nHost: gateway.test\r\n${fill}\r\n` };
  });

/** A URL longer than Node's limit: in the path, or in the query string. */
const oversizedUrl = fc
  .tuple(fc.constantFrom(...PARSER_METHODS), fc.constantFrom(...API_TARGETS), fc.integer({ min: 17_000, max: 70_000 }), fc.boolean())
  .map(([method, target, size, inQuery]) => ({
    what: `url ${inQuery ? 'query' : 'path'} ${size}`,
    bytes: `${method} ${target}${inQuery ? `?q=${'q'.repeat(size)}` : `/${'p'.repeat(size)}`} HTTP/1.1\r\nHost: gateway.test\r\n\r\n`,
  }));

const BAD_REQUEST_LINES = [
  'GARBAGE\r\n\r\n',
  'GET /v1/me HTTP/9.9\r\nHost: gateway.test\r\n\r\n',
  'GET /v1/me HTTP/1.1 extra\r\nHost: gateway.test\r\n\r\n',
  'G@T /v1/me HTTP/1.1\r\nHost: gateway.test\r\n\r\n',
  'GET /v1/me\u0001x HTTP/1.1\r\nHost: gateway.test\r\n\r\n',
  'GET  HTTP/1.1\r\nHost: gateway.test\r\n\r\n',
  ' GET /v1/me HTTP/1.1\r\nHost: gateway.test\r\n\r\n',
  'GET /v1/me HTTP/1.1\nHost: gateway.test\n\n',
  'GET /v1/me HTTP/1.1\r\nHost: gateway.test\r\nBad Header: x\r\n\r\n',
  'GET /v1/me HTTP/1.1\r\nHost: gateway.test\r\nNoColon\r\n\r\n',
  'GET /v1/me HTTP/1.1\r\nHost: gateway.test\r\n folded: x\r\n\r\n',
  'POST /v1/vouchers HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: abc\r\n\r\n',
  'POST /v1/vouchers HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n',
  'POST /v1/vouchers HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
  'POST /v1/vouchers HTTP/1.1\r\nHost: gateway.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n',
  `POST /v1/vouchers HTTP/1.1\r\nHost: gateway.test\r\nTransfer-Encoding: chunked\r\n\r\n1;${'e'.repeat(20_000)}\r\n`,
  'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n',
  '\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u0001\u00fc\u0003\u0003\r\n\r\n',
  'GET /v1/me HTTP/1.1\r\n\r\n',
  'GET /v1/me HTTP/1.1\r\nHost: gateway.test\r\nExpect: the-unexpected\r\n\r\n',
];
const badRequestLine = fc.constantFrom(...BAD_REQUEST_LINES).map((bytes) => ({ what: `bad request ${JSON.stringify(bytes.slice(0, 60))}`, bytes }));

const parserCases = fc.oneof(oversizedHeaders, oversizedUrl, badRequestLine);

describe("Node's parser-level refusals answer problem bodies on every listener", () => {
  let door: FrontDoor;
  let starting: FrontDoor;
  beforeAll(async () => {
    const log = pino({ level: 'silent' });
    door = await openFrontDoor({ host: '127.0.0.1', port: 0, baseUrl: world.gw.config.baseUrl, mode: 'dev', requestTimeoutMs: 30_000 }, log);
    door.open(world.gw.app.routing);
    starting = await openFrontDoor({ host: '127.0.0.1', port: 0, baseUrl: world.gw.config.baseUrl, mode: 'dev', requestTimeoutMs: 30_000 }, log);
  });
  afterAll(async () => {
    await door?.close();
    await starting?.close();
  });
  const listeners = (): Array<[string, string]> => [['Fastify', world.url], ['the front door', door.url], ['the front door while starting', starting.url]];

  it('answers oversized headers and an oversized URL with 431 headers_too_large', async () => {
    for (const [name, base] of listeners()) {
      for (const bytes of [`GET /v1/me HTTP/1.1\r\nHost: x\r\nX-Fill: ${'a'.repeat(40_000)}\r\n\r\n`, `GET /v1/me/${'a'.repeat(40_000)} HTTP/1.1\r\nHost: x\r\n\r\n`]) {
        const answer = await rawExchange(base, bytes);
        expect(notAProblemBody(answer), name).toBeUndefined();
        expect([answer.status, JSON.parse(answer.body).code, answer.headers.connection], name).toEqual([431, 'headers_too_large', 'close']);
      }
      const oauth = await rawExchange(base, `GET /oauth/authorize HTTP/1.1\r\nHost: x\r\nX-Fill: ${'a'.repeat(40_000)}\r\n\r\n`);
      // OAuth's error body, with the status that says what HTTP could not read (render-error.ts, HTTP_STATUSES_KEPT).
      expect([oauth.status, oauth.headers['content-type'], JSON.parse(oauth.body).error], name).toEqual([431, 'application/json', 'invalid_request']);
    }
  });

  it('reads a request line in absolute form (RFC 9112 §3.2.2) as its path: OAuth refusals keep their body and status, never a 500', async () => {
    const [, base] = listeners()[1]!;
    const origin = new URL(base).origin;
    const exchange = (line: string, body = '') =>
      rawExchange(base, `${line} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
    const token = await exchange(`POST ${origin}/oauth/token`, '{}');
    expect([token.status, token.headers['content-type'], JSON.parse(token.body).error]).toEqual([415, 'application/json; charset=utf-8', 'invalid_request']);
    const wrongMethod = await exchange(`GET ${origin}/oauth/token`);
    expect([wrongMethod.status, wrongMethod.headers.allow, JSON.parse(wrongMethod.body).error]).toEqual([405, 'POST', 'invalid_request']);
    const api = await exchange(`GET ${origin}/v1/me?x=1`);
    expect([api.status, JSON.parse(api.body).code]).toEqual([401, 'unauthorized']);
  });

  it('answers a bad request line with 400 invalid_input, and a missing Host too', async () => {
    for (const [name, base] of listeners()) {
      for (const bytes of ['GARBAGE\r\n\r\n', 'GET /v1/me HTTP/1.1\r\n\r\n']) {
        const answer = await rawExchange(base, bytes);
        expect(notAProblemBody(answer), `${name} ${bytes}`).toBeUndefined();
        if (name !== 'the front door while starting' || bytes === 'GARBAGE\r\n\r\n') {
          expect([answer.status, JSON.parse(answer.body).code], `${name} ${bytes}`).toEqual([400, 'invalid_input']);
        }
      }
    }
  });

  it('serves a request whose Expect it cannot meet as if it had none (RFC 9110 §10.1.1), instead of an empty 417', async () => {
    for (const [name, base] of listeners().slice(0, 2)) {
      const answer = await rawExchange(base, 'GET /v1/me HTTP/1.1\r\nHost: x\r\nExpect: the-unexpected\r\n\r\n');
      expect([answer.status, JSON.parse(answer.body).code], name).toEqual([401, 'unauthorized']);
    }
  });

  it('fuzzed oversized headers, oversized URLs and bad request lines: every answer on /v1 is a problem body', { timeout: 120_000 }, async () => {
    const cases = fc.sample(parserCases, { seed: SEED, numRuns: 60 });
    const problems: string[] = [];
    for (const [name, base] of listeners()) {
      for (let start = 0; start < cases.length; start += 8) {
        await Promise.all(
          cases.slice(start, start + 8).map(async (sent) => {
            const problem = notAProblemBody(await rawExchange(base, sent.bytes));
            if (problem) problems.push(`${name}, ${sent.what}: ${problem}`);
          }),
        );
      }
    }
    expect(problems.slice(0, 20)).toEqual([]);
  });
});

describe('the operator route without a configured operator credential', () => {
  let live: TestGateway;
  beforeAll(async () => {
    live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com' } });
  });
  afterAll(() => live?.close());

  const authorization = fc.oneof(
    fc.constant(undefined),
    fc.constantFrom('', 'Bearer', 'Bearer ', 'bearer acg_op_x', 'Basic b3BlcmF0b3I6eA==', `Bearer ${'a'.repeat(300)}`),
    fc.string({ minLength: 1, maxLength: 60, unit: 'grapheme-ascii' }).map((text) => `Bearer acg_op_${text.replace(/\s/g, '')}`),
    fc.uint8Array({ minLength: 32, maxLength: 32 }).map((bytes) => `Bearer acg_op_${Buffer.from(bytes).toString('base64url')}`),
  );
  const body = fc.oneof(fc.constant('{"agentId":"agt_x","amountUc":"1000000"}'), fc.constantFrom(...INVALID_JSON), fc.constant(''));

  it('answers every generated request 401 with its challenge, first, and says nothing about the configuration', async () => {
    const cases = fc.sample(fc.tuple(authorization, body, fc.boolean()), { seed: SEED, numRuns: 150 });
    const problems: string[] = [];
    for (const [auth, text, withKey] of cases) {
      const headers: Record<string, string> = { 'content-type': 'application/json', ...(withKey ? { 'idempotency-key': key() } : {}), ...(auth === undefined ? {} : { authorization: auth }) };
      const res = await fetch(`${live.url}/v1/operator/credit-grants`, { method: 'POST', headers, body: text });
      const answer = await res.text();
      const where = `${JSON.stringify(auth)} ${JSON.stringify(text.slice(0, 30))} → ${res.status} ${answer.slice(0, 160)}`;
      if (res.status !== 401 || res.headers.get('www-authenticate') !== 'Bearer realm="operator"') problems.push(`not 401 with the challenge: ${where}`);
      else if (!res.headers.get('content-type')?.startsWith('application/problem+json') || JSON.parse(answer).code !== 'unauthorized') problems.push(`not a problem body: ${where}`);
      else if (/configur|ACG_/i.test(answer)) problems.push(`speaks of the configuration: ${where}`);
    }
    expect(problems.slice(0, 10)).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------------
// The fuzz run: every operation of the served document, 100 generated bad requests each over the run.

const SEED = 20_261_123;
const CASES_PER_OPERATION = 100;
/**
 * The cases of each operation this pass sends. With both databases in the run, the two passes share them: the PGlite
 * pass sends the first half and the PostgreSQL pass the second, so the run sends 100 distinct cases an operation, each
 * half on its own database, rather than the same 100 twice (the fuzz run was the longest test of the file, on both).
 */
const passShare = <T>(cases: T[]): T[] => (!process.env.TEST_DATABASE_URL ? cases : onPostgres() ? cases.slice(cases.length / 2) : cases.slice(0, cases.length / 2));
const CASES_THIS_PASS = passShare(Array.from({ length: CASES_PER_OPERATION })).length;
const CONCURRENCY = 16;
const LEAKS = [
  /\n\s+at \S+ \(/, // a stack frame
  /\b(SELECT|INSERT INTO|DELETE FROM|UPDATE \w+ SET)\b/, // SQL text
  /invalid byte sequence|syntax error at or near|violates \w+ constraint/, // database messages
  /\/(src|node_modules|work)\/[\w./-]+\.(ts|js|mjs)/, // a source path
];

interface Operation {
  method: string;
  template: string;
  security: Array<Record<string, string[]>>;
  pathParams: string[];
  queryParams: string[];
  bodyMembers: string[] | undefined;
  bodyType: string | undefined;
  /** Statuses the document answers with an HTML page (the browser-facing OAuth steps). */
  htmlStatuses: string[];
}

interface Case {
  path: string;
  headers: Record<string, string>;
  body?: string;
  what: string;
}

function resolveSchema(document: any, schema: any): any {
  let current = schema;
  for (let depth = 0; current?.$ref && depth < 5; depth++) current = document.components.schemas[current.$ref.split('/').pop()];
  return current ?? {};
}

function memberNames(document: any, schema: any): string[] {
  const resolved = resolveSchema(document, schema);
  const names = new Set(Object.keys(resolved.properties ?? {}));
  for (const branch of [...(resolved.oneOf ?? []), ...(resolved.anyOf ?? [])]) for (const name of memberNames(document, branch)) names.add(name);
  return [...names];
}

function operationsOf(document: any): Operation[] {
  const operations: Operation[] = [];
  for (const [template, item] of Object.entries<any>(document.paths)) {
    for (const [method, operation] of Object.entries<any>(item)) {
      const parameters: Array<{ in: string; name: string }> = operation.parameters ?? [];
      const content = operation.requestBody?.content ?? {};
      const bodyType = Object.keys(content)[0];
      operations.push({
        method: method.toUpperCase(),
        template,
        security: operation.security ?? [],
        pathParams: parameters.filter((p) => p.in === 'path').map((p) => p.name),
        queryParams: parameters.filter((p) => p.in === 'query').map((p) => p.name),
        bodyMembers: bodyType === 'application/json' || bodyType === 'application/x-www-form-urlencoded' ? memberNames(document, content[bodyType].schema) : undefined,
        bodyType,
        htmlStatuses: Object.entries<any>(operation.responses).filter(([, r]) => r.content?.['text/html']).map(([status]) => status),
      });
    }
  }
  return operations;
}

const badText = fc.constantFrom('\u0000', 'a\u0000b', '\uD800', 'x\uDFFFy', '\uDC00\uD800', 'x'.repeat(70_000), '', ' ', '../../etc/passwd', "'; DROP TABLE agents; --");
const badAmount = fc.constantFrom(OVER_LIMIT_UC, '99999999999999999999999999', '1000000000000000000', '-1', '1.5', '1e3', '0x10', ' 1', '١٢٣');
const wrongType = fc.oneof(fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.array(fc.integer(), { maxLength: 3 }), fc.object({ maxDepth: 2 }));
const deepNesting = fc.integer({ min: 50, max: 500 }).map((depth) => JSON.parse('['.repeat(depth) + ']'.repeat(depth)));
/** Nesting deeper than the client's JSON.stringify could write, as raw text. */
const deepText = fc
  .tuple(fc.integer({ min: 1_000, max: 50_000 }), fc.constantFrom(['[', ']'], ['{"a":', '}']))
  .map(([depth, [open, close]]) => `${open!.repeat(depth)}1${close!.repeat(depth)}`);
const badValue = fc.oneof(badText, badAmount, wrongType, deepNesting, fc.string({ unit: 'binary', maxLength: 20 }), fc.jsonValue({ maxDepth: 3 }));
const PROTO_BODIES = ['{"__proto__":{"admin":true}}', '{"constructor":{"prototype":{"admin":true}}}', '{"a":{"__proto__":{"x":1}}}'];
const INVALID_JSON = ['{', '{"a":', 'nul', '[1,]', '{"a":1}}', '\u0000', '{"a":"\\ud800"', '"\\u0000"'];
const BAD_QUERY_VALUES = ['%00', '%ED%A0%80', '%zz', '%', 'x'.repeat(5_000), '-1', 'abc', '1e309', '%F0%9F', '__proto__'];
const BAD_PATH_VALUES = ['%00', '%zz', '%E0%A4%A', '%ED%A0%80', 'a'.repeat(600), '..', '%2F..%2F', '__proto__', 'constructor', "x'--"];

function caseArbitrary(operation: Operation, path: (template: string) => string): fc.Arbitrary<Case> {
  const json = { 'content-type': 'application/json' };
  const bodyCases: Array<fc.Arbitrary<Case>> = [];
  if (operation.bodyMembers) {
    const member = fc.oneof(fc.constantFrom(...(operation.bodyMembers.length ? operation.bodyMembers : ['name'])), fc.constantFrom('unknownMember', '__proto__', 'constructor', 'prototype'));
    bodyCases.push(
      fc.dictionary(member, badValue, { minKeys: 1, maxKeys: 3 }).map((body) => ({ path: path(operation.template), headers: json, body: JSON.stringify(body), what: 'bad members' })),
      fc.constantFrom(...PROTO_BODIES).map((body) => ({ path: path(operation.template), headers: json, body, what: 'prototype keys' })),
      fc.constantFrom(...INVALID_JSON).map((body) => ({ path: path(operation.template), headers: json, body, what: 'invalid JSON' })),
      deepText.map((body) => ({ path: path(operation.template), headers: json, body, what: 'deep nesting' })),
      badValue.map((body) => ({ path: path(operation.template), headers: json, body: JSON.stringify(body), what: 'not an object' })),
      fc.constantFrom('text/plain', 'application/xml', 'multipart/form-data; boundary=x', 'application/json; charset=latin1', 'image/png').map((type) => ({
        path: path(operation.template),
        headers: { 'content-type': type },
        body: '{"name":"x"}',
        what: `content type ${type}`,
      })),
    );
  }
  const queryCase = fc
    .tuple(fc.constantFrom(...(operation.queryParams.length ? operation.queryParams : ['limit', 'startingAfter'])), fc.constantFrom(...BAD_QUERY_VALUES))
    .map(([name, value]) => ({ path: `${path(operation.template)}?${name}=${value}`, headers: {}, what: `query ${name}=${value.slice(0, 20)}` }));
  const pathCase = operation.pathParams.length
    ? fc.tuple(fc.constantFrom(...operation.pathParams), fc.constantFrom(...BAD_PATH_VALUES)).map(([name, value]) => ({
        path: path(operation.template.replace(`{${name}}`, value)),
        headers: {},
        what: `path ${name}=${value.slice(0, 20)}`,
      }))
    : fc.constantFrom(...BAD_PATH_VALUES).map((value) => ({ path: `${path(operation.template).replace(/\/$/, '')}/${value}`, headers: {}, what: `path suffix ${value.slice(0, 20)}` }));
  const headerCase = fc
    .oneof(
      fc.constant({ 'x-fill': 'a'.repeat(40_000) }),
      fc.constantFrom('', ' ', 'a b', 'x'.repeat(300), '\u00ff\u00fe').map((key) => ({ 'idempotency-key': key })),
      fc.constantFrom('Bearer', 'Bearer ', 'Basic abc', 'Bearer acg_mk_', `Bearer ${'a'.repeat(8_000)}`, 'Bearer a.b.c').map((authorization) => ({ authorization })),
    )
    .map((headers) => ({ path: path(operation.template), headers, body: operation.bodyMembers ? '{}' : undefined, what: `headers ${Object.keys(headers).join(',')}` }));
  return fc.oneof(...bodyCases, queryCase, pathCase, headerCase);
}

function firstProblem(operation: Operation, sent: Case, status: number, type: string, text: string): string | undefined {
  const where = `${operation.method} ${sent.path.slice(0, 120)} (${sent.what}) → ${status}`;
  if (status >= 500) return `${where}: ${text.slice(0, 300)}`;
  for (const leak of LEAKS) if (leak.test(text)) return `${where} leaks ${leak}: ${text.slice(0, 300)}`;
  if (status < 400) return undefined;
  const isOAuth = new URL(sent.path, 'http://x').pathname.startsWith('/oauth/');
  if (type.startsWith('text/html') && operation.htmlStatuses.includes(String(status))) return undefined;
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    return `${where}: not JSON: ${text.slice(0, 200)}`;
  }
  if (isOAuth) {
    if (!type.startsWith('application/json') || typeof body.error !== 'string' || typeof body.error_description !== 'string') return `${where}: not an OAuth error body: ${text.slice(0, 200)}`;
    return undefined;
  }
  // MCP protocol errors are JSON-RPC errors (credential, Host and size refusals are still problems).
  const isJsonRpcError = body.jsonrpc === '2.0' && typeof body.error?.code === 'number' && typeof body.error?.message === 'string';
  if (new URL(sent.path, 'http://x').pathname === '/mcp' && isJsonRpcError && type.startsWith('application/json')) return undefined;
  if (!type.startsWith('application/problem+json') || body.status !== status || typeof body.code !== 'string' || typeof body.type !== 'string') {
    return `${where}: not a matching problem body (${type}): ${text.slice(0, 200)}`;
  }
  return undefined;
}

/** Whole numbers past what a database integer holds (INTEGER, BIGINT), and past what a double keeps exactly. */
const HUGE_INTEGERS = ['2147483648', '9223372036854775808', '99999999999999999999', '1e300'];

describe('every integer an operation takes, past what a database integer holds', () => {
  it('is refused with a 4xx problem body: path and query parameters, and top-level body members', { timeout: 120_000 }, async () => {
    const document = (await world.api('GET', '/openapi.json')).body;
    const problems: string[] = [];
    let sent = 0;
    const check = async (operation: Operation, method: string, path: string, what: string, body?: string) => {
      const res = await fetch(`${world.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${agent.ownerToken}`, 'idempotency-key': key(), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body,
        redirect: 'manual',
      });
      sent++;
      const problem = firstProblem(operation, { path, headers: {}, what }, res.status, res.headers.get('content-type') ?? '', await res.text());
      if (problem) problems.push(problem);
    };
    const operations = operationsOf(document);
    for (const operation of operations) {
      const item = document.paths[operation.template][operation.method.toLowerCase()];
      const fill = (template: string) => template.replace(/^\/v1\/owner\/agents\/\{id\}/, `/v1/owner/agents/${agent.id}`).replace(/\{\w+\}/g, 'no_such_id');
      for (const parameter of item.parameters ?? []) {
        if (resolveSchema(document, parameter.schema)?.type !== 'integer') continue;
        for (const value of HUGE_INTEGERS) {
          const path =
            parameter.in === 'path'
              ? fill(operation.template.replace(`{${parameter.name}}`, value))
              : parameter.in === 'query'
                ? `${fill(operation.template)}?${parameter.name}=${value}`
                : undefined;
          if (path) await check(operation, operation.method, path, `${parameter.in} ${parameter.name}=${value}`);
        }
      }
      const schema = resolveSchema(document, item.requestBody?.content?.['application/json']?.schema);
      for (const [name, member] of Object.entries<any>(schema?.properties ?? {})) {
        if (resolveSchema(document, member)?.type !== 'integer') continue;
        for (const value of HUGE_INTEGERS) await check(operation, operation.method, fill(operation.template), `body ${name}=${value}`, `{"${name}":${value}}`);
      }
    }
    expect(sent).toBeGreaterThan(20);
    expect(problems).toEqual([]);
  });
});

describe('fuzzing every operation of the OpenAPI document', () => {
  it(`answers ${CASES_THIS_PASS} generated bad requests per operation (of ${CASES_PER_OPERATION} shared by the run's passes) with 4xx bodies of the right kind, never a 5xx or a leak`, { timeout: 240_000 }, async () => {
    const document = (await world.api('GET', '/openapi.json')).body;
    const shopOwnerToken = await world.humanToken('fuzz-shop@example.com');
    const ownerOAuth = await world.accessToken({ sub: (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id, scope: 'svc:owner', email: 'fuzz-owner@example.com' });
    const held = await mint(world, agent.token, offer.id, key());
    const onMerchant = (template: string) => template.startsWith('/v1/merchants') || template.startsWith('/v1/access') || template.startsWith('/v1/redemptions');
    const credential = (operation: Operation): string | undefined => {
      const schemes = operation.security.flatMap((alternative) => Object.keys(alternative));
      if (schemes.includes('merchantKey')) return shop.key;
      if (schemes.includes('humanSession')) return onMerchant(operation.template) ? shopOwnerToken : agent.ownerToken;
      if (schemes.includes('agentToken')) return agent.token;
      if (schemes.includes('ownerOAuth')) return ownerOAuth;
      return undefined;
    };
    const path = (template: string) =>
      template
        .replace(/^\/v1\/owner\/agents\/\{id\}/, `/v1/owner/agents/${agent.id}`)
        .replace(/^\/v1\/merchants\/\{id\}/, `/v1/merchants/${shop.merchantId}`)
        .replace(/^\/v1\/redemptions\/\{id\}/, `/v1/redemptions/${held.body.redemption.id}`)
        .replace('{offerId}', offer.id)
        .replace('{kind}', 'human')
        .replace(/\{\w+\}/g, 'no_such_id');

    const operations = operationsOf(document);
    expect(operations.length).toBeGreaterThan(40);
    const problems: string[] = [];
    let sentCount = 0;
    for (const [index, operation] of operations.entries()) {
      const token = credential(operation);
      const cases = passShare(fc.sample(caseArbitrary(operation, path), { seed: SEED + index, numRuns: CASES_PER_OPERATION }));
      for (let start = 0; start < cases.length; start += CONCURRENCY) {
        await Promise.all(
          cases.slice(start, start + CONCURRENCY).map(async (sent) => {
            const headers: Record<string, string> = { ...(token ? { authorization: `Bearer ${token}` } : {}), 'idempotency-key': key(), ...sent.headers };
            const body = operation.method === 'GET' || operation.method === 'HEAD' || operation.method === 'DELETE' ? undefined : sent.body;
            const res = await fetch(`${world.url}${sent.path}`, { method: operation.method, headers, body, redirect: 'manual' });
            sentCount++;
            const problem = firstProblem(operation, sent, res.status, res.headers.get('content-type') ?? '', await res.text());
            if (problem) problems.push(problem);
          }),
        );
      }
    }
    expect(sentCount).toBeGreaterThanOrEqual(operations.length * CASES_THIS_PASS);
    expect(problems.slice(0, 20)).toEqual([]);
  });
});
