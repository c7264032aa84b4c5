// Several gateway instances on one PostgreSQL database all run the delivery worker; each event must reach
// the receiver exactly once. PGlite admits one process per database, so this runs on PostgreSQL only.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { WebhookWorker } from '../../src/events/worker.ts';
import type { TestGateway } from '../support/gateway.ts';
import { onPostgres, openTestDatabase, type TestDatabase } from '../support/database.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

const EVENTS = 60;

describe.runIf(onPostgres())('two gateway instances on one PostgreSQL database', () => {
  let database: TestDatabase;
  let target: HookTarget;
  let world: World;
  let second: TestGateway;

  beforeAll(async () => {
    database = await openTestDatabase();
    target = await startHookTarget();
    const env = { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' };
    world = await startWorld({ database, env, outbound: target.outbound });
    second = await world.anotherInstance({ outbound: target.outbound, env });
  });
  afterAll(async () => {
    await second?.close();
    await world?.close();
    await target?.close();
    await database?.drop();
  });

  it('deliver each event exactly once, however many workers race for the outbox', async () => {
    const token = await world.humanToken('alice@example.com');
    const { merchant } = await registerMerchant(world, token);
    await markVerified(world, merchant.id);
    const configured = await configureWebhook(world, token, merchant.id);
    target.receiver.useSecret(configured.body.webhookSecret);

    const ids: string[] = [];
    for (let i = 0; i < EVENTS; i++) {
      const event = await world.gw.gateway.db.transaction((tx) =>
        emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: `red_${i}` } }, nowMs: world.gw.clock.nowMs() }),
      );
      ids.push(event.id);
    }
    // Each instance's own worker, plus small-batch workers on each, all at once, until nothing is due.
    const workers = [world.gw.services.webhookWorker, second.services.webhookWorker];
    for (const gw of [world.gw, second]) {
      for (let i = 0; i < 3; i++) {
        workers.push(
          new WebhookWorker({
            db: gw.gateway.db,
            clock: gw.clock,
            log: gw.gateway.log,
            secretBoxKey: gw.services.secretBoxKey,
            allowPrivateNetworkTargets: true,
            ca: target.cert.certPem,
            testHooks: target.outbound,
            batchMax: 3,
          }),
        );
      }
    }
    let claimed = 0;
    for (let round = 0; round < 50; round++) {
      const reports = await Promise.all(workers.map((w) => w.runOnce()));
      const thisRound = reports.reduce((sum, r) => sum + r.claimed, 0);
      expect(reports.every((r) => r.lost === 0 && r.retrying === 0)).toBe(true);
      claimed += thisRound;
      if (thisRound === 0) break;
    }
    expect(claimed).toBe(EVENTS);
    const received = target.receiver.received.map((r) => r.headers['webhook-id']);
    expect(received.sort()).toEqual([...ids].sort());
    expect(target.receiver.received.every((r) => r.verified)).toBe(true);
    const { rows } = await world.gw.gateway.db.query<{ state: string; n: bigint }>(
      'SELECT state, count(*) AS n FROM webhook_deliveries WHERE merchant_id = $1 GROUP BY state',
      [merchant.id],
    );
    expect(rows.map((r) => [r.state, Number(r.n)])).toEqual([['succeeded', EVENTS]]);
  });
});
