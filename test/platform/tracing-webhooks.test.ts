// Traces of webhook attempts, in a gateway built in the test with the real SDK exporting to the test OTLP
// receiver. A failed attempt (the receiver answered 500; the address was refused) is an error span, as the
// OpenTelemetry conventions have it, merchant's or owner's alike (one worker); a successful one is not. The
// outbound POST names the receiver's address and its effective port (443 for an https URL without one). An
// attempt continues the trace context its delivery keeps, with the caller's tracestate, and a delivery of the
// older release (a traceparent alone) is continued as before.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { WebhookWorker } from '../../src/events/worker.ts';
import { configureWebhook, HOOK_HOST, markVerified, registerMerchant, uniqueKey, type HookTarget } from '../support/merchants.ts';
import type { OtlpReceiver, ReceivedSpan } from '../support/otlp-receiver.ts';
import { startTracedWorld, type TracedWorld } from '../support/traced-world.ts';
import { waitFor } from '../support/wait.ts';
import type { World } from '../support/world.ts';

const UNSET = 0;
const ERROR = 2;
const CLIENT = 3;

let otlp: OtlpReceiver;
let target: HookTarget;
let world: World;
let traced: TracedWorld;

beforeAll(async () => {
  traced = await startTracedWorld({ outboundHttp: true });
  ({ otlp, target, world } = traced);
});
afterAll(() => traced?.close());

/** The exported span of each attempt to deliver `eventId`, in attempt order. */
async function attemptSpans(eventId: string, count: number): Promise<ReceivedSpan[]> {
  const spans = await waitFor(() => otlp.spans.filter((span) => span.name === 'webhook attempt' && span.attributes['acg.event.id'] === eventId), {
    until: (found) => found.length >= count,
    what: `${count} attempt spans of ${eventId}`,
  });
  return spans.sort((a, b) => Number(a.attributes['acg.webhook.attempt']) - Number(b.attributes['acg.webhook.attempt']));
}

describe('a webhook attempt span', () => {
  it('is an error when the receiver answered 500 (status message HTTP 500), not when it answered 200; its POST names the address and port 443', async () => {
    const owner = await world.humanToken('traced-hooks@example.com');
    const { merchant } = await registerMerchant(world, owner);
    await markVerified(world, merchant.id);
    const webhook = await configureWebhook(world, owner, merchant.id);
    target.receiver.useSecret(webhook.body.webhookSecret);
    const event = await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: 'red_traced' } }, nowMs: world.gw.clock.nowMs() }),
    );
    target.receiver.answerWith(500);
    try {
      expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, retrying: 1 });
    } finally {
      target.receiver.answerWith(200);
    }
    await world.gw.gateway.db.query('UPDATE webhook_deliveries SET next_attempt_at_ms = 0 WHERE event_id = $1', [event.id]);
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, succeeded: 1 });

    const [failed, succeeded] = (await attemptSpans(event.id, 2)) as [ReceivedSpan, ReceivedSpan];
    expect(failed.attributes).toMatchObject({ 'acg.webhook.outcome': 'retrying', 'http.response.status_code': 500, 'error.type': 'status_not_2xx' });
    expect(failed.status).toEqual({ code: ERROR, message: 'HTTP 500' });
    expect(succeeded.attributes).toMatchObject({ 'acg.webhook.outcome': 'succeeded', 'http.response.status_code': 200 });
    expect(succeeded.status.code).toBe(UNSET);

    const attempts = new Set([failed.spanId, succeeded.spanId]);
    const posts = await waitFor(() => otlp.spans.filter((span) => span.kind === CLIENT && span.name === 'POST' && attempts.has(span.parentSpanId)), {
      until: (found) => found.length === 2,
      what: 'the two attempts\' POST spans',
    });
    for (const post of posts) expect(post.attributes).toMatchObject({ 'http.request.method': 'POST', 'url.scheme': 'https', 'server.address': HOOK_HOST, 'server.port': 443 });
  });

  it("is an error when the owner webhook's address is refused (status message forbidden_address)", async () => {
    const human = await world.humanToken('traced-owner@example.com');
    const put = await world.api('PUT', '/v1/owner/webhook', { token: human, key: uniqueKey('traced-owner'), body: { url: `https://${HOOK_HOST}/owner/events` } });
    expect(put.status).toBe(200);
    const ownerId = put.body.configuration.ownerId as string;
    const event = await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { ownerId, type: 'topup.expired', data: { topup: { id: 'top_traced' } }, nowMs: world.gw.clock.nowMs() }),
    );
    // A worker that keeps the address rule, whose resolver answers a private address.
    const strict = new WebhookWorker({
      db: world.gw.gateway.db,
      clock: world.gw.clock,
      log: world.gw.gateway.log,
      secretBoxKey: world.gw.services.secretBoxKey,
      allowPrivateNetworkTargets: false,
      testHooks: { lookupHost: async () => ['10.0.0.7'] },
    });
    expect(await strict.runOnce()).toMatchObject({ claimed: 1, retrying: 1 });

    const [refused] = (await attemptSpans(event.id, 1)) as [ReceivedSpan];
    expect(refused.attributes).toMatchObject({ 'acg.webhook.outcome': 'retrying', 'error.type': 'forbidden_address' });
    expect(refused.status).toEqual({ code: ERROR, message: 'forbidden_address' });
  });
});

describe("a webhook attempt's trace context", () => {
  it('continues the delivery\'s stored context with its tracestate, and a traceparent alone as the older release stored it', async () => {
    const owner = await world.humanToken('traced-state@example.com');
    const { merchant } = await registerMerchant(world, owner);
    await markVerified(world, merchant.id);
    const webhook = await configureWebhook(world, owner, merchant.id);
    target.receiver.useSecret(webhook.body.webhookSecret);
    const stored = [
      { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex'), tracestate: 'vendor=abc,other=x' },
      { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex'), tracestate: undefined },
    ];
    const eventIds: string[] = [];
    for (const [i, context] of stored.entries()) {
      const event = await world.gw.gateway.db.transaction((tx) =>
        emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: `red_state_${i}` } }, nowMs: world.gw.clock.nowMs() }),
      );
      const traceparent = `00-${context.traceId}-${context.spanId}-01`;
      await world.gw.gateway.db.query('UPDATE webhook_deliveries SET traceparent = $2 WHERE event_id = $1', [
        event.id,
        context.tracestate === undefined ? traceparent : `${traceparent} ${context.tracestate}`,
      ]);
      eventIds.push(event.id);
    }
    const before = target.receiver.received.length;
    // A new receiver is tried one attempt at a time until it answers 2xx.
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, succeeded: 1 });
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, succeeded: 1 });
    const received = target.receiver.received.slice(before);
    for (const [i, context] of stored.entries()) {
      const [attempt] = (await attemptSpans(eventIds[i]!, 1)) as [ReceivedSpan];
      expect(attempt).toMatchObject({ traceId: context.traceId, parentSpanId: context.spanId });
      const request = received.find((r) => r.headers['webhook-id'] === eventIds[i])!;
      expect(request.headers.traceparent).toBe(`00-${context.traceId}-${attempt.spanId}-01`);
      expect(request.headers.tracestate).toBe(context.tracestate);
    }
  });
});
