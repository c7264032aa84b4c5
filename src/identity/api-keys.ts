// Merchant API keys: `acg_mk_<keyId>_<secret>`. The key id is public (it names the key in lists and
// logs); only an HMAC-SHA-256 of the secret under the gateway's pepper is stored, and it is compared
// in constant time. A database dump alone therefore cannot be used to test guessed keys.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { newSecret, randomBase32 } from '../platform/ids.ts';

export const API_KEY_PREFIX = 'acg_mk_';
const API_KEY_PATTERN = /^acg_mk_([a-z2-7]{26})_([A-Za-z0-9_-]{43})$/;

/** The catalogue of merchant API key scopes. */
export const API_KEY_SCOPES = {
  'access:check': 'POST /v1/access/merchant-check',
  'offers:read': 'read offers and the redemptions (holds) taken against them',
  'offers:write': "create, update and deactivate the merchant's offers",
  'redemptions:capture': 'capture a hold (full or partial)',
  'redemptions:release': 'release a hold back to the agent',
  'redemptions:refund': 'refund captured credit to the agent (full or partial, within the offer refund window)',
  'earnings:read': "read the merchant's earnings balance",
  'webhooks:read': 'list webhook deliveries',
  'webhooks:write': 're-send a webhook delivery or a past event',
  'events:read': "list the merchant's events (kept 30 days)",
  'evidence:read': "read the signed evidence of the merchant's redemptions (GET /v1/redemptions/{id}/evidence)",
} as const;

export type ApiKeyScope = keyof typeof API_KEY_SCOPES;

export interface ParsedApiKey {
  keyId: string;
  secret: string;
}

export function parseApiKey(token: string): ParsedApiKey | undefined {
  const match = API_KEY_PATTERN.exec(token);
  return match ? { keyId: `mk_${match[1]}`, secret: match[2]! } : undefined;
}

export function hashApiKeySecret(pepper: string, secret: string): string {
  return createHmac('sha256', pepper).update(secret).digest('base64url');
}

export function secretMatches(pepper: string, secret: string, storedHash: string): boolean {
  const presented = Buffer.from(hashApiKeySecret(pepper, secret));
  const stored = Buffer.from(storedHash);
  return presented.length === stored.length && timingSafeEqual(presented, stored);
}

export function newApiKey(pepper: string): { keyId: string; plaintext: string; secretHash: string } {
  const idPart = randomBase32(16);
  const secret = newSecret();
  return { keyId: `mk_${idPart}`, plaintext: `${API_KEY_PREFIX}${idPart}_${secret}`, secretHash: hashApiKeySecret(pepper, secret) };
}
