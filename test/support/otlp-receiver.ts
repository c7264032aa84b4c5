// An OTLP/HTTP trace receiver for tests, as a collector would be: POST /v1/traces in `http/protobuf`
// (decoded with protobufjs from the official .proto files in ./otlp-proto) or `http/json` (OTLP/JSON: hex ids,
// enums as numbers, 64-bit integers as strings). Both become the same plain spans, so a test reads them
// whatever the exporter's protocol; every request body is also kept as received, to search for what must
// never be exported (a secret).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const PROTO_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'otlp-proto');

export type AttributeMap = Record<string, unknown>;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: AttributeMap;
  events: Array<{ name: string; attributes: AttributeMap }>;
  links: Array<{ traceId: string; spanId: string; attributes: AttributeMap }>;
  /** OTLP StatusCode: 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string };
  resource: AttributeMap;
  scope: string;
}

export interface ReceivedExport {
  path: string;
  contentType: string;
  body: Buffer;
}

export interface OtlpReceiver {
  /** The base URL: OTEL_EXPORTER_OTLP_ENDPOINT (exporters append /v1/traces). */
  url: string;
  spans: ReceivedSpan[];
  exports: ReceivedExport[];
  close(): Promise<void>;
}

let exportRequestType: protobuf.Type | undefined;

function exportTraceServiceRequest(): protobuf.Type {
  if (exportRequestType) return exportRequestType;
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(PROTO_DIR, target);
  root.loadSync('opentelemetry/proto/collector/trace/v1/trace_service.proto');
  exportRequestType = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
  return exportRequestType;
}

type Json = Record<string, any>;

/** An OTLP AnyValue as a plain value (OTLP/JSON and protobufjs' toObject share the member names). */
function valueOf(value: Json | undefined): unknown {
  if (!value) return undefined;
  if ('stringValue' in value) return value.stringValue;
  if ('boolValue' in value) return value.boolValue;
  if ('intValue' in value) return Number(value.intValue);
  if ('doubleValue' in value) return Number(value.doubleValue);
  if ('arrayValue' in value) return ((value.arrayValue.values ?? []) as Json[]).map(valueOf);
  if ('kvlistValue' in value) return attributesOf(value.kvlistValue.values);
  if ('bytesValue' in value) return value.bytesValue;
  return undefined;
}

function attributesOf(list: Json[] | undefined): AttributeMap {
  return Object.fromEntries((list ?? []).map((entry) => [entry.key, valueOf(entry.value)]));
}

/** Spans of an export request already in OTLP/JSON form; `hex` turns an id field into lowercase hex. */
function spansOf(request: Json, hex: (id: unknown) => string): ReceivedSpan[] {
  return ((request.resourceSpans ?? []) as Json[]).flatMap((resourceSpans) =>
    ((resourceSpans.scopeSpans ?? []) as Json[]).flatMap((scopeSpans) =>
      ((scopeSpans.spans ?? []) as Json[]).map((span) => ({
        traceId: hex(span.traceId),
        spanId: hex(span.spanId),
        parentSpanId: hex(span.parentSpanId),
        name: span.name,
        kind: Number(span.kind ?? 0),
        attributes: attributesOf(span.attributes),
        events: ((span.events ?? []) as Json[]).map((event) => ({ name: event.name, attributes: attributesOf(event.attributes) })),
        links: ((span.links ?? []) as Json[]).map((link) => ({ traceId: hex(link.traceId), spanId: hex(link.spanId), attributes: attributesOf(link.attributes) })),
        status: { code: Number(span.status?.code ?? 0), message: span.status?.message ?? '' },
        resource: attributesOf(resourceSpans.resource?.attributes),
        scope: scopeSpans.scope?.name ?? '',
      })),
    ),
  );
}

/** Decodes one export request body by its content type. */
export function decodeTraces(contentType: string, body: Buffer): ReceivedSpan[] {
  if (contentType.startsWith('application/x-protobuf')) {
    const type = exportTraceServiceRequest();
    const object = type.toObject(type.decode(body), { longs: String, enums: Number, bytes: String, defaults: false }) as Json;
    return spansOf(object, (id) => (typeof id === 'string' ? Buffer.from(id, 'base64').toString('hex') : ''));
  }
  if (contentType.startsWith('application/json')) {
    return spansOf(JSON.parse(body.toString('utf8')) as Json, (id) => (typeof id === 'string' ? id.toLowerCase() : ''));
  }
  throw new Error(`unexpected OTLP content type ${contentType}`);
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const exports: ReceivedExport[] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks);
      const contentType = request.headers['content-type'] ?? '';
      const received = { path: request.url ?? '', contentType, body };
      exports.push(received);
      try {
        if (received.path === '/v1/traces') spans.push(...decodeTraces(contentType, body));
      } catch (error) {
        response.writeHead(400, { 'content-type': 'text/plain' }).end(String(error));
        return;
      }
      // An empty ExportTraceServiceResponse: full success.
      if (contentType.startsWith('application/x-protobuf')) response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      else response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    exports,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
