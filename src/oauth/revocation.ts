// The one question the credential verifier asks the authorization server: has this access token been
// revoked (its code was replayed, RFC 6749 §4.1.2)? Our tokens are stateless JWTs, so revocation is a
// short deny-list of `jti`s, each kept until the token would have expired anyway.
import type { Queryable } from '../platform/db/database.ts';
import { isTokenRevoked } from './store.ts';

export async function isAccessTokenRevoked(db: Queryable, jti: string): Promise<boolean> {
  return isTokenRevoked(db, jti);
}
