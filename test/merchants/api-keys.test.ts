import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY_SCOPES } from '../../src/identity/api-keys.ts';
import { API_KEY_REPLAY_NOTICE } from '../../src/merchants/service.ts';
import { registerMerchant, uniqueKey } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

const METADATA_FIELDS = ['createdAt', 'keyId', 'merchantId', 'name', 'ownerId', 'revokedAt', 'scopes'];

let world: World;
let alice: string;
let bob: string;
let merchantId: string;

beforeAll(async () => {
  world = await startWorld();
  alice = await world.humanToken('alice@example.com');
  bob = await world.humanToken('bob@example.com');
  merchantId = (await registerMerchant(world, alice, { domain: 'keys-shop.com' })).merchant.id;
});
afterAll(() => world.close());

function createKey(body: unknown, options: { token?: string; key?: string; merchant?: string } = {}) {
  return world.api('POST', `/v1/merchants/${options.merchant ?? merchantId}/api-keys`, { token: options.token ?? alice, key: options.key ?? uniqueKey(), body });
}

describe('POST /v1/merchants/{id}/api-keys', () => {
  it('creates a scoped key, shows it once, and the key authenticates as the merchant', async () => {
    const key = uniqueKey();
    const res = await createKey({ name: 'checkout server', scopes: ['access:check', 'webhooks:read', 'access:check'] }, { key });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body).sort()).toEqual(['apiKey', 'notice', 'secretKey']);
    expect(Object.keys(res.body.apiKey).sort()).toEqual(METADATA_FIELDS);
    expect(res.body.apiKey).toMatchObject({ merchantId, name: 'checkout server', scopes: ['access:check', 'webhooks:read'], revokedAt: null });
    expect(res.body.secretKey).toMatch(/^acg_mk_[a-z2-7]{26}_[A-Za-z0-9_-]{43}$/);
    expect(res.body.notice).toContain('shown only in this response');
    const me = await world.api('GET', '/v1/me', { token: res.body.secretKey });
    expect(me.body).toMatchObject({ kind: 'merchant', merchant: { merchantId, keyId: res.body.apiKey.keyId, scopes: ['access:check', 'webhooks:read'] } });

    const replay = await createKey({ name: 'checkout server', scopes: ['access:check', 'webhooks:read', 'access:check'] }, { key });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual({ apiKey: res.body.apiKey, notice: API_KEY_REPLAY_NOTICE });
    expect(replay.body.notice).toMatch(/^The key was shown once, in the first answer to this request, and cannot be recovered/);
    expect(JSON.stringify(replay.body)).not.toContain(res.body.secretKey.slice(-43));
  });

  it('accepts every scope of the catalogue, and an OAuth owner token', async () => {
    const ownerId = (await world.api('GET', '/v1/me', { token: alice })).body.owner.id;
    const owner = await world.accessToken({ sub: ownerId, scope: 'svc:owner', email: 'alice@example.com' });
    const res = await createKey({ name: 'all', scopes: Object.keys(API_KEY_SCOPES) }, { token: owner });
    expect(res.status).toBe(201);
    expect(res.body.apiKey.scopes).toEqual(Object.keys(API_KEY_SCOPES));
    expect(res.body.apiKey.ownerId).toBe(ownerId);
  });

  it.each([
    [{ name: 'x', scopes: [] }],
    [{ name: 'x', scopes: ['admin'] }],
    [{ name: '', scopes: ['offers:read'] }],
    [{ name: 'x'.repeat(101), scopes: ['offers:read'] }],
    [{ scopes: ['offers:read'] }],
    [{ name: 'x', scopes: ['offers:read'], secret: 'mine' }],
  ])('refuses %j with 400 invalid_input', async (body) => {
    const res = await createKey(body);
    expect([res.status, res.body.code]).toEqual([400, 'invalid_input']);
  });

  it('requires an Idempotency-Key', async () => {
    const res = await world.api('POST', `/v1/merchants/${merchantId}/api-keys`, { token: alice, body: { name: 'x', scopes: ['offers:read'] } });
    expect([res.status, res.body.code]).toEqual([400, 'idempotency_required']);
  });

  it("answers 404 on another owner's merchant", async () => {
    const res = await createKey({ name: 'theft', scopes: ['offers:read'] }, { token: bob });
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
  });

  it('refuses a merchant key: keys are managed by the owner', async () => {
    const made = await createKey({ name: 'mk', scopes: Object.keys(API_KEY_SCOPES) });
    const res = await createKey({ name: 'child', scopes: ['offers:read'] }, { token: made.body.secretKey });
    expect([res.status, res.body.code]).toEqual([403, 'forbidden']);
  });
});

describe('GET /v1/merchants/{id}/api-keys', () => {
  it('lists metadata only, newest first, never a secret', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'list-keys.com' });
    const made = [];
    for (const name of ['first', 'second', 'third']) made.push((await createKey({ name, scopes: ['offers:read'] }, { merchant: merchant.id })).body);
    const res = await world.api('GET', `/v1/merchants/${merchant.id}/api-keys`, { token: alice });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ apiKeys: made.map((m) => m.apiKey).reverse(), hasMore: false });
    const text = JSON.stringify(res.body);
    for (const m of made) expect(text).not.toContain(m.secretKey.slice(-43));
    const page = await world.api('GET', `/v1/merchants/${merchant.id}/api-keys?limit=2`, { token: alice });
    expect(page.body.apiKeys.map((k: { name: string }) => k.name)).toEqual(['third', 'second']);
    expect(page.body.hasMore).toBe(true);
    const next = await world.api('GET', `/v1/merchants/${merchant.id}/api-keys?startingAfter=${page.body.apiKeys[1].keyId}`, { token: alice });
    expect(next.body.apiKeys.map((k: { name: string }) => k.name)).toEqual(['first']);
  });

  it("answers 404 on another owner's merchant", async () => {
    const res = await world.api('GET', `/v1/merchants/${merchantId}/api-keys`, { token: bob });
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
  });
});

describe('POST /v1/merchants/{id}/api-keys/{keyId}/revoke', () => {
  it('revokes a key: the next request with it is 401, and revoking again keeps the first time', async () => {
    const made = (await createKey({ name: 'short-lived', scopes: ['webhooks:read'] })).body;
    expect((await world.api('GET', `/v1/merchants/${merchantId}/webhook`, { token: made.secretKey })).status).toBe(200);
    world.gw.clock.advance(3_000);
    try {
      const res = await world.api('POST', `/v1/merchants/${merchantId}/api-keys/${made.apiKey.keyId}/revoke`, { token: alice });
      expect(res.status).toBe(200);
      expect(res.body.apiKey).toMatchObject({ keyId: made.apiKey.keyId, revokedAt: expect.any(Number) });
      const next = await world.api('GET', `/v1/merchants/${merchantId}/webhook`, { token: made.secretKey });
      expect([next.status, next.body.code]).toEqual([401, 'unauthorized']);
      world.gw.clock.advance(5_000);
      const again = await world.api('POST', `/v1/merchants/${merchantId}/api-keys/${made.apiKey.keyId}/revoke`, { token: alice });
      expect(again.body.apiKey.revokedAt).toBe(res.body.apiKey.revokedAt);
      const listed = (await world.api('GET', `/v1/merchants/${merchantId}/api-keys`, { token: alice })).body.apiKeys;
      expect(listed.find((k: { keyId: string }) => k.keyId === made.apiKey.keyId).revokedAt).toBe(res.body.apiKey.revokedAt);
    } finally {
      world.gw.clock.advance(-8_000);
    }
  });

  it("answers 404 for an unknown key, another merchant's key, or another owner", async () => {
    const made = (await createKey({ name: 'k', scopes: ['offers:read'] })).body;
    const other = (await registerMerchant(world, alice, { domain: 'other-keys.com' })).merchant;
    for (const [token, path] of [
      [alice, `/v1/merchants/${merchantId}/api-keys/mk_aaaaaaaaaaaaaaaaaaaaaaaaaa/revoke`],
      [alice, `/v1/merchants/${other.id}/api-keys/${made.apiKey.keyId}/revoke`],
      [bob, `/v1/merchants/${merchantId}/api-keys/${made.apiKey.keyId}/revoke`],
    ] as const) {
      const res = await world.api('POST', path, { token });
      expect([res.status, res.body.code], path).toEqual([404, 'not_found']);
    }
    expect((await world.api('GET', '/v1/me', { token: made.secretKey })).status).toBe(200);
  });
});

describe('live mode without ACG_API_KEY_PEPPER', () => {
  it('answers 503 runtime_configuration_required and issues nothing', async () => {
    const live = await startWorld({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example', ACG_API_KEY_PEPPER: '' } });
    try {
      const token = await live.humanToken('live@example.com');
      const { merchant } = await registerMerchant(live, token, { domain: 'live-shop.com' });
      const res = await live.api('POST', `/v1/merchants/${merchant.id}/api-keys`, { token, key: uniqueKey(), body: { name: 'x', scopes: ['offers:read'] } });
      expect([res.status, res.body.code]).toEqual([503, 'runtime_configuration_required']);
      expect((await live.api('GET', `/v1/merchants/${merchant.id}/api-keys`, { token })).body.apiKeys).toEqual([]);
    } finally {
      await live.close();
    }
  });
});
