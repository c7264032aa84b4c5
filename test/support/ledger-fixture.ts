// A world with a verified merchant, its all-scopes API key and an offer, plus helpers to fund agents.
import { seedMerchantKey } from './merchant-key.ts';
import type { World } from './world.ts';

export const ALL_SCOPES = ['access:check', 'offers:read', 'offers:write', 'redemptions:capture', 'redemptions:release', 'redemptions:refund', 'earnings:read', 'webhooks:read', 'webhooks:write', 'events:read', 'evidence:read'];

export interface Shop {
  merchantId: string;
  key: string;
  ownerId: string;
  offer(input?: { priceUc?: string; category?: string; holdLifetimeS?: number; active?: boolean }): Promise<{ id: string; priceUc: string }>;
}

let counter = 0;

export async function openShop(world: World, ownerEmail = `shop${++counter}@example.com`): Promise<Shop> {
  const merchant = await seedMerchantKey(world, { ownerEmail, scopes: ALL_SCOPES });
  await world.gw.gateway.db.query(`UPDATE merchants SET categories = '["books","music"]' WHERE id = $1`, [merchant.merchantId]);
  return {
    ...merchant,
    async offer(input = {}) {
      const res = await world.api('POST', `/v1/merchants/${merchant.merchantId}/offers`, {
        token: merchant.key,
        key: `offer-${++counter}`,
        body: { name: 'Book', category: input.category ?? 'books', priceUc: input.priceUc ?? '1000000', holdLifetimeS: input.holdLifetimeS ?? 900, active: input.active ?? true },
      });
      if (res.status !== 201) throw new Error(`offer creation failed: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body;
    },
  };
}

export async function grant(world: World, agentId: string, amountUc: bigint, options: { priority?: number; expiresAtS?: number } = {}) {
  const { ledger } = world.gw.services;
  return world.gw.gateway.db.transaction((tx) => ledger.grant(tx, { agentId, amountUc, ...options }));
}

export async function mint(world: World, token: string, offerId: string, key = `mint-${++counter}`, extra: Record<string, unknown> = {}) {
  return world.api('POST', '/v1/vouchers', { token, key, body: { offerId, ...extra } });
}
