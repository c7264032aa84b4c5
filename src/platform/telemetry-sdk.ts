// The OpenTelemetry SDK for Node behind telemetry.ts, loaded (`await import`) only when the OTEL_* environment
// names a trace destination. The SDK configures itself from the standard variables: exporter and protocol
// (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT/PROTOCOL/HEADERS/TIMEOUT), sampler
// (OTEL_TRACES_SAMPLER[_ARG]), batching (OTEL_BSP_*), span limits, propagators (OTEL_PROPAGATORS) and the
// resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). Only two choices are the gateway's: its default
// service name, and traces only: its metrics stay Prometheus (`/metrics`) and its logs stay pino lines on
// stdout, so the SDK's metric and log exporters are not started (docs/decisions.md).
import { context, diag, DiagLogLevel, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, isSpanContextValid, type Attributes as OtelAttributes, type Context, type Span } from '@opentelemetry/api';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import type { Attributes, Carrier, RemoteParent, SpanOptions, SpanRef, TelemetryBackend } from './telemetry-backend.ts';

/** The resource's service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names another. */
const SERVICE_NAME = 'agent-credit-gateway';
const TRACER_NAME = 'agent-credit-gateway';

const KINDS = { internal: SpanKind.INTERNAL, server: SpanKind.SERVER, client: SpanKind.CLIENT } as const;

function otelAttributes(attributes: Attributes | undefined): OtelAttributes | undefined {
  if (!attributes) return undefined;
  const defined: OtelAttributes = {};
  for (const [name, value] of Object.entries(attributes)) if (value !== undefined) defined[name] = value;
  return defined;
}

const spanOf = (ref: SpanRef) => ref as unknown as Span;
const refOf = (span: Span) => span as unknown as SpanRef;

/** A span in flight has `spanContext()`; a remote parent is an API Context. */
function isSpan(parent: SpanRef | RemoteParent): parent is SpanRef {
  return typeof (parent as unknown as Partial<Span>).spanContext === 'function';
}

function parentContext(parent: SpanOptions['parent']): Context {
  if (parent === undefined) return context.active();
  if (parent === null) return ROOT_CONTEXT;
  return isSpan(parent) ? trace.setSpan(ROOT_CONTEXT, spanOf(parent)) : (parent as unknown as Context);
}

/**
 * Starts the SDK and returns the backend telemetry.ts delegates to. The SDK's diagnostics at warn and above (a failed
 * export reaches them through its global error handler) go to `report`; without a diagnostic logger they went nowhere.
 */
export function startSdk(report: (problem: string) => void): TelemetryBackend {
  // The SDK's error handler passes an exception as its JSON (stack and all): its message is what a line needs.
  const messageOf = (text: string) => {
    try {
      const parsed = JSON.parse(text) as { message?: unknown };
      return typeof parsed.message === 'string' ? parsed.message : text;
    } catch {
      return text;
    }
  };
  const say = (message: string, ...args: unknown[]) => report([messageOf(message), ...args.map((arg) => (arg instanceof Error ? arg.message : String(arg)))].join(' '));
  diag.setLogger({ error: say, warn: say, info: () => {}, debug: () => {}, verbose: () => {} }, DiagLogLevel.WARN);
  const sdk = new NodeSDK({
    // The environment's resource detector runs after this base, so OTEL_SERVICE_NAME still wins.
    resource: defaultResource().merge(resourceFromAttributes({ 'service.name': SERVICE_NAME })),
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  const tracer = trace.getTracer(TRACER_NAME);
  return {
    start(name, options) {
      const links = options.links?.map((link) => ({ context: spanOf(link.span).spanContext(), attributes: otelAttributes(link.attributes) }));
      const span = tracer.startSpan(
        name,
        { kind: KINDS[options.kind ?? 'internal'], attributes: otelAttributes(options.attributes), links, root: options.parent === null },
        parentContext(options.parent),
      );
      return refOf(span);
    },
    within: (span, work) => context.with(trace.setSpan(context.active(), spanOf(span)), work),
    detached: (work) => context.with(ROOT_CONTEXT, work),
    bind(span, emitter) {
      context.bind(trace.setSpan(context.active(), spanOf(span)), emitter);
    },
    active() {
      const span = trace.getSpan(context.active());
      return span && refOf(span);
    },
    set(span, attributes) {
      spanOf(span).setAttributes(otelAttributes(attributes)!);
    },
    rename(span, name) {
      spanOf(span).updateName(name);
    },
    event(span, name, attributes) {
      spanOf(span).addEvent(name, otelAttributes(attributes));
    },
    link(span, to, attributes) {
      spanOf(span).addLink({ context: spanOf(to).spanContext(), attributes: otelAttributes(attributes) });
    },
    fail(span, message) {
      spanOf(span).setStatus({ code: SpanStatusCode.ERROR, message });
    },
    end(ref, failure) {
      const span = spanOf(ref);
      if (typeof failure === 'string') {
        span.setStatus({ code: SpanStatusCode.ERROR, message: failure });
      } else if (failure !== undefined) {
        const error = failure instanceof Error ? failure : new Error(String(failure));
        span.recordException(error);
        span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
      }
      span.end();
    },
    extract(carrier: Carrier) {
      const extracted = propagation.extract(ROOT_CONTEXT, carrier);
      const remote = trace.getSpanContext(extracted);
      return remote && isSpanContextValid(remote) ? (extracted as unknown as RemoteParent) : undefined;
    },
    inject(span) {
      const headers: Record<string, string> = {};
      propagation.inject(trace.setSpan(ROOT_CONTEXT, spanOf(span)), headers);
      return headers;
    },
    ids(span) {
      const ids = spanOf(span).spanContext();
      return isSpanContextValid(ids) ? { traceId: ids.traceId, spanId: ids.spanId } : undefined;
    },
    async shutdown() {
      try {
        await sdk.shutdown();
      } finally {
        // The API's globals outlive the SDK: unregister them, so a later start in this process registers afresh.
        trace.disable();
        propagation.disable();
        context.disable();
      }
    },
  };
}
