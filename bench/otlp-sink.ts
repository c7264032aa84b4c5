// BENCH_OTEL=1: where the gateway under test exports its traces, an OTLP/HTTP endpoint in the bench process that
// reads each export, counts it and answers success, as a collector would, without decoding it (decoding costs
// the collector, not the gateway). It shares the machine with the gateway, as wrk does.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface OtlpSink {
  /** OTEL_EXPORTER_OTLP_ENDPOINT for the gateway. */
  url: string;
  exports: number;
  bytes: number;
  close(): Promise<void>;
}

export async function startOtlpSink(): Promise<OtlpSink> {
  const sink = { exports: 0, bytes: 0 };
  const server = http.createServer((request, response) => {
    request.on('data', (chunk: Buffer) => {
      sink.bytes += chunk.length;
    });
    request.on('end', () => {
      sink.exports += 1;
      // An empty Export…ServiceResponse: everything accepted.
      const protobuf = (request.headers['content-type'] ?? '').startsWith('application/x-protobuf');
      response.writeHead(200, { 'content-type': protobuf ? 'application/x-protobuf' : 'application/json' }).end(protobuf ? undefined : '{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get exports() {
      return sink.exports;
    },
    get bytes() {
      return sink.bytes;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
