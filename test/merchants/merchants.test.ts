import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/platform/ids.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { registerMerchant, uniqueKey } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

const MERCHANT_FIELDS = [
  'acceptedPaymentMethods', 'categories', 'createdAt', 'domain', 'id', 'name', 'ownerId', 'updatedAt', 'verificationChallenge', 'verified', 'webhookUrl',
];

let world: World;
let alice: string;
let bob: string;
let aliceOwnerId: string;

beforeAll(async () => {
  world = await startWorld();
  alice = await world.humanToken('alice@example.com');
  bob = await world.humanToken('bob@example.com');
  aliceOwnerId = (await world.api('GET', '/v1/me', { token: alice })).body.owner.id;
});
afterAll(() => world.close());

describe('POST /v1/merchants', () => {
  it('registers a merchant and answers the TXT record to publish', async () => {
    const res = await world.api('POST', '/v1/merchants', {
      token: alice,
      key: uniqueKey(),
      body: { name: 'Bücher & Co', domain: 'Shop.Example-Store.COM.', categories: ['books', 'music', 'books'] },
    });
    expect(res.status).toBe(201);
    const { merchant, dnsRecord } = res.body;
    expect(Object.keys(merchant).sort()).toEqual(MERCHANT_FIELDS);
    expect(merchant).toMatchObject({
      ownerId: aliceOwnerId,
      name: 'Bücher & Co',
      domain: 'shop.example-store.com',
      verified: false,
      acceptedPaymentMethods: ['credits'],
      webhookUrl: '',
      categories: ['books', 'music'],
    });
    expect(merchant.id).toMatch(/^mer_[a-z2-7]{26}$/);
    expect(merchant.createdAt).toBe(merchant.updatedAt);
    expect(Math.abs(merchant.createdAt - Math.floor(Date.now() / 1000))).toBeLessThan(10);
    expect(dnsRecord).toEqual({ type: 'TXT', name: '_acceptor-verify.shop.example-store.com', value: merchant.verificationChallenge });
    // 256 random bits after a fixed prefix, different for every merchant.
    expect(merchant.verificationChallenge).toMatch(/^acg-domain-verification=[A-Za-z0-9_-]{43}$/);
    const other = await registerMerchant(world, alice, { domain: 'shop.example-store.com' });
    expect(other.merchant.verificationChallenge).not.toBe(merchant.verificationChallenge);
  });

  it('stores an internationalised domain in its IDNA ASCII form', async () => {
    const { merchant, dnsRecord } = await registerMerchant(world, alice, { domain: 'BÜCHER.de' });
    expect(merchant.domain).toBe('xn--bcher-kva.de');
    expect(dnsRecord.name).toBe('_acceptor-verify.xn--bcher-kva.de');
  });

  it('accepts an OAuth owner token as well as a human session', async () => {
    const owner = await world.accessToken({ sub: aliceOwnerId, scope: 'svc:owner', email: 'alice@example.com' });
    const res = await world.api('POST', '/v1/merchants', { token: owner, key: uniqueKey(), body: { name: 'Via OAuth', domain: 'oauth-shop.com', categories: ['tools'] } });
    expect(res.status).toBe(201);
    expect(res.body.merchant.ownerId).toBe(aliceOwnerId);
  });

  it('replays the same response for the same Idempotency-Key and creates one merchant', async () => {
    const key = uniqueKey();
    const body = { name: 'Once', domain: 'once-shop.com', categories: ['books'] };
    const first = await world.api('POST', '/v1/merchants', { token: bob, key, body });
    const second = await world.api('POST', '/v1/merchants', { token: bob, key, body });
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.body).toEqual(first.body);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    const list = await world.api('GET', '/v1/merchants', { token: bob });
    expect(list.body.merchants.filter((m: { domain: string }) => m.domain === 'once-shop.com')).toHaveLength(1);
    const changed = await world.api('POST', '/v1/merchants', { token: bob, key, body: { ...body, name: 'Twice' } });
    expect(changed.status).toBe(409);
    expect(changed.body.code).toBe('idempotency_key_reused');
  });

  it('requires an Idempotency-Key', async () => {
    const res = await world.api('POST', '/v1/merchants', { token: alice, body: { name: 'No key', domain: 'nokey.com', categories: ['books'] } });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('idempotency_required');
  });

  it.each([
    ['https://shop.com', 'scheme'],
    ['shop.com:443', 'port'],
    ['shop.com/path', 'path'],
    ['user@shop.com', 'credentials'],
    ['127.0.0.1', 'IP address'],
    ['[::1]', 'IP address'],
    ['0x7f.1', 'IP address'],
    ['localhost', 'two labels'],
    ['shop.localhost', 'special-use'],
    ['shop.test', 'special-use'],
    ['shop', 'two labels'],
    ['-shop.com', 'letters, digits'],
    ['shop .com', 'whitespace'],
    [`${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(50)}.com`, 'at most'],
  ])('refuses the domain %s with 400 invalid_input (%s)', async (domain, reason) => {
    const res = await world.api('POST', '/v1/merchants', { token: alice, key: uniqueKey(), body: { name: 'Bad', domain, categories: ['books'] } });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('invalid_input');
    expect(res.body.detail).toContain(reason);
    // Named as the schema names a member, whichever refused it (it was "domain must …", with no errors).
    expect([res.body.detail.startsWith('body/domain '), res.body.errors]).toEqual([true, [{ path: 'body/domain', message: expect.any(String) }]]);
  });

  it.each([
    [{ name: '', domain: 'a-shop.com', categories: ['books'] }],
    [{ name: 'x'.repeat(101), domain: 'a-shop.com', categories: ['books'] }],
    [{ name: 'Shop', domain: 'a-shop.com', categories: [] }],
    [{ name: 'Shop', domain: 'a-shop.com', categories: Array.from({ length: 21 }, (_, i) => `c${i}`) }],
    [{ name: 'Shop', domain: 'a-shop.com', categories: ['Not A Slug'] }],
    [{ name: 'Shop', domain: 'a-shop.com' }],
    [{ name: 'Shop', domain: 'a-shop.com', categories: ['books'], verified: true }],
  ])('refuses invalid settings %j with 400 invalid_input', async (body) => {
    const res = await world.api('POST', '/v1/merchants', { token: alice, key: uniqueKey(), body });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('invalid_input');
  });

  it('refuses agents and merchant keys, and callers without a credential', async () => {
    const agent = await world.createAgent('carol@example.com', 'carol-agent');
    const key = await seedMerchantKey(world, { ownerEmail: 'carol@example.com' });
    const body = { name: 'Shop', domain: 'a-shop.com', categories: ['books'] };
    expect((await world.api('POST', '/v1/merchants', { key: uniqueKey(), body })).status).toBe(401);
    const byAgent = await world.api('POST', '/v1/merchants', { token: agent.token, key: uniqueKey(), body });
    expect([byAgent.status, byAgent.body.code]).toEqual([403, 'owner_required']);
    const byKey = await world.api('POST', '/v1/merchants', { token: key.key, key: uniqueKey(), body });
    expect([byKey.status, byKey.body.code]).toEqual([403, 'forbidden']);
  });
});

describe('GET /v1/merchants', () => {
  it("lists only the caller's merchants, oldest first, in pages", async () => {
    const dave = await world.humanToken('dave@example.com');
    const created: Array<Record<string, any>> = [];
    for (const domain of ['one-shop.com', 'two-shop.com', 'three-shop.com']) created.push((await registerMerchant(world, dave, { domain })).merchant);
    const all = await world.api('GET', '/v1/merchants', { token: dave });
    expect(all.body).toEqual({ merchants: created, hasMore: false });
    const first = await world.api('GET', '/v1/merchants?limit=2', { token: dave });
    expect(first.body.merchants.map((m: { id: string }) => m.id)).toEqual([created[0]!.id, created[1]!.id]);
    expect(first.body.hasMore).toBe(true);
    const rest = await world.api('GET', `/v1/merchants?limit=2&startingAfter=${created[1]!.id}`, { token: dave });
    expect(rest.body).toEqual({ merchants: [created[2]], hasMore: false });
    const eve = await world.humanToken('eve@example.com');
    expect((await world.api('GET', '/v1/merchants', { token: eve })).body).toEqual({ merchants: [], hasMore: false });
  });

  it("reads one merchant for its owner and answers 404 to anyone else", async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'read-shop.com' });
    const own = await world.api('GET', `/v1/merchants/${merchant.id}`, { token: alice });
    expect(own.status).toBe(200);
    expect(own.body).toEqual({ merchant });
    const other = await world.api('GET', `/v1/merchants/${merchant.id}`, { token: bob });
    expect([other.status, other.body.code]).toEqual([404, 'not_found']);
    expect((await world.api('GET', `/v1/merchants/${newId('mer')}`, { token: alice })).status).toBe(404);
  });
});

describe('PATCH /v1/merchants/{id}', () => {
  async function patch(token: string, id: string, body: unknown, key = uniqueKey()) {
    return world.api('PATCH', `/v1/merchants/${id}`, { token, key, body });
  }

  it('updates the name and categories for the human owner', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'patch-shop.com', categories: ['books'] });
    world.gw.clock.advance(2_000);
    try {
      const res = await patch(alice, merchant.id, { name: 'Renamed', categories: ['books', 'maps'] });
      expect(res.status).toBe(200);
      expect(res.body.merchant).toMatchObject({ id: merchant.id, name: 'Renamed', categories: ['books', 'maps'], domain: 'patch-shop.com' });
      expect(res.body.merchant.updatedAt).toBeGreaterThan(merchant.updatedAt);
      expect(res.body.merchant.createdAt).toBe(merchant.createdAt);
    } finally {
      world.gw.clock.advance(-2_000);
    }
  });

  it('replays an update under the same key and refuses the key for another update', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'patch-replay.com' });
    const key = uniqueKey();
    const first = await patch(alice, merchant.id, { name: 'First' }, key);
    await patch(alice, merchant.id, { name: 'Other' });
    const again = await patch(alice, merchant.id, { name: 'First' }, key);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect((await patch(alice, merchant.id, { name: 'Third' }, key)).body.code).toBe('idempotency_key_reused');
    const noKey = await world.api('PATCH', `/v1/merchants/${merchant.id}`, { token: alice, body: { name: 'No key' } });
    expect([noKey.status, noKey.body.code]).toEqual([400, 'idempotency_required']);
  });

  it('refuses an OAuth owner token: human owner only', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'human-only.com' });
    const owner = await world.accessToken({ sub: aliceOwnerId, scope: 'svc:owner', email: 'alice@example.com' });
    const res = await patch(owner, merchant.id, { name: 'Nope' });
    expect([res.status, res.body.code]).toEqual([403, 'human_required']);
  });

  it('refuses any domain member: the domain is immutable', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'fixed-shop.com' });
    for (const domain of ['other-shop.com', 'fixed-shop.com']) {
      const res = await patch(alice, merchant.id, { domain });
      expect([res.status, res.body.code]).toEqual([400, 'invalid_input']);
      // Named as the schema names a member (it was "the domain is immutable", with no errors).
      expect([res.body.detail, res.body.errors]).toEqual([
        'body/domain is immutable; register a new merchant for another domain',
        [{ path: 'body/domain', message: 'is immutable; register a new merchant for another domain' }],
      ]);
    }
    expect((await world.api('GET', `/v1/merchants/${merchant.id}`, { token: alice })).body.merchant.domain).toBe('fixed-shop.com');
  });

  it('refuses empty and invalid updates', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'invalid-patch.com' });
    for (const body of [{}, { name: '' }, { categories: [] }, { categories: ['UPPER'] }, { verified: true }]) {
      const res = await patch(alice, merchant.id, body);
      expect([res.status, res.body.code], JSON.stringify(body)).toEqual([400, 'invalid_input']);
    }
  });

  it("answers 404 for another owner's merchant", async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'not-bobs.com' });
    const res = await patch(bob, merchant.id, { name: 'Mine now' });
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
  });

  it('refuses to remove a category an active offer uses (409 category_in_use), and allows it once the offer is inactive', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'offers-shop.com', categories: ['books', 'maps'] });
    const offerId = newId('off');
    const nowS = world.gw.clock.nowS();
    await world.gw.gateway.db.query(
      `INSERT INTO offers (id, merchant_id, name, category, price_uc, active, hold_lifetime_s, created_at_s, updated_at_s)
       VALUES ($1, $2, 'Atlas', 'maps', 1000000, true, 900, $3, $3)`,
      [offerId, merchant.id, nowS],
    );
    const refused = await patch(alice, merchant.id, { categories: ['books'] });
    expect([refused.status, refused.body.code]).toEqual([409, 'category_in_use']);
    expect(refused.body.categories).toEqual(['maps']);
    // Keeping the category, or renaming, is fine.
    expect((await patch(alice, merchant.id, { categories: ['maps', 'globes'] })).status).toBe(200);
    await world.gw.gateway.db.query('UPDATE offers SET active = false WHERE id = $1', [offerId]);
    const allowed = await patch(alice, merchant.id, { categories: ['books'] });
    expect(allowed.status).toBe(200);
    expect(allowed.body.merchant.categories).toEqual(['books']);
  });
});

describe('an offer\'s own rules', () => {
  it('name the member they refuse as the schema does (body/…, in detail and errors): a price of 0, a category the merchant lacks, activating an offer whose category was removed', async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: 'offer-rules-shop.com', categories: ['books', 'maps'] });
    const offers = `/v1/merchants/${merchant.id}/offers`;
    const named = (res: { status: number; body: Record<string, unknown> }) => [res.status, res.body.code, res.body.detail, res.body.errors];
    const refused = (path: string, message: string) => [400, 'invalid_input', `${path} ${message}`, [{ path, message }]];
    const create = (body: Record<string, unknown>) => world.api('POST', offers, { token: alice, key: uniqueKey(), body: { name: 'Atlas', category: 'maps', priceUc: '1000000', ...body } });
    expect(named(await create({ priceUc: '0' }))).toEqual(refused('body/priceUc', 'must be positive'));
    expect(named(await create({ category: 'music' }))).toEqual(refused('body/category', "must be one of the merchant's categories: books, maps"));
    const created = await create({ active: false });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const update = (body: Record<string, unknown>) => world.api('PATCH', `${offers}/${created.body.id}`, { token: alice, key: uniqueKey(), body });
    expect(named(await update({ priceUc: '0' }))).toEqual(refused('body/priceUc', 'must be positive'));
    expect((await world.api('PATCH', `/v1/merchants/${merchant.id}`, { token: alice, key: uniqueKey(), body: { categories: ['books'] } })).status).toBe(200);
    expect(named(await update({ active: true }))).toEqual(refused('body/active', 'cannot be true: the offer\'s category "maps" is no longer one of the merchant\'s categories'));
  });
});
