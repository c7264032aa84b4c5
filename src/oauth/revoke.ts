// POST /oauth/revoke: token revocation (RFC 7009), through which a client gives back what it holds, for example
// when its user signs out. Checks run in this order, each naming its error:
//   a parameter repeated ............................... 400 invalid_request
//   client credentials sent (public clients only) ...... 401 invalid_client (Authorization header) / 400 (body)
//   client_id or token missing ......................... 400 invalid_request
//   client_id unknown .................................. 400 invalid_client
//   token not a live access token of ours .............. 200, nothing to revoke (RFC 7009 §2.2: an invalid token is no error)
//   token issued to another client ..................... 400 invalid_request
//   token already revoked .............................. 200, nothing more revoked
// Policy (RFC 7009 §2.1 leaves it to the server): revoking an access token revokes the grant it came from, for the
// token's subject: the consents remembered for that client and that owner or agent (every browser), the codes not
// yet exchanged and every live access token the client holds for it. The consent is what lets the client sign in
// again without a click (prompt=none); a client that signs out must not be signed straight back in.
// token_type_hint is read and ignored (RFC 7009 §2.1 allows it): we issue access tokens only, so there is nothing
// else to look for.
import { ACCESS_TOKEN_TYP } from '../platform/access-tokens.ts';
import type { Gateway } from '../platform/gateway.ts';
import { invalidClient, invalidRequest } from './errors.ts';
import { readForm, refuseClientCredentials } from './token.ts';
import { takeBack } from './remembered-consent.ts';
import * as store from './store.ts';

export const REVOKE_PARAMETERS = ['token', 'token_type_hint', 'client_id'] as const;

/** What a revocation took back (for the log and tests; the answer itself is an empty 200). */
export interface TokenRevocation {
  revokedGrants: number;
  revokedAccessTokens: number;
}

export async function revokeToken(gateway: Gateway, form: unknown, authorization?: string): Promise<TokenRevocation> {
  const { db, clock, signing, config } = gateway;
  const p = readForm(form, REVOKE_PARAMETERS);
  refuseClientCredentials(form, authorization);
  if (!p.client_id) throw invalidRequest('client_id is required (clients here are public)');
  if (!p.token) throw invalidRequest('token is required');
  const client = await store.findClient(db, p.client_id);
  if (!client) throw invalidClient('no client is registered with this client_id');

  let claims;
  try {
    // Any of our access tokens, for either resource; an expired or foreign one is nothing to revoke.
    ({ payload: claims } = await signing.verify(p.token, { typ: ACCESS_TOKEN_TYP, issuer: config.baseUrl, requiredClaims: ['sub', 'jti', 'exp', 'client_id', 'actor_type'] }));
  } catch {
    return { revokedGrants: 0, revokedAccessTokens: 0 };
  }
  if (claims.client_id !== client.id) throw invalidRequest('the token was issued to another client');
  // A token already revoked is as dead as an expired one: it revokes nothing more (found from outside: a leaked
  // token the owner had revoked could go on wiping the client's later sign-ins for the rest of its life).
  if ((await store.revokedTokenIds(db, [String(claims.jti)])).length > 0) return { revokedGrants: 0, revokedAccessTokens: 0 };
  const nowS = clock.nowS();
  const revoked = await db.transaction(async (tx) => {
    // The owner's revocation's sequence, for this one subject; the token presented is recorded by its code, and
    // revoked by its jti too.
    const taken = await takeBack(tx, { clientId: client.id, actorType: String(claims.actor_type), subject: claims.sub! }, nowS);
    await store.revokeToken(tx, String(claims.jti), Number(claims.exp), nowS);
    return taken;
  });
  // Refused from the next request on every instance, before this answer goes out.
  await gateway.credentials.revoked();
  return revoked;
}
