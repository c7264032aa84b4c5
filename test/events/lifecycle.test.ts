// The webhook's life as a merchant lives it: events kept and listed whether or not the webhook is on, a
// pause that loses nothing (resume delivering what was missed, or only new events, as asked), re-sending any
// past event with its original webhook-id, and a secret rotation whose overlap lets receivers knowing either
// secret verify every delivery with the standardwebhooks library.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { emitEvent, type EventType } from '../../src/events/outbox.ts';
import type { ReceivedWebhook } from '../support/webhook-receiver.ts';
import { configureWebhook, HOOK_HOST, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

let target: HookTarget;
let world: World;
let alice: string;

beforeAll(async () => {
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
  alice = await world.humanToken('alice@example.com');
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});
afterEach(() => {
  world.gw.clock.offsetMs = 0;
});
beforeEach(async () => {
  // Every test starts with nothing due (earlier tests may leave rows behind).
  await world.gw.gateway.db.query(`UPDATE webhook_deliveries SET state = 'dead' WHERE state = 'pending'`);
});

async function webhookMerchant(): Promise<{ merchantId: string; secret: string }> {
  const { merchant } = await registerMerchant(world, alice);
  await markVerified(world, merchant.id);
  const res = await configureWebhook(world, alice, merchant.id);
  expect(res.status).toBe(200);
  target.receiver.useSecret(res.body.webhookSecret);
  return { merchantId: merchant.id, secret: res.body.webhookSecret };
}

/** A receiver that answered 2xx before: a new one is tried one attempt at a time until it does, and these tests send bursts. */
const answeredBefore = (merchantId: string) => world.gw.gateway.db.query('UPDATE webhook_endpoints SET proven = true WHERE merchant_id = $1', [merchantId]);

const emit = (merchantId: string, type: EventType = 'redemption.held') =>
  world.gw.gateway.db.transaction((tx) => emitEvent(tx, { merchantId, type, data: { redemption: { id: `red_${uniqueKey()}` } }, nowMs: world.gw.clock.nowMs() }));

const runWorker = () => world.gw.services.webhookWorker.runOnce();

const patch = (merchantId: string, body: unknown) => world.api('PATCH', `/v1/merchants/${merchantId}/webhook`, { token: alice, key: uniqueKey(), body });

/** What a merchant's receiver does: the standardwebhooks library, with a clock that agrees with the gateway's. */
function verifies(secret: string, request: ReceivedWebhook): boolean {
  const verifier = new Webhook(secret);
  Object.assign(verifier, {
    verifyTimestamp(header: string): Date {
      const timestampS = Number.parseInt(header, 10);
      if (Math.abs(world.gw.clock.nowS() - timestampS) > 300) throw new WebhookVerificationError('timestamp outside tolerance');
      return new Date(timestampS * 1000);
    },
  });
  try {
    verifier.verify(request.body, request.headers as Record<string, string>);
    return true;
  } catch {
    return false;
  }
}

describe('events are kept and listed', () => {
  it('lists every event, newest first, with filters by type and time and cursor paging, for the owner and a key with events:read', async () => {
    const { merchantId } = await webhookMerchant();
    const held = await emit(merchantId, 'redemption.held');
    world.gw.clock.advance(10_000);
    const captured = await emit(merchantId, 'redemption.captured');
    const released = await emit(merchantId, 'redemption.released');
    const list = await world.api('GET', `/v1/merchants/${merchantId}/events`, { token: alice });
    expect(list.status).toBe(200);
    expect(list.body.events.map((e: { id: string }) => e.id)).toEqual([released.id, captured.id, held.id]);
    expect(list.body.events[2]).toEqual({ id: held.id, type: 'redemption.held', createdAt: held.createdAt, payload: JSON.parse(JSON.stringify(held)) });

    const byType = await world.api('GET', `/v1/merchants/${merchantId}/events?type=redemption.held,redemption.released`, { token: alice });
    expect(byType.body.events.map((e: { id: string }) => e.id)).toEqual([released.id, held.id]);
    const since = await world.api('GET', `/v1/merchants/${merchantId}/events?from=${captured.createdAt}`, { token: alice });
    expect(since.body.events.map((e: { id: string }) => e.id)).toEqual([released.id, captured.id]);
    const until = await world.api('GET', `/v1/merchants/${merchantId}/events?to=${held.createdAt}`, { token: alice });
    expect(until.body.events.map((e: { id: string }) => e.id)).toEqual([held.id]);
    const page1 = await world.api('GET', `/v1/merchants/${merchantId}/events?limit=2`, { token: alice });
    expect([page1.body.events.length, page1.body.hasMore]).toEqual([2, true]);
    const page2 = await world.api('GET', `/v1/merchants/${merchantId}/events?limit=2&startingAfter=${page1.body.events[1].id}`, { token: alice });
    expect([page2.body.events.map((e: { id: string }) => e.id), page2.body.hasMore]).toEqual([[held.id], false]);

    const badType = await world.api('GET', `/v1/merchants/${merchantId}/events?type=nope`, { token: alice });
    expect([badType.status, badType.body.code, badType.body.errors]).toEqual([400, 'invalid_input', [{ path: 'querystring/type', message: expect.stringMatching(/^names an unknown event type "nope"; known: /) }]]);
    // A window of one second is fine; one that ends before it begins is refused, not read as "no events".
    const instant = await world.api('GET', `/v1/merchants/${merchantId}/events?from=${held.createdAt}&to=${held.createdAt}`, { token: alice });
    expect(instant.body.events.map((e: { id: string }) => e.id)).toEqual([held.id]);
    const swapped = await world.api('GET', `/v1/merchants/${merchantId}/events?from=${captured.createdAt}&to=${held.createdAt}`, { token: alice });
    expect([swapped.status, swapped.body.code, swapped.body.detail, swapped.body.errors?.[0]?.path]).toEqual([
      400,
      'invalid_input',
      `querystring/to (${held.createdAt}) is earlier than from (${captured.createdAt}); both are Unix seconds, and the window includes both`,
      'querystring/to',
    ]);

    const key = async (scopes: string[]) =>
      (await world.api('POST', `/v1/merchants/${merchantId}/api-keys`, { token: alice, key: uniqueKey(), body: { name: 'k', scopes } })).body.secretKey as string;
    const reader = await world.api('GET', `/v1/merchants/${merchantId}/events`, { token: await key(['events:read']) });
    expect(reader.body.events).toHaveLength(3);
    const other = await key(['webhooks:read']);
    expect((await world.api('GET', `/v1/merchants/${merchantId}/events`, { token: other })).status).toBe(403);
    const bob = await world.humanToken('bob@example.com');
    expect((await world.api('GET', `/v1/merchants/${merchantId}/events`, { token: bob })).status).toBe(404);
  });
});

describe('a pause loses nothing', () => {
  it('keeps the events of a pause, delivers them on a resume with deliverMissed (the default), and re-sends a past event with its webhook-id', async () => {
    const { merchantId, secret } = await webhookMerchant();
    await answeredBefore(merchantId);
    const paused = await patch(merchantId, { enabled: false });
    expect(paused.status).toBe(200);
    expect(paused.body.configuration).toMatchObject({ enabled: false, disabledReason: 'merchant', pausedAt: expect.any(Number) });
    const during = [await emit(merchantId), await emit(merchantId, 'redemption.captured')];
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    const listed = await world.api('GET', `/v1/merchants/${merchantId}/events`, { token: alice });
    expect(listed.body.events.map((e: { id: string }) => e.id)).toEqual([during[1]!.id, during[0]!.id]);

    const before = target.receiver.received.length;
    const resumed = await patch(merchantId, { enabled: true });
    expect(resumed.body.configuration).toMatchObject({ enabled: true, pausedAt: null, disabledReason: null });
    expect(resumed.body).not.toHaveProperty('webhookSecret');
    expect(await runWorker()).toMatchObject({ claimed: 2, succeeded: 2 });
    const got = target.receiver.received.slice(before);
    expect(got.map((r) => r.headers['webhook-id']).sort()).toEqual(during.map((e) => e.id).sort());
    expect(got.every((r) => verifies(secret, r))).toBe(true);

    // Any past event, again, with its original webhook-id.
    const again = await world.api('POST', `/v1/merchants/${merchantId}/events/${during[0]!.id}/resend`, { token: alice });
    expect(again.status).toBe(202);
    expect(again.body.delivery).toMatchObject({ eventId: during[0]!.id, state: 'pending' });
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    expect(target.receiver.received.at(-1)!.headers['webhook-id']).toBe(during[0]!.id);
    expect(target.receiver.received.at(-1)!.verified).toBe(true);
  });

  it('delivers only new events on a resume with deliverMissed: false; a missed one is still listed and can be re-sent', async () => {
    const { merchantId } = await webhookMerchant();
    expect((await patch(merchantId, { enabled: false })).status).toBe(200);
    const missed = await emit(merchantId);
    const before = target.receiver.received.length;
    expect((await patch(merchantId, { enabled: true, deliverMissed: false })).status).toBe(200);
    const fresh = await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    expect(target.receiver.received.slice(before).map((r) => r.headers['webhook-id'])).toEqual([fresh.id]);
    const listed = await world.api('GET', `/v1/merchants/${merchantId}/events`, { token: alice });
    expect(listed.body.events.map((e: { id: string }) => e.id)).toContain(missed.id);

    const resent = await world.api('POST', `/v1/merchants/${merchantId}/events/${missed.id}/resend`, { token: alice });
    expect(resent.status).toBe(202);
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    const last = target.receiver.received.at(-1)!;
    expect([last.headers['webhook-id'], last.verified]).toEqual([missed.id, true]);
  });

  it('re-sends a missed voucher.revoked as urgent, as its first delivery would have been', async () => {
    const { merchantId } = await webhookMerchant();
    expect((await patch(merchantId, { enabled: false })).status).toBe(200);
    const revoked = await emit(merchantId, 'voucher.revoked');
    const held = await emit(merchantId);
    expect((await patch(merchantId, { enabled: true, deliverMissed: false })).status).toBe(200);
    for (const event of [revoked, held]) expect((await world.api('POST', `/v1/merchants/${merchantId}/events/${event.id}/resend`, { token: alice })).status).toBe(202);
    const { rows } = await world.gw.gateway.db.query<{ event_id: string; urgent: boolean }>('SELECT event_id, urgent FROM webhook_deliveries WHERE merchant_id = $1 ORDER BY seq', [merchantId]);
    expect(rows).toEqual([
      { event_id: revoked.id, urgent: true },
      { event_id: held.id, urgent: false },
    ]);
  });

  it('refuses a re-send while paused (409), of an unknown event (404), and PATCH without a key or with a bad body (400)', async () => {
    const { merchantId } = await webhookMerchant();
    const event = await emit(merchantId);
    await patch(merchantId, { enabled: false });
    const paused = await world.api('POST', `/v1/merchants/${merchantId}/events/${event.id}/resend`, { token: alice });
    expect([paused.status, paused.body.code]).toEqual([409, 'conflict']);
    const unknown = await world.api('POST', `/v1/merchants/${merchantId}/events/evt_nope/resend`, { token: alice });
    expect([unknown.status, unknown.body.code]).toEqual([404, 'not_found']);
    expect((await patch(merchantId, { enabled: 'yes' })).status).toBe(400);
    const noKey = await world.api('PATCH', `/v1/merchants/${merchantId}/webhook`, { token: alice, body: { enabled: true } });
    expect([noKey.status, noKey.body.code]).toEqual([400, 'idempotency_required']);
  });
});

describe('secret rotation with an overlap', () => {
  it('signs with both secrets during the overlap, so receivers knowing either verify every delivery; afterwards only the new one', async () => {
    const { merchantId, secret: oldSecret } = await webhookMerchant();
    await answeredBefore(merchantId);
    const key = uniqueKey();
    const rotate = () => world.api('POST', `/v1/merchants/${merchantId}/webhook/rotate-secret`, { token: alice, key, body: {} });
    const rotatedAtS = world.gw.clock.nowS();
    const rotated = await rotate();
    expect(rotated.status).toBe(200);
    const newSecret = rotated.body.webhookSecret as string;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(oldSecret);
    expect(rotated.body.configuration.previousSecretExpiresAt - rotatedAtS).toBeGreaterThanOrEqual(86_400);
    expect(rotated.body.configuration.previousSecretExpiresAt - rotatedAtS).toBeLessThanOrEqual(86_401);
    const replay = await rotate();
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).not.toHaveProperty('webhookSecret');
    // It says where the secret went, as a replayed PUT does (found from outside: it said nothing).
    expect(replay.body.notice).toMatch(/shown once/);
    expect(rotated.body).not.toHaveProperty('notice');

    const bothVerify = (requests: ReceivedWebhook[]) => {
      for (const request of requests) {
        expect(request.headers['webhook-signature']).toMatch(/^v1,\S+ v1,\S+$/);
        expect([verifies(oldSecret, request), verifies(newSecret, request)]).toEqual([true, true]);
      }
    };
    const before = target.receiver.received.length;
    for (let i = 0; i < 3; i++) await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 3, succeeded: 3 });
    bothVerify(target.receiver.received.slice(before));
    world.gw.clock.advance(23 * 3600_000);
    await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    bothVerify(target.receiver.received.slice(before + 3));
    expect(target.receiver.received.slice(before)).toHaveLength(4);

    world.gw.clock.advance(3600_000 + 1000);
    await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    const after = target.receiver.received.at(-1)!;
    expect(after.headers['webhook-signature']).toMatch(/^v1,\S+$/);
    expect([verifies(oldSecret, after), verifies(newSecret, after)]).toEqual([false, true]);
  });

  it('takes a configurable overlap (0 stops the old secret at once) and refuses one beyond 7 days', async () => {
    const { merchantId, secret: oldSecret } = await webhookMerchant();
    const rotated = await world.api('POST', `/v1/merchants/${merchantId}/webhook/rotate-secret`, { token: alice, key: uniqueKey(), body: { overlapSeconds: 0 } });
    expect(rotated.body.configuration.previousSecretExpiresAt).toBeNull();
    await emit(merchantId);
    expect(await runWorker()).toMatchObject({ succeeded: 1 });
    const last = target.receiver.received.at(-1)!;
    expect([verifies(oldSecret, last), verifies(rotated.body.webhookSecret, last)]).toEqual([false, true]);
    const tooLong = await world.api('POST', `/v1/merchants/${merchantId}/webhook/rotate-secret`, { token: alice, key: uniqueKey(), body: { overlapSeconds: 8 * 86_400 } });
    expect(tooLong.status).toBe(400);
    const unconfigured = (await registerMerchant(world, alice)).merchant.id;
    const none = await world.api('POST', `/v1/merchants/${unconfigured}/webhook/rotate-secret`, { token: alice, key: uniqueKey(), body: {} });
    expect([none.status, none.body.code]).toEqual([404, 'not_found']);
  });
});

describe('a failing endpoint', () => {
  /** An event whose attempts fail for 5 days (the receiver answers 500, the clock moved), so its endpoint is disabled. */
  async function failForFiveDays(merchantId: string) {
    const event = await emit(merchantId);
    expect(await runWorker()).toMatchObject({ retrying: 1 });
    world.gw.clock.advance(5 * 86_400_000);
    await world.gw.gateway.db.query('UPDATE webhook_deliveries SET next_attempt_at_ms = 0 WHERE event_id = $1', [event.id]);
    expect(await runWorker()).toMatchObject({ claimed: 1 });
    world.gw.clock.offsetMs = 0;
    return event;
  }

  it('is disabled after every attempt failed for 5 days, with a webhook.disabled event listed', async () => {
    const { merchantId } = await webhookMerchant();
    target.receiver.answerWith(500);
    try {
      await failForFiveDays(merchantId);
      const configuration = (await world.api('GET', `/v1/merchants/${merchantId}/webhook`, { token: alice })).body.configuration;
      expect(configuration).toMatchObject({ enabled: false, disabledReason: 'failing' });
      const events = await world.api('GET', `/v1/merchants/${merchantId}/events?type=webhook.disabled`, { token: alice });
      expect(events.body.events).toHaveLength(1);
      expect(events.body.events[0].payload.data.webhook).toMatchObject({ reason: 'failing', consecutiveFailures: 2 });
    } finally {
      target.receiver.answerWith(200);
    }
  });

  it('never delivers webhook.disabled: not on a resume with deliverMissed, by PATCH or by PUT, nor by a re-send', async () => {
    const { merchantId } = await webhookMerchant();
    target.receiver.answerWith(500);
    try {
      // The disabling and its event share one second: the event is one of the pause that resume delivers.
      const event = await failForFiveDays(merchantId);
      const disabled = (await world.api('GET', `/v1/merchants/${merchantId}/events?type=webhook.disabled`, { token: alice })).body.events[0];
      expect(disabled).toMatchObject({ type: 'webhook.disabled' });
      target.receiver.answerWith(200);
      const before = target.receiver.received.length;
      const { rows: url } = await world.gw.gateway.db.query<{ url: string }>('SELECT url FROM webhook_endpoints WHERE merchant_id = $1', [merchantId]);

      expect((await configureWebhook(world, alice, merchantId, `${url[0]!.url}/fixed`)).body.configuration).toMatchObject({ enabled: true });
      await world.gw.gateway.db.query('UPDATE webhook_deliveries SET next_attempt_at_ms = 0 WHERE event_id = $1', [event.id]);
      await runWorker();
      expect((await patch(merchantId, { enabled: false })).status).toBe(200);
      expect((await patch(merchantId, { enabled: true })).status).toBe(200);
      await runWorker();
      expect(target.receiver.received.slice(before).map((r) => r.headers['webhook-id'])).toEqual([event.id]);

      const resent = await world.api('POST', `/v1/merchants/${merchantId}/events/${disabled.id}/resend`, { token: alice });
      expect([resent.status, resent.body.code]).toEqual([409, 'conflict']);
      const { rows } = await world.gw.gateway.db.query('SELECT 1 FROM webhook_deliveries WHERE event_id = $1', [disabled.id]);
      expect(rows).toHaveLength(0);
    } finally {
      target.receiver.answerWith(200);
    }
  });
});

describe('retention and the circuit', () => {
  it("closes an open circuit when the URL changes (the failures were the old receiver's); the same URL leaves it open", async () => {
    const { merchantId } = await webhookMerchant();
    const { rows } = await world.gw.gateway.db.query<{ url: string }>('SELECT url FROM webhook_endpoints WHERE merchant_id = $1', [merchantId]);
    const url = rows[0]!.url;
    await world.gw.gateway.db.query('UPDATE webhook_endpoints SET circuit_open_until_ms = $2, consecutive_failures = 5 WHERE merchant_id = $1', [merchantId, world.gw.clock.nowMs() + 600_000]);
    await emit(merchantId);
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    expect((await configureWebhook(world, alice, merchantId, url)).status).toBe(200);
    expect(await runWorker()).toMatchObject({ claimed: 0 });
    expect((await configureWebhook(world, alice, merchantId, `${url}/moved`)).status).toBe(200);
    expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
  });

  it('deletes events (with their deliveries and attempts) older than 30 days, and keeps younger ones', async () => {
    const { merchantId } = await webhookMerchant();
    const old = await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId, type: 'redemption.held', data: { redemption: { id: 'red_old' } }, nowMs: world.gw.clock.nowMs() - 31 * 86_400_000 }),
    );
    expect(await runWorker()).toMatchObject({ succeeded: 1 });
    const young = await emit(merchantId);
    expect(await world.gw.services.webhooks.purgeExpired()).toBeGreaterThanOrEqual(1);
    const ids = (await world.api('GET', `/v1/merchants/${merchantId}/events`, { token: alice })).body.events.map((e: { id: string }) => e.id);
    expect(ids).toEqual([young.id]);
    const left = await world.gw.gateway.db.query('SELECT 1 FROM webhook_deliveries WHERE event_id = $1', [old.id]);
    expect(left.rows).toHaveLength(0);
  });

  it('opens the circuit of an endpoint after 5 failures in a row (no attempt to it meanwhile), shown on the configuration; a re-send closes it', async () => {
    const { merchantId } = await webhookMerchant();
    await answeredBefore(merchantId);
    const circuit = async () => (await world.api('GET', `/v1/merchants/${merchantId}/webhook`, { token: alice })).body.configuration.circuit;
    expect(await circuit()).toBeNull();
    target.receiver.answerWith(500);
    try {
      for (let i = 0; i < 5; i++) await emit(merchantId);
      expect(await runWorker()).toMatchObject({ claimed: 4, retrying: 4 });
      expect(await circuit()).toBeNull();
      expect(await runWorker()).toMatchObject({ claimed: 1, retrying: 1 });
      const openedAtMs = world.gw.clock.nowMs();
      const late = await emit(merchantId);
      expect(await runWorker()).toMatchObject({ claimed: 0 });
      // The delivery waits untried: the configuration says why, and until when (30 s after the fifth failure).
      const open = await circuit();
      expect(open).toEqual({ openUntil: expect.any(Number), consecutiveFailures: 5 });
      expect(open.openUntil).toBeGreaterThanOrEqual(Math.ceil((openedAtMs + 30_000) / 1000) - 1);
      expect(open.openUntil).toBeLessThanOrEqual(Math.ceil((world.gw.clock.nowMs() + 30_000) / 1000));
      target.receiver.answerWith(200);
      const resent = await world.api('POST', `/v1/merchants/${merchantId}/events/${late.id}/resend`, { token: alice });
      expect(resent.status).toBe(202);
      expect(await circuit()).toBeNull();
      expect(await runWorker()).toMatchObject({ claimed: 1, succeeded: 1 });
    } finally {
      target.receiver.answerWith(200);
    }
  });

  it("shows an owner webhook's open circuit on GET /v1/owner/webhook, null once it has run out", async () => {
    const owner = await world.humanToken('circuit-owner@example.com');
    const put = await world.api('PUT', '/v1/owner/webhook', { token: owner, key: uniqueKey('owner-webhook'), body: { url: `https://${HOOK_HOST}/owner/events` } });
    expect([put.status, put.body.configuration.circuit]).toEqual([200, null]);
    const openUntilMs = world.gw.clock.nowMs() + 60_500;
    await world.gw.gateway.db.query('UPDATE webhook_endpoints SET circuit_open_until_ms = $2, consecutive_failures = 6 WHERE owner_id = $1', [put.body.configuration.ownerId, openUntilMs]);
    const read = async () => (await world.api('GET', '/v1/owner/webhook', { token: owner })).body.configuration;
    expect((await read()).circuit).toEqual({ openUntil: Math.ceil(openUntilMs / 1000), consecutiveFailures: 6 });
    world.gw.clock.advance(61_000);
    expect((await read()).circuit).toBeNull();
  });

  it('declares the circuit on both configurations in the OpenAPI document', async () => {
    const { components } = (await world.api('GET', '/openapi.json')).body;
    expect(components.schemas.WebhookCircuit.required).toEqual(['openUntil', 'consecutiveFailures']);
    for (const name of ['WebhookConfiguration', 'OwnerWebhookConfiguration']) {
      expect(components.schemas[name].required, name).toContain('circuit');
      expect(JSON.stringify(components.schemas[name].properties.circuit), name).toContain('WebhookCircuit');
    }
  });
});
