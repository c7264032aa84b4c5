// The HTTP edge shared by every feature: request ids, logging without secrets, body limits and
// content types, problem+json / OAuth error rendering, 404/405, per-address rate limits, metrics, CORS (cors.ts).
import Fastify, { type FastifyBaseLogger, type FastifyContextConfig, type FastifyError, type FastifyInstance, type FastifyPluginAsync, type FastifyReply, type FastifyRequest } from 'fastify';
import swagger from '@fastify/swagger';
import AjvCompiler from '@fastify/ajv-compiler';
import SerializerCompiler from '@fastify/fast-json-stringify-compiler';
import FindMyWay from 'find-my-way';
import type { Gateway } from '../gateway.ts';
import { countedByOperation, type OperationDescription } from '../operations.ts';
import type { QueryDescription } from '../queries.ts';
import type { TSchema } from '@sinclair/typebox';
import type { Principal } from '../principal.ts';
import { PRINCIPAL_KINDS_KEYWORD } from '../schemas.ts';
import { requestIdOf, serverOptions, serveUnmetExpectations } from './front-door.ts';
import { isOAuthTarget, jsonBodyRefusal, PATH_PARAMETER_LENGTH_MAX, rememberExchanges, renderClientError, renderError, targetPath, toApiError, UNSUPPORTED_BODY } from './render-error.ts';
import { answerHeaders } from './answer-headers.ts';
import { installTextGuard } from './text-guard.ts';
import { installCors } from './cors.ts';
import { devHostCheck } from './dev-hosts.ts';
import { undecodedBodyProblem, utf8Text } from './body-as-sent.ts';
import { findJsonShapeProblem, memberNaming } from './json-members.ts';
import { openApiOptions, registerSharedSchemas } from './openapi.ts';
import { ApiError, type OAuthErrorCode } from '../errors.ts';
import { installAuth, type Authenticator, type AuthRequirement } from './auth.ts';
import { RequestLog } from './request-log.ts';
import { LazySchemas } from './lazy-schemas.ts';
import { installRouteNaming } from './tracing.ts';
import { absentBodyIsEmpty, emptyBodyIsNone, refuseUnwantedBody } from './operation.ts';

declare module 'fastify' {
  interface FastifyInstance {
    gateway: Gateway;
    /** The route schemas, compiled in the background after start or at first use (lazy-schemas.ts). */
    schemas: LazySchemas;
  }
  interface FastifyRequest {
    principal?: Principal;
  }
  interface FastifyContextConfig {
    /** Routes that must answer even when the caller is over its rate limit (health, metrics). */
    skipRateLimit?: boolean;
    /** Who may call the route; absent means public. */
    auth?: AuthRequirement;
    /** The operation the route is a face of: its name is the operationId, its idempotency rule is documented. */
    operation?: OperationDescription;
    /** The query the route is a face of (a read): its name is the operationId. */
    query?: QueryDescription;
    /** Why a mutating route is not an operation (an OAuth protocol step, another face, a provider notification). */
    notAnOperation?: string;
    /** The OAuth error a body the text guard refuses answers on this route (registration's: invalid_client_metadata); invalid_request otherwise. */
    oauthBodyError?: OAuthErrorCode;
    /**
     * Top-level body members that relay another party's input, which the route judges and refuses in its own
     * answer, and never stores (x402's `paymentPayload`, the paying client's, passed on by the resource server):
     * the text guard leaves them to it.
     */
    relayedBody?: readonly string[];
    /** The route's 201 answers a Location header naming the created resource (documented with the operation). */
    location?: boolean;
    /**
     * The route's 200 shows a version of the resource, named by its ETag; a PUT honours If-Match (versions.ts).
     * `{ tagFrom }`: a write that honours If-Match with the version of what it changes, though its 200 shows another
     * representation, so it names no ETag; `tagFrom` is the path whose GET answers the tag (a PATCH of an agent, whose
     * caps and allowances are its mandate's: `/v1/owner/agents/{id}/mandate`).
     */
    versioned?: boolean | { tagFrom: string };
    /** Headers the route's answers carry beyond those the platform documents, by status (documented only, openapi.ts). */
    responseHeaders?: Record<number, Record<string, { type: 'string'; description: string }>>;
    /**
     * The route reads its body raw, in this media type, not as JSON (the dev zone's DNS-over-HTTPS POST): documented as
     * its requestBody (openapi.ts), and named by the 415 of a body in another type.
     */
    rawBody?: { mediaType: string; description: string };
  }
}

/** `keywords`: the schemas' own annotation (schemas.ts), which Ajv's strict mode would otherwise refuse as unknown. */
const AJV_OPTIONS = { removeAdditional: false, allErrors: false, coerceTypes: 'array' as const, discriminator: true, keywords: [PRINCIPAL_KINDS_KEYWORD] };
const ajvFactory = AjvCompiler();
/** One per process, as `ajvFactory`: what it compiles is kept by factory (lazy-schemas.ts), so a second app reuses it. */
const serializerFactory = SerializerCompiler();

/**
 * Query strings, paths and headers are text, so their values are coerced to the schema's types; JSON
 * bodies are not: an amount sent as the number 10 instead of the string "10" is refused, not converted.
 */
const buildValidator: typeof ajvFactory = (externalSchemas, options) => {
  const withCoercion = (coerceTypes: false | 'array') =>
    ajvFactory(externalSchemas, { ...options, customOptions: { ...AJV_OPTIONS, coerceTypes } } as Parameters<typeof ajvFactory>[1]);
  const strict = withCoercion(false);
  const lenient = withCoercion('array');
  type Compile = ReturnType<typeof ajvFactory>;
  return ((route: Parameters<Compile>[0] & { httpPart?: string }) => (route.httpPart === 'body' ? strict(route) : lenient(route))) as Compile;
};

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

export interface AppOptions {
  /** Feature plugins, registered in order after the platform. */
  features: FastifyPluginAsync[];
  authenticator: Authenticator;
  /** The resources' schemas (`$id` each), registered once at the root so every route and face refers to them by name. */
  schemas?: readonly TSchema[];
}

const MUTATING_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * Every mutating route is an operation (`config.operation`), so its idempotency, its transaction and its
 * answer are the runner's and every face shares them; a POST that only reads is a query (`config.query`).
 * The few routes that are not must say why (`config.notAnOperation`): a protocol step with its own rules
 * (OAuth), another face (MCP), a provider's signed notification. Checked as each route is registered, so a
 * gateway with a route that breaks the rule does not start (and a test builds the whole app).
 */
export function assertMutationIsOperation(url: string, methods: readonly string[], config: FastifyContextConfig | undefined): void {
  if (!methods.some((method) => MUTATING_METHODS.has(method))) return;
  if (config?.operation || config?.query || config?.notAnOperation) return;
  throw new Error(`${methods.join(',')} ${url}: a mutating route must be an operation (config.operation), a query (config.query), or say why not (config.notAnOperation)`);
}

export async function buildApp(gateway: Gateway, options: AppOptions): Promise<FastifyInstance> {
  const requestLog = new RequestLog();
  const schemas = new LazySchemas();
  // No sniffing, and HSTS on a live gateway over https (found from outside: a first visit over http could be
  // downgraded); the same headers the front door and the socket's refusals send (answer-headers.ts).
  const constant = answerHeaders(gateway.config);
  /** What every answer carries, a route's and a refusal Fastify raises before any route alike: its request id, no sniffing, HSTS. */
  const everyAnswer = (request: FastifyRequest, reply: FastifyReply) => {
    reply.header('x-request-id', request.id);
    reply.headers(constant);
  };
  const app: FastifyInstance = Fastify({
    loggerInstance: gateway.log as FastifyBaseLogger,
    // One line per request, written when it is answered (request-log.ts).
    logController: requestLog,
    bodyLimit: gateway.config.bodyLimitBytes,
    trustProxy: false,
    return503OnClosing: true,
    genReqId: requestIdOf,
    ajv: { customOptions: AJV_OPTIONS },
    schemaController: {
      compilersFactory: {
        buildValidator: schemas.validators(buildValidator),
        buildSerializer: schemas.serializers(serializerFactory),
      },
    },
    routerOptions: { maxParamLength: PATH_PARAMETER_LENGTH_MAX, ignoreTrailingSlash: false },
    // Errors Fastify and Node raise before a route runs get the same bodies as every other refusal.
    frameworkErrors: (error, request, reply) => {
      // Before any hook: a bad percent-encoding in the path lacked them (found from outside).
      everyAnswer(request, reply);
      renderError(app, error, request, reply);
      // Fastify answers these before routing, without its completion hooks: the request's line is written here.
      requestLog.requestCompleted(null, request, reply);
    },
    clientErrorHandler: (error, socket) => renderClientError(app, error, socket),
    http: serverOptions(gateway.config),
  });
  serveUnmetExpectations(app.server);
  rememberExchanges(app.server);
  app.decorate('gateway', gateway);
  app.decorate('schemas', schemas);
  app.addHook('onClose', async () => schemas.stop());
  app.decorateRequest('principal', undefined);
  app.decorateRequest('failure', undefined);
  // Only JSON is a request body on API routes; the OAuth plugin adds form bodies in its own scope.
  app.removeContentTypeParser('text/plain');
  // JSON is UTF-8 (RFC 8259 §8.1), and bytes that are not are refused: Fastify's parser decodes them to U+FFFD,
  // which stored a name other than the one sent, and made two different bodies one request to the
  // idempotency check. Then Fastify's own parser, with its defaults (a prototype key refused), and an object
  // that repeats a member name, or nesting past 128 levels, is refused (json-members.ts).
  const json = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    // A request no route takes is answered 404 or 405 for that, not for its body.
    if (request.is404) {
      done(null, undefined);
      return;
    }
    // A body is read as it was sent (body-as-sent.ts).
    const undecoded = undecodedBodyProblem(request.headers, 'JSON');
    if (undecoded !== undefined) {
      done(new ApiError('unsupported_media_type', { detail: undecoded }), undefined);
      return;
    }
    const text = utf8Text(body as Buffer);
    if (text === undefined) {
      done(new ApiError('invalid_input', { detail: 'the body is not valid UTF-8 (JSON is UTF-8)' }), undefined);
      return;
    }
    // An empty body where the route takes none is no body, with or without the JSON content type (absentBodyIsEmpty).
    if (text.length === 0 && emptyBodyIsNone(request)) {
      done(null, undefined);
      return;
    }
    json(request, text, (error, parsed) => {
      if (error) {
        done(new ApiError('invalid_input', { detail: jsonBodyRefusal(text) }), undefined);
        return;
      }
      const { root, style } = memberNaming(isOAuthTarget(request.url), 'body');
      const shape = findJsonShapeProblem(text, root, style);
      if (shape !== undefined) done(new ApiError('invalid_input', { detail: shape.detail }), undefined);
      else done(error, parsed);
    });
  });

  // Every other body (a media type no parser takes, or none named): 415 as Fastify answers it, except an empty body
  // with no Content-Type where the route takes none, which is no body however it was framed (a chunked POST of
  // nothing, as some clients send, was refused 415).
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, body, done) => {
    const empty = (body as Buffer).length === 0 && request.headers['content-type'] === undefined;
    if (request.is404 || (empty && emptyBodyIsNone(request))) done(null, undefined);
    else {
      const raw = request.routeOptions.config?.rawBody;
      done(new ApiError('unsupported_media_type', { detail: raw ? `send the body as ${raw.mediaType}` : UNSUPPORTED_BODY }), undefined);
    }
  });

  const knownRoutes = FindMyWay();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    assertMutationIsOperation(route.url, methods, route.config);
    for (const method of methods) {
      if (!METHODS.includes(method as (typeof METHODS)[number])) continue;
      try {
        knownRoutes.on(method as 'GET', route.url, () => {});
      } catch {
        // the same path registered twice for HEAD and GET: already known
      }
    }
  });

  // A dev gateway refuses a browser's request under a Host that could be a rebound name (dev-hosts.ts); a live one has no dev sign-in to guard.
  const checkDevHost = gateway.config.mode === 'dev' ? devHostCheck(gateway.config.baseUrl) : undefined;
  app.addHook('onRequest', async (request, reply) => {
    everyAnswer(request, reply);
    refuseRepeatedHeaders(request.raw.rawHeaders);
    // What is answered to a credential is that caller's (balances, keys, approvals): no cache keeps it, a browser's
    // own included (OWASP ASVS 8.2.1), unless its route says otherwise (an avatar, public keys).
    if (request.headers.authorization !== undefined || request.headers.cookie !== undefined) reply.header('cache-control', 'no-store');
    // RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 (Node's own check is off: it answers no body).
    if (request.raw.httpVersion === '1.1' && request.headers.host === undefined) {
      throw new ApiError('invalid_input', { detail: 'an HTTP/1.1 request needs a Host header' });
    }
    checkDevHost?.(request.headers);
    if (!request.routeOptions.config?.skipRateLimit) {
      const decision = gateway.rateLimiter.hit(`address:${request.ip}`, gateway.config.rateLimit.perAddress);
      if (!decision.allowed) {
        throw new ApiError('rate_limited', {
          detail: `more than ${decision.limit} requests from this address (${request.ip}) in ${gateway.config.rateLimit.windowS} s`,
          retryAfterS: decision.retryAfterS,
        });
      }
    }
    // Before the credential's check, as for any path no route takes.
    if (!request.is404 && leavesParameterEmpty(request.params)) throw new ApiError('not_found', { detail: `no route ${request.method} ${targetPath(request.url)}` });
  });

  // A preflight is answered after the rate limit, before the text guard and the credential's check (cors.ts).
  installCors(app);

  // After the credential's check (an onRequest hook), before the body's: who may not call the route learns nothing of it.
  app.addHook('preValidation', (request, _reply, done) => {
    try {
      // Most requests carry no query string: they pay one character search, not a parse.
      if (request.url.includes('?')) {
        refuseUnknownQuery(request);
        refuseLooseIntegers(request, 'querystring');
      }
      refuseLooseIntegers(request, 'params');
      absentBodyIsEmpty(request);
      refuseUnwantedBody(request);
      done();
    } catch (error) {
      done(error as FastifyError);
    }
  });

  installRouteNaming(app);

  // Graceful shutdown: a request that finishes while the server closes tells its client to close the
  // connection too, so keep-alive sockets do not hold the shutdown open until their idle timeout.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', async (request, reply) => {
    if (closing) reply.header('connection', 'close');
    else if (reply.getHeader('connection') === 'close' && refusedBodyDrains(request.headers)) reply.removeHeader('connection');
  });

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    gateway.metrics.httpRequests.inc({ method: request.method, route, status: String(reply.statusCode) });
    gateway.metrics.httpDuration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
  });

  // A statement the database refused may mean a newer release migrated it under this instance (SchemaWatch.answerFor).
  app.setErrorHandler(async (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const answer = (await gateway.schema.answerFor(error)) as FastifyError;
    // A route of an operation whose request was refused before the operation ran (its credential, its body's JSON or
    // schema, a rate limit): runOperation did not count it, so it is counted here, under its operation (found from
    // outside: a schema's invalid_input was missing from the operations' errors by code).
    const { operation } = request.routeOptions.config ?? {};
    if (operation !== undefined && !countedByOperation(error)) gateway.metrics.operationRefusedBeforeRun(operation.name, toApiError(answer));
    return renderError(app, answer, request, reply);
  });

  // The route a path misses by its last word's plural (`/refund` for `/refunds`, found from outside), as a hint.
  const nearRoute = (method: string, path: string): string => {
    const known = METHODS.find((m) => m === method);
    const near = path.endsWith('s') ? path.slice(0, -1) : `${path}s`;
    const match = known === undefined ? null : knownRoutes.find(known, near);
    return match === null || leavesParameterEmpty(match.params) ? '' : `; did you mean ${method} ${near}?`;
  };
  app.setNotFoundHandler((request, reply) => {
    const path = targetPath(request.url);
    const allowed = METHODS.filter((m) => {
      const match = m === request.method ? null : knownRoutes.find(m, path);
      return match !== null && !leavesParameterEmpty(match.params);
    });
    const error =
      allowed.length > 0
        ? new ApiError('method_not_allowed', { detail: `${request.method} is not allowed on ${path}`, headers: { allow: allowed.join(', ') } })
        : new ApiError('not_found', { detail: `no route ${request.method} ${path}${nearRoute(request.method, path)}` });
    return renderError(app, error as unknown as FastifyError, request, reply);
  });

  installTextGuard(app);
  installAuth(app, options.authenticator);
  registerSharedSchemas(app);
  for (const schema of options.schemas ?? []) app.addSchema(schema);
  await app.register(swagger, openApiOptions(gateway.config));
  for (const feature of options.features) await app.register(feature);
  return app;
}

/**
 * Whether a route matched a path only by leaving one of its parameters empty: the router takes `/v1/merchants/` as
 * `/v1/merchants/:id` with the id '' (and `/v1/owner/agents//mandate` likewise), which answered a 400 about an id the
 * client never sent, or a 405 denying the collection's own POST. Such a path names no endpoint: 404 "no route", as
 * `/v1/offers/` (which no route nearly matches) already was (found from outside). A wildcard (`*`) may be empty: it
 * takes whatever follows, nothing included.
 */
function leavesParameterEmpty(params: unknown): boolean {
  if (params === null || typeof params !== 'object') return false;
  return Object.entries(params).some(([name, value]) => name !== '*' && value === '');
}

/**
 * Headers a request sends once. Node keeps the first of a repeated Authorization or Content-Type and drops the rest,
 * so a request with two credentials ran as the first, whatever a proxy or the client meant (found from outside):
 * refused instead, before the credential is read. Host too, as RFC 9112 §3.2 requires of a server.
 */
const SINGLE_HEADERS = new Set(['authorization', 'content-type', 'host', 'idempotency-key', 'if-match', 'if-none-match']);

function refuseRepeatedHeaders(raw: readonly string[]): void {
  let seen: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (!SINGLE_HEADERS.has(name)) continue;
    if (seen?.has(name)) throw new ApiError('invalid_input', { detail: `send one ${name} header, not several` });
    (seen ??= new Set()).add(name);
  }
}

const DECIMAL_INTEGER = /^(0|-?[1-9][0-9]*)$/;

/**
 * A query or path parameter whose schema is an integer is written in decimal digits. The validator coerces text to
 * numbers as JavaScript does, so `limit=0x5`, `5e0`, `+5`, `05` and ` 5` were all read as 5, and
 * `/mandate/versions/0x2` as version 2 (found from outside): a client that sends one of them has made a mistake it
 * should hear of.
 */
function refuseLooseIntegers(request: FastifyRequest, part: 'querystring' | 'params'): void {
  const members = (request.routeOptions.schema?.[part] as { properties?: Record<string, { type?: unknown }> } | undefined)?.properties;
  if (members === undefined) return;
  const given = ((part === 'querystring' ? request.query : request.params) ?? {}) as Record<string, unknown>;
  for (const [name, schema] of Object.entries(members)) {
    if (schema.type !== 'integer') continue;
    const values = given[name];
    if (values === undefined) continue;
    for (const value of Array.isArray(values) ? values : [values]) {
      if (typeof value === 'string' && !DECIMAL_INTEGER.test(value)) {
        const violation = { path: `${part}/${name}`, message: 'must be an integer in decimal digits, like 20' };
        throw new ApiError('invalid_input', { detail: `${violation.path} ${violation.message}`, extra: { errors: [violation] } });
      }
    }
  }
}

/**
 * An API route that takes no query string refuses one, as a route with a query schema refuses a member it does not
 * know (docs/decisions.md "An API route refuses query parameters it does not take"): `?limit=2` on a list that does
 * not page read as obeyed, and answered everything.
 */
function refuseUnknownQuery(request: FastifyRequest): void {
  const route = request.routeOptions;
  if (request.is404 || route.schema?.querystring !== undefined || !/^\/(v1|x402)\//.test(route.url ?? '')) return;
  const names = Object.keys((request.query ?? {}) as Record<string, unknown>);
  if (names.length === 0) return;
  throw new ApiError('invalid_input', {
    detail: `${request.method} ${route.url} takes no query parameters: ${names.slice(0, 5).join(', ')}${names.length > 5 ? ', …' : ''}`,
  });
}

/** The largest refused body read to its end so that its refusal arrives (below): four times the bodies a client is likely to send. */
const REFUSED_BODY_DRAIN_MAX_BYTES = 64 * 1024 * 1024;

/**
 * Whether a body Fastify refused before reading it whole (over the size limit) is read to its end and thrown away,
 * the connection kept, rather than the connection closed. Fastify closes it at once ("the client may send more data"),
 * and a client still sending then meets a reset, which can discard the answer before it is read: a 3 MB body got a
 * broken pipe instead of its 413 one time in three (found from outside). Node reads the rest and discards it
 * once the answer is sent. Only for a declared length up to {@link REFUSED_BODY_DRAIN_MAX_BYTES}: a chunked body of
 * no declared length, or a larger one, still closes the connection.
 */
function refusedBodyDrains(headers: FastifyRequest['headers']): boolean {
  if (headers['transfer-encoding'] !== undefined) return false;
  const declared = headers['content-length'];
  return declared !== undefined && /^\d{1,12}$/.test(declared) && Number(declared) <= REFUSED_BODY_DRAIN_MAX_BYTES;
}
