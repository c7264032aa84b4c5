// HTTP edge of the OAuth 2.0 authorization server: registration, authorization start, consent page,
// identity choice, token endpoint and discovery. Each step's rules live in its own file; this file
// only translates requests and responses. Form bodies are accepted in this plugin's scope only.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import formbody from '@fastify/formbody';
import { Type, type Static } from '@sinclair/typebox';
import type { CredentialVerifier } from '../identity/verifier.ts';
import type { Resource } from '../platform/access-tokens.ts';
import { undecodedBodyProblem } from '../platform/http/body-as-sent.ts';
import { OAuthErrorRef, problems } from '../platform/http/openapi.ts';
import { targetPath } from '../platform/http/render-error.ts';
import { ApiError } from '../platform/errors.ts';
import { authorize } from './authorize.ts';
import { CONSENT_TOKEN_HEADER, readBrowserSecret, setCookieHeader } from './browser-binding.ts';
import { consent } from './consent.ts';
import { devLoginRoutes } from './dev-login-routes.ts';
import { temporarilyUnavailable, unsupportedMediaType } from './errors.ts';
import { CLIENTS_MAX, REGISTRATIONS_PER_ADDRESS_PER_WINDOW, REMEMBERED_CONSENT_LIFETIME_S } from './limits.ts';
import { authorizationServerMetadata, isIssuerPath, protectedResourceMetadata, resourceAtPath } from './metadata.ts';
import { HtmlPage, newNonce, pageHeaders } from '../platform/http/pages.ts';
import { consentPage, errorPage } from './pages.ts';
import { registerClient, validateClientMetadata } from './register.ts';
import * as schemas from './schemas.ts';
import { checkSelectCaller, deny, select } from './select.ts';
import { revokeToken } from './revoke.ts';
import { exchangeCode } from './token.ts';

/** Why the OAuth endpoints are not operations (see platform/http/app.ts, assertMutationIsOperation). */
const OAUTH_STEP = 'an OAuth protocol step (RFC 6749, 7591): its own strict checks in RFC order and OAuth error bodies';

export interface OAuthRouteDeps {
  verifier: CredentialVerifier;
}

/**
 * What the two pages a person's browser opens (authorize, consent) answer when the gateway cannot serve them: a page
 * that says so, with Retry-After, not OAuth's JSON error body (found from outside: the console's sign-in showed raw
 * JSON while the database was down). The client cannot be told by a redirect: without the database, its redirect URI
 * cannot be checked.
 */
const PAGE_REFUSALS = {
  429: HtmlPage('too many requests from this address or account: try again after Retry-After'),
  503: HtmlPage('the gateway cannot serve the page now (its database is unavailable, or it is starting or stopping): try again after Retry-After'),
};

const FORM = 'application/x-www-form-urlencoded';
const JSON_TYPE = 'application/json';
const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' };
const DISCOVERY_CACHE = { 'cache-control': 'public, max-age=300' };

function mediaType(request: FastifyRequest): string {
  return (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
}

/** A path a wildcard route takes but names nothing: the 404 of a path no route takes (not the 405 its HEAD twin would give). */
function noRoute(request: FastifyRequest): ApiError {
  return new ApiError('not_found', { detail: `no route ${request.method} ${targetPath(request.url)}` });
}

/** Refuses any other body type before it is parsed, so a JSON body at the token endpoint is a 415. */
function requireMediaType(expected: string) {
  return async (request: FastifyRequest) => {
    if (mediaType(request) !== expected) throw unsupportedMediaType(`send the body as ${expected}`);
  };
}

/**
 * A form body is read as it was sent, as a JSON body is (platform/http/app.ts): one with a Content-Encoding, or
 * labelled with a charset other than UTF-8, is refused rather than read as UTF-8 text. @fastify/formbody reads
 * any body as UTF-8, so a gzip body was refused for its control characters and a plain one labelled `br` was
 * exchanged for a token (found from outside).
 */
async function requireFormAsSent(request: FastifyRequest): Promise<void> {
  const undecoded = undecodedBodyProblem(request.headers, 'form');
  if (undecoded !== undefined) throw unsupportedMediaType(undecoded);
}

function rawQuery(request: FastifyRequest): string {
  const at = request.url.indexOf('?');
  return at < 0 ? '' : request.url.slice(at + 1);
}

function sendPage(reply: FastifyReply, status: number, render: (nonce: string) => string): FastifyReply {
  const nonce = newNonce();
  return reply.code(status).headers(pageHeaders(nonce)).send(render(nonce));
}

export function oauthRoutes(deps: OAuthRouteDeps) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const { gateway } = app;
    await app.register(formbody);
    // RFC 6749 §5.1: every token-bearing or error answer is uncacheable, for HTTP/1.0 caches too.
    app.addHook('onSend', async (_request, reply) => {
      if (reply.getHeader('cache-control') === 'no-store') reply.header('pragma', 'no-cache');
    });
    const tags = ['oauth'];

    app.post('/oauth/register', {
      config: { notAnOperation: OAUTH_STEP, oauthBodyError: 'invalid_client_metadata' },
      onRequest: [
        async (request) => {
          // Every attempt counts: registration is anonymous, so this is the brake on abuse (RFC 7591 §5).
          const decision = gateway.rateLimiter.hit(`oauth-register:${request.ip}`, REGISTRATIONS_PER_ADDRESS_PER_WINDOW);
          if (!decision.allowed) {
            // rate_limited as every limit is (its log line's code), answered in OAuth's form (429 temporarily_unavailable).
            throw new ApiError('rate_limited', {
              detail: `more than ${decision.limit} registration requests from this address (${request.ip}) in ${gateway.config.rateLimit.windowS} s (refused ones count too)`,
              retryAfterS: decision.retryAfterS,
            });
          }
        },
        requireMediaType(JSON_TYPE),
      ],
      attachValidation: true,
      schema: { operationId: 'registerOAuthClient',
        tags,
        summary: 'Register a public OAuth client (RFC 7591)',
        description:
          `Public clients only: token_endpoint_auth_method is "none". ${REGISTRATIONS_PER_ADDRESS_PER_WINDOW} registrations per address per ` +
          `rate-limit window; at most ${CLIENTS_MAX} registered clients, the console's own not counted (429 temporarily_unavailable beyond). Redirect URI problems answer ` +
          'invalid_redirect_uri, any other metadata problem invalid_client_metadata.',
        body: schemas.ClientRegistrationRequest,
        response: {
          201: Type.Ref(schemas.ClientRegistration),
          400: OAuthErrorRef,
          415: OAuthErrorRef,
          // Its own limits, said where a client reads them (found from outside: "Too Many Requests" named neither).
          429: {
            description:
              `temporarily_unavailable: more than ${REGISTRATIONS_PER_ADDRESS_PER_WINDOW} registration requests from this address in the rate-limit window ` +
              `(ACG_RATE_LIMIT_WINDOW_S; refused ones count too), or the gateway's per-address rate limit, or it holds its maximum of ${CLIENTS_MAX} ` +
              'registered clients (Retry-After 3600; clients that never obtained a token are removed a day after registering). Retry after Retry-After.',
            content: { 'application/json': { schema: OAuthErrorRef } },
          },
          503: OAuthErrorRef,
        },
      },
      handler: async (request, reply) => {
        if (!gateway.signing.configured) throw temporarilyUnavailable(503, `the gateway cannot issue tokens: ${gateway.signing.whyUnconfigured}`);
        // Validated by hand (not by the schema) so each rule answers its own RFC 7591 error code.
        const record = await registerClient(gateway, validateClientMetadata(request.body));
        return reply.code(201).headers(NO_STORE).send(record);
      },
    });

    app.get('/oauth/authorize', {
      config: {
        responseHeaders: {
          303: {
            Location: { type: 'string', description: 'the consent page, or the client\'s redirect_uri with code or error, state and iss' },
            'Set-Cookie': { type: 'string', description: 'the browser-binding cookie (HttpOnly, SameSite=Lax), when this browser has none yet' },
          },
        },
      },
      // The rules (and which failures may be redirected) are applied by hand, in RFC order.
      attachValidation: true,
      schema: { operationId: 'startAuthorization',
        tags,
        summary: 'Start an authorization request (authorization code + PKCE S256)',
        description:
          'Unknown client_id or unregistered redirect_uri: a 400 HTML page, never a redirect. Other errors: 303 to the ' +
          'redirect_uri with error, error_description, state and iss (RFC 9207): invalid_request (missing or repeated ' +
          'parameter, PKCE missing or not S256, an unknown prompt, a response_mode other than query), request_not_supported (a request object), ' +
          'request_uri_not_supported, unsupported_response_type, invalid_target (resource), ' +
          'invalid_scope, consent_required (prompt=none without a remembered consent), temporarily_unavailable (no signing key). Success: 303 to ' +
          'the consent page, its `request_id` the request signed by the gateway (nothing is stored before the person acts), with a browser-binding cookie; or, unless prompt asks for the page, when this browser ' +
          `consented to this client for exactly this scope and resource within the last ${REMEMBERED_CONSENT_LIFETIME_S / 3600} h ` +
          '(a remembered consent, not revoked), 303 straight back to the redirect_uri with code, state and iss, without the page. ' +
          'A live gateway served over plain http remembers no consent (its cookie would be every port of the host\'s): the page every time.',
        querystring: schemas.AuthorizeQuery,
        response: {
          303: schemas.SeeOther('to the consent page, or back to the client with an error'),
          400: HtmlPage('the request cannot be trusted to the redirect URI'),
          ...PAGE_REFUSALS,
        },
      },
      handler: async (request, reply) => {
        const { baseUrl } = gateway.config;
        const outcome = await authorize(gateway, rawQuery(request), readBrowserSecret(request.headers.cookie, baseUrl));
        if (outcome.kind === 'show') return sendPage(reply, outcome.status, (nonce) => errorPage(nonce, outcome.error, outcome.description));
        reply.headers({ 'referrer-policy': 'no-referrer', 'cache-control': 'no-store' });
        if (outcome.kind === 'consent' && outcome.newBrowser) reply.header('set-cookie', setCookieHeader(baseUrl, outcome.browserSecret));
        return reply.redirect(outcome.location, 303);
      },
    });

    app.get('/oauth/consent', {
      attachValidation: true,
      schema: { operationId: 'getConsentPage',
        tags,
        summary: 'The consent page: choose the identity provider and sign in',
        description:
          'HTML for the browser that started the authorization request. Sends a CSP with a script nonce and ' +
          "frame-ancestors 'none', X-Frame-Options DENY and Referrer-Policy no-referrer.",
        querystring: schemas.ConsentQuery,
        response: { 200: HtmlPage('the consent page'), 400: HtmlPage('unknown, expired or used request'), 403: HtmlPage('started in another browser'), ...PAGE_REFUSALS },
      },
      handler: async (request, reply) => {
        const requestId = new URLSearchParams(rawQuery(request)).get('request_id') ?? undefined;
        const outcome = await consent(gateway, requestId, readBrowserSecret(request.headers.cookie, gateway.config.baseUrl), (choice) => deps.verifier.provider(choice));
        if (outcome.kind === 'show') return sendPage(reply, outcome.status, (nonce) => errorPage(nonce, outcome.error, outcome.description));
        return sendPage(reply, 200, (nonce) => consentPage(nonce, outcome.view));
      },
    });

    app.post('/oauth/select', {
      config: {
        notAnOperation: OAUTH_STEP,
        responseHeaders: { 200: { 'Set-Cookie': { type: 'string', description: 'the browser-binding cookie, renewed so that it outlives the remembered consent' } } },
      },
      onRequest: [
        async (request) => checkSelectCaller(gateway, request.headers.origin, rawQuery(request) !== ''),
        requireMediaType(JSON_TYPE),
      ],
      schema: { operationId: 'selectIdentityProvider',
        tags,
        summary: 'Choose the identity provider for a pending authorization request',
        description:
          'Called by the consent page. `Origin` must equal the gateway origin exactly (403 otherwise, also when missing); ' +
          'no query parameters (credentials are never accepted in the query string: 400). `Authorization: Bearer <identity token>` ' +
          `of the chosen provider, the browser-binding cookie and the page's \`${CONSENT_TOKEN_HEADER}\` header are required. ` +
          'identityProvider `human` needs a human owner session (an agent identity is refused, 403) and grants svc:owner; ' +
          '`agent` needs an agent identity and grants svc:agent. 403 access_denied: untrusted origin, wrong actor, invalid ' +
          'session, scope mismatch, or a call not bound to the consent page. 400 invalid_request: unknown, expired or already ' +
          'used request (consent is single use). A consent given here is remembered for this browser (the cookie is renewed): ' +
          `for ${REMEMBERED_CONSENT_LIFETIME_S / 3600} h the same client, scope and resource are re-authorized without the page ` +
          '(revoke with DELETE /v1/owner/oauth-grants/{clientId}); not by a live gateway served over plain http, whose page asks each time.',
        body: schemas.SelectBody,
        response: { 200: schemas.SelectResponse, 400: OAuthErrorRef, 403: OAuthErrorRef, 415: OAuthErrorRef, 503: OAuthErrorRef },
      },
      handler: async (request, reply) => {
        const body = request.body as Static<typeof schemas.SelectBody>;
        const consentToken = request.headers[CONSENT_TOKEN_HEADER];
        const browserSecret = readBrowserSecret(request.headers.cookie, gateway.config.baseUrl);
        const result = await select(gateway, deps.verifier, {
          authorization: request.headers.authorization,
          browserSecret,
          consentToken: typeof consentToken === 'string' ? consentToken : undefined,
          requestId: body.requestId,
          identityProvider: body.identityProvider as 'human' | 'agent',
        });
        // The consent is remembered for this browser: its cookie is renewed so it outlives the consent.
        return reply.headers({ ...NO_STORE, 'set-cookie': setCookieHeader(gateway.config.baseUrl, browserSecret!) }).send(result);
      },
    });

    app.post('/oauth/deny', {
      config: { notAnOperation: OAUTH_STEP },
      onRequest: [
        async (request) => checkSelectCaller(gateway, request.headers.origin, rawQuery(request) !== ''),
        requireMediaType(JSON_TYPE),
      ],
      schema: { operationId: 'denyAuthorization',
        tags,
        summary: 'Decline a pending authorization request (the consent page\'s Decline)',
        description:
          'Called by the consent page when the person declines: answers the registered callback with `error=access_denied`, ' +
          '`error_description`, `state` and `iss` (RFC 6749 §4.1.2.1), for the page to go to, so the client learns at once; the ' +
          'request is then used. Bound as select is: `Origin` the gateway origin, no query, the browser-binding cookie and the ' +
          `page's \`${CONSENT_TOKEN_HEADER}\` header (403 access_denied otherwise); no sign-in. 400 invalid_request: unknown, expired or already used request.`,
        body: schemas.DenyBody,
        response: { 200: schemas.DenyResponse, 400: OAuthErrorRef, 403: OAuthErrorRef, 415: OAuthErrorRef, 503: OAuthErrorRef },
      },
      handler: async (request, reply) => {
        const body = request.body as Static<typeof schemas.DenyBody>;
        const consentToken = request.headers[CONSENT_TOKEN_HEADER];
        const result = await deny(gateway, {
          browserSecret: readBrowserSecret(request.headers.cookie, gateway.config.baseUrl),
          consentToken: typeof consentToken === 'string' ? consentToken : undefined,
          requestId: body.requestId,
        });
        return reply.headers(NO_STORE).send(result);
      },
    });

    app.post('/oauth/token', {
      config: { notAnOperation: OAUTH_STEP },
      onRequest: [requireMediaType(FORM), requireFormAsSent],
      // Every failure must answer its own OAuth error code, so the form is checked by hand in RFC order.
      attachValidation: true,
      schema: { operationId: 'exchangeAuthorizationCode',
        tags,
        summary: 'Exchange an authorization code for an access token (PKCE S256)',
        description:
          'Form-encoded only, in UTF-8 and without a Content-Encoding (415 invalid_request otherwise: a body is read as sent, ' +
          'not decoded); all six parameters required. Errors: invalid_request (missing or repeated ' +
          'parameter, malformed code_verifier), unsupported_grant_type, invalid_client (unknown client_id; client credentials sent, since ' +
          'every client is public: 401 with WWW-Authenticate for an Authorization header, 400 for client_secret or client_assertion in the body), invalid_grant ' +
          '(code unknown, expired, used, of another client; PKCE mismatch; missing code_verifier; redirect_uri mismatch), ' +
          'invalid_target (resource not ours or not the code\'s). A used code presented again also revokes the token it ' +
          'issued. 503 temporarily_unavailable without a signing key or storage. No refresh tokens.',
        body: { content: { [FORM]: { schema: schemas.TokenRequest } } },
        response: { 200: Type.Ref(schemas.TokenResponse), 400: OAuthErrorRef, 401: OAuthErrorRef, 415: OAuthErrorRef, 503: OAuthErrorRef },
      },
      handler: async (request, reply) => reply.headers(NO_STORE).send(await exchangeCode(gateway, request.body, request.headers.authorization)),
    });

    app.post('/oauth/revoke', {
      config: { notAnOperation: OAUTH_STEP },
      onRequest: [requireMediaType(FORM), requireFormAsSent],
      attachValidation: true,
      schema: { operationId: 'revokeToken',
        tags,
        summary: 'Revoke an access token and the grant behind it (RFC 7009), e.g. when its user signs out',
        description:
          'Form-encoded only, as the token endpoint. `token` and `client_id` required (every client is public: no secret, no ' +
          'Authorization header); `token_type_hint` is accepted and ignored (only access tokens are issued). Revoking one of our ' +
          "access tokens revokes the grant it came from, for the token's owner or agent: the consents remembered for that client " +
          '(every browser), so its next authorization shows the consent page again and prompt=none answers consent_required; ' +
          'its codes not yet exchanged; and every live access token it holds for that owner or agent (401 invalid_token on every ' +
          'instance once this answers). 200 with an empty body, also for a token that is expired, malformed or not ours (RFC 7009 ' +
          '§2.2: nothing to revoke). Errors: invalid_request (missing or repeated parameter; a token issued to another client), ' +
          'invalid_client (unknown client_id; client credentials sent: 401 for an Authorization header, 400 in the body). The ' +
          'owner revokes a client without its token with DELETE /v1/owner/oauth-grants/{clientId}.',
        body: { content: { [FORM]: { schema: schemas.RevokeRequest } } },
        response: { 200: { description: 'revoked, or nothing to revoke (empty body)', type: 'null' }, 400: OAuthErrorRef, 401: OAuthErrorRef, 415: OAuthErrorRef, 503: OAuthErrorRef },
      },
      handler: async (request, reply) => {
        await revokeToken(gateway, request.body, request.headers.authorization);
        return reply.code(200).headers(NO_STORE).send();
      },
    });

    const discovery = ['discovery'];
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      app.get(path, {
        schema: {
          operationId: path.endsWith('openid-configuration') ? 'getOpenIdConfiguration' : 'getAuthorizationServerMetadata',
          tags: discovery,
          summary: path.endsWith('openid-configuration')
            ? 'Authorization server metadata at the OpenID configuration path (probed by MCP clients)'
            : 'Authorization server metadata (RFC 8414)',
          response: { 200: Type.Ref(schemas.AuthorizationServerMetadata) },
        },
        handler: async (_request, reply) => reply.headers(DISCOVERY_CACHE).send(authorizationServerMetadata(gateway.config.baseUrl)),
      });
    }
    const resources: Array<[string, Resource, string]> = [
      ['/.well-known/oauth-protected-resource', 'api', 'getProtectedResourceMetadata'],
      ['/.well-known/oauth-protected-resource/mcp', 'mcp', 'getMcpProtectedResourceMetadata'],
      ['/mcp/.well-known/oauth-protected-resource', 'mcp', 'getMcpProtectedResourceMetadataAtMcpPath'],
    ];
    for (const [path, resource, operationId] of resources) {
      app.get(path, {
        schema: {
          operationId,
          tags: discovery,
          summary: `Protected resource metadata (RFC 9728) for ${resource === 'mcp' ? 'the MCP endpoint' : 'the API'}`,
          response: { 200: Type.Ref(schemas.ProtectedResourceMetadata) },
        },
        handler: async (_request, reply) => reply.headers(DISCOVERY_CACHE).send(protectedResourceMetadata(gateway.config.baseUrl, resource)),
      });
    }

    // A base URL with a path (`https://host/gw`, behind a proxy that strips /gw): RFC 8414 §3.1 and RFC 9728 §3.1 put the
    // path after the well-known segment, outside /gw, so a strict client asks /.well-known/oauth-authorization-server/gw
    // and /.well-known/oauth-protected-resource/gw/mcp (found from outside, bb119: 404, and oauth4webapi could not
    // discover the server). The proxy forwards them unchanged (docs/operations.md); the path is compared as sent.
    const issuerPathNote =
      "Served only when the base URL has a path (`{base_url}` = `https://host/gw`, behind a proxy that strips /gw), at that path " +
      'as written after the well-known segment (RFC 8414 §3.1): e.g. /gw. Any other path is 404.';
    for (const [wellKnown, operationId] of [
      ['/.well-known/oauth-authorization-server', 'getAuthorizationServerMetadataAtIssuerPath'],
      ['/.well-known/openid-configuration', 'getOpenIdConfigurationAtIssuerPath'],
    ] as const) {
      app.get(`${wellKnown}/*`, {
        schema: {
          operationId,
          tags: discovery,
          summary: `Authorization server metadata at ${wellKnown}, the issuer's path inserted (RFC 8414 §3.1)`,
          description: `The document of ${wellKnown}. ${issuerPathNote}`,
          params: Type.Object({ '*': Type.String({ description: "the issuer's path, without its leading `/`" }) }),
          response: { 200: Type.Ref(schemas.AuthorizationServerMetadata), ...problems(404) },
        },
        handler: async (request, reply) => {
          const { baseUrl } = gateway.config;
          if (!isIssuerPath(baseUrl, targetPath(request.url).slice(wellKnown.length))) throw noRoute(request);
          return reply.headers(DISCOVERY_CACHE).send(authorizationServerMetadata(baseUrl));
        },
      });
    }
    const resourceWellKnown = '/.well-known/oauth-protected-resource';
    app.get(`${resourceWellKnown}/*`, {
      schema: {
        operationId: 'getProtectedResourceMetadataAtResourcePath',
        tags: discovery,
        summary: "Protected resource metadata (RFC 9728) at the resource's path inserted (RFC 9728 §3.1)",
        description:
          "The API's document at /.well-known/oauth-protected-resource{base path}, the MCP endpoint's at " +
          '/.well-known/oauth-protected-resource{base path}/mcp (`{base_url}` = `https://host/gw`: /gw and /gw/mcp), as ' +
          'strict clients build them from the resource URI. Served only when the base URL has a path; any other path is 404.',
        params: Type.Object({ '*': Type.String({ description: "the resource's path, without its leading `/`" }) }),
        response: { 200: Type.Ref(schemas.ProtectedResourceMetadata), ...problems(404) },
      },
      handler: async (request, reply) => {
        const { baseUrl } = gateway.config;
        const resource = resourceAtPath(baseUrl, targetPath(request.url).slice(resourceWellKnown.length));
        if (resource === undefined) throw noRoute(request);
        return reply.headers(DISCOVERY_CACHE).send(protectedResourceMetadata(baseUrl, resource));
      },
    });

    await app.register(devLoginRoutes(deps.verifier));
  };
}
