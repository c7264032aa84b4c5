// CORS for exactly the routes a browser client of another origin must call and that read no cookie: the discovery
// documents and the JWKS (`/.well-known/…`, and the MCP resource's metadata under `/mcp/.well-known/…`), client
// registration, the token endpoint and `/mcp`. The authorization server has public clients only, which are the
// browser applications (a single-page app, a browser-hosted MCP client such as MCP Inspector) that need it. Each
// of these routes is called with a bearer token or with nothing, never with the browser's cookies, so any origin
// may call it: `Access-Control-Allow-Origin: *`, never with credentials (a browser then sends no cookie and
// reads no answer that would need one). The API under /v1/, the console and the pages that read the consent
// cookie (/oauth/authorize, /oauth/consent, /oauth/select) answer no CORS header at all: a browser of another
// origin cannot read them, as before. See docs/decisions.md "CORS for browser clients, without credentials".
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { targetPath } from './render-error.ts';

/** The paths under CORS, as routes register them (exact paths, no parameters). */
const CORS_PREFIXES = ['/.well-known/', '/mcp/.well-known/'];
const CORS_PATHS = new Set(['/oauth/register', '/oauth/token', '/oauth/revoke', '/oauth/introspect', '/mcp']);

export function isCorsPath(path: string): boolean {
  return CORS_PATHS.has(path) || CORS_PREFIXES.some((prefix) => path.startsWith(prefix));
}

/**
 * What a browser client sends besides the safelisted headers: a credential, a JSON or form body, MCP's session and
 * protocol headers (and 2026-07-28's method and name headers), SSE's resumption point, an idempotency key.
 */
const ALLOWED_REQUEST_HEADERS = [
  'Authorization', 'Content-Type', 'Mcp-Session-Id', 'Mcp-Protocol-Version', 'Mcp-Method', 'Mcp-Name', 'Last-Event-ID', 'Idempotency-Key', 'X-Request-Id',
].join(', ');

/** What a browser client must read of an answer besides the safelisted headers (a browser hides every other one). */
const EXPOSED_RESPONSE_HEADERS = ['WWW-Authenticate', 'Mcp-Session-Id', 'Mcp-Protocol-Version', 'Retry-After', 'Allow', 'X-Request-Id'].join(', ');

/** How long a browser may keep a preflight's answer: an hour, as node-oidc-provider (browsers cap it lower: Chromium at 2 h, Firefox at 24 h). */
const PREFLIGHT_MAX_AGE_S = 3600;

/**
 * Installs CORS: the methods of each CORS route are learned as routes register; a preflight (an OPTIONS request with
 * `Origin` and `Access-Control-Request-Method`) to one of them is answered 204 before any other check of the route
 * (it carries no credential: a browser sends none with it); every answer of such a route, a refusal included, says
 * any origin may read it. An OPTIONS request that is not a preflight is answered as before (405 with `Allow`).
 */
export function installCors(app: FastifyInstance): void {
  const methodsOf = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    if (!isCorsPath(route.url)) return;
    const methods = methodsOf.get(route.url) ?? new Set<string>();
    for (const method of Array.isArray(route.method) ? route.method : [route.method]) methods.add(method);
    methodsOf.set(route.url, methods);
  });

  const corsMethods = (request: FastifyRequest): Set<string> | undefined => methodsOf.get(targetPath(request.url));

  app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    if (request.method !== 'OPTIONS' || request.headers.origin === undefined || request.headers['access-control-request-method'] === undefined) return;
    const methods = corsMethods(request);
    if (methods === undefined) return;
    return reply
      .code(204)
      .headers({
        'access-control-allow-origin': '*',
        // In the order the 405's Allow names them: the route's own, then HEAD for a GET.
        'access-control-allow-methods': ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((method) => methods.has(method)).join(', '),
        'access-control-allow-headers': ALLOWED_REQUEST_HEADERS,
        'access-control-max-age': String(PREFLIGHT_MAX_AGE_S),
      })
      .send();
  });

  app.addHook('onSend', async (request: FastifyRequest, reply: FastifyReply) => {
    if (corsMethods(request) === undefined) return;
    reply.header('access-control-allow-origin', '*');
    reply.header('access-control-expose-headers', EXPOSED_RESPONSE_HEADERS);
  });
}
