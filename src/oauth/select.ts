// POST /oauth/select: the person chose an identity provider and signed in with it. The identity is
// checked against the choice (a human consent never accepts an agent identity), the pending request
// is consumed exactly once, and an authorization code bound to the client, redirect URI, resource,
// S256 challenge and scope is minted. The consent is remembered (remembered-consent.ts) in the same
// transaction. The answer is only the registered callback URL with `code`, `state` and `iss` (RFC 9207).
import { decodeJwt } from 'jose';
import type { CredentialVerifier } from '../identity/verifier.ts';
import type { Tx } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { Principal } from '../platform/principal.ts';
import { consumeAuthorizationRequest, purgeUsedAuthorizationRequests, readAuthorizationRequest, type AuthorizationRequest } from './authorization-request.ts';
import { consentBindingHolds, remembersConsent } from './browser-binding.ts';
import { mintCode } from './code.ts';
import { accessDenied, invalidRequest, temporarilyUnavailable } from './errors.ts';
import { redirectWith } from './redirect-uris.ts';
import { rememberConsent, type ConsentedGrant, type ConsentingIdentity } from './remembered-consent.ts';
import { parseScope, SCOPE_FOR_PROVIDER, type IdentityProviderChoice } from './scopes.ts';
import * as store from './store.ts';

export interface SelectRequest extends ConsentPageCall {
  authorization: string | undefined;
  identityProvider: IdentityProviderChoice;
}

/** Identity failures are 403 here (spec: invalid session); a provider outage stays a 503. */
async function signIn(verifier: CredentialVerifier, authorization: string | undefined): Promise<Principal> {
  try {
    return await verifier.authenticate(authorization, 'api');
  } catch (error) {
    if (error instanceof ApiError && error.status === 503) throw temporarilyUnavailable(503, error.message);
    if (error instanceof ApiError) throw accessDenied(`invalid session: ${error.message}`);
    throw error;
  }
}

/** The signed-in identity must come from the chosen provider itself (not one of our tokens, not a key). */
function checkActor(choice: IdentityProviderChoice, principal: Principal): void {
  if (choice === 'human') {
    if (principal.kind === 'agent') throw accessDenied('an agent identity cannot give human owner consent; sign in with the human identity provider');
    if (principal.credential !== 'human_session') throw accessDenied('human consent needs a session of the human identity provider');
    return;
  }
  if (principal.kind !== 'agent' || principal.credential !== 'agent_identity') {
    throw accessDenied('agent consent needs an identity of the agent identity provider');
  }
}

/**
 * The identity that signed in, as its provider names it. Only once checkActor has accepted the credential:
 * then it is an identity token of that provider whose signature, issuer and audience the verifier has just
 * checked, so its claims can be read as they are.
 */
function consentingIdentity(authorization: string): ConsentingIdentity {
  const claims = decodeJwt(/^Bearer +(\S+) *$/i.exec(authorization)![1]!);
  return { issuer: claims.iss!, subject: claims.sub! };
}

/**
 * Checked before the body is read: only our own consent page may call select (a missing Origin is
 * refused too; browsers always send it on a JSON POST), and nothing may travel in the query string.
 */
export function checkSelectCaller(gateway: Gateway, origin: string | undefined, hasQuery: boolean): void {
  const expectedOrigin = new URL(gateway.config.baseUrl).origin;
  if (origin !== expectedOrigin) throw accessDenied(`the Origin header must be ${expectedOrigin}`);
  if (hasQuery) throw invalidRequest("the consent page's calls take no query parameters; credentials are never accepted in the query string");
}

/** What every call of the consent page carries: the signed request, and what binds the page to its browser. */
interface ConsentPageCall {
  browserSecret: string | undefined;
  consentToken: string | undefined;
  requestId: string;
}

/**
 * The pending request a consent page call acts on: its signature and expiry checked, and the call bound to the consent
 * page shown in the browser that started it. `act` names what the person did, for the refusal.
 */
async function requestOfConsentPage(gateway: Gateway, call: ConsentPageCall, act: string): Promise<AuthorizationRequest> {
  const request = await readAuthorizationRequest(gateway, gateway.db, call.requestId);
  if ('problem' in request) throw invalidRequest(request.problem);
  if (!consentBindingHolds(call.browserSecret, request.browserHash, call.requestId, call.consentToken)) {
    throw accessDenied(`${act} must come from the consent page shown in the browser that started this request`);
  }
  return request;
}

/** Uses the request, once, in `tx`: refused when its client was deleted since (purged, or by its owner) or it was used already. */
async function useRequest(tx: Tx, request: AuthorizationRequest, nowS: number): Promise<void> {
  if (!(await store.findClient(tx, request.clientId))) throw invalidRequest('the client of this request no longer exists');
  if (!(await consumeAuthorizationRequest(tx, request, nowS))) throw invalidRequest('this authorization request has already been used');
}

export async function select(gateway: Gateway, verifier: CredentialVerifier, input: SelectRequest): Promise<{ redirectUrl: string }> {
  const { baseUrl } = gateway.config;

  const request = await requestOfConsentPage(gateway, input, 'consent');

  const principal = await signIn(verifier, input.authorization);
  checkActor(input.identityProvider, principal);
  const identity = consentingIdentity(input.authorization!);
  const scope = SCOPE_FOR_PROVIDER[input.identityProvider];
  const grantable = request.scope === null ? undefined : parseScope(request.scope);
  if (grantable && !grantable.has(scope)) throw accessDenied(`scope mismatch: the client asked for ${request.scope}, this provider grants ${scope}`);

  const human = input.identityProvider === 'human';
  const granted: ConsentedGrant = {
    scope,
    actorType: human ? 'owner' : 'agent',
    subject: human ? principal.ownerId! : principal.agentId!,
    email: human ? principal.email! : principal.ownerEmail!,
    ownerId: principal.ownerId!,
  };
  const nowS = gateway.clock.nowS();
  const code = await gateway.db.transaction(async (tx) => {
    await useRequest(tx, request, nowS);
    const match = { clientId: request.clientId, browserHash: request.browserHash, resource: request.resource, requestedScope: request.scope };
    if (remembersConsent(gateway.config)) await rememberConsent(tx, match, identity, granted, nowS);
    return mintCode(tx, { clientId: request.clientId, redirectUri: request.redirectUri, resource: request.resource, codeChallenge: request.codeChallenge, ...granted }, nowS);
  });
  await purgeUsedAuthorizationRequests(gateway.db, nowS);
  return { redirectUrl: redirectWith(request.redirectUri, { code, state: request.state, iss: baseUrl }) };
}

/**
 * The person declines on the consent page: the client is answered at once, `access_denied` with its `state` and `iss`
 * (RFC 6749 §4.1.2.1), rather than left to wait out the request, and the request is used. Bound as select is (the
 * consent page in the browser that started the request); no sign-in, since declining grants nothing.
 */
export async function deny(gateway: Gateway, input: ConsentPageCall): Promise<{ redirectUrl: string }> {
  const request = await requestOfConsentPage(gateway, input, 'declining');
  const nowS = gateway.clock.nowS();
  await gateway.db.transaction((tx) => useRequest(tx, request, nowS));
  const { baseUrl } = gateway.config;
  return { redirectUrl: redirectWith(request.redirectUri, { error: 'access_denied', error_description: 'the person declined the request', state: request.state, iss: baseUrl }) };
}
