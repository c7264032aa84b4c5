// Turns anything thrown on a route into the body its clients expect: problem+json on API routes, the
// OAuth error body under /oauth/, an HTML page where the route's document declares the status as one (a
// consent or approval page). Bad input is always a 4xx with a reason; only our own faults are
// 500s, and they never carry a stack trace or an internal message.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Socket } from 'node:net';
import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { storageFailureOf } from '../db/faults.ts';
import { ApiError, OAuthError, pathUnder, problemBody, unexpectedAsApiError, type MemberNamer, type OAuthErrorCode } from '../errors.ts';
import { MICROCREDITS_PATTERN, UC_DIGITS_MAX } from '../money.ts';
import { VISIBLE_PATTERN } from '../schemas.ts';
import { memberNaming, pointerPath, type MemberNaming } from './json-members.ts';
import { jsonRpcError } from './json-rpc.ts';
import { isPagePath, newNonce, pageHeaders, refusalPage } from './pages.ts';
import type { FailureLine } from './request-log.ts';
import { answerHeaders } from './answer-headers.ts';

/** Fastify's `maxParamLength`: longer path parameters are refused with 414 uri_too_long. */
export const PATH_PARAMETER_LENGTH_MAX = 500;

/** The refusal of a path parameter over the limit, the router's or a wildcard route's that reads segments itself. */
export function pathParameterTooLong(): ApiError {
  return new ApiError('uri_too_long', { detail: `a path parameter is longer than ${PATH_PARAMETER_LENGTH_MAX} characters` });
}

type Violation = NonNullable<FastifyError['validation']>[number];

/** One schema violation as path and message; a discriminator miss names the member and its value. */
function describeViolation(where: string, naming: MemberNaming, violation: Violation): { path: string; message: string } {
  const { tag, tagValue, allowedValue, additionalProperty } = violation.params as { tag?: string; tagValue?: unknown; allowedValue?: unknown; additionalProperty?: string };
  const at = (member?: string) => pointerPath(naming, member === undefined ? violation.instancePath : `${violation.instancePath}/${member}`, where);
  if (violation.keyword === 'additionalProperties' && additionalProperty !== undefined) {
    return { path: at(additionalProperty), message: 'is not a known member here' };
  }
  if (violation.keyword === 'pattern' && (violation.params as { pattern?: string }).pattern === VISIBLE_PATTERN) {
    return { path: at(), message: 'must hold a visible character, not only white space or invisible characters' };
  }
  // An amount sent as a JSON number, or not as digits, or too long (found from outside: "must be string" said neither
  // why nor how). Every amount member is named …Uc and is a Microcredits string, so a string violation there is an amount's.
  const { type, pattern } = violation.params as { type?: unknown; pattern?: string };
  const notAString = (violation.keyword === 'type' && type === 'string') || violation.keyword === 'maxLength';
  const amount = (notAString && /Uc$/.test(violation.instancePath)) || (violation.keyword === 'pattern' && pattern === MICROCREDITS_PATTERN);
  if (amount) return { path: at(), message: AMOUNT_REFUSAL };
  if (violation.keyword === 'const') return { path: at(), message: `must be ${JSON.stringify(allowedValue)}` };
  const { allowedValues } = violation.params as { allowedValues?: unknown[] };
  if (violation.keyword === 'enum' && Array.isArray(allowedValues)) {
    return { path: at(), message: `must be one of ${allowedValues.map((value) => JSON.stringify(value)).join(', ')}` };
  }
  if (violation.keyword === 'discriminator' && tag !== undefined) {
    const message = typeof tagValue === 'string' ? `${JSON.stringify(tagValue)} is not a known ${tag} here (see the catalogue)` : 'must be a string';
    return { path: at(tag), message };
  }
  return { path: at(), message: violation.message ?? 'is invalid' };
}

/**
 * A union of literals (`order`: "asc" or "desc") fails as one `const` violation per choice, then `anyOf`: said as
 * one violation naming every choice, where the first alone read as the only one ("must be \"asc\"" for DESC).
 */
function mergeChoices(violations: readonly Violation[]): Violation[] {
  const merged: Violation[] = [];
  for (const violation of violations) {
    if (violation.keyword === 'anyOf') {
      const branch = `${violation.schemaPath}/`;
      const choices = merged.filter((earlier) => earlier.keyword === 'const' && earlier.instancePath === violation.instancePath && earlier.schemaPath.startsWith(branch));
      if (choices.length > 0) {
        const allowedValues = choices.map((choice) => (choice.params as { allowedValue?: unknown }).allowedValue);
        merged.splice(merged.indexOf(choices[0]!), choices.length, { ...violation, keyword: 'enum', params: { allowedValues } });
        continue;
      }
    }
    merged.push(violation);
  }
  return merged;
}

const AMOUNT_REFUSAL = `must be microcredits as a string of 1 to ${UC_DIGITS_MAX} digits, e.g. "1500000" (a JSON number loses microcredits past 2^53)`;

/**
 * Every violation of one validation as path and message, a union of literals said once with all its choices, and an
 * amount's refusal said once for its member: the other branches of a nullable amount ("must be null", "must match a
 * schema in anyOf") add nothing to it (found from outside).
 */
export function describeViolations(where: string, violations: readonly Violation[], naming: MemberNaming = { root: where, style: 'slashes' }): Array<{ path: string; message: string }> {
  const described = mergeChoices(violations).map((violation) => describeViolation(where, naming, violation));
  const amounts = new Set(described.filter(({ message }) => message === AMOUNT_REFUSAL).map(({ path }) => path));
  const said = new Set<string>();
  return described.filter(({ path, message }) => {
    if (!amounts.has(path)) return true;
    if (message !== AMOUNT_REFUSAL || said.has(path)) return false;
    said.add(path);
    return true;
  });
}

/** Maps Fastify's own client errors (parsing, limits, schema) onto our catalogue; a schema's paths as the target names members (`memberNaming`). */
export function toApiError(error: FastifyError, oauth = false): ApiError {
  if (error instanceof ApiError) return error;
  if (error.validation) {
    const where = error.validationContext ?? 'request';
    const errors = describeViolations(where, error.validation, memberNaming(oauth, where));
    const first = errors[0];
    return new ApiError('invalid_input', {
      detail: first ? `${first.path} ${first.message}` : `${where} is not valid`,
      extra: { errors },
    });
  }
  switch (error.code) {
    case 'FST_ERR_BAD_URL':
      return new ApiError('invalid_input', { detail: 'the path is not valid percent-encoded UTF-8' });
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return pathParameterTooLong();
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('payload_too_large', { detail: 'the request body exceeds the size limit' });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return error.statusCode === 415
        ? new ApiError('unsupported_media_type', { detail: UNSUPPORTED_BODY })
        : new ApiError('invalid_input', { detail: error.message });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('invalid_input', { detail: 'the body is empty; send a JSON object (an empty one is {})' });
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      // Fastify's parser (secure-json-parse) also refuses valid JSON with a prototype key, and does not say which.
      return new ApiError('invalid_input', { detail: INVALID_JSON_BODY });
  }
  if (error instanceof SyntaxError || (error.statusCode === 400 && /JSON/i.test(error.message))) {
    return new ApiError('invalid_input', { detail: INVALID_JSON_BODY });
  }
  if (error.statusCode === 415) return new ApiError('unsupported_media_type', { detail: error.message });
  if (error.statusCode === 413) return new ApiError('payload_too_large', { detail: error.message });
  if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
    return new ApiError('invalid_input', { detail: error.message, status: error.statusCode === 400 ? 400 : undefined });
  }
  return unexpectedAsApiError(error, 'under the request id this answer carries in X-Request-Id');
}

const OAUTH_CODE_FOR: Partial<Record<string, OAuthErrorCode>> = {
  rate_limited: 'temporarily_unavailable',
  storage_unavailable: 'temporarily_unavailable',
  signing_configuration_required: 'temporarily_unavailable',
  internal_error: 'temporarily_unavailable',
};

/**
 * Statuses an /oauth/ refusal keeps, because they say what HTTP got wrong rather than what OAuth did: no valid
 * credential (401, with its challenge), an unknown path (404), a method the endpoint does not take (405, with its
 * Allow header, RFC 9110 §15.5.6), a request too slow or too large for the server to read (408, 413, 414, 431), a
 * body type it does not read (415). Every other client error is RFC 6749 §5.2's 400.
 */
const HTTP_STATUSES_KEPT = new Set([401, 404, 405, 408, 413, 414, 415, 431]);

export function toOAuthError(error: FastifyError): OAuthError {
  if (error instanceof OAuthError) return error;
  const api = toApiError(error, true);
  const code = OAUTH_CODE_FOR[api.code] ?? 'invalid_request';
  const status = code === 'temporarily_unavailable' ? (api.status === 429 ? 429 : 503) : HTTP_STATUSES_KEPT.has(api.status) ? api.status : 400;
  return new OAuthError(status, code, api.message, api.retryAfterS, api.options.headers);
}

/**
 * The path a request target names, without its query: of the origin form (`/oauth/token?x`) or of the absolute
 * form (`http://host/oauth/token`, RFC 9112 §3.2.2, which a server must accept and routes as the path).
 */
export function targetPath(target: string): string {
  if (!target.startsWith('/')) {
    try {
      return new URL(target).pathname;
    } catch {
      return target;
    }
  }
  return target.split('?')[0] ?? '/';
}

/** Whether a refusal of this request target takes OAuth's error body rather than a problem body. */
export const isOAuthTarget = (target: string): boolean => targetPath(target).startsWith('/oauth/');

/**
 * Whether the route declares this status as an HTML page (`HtmlPage` in its response schema): a page for people (the
 * consent page, an approval page) answers its refusals in the media type its document names for them, the platform's
 * own (the text guard's) included, not only those its handler renders.
 */
function declaresPage(request: FastifyRequest, status: number): boolean {
  const responses = request.routeOptions.schema?.response as Record<string, { content?: Record<string, unknown> }> | undefined;
  return responses?.[String(status)]?.content?.['text/html'] !== undefined;
}

/**
 * Whether the route declares this status's body as a JSON-RPC error (`/mcp`): a JSON-RPC route answers its refusals
 * in the form its clients parse, the platform's own of that status (a body over the size limit) included.
 */
function declaresJsonRpc(request: FastifyRequest, status: number): boolean {
  const responses = request.routeOptions.schema?.response as Record<string, { content?: Record<string, { schema?: { properties?: object } }> }> | undefined;
  const properties = responses?.[String(status)]?.content?.['application/json']?.schema?.properties;
  return properties !== undefined && 'jsonrpc' in properties;
}

function sendRefusalPage(reply: FastifyReply, refusal: { status: number; code: string; detail: string }, headers: Record<string, string>): FastifyReply {
  const nonce = newNonce();
  return reply.code(refusal.status).headers({ ...headers, ...pageHeaders(nonce) }).send(refusalPage(nonce, refusal));
}

export function renderError(app: FastifyInstance, error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (error instanceof OAuthError || isOAuthTarget(request.url)) {
    const oauth = toOAuthError(error);
    request.failure = failureLine(error, error instanceof OAuthError ? undefined : toApiError(error), oauth.status);
    if (declaresPage(request, oauth.status)) return sendRefusalPage(reply, { status: oauth.status, code: oauth.error, detail: oauth.description }, oauth.httpHeaders);
    return reply
      .code(oauth.status)
      // RFC 6749 §5.1 and §5.2: an OAuth error answer is uncacheable, for HTTP/1.0 caches too, whichever handler gave it.
      .headers({ 'cache-control': 'no-store', pragma: 'no-cache', ...oauth.httpHeaders })
      .type('application/json')
      .send({ error: oauth.error, error_description: oauth.description });
  }
  const api = toApiError(error);
  request.failure = failureLine(error, api, api.status);
  // A path that is not valid percent-encoded UTF-8 is refused before any route is found, so a page's is known by its
  // path (found from outside: an approval page's link answered a problem body, which its document does not list).
  const page = declaresPage(request, api.status) || (error.code === 'FST_ERR_BAD_URL' && isPagePath(targetPath(request.url)));
  if (page) return sendRefusalPage(reply, { status: api.status, code: api.code, detail: api.message }, api.httpHeaders);
  if (declaresJsonRpc(request, api.status)) {
    // -32000, as the MCP SDK answers what it refuses before reading a message (406, 413, 415).
    return reply
      .code(api.status)
      .headers({ ...api.httpHeaders, 'cache-control': 'no-store' })
      .type('application/json')
      .send(jsonRpcError(null, -32000, `${STATUS_CODES[api.status] ?? 'Error'}: ${api.message}`));
  }
  return reply
    .code(api.status)
    .headers(api.httpHeaders)
    .type('application/problem+json')
    .send(problemBody(app.gateway.config.baseUrl, api, { nameMember: inputMemberNaming(request) }));
}

/**
 * How the HTTP face names a member of an operation's input, as its schema refusals name it: from the part of the
 * request that carries it, a path parameter under `params/`, a query member under `querystring/`, anything else
 * under `body/` (a body's members are the input's own, `inputOf`); the whole input is `body`.
 */
function inputMemberNaming(request: FastifyRequest): MemberNamer {
  const schema = request.routeOptions.schema;
  const holds = (part: 'params' | 'querystring', name: string) => Object.hasOwn((schema?.[part] as { properties?: object } | undefined)?.properties ?? {}, name);
  return (path) => {
    const first = path.split('/')[0]!;
    return pathUnder(holds('params', first) ? 'params' : holds('querystring', first) ? 'querystring' : 'body', path);
  };
}

/**
 * Refusals are expected and say so quietly: 4xx at info, availability and configuration 5xx (storage
 * down, a provider not configured, an upstream failing) at warn, both without a stack. Only an
 * unexpected error, our own fault, logs at error with its stack. The line is the request's one log line
 * (request-log.ts), or its own line for what Node refuses before a request exists.
 */
function failureLine(error: FastifyError, api: ApiError | undefined, status: number): FailureLine {
  const code = api?.code ?? (error instanceof OAuthError ? error.error : (error as { code?: string }).code);
  const storage = storageFailureOf(error)?.kind ?? (api?.code === 'storage_unavailable' ? 'unreachable' : undefined);
  const fields = { code: 'storage_unavailable', status, reason: error.message };
  // An unreachable database is announced once by the outage tracker; each request it fails is routine.
  if (storage === 'unreachable') return { level: 'info', fields, message: 'request failed: database unavailable' };
  // A live database that timed out a statement or a lock wait is a slow query or contention to look into.
  if (storage === 'timeout') return { level: 'warn', fields, message: 'request failed: a database statement or lock wait timed out' };
  // The database answers, but every connection of this instance's pool was busy: load to look into, not an outage.
  if (storage === 'saturated') return { level: 'warn', fields, message: 'request failed: no database connection of this instance came free in time (its pool is full: heavy load or lock waits, or a database that stopped answering its statements)' };
  if (api?.code === 'internal_error') return { level: 'error', fields: { err: error }, message: 'request failed' };
  if (status >= 500) return { level: 'warn', fields: { code, status }, message: error.message };
  return { level: 'info', fields: { code, status }, message: error.message };
}

/** What Node's HTTP parser refuses before Fastify sees a request, mapped onto our catalogue. */
function clientErrorFor(code: string | undefined): ApiError {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      // Node counts the request line with the headers (maxHeaderSize, 16 KiB): an over-long URL lands here too.
      return new ApiError('headers_too_large', { detail: 'the request line and headers exceed the size limit (16 KiB)' });
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new ApiError('payload_too_large', { detail: 'the chunk extensions of the request body exceed the size limit' });
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('request_timeout', { detail: 'the request did not arrive in time' });
    default:
      return new ApiError('invalid_input', { detail: 'the request is not valid HTTP/1.1' });
  }
}

/** Where a client error's answer and log line go: the gateway's base URL (for `type`) and a logger. */
export interface ClientErrorContext {
  baseUrl: string;
  /** What every answer carries (answer-headers.ts). */
  headers: Readonly<Record<string, string>>;
  log: Record<FailureLine['level'], (fields: object, message: string) => void>;
}

/** The last request each connection brought, with its response. */
const exchanges = new WeakMap<Socket, { request: IncomingMessage; response: ServerResponse }>();

/** Remembers each connection's last request and response, which `answerClientError` needs (both servers that listen). */
export function rememberExchanges(server: Server): void {
  server.on('request', (request: IncomingMessage, response: ServerResponse) => exchanges.set(request.socket, { request, response }));
}

/**
 * Whether a response on this connection would answer a request that already has one: a response still in flight
 * (what Node's own handler checks), or one sent to a request whose body never finished arriving (an early refusal,
 * such as a 401 before the body was read, and then the request timed out). A client reads anything written after it
 * as the answer to its next request.
 */
function alreadyAnswered(socket: Socket): boolean {
  if ((socket as Socket & { _httpMessage?: { headersSent: boolean } | null })._httpMessage?.headersSent) return true;
  const last = exchanges.get(socket);
  return last !== undefined && !last.request.complete && last.response.headersSent;
}

/**
 * Answers what Node's parser refuses (oversized headers or URL, malformed requests, timeouts) with our
 * bodies, then closes the connection, as Node's default does: problem+json, or the OAuth error body when
 * the request line (if it arrived) names an /oauth/ route. Nothing is written when the connection is gone
 * or its request already has a response (a second one would be read as the next request's answer). Installed on every server that
 * listens: the front door of `acg serve` and Fastify's own (clientErrorHandler).
 */
export function answerClientError(error: Error & { code?: string; rawPacket?: unknown }, socket: Socket, context: ClientErrorContext): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const api = clientErrorFor(error.code);
  const line = failureLine(error as FastifyError, api, api.status);
  context.log[line.level](line.fields, line.message);
  const requestLine = Buffer.isBuffer(error.rawPacket) ? error.rawPacket.toString('latin1', 0, 256) : '';
  // A timeout carries no packet; when its request had arrived but not its body, that request names the route.
  const unfinished = exchanges.get(socket)?.request;
  const target = /^[A-Z]+ (\S+)/.exec(requestLine)?.[1] ?? (unfinished && !unfinished.complete ? (unfinished.url ?? '') : '');
  const oauth = isOAuthTarget(target) ? toOAuthError(api as unknown as FastifyError) : undefined;
  const [status, type, body] = oauth
    ? [oauth.status, 'application/json', JSON.stringify({ error: oauth.error, error_description: oauth.description })]
    : [api.status, 'application/problem+json', JSON.stringify(problemBody(context.baseUrl, api))];
  if (socket.writable && !alreadyAnswered(socket)) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: ${type}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        Object.entries(context.headers).map(([name, value]) => `${name}: ${value}\r\n`).join('') +
        `Cache-Control: no-store\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/** Fastify's `clientErrorHandler`, for a server Fastify listens on itself (tests, embedders). */
export function renderClientError(app: FastifyInstance, error: Error & { code?: string; rawPacket?: unknown }, socket: Socket): void {
  answerClientError(error, socket, { baseUrl: app.gateway.config.baseUrl, headers: answerHeaders(app.gateway.config), log: app.log });
}

/** The refusal of a body in a media type other than JSON. */
export const UNSUPPORTED_BODY = 'send the body as application/json';

const INVALID_JSON_BODY = 'the body is not valid JSON, or has a "__proto__" key or "constructor" with a "prototype", which are refused';

/**
 * Why a JSON body the parser refused was refused, said precisely (found from outside: one text named two causes and
 * no place): where its syntax breaks, by line and column, with the parser's own words when they hold none of the
 * body (its "Unexpected token" words quote the body, which a log line must not carry); or, for valid JSON, its
 * prototype key.
 */
export function jsonBodyRefusal(text: string): string {
  try {
    JSON.parse(text);
  } catch (error) {
    const message = error instanceof Error ? error.message : '';
    // V8's words before "at position" ("Expected ',' or '}' after property value in JSON"), when they quote nothing of the body.
    const at = /^([^"`]*?)(?: in JSON)? at position (\d+)/.exec(message);
    if (at && !/Unexpected token/.test(at[1]!)) {
      const position = Number(at[2]);
      const before = text.slice(0, position);
      const line = before.split('\n').length;
      const column = position - before.lastIndexOf('\n');
      return `the body is not valid JSON: ${at[1]!.charAt(0).toLowerCase()}${at[1]!.slice(1)} at line ${line}, column ${column}`;
    }
    if (/^Unexpected end of JSON input/.test(message)) return 'the body is not valid JSON: it ends before its last value is complete';
    const token = /^Unexpected token .* is not valid JSON$/s.test(message) ? positionOfUnexpected(text) : undefined;
    return token === undefined ? 'the body is not valid JSON' : `the body is not valid JSON: unexpected character at line ${token.line}, column ${token.column}`;
  }
  return 'the body has a "__proto__" key or "constructor" with a "prototype", which are refused';
}

/**
 * Where a body first fails to parse, when the parser's words do not say: the end of its longest prefix that is JSON
 * cut short (or whole), found by bisection, since every shorter prefix is one too and every longer one holds the
 * offending character.
 */
function positionOfUnexpected(text: string): { line: number; column: number } | undefined {
  if (text.length > 65_536) return undefined;
  let low = 0;
  let high = text.length;
  // A prefix cut short fails at its end: "Unexpected end of JSON input", or words naming its last position.
  const incomplete = (n: number) => {
    try {
      JSON.parse(text.slice(0, n));
      return true;
    } catch (error) {
      const message = error instanceof Error ? error.message : '';
      const at = /at position (\d+)/.exec(message);
      return /^Unexpected end of JSON input/.test(message) || (at !== null && Number(at[1]) >= n);
    }
  };
  if (!incomplete(0)) return undefined;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (incomplete(mid)) low = mid;
    else high = mid - 1;
  }
  const before = text.slice(0, low);
  return { line: before.split('\n').length, column: low - before.lastIndexOf('\n') };
}
