// Minting an authorization code (RFC 6749 §4.1.2): 256 random bits, stored only as their SHA-256, bound to
// the client, redirect URI, resource, S256 challenge, scope and identity, single use, valid one minute.
// Both ways to a code mint it here: a consent on the page (select.ts) and a remembered one (authorize.ts).
import { createHash } from 'node:crypto';
import type { Tx } from '../platform/db/database.ts';
import { newSecret } from '../platform/ids.ts';
import { ACCESS_TOKEN_LIFETIME_S } from '../platform/access-tokens.ts';
import { AUTHORIZATION_CODE_LIFETIME_S } from './limits.ts';
import * as store from './store.ts';

export function hashCode(code: string): string {
  return createHash('sha256').update(code).digest('hex');
}

/** What a code is bound to: the request it answers and the identity it was issued for. */
export type CodeBinding = Omit<store.NewCode, 'codeHash' | 'nowS' | 'expiresAtS' | 'purgeAfterS'>;

export async function mintCode(tx: Tx, binding: CodeBinding, nowS: number): Promise<string> {
  const code = newSecret();
  await store.purgeCodes(tx, nowS);
  await store.insertCode(tx, {
    ...binding,
    codeHash: hashCode(code),
    nowS,
    expiresAtS: nowS + AUTHORIZATION_CODE_LIFETIME_S,
    // Kept past its expiry so a late replay can still revoke the token it issued.
    purgeAfterS: nowS + AUTHORIZATION_CODE_LIFETIME_S + ACCESS_TOKEN_LIFETIME_S,
  });
  return code;
}
