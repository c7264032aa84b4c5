// The owner's webhook: PUT/GET/DELETE /v1/owner/webhook, and the top-up and intent events of the approval
// flow reaching it signed (checked by an HTTPS receiver with the standardwebhooks library, on a public-looking
// name that the test-only outbound hooks point at 127.0.0.1), delivered by the merchants' worker.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { grant, mint, openShop } from '../support/ledger-fixture.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { HOOK_HOST, startHookTarget, type HookTarget } from '../support/merchants.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { ownerId, repoRequest } from './helpers.ts';

let world: World;
let github: FakeGitHub;
let target: HookTarget;
let counter = 0;
const key = (label: string) => `${label}-${++counter}-${Date.now()}`;
const HOOK_URL = `https://${HOOK_HOST}/owner/events`;

beforeAll(async () => {
  github = await startFakeGitHub();
  target = await startHookTarget();
  world = await startWorld({
    env: { ACG_PAYMENT_PROVIDER: 'local', ACG_GITHUB_API_URL: github.url, ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' },
    outbound: target.outbound,
  });
});
afterAll(async () => {
  await world?.close();
  await github?.close();
  await target?.close();
});

async function newAgent(label: string) {
  const email = `${label}-${++counter}@example.com`;
  return { email, ...(await world.createAgent(email, `${label}-agent-${counter}`)) };
}

async function putWebhook(token: string, body: Record<string, unknown> = { url: HOOK_URL }) {
  return world.api('PUT', '/v1/owner/webhook', { token, key: key('hook'), body });
}

/** An agent with no credit asks to run a repository read: 402 with its top-up. */
async function retainedIntent(agent: { token: string }) {
  const res = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
  expect(res.status).toBe(402);
  return { intentId: res.body.intentId as string, topupId: res.body.payment.id as string };
}

/** The events this receiver got for one owner, parsed, once `count` of them arrived. */
async function receivedFor(owner: string, count: number) {
  const mine = async () => {
    await world.gw.services.webhookWorker.runOnce();
    return target.receiver.received.map((r) => ({ ...r, event: JSON.parse(r.body) })).filter((r) => r.event.ownerId === owner);
  };
  return waitFor(mine, { until: (events) => events.length >= count, what: `${count} owner events`, timeoutMs: 15_000, intervalMs: 50 });
}

describe('PUT, GET and DELETE /v1/owner/webhook', () => {
  it('issues the secret once, keeps it on later PUTs, shows no secret on GET, and deletes', async () => {
    const owner = await world.humanToken(`config-${++counter}@example.com`);
    const before = await world.api('GET', '/v1/owner/webhook', { token: owner });
    expect(before.body.configuration).toMatchObject({ configured: false, enabled: false, url: '', createdAt: null });
    const first = await putWebhook(owner, { url: `https://${HOOK_HOST.toUpperCase()}:443/owner/events` });
    expect(first.status).toBe(200);
    expect(first.body.webhookSecret).toMatch(/^whsec_/);
    expect(first.body.configuration).toMatchObject({ configured: true, enabled: true, url: HOOK_URL, disabledReason: null });
    expect(first.body.configuration.eventTypes).toEqual(expect.arrayContaining(['topup.settled', 'intent.completed']));
    const again = await putWebhook(owner, { url: HOOK_URL, enabled: false });
    expect(again.status).toBe(200);
    expect(again.body.webhookSecret).toBeUndefined();
    expect(again.body.configuration).toMatchObject({ enabled: false, disabledReason: 'owner' });
    const read = await world.api('GET', '/v1/owner/webhook', { token: owner });
    expect(read.body).toEqual({ configuration: again.body.configuration });
    expect(JSON.stringify(read.body)).not.toContain('whsec_');
    const deleted = await world.api('DELETE', '/v1/owner/webhook', { token: owner });
    expect(deleted.body).toMatchObject({ deleted: true, configuration: { configured: false } });
    expect((await world.api('DELETE', '/v1/owner/webhook', { token: owner })).body.deleted).toBe(false);
  });

  it('requires an Idempotency-Key on PUT and refuses agents', async () => {
    const agent = await newAgent('who');
    const noKey = await world.api('PUT', '/v1/owner/webhook', { token: agent.ownerToken, body: { url: HOOK_URL } });
    expect(noKey.status).toBe(400);
    expect(noKey.body.code).toBe('idempotency_required');
    const byAgent = await world.api('PUT', '/v1/owner/webhook', { token: agent.token, key: key('agent'), body: { url: HOOK_URL } });
    expect(byAgent.status).toBe(403);
  });

  it('refuses URLs that could reach a private or non-public target with 400 invalid_input (SSRF)', async () => {
    const owner = await world.humanToken(`ssrf-${++counter}@example.com`);
    for (const url of [
      `http://${HOOK_HOST}/owner/events`,
      'https://127.0.0.1/hook',
      'https://[::1]/hook',
      'https://2130706433/hook',
      'https://localhost/hook',
      'https://hooks.internal/hook',
      'https://intranet/hook',
      `https://${HOOK_HOST}:8443/hook`,
      `https://user:pass@${HOOK_HOST}/hook`,
      `https://${HOOK_HOST}/hook?token=1`,
    ]) {
      const res = await putWebhook(owner, { url });
      expect(res.status, url).toBe(400);
      expect(res.body.code, url).toBe('invalid_input');
      // Named as the schema names a member, in detail and errors.
      expect([res.body.detail.startsWith('body/url '), res.body.errors], url).toEqual([true, [{ path: 'body/url', message: expect.any(String) }]]);
    }
    expect((await world.api('GET', '/v1/owner/webhook', { token: owner })).body.configuration.configured).toBe(false);
  });
});

describe('events to the owner', () => {
  it('delivers signed topup.settled and intent.completed after the approval flow', async () => {
    const agent = await newAgent('events');
    const owner = await ownerId(world, agent.ownerToken);
    const configured = await putWebhook(agent.ownerToken);
    target.receiver.useSecret(configured.body.webhookSecret);
    const { intentId, topupId } = await retainedIntent(agent);
    const approved = await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.body.status).toBe('settled');

    const received = await receivedFor(owner, 2);
    for (const r of received) {
      expect(r.verified, r.verifyError).toBe(true);
      expect(r.headers['webhook-id']).toBe(r.event.id);
      expect(r.path).toBe('/owner/events');
    }
    const byType = Object.fromEntries(received.map((r) => [r.event.type, r.event]));
    expect(Object.keys(byType).sort()).toEqual(['intent.completed', 'topup.settled']);
    expect(byType['topup.settled']).toMatchObject({ ownerId: owner, data: { topup: { id: topupId, status: 'settled', intentId, lotId: approved.body.lotId } } });
    expect(byType['topup.settled'].merchantId).toBeUndefined();
    expect(byType['intent.completed']).toMatchObject({
      ownerId: owner,
      data: { intent: { id: intentId, state: 'executed', result: { fullName: 'octocat/Hello-World' }, receipt: { state: 'captured', capturedUc: '1000000' }, error: null } },
    });
    // The payload is the intent exactly as GET /v1/intents/{id} shows it.
    expect(byType['intent.completed'].data.intent).toEqual((await world.api('GET', `/v1/intents/${intentId}`, { token: agent.token })).body);
  });

  it('delivers topup.declined and intent.cancelled when the owner declines', async () => {
    const agent = await newAgent('declined');
    const owner = await ownerId(world, agent.ownerToken);
    target.receiver.useSecret((await putWebhook(agent.ownerToken)).body.webhookSecret);
    const { intentId, topupId } = await retainedIntent(agent);
    expect((await world.api('POST', `/v1/payments/topups/${topupId}/decline`, { token: agent.ownerToken, body: {} })).body.status).toBe('declined');
    const received = await receivedFor(owner, 2);
    expect(received.every((r) => r.verified)).toBe(true);
    const byType = Object.fromEntries(received.map((r) => [r.event.type, r.event]));
    expect(byType['topup.declined'].data.topup).toMatchObject({ id: topupId, status: 'declined', lotId: null });
    expect(byType['intent.cancelled'].data.intent).toMatchObject({ id: intentId, state: 'cancelled', cancellationReason: 'topup_declined', receipt: null });
  });

  it('delivers topup.expired and intent.cancelled when the approval lapses', async () => {
    const agent = await newAgent('lapsed');
    const owner = await ownerId(world, agent.ownerToken);
    target.receiver.useSecret((await putWebhook(agent.ownerToken)).body.webhookSecret);
    const { intentId, topupId } = await retainedIntent(agent);
    await world.gw.gateway.db.query('UPDATE topups SET expires_at_s = $2 WHERE id = $1', [topupId, Math.floor(Date.now() / 1000) - 1]);
    await world.gw.services.payments!.runJobs();
    const received = await receivedFor(owner, 2);
    expect(received.every((r) => r.verified)).toBe(true);
    const byType = Object.fromEntries(received.map((r) => [r.event.type, r.event]));
    expect(Object.keys(byType).sort()).toEqual(['intent.cancelled', 'topup.expired']);
    expect(byType['topup.expired'].data.topup).toMatchObject({ id: topupId, status: 'expired', lotId: null });
    expect(byType['intent.cancelled'].data.intent).toMatchObject({ id: intentId, state: 'cancelled', cancellationReason: 'topup_expired', receipt: null });
  });

  it('without a webhook the flow works, the events are recorded, and nothing is queued or sent', async () => {
    const agent = await newAgent('quiet');
    const owner = await ownerId(world, agent.ownerToken);
    const { intentId, topupId } = await retainedIntent(agent);
    expect((await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    await waitFor(async () => (await world.api('GET', `/v1/intents/${intentId}`, { token: agent.token })).body, {
      until: (body) => body.state === 'executed',
      what: 'the intent to run',
      timeoutMs: 15_000,
      intervalMs: 50,
    });
    const { rows: events } = await world.gw.gateway.db.query<{ type: string }>('SELECT type FROM events WHERE owner_id = $1 ORDER BY seq', [owner]);
    expect(events.map((e) => e.type)).toEqual(['topup.settled', 'intent.completed']);
    const { rows: deliveries } = await world.gw.gateway.db.query('SELECT id FROM webhook_deliveries WHERE owner_id = $1', [owner]);
    expect(deliveries).toEqual([]);
    await world.gw.services.webhookWorker.runOnce();
    expect(target.receiver.received.filter((r) => JSON.parse(r.body).ownerId === owner)).toEqual([]);
  });

  it('deleting the webhook drops what was still waiting to be sent', async () => {
    const agent = await newAgent('dropped');
    const owner = await ownerId(world, agent.ownerToken);
    await putWebhook(agent.ownerToken);
    // Recorded and queued while the webhook exists, deleted before any worker pass could send it.
    await world.gw.gateway.db.transaction(async (tx) => {
      await emitEvent(tx, { ownerId: owner, type: 'topup.expired', data: { topup: { id: 'top_dropped' } }, nowMs: world.gw.clock.nowMs() });
      await tx.query('UPDATE webhook_endpoints SET circuit_open_until_ms = $2 WHERE owner_id = $1', [owner, world.gw.clock.nowMs() + 60_000]);
    });
    expect((await world.api('DELETE', '/v1/owner/webhook', { token: agent.ownerToken })).body.deleted).toBe(true);
    const { rows } = await world.gw.gateway.db.query<{ state: string; last_error: string }>('SELECT state, last_error FROM webhook_deliveries WHERE owner_id = $1', [owner]);
    expect(rows).toEqual([{ state: 'dead', last_error: 'endpoint_deleted' }]);
  });

  // The attempt in flight when the webhook was deleted once wrote its outcome over the dead state (its claim was
  // still valid), so the delivery was retried and reached the next webhook, signed with its secret.
  it('deleting the webhook during an attempt: the delivery stays dead, and a later webhook never receives it', async () => {
    const agent = await newAgent('in-flight');
    const owner = await ownerId(world, agent.ownerToken);
    await putWebhook(agent.ownerToken);
    await world.gw.gateway.db.transaction((tx) => emitEvent(tx, { ownerId: owner, type: 'topup.expired', data: { topup: { id: 'top_in_flight' } }, nowMs: world.gw.clock.nowMs() }));
    const forOwner = () => target.receiver.received.filter((r) => JSON.parse(r.body).ownerId === owner);
    target.receiver.hang(true);
    try {
      const pass = world.gw.services.webhookWorker.runOnce();
      await waitFor(forOwner, { until: (got) => got.length === 1, what: 'the attempt to reach the hanging receiver', timeoutMs: 15_000, intervalMs: 20 });
      expect((await world.api('DELETE', '/v1/owner/webhook', { token: agent.ownerToken })).body.deleted).toBe(true);
      await pass; // the attempt times out
    } finally {
      target.receiver.hang(false);
    }
    const state = async () => (await world.gw.gateway.db.query('SELECT state, last_error FROM webhook_deliveries WHERE owner_id = $1', [owner])).rows;
    expect(await state()).toEqual([{ state: 'dead', last_error: 'endpoint_deleted' }]);
    await putWebhook(agent.ownerToken);
    await world.gw.services.webhookWorker.runOnce();
    expect(forOwner()).toHaveLength(1);
    expect(await state()).toEqual([{ state: 'dead', last_error: 'endpoint_deleted' }]);
    // The old receiver's timeout is not the new endpoint's failure.
    const { rows } = await world.gw.gateway.db.query<{ failures: number }>('SELECT consecutive_failures AS failures FROM webhook_endpoints WHERE owner_id = $1', [owner]);
    expect(rows).toEqual([{ failures: 0 }]);
  }, 30_000);
});

// Found from outside (bb42): the owner events' documentation said a dead delivery "can be re-sent", and only
// merchants had a re-send; an owner whose receiver was down past the retry schedule lost those events.
describe('re-sending to the owner webhook', () => {
  const emitFor = (owner: string, id: string) =>
    world.gw.gateway.db.transaction((tx) => emitEvent(tx, { ownerId: owner, type: 'topup.expired', data: { topup: { id } }, nowMs: world.gw.clock.nowMs() }));
  const deliveryOf = async (owner: string, eventId: string) =>
    (await world.gw.gateway.db.query<{ id: string; state: string; attempts: number }>('SELECT id, state, attempts FROM webhook_deliveries WHERE owner_id = $1 AND event_id = $2', [owner, eventId]))
      .rows;

  it('sends a dead delivery again with its webhook-id, and an event of a time without a webhook for the first time', async () => {
    const agent = await newAgent('resend');
    const owner = await ownerId(world, agent.ownerToken);
    // An event from before the webhook existed: recorded, never queued.
    const before = await emitFor(owner, 'top_before_webhook');
    target.receiver.useSecret((await putWebhook(agent.ownerToken)).body.webhookSecret);
    const dead = await emitFor(owner, 'top_dead');
    // Its attempts all failed (the schedule's 27 hours, written as their outcome).
    await world.gw.gateway.db.query(`UPDATE webhook_deliveries SET state = 'dead', attempts = 8, last_error = 'status_not_2xx' WHERE owner_id = $1`, [owner]);
    await world.gw.services.webhookWorker.runOnce();
    expect(target.receiver.received.filter((r) => JSON.parse(r.body).ownerId === owner)).toEqual([]);

    const deliveryId = (await deliveryOf(owner, dead.id))[0]!.id;
    const resent = await world.api('POST', `/v1/owner/webhook/deliveries/${deliveryId}/resend`, { token: agent.ownerToken });
    expect(resent.status).toBe(202);
    expect(resent.body.delivery).toMatchObject({ id: deliveryId, eventId: dead.id, eventType: 'topup.expired', state: 'pending', attempts: 8 });
    const first = await receivedFor(owner, 1);
    expect(first.map((r) => [r.headers['webhook-id'], r.verified])).toEqual([[dead.id, true]]);
    expect(await deliveryOf(owner, dead.id)).toEqual([{ id: deliveryId, state: 'succeeded', attempts: 9 }]);

    expect(await deliveryOf(owner, before.id)).toEqual([]);
    const resendKey = key('resend-event');
    const sent = await world.api('POST', `/v1/owner/events/${before.id}/resend`, { token: agent.ownerToken, key: resendKey });
    expect(sent.status).toBe(202);
    expect(sent.body.delivery).toMatchObject({ eventId: before.id, state: 'pending', attempts: 0 });
    const both = await receivedFor(owner, 2);
    expect(both.map((r) => [r.headers['webhook-id'], r.verified])).toEqual([
      [dead.id, true],
      [before.id, true],
    ]);
    // The same key again: the first answer, and no third delivery.
    const replay = await world.api('POST', `/v1/owner/events/${before.id}/resend`, { token: agent.ownerToken, key: resendKey });
    expect([replay.status, replay.body]).toEqual([202, sent.body]);
    await world.gw.services.webhookWorker.runOnce();
    expect(target.receiver.received.filter((r) => JSON.parse(r.body).ownerId === owner)).toHaveLength(2);
  });

  it("refuses another owner's delivery and event (404), a re-send without a webhook (409), and agents (403)", async () => {
    const agent = await newAgent('resend-owner');
    const owner = await ownerId(world, agent.ownerToken);
    await putWebhook(agent.ownerToken);
    const event = await emitFor(owner, 'top_other_owner');
    const deliveryId = (await deliveryOf(owner, event.id))[0]!.id;
    const stranger = await world.humanToken(`resend-stranger-${++counter}@example.com`);
    const deliveryPath = `/v1/owner/webhook/deliveries/${deliveryId}/resend`;
    const eventPath = `/v1/owner/events/${event.id}/resend`;
    for (const path of [deliveryPath, eventPath]) {
      const res = await world.api('POST', path, { token: stranger });
      expect(res.status, path).toBe(404);
      expect(res.body.code).toBe('not_found');
      expect((await world.api('POST', path, { token: agent.token })).status, path).toBe(403);
    }
    expect((await world.api('DELETE', '/v1/owner/webhook', { token: agent.ownerToken })).body.deleted).toBe(true);
    for (const path of [deliveryPath, eventPath]) {
      const res = await world.api('POST', path, { token: agent.ownerToken });
      expect(res.status, path).toBe(409);
      expect(res.body.detail).toContain('not configured');
    }
    // Paused: disabled, not gone.
    await putWebhook(agent.ownerToken, { url: HOOK_URL, enabled: false });
    const paused = await world.api('POST', eventPath, { token: agent.ownerToken });
    expect(paused.status).toBe(409);
    expect(paused.body.detail).toContain('disabled');
  });
});

describe('purchase events to the owner', () => {
  /** An agent whose mandate asks its owner above 1 credit, with a webhook, and an offer above that. */
  async function asking(label: string) {
    const agent = await newAgent(label);
    const owner = await ownerId(world, agent.ownerToken);
    target.receiver.useSecret((await putWebhook(agent.ownerToken)).body.webhookSecret);
    await grant(world, agent.id, 20_000_000n);
    await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: key('mandate'), body: { approvalAboveUc: '1000000' } });
    const offer = await (await openShop(world)).offer({ priceUc: '2000000' });
    return { agent, owner, offer };
  }
  const purchaseId = (res: { body: { approvalUrl: string } }) => new URL(res.body.approvalUrl).pathname.split('/').pop()!;

  it('delivers signed purchase.approval_requested when the approval is opened and purchase.approved when the owner approves', async () => {
    const { agent, owner, offer } = await asking('purchase-approved');
    const k = key('mint');
    const asked = await mint(world, agent.token, offer.id, k);
    expect(asked.status).toBe(402);
    const id = purchaseId(asked);
    await world.api('POST', `/v1/payments/purchases/${id}/approve`, { token: agent.ownerToken, body: {} });
    const received = await receivedFor(owner, 2);
    for (const r of received) expect(r.verified, r.verifyError).toBe(true);
    const byType = Object.fromEntries(received.map((r) => [r.event.type, r.event]));
    expect(Object.keys(byType).sort()).toEqual(['purchase.approval_requested', 'purchase.approved']);
    expect(byType['purchase.approval_requested']).toMatchObject({ ownerId: owner, data: { purchase: { id, status: 'pending_approval', amountUc: '2000000', offer: { id: offer.id } } } });
    expect(byType['purchase.approved'].data.purchase).toMatchObject({ id, status: 'approved' });
    // Using the approval sends nothing more to the owner (the merchant hears redemption.held).
    expect((await mint(world, agent.token, offer.id, k)).status).toBe(200);
    const { rows } = await world.gw.gateway.db.query<{ type: string }>('SELECT type FROM events WHERE owner_id = $1 ORDER BY seq', [owner]);
    expect(rows.map((e) => e.type)).toEqual(['purchase.approval_requested', 'purchase.approved']);
  });

  it('delivers purchase.declined with reason declined when the owner declines, and with reason expired when nobody answered', async () => {
    const { agent, owner, offer } = await asking('purchase-declined');
    const declined = purchaseId(await mint(world, agent.token, offer.id, key('mint')));
    const lapsed = purchaseId(await mint(world, agent.token, offer.id, key('mint')));
    await world.api('POST', `/v1/payments/purchases/${declined}/decline`, { token: agent.ownerToken, body: {} });
    // Its deadline moved into the past (moving the clock would date the delivery ahead of the receiver's clock).
    await world.gw.gateway.db.query('UPDATE purchase_approvals SET expires_at_s = $2 WHERE id = $1', [lapsed, world.gw.clock.nowS() - 1]);
    await world.gw.services.payments.expirePurchases();
    const received = await receivedFor(owner, 4);
    expect(received.every((r) => r.verified)).toBe(true);
    const closed = received.filter((r) => r.event.type === 'purchase.declined').map((r) => r.event.data);
    expect(closed).toHaveLength(2);
    expect(closed.find((d) => d.purchase.id === declined)).toMatchObject({ reason: 'declined', purchase: { status: 'declined' } });
    expect(closed.find((d) => d.purchase.id === lapsed)).toMatchObject({ reason: 'expired', purchase: { status: 'expired' } });
  });
});

describe('delivery re-checks the address', () => {
  it('an owner webhook whose name resolves to a private address is never sent to (forbidden_address)', async () => {
    const guarded = await startHookTarget({ resolvesTo: ['10.0.0.7'] });
    const strict = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: guarded.caFile }, outbound: guarded.outbound });
    try {
      const human = await strict.humanToken('strict-owner@example.com');
      const owner = await ownerId(strict, human);
      const res = await strict.api('PUT', '/v1/owner/webhook', { token: human, key: key('strict'), body: { url: HOOK_URL } });
      expect(res.status).toBe(200);
      await strict.gw.gateway.db.transaction((tx) =>
        emitEvent(tx, { ownerId: owner, type: 'topup.expired', data: { topup: { id: 'top_private' } }, nowMs: strict.gw.clock.nowMs() }),
      );
      const report = await strict.gw.services.webhookWorker.runOnce();
      expect(report.claimed).toBe(1);
      const { rows } = await strict.gw.gateway.db.query<{ last_error: string }>('SELECT last_error FROM webhook_deliveries WHERE owner_id = $1', [owner]);
      expect(rows).toEqual([{ last_error: 'forbidden_address' }]);
      expect(guarded.receiver.received).toEqual([]);
    } finally {
      await strict.close();
      await guarded.close();
    }
  });
});

// Found from outside (bb63): an owner could replace its secret only at once (PUT rotateSecret), so a receiver not yet
// switched failed every delivery, retries of earlier events included; merchants had an overlap.
describe('POST /v1/owner/webhook/rotate-secret', () => {
  const emitFor = (owner: string, id: string) =>
    world.gw.gateway.db.transaction((tx) => emitEvent(tx, { ownerId: owner, type: 'topup.expired', data: { topup: { id } }, nowMs: world.gw.clock.nowMs() }));

  it('signs with both secrets during the overlap, so a receiver knowing either verifies; replays omit the secret', async () => {
    const agent = await newAgent('rotate');
    const owner = await ownerId(world, agent.ownerToken);
    const oldSecret = (await putWebhook(agent.ownerToken)).body.webhookSecret as string;
    const rotateKey = key('rotate');
    const rotate = () => world.api('POST', '/v1/owner/webhook/rotate-secret', { token: agent.ownerToken, key: rotateKey, body: { overlapSeconds: 3600 } });
    // The gateway reads its clock during the call, which may cross a second boundary: bracket it.
    const beforeS = world.gw.clock.nowS();
    const rotated = await rotate();
    const afterS = world.gw.clock.nowS();
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    const newSecret = rotated.body.webhookSecret as string;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(oldSecret);
    expect(rotated.body.configuration.previousSecretExpiresAt).toBeGreaterThanOrEqual(beforeS + 3600);
    expect(rotated.body.configuration.previousSecretExpiresAt).toBeLessThanOrEqual(afterS + 3600);
    const replay = await rotate();
    expect(replay.body).not.toHaveProperty('webhookSecret');
    expect(replay.body.notice).toMatch(/shown once/);
    expect((await world.api('GET', '/v1/owner/webhook', { token: agent.ownerToken })).body.configuration.previousSecretExpiresAt).toBe(
      rotated.body.configuration.previousSecretExpiresAt,
    );

    // A receiver still on the old secret verifies the next delivery, and so does one already on the new.
    target.receiver.useSecret(oldSecret);
    await emitFor(owner, 'top_during_overlap');
    const [during] = await receivedFor(owner, 1);
    expect(during!.headers['webhook-signature']).toMatch(/^v1,\S+ v1,\S+$/);
    expect(during!.verified, during!.verifyError).toBe(true);
    target.receiver.useSecret(newSecret);
    await emitFor(owner, 'top_during_overlap_2');
    expect((await receivedFor(owner, 2))[1]!.verified).toBe(true);

    // After the overlap the new secret signs alone: the claim that reads the old one is the merchants' (its test moves
    // the clock past an overlap; this file's world shares its clock with the token issuers', so it is not moved here).
  });

  it('is 404 without a webhook, and refused to agents', async () => {
    const agent = await newAgent('rotate-refused');
    const missing = await world.api('POST', '/v1/owner/webhook/rotate-secret', { token: agent.ownerToken, key: key('rotate-none'), body: {} });
    expect([missing.status, missing.body.code]).toEqual([404, 'not_found']);
    expect((await world.api('POST', '/v1/owner/webhook/rotate-secret', { token: agent.token, key: key('rotate-agent'), body: {} })).status).toBe(403);
  });
});
