// The OpenAPI 3.1 document is generated from the route schemas; this file holds its frame, the
// schemas every route shares (Problem, OAuth error, Microcredits), and the transform that documents what
// the platform adds to every operation (security, error media types, response headers).
import { GATEWAY_VERSION } from '../version.ts';
import { STATUS_CODES } from 'node:http';
import type { FastifyInstance, RouteOptions } from 'fastify';
import type { SwaggerOptions } from '@fastify/swagger';
import { Type } from '@sinclair/typebox';
import { metricsTakeCredential, type Config } from '../config.ts';
import type { PrincipalKind } from '../principal.ts';
import { describeAuth, type AuthRequirement } from './auth.ts';
import { HtmlPage } from './pages.ts';
import { problemMembers } from '../schemas.ts';
import { IDEMPOTENCY_KEY_PATTERN, RELEASE_KEY_PATTERN, RELEASE_KEY_SHAPE } from '../idempotency.ts';
import { MICROCREDITS_PATTERN, UC_DIGITS_MAX } from '../money.ts';
import type { OperationDescription } from '../operations.ts';
import { takesNoBody } from './operation.ts';

export const ProblemSchema = Type.Object(
  {
    ...problemMembers(),
  },
  { $id: 'Problem', additionalProperties: true, description: 'RFC 9457 problem details; some codes add members' },
);

export const OAuthErrorSchema = Type.Object(
  {
    error: Type.String({
      enum: [
        'invalid_request', 'invalid_client', 'invalid_grant', 'invalid_scope', 'invalid_target', 'invalid_redirect_uri',
        'invalid_client_metadata', 'unsupported_grant_type', 'access_denied', 'temporarily_unavailable',
      ],
    }),
    error_description: Type.String(),
  },
  { $id: 'OAuthError' },
);

export const MicrocreditsSchema = Type.String({
  $id: 'Microcredits',
  pattern: MICROCREDITS_PATTERN,
  maxLength: UC_DIGITS_MAX,
  description: 'integer microcredits as a decimal string; 1 credit = 1,000,000 µc = $0.01',
});

export const ProblemRef = Type.Ref('Problem');
export const OAuthErrorRef = Type.Ref('OAuthError');

/** Response schemas for the listed failure statuses, all problem bodies. */
export function problems(...statuses: number[]): Record<number, typeof ProblemRef> {
  return Object.fromEntries(statuses.map((s) => [s, ProblemRef]));
}

export function registerSharedSchemas(app: FastifyInstance): void {
  app.addSchema(ProblemSchema);
  app.addSchema(OAuthErrorSchema);
  app.addSchema(MicrocreditsSchema);
}

export function openApiOptions(config: Config): SwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Agent Credit Gateway',
        version: GATEWAY_VERSION,
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
        description:
          'Software agents pay for and use services with prepaid credit. Amounts are microcredits as decimal strings ' +
          '(1 credit = 1,000,000 µc = $0.01). Timestamps are Unix seconds. Errors are RFC 9457 problem bodies ' +
          '(OAuth routes use the RFC 6749 error body); the error catalogue is at /docs/errors. A JSON body is UTF-8, names a member ' +
          'once per object (RFC 7493) and nests objects and arrays at most 128 levels deep; any other is 400 invalid_input. CORS: the discovery documents ' +
          'and JWKS (/.well-known/…), /oauth/register, /oauth/token and /mcp answer any origin (`Access-Control-Allow-Origin: *`, ' +
          'never with credentials; preflight 204), for browser clients; no other route answers a browser of another origin.',
      },
      servers: [{ url: config.baseUrl }],
      components: { securitySchemes: securitySchemes(config) },
    },
    transform: ({ schema, url, route }) => {
      const documented = documentOperation(
        documentResponseHeaders(
          documentVersioning(documentIdempotency(schema as OperationSchema | undefined, route.config?.operation, route.config?.location === true), route),
          route,
        ),
        url,
        route,
      );
      return documentWildcard(documented, pluginRootUrl(route) ?? url);
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
  };
}

/** The security scheme of each credential kind (see docs/decisions.md "Credential kinds"). */
export const SECURITY_SCHEME_OF: Record<PrincipalKind, string> = {
  human: 'humanSession',
  agent: 'agentToken',
  owner: 'ownerOAuth',
  merchant: 'merchantKey',
  operator: 'operator',
};

function securitySchemes(config: Config) {
  return {
    [SECURITY_SCHEME_OF.human]: {
      type: 'http' as const,
      scheme: 'bearer',
      bearerFormat: 'JWT',
      description: 'H: an ID token of the human identity provider, with a verified email',
    },
    [SECURITY_SCHEME_OF.agent]: {
      type: 'http' as const,
      scheme: 'bearer',
      bearerFormat: 'JWT',
      description: 'A: an identity token of the agent identity provider, or our OAuth access token with scope svc:agent',
    },
    [SECURITY_SCHEME_OF.owner]: {
      type: 'oauth2' as const,
      description: 'O: our OAuth access token (authorization code with PKCE): scope svc:owner acts as the owner; on /mcp, scope svc:agent acts as one agent',
      flows: {
        authorizationCode: {
          authorizationUrl: `${config.baseUrl}/oauth/authorize`,
          tokenUrl: `${config.baseUrl}/oauth/token`,
          scopes: { 'svc:owner': "act as the agents' owner", 'svc:agent': 'act as one agent' },
        },
      },
    },
    [SECURITY_SCHEME_OF.merchant]: {
      type: 'http' as const,
      scheme: 'bearer',
      description: "M: a merchant API key (acg_mk_…); an operation's security requirement lists the key scopes it needs",
    },
    operator: {
      type: 'http' as const,
      scheme: 'bearer',
      description: 'The operator credential (dev: ACG_DATA_DIR/operator-token; live: the one whose SHA-256 is ACG_OPERATOR_TOKEN_SHA256)',
    },
    // Only where /metrics takes it (as health/routes.ts decides): a dev gateway without the setting serves it openly,
    // and a scheme no operation uses is a linter's warning (found from outside).
    ...(metricsTakeCredential(config)
      ? {
          metrics: {
            type: 'http' as const,
            scheme: 'bearer',
            description: "A Prometheus scraper's credential: the one whose SHA-256 is ACG_METRICS_TOKEN_SHA256",
          },
        }
      : {}),
  };
}

type OperationSchema = Record<string, unknown> & { description?: string; response?: Record<string, unknown> };

/** Documents one operation; the route's own schema is left as it is (it still validates and serialises). */
function documentOperation(schema: OperationSchema | undefined, url: string, route: RouteOptions): OperationSchema {
  const requirement = route.config?.auth as AuthRequirement | undefined;
  const limited = !(route.config as { skipRateLimit?: boolean } | undefined)?.skipRateLimit;
  const raw = route.config?.rawBody;
  // A raw body has no schema to validate (the handler reads the bytes): it is documented here, in its media type.
  const described = raw ? { ...schema, body: { type: 'string', format: 'binary', description: raw.description }, consumes: [raw.mediaType] } : schema;
  const replays = route.config?.operation !== undefined && route.config.operation.idempotency.key !== 'none';
  const documented = documentErrorResponses(documentSecurity({ ...described }, requirement), url, checksRequest(described, route), limited, replays);
  return documented.body === undefined ? documented : { ...documented, body: withoutDiscriminators(documented.body) };
}

/**
 * Drops Ajv's `discriminator` hints from a body schema. Ajv uses them to validate only the branch a
 * body names (so its errors point at the right member); OpenAPI's discriminator needs named schemas
 * and a mapping, which Ajv refuses. The document keeps the `oneOf`, whose `const` members already tell
 * the branches apart.
 */
function withoutDiscriminators(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutDiscriminators);
  if (schema === null || typeof schema !== 'object') return schema;
  return Object.fromEntries(Object.entries(schema).filter(([key]) => key !== 'discriminator').map(([key, value]) => [key, withoutDiscriminators(value)]));
}

/**
 * The security requirement from the route's `config.auth`: one alternative per admitted credential kind,
 * merchant keys with their scopes, and `security: []` on public operations (a route with its own
 * credential declares its `security` itself and keeps it). The requirement is also
 * stated once in the description, and 401/403 are declared.
 */
function documentSecurity(schema: OperationSchema, requirement: AuthRequirement | undefined): OperationSchema {
  if (!requirement) return schema.security ? schema : { ...schema, security: [] };
  const security = requirement.kinds.map((kind) =>
    // On /mcp an agent is admitted by our OAuth access token alone (svc:agent, bound to the MCP resource), never by an
    // identity token of its provider, which agentToken also names (found from outside: a generated client sent one).
    kind === 'agent' && requirement.resource === 'mcp'
      ? { [SECURITY_SCHEME_OF.owner]: ['svc:agent'] }
      : { [SECURITY_SCHEME_OF[kind]]: kind === 'merchant' ? [...(requirement.scopes ?? [])] : kind === 'owner' ? ['svc:owner'] : [] },
  );
  return {
    ...schema,
    security,
    description: [schema.description, describeAuth(requirement)].filter(Boolean).join('\n\n'),
    response: { 401: ProblemRef, 403: ProblemRef, ...schema.response },
  };
}

const RETRY_AFTER = { type: 'integer', minimum: 0, description: 'seconds to wait before retrying' };

/**
 * The statuses of refusals an idempotent operation may store under its key and replay: those its effect decides
 * (src/platform/idempotency.ts). A missing or refused credential, a body refused before it is read, a rate limit and a
 * failure of the gateway (5xx) are never stored (found from outside: replayed refusals carried the header, which the
 * document declared on successes only).
 */
const STORED_REFUSALS = (code: number) => code >= 400 && code < 500 && ![401, 413, 415, 429].includes(code);
const REPLAYED_REFUSAL = {
  type: 'string',
  enum: ['true'],
  description: 'present when this is the stored refusal of an earlier request with the same key, replayed (a malformed request is refused afresh each time)',
};

/** Response headers the platform sends with a failure status. */
const ERROR_HEADERS: Partial<Record<number, Record<string, object>>> = {
  401: {
    'WWW-Authenticate': {
      type: 'string',
      description: 'Bearer challenge naming the resource metadata (RFC 9728); error="invalid_token" when a credential was refused',
    },
  },
  403: {
    'WWW-Authenticate': {
      type: 'string',
      description:
        'only when an OAuth access token of the other scope would be let through (an agent\'s token on an owner\'s route, an ' +
        'owner\'s on an agent\'s): Bearer challenge with error="insufficient_scope" and the scope to authorize for (RFC 6750 §3.1)',
    },
  },
  409: { 'Retry-After': { ...RETRY_AFTER, description: 'with idempotency_key_in_use: seconds until the running request is likely done' } },
  429: { 'Retry-After': RETRY_AFTER },
  // Only execute answers 502: its upstream (a mail server busy or refusing logins for now) may say when to come back.
  502: { 'Retry-After': { ...RETRY_AFTER, description: 'when the upstream service said it is busy for now: seconds to wait before retrying' } },
  503: { 'Retry-After': { ...RETRY_AFTER, description: 'when the outage is expected to pass: seconds to wait before retrying' } },
};

/**
 * Whether the platform checks the route's request before its handler runs, and so may answer 400 for it: a path
 * parameter, query, header (an Idempotency-Key) or body with a schema, or a mutating operation's body where it takes
 * none (operation.ts, `refuseUnwantedBody`).
 */
function checksRequest(schema: OperationSchema | undefined, route: RouteOptions): boolean {
  if (['params', 'querystring', 'headers', 'body'].some((part) => schema?.[part] !== undefined)) return true;
  // A GET's or HEAD's body is never read.
  const methods = Array.isArray(route.method) ? route.method : [route.method];
  return takesNoBody(route) && methods.some((method) => method !== 'GET' && method !== 'HEAD');
}

/** The 400 of an operation whose request is checked, when the route declares none itself. */
function requestRefusal(schema: OperationSchema): string {
  const key = (schema.headers as { properties?: Record<string, unknown>; required?: string[] } | undefined);
  const keyRequired = key?.required?.includes('Idempotency-Key') === true;
  return (
    'invalid_input: a path parameter, query parameter, header or body is not what the operation takes (`errors` names each ' +
    'violation; a route that takes no body refuses one with members)' +
    (keyRequired ? '; idempotency_required: the Idempotency-Key header is missing' : '')
  );
}

/**
 * Failure responses as they are sent: problem bodies as `application/problem+json`, OAuth error bodies
 * (under /oauth/) as `application/json`, with the headers that come with their status.
 */
function documentErrorResponses(schema: OperationSchema, url: string, checked: boolean, limited: boolean, replays: boolean): OperationSchema {
  const isOAuth = url.startsWith('/oauth/');
  const mediaType = isOAuth ? 'application/json' : 'application/problem+json';
  // A route without response schemas is documented as swagger does by default: one 200.
  const declared: Record<string, unknown> = { ...(schema.response ?? { 200: { description: 'Default Response' } }), '4XX': isOAuth ? OAuthErrorRef : ProblemRef };
  // An operation that checks its request answers 400 for it: declared, so a generated client has a typed 400 (found from
  // outside: about 50 operations answered a 400 their document listed only through 4XX).
  if (checked && declared['400'] === undefined) {
    declared['400'] = { description: requestRefusal(schema), content: { [mediaType]: { schema: isOAuth ? OAuthErrorRef : ProblemRef } } };
  }
  // Every route that reads or writes the database may answer 503 while it cannot (found from outside: 73 operations
  // answered one their document did not list, then /mcp, whose credentials are checked against the database, and the
  // dev zone's routes).
  // A rate-limited route declares its 429 with Retry-After, for a generated client to read (found from outside: no
  // response declared the header); the routes the limit skips (probes, /metrics, /openapi.json) never answer it.
  if (limited && declared['429'] === undefined) {
    declared['429'] = { description: RATE_REFUSAL, content: { [mediaType]: { schema: isOAuth ? OAuthErrorRef : ProblemRef } } };
  }
  // An operation that takes a body may refuse it before reading it: too large, or of a type it does not read (found
  // from outside: most operations answered 413 and 415 their document listed only through 4XX).
  if (schema.body !== undefined) {
    const error = isOAuth ? 'invalid_request' : undefined;
    if (declared['413'] === undefined) {
      declared['413'] = { description: `${error ?? 'payload_too_large'}: the body is over the size limit (ACG_BODY_LIMIT_BYTES); nothing ran`, content: { [mediaType]: { schema: isOAuth ? OAuthErrorRef : ProblemRef } } };
    }
    if (declared['415'] === undefined) {
      declared['415'] = { description: `${error ?? 'unsupported_media_type'}: the body is not of a media type this operation reads (its requestBody); nothing ran`, content: { [mediaType]: { schema: isOAuth ? OAuthErrorRef : ProblemRef } } };
    }
  }
  if (NEEDS_DATABASE.test(url) && declared['503'] === undefined) {
    declared['503'] = { description: STORAGE_REFUSAL, content: { [mediaType]: { schema: isOAuth ? OAuthErrorRef : ProblemRef } } };
  }
  // Every other route but the liveness probe answers 503 from the front door while the gateway starts or stops, a page
  // as a page (found from outside: 16 routes, the discovery documents among them, answered a 503 they did not list).
  if (url !== '/healthz' && declared['503'] === undefined) {
    const page = Object.values(declared).some((response) => (response as { content?: Record<string, unknown> }).content?.['text/html'] !== undefined);
    declared['503'] = page ? HtmlPage(STARTING_OR_STOPPING) : { description: STARTING_OR_STOPPING, content: { [mediaType]: { schema: isOAuth ? OAuthErrorRef : ProblemRef } } };
  }
  const response = Object.fromEntries(
    Object.entries(declared).map(([status, body]) => {
      const code = status === '4XX' ? 400 : Number(status);
      if (!(code >= 400)) return [status, body];
      const headers =
        status === '4XX'
          ? undefined
          : { ...ERROR_HEADERS[code], ...(replays && STORED_REFUSALS(code) ? { 'Idempotent-Replayed': REPLAYED_REFUSAL } : {}) };
      const given = body as { description?: string; content?: object };
      const description = status === '4XX' ? platformRefusals(limited) : (given.description ?? STATUS_CODES[code] ?? 'Error');
      const content = given.content ?? { [mediaType]: { schema: body } };
      return [status, { description, ...(headers && Object.keys(headers).length > 0 && { headers }), content }];
    }),
  );
  return { ...schema, response };
}

/** The routes that need the database: the API, x402, OAuth, MCP and the dev zone (not the documents, pages and probes). */
const NEEDS_DATABASE = /^\/(v1|x402|oauth|dev\/dns)\/|^\/(mcp|dev\/dns-query)$/;

/** The 503 of every route that needs the database. */
const STORAGE_REFUSAL =
  'storage_unavailable: the database did not answer in time (or this instance has no free connection to it), or the gateway ' +
  'is starting (waiting for its database) or stopping; nothing changed that a retry with the same Idempotency-Key would not ' +
  'find. overloaded: too many calls wait. Retry after Retry-After. Under /oauth/, temporarily_unavailable.';

/** The 503 of every other route but /healthz: the front door's, before the gateway is ready and once it stops. */
const STARTING_OR_STOPPING =
  'storage_unavailable: the gateway is starting (waiting for its database) or stopping (retry on another instance); ' +
  'retry after Retry-After.';

/** What every route may answer before its own checks run (the `4XX` response of every operation). */
function platformRefusals(limited: boolean): string {
  return (
    'Refusals every route may give: 400 invalid_input (text holding NUL or a lone surrogate, bad percent-encoding), ' +
    "403 forbidden on a dev gateway (ACG_MODE=dev) for a browser's request (Origin or Sec-Fetch-Site) whose Host header names neither an IP address, localhost nor ACG_BASE_URL's host (DNS rebinding; under /oauth/ 400 invalid_request), " +
    `405 method_not_allowed, 414 uri_too_long, ${limited ? '429 rate_limited (Retry-After), ' : ''}431 headers_too_large; under /oauth/ the same ` +
    `statuses carry RFC 6749's error body instead (\`invalid_request\`${limited ? '; `temporarily_unavailable` for 429' : ''})` +
    (limited ? '' : '. This route is not rate-limited.')
  );
}

/** The 429 of every rate-limited route. */
const RATE_REFUSAL =
  'rate_limited: more requests than the limit allows in the window, from this client address (ACG_RATE_LIMIT_PER_ADDRESS) or by ' +
  "this account's credentials (ACG_RATE_LIMIT_PER_PRINCIPAL); replays of stored answers count too. Retry after Retry-After. " +
  'Under /oauth/, temporarily_unavailable.';

const IDEMPOTENCY_KEY_DESCRIPTIONS = {
  required: 'Required. The same key and input answer the stored outcome of the first request; another input under the key is 409 idempotency_key_reused.',
  optional: 'Optional. When sent, the same key and input answer the stored outcome of the first request.',
};

/**
 * A key's pattern that also takes its RFC 8941 quoted form (`"…"`), which the header accepts as the same key (found
 * from outside: a client checking parameters against the document refused what the gateway took). A release key's
 * pattern takes quotes already: they are visible characters.
 */
const QUOTED_TOO = (pattern: RegExp) => {
  const bare = pattern.source.replace(/^\^/, '').replace(/\$$/, '');
  return `^(?:${bare}|"${bare}")$`;
};

/**
 * The documentation of a route that is a face of an operation, from the operation's definition (never from
 * header validation, so a missing key keeps its own 400): `operationId` is the operation name; the
 * `Idempotency-Key` header parameter with its rule; `Idempotent-Replayed` on the success responses of an
 * idempotent operation; `Location` on a 201 that names the created resource.
 */
export function documentIdempotency(schema: OperationSchema | undefined, operation: OperationDescription | undefined, location: boolean): OperationSchema | undefined {
  if (!operation || !schema) return schema;
  const documented: OperationSchema = { ...schema, operationId: schema.operationId ?? operation.name };
  const { key, rule, member } = operation.idempotency;
  if (key === 'none') return documented;
  // A derived key (x402's jti) is named by the request itself: no header to document.
  if (key !== 'derived') {
    documented.headers = {
      type: 'object',
      properties: {
        'Idempotency-Key': {
          type: 'string',
          ...(rule === 'release' ? { minLength: 1, maxLength: 255, pattern: RELEASE_KEY_PATTERN.source } : { pattern: QUOTED_TOO(IDEMPOTENCY_KEY_PATTERN) }),
          description:
            `${IDEMPOTENCY_KEY_DESCRIPTIONS[key]} ${rule === 'release' ? RELEASE_KEY_SHAPE : 'For example a UUID'}; the RFC 8941 quoted form is accepted as the same key.` +
            (member ? ` The body member \`${member}\` may carry it instead (both sent: they must be equal).` : '') +
            // An optional key is never missing: only a required one has a refusal for its absence.
            (key === 'required'
              ? ` Missing: 400 ${operation.idempotency.missingCode ?? 'idempotency_required'}; malformed: 400 invalid_input.`
              : ' Malformed: 400 invalid_input.'),
        },
      },
      ...(key === 'required' && !member ? { required: ['Idempotency-Key'] } : {}),
    };
  }
  const responses = (schema.response ?? {}) as Record<string, Record<string, unknown>>;
  documented.response = Object.fromEntries(
    Object.entries(responses).map(([status, response]) => {
      if (!/^2\d\d$/.test(status)) return [status, response];
      const headers: Record<string, unknown> = {
        'Idempotent-Replayed': { type: 'string', enum: ['true'], description: 'present when this is the stored outcome of an earlier request with the same key' },
      };
      if (status === '201' && location) headers.Location = { type: 'string', format: 'uri-reference', description: 'the created resource' };
      return [status, { ...response, headers }];
    }),
  );
  return documented;
}

/**
 * A versioned route (config `versioned`, versions.ts): its 200 documents the `ETag` naming the version shown, and a
 * write documents `If-Match`, which it reads itself (never header validation, so its refusals keep their words).
 * `{ tagFrom }`: the write's If-Match only, its 200 showing another representation (no ETag), the tag being what a GET
 * of `tagFrom` answers.
 */
function documentVersioning(schema: OperationSchema | undefined, route: RouteOptions): OperationSchema | undefined {
  const versioned = route.config?.versioned;
  if (!schema || !versioned) return schema;
  const tagFrom = versioned === true ? undefined : versioned.tagFrom;
  const response = (schema.response ?? {}) as Record<string, Record<string, unknown>>;
  const ok = response['200'] ?? {};
  const documented: OperationSchema = {
    ...schema,
    response:
      tagFrom !== undefined
        ? { ...response }
        : { ...response, 200: { ...ok, headers: { ...(ok.headers as object | undefined), ETag: { type: 'string', description: 'the version shown, as a strong entity tag: "<version>"' } } } },
  };
  if (route.method === 'GET') return documented;
  documented.response = {
    ...documented.response,
    412: Type.Object(
      {
        type: Type.String(),
        title: Type.String(),
        status: Type.Integer({ const: 412 }),
        code: Type.String({ const: 'precondition_failed' }),
        detail: Type.String(),
        currentVersion: Type.Integer({ minimum: 1, description: 'the version in force: read it again and make the change on it' }),
      },
      { description: 'precondition_failed: another version is in force (If-Match named an older one); nothing changed', additionalProperties: true },
    ),
  };
  const headers = (schema.headers ?? { type: 'object', properties: {} }) as { properties?: Record<string, unknown> };
  documented.headers = {
    ...headers,
    properties: {
      ...headers.properties,
      'If-Match': {
        type: 'string',
        description:
          `The ETag ${tagFrom === undefined ? 'a GET' : `GET ${tagFrom}`} answered ("<version>"), or *: the change is made only while that version is in force; another answers 412 ` +
          'precondition_failed with `currentVersion`. A weak tag, a list, or a tag that names no version is 400 invalid_input.',
      },
      'If-None-Match': {
        type: 'string',
        description: 'Not taken (the resource always exists, so it could guard nothing): any value is 400 invalid_input. Send If-Match.',
      },
    },
  };
  return documented;
}


/**
 * Response headers a route sends beyond those the platform documents (`config.responseHeaders`: a redirect's
 * Location and cookie, a stream's X-Accel-Buffering), added to the responses they come with.
 */
function documentResponseHeaders(schema: OperationSchema | undefined, route: RouteOptions): OperationSchema | undefined {
  const sent = route.config?.responseHeaders;
  if (!schema || !sent) return schema;
  const response = (schema.response ?? {}) as Record<string, Record<string, unknown>>;
  return {
    ...schema,
    response: {
      ...response,
      ...Object.fromEntries(
        Object.entries(sent).map(([status, headers]) => [status, { ...response[status], headers: { ...(response[status]?.headers as object | undefined), ...headers } }]),
      ),
    },
  };
}

/**
 * A wildcard route (`/console/*`, which answers every path under /console/ with the console's shell) is documented as
 * the path parameter `path`: the swagger plugin names it `{*}`, which no client generator takes as a name.
 */
function documentWildcard(schema: OperationSchema, url: string): { schema: OperationSchema; url: string } {
  if (!url.endsWith('/*')) return { schema, url };
  const params = schema.params as { properties?: Record<string, unknown>; required?: string[] } | undefined;
  const wildcard = params?.properties?.['*'] ?? { type: 'string' };
  return {
    schema: { ...schema, params: { type: 'object', properties: { path: wildcard }, required: ['path'] } },
    url: `${url.slice(0, -1)}:path`,
  };
}

/**
 * A plugin's root route (Swagger UI's `/` under the prefix /docs) is registered at /docs and at /docs/ with one options
 * object, whose URL is the second's when the document is built: it is documented at the first, the page's address.
 */
function pluginRootUrl(route: RouteOptions): string | undefined {
  const { prefix, routePath } = route as RouteOptions & { prefix?: string; routePath?: string };
  return prefix && routePath === '/' ? prefix : undefined;
}
