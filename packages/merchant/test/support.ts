// What the merchant SDK's tests against a local key set share: the local gateway that publishes it, and a
// verification's refusal.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { VerificationError } from '@agent-credit-gateway/merchant';

export interface LocalGateway {
  url: string;
  close(): Promise<void>;
}

/** A local gateway answering `/.well-known/jwks.json` with the keys `keys()` gives at each fetch, and 404 to the rest. */
export async function serveKeySet(keys: () => readonly object[]): Promise<LocalGateway> {
  const server = http.createServer((request, response) => {
    if (request.url === '/.well-known/jwks.json') return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: keys() }));
    response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The VerificationError a verification refused with; anything else (or no refusal) fails the test. */
export async function refusal(promise: Promise<unknown>): Promise<VerificationError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof VerificationError) return error;
    throw error;
  }
  throw new Error('expected a VerificationError');
}
