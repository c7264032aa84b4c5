// A pending authorization request travels with the person, not in the database: /oauth/authorize signs what it
// checked (the client, its redirect URI and state, the PKCE challenge, the resource, the scope, the hash of the
// browser-binding cookie) into the request id, a compact JWS of the gateway's key (typ `oauth-authz-request+jwt`,
// audience the consent page), which the consent page and /oauth/select verify. Nothing is stored before the person
// acts, so no party can fill a store of pending requests and keep everyone else from signing in (RFC 6819
// §4.4.1.11; found from outside: one client at 17 requests a second filled the 10,000 pending rows that were shared
// by the whole gateway, and every sign-in, the console's too, answered temporarily_unavailable). The request is
// single use: its consent writes a row under its `jti` in the transaction that mints the code, and a second consent
// finds the row. See docs/decisions.md "A pending authorization request is signed, not stored".
import { errors as joseErrors } from 'jose';
import type { Queryable } from '../platform/db/database.ts';
import type { Gateway } from '../platform/gateway.ts';
import { randomBase32 } from '../platform/ids.ts';
import { AUTHORIZATION_REQUEST_LIFETIME_S } from './limits.ts';
import * as store from './store.ts';
import type { AuthorizationRequest } from './store.ts';

export const AUTHORIZATION_REQUEST_TYP = 'oauth-authz-request+jwt';

export type { AuthorizationRequest } from './store.ts';

const audienceOf = (baseUrl: string) => `${baseUrl}/oauth/consent`;

/** The request id the consent URL carries: the request, signed. Throws signing_configuration_required without a key. */
export async function issueAuthorizationRequest(gateway: Gateway, request: Omit<AuthorizationRequest, 'jti' | 'expiresAtS'>, nowS: number): Promise<string> {
  const { baseUrl } = gateway.config;
  return gateway.signing.sign(
    {
      iss: baseUrl,
      aud: audienceOf(baseUrl),
      jti: `areq_${randomBase32(16)}`,
      iat: nowS,
      exp: nowS + AUTHORIZATION_REQUEST_LIFETIME_S,
      client_id: request.clientId,
      redirect_uri: request.redirectUri,
      ...(request.state === undefined ? {} : { state: request.state }),
      code_challenge: request.codeChallenge,
      resource: request.resource,
      scope: request.scope,
      browser_hash: request.browserHash,
    },
    AUTHORIZATION_REQUEST_TYP,
  );
}

const REQUIRED = ['jti', 'client_id', 'redirect_uri', 'code_challenge', 'resource', 'browser_hash'] as const;

/**
 * The request a request id names, while a consent may still answer it; otherwise why not, in words for the person
 * (an id this gateway did not sign, or signed for something else, is no request; one past its ten minutes has
 * expired; one consented to has been used).
 */
export async function readAuthorizationRequest(gateway: Gateway, db: Queryable, requestId: string | undefined): Promise<AuthorizationRequest | { problem: string }> {
  if (!requestId) return { problem: 'request_id is required' };
  const { baseUrl } = gateway.config;
  let claims: Record<string, unknown>;
  try {
    const verified = await gateway.signing.verify(requestId, {
      typ: AUTHORIZATION_REQUEST_TYP,
      issuer: baseUrl,
      audience: audienceOf(baseUrl),
      requiredClaims: REQUIRED,
      lifetimeMaxS: AUTHORIZATION_REQUEST_LIFETIME_S,
    });
    claims = verified.payload;
  } catch (error) {
    if (error instanceof joseErrors.JWTExpired) return { problem: 'this authorization request has expired; start again from the application' };
    return { problem: 'no such authorization request' };
  }
  const text = (name: string) => (typeof claims[name] === 'string' ? (claims[name] as string) : undefined);
  if (REQUIRED.some((name) => text(name) === undefined)) return { problem: 'no such authorization request' };
  const request: AuthorizationRequest = {
    jti: text('jti')!,
    clientId: text('client_id')!,
    redirectUri: text('redirect_uri')!,
    state: text('state'),
    codeChallenge: text('code_challenge')!,
    resource: text('resource')!,
    scope: text('scope') ?? null,
    browserHash: text('browser_hash')!,
    expiresAtS: claims.exp as number,
  };
  if (await store.authorizationRequestUsed(db, request.jti)) return { problem: 'this authorization request has already been used' };
  return request;
}

/**
 * How long past its `exp` a used request's row is kept: while another instance whose clock is behind this one's could
 * still accept the signed request, its row must be there to say it was used (two consents, two codes, otherwise).
 * Longer than any skew the signing leeway (30 s) tolerates.
 */
export const USED_REQUEST_KEPT_AFTER_EXP_S = 120;

/** Forgets the used requests no instance could accept any more. */
export async function purgeUsedAuthorizationRequests(db: Queryable, nowS: number): Promise<void> {
  await store.purgeExpiredRequests(db, nowS - USED_REQUEST_KEPT_AFTER_EXP_S);
}

/** Records the request's consent (single use), in the transaction that mints its code; false when another consent got there first. */
export async function consumeAuthorizationRequest(db: Queryable, request: AuthorizationRequest, nowS: number): Promise<boolean> {
  return store.recordAuthorizationRequestUsed(db, request, nowS);
}
