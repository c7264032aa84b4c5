// GET /oauth/authorize: the start of the authorization code flow (RFC 6749 §4.1.1, RFC 7636, RFC 8707,
// RFC 9207, RFC 9700). Errors that cannot be trusted to the redirect URI (unknown client, unregistered
// redirect URI) are shown to the person and never redirected; every other error goes back to the
// validated redirect URI with a 303, `error`, `state` and `iss`. On success, a browser that consented to
// exactly this (client, scope, resource) before is sent straight back with a code (remembered-consent.ts);
// otherwise the browser is sent to the consent page with the request, signed (authorization-request.ts: nothing is
// stored before the person acts).
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { issueAuthorizationRequest } from './authorization-request.ts';
import { hashSecret, newBrowserSecret, remembersConsent } from './browser-binding.ts';
import { findClient, matchClientRedirectUri } from './console-client.ts';
import { mintCode } from './code.ts';
import { REQUEST_ID_CHARS_MAX, STATE_LENGTH_MAX } from './limits.ts';
import { CODE_CHALLENGE_METHOD, CODE_CHALLENGE_PATTERN } from './pkce.ts';
import { isOurResource } from '../platform/access-tokens.ts';
import { redirectWith } from './redirect-uris.ts';
import { rememberedConsent, type ConsentMatch } from './remembered-consent.ts';
import { parseScope } from './scopes.ts';

/** RFC 6749 §4.1.2.1 codes sent back in the redirect (not all are error bodies). */
export type AuthorizeRedirectError =
  | 'invalid_request'
  | 'unsupported_response_type'
  | 'invalid_scope'
  | 'invalid_target'
  | 'temporarily_unavailable'
  | 'consent_required'
  | 'request_not_supported'
  | 'request_uri_not_supported';

export type AuthorizeOutcome =
  | { kind: 'show'; status: 400; error: 'invalid_request' | 'invalid_client' | 'invalid_redirect_uri'; description: string }
  | { kind: 'redirect'; location: string }
  /** Answered by a remembered consent: back to the client with a code, no page. */
  | { kind: 'remembered'; location: string }
  | { kind: 'consent'; location: string; browserSecret: string; newBrowser: boolean };

const DUPLICATE = Symbol('duplicate');

/** Each parameter at most once (oidc-provider reject_dupes): a value, absent, or DUPLICATE. */
function single(params: URLSearchParams, name: string): string | undefined | typeof DUPLICATE {
  const values = params.getAll(name);
  if (values.length > 1) return DUPLICATE;
  return values[0];
}

interface Trusted {
  redirectUri: string;
  state: string | undefined;
  issuer: string;
}

function errorRedirect(trusted: Trusted, error: AuthorizeRedirectError, description: string): AuthorizeOutcome {
  return {
    kind: 'redirect',
    location: redirectWith(trusted.redirectUri, { error, error_description: description, state: trusted.state, iss: trusted.issuer }),
  };
}

export async function authorize(gateway: Gateway, rawQuery: string, browserSecret: string | undefined): Promise<AuthorizeOutcome> {
  const { baseUrl } = gateway.config;
  const params = new URLSearchParams(rawQuery);
  const show = (error: 'invalid_request' | 'invalid_client' | 'invalid_redirect_uri', description: string): AuthorizeOutcome => ({ kind: 'show', status: 400, error, description });

  const clientId = single(params, 'client_id');
  if (clientId === undefined || clientId === DUPLICATE) return show('invalid_request', 'client_id is required, exactly once');
  const client = await findClient(gateway, clientId);
  if (!client) return show('invalid_client', 'no client is registered with this client_id');
  const requestedRedirect = single(params, 'redirect_uri');
  if (requestedRedirect === undefined || requestedRedirect === DUPLICATE) return show('invalid_request', 'redirect_uri is required, exactly once');
  if (!matchClientRedirectUri(client, requestedRedirect)) return show('invalid_redirect_uri', 'redirect_uri is not registered for this client');

  const state = single(params, 'state');
  const trusted: Trusted = { redirectUri: requestedRedirect, state: state === DUPLICATE ? undefined : state, issuer: baseUrl };
  const fail = (error: AuthorizeRedirectError, description: string) => errorRedirect(trusted, error, description);

  for (const name of ['response_type', 'state', 'code_challenge', 'code_challenge_method', 'scope', 'prompt', 'response_mode']) {
    if (single(params, name) === DUPLICATE) return fail('invalid_request', `${name} must not be repeated`);
  }
  // What the metadata says is not supported is refused, not ignored: a client that asked for another response mode
  // or sent a request object would otherwise be answered other than it asked (OpenID Connect Core §6.1, §6.2).
  if (params.has('request')) return fail('request_not_supported', 'request objects are not supported (request_parameter_supported is false); send the parameters themselves');
  if (params.has('request_uri')) return fail('request_uri_not_supported', 'request_uri is not supported (request_uri_parameter_supported is false); send the parameters themselves');
  const responseMode = single(params, 'response_mode');
  if (responseMode !== undefined && responseMode !== 'query') return fail('invalid_request', 'response_mode must be query, the one supported (response_modes_supported)');
  const responseType = single(params, 'response_type');
  if (responseType === undefined) return fail('invalid_request', 'response_type is required');
  if (responseType !== 'code') return fail('unsupported_response_type', 'only response_type=code is supported');
  if (trusted.state !== undefined && trusted.state.length > STATE_LENGTH_MAX) return fail('invalid_request', `state must be at most ${STATE_LENGTH_MAX} characters`);

  const method = single(params, 'code_challenge_method');
  const challenge = single(params, 'code_challenge');
  if (typeof challenge !== 'string') return fail('invalid_request', 'code_challenge is required (PKCE, S256)');
  if (method !== CODE_CHALLENGE_METHOD) return fail('invalid_request', 'code_challenge_method must be S256');
  if (!CODE_CHALLENGE_PATTERN.test(challenge)) return fail('invalid_request', 'code_challenge must be 43 base64url characters (the S256 of the verifier)');

  const resources = params.getAll('resource');
  if (resources.length !== 1) return fail('invalid_target', 'exactly one resource is required (RFC 8707)');
  if (!isOurResource(baseUrl, resources[0]!)) return fail('invalid_target', `resource must be ${baseUrl} (the API) or ${baseUrl}/mcp`);

  const scope = effectiveScope(single(params, 'scope') as string | undefined, client.scope);
  if (scope === INVALID) return fail('invalid_scope', 'scope may only list svc:agent and svc:owner, and only scopes registered for this client');

  const prompt = parsePrompt(single(params, 'prompt') as string | undefined);
  if (prompt === INVALID) return fail('invalid_request', 'prompt may only be none, or any of login, consent and select_account');

  const nowS = gateway.clock.nowS();
  if (browserSecret !== undefined && prompt !== 'page' && remembersConsent(gateway.config)) {
    const match: ConsentMatch = { clientId: client.id, browserHash: hashSecret(browserSecret), resource: resources[0]!, requestedScope: scope };
    const code = await codeFromRememberedConsent(gateway, match, { redirectUri: requestedRedirect, codeChallenge: challenge }, nowS);
    if (code !== undefined) return { kind: 'remembered', location: redirectWith(requestedRedirect, { code, state: trusted.state, iss: baseUrl }) };
  }
  if (prompt === 'none') return fail('consent_required', 'no remembered consent answers this request in this browser; send it without prompt=none to show the consent page');
  const secret = browserSecret ?? newBrowserSecret();
  let requestId: string;
  try {
    const request = { clientId: client.id, redirectUri: requestedRedirect, state: trusted.state, codeChallenge: challenge, resource: resources[0]!, scope, browserHash: hashSecret(secret) };
    requestId = await issueAuthorizationRequest(gateway, request, nowS);
    if (requestId.length > REQUEST_ID_CHARS_MAX) {
      return fail('invalid_request', `the request is too long to carry to the consent page (${requestId.length} characters signed, at most ${REQUEST_ID_CHARS_MAX}): send a shorter state, or register a shorter redirect URI`);
    }
  } catch (error) {
    if (!(error instanceof ApiError && error.code === 'signing_configuration_required')) throw error;
    return fail('temporarily_unavailable', 'the gateway has no signing key configured, so it can issue no token');
  }
  const location = `${baseUrl}/oauth/consent?request_id=${requestId}`;
  return { kind: 'consent', location, browserSecret: secret, newBrowser: browserSecret === undefined };
}

/** A code for this request if the browser consented to exactly it before: minted with its consent locked. */
function codeFromRememberedConsent(gateway: Gateway, match: ConsentMatch, request: { redirectUri: string; codeChallenge: string }, nowS: number): Promise<string | undefined> {
  return gateway.db.transaction(async (tx) => {
    const granted = await rememberedConsent(tx, match, nowS);
    if (!granted) return undefined;
    return mintCode(tx, { clientId: match.clientId, redirectUri: request.redirectUri, resource: match.resource, codeChallenge: request.codeChallenge, ...granted }, nowS);
  });
}

const INVALID = Symbol('invalid');
const PAGE_PROMPTS = new Set(['login', 'consent', 'select_account']);

/**
 * OpenID Connect's `prompt` (Core §3.1.2.1), which MCP clients may send: `none` = answer only from a
 * remembered consent; login, consent or select_account = show the page even when a consent is remembered
 * (how a person chooses another identity). Absent = a remembered consent answers, else the page.
 */
function parsePrompt(value: string | undefined): 'none' | 'page' | undefined | typeof INVALID {
  if (value === undefined) return undefined;
  const values = value.split(' ');
  if (values.length === 1 && values[0] === 'none') return 'none';
  return values.every((v) => PAGE_PROMPTS.has(v)) ? 'page' : INVALID;
}

/**
 * The scopes the person may grant: the requested ones (all of ours when none is named), limited to the
 * client's registered scope. null = both. The provider chosen at consent picks one of them.
 */
function effectiveScope(requested: string | undefined, registered: string | null): string | null | typeof INVALID {
  const allowed = registered === null ? undefined : parseScope(registered);
  if (requested === undefined) return registered;
  const asked = parseScope(requested);
  if (!asked) return INVALID;
  if (allowed && [...asked].some((s) => !allowed.has(s))) return INVALID;
  return [...asked].sort().join(' ');
}
