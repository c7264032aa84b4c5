// A receiver that answers 2xx at once but whose body is slow or never ends has accepted the event: the
// delivery succeeds on that status (docs/decisions.md "Outbound calls to user-given URLs": only the status
// matters), is not retried, and counts no failure against the endpoint's circuit.
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

let target: HookTarget;
let trickling: https.Server;
let world: World;
let alice: string;
const received: string[] = [];

beforeAll(async () => {
  target = await startHookTarget();
  // hooks.shop-test.com, certificate and all, but this receiver sends 200 and its headers, then a byte every 100 ms, forever.
  trickling = https.createServer({ cert: target.cert.certPem, key: target.cert.keyPem }, (req, res) => {
    received.push(String(req.headers['webhook-id']));
    res.writeHead(200, { 'content-type': 'text/plain' }).flushHeaders();
    const timer = setInterval(() => res.write('.'), 100);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => trickling.listen(0, '127.0.0.1', resolve));
  const port = (trickling.address() as AddressInfo).port;
  world = await startWorld({
    env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' },
    outbound: { lookupHost: target.outbound.lookupHost, connectPort: () => port },
  });
  alice = await world.humanToken('alice@example.com');
});
afterAll(async () => {
  await world?.close();
  trickling?.closeAllConnections();
  await new Promise((resolve) => trickling?.close(resolve));
  await target?.close();
});

describe('a receiver whose 2xx body never ends', () => {
  it('gets the event once: the delivery succeeds at once with lastStatus 200, and is not retried', async () => {
    const { merchant } = await registerMerchant(world, alice);
    await markVerified(world, merchant.id);
    expect((await configureWebhook(world, alice, merchant.id)).status).toBe(200);
    const event = await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: `red_${uniqueKey()}` } }, nowMs: world.gw.clock.nowMs() }),
    );

    const startedMs = Date.now();
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, succeeded: 1, retrying: 0 });
    expect(Date.now() - startedMs).toBeLessThan(3_000);

    const list = await world.api('GET', `/v1/merchants/${merchant.id}/webhook/deliveries`, { token: alice });
    const delivery = list.body.deliveries.find((d: { eventId: string }) => d.eventId === event.id);
    expect(delivery).toMatchObject({ state: 'succeeded', attempts: 1, lastStatus: 200, lastError: null });
    world.gw.clock.advance(3_600_000);
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 0 });
    world.gw.clock.offsetMs = 0;
    expect(received).toEqual([event.id]);
    const endpoint = await world.api('GET', `/v1/merchants/${merchant.id}/webhook`, { token: alice });
    expect(endpoint.body.configuration).toMatchObject({ enabled: true, disabledReason: null });
    const { rows } = await world.gw.gateway.db.query<{ consecutive_failures: number }>('SELECT consecutive_failures FROM webhook_endpoints WHERE merchant_id = $1', [merchant.id]);
    expect(rows[0]!.consecutive_failures).toBe(0);
  });
});
