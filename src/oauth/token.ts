// POST /oauth/token: the authorization code grant with PKCE (RFC 6749 §4.1.3, RFC 7636 §4.6, RFC 8707).
// Checks run in this order, each naming its error (research brief §1.4):
//   signing key configured ............................. 503 temporarily_unavailable
//   a parameter repeated ............................... 400 invalid_request
//   grant_type missing / not authorization_code ........ 400 invalid_request / unsupported_grant_type
//   client credentials sent (public clients only) ...... 401 invalid_client (Authorization header) / 400 (body)
//   client_id, code, redirect_uri or resource missing .. 400 invalid_request
//   code_verifier missing .............................. 400 invalid_grant (RFC 7636 §4.6)
//   client_id unknown .................................. 400 invalid_client
//   code_verifier not 43–128 unreserved characters ..... 400 invalid_request
//   resource not one of ours ........................... 400 invalid_target
//   code unknown or issued to another client ........... 400 invalid_grant
//   verifier does not match the S256 challenge ......... 400 invalid_grant
//   redirect_uri differs from the code's ............... 400 invalid_grant
//   resource differs from the code's ................... 400 invalid_target
//   code already used .................................. 400 invalid_grant, and its token is revoked
//   code expired (60 s) ................................ 400 invalid_grant
// PKCE is checked before the used flag, so only the holder of the verifier can trigger a revocation
// (an attacker with a stolen code alone cannot revoke the victim's token: oidc-provider's order).
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { clientAuthenticationRefused, invalidClient, invalidGrant, invalidRequest, invalidTarget, temporarilyUnavailable, unsupportedGrantType } from './errors.ts';
import { CODE_VERIFIER_PATTERN, verifierMatches } from './pkce.ts';
import { ACCESS_TOKEN_LIFETIME_S, ACCESS_TOKEN_TYP, isOurResource } from '../platform/access-tokens.ts';
import { hashCode } from './code.ts';
import { takeBack } from './remembered-consent.ts';
import * as store from './store.ts';

export const TOKEN_PARAMETERS = ['grant_type', 'code', 'client_id', 'redirect_uri', 'code_verifier', 'resource'] as const;

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  scope: string;
}

/** An endpoint's parameters as single strings (a missing or empty one is undefined); any repeated one is refused. */
export function readForm<P extends string>(form: unknown, parameters: readonly P[]): Partial<Record<P, string>> {
  const fields = (typeof form === 'object' && form !== null ? form : {}) as Record<string, unknown>;
  const read: Partial<Record<P, string>> = {};
  for (const name of Object.keys(fields)) {
    if (Array.isArray(fields[name])) throw invalidRequest(`${name} must not be repeated`);
  }
  for (const name of parameters) {
    const value = fields[name];
    if (typeof value === 'string' && value !== '') read[name] = value;
  }
  return read;
}

/** Body members that authenticate a confidential client (RFC 6749 §2.3.1, RFC 7523 §2.2). */
const CLIENT_CREDENTIAL_PARAMETERS = ['client_secret', 'client_assertion', 'client_assertion_type'] as const;

/**
 * Refuses client authentication: every client here is public (`token_endpoint_auth_method` none), so a secret or
 * an assertion is a method it did not register, which node-oidc-provider refuses too; ignoring it would tell a
 * client whose secret is wrong that all is well.
 */
export function refuseClientCredentials(form: unknown, authorization: string | undefined): void {
  if (authorization !== undefined) {
    const scheme = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+/.exec(authorization)?.[0] ?? 'Basic';
    throw clientAuthenticationRefused('clients here are public (token_endpoint_auth_method none): send client_id in the body and no Authorization header', scheme);
  }
  const fields = (typeof form === 'object' && form !== null ? form : {}) as Record<string, unknown>;
  const sent = CLIENT_CREDENTIAL_PARAMETERS.find((name) => fields[name] !== undefined);
  if (sent) throw clientAuthenticationRefused(`clients here are public (token_endpoint_auth_method none): send no ${sent}`);
}

export async function exchangeCode(gateway: Gateway, form: unknown, authorization?: string): Promise<TokenResponse> {
  const { db, clock, signing, config } = gateway;
  if (!signing.configured) throw temporarilyUnavailable(503, `the gateway cannot issue tokens: ${signing.whyUnconfigured}`);
  const p = readForm(form, TOKEN_PARAMETERS);
  if (!p.grant_type) throw invalidRequest('grant_type is required');
  if (p.grant_type !== 'authorization_code') throw unsupportedGrantType('only grant_type=authorization_code is supported');
  refuseClientCredentials(form, authorization);
  for (const name of ['client_id', 'code', 'redirect_uri', 'resource'] as const) {
    if (!p[name]) throw invalidRequest(`${name} is required`);
  }
  if (!p.code_verifier) throw invalidGrant('code_verifier is required (PKCE)');
  const client = await store.findClient(db, p.client_id!);
  if (!client) throw invalidClient('no client is registered with this client_id');
  if (!CODE_VERIFIER_PATTERN.test(p.code_verifier)) throw invalidRequest('code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~');
  if (!isOurResource(config.baseUrl, p.resource!)) throw invalidTarget(`resource must be ${config.baseUrl} (the API) or ${config.baseUrl}/mcp`);

  const codeHash = hashCode(p.code!);
  const code = await store.findCode(db, codeHash);
  if (!code || code.client_id !== client.id) throw invalidGrant('the authorization code is unknown or was issued to another client');
  if (!verifierMatches(p.code_verifier, code.code_challenge)) throw invalidGrant('code_verifier does not match the code_challenge');
  if (code.redirect_uri !== p.redirect_uri) throw invalidGrant('redirect_uri differs from the one the code was issued for');
  if (code.resource !== p.resource) throw invalidTarget('resource differs from the one the code was issued for');
  const nowS = clock.nowS();
  if (code.consumed_at_s !== null) return replayed(gateway, code, nowS);
  if (Number(code.expires_at_s) <= nowS) throw invalidGrant('the authorization code has expired');

  const jti = newId('at');
  const expiresAtS = nowS + ACCESS_TOKEN_LIFETIME_S;
  const token = await db.transaction(async (tx) => {
    if (!(await store.consumeCode(tx, codeHash, { jti, expiresAtS, nowS }))) return undefined;
    await store.markClientUsed(tx, client.id, nowS);
    // Signing inside the transaction: if it fails the code is not spent and the client may retry.
    return signing.sign(
      {
        iss: config.baseUrl,
        sub: code.subject,
        aud: code.resource,
        client_id: client.id,
        scope: code.scope,
        actor_type: code.actor_type,
        ...(code.email === null ? {} : { email: code.email }),
        jti,
        iat: nowS,
        exp: expiresAtS,
      },
      ACCESS_TOKEN_TYP,
    );
  });
  if (token === undefined) {
    // Another request spent the code between our read and our update: this one is the replay. Or the code is gone:
    // its grant was withdrawn meanwhile, which takes its unused codes (found from outside: answered "already used").
    const spent = await store.findCode(db, codeHash);
    if (!spent) throw invalidGrant('the authorization code is no longer valid: the owner withdrew the grant it was issued under');
    return replayed(gateway, spent, nowS);
  }
  return { access_token: token, token_type: 'Bearer', expires_in: ACCESS_TOKEN_LIFETIME_S, scope: code.scope };
}

/**
 * RFC 6749 §4.1.2: a code used twice is refused, and the token it issued is revoked. More than that, the grant
 * behind it is taken back, as a revocation takes it (revoke.ts; oidc-provider does the same on a replay): a code
 * presented twice was seen by someone else, so the consents remembered for that client and subject (every browser),
 * its codes not yet exchanged and every live token of it go, and the client must ask its user again; else a
 * remembered consent would go on minting codes (prompt=none) for whoever replayed it (found from outside).
 */
async function replayed(gateway: Gateway, code: store.CodeRow, nowS: number): Promise<never> {
  await gateway.db.transaction(async (tx) => {
    await takeBack(tx, { clientId: code.client_id, actorType: code.actor_type, subject: code.subject }, nowS);
    if (code.access_token_jti !== null && code.access_token_expires_at_s !== null) {
      await store.revokeToken(tx, code.access_token_jti, Number(code.access_token_expires_at_s), nowS);
    }
  });
  // Refused from the replayer's next request on every instance, before this answer goes out.
  await gateway.credentials.revoked();
  throw invalidGrant('the authorization code has already been used; every token of its grant is revoked, and the user must authorize the client again');
}
