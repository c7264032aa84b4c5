// The reads the console needed that the API lacked: an owner's spending per agent and UTC day
// (GET /v1/owner/spending), and the owner webhook's events, deliveries and attempts (GET /v1/owner/events,
// /v1/owner/webhook/deliveries[/{id}/attempts]). Each counts only the caller's own, and each failure has its answer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { HOOK_HOST, startHookTarget, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let target: HookTarget;
let shop: Shop;
let counter = 0;
const key = (label: string) => `owner-reads-${label}-${++counter}`;

beforeAll(async () => {
  target = await startHookTarget();
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
  shop = await openShop(world);
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

async function fundedAgent(ownerEmail: string, subject: string) {
  const agent = await world.createAgent(ownerEmail, subject);
  await grant(world, agent.id, 100_000_000n);
  return agent;
}

const today = (offsetDays = 0) => new Date((Math.floor(world.gw.clock.nowS() / 86_400) + offsetDays) * 86_400_000).toISOString().slice(0, 10);

describe('GET /v1/owner/spending', () => {
  it("counts, per agent and UTC day of the hold, what budgets count: held, and captured less refunded; not released, expired or another owner's", async () => {
    const owner = `spender-${++counter}@example.com`;
    const scoutName = `scout-${counter}`;
    const scout = await fundedAgent(owner, scoutName);
    const quiet = await fundedAgent(owner, `quiet-${counter}`);
    const stranger = await fundedAgent(`stranger-${counter}@example.com`, `stranger-${counter}`);
    const five = await shop.offer({ priceUc: '5000000' });
    const two = await shop.offer({ priceUc: '2000000' });
    const short = await shop.offer({ priceUc: '7000000', holdLifetimeS: 60 });

    const held = await mint(world, scout.token, two.id);
    const captured = await mint(world, scout.token, five.id);
    const released = await mint(world, scout.token, five.id);
    await mint(world, stranger.token, five.id);
    expect([held.status, captured.status, released.status]).toEqual([200, 200, 200]);
    const capturedId = captured.body.redemption.id;
    expect((await world.api('POST', `/v1/redemptions/${capturedId}/capture`, { token: shop.key, key: key('capture'), body: { amountUc: '4000000' } })).status).toBe(200);
    expect((await world.api('POST', `/v1/redemptions/${capturedId}/refunds`, { token: shop.key, key: key('refund'), body: { amountUc: '1000000' } })).status).toBe(201);
    expect((await world.api('POST', `/v1/redemptions/${released.body.redemption.id}/release`, { token: shop.key, key: key('release'), body: {} })).status).toBe(200);

    // Those were made yesterday (moved back a day: the identity tokens cannot follow a moved clock).
    const scoutHolds = [held, captured, released].map((answer) => answer.body.redemption.id as string);
    await world.gw.gateway.db.query('UPDATE holds SET created_at_s = created_at_s - 86400 WHERE id = ANY($1::text[])', [scoutHolds]);
    // Today: one hold that passes its deadline (reclaimed or not), one that stays held.
    const lapsing = await mint(world, quiet.token, short.id);
    const kept = await mint(world, quiet.token, two.id);
    expect([lapsing.status, kept.status]).toEqual([200, 200]);
    world.gw.clock.advance(61_000);

    const res = await world.api('GET', '/v1/owner/spending', { token: scout.ownerToken });
    expect(res.status).toBe(200);
    expect(res.body.timeZone).toBe('UTC');
    expect(res.body.days).toHaveLength(30);
    expect(res.body.days.at(-1)).toBe(today());
    const series = Object.fromEntries(res.body.agents.map((agent: { agentId: string }) => [agent.agentId, agent]));
    expect(Object.keys(series).sort()).toEqual([scout.id, quiet.id].sort());
    // held 2 + (captured 4 − refunded 1) + released 0, yesterday
    expect(series[scout.id]).toMatchObject({ name: scoutName, totalUc: '5000000' });
    expect(series[scout.id].spentUc.at(-2)).toBe('5000000');
    expect(series[scout.id].spentUc.at(-1)).toBe('0');
    // today: the kept hold only; the lapsed one counts nothing, reclaimed or not
    expect(series[quiet.id]).toMatchObject({ totalUc: '2000000' });
    expect(series[quiet.id].spentUc.at(-1)).toBe('2000000');
    expect(res.body.agents[0].agentId).toBe(scout.id);

    const lastDay = await world.api('GET', '/v1/owner/spending?days=1', { token: scout.ownerToken });
    expect(lastDay.body.days).toEqual([today()]);
    expect(lastDay.body.agents.map((agent: { agentId: string }) => agent.agentId)).toEqual([quiet.id]);
  });

  it('answers an owner without agents or spending with the days and no agent', async () => {
    const res = await world.api('GET', '/v1/owner/spending?days=7', { token: await world.humanToken(`idle-${++counter}@example.com`) });
    expect(res.status).toBe(200);
    expect(res.body.agents).toEqual([]);
    expect(res.body.days).toHaveLength(7);
  });

  it('refuses a period outside 1 to 90 days (400), no credential (401), and an agent or a merchant key (403)', async () => {
    const owner = await world.humanToken(`refused-${++counter}@example.com`);
    for (const days of ['0', '91', 'many']) {
      const res = await world.api('GET', `/v1/owner/spending?days=${days}`, { token: owner });
      expect(res.status, days).toBe(400);
      expect(res.body.code).toBe('invalid_input');
    }
    expect((await world.api('GET', '/v1/owner/spending')).status).toBe(401);
    const agent = await world.createAgent(`refused-agent-${counter}@example.com`, `refused-${counter}`);
    expect((await world.api('GET', '/v1/owner/spending', { token: agent.token })).status).toBe(403);
    expect((await world.api('GET', '/v1/owner/spending', { token: shop.key })).status).toBe(403);
  });
});

describe("the owner webhook's events and deliveries", () => {
  async function ownerWithEvents() {
    const email = `events-${++counter}@example.com`;
    const token = await world.humanToken(email);
    const ownerId = (await world.api('GET', '/v1/me', { token })).body.owner.id as string;
    expect((await world.api('PUT', '/v1/owner/webhook', { token, key: key('hook'), body: { url: `https://${HOOK_HOST}/owner/events` } })).status).toBe(200);
    const nowMs = world.gw.clock.nowMs();
    await world.gw.gateway.db.transaction(async (tx) => {
      await emitEvent(tx, { ownerId, type: 'topup.declined', data: { topup: { id: 'top_a' } }, nowMs });
      await emitEvent(tx, { ownerId, type: 'topup.settled', data: { topup: { id: 'top_b' } }, nowMs });
    });
    return { token, ownerId };
  }

  it('lists the owner’s events newest first, filtered by type, paged; and only its own', async () => {
    const mine = await ownerWithEvents();
    const theirs = await ownerWithEvents();
    const all = await world.api('GET', '/v1/owner/events', { token: mine.token });
    expect(all.status).toBe(200);
    expect(all.body.events.map((event: { type: string }) => event.type)).toEqual(['topup.settled', 'topup.declined']);
    expect(all.body.events[0].payload).toMatchObject({ ownerId: mine.ownerId, type: 'topup.settled' });
    const declined = await world.api('GET', '/v1/owner/events?type=topup.declined', { token: mine.token });
    expect(declined.body.events.map((event: { type: string }) => event.type)).toEqual(['topup.declined']);
    const first = await world.api('GET', '/v1/owner/events?limit=1', { token: mine.token });
    expect(first.body).toMatchObject({ hasMore: true, events: [{ type: 'topup.settled' }] });
    const next = await world.api('GET', `/v1/owner/events?limit=1&startingAfter=${first.body.events[0].id}`, { token: mine.token });
    expect(next.body).toMatchObject({ hasMore: false, events: [{ type: 'topup.declined' }] });
    const ids = new Set(all.body.events.map((event: { id: string }) => event.id));
    const others = await world.api('GET', '/v1/owner/events', { token: theirs.token });
    expect(others.body.events.some((event: { id: string }) => ids.has(event.id))).toBe(false);
  });

  it('lists the deliveries and each one’s attempts; another owner’s delivery is 404', async () => {
    const mine = await ownerWithEvents();
    const theirs = await ownerWithEvents();
    // A new receiver is tried one attempt at a time until it answers 2xx: two passes for the two events.
    await world.gw.services.webhookWorker.runOnce();
    await world.gw.services.webhookWorker.runOnce();
    const deliveries = await world.api('GET', '/v1/owner/webhook/deliveries', { token: mine.token });
    expect(deliveries.status).toBe(200);
    expect(deliveries.body.deliveries.map((delivery: { eventType: string }) => delivery.eventType)).toEqual(['topup.settled', 'topup.declined']);
    const deliveryId = deliveries.body.deliveries[0].id as string;
    const attempts = await world.api('GET', `/v1/owner/webhook/deliveries/${deliveryId}/attempts`, { token: mine.token });
    expect(attempts.status).toBe(200);
    expect(attempts.body.delivery.id).toBe(deliveryId);
    expect(attempts.body.attempts.length).toBeGreaterThanOrEqual(1);
    expect(attempts.body.attempts[0]).toMatchObject({ attempt: 1, outcome: 'succeeded', status: 200 });
    const foreign = await world.api('GET', `/v1/owner/webhook/deliveries/${deliveryId}/attempts`, { token: theirs.token });
    expect(foreign.status).toBe(404);
    expect(foreign.body.code).toBe('not_found');
    expect((await world.api('GET', '/v1/owner/webhook/deliveries/whd_missing/attempts', { token: mine.token })).status).toBe(404);
  });

  it('refuses an unknown event type (400), no credential (401) and an agent (403)', async () => {
    const owner = await world.humanToken(`events-refused-${++counter}@example.com`);
    const unknown = await world.api('GET', '/v1/owner/events?type=redemption.captured', { token: owner });
    expect(unknown.status).toBe(400);
    expect(unknown.body.detail).toContain('unknown event type "redemption.captured"');
    for (const path of ['/v1/owner/events', '/v1/owner/webhook/deliveries', '/v1/owner/webhook/deliveries/whd_x/attempts']) {
      expect((await world.api('GET', path)).status, path).toBe(401);
      const agent = await world.createAgent(`events-agent-${++counter}@example.com`, `events-agent-${counter}`);
      expect((await world.api('GET', path, { token: agent.token })).status, path).toBe(403);
    }
  });
});
