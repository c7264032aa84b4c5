// Webhook delivery end to end: events written to the outbox (as the ledger writes them), the worker run by
// hand with the gateway clock moved forward instead of sleeping, and an HTTPS receiver on a public-looking
// name (hooks.shop-test.com → 127.0.0.1, by the test-only outbound hooks) that checks every signature with
// the standardwebhooks library.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { emitEvent, type EventType } from '../../src/events/outbox.ts';
import { RETRY_SCHEDULE_S } from '../../src/events/webhook-sender.ts';
import { grant } from '../support/ledger-fixture.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';

let target: HookTarget;
let world: World;
let alice: string;
let merchantId: string;

async function emit(w: World, merchant: string, type: EventType = 'redemption.released', data: Record<string, unknown> = { redemption: { id: `red_${uniqueKey()}` } }) {
  return w.gw.gateway.db.transaction((tx) => emitEvent(tx, { merchantId: merchant, type, data, nowMs: w.gw.clock.nowMs() }));
}

const runWorker = (w: World = world) => w.gw.services.webhookWorker.runOnce();
const advanceS = (seconds: number, w: World = world) => w.gw.clock.advance(seconds * 1000);

async function deliveryOf(eventId: string, w: World = world, merchant = merchantId) {
  const list = await w.api('GET', `/v1/merchants/${merchant}/webhook/deliveries?limit=100`, { token: alice });
  return list.body.deliveries.find((d: { eventId: string }) => d.eventId === eventId);
}

/** A verified merchant on shop-test.com with its webhook at hooks.shop-test.com; the receiver learns the secret. */
async function webhookMerchant(w: World, token: string): Promise<string> {
  const { merchant } = await registerMerchant(w, token);
  await markVerified(w, merchant.id);
  const res = await configureWebhook(w, token, merchant.id);
  if (res.status !== 200) throw new Error(`webhook PUT failed: ${res.status} ${JSON.stringify(res.body)}`);
  target.receiver.useSecret(res.body.webhookSecret);
  return merchant.id;
}

beforeAll(async () => {
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({
    env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' },
    outbound: target.outbound,
  });
  alice = await world.humanToken('alice@example.com');
  merchantId = await webhookMerchant(world, alice);
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});
// Credentials expire against the gateway clock too, so every test puts the clock back when it is done.
afterEach(() => {
  world.gw.clock.offsetMs = 0;
});
beforeEach(async () => {
  target.receiver.answerWith(200);
  // Every test starts with nothing due (earlier tests may leave dead or far-future rows behind).
  await world.gw.gateway.db.query(`UPDATE webhook_deliveries SET state = 'dead' WHERE state = 'pending'`);
});

describe('the delivery worker', () => {
  it('delivers each event once, signed, with the stored event JSON as the body and the event id as webhook-id', async () => {
    const before = target.receiver.received.length;
    const events = [await emit(world, merchantId), await emit(world, merchantId, 'redemption.held'), await emit(world, merchantId, 'redemption.captured')];
    // A new receiver is tried one attempt at a time until it answers 2xx; then the rest go at once.
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1, retrying: 0, dead: 0, lost: 0 });
    expect(await runWorker()).toMatchObject({ claimed: 2, succeeded: 2, retrying: 0, dead: 0, lost: 0 });
    const got = target.receiver.received.slice(before);
    expect(got).toHaveLength(3);
    for (const event of events) {
      const request = got.find((r) => r.headers['webhook-id'] === event.id)!;
      expect(request).toMatchObject({ method: 'POST', path: '/acg/events', verified: true });
      expect(request.headers.host).toBe('hooks.shop-test.com');
      const stored = (await world.gw.gateway.db.query<{ payload: string }>('SELECT payload FROM events WHERE id = $1', [event.id])).rows[0]!;
      expect(request.body).toBe(stored.payload);
      expect(JSON.parse(request.body)).toEqual(event);
      expect(await deliveryOf(event.id)).toMatchObject({ state: 'succeeded', attempts: 1, lastStatus: 200, lastError: null, nextAttemptAt: null, deliveredAt: expect.any(Number) });
    }
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    expect(target.receiver.received.length).toBe(before + 3);
  });

  it('retries on the schedule: a receiver that fails twice gets the event on the third try', async () => {
    const before = target.receiver.received.length;
    target.receiver.answerWith(500);
    const event = await emit(world, merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 1, retrying: 1 });
    expect(await deliveryOf(event.id)).toMatchObject({ state: 'pending', attempts: 1, lastStatus: 500, lastError: 'status_not_2xx' });
    expect(await runWorker()).toMatchObject({ claimed: 0 }); // not due for 5 s
    advanceS(RETRY_SCHEDULE_S[1]! - 1);
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    advanceS(1);
    expect(await runWorker()).toMatchObject({ claimed: 1, retrying: 1 });
    target.receiver.answerWith(200);
    advanceS(RETRY_SCHEDULE_S[2]!);
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    const got = target.receiver.received.slice(before);
    expect(got).toHaveLength(3);
    expect(got.map((r) => r.headers['webhook-id'])).toEqual([event.id, event.id, event.id]);
    expect(got.every((r) => r.verified)).toBe(true);
    // Each attempt carries its own timestamp.
    expect(new Set(got.map((r) => r.headers['webhook-timestamp'])).size).toBe(3);
    expect(await deliveryOf(event.id)).toMatchObject({ state: 'succeeded', attempts: 3, lastStatus: 200 });
  });

  // Found from outside (bb120): a 200 with 80 KB of headers was recorded as `request_failed`, with nothing more.
  it('records an answer it cannot read (80 KB of headers) as invalid_response, and the attempt says what happened', async () => {
    target.receiver.answerWith(200, Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`x-filler-${i}`, 'a'.repeat(400)])));
    try {
      const event = await emit(world, merchantId);
      expect(await runWorker()).toMatchObject({ claimed: 1, retrying: 1 });
      const delivery = await deliveryOf(event.id);
      expect(delivery).toMatchObject({ state: 'pending', lastStatus: null, lastError: 'invalid_response' });
      const attempts = await world.api('GET', `/v1/merchants/${merchantId}/webhook/deliveries/${delivery.id}/attempts`, { token: alice });
      expect(attempts.status).toBe(200);
      expect(attempts.body.attempts).toMatchObject([
        { attempt: 1, outcome: 'failed', status: null, error: 'invalid_response', message: expect.stringMatching(/^the answer's headers are over \d+ bytes \(UND_ERR_HEADERS_OVERFLOW\)$/) },
      ]);
    } finally {
      target.receiver.answerWith(200);
    }
  });

  it('dead-letters after the last scheduled attempt, and a re-send delivers it with the same webhook-id', async () => {
    const before = target.receiver.received.length;
    target.receiver.answerWith(503);
    const event = await emit(world, merchantId);
    for (let attempt = 1; attempt <= RETRY_SCHEDULE_S.length; attempt++) {
      const report = await runWorker();
      expect(report.claimed, `attempt ${attempt}`).toBe(1);
      const wait = RETRY_SCHEDULE_S[attempt];
      if (wait === undefined) {
        expect(report.dead).toBe(1);
        break;
      }
      advanceS(wait);
    }
    advanceS(100 * 3600);
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    world.gw.clock.offsetMs = 0; // back to the present, where alice's session is valid
    const delivery = await deliveryOf(event.id);
    expect(delivery).toMatchObject({ state: 'dead', attempts: RETRY_SCHEDULE_S.length, nextAttemptAt: null, lastStatus: 503, lastError: 'status_not_2xx' });

    target.receiver.answerWith(200);
    const resent = await world.api('POST', `/v1/merchants/${merchantId}/webhook/deliveries/${delivery.id}/resend`, { token: alice });
    expect(resent.status).toBe(202);
    expect(resent.body.delivery).toMatchObject({ id: delivery.id, state: 'pending', attempts: RETRY_SCHEDULE_S.length });
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    const got = target.receiver.received.slice(before);
    expect(got).toHaveLength(RETRY_SCHEDULE_S.length + 1);
    expect(new Set(got.map((r) => r.headers['webhook-id']))).toEqual(new Set([event.id]));
    expect(got.at(-1)!.verified).toBe(true);
    expect(await deliveryOf(event.id)).toMatchObject({ state: 'succeeded', attempts: RETRY_SCHEDULE_S.length + 1 });
  });

  it("takes over a crashed worker's delivery once its lease has run out", async () => {
    const event = await emit(world, merchantId);
    const nowMs = world.gw.clock.nowMs();
    await world.gw.gateway.db.query(`UPDATE webhook_deliveries SET locked_until_ms = $2, claim_token = 'crashed-worker' WHERE event_id = $1`, [event.id, nowMs + 60_000]);
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    const resend = await world.api('POST', `/v1/merchants/${merchantId}/webhook/deliveries/${(await deliveryOf(event.id)).id}/resend`, { token: alice });
    expect([resend.status, resend.body.code]).toEqual([409, 'conflict']);
    // Retry-After says when the attempt's claim ends, so a client that waits it is not refused again (found from
    // outside: a fixed 5 s, while an attempt may run 10 s).
    expect([resend.headers.get('retry-after'), resend.body.detail]).toEqual(['60', 'an attempt of this delivery is in progress; look again in 60 s, once it has ended']);
    advanceS(60);
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    expect(await deliveryOf(event.id)).toMatchObject({ state: 'succeeded', attempts: 1 });
  });

  it('queues nothing while the webhook is disabled and pauses what is pending; resuming without deliverMissed keeps the secret and sends only what was pending', async () => {
    const before = target.receiver.received.length;
    const pending = await emit(world, merchantId);
    const disabled = await world.api('PUT', `/v1/merchants/${merchantId}/webhook`, {
      token: alice,
      key: uniqueKey(),
      body: { url: 'https://hooks.shop-test.com/acg/events', enabled: false },
    });
    expect(disabled.body.configuration.enabled).toBe(false);
    expect(disabled.body.webhookSecret).toBeUndefined();
    const skipped = await emit(world, merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    expect(await deliveryOf(skipped.id)).toBeUndefined();
    const resend = await world.api('POST', `/v1/merchants/${merchantId}/webhook/deliveries/${(await deliveryOf(pending.id)).id}/resend`, { token: alice });
    expect([resend.status, resend.body.code]).toEqual([409, 'conflict']);

    const enabled = await world.api('PUT', `/v1/merchants/${merchantId}/webhook`, {
      token: alice,
      key: uniqueKey(),
      body: { url: 'https://hooks.shop-test.com/acg/events', deliverMissed: false },
    });
    expect(enabled.body.webhookSecret).toBeUndefined();
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    const got = target.receiver.received.slice(before);
    expect(got.map((r) => [r.headers['webhook-id'], r.verified])).toEqual([[pending.id, true]]);
  });
});

describe('SSRF: the address rule at delivery time', () => {
  it('never connects to a name that resolves to loopback or private addresses without the test-only relaxation', async () => {
    for (const resolvesTo of [['127.0.0.1'], ['::ffff:127.0.0.1'], ['10.1.2.3'], ['169.254.169.254'], ['93.184.215.14', '127.0.0.1']]) {
      const guarded = await startWorld({
        env: { ACG_OUTBOUND_CA_FILE: target.caFile },
        outbound: { ...target.outbound, lookupHost: async () => resolvesTo },
      });
      try {
        const token = await guarded.humanToken('guarded@example.com');
        const { merchant } = await registerMerchant(guarded, token);
        await markVerified(guarded, merchant.id);
        expect((await configureWebhook(guarded, token, merchant.id)).status).toBe(200);
        const before = target.receiver.received.length;
        const event = await guarded.gw.gateway.db.transaction((tx) =>
          emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: 'red_ssrf' } }, nowMs: guarded.gw.clock.nowMs() }),
        );
        expect(await guarded.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, retrying: 1 });
        expect(target.receiver.received.length, resolvesTo.join(',')).toBe(before);
        const list = await guarded.api('GET', `/v1/merchants/${merchant.id}/webhook/deliveries`, { token });
        expect(list.body.deliveries.find((d: { eventId: string }) => d.eventId === event.id)).toMatchObject({
          state: 'pending',
          attempts: 1,
          lastStatus: null,
          lastError: 'forbidden_address',
        });
      } finally {
        await guarded.close();
      }
    }
  }, 120_000); // five gateways, one after another
});

describe('GET /v1/merchants/{id}/webhook/deliveries and re-send', () => {
  it('lists deliveries newest first in pages, for the owner and for a key of the merchant with webhooks:read', async () => {
    const events = [await emit(world, merchantId), await emit(world, merchantId), await emit(world, merchantId)];
    const owner = await world.api('GET', `/v1/merchants/${merchantId}/webhook/deliveries?limit=2`, { token: alice });
    expect(owner.status).toBe(200);
    expect(owner.body.deliveries.map((d: { eventId: string }) => d.eventId)).toEqual([events[2]!.id, events[1]!.id]);
    expect(owner.body.hasMore).toBe(true);
    expect(owner.body.deliveries[0]).toMatchObject({ eventType: 'redemption.released', state: 'pending', attempts: 0, nextAttemptAt: expect.any(Number) });
    const next = await world.api('GET', `/v1/merchants/${merchantId}/webhook/deliveries?limit=1&startingAfter=${owner.body.deliveries[1].id}`, { token: alice });
    expect(next.body.deliveries[0].eventId).toBe(events[0]!.id);

    const made = await world.api('POST', `/v1/merchants/${merchantId}/api-keys`, { token: alice, key: uniqueKey(), body: { name: 'hooks', scopes: ['webhooks:read', 'webhooks:write'] } });
    const byKey = await world.api('GET', `/v1/merchants/${merchantId}/webhook/deliveries?limit=2`, { token: made.body.secretKey });
    expect(byKey.status).toBe(200);
    expect(byKey.body).toEqual(owner.body);
    const resend = await world.api('POST', `/v1/merchants/${merchantId}/webhook/deliveries/${owner.body.deliveries[0].id}/resend`, { token: made.body.secretKey });
    expect(resend.status).toBe(202);
  });

  it('answers 404 to other owners and keys of other merchants, 403 to a key without the scope, 404 for an unknown delivery', async () => {
    const event = await emit(world, merchantId);
    const deliveryId = (await deliveryOf(event.id)).id;
    const bob = await world.humanToken('bob@example.com');
    const bobs = await registerMerchant(world, bob, { domain: 'bobs-shop.com' });
    const bobKey = (await world.api('POST', `/v1/merchants/${bobs.merchant.id}/api-keys`, { token: bob, key: uniqueKey(), body: { name: 'b', scopes: ['webhooks:read', 'webhooks:write'] } })).body.secretKey;
    const readOnly = (await world.api('POST', `/v1/merchants/${merchantId}/api-keys`, { token: alice, key: uniqueKey(), body: { name: 'r', scopes: ['webhooks:read'] } })).body.secretKey;
    const list = `/v1/merchants/${merchantId}/webhook/deliveries`;
    const resend = `${list}/${deliveryId}/resend`;
    for (const [method, path, token, status, code] of [
      ['GET', list, bob, 404, 'not_found'],
      ['GET', list, bobKey, 404, 'not_found'],
      ['POST', resend, bob, 404, 'not_found'],
      ['POST', resend, bobKey, 404, 'not_found'],
      ['POST', resend, readOnly, 403, 'scope_required'],
      ['POST', `${list}/whd_unknown/resend`, alice, 404, 'not_found'],
      ['GET', list, undefined, 401, 'unauthorized'],
    ] as const) {
      const res = await world.api(method, path, { token });
      expect([res.status, res.body.code], `${method} ${path}`).toEqual([status, code]);
    }
  });

  it('replays a re-send sent with an Idempotency-Key', async () => {
    const event = await emit(world, merchantId);
    const deliveryId = (await deliveryOf(event.id)).id;
    const key = uniqueKey();
    const path = `/v1/merchants/${merchantId}/webhook/deliveries/${deliveryId}/resend`;
    const first = await world.api('POST', path, { token: alice, key });
    const again = await world.api('POST', path, { token: alice, key });
    expect(again.status).toBe(202);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
  });
});

describe('background work', () => {
  /** A gateway of its own on the hook target, whose worker polls every `pollMs` once its background work starts. */
  const runningWorld = (pollMs: number) =>
    startWorld({
      env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true', ACG_WEBHOOK_POLL_INTERVAL_MS: String(pollMs) },
      outbound: target.outbound,
    });
  /** Stops it, and gives the shared receiver back the secret of this file's own merchant. */
  const closeRunning = async (running: World) => {
    await running.gw.gateway.close();
    await running.close();
    const rotated = await world.api('PUT', `/v1/merchants/${merchantId}/webhook`, {
      token: alice,
      key: uniqueKey(),
      body: { url: 'https://hooks.shop-test.com/acg/events', rotateSecret: true },
    });
    target.receiver.useSecret(rotated.body.webhookSecret);
  };

  it("delivers voucher.revoked at once after a freeze or a retirement that withdrew a merchant's voucher, not at the next poll", async () => {
    const running = await runningWorld(60_000);
    try {
      const token = await running.humanToken('prompt@example.com');
      const merchant = await webhookMerchant(running, token);
      const offer = await running.api('POST', `/v1/merchants/${merchant}/offers`, { token, key: uniqueKey(), body: { name: 'One report', category: 'books', priceUc: '1000000' } });
      expect(offer.status, JSON.stringify(offer.body)).toBe(201);
      running.gw.gateway.startBackgroundWork();
      // The worker's first scheduled pass, made now: from here only a wake-up delivers before the poll a minute on.
      await running.gw.services.webhookWorker.pass();
      for (const [how, path] of [['freeze', 'freeze'], ['retirement', 'retire']] as const) {
        const root = await running.createAgent('prompt@example.com', `prompt-${how}`);
        await grant(running, root.id, 5_000_000n);
        let agent = root;
        if (how === 'retirement') {
          // Only a delegate retires.
          const mandate = await running.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token, key: uniqueKey(), body: { delegation: { allowed: true, maxDepth: 1 } } });
          expect(mandate.status, JSON.stringify(mandate.body)).toBe(200);
          const subject = `prompt-${how}-delegate`;
          const created = await running.api('POST', `/v1/agents/${root.id}/delegates`, { token: root.token, key: uniqueKey(), body: { name: subject, identity: { issuer: running.agentIssuer.issuer, subject } } });
          expect(created.status, JSON.stringify(created.body)).toBe(201);
          agent = { ...root, id: created.body.id, token: await running.agentToken(subject, 'prompt@example.com') };
        }
        const minted = await running.api('POST', '/v1/vouchers', { token: agent.token, key: uniqueKey(), body: { offerId: offer.body.id } });
        expect(minted.status, JSON.stringify(minted.body)).toBe(200);
        const body = path === 'freeze' ? { releaseHolds: true } : undefined;
        const ended = await running.api('POST', `/v1/owner/agents/${agent.id}/${path}`, { token, key: uniqueKey(), ...(body ? { body } : {}) });
        expect(ended.status, JSON.stringify(ended.body)).toBe(200);
        const revoked = (r: (typeof target.receiver.received)[number]) => r.verified && JSON.parse(r.body).type === 'voucher.revoked' && r.body.includes(minted.body.redemption.id);
        await waitFor(() => target.receiver.received.filter(revoked).length, { until: (n) => n === 1, what: `voucher.revoked after the ${how}`, timeoutMs: 5_000 });
      }
    } finally {
      await closeRunning(running);
    }
  }, 90_000);

  it('runs the worker every ACG_WEBHOOK_POLL_INTERVAL_MS once the gateway starts its background work', async () => {
    const running = await runningWorld(50);
    try {
      const token = await running.humanToken('running@example.com');
      const merchant = await webhookMerchant(running, token);
      running.gw.gateway.startBackgroundWork();
      const before = target.receiver.received.length;
      const event = await emit(running, merchant);
      await waitFor(() => target.receiver.received.length, { until: (n) => n > before, what: 'the scheduled worker to deliver the event' });
      expect(target.receiver.received.slice(before).map((r) => [r.headers['webhook-id'], r.verified])).toEqual([[event.id, true]]);
    } finally {
      await closeRunning(running);
    }
  }, 90_000);

  // Found in CI: a timer that fired before the clock read its time made a pass that found the retry not yet due, and
  // nothing woke for it again before the poll. Here the clock is set back after the retry's timer was armed.
  it('makes a retry whose timer fires before the clock reads its due time once the clock does, not at the next poll', async () => {
    const running = await runningWorld(60_000);
    try {
      const token = await running.humanToken('early-timer@example.com');
      const merchant = await webhookMerchant(running, token);
      running.gw.gateway.startBackgroundWork();
      target.receiver.answerWith(500);
      const event = await emit(running, merchant);
      await running.gw.services.webhookWorker.pass();
      await waitFor(() => attemptsOf(running, event.id), { until: (attempts) => attempts.length === 1 && attempts[0]!.finished_at_ms !== null, what: 'the failure' });
      target.receiver.answerWith(200);
      running.gw.clock.offsetMs -= 300;
      const attempts = await waitFor(() => attemptsOf(running, event.id), { until: (rows) => rows.length === 2 && rows[1]!.outcome === 'succeeded', what: 'the retry', timeoutMs: 10_000 });
      const waitedMs = Number(attempts[1]!.started_at_ms) - Number(attempts[0]!.finished_at_ms);
      expect(waitedMs).toBeGreaterThanOrEqual(5_000);
      expect(waitedMs).toBeLessThan(7_000);
    } finally {
      target.receiver.answerWith(200);
      running.gw.clock.offsetMs = 0;
      await closeRunning(running);
    }
  }, 60_000);

  // Found from outside: the worker kept a timer for the earliest retry only, so a retry due after another's waited
  // for the next poll (5.9–6 s after a timeout, where a 500's came at 5 s).
  it('makes each retry at its own due time, not only the earliest one, before the next poll', async () => {
    const running = await runningWorld(60_000);
    try {
      const token = await running.humanToken('retries@example.com');
      const merchant = await webhookMerchant(running, token);
      running.gw.gateway.startBackgroundWork();
      target.receiver.answerWith(500);
      // Two first attempts that fail 700 ms apart: their retries are due 5 s after each.
      const first = await emit(running, merchant);
      await running.gw.services.webhookWorker.pass();
      await waitFor(() => attemptsOf(running, first.id), { until: (attempts) => attempts.length === 1 && attempts[0]!.finished_at_ms !== null, what: 'the first failure' });
      await new Promise((resolve) => setTimeout(resolve, 700));
      const second = await emit(running, merchant);
      await running.gw.services.webhookWorker.pass();
      await waitFor(() => attemptsOf(running, second.id), { until: (attempts) => attempts.length === 1 && attempts[0]!.finished_at_ms !== null, what: 'the second failure' });
      target.receiver.answerWith(200);
      for (const event of [first, second]) {
        const attempts = await waitFor(() => attemptsOf(running, event.id), { until: (rows) => rows.length === 2 && rows[1]!.outcome === 'succeeded', what: 'the retry', timeoutMs: 10_000 });
        const waitedMs = Number(attempts[1]!.started_at_ms) - Number(attempts[0]!.finished_at_ms);
        expect(waitedMs, event === first ? 'the earliest retry' : 'the retry due after it').toBeGreaterThanOrEqual(5_000);
        // The poll is a minute away: without its own timer, the retry waits for it. (The bound leaves room for a loaded machine.)
        expect(waitedMs).toBeLessThan(7_000);
      }
    } finally {
      target.receiver.answerWith(200);
      await closeRunning(running);
    }
  }, 60_000);
});

/** The attempts of one event's delivery, oldest first. */
async function attemptsOf(w: World, eventId: string) {
  const { rows } = await w.gw.gateway.db.query<{ outcome: string; started_at_ms: string; finished_at_ms: string | null }>(
    `SELECT a.outcome, a.started_at_ms, a.finished_at_ms FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.event_id = $1 ORDER BY a.seq`,
    [eventId],
  );
  return rows;
}
