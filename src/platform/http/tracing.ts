// The server span of every HTTP request, continuing the caller's W3C `traceparent` (or starting a trace).
// It is started where `acg serve` hands a request to the app (server.ts wraps the front door's handler),
// not in a Fastify hook, because the span must be the active context of everything the request does:
// running the app inside it, with the request's and the response's event listeners bound to it, carries it
// through body parsing (whose 'data' and 'end' events come from the socket, outside any request context),
// every hook and handler, and the response's completion, where the request's log line is written. A Fastify
// hook names it by its route pattern once routed (never by the raw path, whose ids would make every request
// its own name). Without tracing the handler is returned unchanged and no hook is added.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { bindToSpan, endSpan, remoteParent, renameSpan, setSpanAttributes, startSpan, tracing, withinSpan, type SpanRef } from '../telemetry.ts';

type RequestHandler = (request: IncomingMessage, response: ServerResponse) => void;

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT']);
const serverSpans = new WeakMap<IncomingMessage, SpanRef>();

/**
 * `handler`, each request in a server span. Attributes follow the HTTP semantic conventions, with the path
 * only: a query string may carry what must not be recorded (an OAuth code, a misplaced token).
 */
export function tracedRequests(handler: RequestHandler): RequestHandler {
  if (!tracing()) return handler;
  return (request, response) => {
    const known = KNOWN_METHODS.has(request.method ?? '');
    const method = known ? request.method! : '_OTHER';
    // The HTTP conventions name an unknown method's span `HTTP` and keep the method as sent in method_original.
    const span = startSpan(known ? method : 'HTTP', {
      kind: 'server',
      parent: remoteParent(request.headers) ?? null,
      attributes: {
        'http.request.method': method,
        ...(known ? {} : { 'http.request.method_original': request.method }),
        'url.path': (request.url ?? '/').split('?')[0],
        'url.scheme': 'http',
        'network.protocol.version': request.httpVersion,
        'client.address': request.socket.remoteAddress,
        ...serverOf(request),
        'user_agent.original': request.headers['user-agent'],
      },
    });
    if (!span) return handler(request, response);
    serverSpans.set(request, span);
    response.once('close', () => {
      const status = response.statusCode;
      setSpanAttributes(span, { 'http.response.status_code': status });
      // OpenTelemetry's HTTP server conventions: a 5xx is an error whose `error.type` is the status code as text,
      // unless the answer never finished (found from outside: only the status said so).
      if (!response.writableFinished) setSpanAttributes(span, { 'error.type': 'aborted' });
      else if (status >= 500) setSpanAttributes(span, { 'error.type': String(status) });
      endSpan(span, status >= 500 ? `HTTP ${status}` : undefined);
    });
    bindToSpan(span, request);
    bindToSpan(span, response);
    withinSpan(span, () => handler(request, response));
  };
}

const HOST_HEADER = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]+)(?::([0-9]{1,5}))?$/;

/**
 * The HTTP conventions' `server.address` and `server.port`: the server the client named (its Host header), the
 * port it named or else the one the request came in on (found from outside: server spans had neither).
 */
function serverOf(request: IncomingMessage): { 'server.address'?: string; 'server.port'?: number } {
  const named = HOST_HEADER.exec(request.headers.host ?? '');
  const port = named?.[2] !== undefined ? Number(named[2]) : request.socket.localPort;
  return { 'server.address': named?.[1]?.replace(/^\[(.*)\]$/, '$1'), 'server.port': port };
}

/** Names each traced request's span by its route once Fastify has routed it (only when tracing). */
export function installRouteNaming(app: FastifyInstance): void {
  if (!tracing()) return;
  app.addHook('onRequest', (request, _reply, done) => {
    const span = serverSpans.get(request.raw);
    const route = request.routeOptions.url;
    if (span && route !== undefined) {
      setSpanAttributes(span, { 'http.route': route });
      renameSpan(span, `${KNOWN_METHODS.has(request.method) ? request.method : 'HTTP'} ${route}`);
    }
    done();
  });
}
