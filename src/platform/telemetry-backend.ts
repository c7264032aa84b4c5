// The types telemetry.ts (the calls at the chokepoints) and telemetry-sdk.ts (the SDK behind them, loaded only
// when tracing) share, apart so that neither module imports the other.

export type AttributeValue = string | number | boolean;
export type Attributes = Readonly<Record<string, AttributeValue | undefined>>;
export type SpanKind = 'internal' | 'server' | 'client';

declare const spanBrand: unique symbol;
/** A span in flight; opaque outside the telemetry modules. */
export type SpanRef = { readonly [spanBrand]: true };
declare const remoteBrand: unique symbol;
/** A trace context received from elsewhere (a `traceparent` header, an MCP request's `_meta`, a stored delivery's). */
export type RemoteParent = { readonly [remoteBrand]: true };

/** Header-like carriers a trace context is read from or written to (W3C `traceparent`, `tracestate`). */
export type Carrier = Readonly<Record<string, unknown>>;

export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  /** The parent: the active span when absent; a span or a remote context when given; `null` starts a new trace. */
  parent?: SpanRef | RemoteParent | null;
  links?: ReadonlyArray<{ span: SpanRef; attributes?: Attributes }>;
}

/** What the SDK module provides; every function below delegates to it once it is loaded. */
export interface TelemetryBackend {
  start(name: string, options: SpanOptions): SpanRef;
  /** Runs `work` with `span` as the active span (and so the parent of the spans `work` starts). */
  within<T>(span: SpanRef, work: () => T): T;
  /** Runs `work` with no active span (work it schedules for later belongs to no request). */
  detached<T>(work: () => T): T;
  /** Listeners added to `emitter` from now on run with `span` active (a request's body events, its 'finish'). */
  bind(span: SpanRef, emitter: NodeJS.EventEmitter): void;
  active(): SpanRef | undefined;
  set(span: SpanRef, attributes: Attributes): void;
  rename(span: SpanRef, name: string): void;
  event(span: SpanRef, name: string, attributes: Attributes): void;
  link(span: SpanRef, to: SpanRef, attributes: Attributes): void;
  /** Marks the span as an error with `message` as its status message (an HTTP status, an error code); `end` ends it later. */
  fail(span: SpanRef, message: string): void;
  /**
   * Ends the span. A failure marks it as an error: a thrown value is recorded as its exception (type and
   * message), a string is the status message alone (an HTTP 5xx). A refusal is not a failure: callers decide.
   */
  end(span: SpanRef, failure?: unknown): void;
  extract(carrier: Carrier): RemoteParent | undefined;
  /** `traceparent` (and `tracestate`) naming `span` as the parent of what the receiver does. */
  inject(span: SpanRef): Record<string, string>;
  ids(span: SpanRef): { traceId: string; spanId: string } | undefined;
  shutdown(): Promise<void>;
}
