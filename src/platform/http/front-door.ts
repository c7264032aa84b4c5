// The listening socket of `acg serve`, opened before anything else so the process answers at once.
// Until the gateway's app is ready (database reachable, migrations applied, features built) it answers
// by itself: /healthz 200, /readyz and every other route 503 storage_unavailable with Retry-After. Then
// it hands every request to the app, without a restart.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from '../config.ts';
import { STORAGE_RETRY_AFTER_S } from '../db/faults.ts';
import { ApiError, problemBody } from '../errors.ts';

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

function answerUnavailable(baseUrl: string, request: IncomingMessage, response: ServerResponse, detail: string): void {
  const path = (request.url ?? '/').split('?')[0] ?? '/';
  response.setHeader('x-request-id', randomUUID());
  if (path === '/healthz') {
    response.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ status: 'ok' }));
    return;
  }
  response.setHeader('retry-after', String(STORAGE_RETRY_AFTER_S));
  if (path.startsWith('/oauth/')) {
    response
      .writeHead(503, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' })
      .end(JSON.stringify({ error: 'temporarily_unavailable', error_description: detail }));
    return;
  }
  const body = problemBody(baseUrl, new ApiError('storage_unavailable', { detail }));
  response.writeHead(503, { 'content-type': 'application/problem+json; charset=utf-8' }).end(JSON.stringify(body));
}

export async function openFrontDoor(config: Pick<Config, 'host' | 'port' | 'baseUrl'>): Promise<FrontDoor> {
  let app: RequestHandler | undefined;
  let closing = false;
  const inFlight = new Set<ServerResponse>();
  const server: Server = createServer((request, response) => {
    if (closing) {
      response.setHeader('connection', 'close');
      answerUnavailable(config.baseUrl, request, response, 'the gateway is shutting down; retry on another instance');
      return;
    }
    if (!app) {
      answerUnavailable(config.baseUrl, request, response, 'the gateway is starting and waits for its database; retry shortly');
      return;
    }
    inFlight.add(response);
    response.once('close', () => inFlight.delete(response));
    app(request, response);
  });
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
    close() {
      closing = true;
      for (const response of inFlight) if (!response.headersSent) response.setHeader('connection', 'close');
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
    },
  };
}
