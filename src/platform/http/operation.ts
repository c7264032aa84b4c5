// The HTTP face of an operation: a route parses its request into the operation's input, calls it here,
// and renders the outcome. A replayed outcome carries `Idempotent-Replayed: true` and is rendered as stored
// (replay.ts); a replayed business error carries the header too (as a header of the rebuilt ApiError, which the
// error renderer sends).
import type { FastifyContextConfig, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { runOperation, type Operation } from '../operations.ts';
import { principalOf } from './auth.ts';
import { sendsReplay } from './replay.ts';

/**
 * Whether a route's body may be left out: a POST whose JSON body is an object that requires no member (an action
 * with options: capture, release, freeze, approve, rotate a secret). Left out, it is the empty object, so
 * `POST …/release` with no body works as with `{}` (as Stripe's capture does), and the OpenAPI document says the
 * body is optional. A PUT or PATCH always needs its body: an absent one is no "replace with the defaults" or
 * "change nothing" (docs/decisions.md "A POST whose options are all optional takes no body").
 */
export function bodyMayBeLeftOut(method: string, body: unknown): boolean {
  if (method !== 'POST' || body === null || typeof body !== 'object') return false;
  const schema = body as { type?: unknown; required?: unknown };
  return schema.type === 'object' && (!Array.isArray(schema.required) || schema.required.length === 0);
}

/**
 * The platform's `preValidation` step for such a route: an absent body is the empty object, before validation, so
 * the route's schema still judges every body that is sent (a JSON `null` too, which is not an object).
 */
export function absentBodyIsEmpty(request: FastifyRequest): void {
  if (request.body !== undefined) return;
  const route = request.routeOptions;
  if (bodyMayBeLeftOut(request.method, route.schema?.body)) request.body = {};
}

/**
 * Whether a route takes no body: the face of an operation or a query whose schema declares none (verify-domain,
 * DELETE …/webhook, resend). Its input is the path and the credential; routes that read a body of their own (a DNS
 * message, a provider's notification) are no operation's face and keep their own rules.
 */
export function takesNoBody(route: { schema?: { body?: unknown }; config?: FastifyContextConfig }): boolean {
  return route.schema?.body === undefined && (route.config?.operation !== undefined || route.config?.query !== undefined);
}

/**
 * Whether an empty body is no body on this route: where the body may be left out (`bodyMayBeLeftOut`) and where the
 * route takes none. Either parser (JSON, or any other framing of nothing) asks it, so `DELETE` with
 * `Content-Type: application/json` and no bytes is the same request as without the header.
 */
export function emptyBodyIsNone(request: FastifyRequest): boolean {
  return bodyMayBeLeftOut(request.method, request.routeOptions.schema?.body) || takesNoBody(request.routeOptions);
}

/**
 * The platform's `preValidation` step for a route that takes no body: a JSON body with members is refused, naming
 * the first, as a route with a body refuses a member it does not know (docs/decisions.md "Strict request bodies"),
 * so a client that believes verify-domain takes `{"domain": …}` is told so rather than answered 200. An empty
 * object is no body (clients send `{}` for "no options"); any other JSON value (an array, `null`, a string) is not one.
 */
export function refuseUnwantedBody(request: FastifyRequest): void {
  const body = request.body;
  if (body === undefined || Buffer.isBuffer(body) || !takesNoBody(request.routeOptions)) return;
  const names = body !== null && typeof body === 'object' && !Array.isArray(body) ? Object.keys(body) : undefined;
  if (names?.length === 0) {
    request.body = undefined;
    return;
  }
  const what = `${request.method} ${request.routeOptions.url} takes no body (send none, or {})`;
  if (names === undefined) throw new ApiError('invalid_input', { detail: `body must be empty: ${what}` });
  const violation = { path: `body/${names[0]}`, message: 'is not a known member here' };
  throw new ApiError('invalid_input', { detail: `${violation.path} ${violation.message}: ${what}`, extra: { errors: [violation] } });
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
