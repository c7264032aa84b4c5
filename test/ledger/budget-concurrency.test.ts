// Budgets under concurrency, on real PostgreSQL with two gateway instances sharing one database (PGlite runs
// one session at a time, so it cannot race): a daily budget admits exactly what it allows however many mints
// race for it, across every merchant or for one merchant only, and its running total equals its holds after.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../support/database.ts';
import type { TestGateway } from '../support/gateway.ts';
import { grant, openShop, type Shop } from '../support/ledger-fixture.ts';
import { budgetPeriodTotals, expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

const CREDIT_UC = 1_000_000n;

let world: World;
let second: TestGateway;
let shops: [Shop, Shop];

describe.runIf(onPostgres())('budgets under concurrency (PostgreSQL, two instances)', () => {
  beforeAll(async () => {
    world = await startWorld();
    shops = [await openShop(world), await openShop(world)];
    second = await world.anotherInstance();
  });
  afterAll(async () => {
    await second?.close();
    await world?.close();
  });

  /** An agent with credit for 100 mints of 1 credit, under a daily budget of 20 credits (`scope`: one merchant's, or every merchant's). */
  async function budgetedAgent(subject: string, scope: { merchantId?: string }) {
    const agent = await world.createAgent('budget-race@example.com', subject);
    await grant(world, agent.id, 100n * CREDIT_UC);
    const mandate = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: agent.ownerToken,
      key: `${subject}-mandate`,
      body: { budgets: [{ id: 'daily', limitUc: (20n * CREDIT_UC).toString(), period: 'day', ...scope }] },
    });
    expect(mandate.status).toBe(200);
    return agent;
  }

  /** Every mint at once, alternating between the two instances. */
  async function race(token: string, offerIds: readonly string[], prefix: string) {
    const urls = [world.url, second.url];
    return Promise.all(
      offerIds.map((offerId, i) =>
        fetch(`${urls[i % urls.length]}/v1/vouchers`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': `${prefix}-${i}` },
          body: JSON.stringify({ offerId }),
        }).then(async (res) => ({ offerId, status: res.status, body: (await res.json()) as Record<string, any> })),
      ),
    );
  }

  /** The budget's running total in its current period, its usage as the owner reads it, and its holds' sum agree. */
  async function budgetAgrees(agent: { id: string; ownerToken: string }, heldUc: bigint) {
    const periods = await budgetPeriodTotals(world.gw.gateway.db, [agent.id]);
    expect(periods).toEqual([expect.objectContaining({ budget_id: 'daily', spent_uc: heldUc, covered_uc: heldUc, charges: heldUc / CREDIT_UC })]);
    const usage = (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken })).body.usage;
    expect(usage).toEqual([expect.objectContaining({ budgetId: 'daily', spentUc: heldUc.toString(), remainingUc: (20n * CREDIT_UC - heldUc).toString() })]);
  }

  it('100 concurrent mints of 1 credit against a daily budget of 20: exactly 20 holds and 80 × 402 CAP_EXCEEDED budget_exceeded', async () => {
    const agent = await budgetedAgent('budget-race-all', {});
    const offer = await shops[0].offer({ priceUc: CREDIT_UC.toString() });
    const answers = await race(agent.token, Array.from({ length: 100 }, () => offer.id), 'budget-all');
    const held = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 402);
    expect(held).toHaveLength(20);
    expect(refused).toHaveLength(80);
    for (const answer of refused) {
      expect(answer.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'budget_exceeded', budget: { id: 'daily', limitUc: '20000000', remainingUc: '0', resetsAt: expect.any(Number) } });
    }
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).toMatchObject({ heldUc: '20000000', availableUc: '80000000' });
    await budgetAgrees(agent, 20n * CREDIT_UC);
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 120_000);

  it("the same with the budget scoped to one merchant, while another merchant's mints all pass", async () => {
    const agent = await budgetedAgent('budget-race-one', { merchantId: shops[0].merchantId });
    const [here, there] = [await shops[0].offer({ priceUc: CREDIT_UC.toString() }), await shops[1].offer({ priceUc: CREDIT_UC.toString() })];
    // 100 mints at the budgeted merchant and 50 at the other, interleaved.
    const offerIds = Array.from({ length: 150 }, (_, i) => (i % 3 === 2 ? there.id : here.id));
    const answers = await race(agent.token, offerIds, 'budget-one');
    const atHere = answers.filter((a) => a.offerId === here.id);
    const atThere = answers.filter((a) => a.offerId === there.id);
    expect(atHere.filter((a) => a.status === 200)).toHaveLength(20);
    expect(atHere.filter((a) => a.status === 402 && a.body.code === 'CAP_EXCEEDED' && a.body.reason === 'budget_exceeded')).toHaveLength(80);
    expect(atThere.map((a) => a.status)).toEqual(Array.from({ length: 50 }, () => 200));
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).toMatchObject({ heldUc: '70000000', availableUc: '30000000' });
    await budgetAgrees(agent, 20n * CREDIT_UC);
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 120_000);

  // Captures and releases of one payer's holds on two instances, with budgets, once answered 500: a settlement's
  // statement takes the payer's lock inside itself, and a writer that committed meanwhile had moved the budget row
  // it addressed (migration 0030: such a race is retried, not a broken ledger).
  it('captures, releases and mints of one payer racing on two instances, and time zone changes among them: every answer is the contract, every period equals its holds', async () => {
    const agent = await world.createAgent('budget-race@example.com', 'budget-race-zones');
    await grant(world, agent.id, 200n * CREDIT_UC);
    const zones = ['UTC', 'Asia/Kolkata', 'America/New_York', 'Pacific/Kiritimati'];
    const mandate = (zone: string) => ({ budgets: [{ id: 'daily', limitUc: (150n * CREDIT_UC).toString(), period: 'day' }], timeZone: zone });
    const put = (url: string, zone: string, key: string) =>
      fetch(`${url}/v1/owner/agents/${agent.id}/mandate`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${agent.ownerToken}`, 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify(mandate(zone)),
      }).then((res) => res.status);
    expect(await put(world.url, 'UTC', 'zones-0')).toBe(200);
    const offer = await shops[0].offer({ priceUc: CREDIT_UC.toString() });
    const first = await race(agent.token, Array.from({ length: 60 }, () => offer.id), 'zones-first');
    expect(first.map((a) => a.status)).toEqual(Array.from({ length: 60 }, () => 200));
    const urls = [world.url, second.url];
    const settle = (holdId: string, i: number) =>
      fetch(`${urls[i % 2]}/v1/redemptions/${holdId}/${i % 3 === 0 ? 'release' : 'capture'}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${shops[0].key}`, 'content-type': 'application/json', 'idempotency-key': `zones-settle-${i}` },
        body: JSON.stringify(i % 3 === 2 ? { amountUc: '400000' } : {}),
      }).then((res) => res.status);
    const [settled, minted, changed] = await Promise.all([
      Promise.all(first.slice(0, 50).map((a, i) => settle(a.body.redemption.id as string, i))),
      race(agent.token, Array.from({ length: 30 }, () => offer.id), 'zones-more'),
      Promise.all(Array.from({ length: 8 }, (_, i) => put(urls[i % 2]!, zones[(i + 1) % zones.length]!, `zones-${i + 1}`))),
    ]);
    expect(settled).toEqual(Array.from({ length: 50 }, () => 200));
    expect(minted.map((a) => a.status)).toEqual(Array.from({ length: 30 }, () => 200));
    expect(changed).toEqual(Array.from({ length: 8 }, () => 200));
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 120_000);
});
