import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { startTestGateway } from '../support/gateway.ts';
import { waitFor } from '../support/wait.ts';

let slowStarted = false;

/** A handler that takes 400 ms (a sleep: the slowness is the point), long enough for the close to begin while it runs. */
async function slowRoute(app: FastifyInstance) {
  app.get('/v1/test/slow', {
    handler: async () => {
      slowStarted = true;
      await new Promise((r) => setTimeout(r, 400));
      return { done: true };
    },
  });
}

describe('graceful shutdown', () => {
  it('finishes in-flight requests before closing, and refuses new connections meanwhile', async () => {
    const gw = await startTestGateway({ features: [slowRoute] });
    const inFlight = fetch(`${gw.url}/v1/test/slow`).then(async (res) => ({ status: res.status, body: await res.json() }));
    await waitFor(() => slowStarted, { what: 'the slow request to reach its handler' });
    const closing = gw.close();
    const during = await fetch(`${gw.url}/healthz`, { signal: AbortSignal.timeout(2000) }).then((res) => res.status, (e: Error) => e.name);
    expect(await inFlight).toEqual({ status: 200, body: { done: true } });
    await closing;
    expect(during).not.toBe(200);
  });
});
