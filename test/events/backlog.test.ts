// An endpoint with more due deliveries than one pass takes of it (ENDPOINT_CONCURRENCY_MAX): the worker claims again
// as soon as a full claim's attempts end, not at the next poll (found from outside: four a second per instance, so a
// merchant with more events than that fell behind for good, and a kill switch's revocation waited behind them).
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { DELIVERY_CONCURRENCY_MAX, ENDPOINT_CONCURRENCY_MAX, FAILING_CONCURRENCY_MAX } from '../../src/events/worker.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';

let target: HookTarget;
let world: World;

beforeAll(async () => {
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

/** Merchants of `owner` with a webhook to the target's receiver, and events emitted for them. */
function hooks(world: World, target: HookTarget, owner: string) {
  return {
    async hooked(): Promise<string> {
      const { merchant } = await registerMerchant(world, owner);
      await markVerified(world, merchant.id);
      const hook = await configureWebhook(world, owner, merchant.id);
      expect(hook.status).toBe(200);
      target.receiver.useSecret(hook.body.webhookSecret);
      return merchant.id as string;
    },
    emit: (merchantId: string, type: 'redemption.held' | 'voucher.revoked') =>
      world.gw.gateway.db.transaction((tx) => emitEvent(tx, { merchantId, type, data: { redemption: { id: `red_${uniqueKey()}` } }, nowMs: world.gw.clock.nowMs() })),
  };
}

/** Passes until `attempts` attempts hang at the receiver (it answers none of them); then it answers again. Returns how many it had received before. */
async function hangingUntil(target: HookTarget, worker: { pass(): Promise<number> }, attempts: number): Promise<number> {
  target.receiver.hang(true);
  const seen = target.receiver.received.length;
  while (target.receiver.received.length < seen + attempts) {
    await worker.pass();
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  target.receiver.hang(false);
  return seen;
}

describe('a backlog for one endpoint', () => {
  it('is delivered whole after one scheduled pass: each full claim is followed by the next as soon as its attempts end', async () => {
    const owner = await world.humanToken('backlog-owner@example.com');
    const { merchant } = await registerMerchant(world, owner);
    await markVerified(world, merchant.id);
    const hook = await configureWebhook(world, owner, merchant.id);
    expect(hook.status).toBe(200);
    target.receiver.useSecret(hook.body.webhookSecret);
    const events = 3 * ENDPOINT_CONCURRENCY_MAX + 1;
    for (let i = 0; i < events; i++) {
      await world.gw.gateway.db.transaction((tx) =>
        emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: `red_${uniqueKey()}` } }, nowMs: world.gw.clock.nowMs() }),
      );
    }
    const pending = async () =>
      Number((await world.gw.gateway.db.query<{ n: bigint }>(`SELECT count(*) AS n FROM webhook_deliveries WHERE merchant_id = $1 AND state = 'pending'`, [merchant.id])).rows[0]!.n);
    expect(await pending()).toBe(events);
    // The one scheduled pass: no poll follows it in this test (the world runs no background work).
    await world.gw.services.webhookWorker.pass();
    await waitFor(async () => ((await pending()) === 0 ? true : undefined), { what: 'every delivery of the backlog to be made', timeoutMs: 10_000 });
    expect(target.receiver.received.length).toBe(events);
  });

  it("a kill switch's voucher.revoked is claimed into the urgent reserve when receivers that hang hold every slot (found from outside: it waited 6 s for one)", async () => {
    const owner = await world.humanToken('reserve-owner@example.com');
    const { hooked, emit } = hooks(world, target, owner);
    // Every slot of this instance held by attempts that hang: its endpoints' share each, over enough merchants whose
    // receivers answered before (new ones would be held to the suspect half).
    const hanging = DELIVERY_CONCURRENCY_MAX / ENDPOINT_CONCURRENCY_MAX;
    for (let m = 0; m < hanging; m++) {
      const merchantId = await hooked();
      await world.gw.gateway.db.query('UPDATE webhook_endpoints SET proven = true WHERE merchant_id = $1', [merchantId]);
      for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId, 'redemption.held');
    }
    const worker = world.gw.services.webhookWorker;
    const seen = await hangingUntil(target, worker, DELIVERY_CONCURRENCY_MAX);
    const revoking = await hooked();
    await emit(revoking, 'voucher.revoked');
    await emit(revoking, 'redemption.held');
    await worker.pass();
    const delivered = await waitFor(
      () => target.receiver.received.slice(seen + DELIVERY_CONCURRENCY_MAX).find((hook) => JSON.parse(hook.body).type === 'voucher.revoked'),
      { what: 'the voucher.revoked delivery while every regular slot hangs', timeoutMs: 3_000 },
    );
    expect(delivered.verified).toBe(true);
    // The reserve is the urgent deliveries' alone: the merchant's other event waits for a regular slot.
    expect(target.receiver.received.slice(seen + DELIVERY_CONCURRENCY_MAX).map((hook) => JSON.parse(hook.body).type)).toEqual(['voucher.revoked']);
  });

  it("a new merchant's voucher.revoked is not held to the suspect share when new receivers that hang fill it", async () => {
    // A world of its own: the attempts the test above left hanging hold that worker's slots until they time out.
    const target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
    const world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
    onTestFinished(async () => {
      await world.close();
      await target.close();
    });
    const owner = await world.humanToken('suspect-owner@example.com');
    const { hooked, emit } = hooks(world, target, owner);
    // New endpoints (never answered 2xx, so one attempt at a time each) whose receivers hang fill the suspect share;
    // the regular slots stay free.
    for (let m = 0; m < FAILING_CONCURRENCY_MAX; m++) {
      const merchantId = await hooked();
      for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId, 'redemption.held');
    }
    const worker = world.gw.services.webhookWorker;
    const seen = await hangingUntil(target, worker, FAILING_CONCURRENCY_MAX);
    const revoking = await hooked();
    await emit(revoking, 'redemption.held');
    await emit(revoking, 'voucher.revoked');
    await worker.pass();
    const delivered = await waitFor(
      () => target.receiver.received.slice(seen + FAILING_CONCURRENCY_MAX).find((hook) => JSON.parse(hook.body).type === 'voucher.revoked'),
      { what: 'the new merchant’s voucher.revoked while the suspect share hangs', timeoutMs: 3_000 },
    );
    expect(delivered.verified).toBe(true);
    // Its other event, due first, is held to the suspect share like the rest: it comes after (once a hanging attempt
    // times out), if it has come at all.
    const types = target.receiver.received.slice(seen + FAILING_CONCURRENCY_MAX).map((hook) => JSON.parse(hook.body).type);
    expect(types[0]).toBe('voucher.revoked');
  });
});
