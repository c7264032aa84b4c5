// Refuses text that cannot be stored: U+0000 (PostgreSQL's text types reject it) and lone UTF-16
// surrogates (not Unicode; PostgreSQL and JSON encoders reject or mangle them); and text that would be shown
// other than it is: the bidirectional embedding, override and isolate controls (U+202A–U+202E, U+2066–U+2069),
// with which a merchant's name can reverse the verified domain printed after it on an owner's approval page
// ("Trojan Source", CVE-2021-42574), and the other C0 controls and DEL (tab, line feed and carriage return
// excepted), with which a name printed by `acg` in a terminal can send it escape sequences. Right-to-left text
// needs none of them. One hook on every route
// checks the path, query and headers on arrival and the parsed body before validation, so such input is
// a 400 invalid_input before authentication or any database call, whatever the route (answered as the route
// answers its other 400s: a page for people gets an HTML page, render-error.ts); except the body members a route
// relays from another party (`relayedBody`), which that route refuses in its own answer and never stores. Numbers that no
// column can hold (a coerced query value of Infinity) are refused the same way after validation.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError, OAuthError } from '../errors.ts';
import { elementPath, memberNaming, memberPath, type PathStyle } from './json-members.ts';
import { isOAuthTarget } from './render-error.ts';

const UNSTORABLE = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]|[\u202A-\u202E\u2066-\u2069]/;

/** The path (e.g. `body/name`, or dotted `arguments.name`) of the first string or member name holding unstorable text, if any. */
export function findUnstorableText(root: unknown, rootPath: string, style: PathStyle = 'slashes'): string | undefined {
  // Iterative, so a deeply nested body cannot exhaust the stack.
  const pending: Array<[unknown, string]> = [[root, rootPath]];
  while (pending.length > 0) {
    const [value, path] = pending.pop()!;
    if (typeof value === 'string') {
      if (UNSTORABLE.test(value)) return path;
      continue;
    }
    if (value === null || typeof value !== 'object' || Buffer.isBuffer(value)) continue;
    for (const [name, member] of Object.entries(value)) {
      if (UNSTORABLE.test(name)) return path;
      pending.push([member, Array.isArray(value) ? elementPath(path, name, style) : memberPath(path, name, style)]);
    }
  }
  return undefined;
}

const UNSTORABLE_MESSAGE =
  'holds a control character (other than tab, line feed or carriage return), a lone surrogate or a bidirectional control (U+202A–U+202E, U+2066–U+2069), which is not accepted text';

/** What a refusal of such text says, wherever it is refused (the HTTP edge, MCP tool arguments). */
export function unstorableTextDetail(path: string): string {
  return `${path} ${UNSTORABLE_MESSAGE}`;
}

/**
 * The refusal of such text at `path` (as the face names the member: `body/name`, `arguments/name`), with `errors` as a
 * schema violation has them (found from outside: a detail alone, and over MCP a dotted `arguments.name`).
 */
export function unstorableTextRefusal(path: string): ApiError {
  return new ApiError('invalid_input', { detail: unstorableTextDetail(path), extra: { errors: [{ path, message: UNSTORABLE_MESSAGE }] } });
}

/** The body without the members a route relays from another party and judges itself (`relayedBody`). */
function withoutRelayed(body: unknown, relayed: readonly string[] | undefined): unknown {
  if (!relayed || body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  return Object.fromEntries(Object.entries(body).filter(([name]) => !relayed.includes(name)));
}

/** The path of the first unstorable text in one part of the request, named as the request's target names members. */
function unstorableIn(request: FastifyRequest, part: string, value: unknown): string | undefined {
  const { root, style } = memberNaming(isOAuthTarget(request.url), part);
  const path = findUnstorableText(value, root, style);
  return path === '' ? part : path;
}

export function installTextGuard(app: FastifyInstance): void {
  app.addHook('onRequest', async (request: FastifyRequest) => {
    // A request no route takes is answered 404 or 405 for that, whatever it carries (nothing of it is stored).
    if (request.is404) return;
    const path = unstorableIn(request, 'params', request.params) ?? unstorableIn(request, 'querystring', request.query) ?? unstorableIn(request, 'headers', request.headers);
    if (path !== undefined) throw unstorableTextRefusal(path);
  });
  app.addHook('preValidation', async (request: FastifyRequest) => {
    const path = unstorableIn(request, 'body', withoutRelayed(request.body, request.routeOptions.config.relayedBody));
    if (path === undefined) return;
    // An OAuth route whose bad body has its own error code (RFC 7591's registration) answers with it.
    const oauthError = request.routeOptions.config.oauthBodyError;
    throw oauthError ? new OAuthError(400, oauthError, unstorableTextDetail(path)) : unstorableTextRefusal(path);
  });
  // Ajv coerces a query value such as "1e309" to Infinity and lets it pass `maximum`; no column holds it.
  app.addHook('preHandler', async (request: FastifyRequest) => {
    for (const [part, values] of [['querystring', request.query], ['params', request.params]] as const) {
      for (const [name, value] of Object.entries((values ?? {}) as Record<string, unknown>)) {
        if (typeof value === 'number' && !Number.isFinite(value)) throw new ApiError('invalid_input', { detail: `${part}/${name} must be a finite number` });
      }
    }
  });
}
