// The per-endpoint circuit under concurrent attempts (found from outside): with the receiver answering 500,
// the attempts of one pass run at once, and those already in flight when the fifth failure opened the circuit
// each counted as a further failure and lengthened it (240 s instead of 30 s). One burst is one opening, of
// the first duration; the next opening (a failed attempt once the circuit has closed) doubles it. And a
// delivery the circuit holds back is listed with the time it will really be tried: the circuit's end.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { DELIVERY_BATCH_MAX, ENDPOINT_CONCURRENCY_MAX, FAILING_CONCURRENCY_MAX } from '../../src/events/worker.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

let target: HookTarget;
let world: World;
let alice: string;

beforeAll(async () => {
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
  alice = await world.humanToken('circuit-alice@example.com');
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});
beforeEach(async () => {
  // Every test starts with nothing due (earlier tests may leave rows behind).
  await world.gw.gateway.db.query(`UPDATE webhook_deliveries SET state = 'dead' WHERE state = 'pending'`);
  target.receiver.answerWith(500);
});
afterEach(() => {
  world.gw.clock.offsetMs = 0;
  target.receiver.answerWith(200);
});

async function webhookMerchant(): Promise<string> {
  const { merchant } = await registerMerchant(world, alice);
  await markVerified(world, merchant.id);
  const res = await configureWebhook(world, alice, merchant.id);
  expect(res.status).toBe(200);
  target.receiver.useSecret(res.body.webhookSecret);
  return merchant.id;
}

/** A merchant whose receiver answered 2xx before: a new one is tried one attempt at a time, never in a burst. */
async function provenWebhookMerchant(): Promise<string> {
  const merchantId = await webhookMerchant();
  await world.gw.gateway.db.query('UPDATE webhook_endpoints SET proven = true WHERE merchant_id = $1', [merchantId]);
  return merchantId;
}

const emit = (merchantId: string) =>
  world.gw.gateway.db.transaction((tx) =>
    emitEvent(tx, { merchantId, type: 'redemption.held', data: { redemption: { id: `red_${uniqueKey()}` } }, nowMs: world.gw.clock.nowMs() }),
  );

const runWorker = () => world.gw.services.webhookWorker.runOnce();

interface ListedDelivery {
  id: string;
  eventId: string;
  state: string;
  attempts: number;
  nextAttemptAt: number | null;
}

const circuitOf = async (merchantId: string) => (await world.api('GET', `/v1/merchants/${merchantId}/webhook`, { token: alice })).body.configuration.circuit;
const deliveriesOf = async (merchantId: string): Promise<ListedDelivery[]> =>
  (await world.api('GET', `/v1/merchants/${merchantId}/webhook/deliveries?limit=100`, { token: alice })).body.deliveries;

/** Runs one pass whose failures may open the circuit for `openMs`; returns the bounds its `openUntil` must fall within. */
async function passOpening(openMs: number, expected: Record<string, number>): Promise<{ low: number; high: number }> {
  const low = Math.ceil((world.gw.clock.nowMs() + openMs) / 1000);
  expect(await runWorker()).toMatchObject(expected);
  return { low, high: Math.ceil((world.gw.clock.nowMs() + openMs) / 1000) };
}

describe('the circuit under concurrent attempts', () => {
  it('a burst of concurrent failures opens the circuit once, for 30 s; a failed burst after it closes reopens it once, for 60 s', async () => {
    const merchantId = await provenWebhookMerchant();
    for (let i = 0; i < 4; i++) await emit(merchantId);
    // Four failures: one short of the threshold. Their retries are due 5 s later.
    expect(await runWorker()).toMatchObject({ claimed: 4, retrying: 4 });
    expect(await circuitOf(merchantId)).toBeNull();

    // The four retries run at once (the per-endpoint bound): the first to fail is the fifth in a row and opens
    // the circuit; the three others were already in flight and neither extend it nor count as further failures.
    world.gw.clock.advance(5_000);
    const first = await passOpening(30_000, { claimed: 4, retrying: 4 });
    const open = await circuitOf(merchantId);
    expect(open).toEqual({ openUntil: expect.any(Number), consecutiveFailures: 5 });
    expect(open.openUntil).toBeGreaterThanOrEqual(first.low);
    expect(open.openUntil).toBeLessThanOrEqual(first.high);

    // Events of the open period wait for its end; the burst that opens the circuit again once it has closed is
    // one more failure, whatever its size: the next step (60 s), not one step per attempt in flight.
    for (let i = 0; i < 3; i++) await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    world.gw.clock.offsetMs += open.openUntil * 1000 - world.gw.clock.nowMs();
    const second = await passOpening(60_000, { claimed: 3, retrying: 3 });
    const reopened = await circuitOf(merchantId);
    expect(reopened).toEqual({ openUntil: expect.any(Number), consecutiveFailures: 6 });
    expect(reopened.openUntil).toBeGreaterThanOrEqual(second.low);
    expect(reopened.openUntil).toBeLessThanOrEqual(second.high);

    // Another burst once it has closed (those three retries, due 5 s after their failure, and a new event): 120 s.
    await emit(merchantId);
    world.gw.clock.offsetMs += reopened.openUntil * 1000 - world.gw.clock.nowMs();
    const third = await passOpening(120_000, { claimed: 4, retrying: 4 });
    const again = await circuitOf(merchantId);
    expect(again).toEqual({ openUntil: expect.any(Number), consecutiveFailures: 7 });
    expect(again.openUntil).toBeGreaterThanOrEqual(third.low);
    expect(again.openUntil).toBeLessThanOrEqual(third.high);

    // A success closes it and ends the run.
    target.receiver.answerWith(200);
    world.gw.clock.offsetMs += again.openUntil * 1000 - world.gw.clock.nowMs();
    await emit(merchantId);
    const closing = await runWorker();
    expect(closing.claimed).toBeGreaterThan(0);
    expect(closing.succeeded).toBe(closing.claimed);
    expect(await circuitOf(merchantId)).toBeNull();
    const { rows } = await world.gw.gateway.db.query<{ consecutive_failures: number }>('SELECT consecutive_failures FROM webhook_endpoints WHERE merchant_id = $1', [merchantId]);
    expect(rows[0]!.consecutive_failures).toBe(0);
  });

  it('lists a delivery the open circuit holds back with the circuit’s end as its next attempt, never a time inside it; a re-send shows now', async () => {
    const merchantId = await provenWebhookMerchant();
    for (let i = 0; i < 4; i++) await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 4, retrying: 4 });
    // A fifth event, due now: the next pass takes it and three of the retries; the fourth retry stays due.
    await emit(merchantId);
    world.gw.clock.advance(5_000);
    expect(await runWorker()).toMatchObject({ claimed: 4, retrying: 4 });
    const late = await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 0 });

    const open = await circuitOf(merchantId);
    expect(open).toEqual({ openUntil: expect.any(Number), consecutiveFailures: expect.any(Number) });
    const pending = (await deliveriesOf(merchantId)).filter((d) => d.state === 'pending');
    expect(pending).toHaveLength(6);
    // Held back: the retry that was due when the circuit opened, the fifth event (its retry, 5 s after its first
    // failure, falls inside the open period), and the event emitted during it. The three others retry after it.
    const held = pending.filter((d) => d.attempts <= 1);
    expect(held).toHaveLength(3);
    expect(held.map((d) => d.eventId)).toContain(late.id);
    for (const delivery of held) expect(delivery.nextAttemptAt, delivery.id).toBe(open.openUntil);
    for (const delivery of pending) expect(delivery.nextAttemptAt!, delivery.id).toBeGreaterThanOrEqual(open.openUntil);
    // The delivery's own page says the same.
    const lateDelivery = pending.find((d) => d.eventId === late.id)!;
    const attempts = await world.api('GET', `/v1/merchants/${merchantId}/webhook/deliveries/${lateDelivery.id}/attempts`, { token: alice });
    expect(attempts.body.delivery.nextAttemptAt).toBe(open.openUntil);

    // A re-send closes the circuit: the delivery is due now, and says so.
    const resent = await world.api('POST', `/v1/merchants/${merchantId}/events/${late.id}/resend`, { token: alice });
    expect(resent.status).toBe(202);
    expect(resent.body.delivery.nextAttemptAt).toBeLessThanOrEqual(Math.ceil(world.gw.clock.nowMs() / 1000));
    expect(await circuitOf(merchantId)).toBeNull();
    const after = (await deliveriesOf(merchantId)).find((d) => d.id === lateDelivery.id)!;
    expect(after.nextAttemptAt).toBeLessThan(open.openUntil);
  });
});

/** Every endpoint answers one delivery with `status`: a 2xx proves its receiver, another status is a failure. */
async function everyAnswers(merchantIds: string[], status: number): Promise<void> {
  target.receiver.answerWith(status);
  for (const merchantId of merchantIds) await emit(merchantId);
  expect(await runWorker()).toMatchObject({ claimed: merchantIds.length, [status === 200 ? 'succeeded' : 'retrying']: merchantIds.length });
  // A failed delivery's retry is not part of what the tests count.
  await world.gw.gateway.db.query(`UPDATE webhook_deliveries SET state = 'dead' WHERE state = 'pending'`);
  target.receiver.answerWith(500);
}

const attempted = async (merchantIds: string[]) =>
  Number((await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM webhook_attempts WHERE merchant_id = ANY($1::text[])', [merchantIds])).rows[0]!.n);

describe('suspect endpoints', () => {
  // Receivers that hang hold a slot each for the whole timeout; were every slot theirs, every other merchant's
  // event would wait, round after round, until their circuits opened (found from outside: 17 hanging receivers on
  // two instances delayed a healthy merchant's event by 9 s). They share half of an instance's slots.
  it(`take at most ${FAILING_CONCURRENCY_MAX} of an instance's attempts at once, so another merchant's event is taken in the same pass`, async () => {
    const healthy = await webhookMerchant();
    await everyAnswers([healthy], 200);
    const failing: string[] = [];
    for (let i = 0; i < 5; i++) failing.push(await webhookMerchant());
    await world.gw.gateway.db.query('UPDATE webhook_endpoints SET consecutive_failures = 1, proven = true WHERE merchant_id = ANY($1::text[])', [failing]);
    for (const merchantId of failing) for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId);
    await emit(healthy);

    // Twenty failing deliveries were due before the healthy one, and a pass claims twenty at most.
    expect(failing.length * ENDPOINT_CONCURRENCY_MAX).toBe(DELIVERY_BATCH_MAX);
    expect(await runWorker()).toMatchObject({ claimed: FAILING_CONCURRENCY_MAX + 1 });
    expect(await attempted([healthy])).toBe(2);
    expect(await attempted(failing)).toBe(FAILING_CONCURRENCY_MAX);
    // The failing share is counted while its attempts run, and given back as they end: the next pass takes the rest.
    expect(await runWorker()).toMatchObject({ claimed: failing.length * ENDPOINT_CONCURRENCY_MAX - FAILING_CONCURRENCY_MAX });
  });

  // A receiver that hangs holds its slot for the whole timeout before its failure is recorded: on a new endpoint's
  // first burst, and again after each success between hangs, such receivers took the slots of receivers that answer
  // (found from outside: other merchants' events waited 11 to 51 s).
  // A new receiver that hangs with a burst of events held its endpoint's share (four) of the suspect slots for a whole
  // timeout, so four of them filled the share and a new receiver that answers waited a timeout per four (found from
  // outside, bb120: 29 s behind 12, 49 s behind 20). Until it answers 2xx, it is tried one attempt at a time.
  it('a new endpoint is suspect until its receiver answers 2xx, and tried one attempt at a time: new endpoints take the failing share one slot each, and a proven one is taken in the same pass', async () => {
    const proven = await webhookMerchant();
    await everyAnswers([proven], 200);
    const fresh: string[] = [];
    for (let i = 0; i < FAILING_CONCURRENCY_MAX + 1; i++) fresh.push(await webhookMerchant());
    for (const merchantId of fresh) for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId);
    await emit(proven);

    expect(await runWorker()).toMatchObject({ claimed: FAILING_CONCURRENCY_MAX + 1 });
    expect(await attempted([proven])).toBe(2);
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(
      'SELECT count(*) AS n FROM webhook_attempts WHERE merchant_id = ANY($1::text[]) GROUP BY merchant_id',
      [fresh],
    );
    expect(rows.map((row) => Number(row.n))).toEqual(Array(FAILING_CONCURRENCY_MAX).fill(1));
  });

  it('a new endpoint is tried before the retries of endpoints known to fail, within the failing share (found from outside: it waited minutes behind them)', async () => {
    const failing: string[] = [];
    for (let i = 0; i < 5; i++) failing.push(await webhookMerchant());
    await world.gw.gateway.db.query('UPDATE webhook_endpoints SET consecutive_failures = 1, proven = true WHERE merchant_id = ANY($1::text[])', [failing]);
    for (const merchantId of failing) for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId);
    const fresh = await webhookMerchant();
    await emit(fresh);

    // Twenty deliveries of failing endpoints were due first; the failing share takes sixteen, the new one among them.
    expect(await runWorker()).toMatchObject({ claimed: FAILING_CONCURRENCY_MAX });
    expect(await attempted([fresh])).toBe(1);
    expect(await attempted(failing)).toBe(FAILING_CONCURRENCY_MAX - 1);
  });

  it('an endpoint that failed in the last ten minutes stays suspect between successes, and leaves the failing share ten minutes after', async () => {
    const proven = await webhookMerchant();
    await everyAnswers([proven], 200);
    const flaky: string[] = [];
    for (let i = 0; i < 5; i++) flaky.push(await webhookMerchant());
    await everyAnswers(flaky, 200);
    await everyAnswers(flaky, 500);
    await everyAnswers(flaky, 200); // its run of failures has ended: its last attempt succeeded
    for (const merchantId of flaky) for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId);
    await emit(proven);

    expect(await runWorker()).toMatchObject({ claimed: FAILING_CONCURRENCY_MAX + 1 });
    expect(await attempted([proven])).toBe(2);
    await world.gw.gateway.db.query(`UPDATE webhook_deliveries SET state = 'dead' WHERE state = 'pending'`);

    world.gw.clock.offsetMs = 10 * 60_000 + 1_000;
    target.receiver.answerWith(200);
    for (const merchantId of flaky) for (let i = 0; i < ENDPOINT_CONCURRENCY_MAX; i++) await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: DELIVERY_BATCH_MAX, succeeded: DELIVERY_BATCH_MAX });
  });

  it('another URL is another receiver: suspect again until it answers 2xx', async () => {
    const moved = await webhookMerchant();
    await everyAnswers([moved], 200);
    const endpoint = async () =>
      (await world.gw.gateway.db.query<{ proven: boolean }>('SELECT proven FROM webhook_endpoints WHERE merchant_id = $1', [moved])).rows[0]!;
    expect(await endpoint()).toEqual({ proven: true });
    const res = await configureWebhook(world, alice, moved, 'https://hooks.shop-test.com/acg/events-2');
    expect(res.status).toBe(200);
    expect(await endpoint()).toEqual({ proven: false });
  });
});
