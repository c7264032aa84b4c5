// The HTTP face of an operation: a route parses its request into the operation's input, calls it here,
// and renders the outcome. A replayed outcome carries `Idempotent-Replayed: true` and is rendered as stored
// (replay.ts); a replayed business error carries the header too (as a header of the rebuilt ApiError, which the
// error renderer sends).
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { runOperation, type Operation } from '../operations.ts';
import { principalOf } from './auth.ts';
import { sendsReplay } from './replay.ts';

/**
 * A route's `preValidation` for a body that may be left out: an absent one is the empty object, before validation,
 * so the route's schema still judges every body that is sent (a JSON `null` too, which is not an object).
 */
export async function absentBodyIsEmpty(request: FastifyRequest): Promise<void> {
  if (request.body === undefined) request.body = {};
}

/** The Idempotency-Key header, unwrapped from its RFC 8941 sf-string form (`"…"`) when quoted. */
export function idempotencyKeyOf(request: FastifyRequest): string | undefined {
  const header = request.headers['idempotency-key'];
  if (header === undefined) return undefined;
  if (Array.isArray(header)) throw new ApiError('invalid_input', { detail: 'send exactly one Idempotency-Key header' });
  return /^"(.*)"$/.exec(header)?.[1] ?? header;
}

export interface Rendering<R> {
  /** Success status (default 200). */
  status?: number;
  /** Success headers computed from the result (e.g. Location). */
  headers?: (result: R) => Record<string, string>;
}

/** Runs `operation` for the authenticated caller and sends its result. */
export async function serve<I, R, C, P>(
  request: FastifyRequest,
  reply: FastifyReply,
  operation: Operation<I, R, C, P>,
  input: I,
  rendering: Rendering<R> = {},
): Promise<FastifyReply> {
  const { result, replayed } = await runOperation(request.server.gateway, operation, {
    principal: principalOf(request),
    input,
    idempotencyKey: idempotencyKeyOf(request),
  });
  const status = rendering.status ?? 200;
  reply.code(status);
  if (rendering.headers) reply.headers(rendering.headers(result));
  if (replayed) sendsReplay(reply, status);
  return reply.send(result);
}
