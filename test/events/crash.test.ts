// kill -9 of an instance in the middle of webhook attempts, for real: a spawned `acg serve` claims the
// deliveries and is killed while its receiver holds the requests; another instance on the same PostgreSQL
// database takes them over within seconds (the lease lapses without the dead instance's heartbeat), and
// the deliveries list shows every attempt, the one cut off by the crash as `interrupted`. PostgreSQL only:
// the embedded database admits one process.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { generateSecretBoxKey } from '../../src/platform/secret-box.ts';
import { onPostgres, openTestDatabase, type TestDatabase } from '../support/database.ts';
import { markVerified, registerMerchant, uniqueKey } from '../support/merchants.ts';
import { spawnGateway, type GatewayProcess } from '../support/process.ts';
import { makeTestCertificate, type TestCertificate } from '../support/test-certificate.ts';
import { waitFor } from '../support/wait.ts';
import { startWebhookReceiverOn443, type WebhookReceiver } from '../support/webhook-receiver.ts';
import { startWorld, type World } from '../support/world.ts';

const DOMAIN = 'crash-shop.com';
const HOST = `hooks.${DOMAIN}`;
const EVENTS = 3;
const PRELOAD = pathToFileURL(path.resolve('test/support/loopback-dns.mjs')).href;

describe.runIf(onPostgres())('kill -9 of an instance in the middle of webhook attempts', () => {
  let database: TestDatabase;
  let cert: TestCertificate;
  let dir: string;
  let receiver: WebhookReceiver;
  let world: World;
  let victim: GatewayProcess | undefined;

  beforeAll(async () => {
    database = await openTestDatabase();
    cert = makeTestCertificate({ dns: [HOST] });
    dir = mkdtempSync(path.join(tmpdir(), 'acg-webhook-crash-'));
    writeFileSync(path.join(dir, 'ca.pem'), cert.certPem);
    receiver = await startWebhookReceiverOn443(cert);
  });
  afterAll(async () => {
    await victim?.kill('SIGKILL');
    await receiver?.close();
    await world?.close().catch(() => {});
    await database?.drop();
    cert?.remove();
    rmSync(dir, { recursive: true, force: true });
  });

  it('another instance delivers every event within 10 s, and the attempts list shows the interrupted ones', async () => {
    const address = new URL(receiver.url).hostname;
    const env = {
      ACG_OUTBOUND_CA_FILE: path.join(dir, 'ca.pem'),
      ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true',
      ACG_SECRET_BOX_KEY: generateSecretBoxKey().text,
      ACG_API_KEY_PEPPER: 'test-pepper-test-pepper-test-pepper-0123',
    };
    // The survivor: an instance built in the test, its background work not started yet.
    world = await startWorld({ database, env, outbound: { lookupHost: async () => [address] } });
    const token = await world.humanToken('crash@example.com');
    const { merchant } = await registerMerchant(world, token, { domain: DOMAIN });
    await markVerified(world, merchant.id);
    const configured = await world.api('PUT', `/v1/merchants/${merchant.id}/webhook`, { token, key: uniqueKey(), body: { url: `https://${HOST}/events` } });
    expect(configured.status).toBe(200);
    receiver.useSecret(configured.body.webhookSecret);
    // A receiver that answered before: a new one would be tried one attempt at a time, and this test crashes a burst.
    await world.gw.gateway.db.query('UPDATE webhook_endpoints SET proven = true WHERE merchant_id = $1', [merchant.id]);

    // The victim: a real `acg serve`, whose worker claims the deliveries; the receiver holds every request.
    victim = await spawnGateway({
      ...env,
      DATABASE_URL: database.url!,
      ACG_DATA_DIR: dir,
      ACG_HUMAN_ISSUER: world.human.issuer,
      ACG_AGENT_ISSUER: world.agentIssuer.issuer,
      NODE_OPTIONS: `--import ${PRELOAD}`,
      ACG_TEST_LOOPBACK_SUFFIX: DOMAIN,
      ACG_TEST_LOOPBACK_ADDRESS: address,
    });
    receiver.hang(true);
    const ids: string[] = [];
    for (let i = 0; i < EVENTS; i++) {
      const event = await world.gw.gateway.db.transaction((tx) =>
        emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: `red_${i}` } }, nowMs: world.gw.clock.nowMs() }),
      );
      ids.push(event.id);
    }
    await waitFor(() => receiver.received.length, { until: (n) => n >= EVENTS, what: `the victim's ${EVENTS} first attempts to reach the receiver` });
    expect(receiver.received.map((r) => r.headers['webhook-id']).sort()).toEqual([...ids].sort());

    world.gw.gateway.startBackgroundWork();
    await victim.kill('SIGKILL');
    const killedAtMs = Date.now();
    receiver.hang(false);
    await waitFor(() => receiver.received.length, { until: (n) => n >= 2 * EVENTS, what: `the survivor's ${EVENTS} attempts to reach the receiver`, timeoutMs: 15_000 });
    const tookMs = Date.now() - killedAtMs;
    const after = receiver.received.slice(EVENTS);
    expect(after.map((r) => r.headers['webhook-id']).sort()).toEqual([...ids].sort());
    expect(after.every((r) => r.verified)).toBe(true);
    expect(tookMs).toBeLessThan(10_000);

    // The receiver has the requests; the survivor records each answer a moment later.
    const deliveries = async () => (await world.api('GET', `/v1/merchants/${merchant.id}/webhook/deliveries`, { token })).body.deliveries as Array<{ id: string; state: string }>;
    const list = await waitFor(deliveries, { until: (ds) => ds.every((d) => d.state === 'succeeded'), what: 'every delivery to be recorded as succeeded', intervalMs: 50 });
    expect(list).toHaveLength(EVENTS);
    for (const delivery of list) {
      expect(delivery).toMatchObject({ state: 'succeeded', attempts: 2, lastStatus: 200 });
      const attempts = await world.api('GET', `/v1/merchants/${merchant.id}/webhook/deliveries/${delivery.id}/attempts`, { token });
      expect(attempts.status).toBe(200);
      expect(attempts.body.attempts.map((a: { attempt: number; outcome: string; error: string | null }) => [a.attempt, a.outcome, a.error])).toEqual([
        [1, 'interrupted', 'instance_lost'],
        [2, 'succeeded', null],
      ]);
    }
  }, 120_000);
});
