// Inserts a merchant and an API key directly, for tests that need an M credential before (or
// without) going through the merchant routes.
import { newApiKey } from '../../src/identity/api-keys.ts';
import { newId } from '../../src/platform/ids.ts';
import type { World } from './world.ts';

export async function seedMerchantKey(
  world: World,
  options: { ownerEmail?: string; scopes?: string[]; revoked?: boolean; domain?: string } = {},
): Promise<{ merchantId: string; keyId: string; key: string; ownerId: string }> {
  const db = world.gw.gateway.db;
  const ownerToken = await world.humanToken(options.ownerEmail ?? 'merchant-owner@example.com');
  const me = await world.api('GET', '/v1/me', { token: ownerToken });
  const ownerId = me.body.owner.id as string;
  const merchantId = newId('mer');
  const nowS = Math.floor(Date.now() / 1000);
  await db.query(
    `INSERT INTO merchants (id, owner_id, name, domain, categories, verification_challenge, verified, accepted_payment_methods, created_at_s, updated_at_s)
     VALUES ($1, $2, 'Seeded', $3, '["books"]', 'challenge', true, '["credits"]', $4, $4)`,
    // A domain as registration admits one: letters, digits and hyphens (an id's underscore is not).
    [merchantId, ownerId, options.domain ?? `${merchantId.replace('_', '-')}.example.com`, nowS],
  );
  const key = newApiKey(world.gw.config.apiKeyPepper!);
  await db.query(
    `INSERT INTO merchant_api_keys (id, merchant_id, owner_id, name, scopes, secret_hash, created_at_s, revoked_at_s)
     VALUES ($1, $2, $3, 'seeded', $4, $5, $6, $7)`,
    [key.keyId, merchantId, ownerId, JSON.stringify(options.scopes ?? ['access:check', 'offers:read', 'redemptions:release']), key.secretHash, nowS, options.revoked ? nowS : null],
  );
  return { merchantId, keyId: key.keyId, key: key.plaintext, ownerId };
}
