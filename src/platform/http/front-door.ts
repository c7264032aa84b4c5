// The listening socket of `acg serve`, opened before anything else so the process answers at once.
// Until the gateway's app is ready (database reachable, migrations applied, features built) it answers
// by itself: /healthz 200, /readyz and every other route 503 storage_unavailable with Retry-After. Then
// it hands every request to the app, without a restart. This is the server that listens, so what Node
// refuses before any request exists (oversized headers or URL, a malformed request line, a timeout) is
// answered here, with our bodies, in both phases; Fastify's own clientErrorHandler never sees it.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Config } from '../config.ts';
import { ApiError, problemBody } from '../errors.ts';
import { answerHeaders } from './answer-headers.ts';
import { isPagePath, newNonce, pageHeaders, refusalPage } from './pages.ts';
import { answerClientError, rememberExchanges, targetPath, type ClientErrorContext } from './render-error.ts';

export type RequestHandler = (request: IncomingMessage, response: ServerResponse) => void;

export interface FrontDoor {
  url: string;
  /** From now on `app` answers every request. */
  open(app: RequestHandler): void;
  /**
   * Stops accepting connections and resolves once the requests in flight have finished; each of them
   * closes its connection, and a request arriving meanwhile on a kept-alive one gets 503.
   */
  close(): Promise<void>;
}

/**
 * How long a closing door still accepts and reads, answering 503: long enough for the event loop to come round to
 * what arrived while it was busy, short beside the stop's 15 s budget.
 */
const CLOSE_SETTLE_MS = 200;
/** How long a connection accepted before the door closed, with no request in flight, may still deliver one. */
const CLOSE_LAST_READ_MS = 250;

const REQUEST_ID_PATTERN = /^[A-Za-z0-9._:-]{1,100}$/;

/** The request's id: the caller's `X-Request-Id` when it is a plain token of at most 100 characters, else a new one. */
export function requestIdOf(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID_PATTERN.test(given) ? given : randomUUID();
}

/**
 * What the front door answers by itself, before the app is ready or once it stops: with the caller's request id and
 * one log line, as the app's answers (docs/decisions.md "Request ids and logs"; found from outside: a random id, and
 * no line).
 */
function answerUnavailable(config: Pick<Config, 'baseUrl' | 'mode'>, request: IncomingMessage, response: ServerResponse, detail: string, log: ClientErrorContext['log']): void {
  const path = targetPath(request.url ?? '/');
  const reqId = requestIdOf(request);
  const startedMs = performance.now();
  response.setHeader('x-request-id', reqId);
  for (const [name, value] of Object.entries(answerHeaders(config))) response.setHeader(name, value);
  response.once('finish', () => {
    // `req` as the logger's serializer reads a request (its url and ip), which it turns into the path and address.
    const fields = { reqId, req: { method: request.method, url: path, ip: request.socket.remoteAddress }, res: { statusCode: response.statusCode }, responseTime: performance.now() - startedMs };
    if (response.statusCode < 400) log.info(fields, 'request completed');
    // At info, as a request an outage fails once the gateway runs: the state (waiting for the database, stopping) is
    // said once by its own line, not at warn by every request and load balancer probe (found from outside).
    else log.info({ ...fields, code: 'storage_unavailable' }, detail);
  });
  if (path === '/healthz') {
    response.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(healthBody(config)));
    return;
  }
  const refusal = new ApiError('storage_unavailable', { detail });
  for (const [name, value] of Object.entries(refusal.httpHeaders)) response.setHeader(name, value);
  if ((request.method === 'GET' || request.method === 'HEAD') && isPagePath(path)) {
    // A person's browser shows this: a page, as the route's document says, with every page's headers.
    const nonce = newNonce();
    response.writeHead(503, pageHeaders(nonce)).end(refusalPage(nonce, { status: 503, code: refusal.code, detail }));
    return;
  }
  if (path.startsWith('/oauth/')) {
    response
      .writeHead(503, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' })
      .end(JSON.stringify({ error: 'temporarily_unavailable', error_description: detail }));
    return;
  }
  const body = problemBody(config.baseUrl, refusal);
  response.writeHead(503, { 'content-type': 'application/problem+json; charset=utf-8' }).end(JSON.stringify(body));
}

/**
 * What /healthz answers, here and in the app (src/health/routes.ts): the process answers, and the mode it runs in. The
 * mode is said here, where no database is asked, so a CLI command learns whether the gateway is a dev one while its
 * database is slow or away (found in CI: /readyz's 500 ms database check, late under load, left `acg demo` without
 * the dev credential).
 */
export function healthBody(config: Pick<Config, 'mode'>): { status: 'ok'; mode: Config['mode'] } {
  return { status: 'ok', mode: config.mode };
}

/** How often Node looks for requests past their time: a late one is cut between its deadline and this later. */
const TIMEOUT_CHECK_INTERVAL_MS = 1000;

/** Options of every server that listens: here and Fastify's own (platform/http/app.ts). */
export function serverOptions(config: Pick<Config, 'requestTimeoutMs'>) {
  return {
    // A missing Host is refused by the app with a problem body (platform/http/app.ts), not by Node with an empty 400.
    requireHostHeader: false,
    // A request (headers and body) must arrive whole within this, or it is answered 408 and its connection closed:
    // Node's own five minutes let a client that announced more body than it sent hold a connection that long.
    requestTimeout: config.requestTimeoutMs,
    headersTimeout: config.requestTimeoutMs,
    connectionsCheckingInterval: Math.min(TIMEOUT_CHECK_INTERVAL_MS, config.requestTimeoutMs),
  };
}

/**
 * An `Expect` other than 100-continue, which Node would answer 417 with no body: RFC 9110 §10.1.1 lets a
 * server ignore it, so the request is served as if it had not been sent.
 */
export function serveUnmetExpectations(server: Server): void {
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => server.emit('request', request, response));
}

type DoorConfig = Pick<Config, 'host' | 'port' | 'baseUrl' | 'mode' | 'requestTimeoutMs'>;

export async function openFrontDoor(config: DoorConfig, log: ClientErrorContext['log']): Promise<FrontDoor> {
  let app: RequestHandler | undefined;
  let closing = false;
  const inFlight = new Set<ServerResponse>();
  const connections = new Set<Socket>();
  const server: Server = createServer(serverOptions(config), (request, response) => {
    if (closing) {
      response.setHeader('connection', 'close');
      answerUnavailable(config, request, response, 'the gateway is shutting down; retry on another instance', log);
      return;
    }
    if (!app) {
      answerUnavailable(config, request, response, 'the gateway is starting and waits for its database; retry shortly', log);
      return;
    }
    inFlight.add(response);
    response.once('close', () => inFlight.delete(response));
    app(request, response);
  });
  server.on('connection', (socket: Socket) => {
    connections.add(socket);
    socket.once('close', () => connections.delete(socket));
  });
  // The base URL is read at each answer: with PORT=0 it is known only once the socket is bound.
  server.on('clientError', (error: Error, socket: Socket) => answerClientError(error, socket, { baseUrl: config.baseUrl, headers: answerHeaders(config), log }));
  serveUnmetExpectations(server);
  rememberExchanges(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: config.host, port: config.port }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`,
    open(handler) {
      app = handler;
    },
    async close() {
      closing = true;
      for (const response of inFlight) {
        if (!response.headersSent) response.setHeader('connection', 'close');
        // And its connection ends once the answer is sent, whatever the app wrote in its headers: kept alive, it held
        // the stop until the client's idle timeout (found from outside: 7 s, against 0.2 s with nothing in flight).
        const socket = response.socket;
        response.once('finish', () => socket?.end());
      }
      // Requests sent before the stop may not have been read yet: the event loop was busy (the embedded engine shares
      // its thread), so their connections were still waiting to be accepted, or their bytes unread. Closing now reset
      // them, unanswered (found from outside: 14–16 requests sent seconds before a Ctrl-C on PGlite under load). The
      // door goes on listening for a moment, so they are read and answered 503 (Connection: close).
      await new Promise((resolve) => setTimeout(resolve, CLOSE_SETTLE_MS));
      let lastRead: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        server.close(() => {
          clearTimeout(lastRead);
          resolve();
        });
        server.closeIdleConnections();
        // Node counts a connection idle only between requests: one that has sent nothing, or part of a request's
        // head, held the stop for its whole budget (15 s, then exit 1 without closing the database; found from
        // outside). A connection without a request in flight was promised nothing: it is closed, after one last
        // read, since one accepted in the settle's last moments may carry a request not read yet (found from
        // outside: 46–56 reset under a stream of new connections, sent 20 ms before the close). What reaches the
        // listening socket after its close is refused, which a client knows was never received.
        lastRead = setTimeout(() => {
          const serving = new Set([...inFlight].map((response) => response.socket));
          for (const socket of connections) if (!serving.has(socket)) socket.destroy();
        }, CLOSE_LAST_READ_MS);
      });
    },
  };
}
