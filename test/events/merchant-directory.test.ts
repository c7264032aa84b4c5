// Events reach a merchant only through the MerchantDirectory they declare (implemented by the merchants
// service): every webhook route of a merchant answers another owner, and a key of another merchant, the 404
// of a merchant that does not exist, and changes nothing; configuring holds the merchant's row FOR UPDATE,
// and offer creation's read of it holds it FOR SHARE.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import type { Principal } from '../../src/platform/principal.ts';
import { merchantActor } from '../../src/merchants/service.ts';
import { onPostgres } from '../support/database.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { configureWebhook, markVerified, registerMerchant, uniqueKey } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let alice: string;
let bob: string;
let merchantId: string;
let eventId: string;
let deliveryId: string;
/** A key of bob's merchant holding every scope the webhook routes ask for. */
let otherKey: string;

beforeAll(async () => {
  world = await startWorld();
  alice = await world.humanToken('alice@example.com');
  bob = await world.humanToken('bob@example.com');
  merchantId = (await registerMerchant(world, alice)).merchant.id;
  await markVerified(world, merchantId);
  expect((await configureWebhook(world, alice, merchantId)).status).toBe(200);
  eventId = (
    await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId, type: 'redemption.held', data: { redemption: { id: 'red_directory' } }, nowMs: world.gw.clock.nowMs() }),
    )
  ).id;
  deliveryId = (await world.gw.gateway.db.query<{ id: string }>('SELECT id FROM webhook_deliveries WHERE event_id = $1', [eventId])).rows[0]!.id;
  otherKey = (await seedMerchantKey(world, { ownerEmail: 'bob@example.com', scopes: ['webhooks:read', 'webhooks:write', 'events:read'] })).key;
});
afterAll(() => world.close());

interface WebhookRoute {
  method: string;
  path: (merchant: string) => string;
  body?: unknown;
  /** Whether a merchant API key may call it at all (else the key is refused before any merchant is looked up). */
  keys: boolean;
}

const ROUTES: Record<string, WebhookRoute> = {
  configureMerchantWebhook: { method: 'PUT', path: (m) => `/v1/merchants/${m}/webhook`, body: { url: 'https://hooks.shop-test.com/other' }, keys: false },
  getMerchantWebhook: { method: 'GET', path: (m) => `/v1/merchants/${m}/webhook`, keys: true },
  listWebhookDeliveries: { method: 'GET', path: (m) => `/v1/merchants/${m}/webhook/deliveries`, keys: true },
  resendWebhookDelivery: { method: 'POST', path: (m) => `/v1/merchants/${m}/webhook/deliveries/${deliveryId}/resend`, keys: true },
  listDeliveryAttempts: { method: 'GET', path: (m) => `/v1/merchants/${m}/webhook/deliveries/${deliveryId}/attempts`, keys: true },
  listEvents: { method: 'GET', path: (m) => `/v1/merchants/${m}/events`, keys: true },
  resendEvent: { method: 'POST', path: (m) => `/v1/merchants/${m}/events/${eventId}/resend`, keys: true },
  setWebhookEnabled: { method: 'PATCH', path: (m) => `/v1/merchants/${m}/webhook`, body: { enabled: false }, keys: false },
  rotateWebhookSecret: { method: 'POST', path: (m) => `/v1/merchants/${m}/webhook/rotate-secret`, body: { overlapSeconds: 0 }, keys: false },
};

const call = (route: WebhookRoute, token: string, merchant = merchantId) =>
  world.api(route.method, route.path(merchant), { token, body: route.body, key: route.method === 'GET' ? undefined : uniqueKey('directory') });

/** What the merchant's webhook looks like from the database: any change a refused call made would show. */
async function webhookState(): Promise<unknown> {
  const endpoint = await world.gw.gateway.db.query('SELECT url, enabled, secret_sealed, updated_at_s FROM webhook_endpoints WHERE merchant_id = $1', [merchantId]);
  const deliveries = await world.gw.gateway.db.query('SELECT id, state, next_attempt_at_ms FROM webhook_deliveries WHERE merchant_id = $1 ORDER BY id', [merchantId]);
  return { endpoint: endpoint.rows, deliveries: deliveries.rows };
}

describe("every webhook route of a merchant refuses who may not act for it with the 404 of a merchant that does not exist", () => {
  for (const [name, route] of Object.entries(ROUTES)) {
    it(`${name}: another owner and a key of another merchant get 404 not_found, and nothing changes`, async () => {
      const before = await webhookState();
      const unknown = await call(route, bob, 'mer_doesnotexist');
      expect([unknown.status, unknown.body.code]).toEqual([404, 'not_found']);
      const stranger = await call(route, bob);
      expect([stranger.status, stranger.body.code]).toEqual([404, 'not_found']);
      expect(stranger.body.detail).toBe(`no merchant ${merchantId} among yours`);
      if (route.keys) {
        const otherMerchant = await call(route, otherKey);
        expect([otherMerchant.status, otherMerchant.body.code]).toEqual([404, 'not_found']);
      }
      expect(await webhookState()).toEqual(before);
    });
  }

  it('the owner reaches each read', async () => {
    for (const name of ['getMerchantWebhook', 'listWebhookDeliveries', 'listDeliveryAttempts', 'listEvents'] as const) {
      const res = await call(ROUTES[name]!, alice);
      expect(res.status, name).toBe(200);
    }
  });

  it('listEvents checks its type filter before the merchant: an unknown type is 400 whoever asks', async () => {
    const res = await world.api('GET', `/v1/merchants/${merchantId}/events?type=nope`, { token: bob });
    expect([res.status, res.body.code]).toEqual([400, 'invalid_input']);
    expect(res.body.detail).toContain('unknown event type "nope"');
  });
});

describe('the merchant directory as the merchants service implements it', () => {
  const principalOf = async (token: string): Promise<Principal> => {
    const me = (await world.api('GET', '/v1/me', { token })).body;
    return { kind: 'human', id: me.owner.id, ownerId: me.owner.id, scopes: [], credential: 'human_session' };
  };

  it('reach and lockReached answer the facts the webhook rules need, and 404 to another owner or a key of another merchant', async () => {
    const { db } = world.gw.gateway;
    const merchants = world.gw.services.merchants;
    const owner = await principalOf(alice);
    const expected = { id: merchantId, ownerId: owner.ownerId, domain: 'shop-test.com', verified: true };
    expect(await merchants.reach(db, owner, merchantId)).toMatchObject(expected);
    expect(await db.transaction((tx) => merchants.lockReached(tx, owner, merchantId))).toMatchObject(expected);
    const stranger = await principalOf(bob);
    const otherMerchant: Principal = { kind: 'merchant', id: 'key_other', ownerId: owner.ownerId, merchantId: 'mer_other', scopes: ['webhooks:read'], credential: 'api_key' };
    for (const principal of [stranger, otherMerchant]) {
      await expect(merchants.reach(db, principal, merchantId)).rejects.toMatchObject({ code: 'not_found' });
      await expect(db.transaction((tx) => merchants.lockReached(tx, principal, merchantId))).rejects.toMatchObject({ code: 'not_found' });
    }
  });

  it.skipIf(!onPostgres())('lockReached holds the row FOR UPDATE and shareFacts FOR SHARE until the transaction ends', async () => {
    const merchants = world.gw.services.merchants;
    const alicePrincipal = await principalOf(alice);
    const other = new pg.Client({ connectionString: world.gw.database.url });
    await other.connect();
    /** Whether another connection can take the row's lock of `mode` at once (NOWAIT fails while it conflicts). */
    const free = async (mode: 'UPDATE' | 'SHARE') => {
      await other.query('BEGIN');
      try {
        await other.query(`SELECT id FROM merchants WHERE id = $1 FOR ${mode} NOWAIT`, [merchantId]);
        return true;
      } catch (error) {
        if ((error as { code?: string }).code === '55P03') return false;
        throw error;
      } finally {
        await other.query('ROLLBACK');
      }
    };
    try {
      await world.gw.gateway.db.transaction(async (tx) => {
        await merchants.lockReached(tx, alicePrincipal, merchantId);
        expect(await free('SHARE')).toBe(false);
      });
      await world.gw.gateway.db.transaction(async (tx) => {
        await merchants.shareFacts(tx, merchantActor(alicePrincipal), merchantId);
        expect([await free('SHARE'), await free('UPDATE')]).toEqual([true, false]);
      });
      await world.gw.gateway.db.transaction(async (tx) => {
        await merchants.facts(tx, merchantActor(alicePrincipal), merchantId);
        expect(await free('UPDATE')).toBe(true);
      });
      expect(await free('UPDATE')).toBe(true);
    } finally {
      await other.end();
    }
  });
});
