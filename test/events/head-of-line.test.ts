// One receiver cannot slow the others: a merchant whose endpoint accepts the connection and never answers
// keeps its attempts in flight for the whole timeout (10 s), while another merchant's event still arrives
// with the gateway's own background work (the 1 s poll), on one instance and, on PostgreSQL, on two
// instances sharing the database. An event held up behind the hanging attempts would wait out their
// timeout; the bound is half of it, so a loaded machine's slow poll (a CI run once took 2.3 s) is not
// mistaken for blocking, and blocking is never mistaken for a slow poll.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { WEBHOOK_TIMEOUT_MS } from '../../src/events/webhook-sender.ts';
import { ENDPOINT_CONCURRENCY_MAX } from '../../src/events/worker.ts';
import type { OutboundTestHooks } from '../../src/platform/outbound.ts';
import { onPostgres, openTestDatabase, type TestDatabase } from '../support/database.ts';
import type { TestGateway } from '../support/gateway.ts';
import { configureWebhook, markVerified, registerMerchant } from '../support/merchants.ts';
import { makeTestCertificate, type TestCertificate } from '../support/test-certificate.ts';
import { waitFor } from '../support/wait.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.ts';
import { startWorld, type World } from '../support/world.ts';

/** Well under the hanging attempts' timeout: an event delivered sooner did not wait for them. */
const UNBLOCKED_MS = WEBHOOK_TIMEOUT_MS / 2;
const SLOW_DOMAIN = 'slow-shop.com';
const HEALTHY_DOMAIN = 'quick-shop.com';

let cert: TestCertificate;
let dir: string;
let caFile: string;
let slow: WebhookReceiver;
let healthy: WebhookReceiver;
let outbound: OutboundTestHooks;

beforeAll(async () => {
  cert = makeTestCertificate({ dns: [`hooks.${SLOW_DOMAIN}`, `hooks.${HEALTHY_DOMAIN}`] });
  dir = mkdtempSync(path.join(tmpdir(), 'acg-hol-'));
  caFile = path.join(dir, 'ca.pem');
  writeFileSync(caFile, cert.certPem);
  slow = await startWebhookReceiver({ tls: cert });
  slow.hang(true);
  healthy = await startWebhookReceiver({ tls: cert });
  outbound = {
    lookupHost: async (hostname) => {
      if (hostname.endsWith(SLOW_DOMAIN) || hostname.endsWith(HEALTHY_DOMAIN)) return ['127.0.0.1'];
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    },
    connectPort: (hostname) => (hostname.endsWith(SLOW_DOMAIN) ? slow.port : healthy.port),
  };
});
afterAll(async () => {
  await slow?.close();
  await healthy?.close();
  cert?.remove();
  rmSync(dir, { recursive: true, force: true });
});

const ENV = () => ({ ACG_OUTBOUND_CA_FILE: caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' });

/** A receiver that answered 2xx before (proven): one that starts to hang takes ordinary slots, its endpoint's share. */
async function prove(world: World, merchantId: string): Promise<void> {
  await world.gw.gateway.db.query('UPDATE webhook_endpoints SET proven = true WHERE merchant_id = $1', [merchantId]);
}

async function merchantWithWebhook(world: World, email: string, domain: string, receiver: WebhookReceiver): Promise<string> {
  const token = await world.humanToken(email);
  const { merchant } = await registerMerchant(world, token, { domain });
  await markVerified(world, merchant.id);
  const res = await configureWebhook(world, token, merchant.id, `https://hooks.${domain}/events`);
  expect(res.status).toBe(200);
  receiver.useSecret(res.body.webhookSecret);
  return merchant.id;
}

/** Sends SLOW_EVENTS to the hanging receiver, waits for them to be in flight, then times one healthy event. */
async function race(world: World, slowMerchant: string, healthyMerchant: string, slowEvents: number): Promise<{ elapsedMs: number; slowInFlight: number }> {
  const emit = (merchantId: string) =>
    world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId, type: 'redemption.held', data: { redemption: { id: 'red_hol' } }, nowMs: world.gw.clock.nowMs() }),
    );
  const slowBefore = slow.received.length;
  for (let i = 0; i < slowEvents; i++) await emit(slowMerchant);
  const inFlightMin = Math.min(slowEvents, ENDPOINT_CONCURRENCY_MAX);
  await waitFor(() => slow.received.length - slowBefore, { until: (n) => n >= inFlightMin, what: `${inFlightMin} attempts in flight at the hanging receiver`, timeoutMs: 5000, intervalMs: 10 });
  const slowInFlight = slow.received.length - slowBefore;
  expect(slowInFlight).toBeGreaterThan(0);

  const healthyBefore = healthy.received.length;
  const startedMs = Date.now();
  const event = await emit(healthyMerchant);
  // Polled every 10 ms: the time it took is the measurement.
  await waitFor(() => healthy.received.length, { until: (n) => n > healthyBefore, what: "the healthy merchant's event", timeoutMs: WEBHOOK_TIMEOUT_MS, intervalMs: 10 });
  const elapsedMs = Date.now() - startedMs;
  expect(healthy.received.slice(healthyBefore).map((r) => [r.headers['webhook-id'], r.verified])).toEqual([[event.id, true]]);
  // The hanging attempts are still in their timeout: recorded as started, not finished.
  const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(
    `SELECT count(*) AS n FROM webhook_attempts WHERE merchant_id = $1 AND outcome = 'in_progress'`,
    [slowMerchant],
  );
  expect(Number(rows[0]!.n)).toBe(slowInFlight);
  return { elapsedMs, slowInFlight };
}

/** One gateway for a describe block; its stop drops the hanging attempts first (a stop waits for those in flight). */
function oneInstance(): { world: World } {
  const held = {} as { world: World };
  beforeAll(async () => {
    held.world = await startWorld({ env: ENV(), outbound });
  });
  afterAll(async () => {
    slow?.disconnect();
    await held.world?.gw.gateway.close().catch(() => {});
    await held.world?.close().catch(() => {});
  });
  return held;
}

describe('a receiver that never answers', () => {
  const held = oneInstance();

  it("does not delay another merchant's event: delivered well within the hanging attempts' timeout, with at most the per-endpoint limit of them in flight", async () => {
    const { world } = held;
    const slowMerchant = await merchantWithWebhook(world, 'slow@example.com', SLOW_DOMAIN, slow);
    await prove(world, slowMerchant);
    const healthyMerchant = await merchantWithWebhook(world, 'quick@example.com', HEALTHY_DOMAIN, healthy);
    world.gw.gateway.startBackgroundWork();
    const { elapsedMs, slowInFlight } = await race(world, slowMerchant, healthyMerchant, ENDPOINT_CONCURRENCY_MAX + 2);
    expect(elapsedMs).toBeLessThan(UNBLOCKED_MS);
    expect(slowInFlight).toBe(ENDPOINT_CONCURRENCY_MAX);
  }, 60_000);
});

describe.runIf(onPostgres())('a receiver that never answers, two instances on one PostgreSQL database', () => {
  let database: TestDatabase;
  let world: World;
  let second: TestGateway;
  beforeAll(async () => {
    database = await openTestDatabase();
    world = await startWorld({ database, env: ENV(), outbound });
    second = await world.anotherInstance({ outbound, env: ENV() });
  });
  afterAll(async () => {
    slow?.disconnect();
    await second?.close().catch(() => {});
    await world?.close().catch(() => {});
    await database?.drop();
  });

  it("does not delay another merchant's event on either instance", async () => {
    const slowMerchant = await merchantWithWebhook(world, 'slow2@example.com', SLOW_DOMAIN, slow);
    await prove(world, slowMerchant);
    const healthyMerchant = await merchantWithWebhook(world, 'quick2@example.com', HEALTHY_DOMAIN, healthy);
    world.gw.gateway.startBackgroundWork();
    second.gateway.startBackgroundWork();
    const { elapsedMs } = await race(world, slowMerchant, healthyMerchant, 2 * ENDPOINT_CONCURRENCY_MAX + 2);
    expect(elapsedMs).toBeLessThan(UNBLOCKED_MS);
  }, 60_000);
});

// New receivers that hang, each with a burst of events (found from outside, bb120): each took its endpoint's share
// (four) of the suspect slots for a whole timeout, so four of them filled the share, and a new merchant whose receiver
// answers waited one timeout per four of them (29 s behind 12, 49 s behind 20). A receiver that has never answered
// 2xx is tried one attempt at a time: it holds one suspect slot, and the new receiver that answers is taken at once.
describe('new receivers that never answer', () => {
  const held = oneInstance();

  it("are tried one attempt at a time, so twelve of them with four events each do not delay a new merchant's first event", async () => {
    const { world } = held;
    const hanging: string[] = [];
    for (let i = 0; i < 12; i++) hanging.push(await merchantWithWebhook(world, `new-slow-${i}@example.com`, SLOW_DOMAIN, slow));
    const fresh = await merchantWithWebhook(world, 'new-quick@example.com', HEALTHY_DOMAIN, healthy);
    const emit = (merchantId: string) =>
      world.gw.gateway.db.transaction((tx) =>
        emitEvent(tx, { merchantId, type: 'redemption.held', data: { redemption: { id: 'red_new' } }, nowMs: world.gw.clock.nowMs() }),
      );
    const slowBefore = slow.received.length;
    for (const merchantId of hanging) for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId);
    world.gw.gateway.startBackgroundWork();
    await waitFor(() => slow.received.length - slowBefore, { until: (n) => n >= hanging.length, what: 'attempts in flight at the hanging receiver', timeoutMs: 5000, intervalMs: 10 });

    const healthyBefore = healthy.received.length;
    const startedMs = Date.now();
    const event = await emit(fresh);
    await waitFor(() => healthy.received.length, { until: (n) => n > healthyBefore, what: "the new merchant's first event", timeoutMs: WEBHOOK_TIMEOUT_MS, intervalMs: 10 });
    expect(Date.now() - startedMs).toBeLessThan(UNBLOCKED_MS);
    expect(healthy.received.slice(healthyBefore).map((r) => [r.headers['webhook-id'], r.verified])).toEqual([[event.id, true]]);
    // Each new receiver that hangs was tried once, and is still in its timeout.
    const { rows } = await world.gw.gateway.db.query<{ merchant_id: string; n: bigint }>(
      `SELECT merchant_id, count(*) AS n FROM webhook_attempts WHERE merchant_id = ANY($1::text[]) GROUP BY merchant_id`,
      [hanging],
    );
    expect(rows.map((row) => [row.merchant_id, Number(row.n)]).sort()).toEqual(hanging.map((merchantId) => [merchantId, 1]).sort());
  }, 60_000);
});
