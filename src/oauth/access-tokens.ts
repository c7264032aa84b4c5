// The revocation of our access tokens: the authorization server revokes the tokens of a replayed code (RFC
// 6749 §4.1.2), and the credential verifier asks this list (it is handed over by the composition root, so
// identity never imports oauth).
import type { Queryable } from '../platform/db/database.ts';
import { revokedTokenIds } from './store.ts';

/**
 * Which of these access tokens have been revoked? Our tokens are stateless JWTs, so revocation is a short
 * deny-list of `jti`s, each kept until the token would have expired anyway.
 */
export async function revokedAccessTokenIds(db: Queryable, jtis: readonly string[]): Promise<string[]> {
  return revokedTokenIds(db, jtis);
}
