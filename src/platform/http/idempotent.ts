// Route-side use of the idempotency mechanism: one call wraps an operation so that it runs at most
// once per (caller, route, key), with its response stored in the operation's own transaction.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, problemBody } from '../errors.ts';
import type { Queryable } from '../db/database.ts';
import { fingerprint, parseIdempotencyKey, REPLAY_HEADER, type KeyRule, type StoredResponse } from '../idempotency.ts';
import { principalScope } from '../principal.ts';

export interface IdempotentOptions {
  keyRule?: KeyRule;
  /** Response members holding a secret: sent once, never stored, so replays omit them. */
  secretFields?: readonly string[];
  /** Overrides the caller scope (defaults to the principal, or the client address when anonymous). */
  scope?: string;
  /** false: a key is honoured when sent, but the operation also runs without one (routes the spec does not mark). */
  required?: boolean;
}

export interface RouteResult {
  status?: number;
  body: unknown;
  headers?: Record<string, string>;
}

function callerScope(request: FastifyRequest): string {
  return request.principal ? principalScope(request.principal) : `address:${request.ip}`;
}

function send(reply: FastifyReply, stored: StoredResponse, replayed: boolean): FastifyReply {
  reply.code(stored.status).headers(stored.headers);
  if (replayed) reply.header(REPLAY_HEADER, 'true');
  if (stored.status >= 400) reply.type('application/problem+json');
  return reply.send(stored.body);
}

export interface PrepareOption<P> {
  /**
   * Slow work outside the database (e.g. a DNS lookup) that the operation needs. It runs after the key is
   * claimed, so a replay never repeats it, and before the transaction opens, so no transaction (on PGlite:
   * the whole database) waits on the network. Its ApiErrors are stored and replayed like the operation's.
   */
  prepare?: () => Promise<P>;
}

/**
 * Requires an Idempotency-Key and runs `operation` once for it. The operation gets the transaction
 * that must carry its effect; its result is stored in that same transaction. A business failure
 * (ApiError below 500) is stored and replayed too; anything else gives the key back.
 */
export async function respondIdempotently<P = undefined>(
  request: FastifyRequest,
  reply: FastifyReply,
  options: IdempotentOptions & PrepareOption<P>,
  operation: (tx: Queryable, prepared: P) => Promise<RouteResult>,
): Promise<FastifyReply> {
  const { db, idempotency, config } = request.server.gateway;
  const prepare = async (): Promise<P> => (options.prepare ? options.prepare() : (undefined as P));
  const key = parseIdempotencyKey(request.headers['idempotency-key'], options.keyRule);
  if (key === undefined) {
    if (options.required === false) {
      const prepared = await prepare();
      const result = await db.transaction((tx) => operation(tx, prepared));
      return send(reply, { status: result.status ?? 200, body: result.body, headers: result.headers ?? {} }, false);
    }
    throw new ApiError('idempotency_required', { detail: 'send an Idempotency-Key header (a UUID is a good key)' });
  }
  const scope = options.scope ?? callerScope(request);
  const route = `${request.method} ${request.routeOptions.url}`;
  const requestFingerprint = fingerprint(request.method, request.url, request.body);
  const failureOf = (error: ApiError): StoredResponse => ({
    status: error.status,
    body: problemBody(config.baseUrl, error),
    headers: error.options.headers ?? {},
  });

  if (!options.prepare) {
    // One transaction claims the key, runs the operation and stores its response: one commit per request.
    // A business failure rolls back to the savepoint (undoing the operation's writes, keeping the claim)
    // and is stored; anything else rolls everything back, the claim included, so the key can be retried.
    const outcome = await db.transaction(async (tx) => {
      const claimed = await idempotency.claim(scope, route, key, requestFingerprint, tx);
      if (claimed.kind === 'replay') return { response: claimed.response, replayed: true };
      await tx.query('SAVEPOINT operation');
      let response: StoredResponse;
      try {
        const result = await operation(tx, undefined as P);
        response = { status: result.status ?? 200, body: result.body, headers: result.headers ?? {} };
      } catch (error) {
        if (!(error instanceof ApiError) || error.status >= 500) throw error;
        await tx.query('ROLLBACK TO SAVEPOINT operation');
        response = failureOf(error);
      }
      await idempotency.complete(tx, claimed.claim, response, options.secretFields);
      return { response, replayed: false };
    });
    return send(reply, outcome.response, outcome.replayed);
  }

  // With slow outside work (prepare), the claim commits first, so a retry arriving meanwhile sees the
  // request running (409 idempotency_key_in_use) instead of waiting on it.
  const outcome = await idempotency.claim(scope, route, key, requestFingerprint);
  if (outcome.kind === 'replay') return send(reply, outcome.response, true);

  const { claim } = outcome;
  try {
    const prepared = await prepare();
    const stored = await db.transaction(async (tx) => {
      const result = await operation(tx, prepared);
      const response: StoredResponse = { status: result.status ?? 200, body: result.body, headers: result.headers ?? {} };
      await idempotency.complete(tx, claim, response, options.secretFields);
      return response;
    });
    return send(reply, stored, false);
  } catch (error) {
    if (error instanceof ApiError && error.status < 500) {
      const failure = failureOf(error);
      await idempotency.complete(db, claim, failure);
      return send(reply, failure, false);
    }
    await idempotency.abandon(claim).catch(() => {});
    throw error;
  }
}
