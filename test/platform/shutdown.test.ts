import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { emitEvent } from '../../src/events/outbox.ts';
import { startTestGateway } from '../support/gateway.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget } from '../support/merchants.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld } from '../support/world.ts';

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

// A query made after the database closed fails, and the database's availability monitor logged it as an outage
// (found from outside: "database unavailable" at every graceful stop, from a background query after the close).
describe('graceful shutdown of background work', () => {
  it('waits for a periodic job in flight before the database closes, so its queries still answer', async () => {
    const gw = await startTestGateway();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let started = false;
    let failure: unknown;
    let answered: unknown;
    let jobDone!: () => void;
    const done = new Promise<void>((resolve) => {
      jobDone = resolve;
    });
    gw.gateway.schedule('slow-test-job', 20, async () => {
      if (started) return;
      started = true;
      await gate;
      try {
        answered = (await gw.gateway.db.query<{ one: number }>('SELECT 1 AS one')).rows;
      } catch (error) {
        failure = error;
      } finally {
        jobDone();
      }
    });
    gw.gateway.startBackgroundWork();
    try {
      await waitFor(() => started, { what: 'the job to start' });
      await gw.app.close();
      const closing = gw.gateway.close();
      // A sleep, not a wait: the job must still be running when the close would otherwise have ended it.
      setTimeout(release, 200);
      await closing;
      await done;
      expect(failure).toBeUndefined();
      expect(answered).toEqual([{ one: 1 }]);
    } finally {
      release();
      await gw.database.drop();
    }
  });

  it('waits for a webhook attempt in flight and records its outcome before the database closes', async () => {
    const target = await startHookTarget();
    const world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
    try {
      const token = await world.humanToken('stopping@example.com');
      const { merchant } = await registerMerchant(world, token);
      await markVerified(world, merchant.id);
      const configured = await configureWebhook(world, token, merchant.id);
      expect(configured.status).toBe(200);
      target.receiver.useSecret(configured.body.webhookSecret);
      target.receiver.hang(true);
      world.gw.gateway.startBackgroundWork();
      const event = await world.gw.gateway.db.transaction((tx) =>
        emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: 'red_stop' } }, nowMs: world.gw.clock.nowMs() }),
      );
      await waitFor(() => target.receiver.received.length, { until: (n) => n >= 1, what: 'the attempt to reach the receiver' });
      const stopping = world.gw.gateway.stop();
      // The receiver goes away while the stop waits: the attempt ends then, failed, and that is what is recorded.
      setTimeout(() => void target.receiver.close(), 200);
      await stopping;
      const { rows } = await world.gw.gateway.db.query<{ outcome: string; error: string | null }>(
        `SELECT a.outcome, a.error FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.event_id = $1`,
        [event.id],
      );
      expect(rows).toEqual([{ outcome: 'failed', error: expect.any(String) }]);
    } finally {
      await world.close();
      await target.close();
    }
  });
});
