// Budget alerts: the owner event `budget.threshold` fires once per budget, threshold and period as the budget's
// running total crosses each of the mandate's `alertThresholds` (80% and 100% unless it says otherwise): not
// again when the total falls back under a threshold and crosses it again in the same period, again in the next
// period. Delivered to the owner's webhook and checked there with the standardwebhooks library.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { HOOK_HOST, startHookTarget, type HookTarget } from '../support/merchants.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';

/** Credentials outlive the clock moves of this file (the gateway checks token lifetimes against its own clock). */
const TOKEN_LIFETIME_S = 30 * 86_400;
const CREDIT_UC = 1_000_000n;

let world: World;
let target: HookTarget;
let shop: Shop;
let counter = 0;

beforeAll(async () => {
  // The receiver judges webhook timestamps by the gateway's clock, which this file moves.
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
  shop = await openShop(world);
  world.gw.clock.freeze();
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

/** An agent of a new owner whose webhook is set, with credit, under `mandate`. */
async function watchedAgent(mandate: Record<string, unknown>) {
  const email = `alerts-${++counter}@example.com`;
  const subject = `alerts-agent-${counter}`;
  const ownerToken = await world.human.mint({ sub: `human-${email}`, email, email_verified: true }, { expiresInS: TOKEN_LIFETIME_S });
  const registered = await world.api('POST', '/v1/owner/agents', { token: ownerToken, key: `alerts-agent-${counter}`, body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject } } });
  expect(registered.status).toBe(201);
  const hook = await world.api('PUT', '/v1/owner/webhook', { token: ownerToken, key: `alerts-hook-${counter}`, body: { url: `https://${HOOK_HOST}/owner/events` } });
  expect(hook.status).toBe(200);
  expect(hook.body.configuration.eventTypes).toContain('budget.threshold');
  target.receiver.useSecret(hook.body.webhookSecret);
  const agent = {
    id: registered.body.id as string,
    ownerId: registered.body.ownerId as string,
    ownerToken,
    token: await world.agentIssuer.mint({ sub: subject, owner_email: email }, { expiresInS: TOKEN_LIFETIME_S }),
  };
  await grant(world, agent.id, 100n * CREDIT_UC);
  expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: ownerToken, key: `alerts-mandate-${counter}`, body: mandate })).status).toBe(200);
  return agent;
}

/** Every `budget.threshold` the owner's webhook received so far, once `count` arrived (each verified), as `budget@pct`. */
async function alertsReceived(ownerId: string, count: number): Promise<string[]> {
  const received = await waitFor(
    async () => {
      await world.gw.services.webhookWorker.runOnce();
      return target.receiver.received.map((r) => ({ ...r, event: JSON.parse(r.body) })).filter((r) => r.event.ownerId === ownerId);
    },
    { until: (events) => events.length >= count, what: `${count} budget alerts`, timeoutMs: 15_000, intervalMs: 50 },
  );
  for (const r of received) {
    expect(r.verified, r.verifyError).toBe(true);
    expect(r.headers['webhook-id']).toBe(r.event.id);
    expect(r.event.type).toBe('budget.threshold');
  }
  return received.map((r) => `${r.event.data.budget.id}@${r.event.data.thresholdPct}`);
}

/** What the gateway recorded for the owner (delivered or not): no event is missing from, or added to, what was received. */
async function alertsRecorded(ownerId: string): Promise<string[]> {
  const { rows } = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE owner_id = $1 AND type = 'budget.threshold' ORDER BY seq`, [ownerId]);
  return rows.map((row) => JSON.parse(row.payload).data).map((data) => `${data.budget.id}@${data.thresholdPct}`);
}

async function mintMany(token: string, offerId: string, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const minted = await mint(world, token, offerId);
    expect(minted.status).toBe(200);
    ids.push(minted.body.redemption.id);
  }
  return ids;
}

const release = (holdId: string) => world.api('POST', `/v1/redemptions/${holdId}/release`, { token: shop.key, key: `alerts-release-${++counter}`, body: {} });

describe('budget.threshold', () => {
  it('re-arms when the owner changes a limit or the thresholds: the thresholds the spend already reaches under the new rules are not announced, the ones above are (found from outside: a raised limit was silent)', async () => {
    const budget = (limitCredits: bigint) => ({ budgets: [{ id: 'daily', limitUc: (limitCredits * CREDIT_UC).toString(), period: 'day' }] });
    const agent = await watchedAgent(budget(10n));
    const offer = await shop.offer({ priceUc: CREDIT_UC.toString(), holdLifetimeS: 7 * 86_400 });
    await mintMany(agent.token, offer.id, 10);
    expect(await alertsReceived(agent.ownerId, 2)).toEqual(['daily@80', 'daily@100']);
    const put = (body: Record<string, unknown>) => world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `alerts-rearm-${++counter}`, body });
    // Raised to 20: 10 spent is 50%, so 80% (16) and 100% (20) are ahead again.
    expect((await put(budget(20n))).status).toBe(200);
    await mintMany(agent.token, offer.id, 6);
    expect(await alertsReceived(agent.ownerId, 3)).toEqual(['daily@80', 'daily@100', 'daily@80']);
    await mintMany(agent.token, offer.id, 4);
    expect(await alertsReceived(agent.ownerId, 4)).toEqual(['daily@80', 'daily@100', 'daily@80', 'daily@100']);
    // Raised to 40 with a 50% threshold, which the 20 spent reach already: the owner's own change announces nothing; 80% (32) does.
    expect((await put({ ...budget(40n), alertThresholds: [50, 80] })).status).toBe(200);
    await mintMany(agent.token, offer.id, 11);
    expect(await alertsRecorded(agent.ownerId)).toEqual(['daily@80', 'daily@100', 'daily@80', 'daily@100']);
    await mintMany(agent.token, offer.id, 1);
    expect(await alertsReceived(agent.ownerId, 5)).toEqual(['daily@80', 'daily@100', 'daily@80', 'daily@100', 'daily@80']);
    expect(await alertsRecorded(agent.ownerId)).toEqual(['daily@80', 'daily@100', 'daily@80', 'daily@100', 'daily@80']);
  });

  it('re-arms under the largest limit a mandate takes, with spending in the period (found from outside: a limit above 92 billion credits overflowed the re-arm and answered 500)', async () => {
    const agent = await watchedAgent({ budgets: [{ id: 'daily', limitUc: (10n * CREDIT_UC).toString(), period: 'day' }] });
    const offer = await shop.offer({ priceUc: CREDIT_UC.toString(), holdLifetimeS: 7 * 86_400 });
    await mintMany(agent.token, offer.id, 3);
    const largest = '999999999999999999';
    const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `alerts-largest-${++counter}`, body: { budgets: [{ id: 'daily', limitUc: largest, period: 'day' }], alertThresholds: [1, 50, 100] } });
    expect(put.status).toBe(200);
    expect(put.body.usage).toEqual([expect.objectContaining({ budgetId: 'daily', limitUc: largest, spentUc: (3n * CREDIT_UC).toString() })]);
    expect((await mint(world, agent.token, offer.id, `alerts-largest-mint-${counter}`)).status).toBe(200);
  });

  it('fires at 80% and at 100%, each once in a period (not again after a release and a second crossing), and again in the next period', async () => {
    const agent = await watchedAgent({ budgets: [{ id: 'daily', limitUc: (10n * CREDIT_UC).toString(), period: 'day' }], timeZone: 'America/New_York' });
    const offer = await shop.offer({ priceUc: CREDIT_UC.toString(), holdLifetimeS: 7 * 86_400 });
    // An hour into the next day: the whole story below happens in that one period.
    const usage = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken })).body.usage[0];
    world.gw.clock.advance(((await usage()).resetsAt + 3600 - world.gw.clock.nowS()) * 1000);
    const day: { periodStart: number; resetsAt: number } = await usage();

    const holds = await mintMany(agent.token, offer.id, 7);
    expect(await alertsRecorded(agent.ownerId)).toEqual([]);
    holds.push(...(await mintMany(agent.token, offer.id, 1)));
    expect(await alertsReceived(agent.ownerId, 1)).toEqual(['daily@80']);

    // Back under 80%, then across it again: not announced twice in one period.
    for (const id of holds.splice(0, 2)) expect((await release(id)).status).toBe(200);
    holds.push(...(await mintMany(agent.token, offer.id, 3)));
    expect(await alertsRecorded(agent.ownerId)).toEqual(['daily@80']);
    holds.push(...(await mintMany(agent.token, offer.id, 1)));
    const both = await alertsReceived(agent.ownerId, 2);
    expect(both).toEqual(['daily@80', 'daily@100']);
    const full = target.receiver.received.map((r) => JSON.parse(r.body)).filter((e) => e.ownerId === agent.ownerId)[1];
    expect(full.data).toEqual({
      agentId: agent.id,
      thresholdPct: 100,
      budget: { id: 'daily', limitUc: '10000000', period: 'day', spentUc: '10000000', remainingUc: '0', periodStart: day.periodStart, resetsAt: day.resetsAt },
    });
    for (const id of holds.splice(0, 3)) expect((await release(id)).status).toBe(200);
    holds.push(...(await mintMany(agent.token, offer.id, 3)));
    expect(await alertsRecorded(agent.ownerId)).toEqual(['daily@80', 'daily@100']);

    // The next day: a new period, announced again.
    world.gw.clock.advance((day.resetsAt + 60 - world.gw.clock.nowS()) * 1000);
    await mintMany(agent.token, offer.id, 8);
    expect(await alertsReceived(agent.ownerId, 3)).toEqual(['daily@80', 'daily@100', 'daily@80']);
    const { rows } = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE owner_id = $1 ORDER BY seq`, [agent.ownerId]);
    expect(JSON.parse(rows[2]!.payload).data.budget).toMatchObject({ periodStart: day.resetsAt, spentUc: '8000000' });
  });

  it('fires at the thresholds the mandate configures, each budget on its own, and every threshold one hold crosses', async () => {
    const agent = await watchedAgent({
      budgets: [
        { id: 'books', limitUc: (10n * CREDIT_UC).toString(), period: 'week', category: 'books' },
        { id: 'all', limitUc: (20n * CREDIT_UC).toString(), period: 'total' },
      ],
      alertThresholds: [90, 50],
    });
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken })).body.alertThresholds).toEqual([50, 90]);
    const [one, six, four] = [await shop.offer({ priceUc: '1000000' }), await shop.offer({ priceUc: '6000000' }), await shop.offer({ priceUc: '4000000' })];
    const music = await shop.offer({ priceUc: '9000000', category: 'music' });
    await mintMany(agent.token, one.id, 4);
    expect(await alertsRecorded(agent.ownerId)).toEqual([]);
    // 4 → 10 of books' 10: one hold crosses 50% and 90% (no 80% or 100%: not configured); all: 4 → 10 of 20 is 50%.
    await mintMany(agent.token, six.id, 1);
    expect(await alertsReceived(agent.ownerId, 3)).toEqual(['books@50', 'books@90', 'all@50']);
    // Music counts only in `all`: 10 → 19 of 20 crosses 90%.
    await mintMany(agent.token, music.id, 1);
    expect(await alertsReceived(agent.ownerId, 4)).toEqual(['books@50', 'books@90', 'all@50', 'all@90']);
    // Over budget: refused, and no alert.
    expect((await mint(world, agent.token, four.id)).body).toMatchObject({ code: 'CAP_EXCEEDED', budget: { id: 'books' } });
    expect(await alertsRecorded(agent.ownerId)).toHaveLength(4);
  });
});
