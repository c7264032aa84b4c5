// The one error catalogue. API routes render ApiError as RFC 9457 problem+json; OAuth routes render
// OAuthError as the RFC 6749 error body. Every code the spec names appears here verbatim.

import { isStorageUnavailable } from './db/faults.ts';
import type { RefusalReason } from './reasons.ts';
export interface ErrorEntry {
  status: number;
  title: string;
  /** The Retry-After every refusal of this code carries unless it gives its own (seconds). */
  retryAfterS?: number;
}

export const ERROR_CATALOGUE = {
  invalid_input: { status: 400, title: 'The request is not valid' },
  agent_required: { status: 400, title: 'An agentId naming one of your agents is required' },
  idempotency_required: { status: 400, title: 'This operation requires an idempotency key' },
  unauthorized: { status: 401, title: 'Authentication is required' },
  INSUFFICIENT_CREDITS: { status: 402, title: 'The agent does not have enough credit' },
  CAP_EXCEEDED: { status: 402, title: 'A spending cap or budget would be exceeded' },
  approval_required: { status: 402, title: 'The owner must approve this before it runs' },
  human_required: { status: 403, title: 'Only a verified human owner may do this' },
  owner_claim_required: { status: 403, title: "The owner's verified identity no longer holds" },
  scope_required: { status: 403, title: 'The credential lacks a required scope' },
  FROZEN: { status: 403, title: 'The agent is frozen' },
  SCOPE_FORBIDDEN: { status: 403, title: 'The agent may not use this service or category' },
  agent_mismatch: { status: 403, title: 'An agent may act only for itself' },
  owner_required: { status: 403, title: 'Only the owner of this resource may do this' },
  forbidden: { status: 403, title: 'This credential may not use this route' },
  agent_not_registered: { status: 403, title: 'No agent is registered for this identity' },
  inbox_not_allowed: { status: 403, title: "The inbox is not on the agent's mail allowlist" },
  not_found: { status: 404, title: 'No such resource' },
  method_not_allowed: { status: 405, title: 'This method is not allowed on this resource' },
  domain_verification_pending: { status: 409, title: 'The DNS TXT record is not visible yet' },
  category_in_use: { status: 409, title: 'An active offer uses this category' },
  idempotency_key_reused: { status: 409, title: 'This Idempotency-Key was used with a different request' },
  idempotency_key_in_use: { status: 409, title: 'A request with this Idempotency-Key is still running' },
  conflict: { status: 409, title: 'The resource is not in a state that allows this' },
  hold_resolved: { status: 409, title: 'The hold is no longer held (captured, released or expired)' },
  voucher_revoked: { status: 409, title: "The hold's voucher was revoked (its agent was frozen or retired and its credit released)" },
  refund_exceeds_captured: { status: 400, title: 'The refund is more than what is captured and not yet refunded' },
  refund_window_closed: { status: 409, title: "The offer's refund window has closed" },
  insufficient_earnings: { status: 409, title: "The merchant's earnings do not cover the refund" },
  connector_not_configured: { status: 409, title: 'The agent has no connector configured for this service' },
  upstream_not_found: { status: 404, title: 'The upstream service has no such resource' },
  upstream_unprocessable: { status: 422, title: 'The upstream resource is one the gateway cannot read' },
  upstream_rate_limited: { status: 429, title: 'The upstream service is rate limiting us' },
  upstream_auth_failed: { status: 502, title: 'The upstream service refused our credentials' },
  upstream_unavailable: { status: 502, title: 'The upstream service is unavailable or answered unexpectedly' },
  upstream_timeout: { status: 504, title: 'The upstream service did not answer in time' },
  request_timeout: { status: 408, title: 'The request did not arrive in time' },
  precondition_failed: { status: 412, title: 'The resource changed since the version the request names (If-Match)' },
  payload_too_large: { status: 413, title: 'The request body is too large' },
  uri_too_long: { status: 414, title: 'A path parameter is too long' },
  unsupported_media_type: { status: 415, title: 'The request body has an unsupported content type' },
  rate_limited: { status: 429, title: 'Too many requests' },
  headers_too_large: { status: 431, title: 'The request headers are too large' },
  internal_error: { status: 500, title: 'Internal error' },
  runtime_configuration_required: { status: 503, title: 'The gateway runtime is not configured' },
  signing_configuration_required: { status: 503, title: 'No signing key is configured' },
  runtime_unavailable: { status: 503, title: 'A runtime dependency is unavailable' },
  workspace_unavailable: { status: 503, title: 'The workspace is unavailable' },
  provider_configuration_required: { status: 503, title: 'A required provider is not configured' },
  link_configuration_required: { status: 503, title: 'No payment-approval provider is configured' },
  payment_unavailable: { status: 503, title: 'The payment provider is unavailable' },
  storage_unavailable: { status: 503, title: 'The database is unavailable', retryAfterS: 1 },
  overloaded: { status: 503, title: 'Too many requests are waiting; retry after the delay' },
} as const satisfies Record<string, ErrorEntry>;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

export interface ApiErrorOptions {
  /** Human-readable explanation specific to this occurrence. */
  detail?: string;
  /** Overrides the catalogue status where the spec uses one code under two statuses (CAP_EXCEEDED). */
  status?: number;
  /** Extra members of the problem body (e.g. `dnsRecord`, `intentId`); `reason` only from the catalogue (reasons.ts). */
  extra?: Record<string, unknown> & { reason?: RefusalReason };
  /**
   * Seconds after which a retry may succeed. A fact of the refusal, not of a transport: HTTP renders it as
   * the `Retry-After` header, MCP as the problem's `retryAfterS` member (a tool result has no headers).
   */
  retryAfterS?: number;
  /**
   * A page where a human must act before a retry can succeed (approve a top-up, a purchase). Every face
   * shows `approvalUrl` in the problem; MCP also asks the client to open it (a URL elicitation).
   */
  approval?: HumanApproval;
  /**
   * Not the key's answer yet: a refusal the owner can lift while the request's own approval still stands (the
   * agent frozen, a budget or credit short after the owner approved), so it is not stored and the retry with the
   * same key runs again. (`approval` implies it.)
   */
  provisional?: boolean;
  /** Extra response headers of the HTTP face (e.g. `WWW-Authenticate`, `Allow`); never `Retry-After`. */
  headers?: Record<string, string>;
  /**
   * The member of the operation's input the refusal is about, named from the input's root (`memberRefusal`). Each
   * face names it from its own root, as its schema refusals name a member (HTTP `body/…`, MCP `arguments/…`), in the
   * problem's `detail` ("<name> <message>") and its `errors` ([{path, message}]). Instead of `detail`.
   */
  member?: MemberViolation;
}

/**
 * What is wrong with one member of an operation's input: where it is (slash-separated from the input's root, as
 * RFC 6901 without its leading slash: `budgets/0/merchantId`; empty for the whole input) and what is wrong with it.
 */
export interface MemberViolation {
  path: string;
  message: string;
}

/** How a face names a member of an operation's input (HTTP: `body/…` or `params/…`; MCP: `arguments/…`). */
export type MemberNamer = (path: string) => string;

/** A member's path below `root`, either of which may be empty (the root itself): `body` and `budgets/0` are `body/budgets/0`. */
export function pathUnder(root: string, path: string): string {
  return root === '' ? path : path === '' ? root : `${root}/${path}`;
}

/** "<name> <message>": the detail of a refusal of one member, the name as a face names it (as its schema refusals' details read). */
function memberDetail(name: string, message: string): string {
  return name === '' ? message : `${name} ${message}`;
}

/** A page a human must visit, and what to tell them. */
export interface HumanApproval {
  url: string;
  /** Names this approval across retries (the retained intent's id): the MCP elicitation id. */
  id: string;
  /** One or two sentences for the human (or the agent to relay). */
  message: string;
}

export class ApiError extends Error {
  readonly status: number;
  readonly title: string;
  readonly retryAfterS: number | undefined;

  constructor(
    readonly code: ErrorCode,
    readonly options: ApiErrorOptions = {},
  ) {
    super(options.detail ?? (options.member ? memberDetail(options.member.path, options.member.message) : ERROR_CATALOGUE[code].title));
    this.name = 'ApiError';
    this.status = options.status ?? ERROR_CATALOGUE[code].status;
    this.title = ERROR_CATALOGUE[code].title;
    this.retryAfterS = options.retryAfterS ?? (ERROR_CATALOGUE[code] as ErrorEntry).retryAfterS;
  }

  /** The HTTP response headers of this refusal: its own, and Retry-After from `retryAfterS`. */
  get httpHeaders(): Record<string, string> {
    const headers = { ...this.options.headers };
    if (this.retryAfterS !== undefined) headers['retry-after'] = String(this.retryAfterS);
    return headers;
  }
}

export type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'invalid_grant'
  | 'invalid_scope'
  | 'invalid_target'
  | 'invalid_redirect_uri'
  | 'invalid_client_metadata'
  | 'unsupported_grant_type'
  | 'access_denied'
  | 'temporarily_unavailable';

/**
 * 400 invalid_input refusing one member of the operation's input, by a rule its schema cannot state (a budget id used
 * twice, a merchant that does not exist): `path` from the input's root, as the schema's own refusals name it, which
 * each face renders from its root (`member`). A rule over a part of the input (the mandate a delegate's registration
 * carries as `mandate`) refuses from that part's root, and the operation names the part (`refusingMembersAt`).
 */
export function memberRefusal(path: string, message: string, options: Omit<ApiErrorOptions, 'member' | 'detail'> = {}): ApiError {
  return new ApiError('invalid_input', { ...options, member: { path, message } });
}

/**
 * Runs `check` over the part of the operation's input at `at` (a path from its root): a member it refuses is named
 * from the input's root (`at` before its path), so the face names it as the request holds it; any other outcome
 * passes unchanged. `check` may be async.
 */
export function refusingMembersAt<T>(at: string, check: () => T): T {
  const nested = (error: unknown): unknown => {
    if (!(error instanceof ApiError) || error.options.member === undefined) return error;
    const { path, message } = error.options.member;
    return new ApiError(error.code, { ...error.options, member: { path: pathUnder(at, path), message } });
  };
  try {
    const result = check();
    if (!(result instanceof Promise)) return result;
    return result.catch((error: unknown) => {
      throw nested(error);
    }) as T;
  } catch (error) {
    throw nested(error);
  }
}

export class OAuthError extends Error {
  constructor(
    readonly status: number,
    readonly error: OAuthErrorCode,
    readonly description: string,
    /** Seconds after which a retry may succeed (rendered as Retry-After), as ApiError's. */
    readonly retryAfterS?: number,
    /** Other response headers (e.g. WWW-Authenticate); never Retry-After. */
    readonly headers: Record<string, string> = {},
  ) {
    super(description);
    this.name = 'OAuthError';
  }

  /** The HTTP response headers of this error: its own, and Retry-After from `retryAfterS`. */
  get httpHeaders(): Record<string, string> {
    return this.retryAfterS === undefined ? { ...this.headers } : { ...this.headers, 'retry-after': String(this.retryAfterS) };
  }
}

export function problemType(baseUrl: string, code: string): string {
  return `${baseUrl}/docs/errors#${code}`;
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  code: string;
  detail?: string;
  [member: string]: unknown;
}

/**
 * The RFC 9457 body of a refusal. A face without headers (MCP) asks for `retryAfterS` as a member; over HTTP
 * it is the Retry-After header (`ApiError.httpHeaders`). A refusal of a member of the input (`member`) is named as
 * the face names members (`nameMember`; without one, from the input's root), in `detail` and in `errors`, as the
 * face's schema refusals are.
 */
export function problemBody(baseUrl: string, error: ApiError, options: { retryAfterMember?: boolean; nameMember?: MemberNamer } = {}): ProblemBody {
  const body: ProblemBody = {
    type: problemType(baseUrl, error.code),
    title: error.title,
    status: error.status,
    code: error.code,
  };
  const member = error.options.member;
  if (member) {
    const path = options.nameMember ? options.nameMember(member.path) : member.path;
    body.detail = memberDetail(path, member.message);
    body.errors = [{ path, message: member.message }];
  } else if (error.options.detail) body.detail = error.options.detail;
  if (options.retryAfterMember && error.retryAfterS !== undefined) body.retryAfterS = error.retryAfterS;
  if (error.options.approval) body.approvalUrl = error.options.approval.url;
  return { ...body, ...error.options.extra };
}

/**
 * What an error that is not a refusal answers, on every face (HTTP, MCP tool calls) and in the metrics: a storage
 * failure is 503 storage_unavailable with Retry-After, anything else internal_error, "logged" `where` it was.
 */
export function unexpectedAsApiError(error: unknown, where?: string): ApiError {
  if (error instanceof ApiError) return error;
  if (isStorageUnavailable(error)) {
    return new ApiError('storage_unavailable', { detail: 'the database is unavailable or did not answer in time; retry shortly' });
  }
  return new ApiError('internal_error', { detail: `an unexpected error occurred; it has been logged${where ? ` ${where}` : ''}` });
}
