// No bad input reaches a 500. Named cases for each failure once seen, then a fuzz run over every
// operation of the served OpenAPI document: generated bad input, on the run's database, asserting that
// every answer is a 4xx in the body its clients expect and leaks nothing internal.
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
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

describe('NUL and lone surrogates are 400 invalid_input', () => {
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

  it('refuses a query number no column holds (limit=1e309 coerces to Infinity)', async () => {
    expectInvalidInput(await world.api('GET', '/v1/owner/agents?limit=1e309', { token: agent.ownerToken }), 'limit');
  });

  it('refuses before the credential is looked up', async () => {
    const res = await world.api('GET', '/v1/owner/agents?startingAfter=%00', { token: 'acg_mk_not-a-real-key' });
    expectInvalidInput(res, 'unauthenticated query');
  });

  it('answers an OAuth route with an OAuth error body', async () => {
    const res = await world.api('GET', '/oauth/authorize?client_id=%00');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: 'invalid_request' });
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
// The fuzz run: every operation of the served document, ~100 generated bad requests each.

const SEED = 20_261_123;
const CASES_PER_OPERATION = 100;
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
    : fc.constantFrom(...BAD_PATH_VALUES).map((value) => ({ path: `${path(operation.template)}/${value}`, headers: {}, what: `path suffix ${value.slice(0, 20)}` }));
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

describe('fuzzing every operation of the OpenAPI document', () => {
  it(`answers ${CASES_PER_OPERATION} generated bad requests per operation with 4xx bodies of the right kind, never a 5xx or a leak`, { timeout: 240_000 }, async () => {
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
      const cases = fc.sample(caseArbitrary(operation, path), { seed: SEED + index, numRuns: CASES_PER_OPERATION });
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
    expect(sentCount).toBeGreaterThanOrEqual(operations.length * CASES_PER_OPERATION);
    expect(problems.slice(0, 20)).toEqual([]);
  });
});
