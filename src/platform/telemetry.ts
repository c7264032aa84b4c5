// Traces (OpenTelemetry), as the rest of the gateway sees them: a few functions called at its chokepoints
// (the HTTP face, MCP tool calls, the operation and query runners, group commit, the database drivers,
// outbound HTTP, webhook attempts, the spending policy's decisions). Each is a no-op behind one check of
// `backend` until `startTelemetry` has loaded the SDK (telemetry-sdk.ts), which it does only when the
// standard OTEL_* variables name a destination: a gateway without one never loads it, and its hot path
// pays a comparison per call. Span names and attributes are chosen here and at the call sites that own
// them; none carries a credential, a secret, a voucher, a request body or a query string.
import { ApiError } from './errors.ts';
import type { Attributes, Carrier, RemoteParent, SpanOptions, SpanRef, TelemetryBackend } from './telemetry-backend.ts';

export type { AttributeValue, Attributes, Carrier, RemoteParent, SpanKind, SpanOptions, SpanRef, TelemetryBackend } from './telemetry-backend.ts';

let backend: TelemetryBackend | undefined;

type Env = Readonly<Record<string, string | undefined>>;

/**
 * Whether the OTEL_* environment asks for traces: an OTLP endpoint (for every signal or for traces), or a traces
 * exporter named outright (e.g. `console`), unless the SDK is disabled or the traces exporter is `none`. The
 * other standard variables (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_TRACES_SAMPLER …) refine what
 * the SDK does but name no destination, so alone they load nothing.
 */
export function telemetryRequested(env: Env): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = env.OTEL_TRACES_EXPORTER?.split(',').map((name) => name.trim().toLowerCase()).filter((name) => name !== '') ?? [];
  if (exporters.includes('none')) return false;
  return exporters.length > 0 || Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim()) || Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
}

interface StartLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

/** Loads the SDK module: the real one, or a test's stand-in. `report` takes what the SDK says went wrong (an export that failed). */
export type SdkLoader = () => Promise<{ startSdk(report: (problem: string) => void): TelemetryBackend }>;

/** At most one line a minute about the SDK's own failures: a collector down would otherwise log at every export. */
export const TRACE_PROBLEM_INTERVAL_MS = 60_000;

/**
 * What the SDK reports (its diagnostics at warn and above: an export that failed, a span dropped) as warn lines,
 * the first at once and then at most one each `TRACE_PROBLEM_INTERVAL_MS`, counting those left out: traces lost
 * to an unreachable collector were silent (found from outside).
 */
export function traceProblemLog(log: Pick<StartLog, 'warn'>, nowMs: () => number = Date.now): (problem: string) => void {
  let lastMs: number | undefined;
  let unsaid = 0;
  return (problem) => {
    const atMs = nowMs();
    if (lastMs !== undefined && atMs - lastMs < TRACE_PROBLEM_INTERVAL_MS) {
      unsaid += 1;
      return;
    }
    log.warn({ problem, alsoSince: unsaid }, 'OpenTelemetry: traces may be lost (an export failed, or the SDK dropped spans)');
    lastMs = atMs;
    unsaid = 0;
  };
}

/**
 * Loads and starts the SDK when `telemetryRequested(env)`; a gateway whose SDK cannot start serves on without
 * traces (one error line says why). Returns whether tracing is on.
 */
export async function startTelemetry(env: Env, log: StartLog, loadSdk: SdkLoader = () => import('./telemetry-sdk.ts')): Promise<boolean> {
  if (backend || !telemetryRequested(env)) return backend !== undefined;
  try {
    const { startSdk } = await loadSdk();
    const problemLog = traceProblemLog(log);
    // Said outside any span: the SDK reports from its exporter's timer, which runs in the context of whatever request
    // scheduled it, and the log mixin would name that request's trace (found from outside: a /healthz request's).
    backend = startSdk((problem) => (backend ? backend.detached(() => problemLog(problem)) : problemLog(problem)));
    log.info({ tracesExporter: env.OTEL_TRACES_EXPORTER ?? 'otlp', protocol: env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf' }, 'OpenTelemetry tracing on');
  } catch (error) {
    log.error({ err: error }, 'OpenTelemetry tracing could not start; serving without traces');
  }
  return backend !== undefined;
}

/** How long a graceful shutdown waits for the last spans to be exported (an unreachable collector is not waited out). */
const FLUSH_WAIT_MS_MAX = 3000;

/** Exports what is buffered and stops tracing (graceful shutdown), waiting at most FLUSH_WAIT_MS_MAX. */
export async function stopTelemetry(): Promise<void> {
  const stopping = backend;
  backend = undefined;
  if (!stopping) return;
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, FLUSH_WAIT_MS_MAX);
    timer.unref();
  });
  await Promise.race([stopping.shutdown().catch(() => {}), waited]);
  clearTimeout(timer);
}

/** True once the SDK is loaded: for decisions taken once (a hook registered, a log mixin installed). */
export function tracing(): boolean {
  return backend !== undefined;
}

export function startSpan(name: string, options: SpanOptions): SpanRef | undefined {
  return backend?.start(name, options);
}

export function endSpan(span: SpanRef | undefined, failure?: unknown): void {
  if (!span || !backend) return;
  // A failure given as a message names its own error.type (the caller sets it); a thrown one is named here.
  if (failure !== undefined && typeof failure !== 'string') backend.set(span, { 'error.type': errorTypeOf(failure) });
  backend.end(span, failure);
}

/**
 * What OpenTelemetry's `error.type` says of a thrown failure, in few values: an ApiError's code, else the code the
 * error carries (a SQLSTATE, a socket's errno code), else its class's name (found from outside: failed database and
 * operation spans had none).
 */
export function errorTypeOf(failure: unknown): string {
  if (failure instanceof ApiError) return failure.code;
  const code = (failure as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code !== '') return code;
  return failure instanceof Error ? failure.name : 'Error';
}

/**
 * Runs `work` in a new active span and ends it with its outcome: a thrown ApiError below 500 is a refusal
 * (its code as `acg.refusal.code`, the span not an error); anything else thrown marks the span as failed.
 * Without tracing it is `work(undefined)`.
 */
export function inSpan<T>(name: string, options: SpanOptions | (() => SpanOptions), work: (span: SpanRef | undefined) => Promise<T>): Promise<T> {
  const tracer = backend;
  if (!tracer) return work(undefined);
  const span = tracer.start(name, typeof options === 'function' ? options() : options);
  return tracer.within(span, async () => {
    try {
      const result = await work(span);
      tracer.end(span);
      return result;
    } catch (error) {
      endWithOutcome(span, error);
      throw error;
    }
  });
}

function isRefusal(error: unknown): error is ApiError {
  return error instanceof ApiError && error.status < 500;
}

/** Ends `span` after `error` was thrown through it: a refusal names its code, a failure marks the span. */
export function endWithOutcome(span: SpanRef | undefined, error: unknown): void {
  if (!span || !backend) return;
  if (isRefusal(error)) {
    backend.set(span, { 'acg.refusal.code': error.code });
    backend.end(span);
    return;
  }
  backend.set(span, { 'error.type': errorTypeOf(error) });
  backend.end(span, error);
}

/** Runs `work` with `span` active; `work()` as is without tracing or without a span. */
export function withinSpan<T>(span: SpanRef | undefined, work: () => T): T {
  return span && backend ? backend.within(span, work) : work();
}

/** Runs `work` outside any span: what it schedules (a timer) runs later in no request's trace. */
export function detached<T>(work: () => T): T {
  return backend ? backend.detached(work) : work();
}

/**
 * A log whose lines are about the whole process (the database's outage and its end), written outside any span: the
 * request that happened to notice is not what they describe (found from outside: each carried the trace of a mint,
 * or of a /readyz probe).
 */
export function processWideLog(log: { warn(fields: object, message: string): void; info(fields: object, message: string): void }) {
  return {
    warn: (fields: object, message: string) => detached(() => log.warn(fields, message)),
    info: (fields: object, message: string) => detached(() => log.info(fields, message)),
  };
}

export function bindToSpan(span: SpanRef | undefined, emitter: NodeJS.EventEmitter): void {
  if (span) backend?.bind(span, emitter);
}

/** The active span, to link to or to hand on (a call waiting for its group-commit batch). */
export function activeSpan(): SpanRef | undefined {
  return backend?.active();
}

export function setSpanAttributes(span: SpanRef | undefined, attributes: Attributes): void {
  if (span) backend?.set(span, attributes);
}

/**
 * Marks `span` as failed, with a short message, while its owner still ends it: for work that returns an
 * outcome rather than throwing one (a webhook attempt the receiver refused).
 */
export function failSpan(span: SpanRef | undefined, message: string): void {
  if (span) backend?.fail(span, message);
}

export function renameSpan(span: SpanRef | undefined, name: string): void {
  if (span) backend?.rename(span, name);
}

export function addSpanEvent(span: SpanRef | undefined, name: string, attributes: Attributes): void {
  if (span) backend?.event(span, name, attributes);
}

export function linkSpan(from: SpanRef | undefined, to: SpanRef | undefined, attributes: Attributes = {}): void {
  if (from && to) backend?.link(from, to, attributes);
}

/** The trace context a carrier names (W3C `traceparent`/`tracestate`, or what OTEL_PROPAGATORS selects). */
export function remoteParent(carrier: Carrier | undefined): RemoteParent | undefined {
  return carrier && backend ? backend.extract(carrier) : undefined;
}

/** Headers that make the receiver's work a child of `span`; none without tracing. */
export function traceHeaders(span: SpanRef | undefined = activeSpan()): Record<string, string> {
  return span && backend ? backend.inject(span) : {};
}

/**
 * The W3C trace context naming `span`, to store with work done later (a webhook delivery): its `traceparent`, and its
 * `tracestate` when the trace carries one (a caller's vendor state, which W3C Trace Context asks every participant to
 * pass on); undefined without tracing, or when the configured propagators write no `traceparent`.
 */
export function traceContextOf(span: SpanRef | undefined): { traceparent: string; tracestate?: string } | undefined {
  if (!span || !backend) return undefined;
  const { traceparent, tracestate } = backend.inject(span);
  if (traceparent === undefined) return undefined;
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/** The pino mixin of a traced gateway: every line logged inside a span names its trace and span (pino merges into the object, so each is new). */
export function logTraceFields(): Record<string, string> {
  const span = backend?.active();
  const ids = span && backend!.ids(span);
  return ids ? { trace_id: ids.traceId, span_id: ids.spanId } : {};
}
