// The failures a service connector reports, each with a stable machine code and the HTTP status the
// execute route answers with. A connector error means the action did not complete, so the pipeline
// releases the hold instead of capturing it.

export const CONNECTOR_ERRORS = {
  invalid_input: { status: 400, title: 'The request is not valid' },
  inbox_not_allowed: { status: 403, title: "The inbox is not on the agent's mail allowlist" },
  connector_not_configured: { status: 409, title: 'The agent has no connector configured for this service' },
  upstream_not_found: { status: 404, title: 'The upstream service has no such resource' },
  upstream_rate_limited: { status: 429, title: 'The upstream service is rate limiting us' },
  upstream_auth_failed: { status: 502, title: 'The upstream service refused our credentials' },
  upstream_unavailable: { status: 502, title: 'The upstream service is unavailable or answered unexpectedly' },
  upstream_timeout: { status: 504, title: 'The upstream service did not answer in time' },
} as const satisfies Record<string, { status: number; title: string }>;

export type ConnectorErrorCode = keyof typeof CONNECTOR_ERRORS;

export class ConnectorError extends Error {
  readonly status: number;

  constructor(
    readonly code: ConnectorErrorCode,
    /** Safe to show the caller: never carries credentials or upstream response bodies. */
    readonly detail: string,
    /** Seconds until a retry may succeed; set with upstream_rate_limited. */
    readonly retryAfterS?: number,
  ) {
    super(detail);
    this.name = 'ConnectorError';
    this.status = CONNECTOR_ERRORS[code].status;
  }
}
