// When the gateway traces: only when the standard OTEL_* variables name a destination. Otherwise the SDK module
// is never imported and every chokepoint function is a pass-through. The SDK module's loader is replaced here by
// one that counts its loads (a loader, not a module mock, since a worker's files share one module cache:
// vitest.config.ts); the real one is exercised end to end in tracing-end-to-end.test.ts.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { SpanRef, TelemetryBackend } from '../../src/platform/telemetry-backend.ts';
import { activeSpan, inSpan, logTraceFields, processWideLog, startTelemetry as startWith, stopTelemetry, telemetryRequested, traceHeaders, traceProblemLog, tracing, TRACE_PROBLEM_INTERVAL_MS } from '../../src/platform/telemetry.ts';

const sdk = { imports: 0, failWith: undefined as Error | undefined, shutdowns: 0, report: undefined as ((problem: string) => void) | undefined };

/** The stand-in SDK module's loader: counts its loads, and starts a backend that records nothing. */
async function loadSdk(): Promise<{ startSdk(report: (problem: string) => void): TelemetryBackend }> {
  sdk.imports += 1;
  return {
    startSdk: (report): TelemetryBackend => {
      if (sdk.failWith) throw sdk.failWith;
      sdk.report = report;
      const span = {} as SpanRef;
      // Some span is always active, as in a gateway serving requests, except inside `detached`.
      let detached = 0;
      return {
        start: () => span,
        within: (_span, work) => work(),
        detached: (work) => {
          detached += 1;
          try {
            return work();
          } finally {
            detached -= 1;
          }
        },
        bind: () => {},
        active: () => (detached > 0 ? undefined : span),
        set: () => {},
        rename: () => {},
        event: () => {},
        link: () => {},
        fail: () => {},
        end: () => {},
        extract: () => undefined,
        inject: () => ({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }),
        ids: () => ({ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331' }),
        shutdown: async () => {
          sdk.shutdowns += 1;
        },
      };
    },
  };
}

const startTelemetry = (env: Parameters<typeof startWith>[0], lines: Parameters<typeof startWith>[1]) => startWith(env, lines, loadSdk);

const log = () => ({ info: vi.fn(), warn: vi.fn(), error: vi.fn() });

afterEach(async () => {
  await stopTelemetry();
  sdk.failWith = undefined;
});

describe('telemetryRequested', () => {
  it('is true only when a destination is named, and never when the SDK is disabled or the traces exporter is none', () => {
    expect(telemetryRequested({})).toBe(false);
    expect(telemetryRequested({ OTEL_SERVICE_NAME: 'acg', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_TRACES_SAMPLER: 'always_on' })).toBe(false);
    expect(telemetryRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(true);
    expect(telemetryRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' })).toBe(true);
    expect(telemetryRequested({ OTEL_TRACES_EXPORTER: 'console' })).toBe(true);
    expect(telemetryRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' })).toBe(false);
    expect(telemetryRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' })).toBe(false);
    expect(telemetryRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' })).toBe(false);
  });
});

describe('startTelemetry', () => {
  it('without a destination, never imports the SDK, and every chokepoint passes straight through', async () => {
    expect(await startTelemetry({ OTEL_SERVICE_NAME: 'acg' }, log())).toBe(false);
    expect(sdk.imports).toBe(0);
    expect(tracing()).toBe(false);
    expect(await inSpan('operation x', { attributes: { a: 1 } }, async (span) => span)).toBeUndefined();
    expect(activeSpan()).toBeUndefined();
    expect(traceHeaders()).toEqual({});
    expect(logTraceFields()).toEqual({});
  });

  it('with a destination, loads the SDK once; the log mixin and outgoing headers then name the trace; stopping flushes it', async () => {
    const lines = log();
    expect(await startTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, lines)).toBe(true);
    expect(await startTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, lines)).toBe(true);
    expect(sdk.imports).toBe(1);
    expect(lines.info).toHaveBeenCalledTimes(1);
    expect(tracing()).toBe(true);
    expect(logTraceFields()).toEqual({ trace_id: '0af7651916cd43dd8448eb211c80319c', span_id: 'b7ad6b7169203331' });
    expect(traceHeaders()).toEqual({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
    // pino merges each line's fields into what the mixin returns: never the same object twice.
    expect(logTraceFields()).not.toBe(logTraceFields());
    await stopTelemetry();
    expect(sdk.shutdowns).toBe(1);
    expect(tracing()).toBe(false);
  });

  it('serves on without traces, saying why in one error line, when the SDK cannot start', async () => {
    sdk.failWith = new Error('bad sampler');
    const lines = log();
    expect(await startTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, lines)).toBe(false);
    expect(tracing()).toBe(false);
    expect(lines.error).toHaveBeenCalledWith({ err: sdk.failWith }, 'OpenTelemetry tracing could not start; serving without traces');
  });
});

describe('lines about the whole process', () => {
  it("are written outside any span, so they name no request's trace (found from outside: the database's outage lines carried a mint's)", async () => {
    const lines = log();
    expect(await startTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, lines)).toBe(true);
    const seen: Array<Record<string, string>> = [];
    lines.warn.mockImplementation(() => void seen.push(logTraceFields()));
    lines.info.mockImplementation(() => void seen.push(logTraceFields()));
    expect(logTraceFields()).not.toEqual({});
    const wide = processWideLog(lines);
    wide.warn({ reason: 'connection refused' }, 'database unavailable');
    wide.info({ outageMs: 10 }, 'database available again');
    expect(seen).toEqual([{}, {}]);
    expect(lines.warn).toHaveBeenCalledWith({ reason: 'connection refused' }, 'database unavailable');
  });
});

describe("the SDK's own failures (found from outside: traces lost to an unreachable collector were silent)", () => {
  it('reach the log as warn lines: the SDK is given a reporter when it starts', async () => {
    const lines = log();
    expect(await startTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, lines)).toBe(true);
    // The line is written outside any span: the request whose context the exporter's timer kept is not named.
    let traceFields: Record<string, string> | undefined;
    lines.warn.mockImplementation(() => {
      traceFields = logTraceFields();
    });
    expect(logTraceFields()).not.toEqual({});
    sdk.report!('{"message":"connect ECONNREFUSED 127.0.0.1:4318"}');
    expect(lines.warn).toHaveBeenCalledWith({ problem: '{"message":"connect ECONNREFUSED 127.0.0.1:4318"}', alsoSince: 0 }, expect.stringContaining('traces may be lost'));
    expect(traceFields).toEqual({});
  });

  it('at most one line a minute, counting those left out', () => {
    const warn = vi.fn();
    let nowMs = 0;
    const report = traceProblemLog({ warn }, () => nowMs);
    report('first');
    for (let i = 0; i < 5; i++) report('again');
    nowMs = TRACE_PROBLEM_INTERVAL_MS - 1;
    report('still');
    expect(warn).toHaveBeenCalledTimes(1);
    nowMs = TRACE_PROBLEM_INTERVAL_MS;
    report('later');
    expect(warn).toHaveBeenCalledTimes(2);
    expect(warn.mock.calls[1]![0]).toEqual({ problem: 'later', alsoSince: 6 });
  });
});
