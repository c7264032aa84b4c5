// Budget periods at the gateway, with its clock moved: a day, week or month budget starts again at the calendar
// boundary of the mandate's time zone (not UTC's), a total budget never does, and whatever happens to a hold in a
// later period (release, capture, expiry, refund) gives back to the period the hold was made in.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { budgetPeriodTotals, expectBudgetInvariants, expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

/** Credentials outlive every clock move of this file (the gateway checks token lifetimes against its own clock). */
const TOKEN_LIFETIME_S = 120 * 86_400;

let world: World;
let shop: Shop;
/** Another merchant, opened before the clock moves (its owner's token has the usual lifetime). */
let other: Shop;
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
  other = await openShop(world);
  world.gw.clock.freeze();
});
afterAll(() => world.close());

async function budgetedAgent(mandate: Record<string, unknown>) {
  const email = `periods-${++counter}@example.com`;
  const subject = `periods-agent-${counter}`;
  const ownerToken = await world.human.mint({ sub: `human-${email}`, email, email_verified: true }, { expiresInS: TOKEN_LIFETIME_S });
  const registered = await world.api('POST', '/v1/owner/agents', {
    token: ownerToken,
    key: `periods-agent-${counter}`,
    body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject } },
  });
  expect(registered.status).toBe(201);
  const agent = { id: registered.body.id as string, token: await world.agentIssuer.mint({ sub: subject, owner_email: email }, { expiresInS: TOKEN_LIFETIME_S }), ownerToken };
  await grant(world, agent.id, 100_000_000n);
  const set = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `periods-mandate-${counter}`, body: mandate });
  expect(set.status).toBe(200);
  return agent;
}

const usageOf = async (agent: { id: string; ownerToken: string }) => (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken })).body.usage[0];

/** Moves the gateway's clock to `atS` (forward only). */
function moveTo(atS: number): void {
  const nowS = world.gw.clock.nowS();
  expect(atS).toBeGreaterThanOrEqual(nowS);
  world.gw.clock.advance((atS - nowS) * 1000);
}

/** The local date, time and ISO weekday (Monday 1) of an instant in a zone, read with Intl, independently of src/policy/periods.ts. */
function local(timeZone: string, atS: number) {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-US', { timeZone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', weekday: 'short' })
      .formatToParts(new Date(atS * 1000))
      .map((part) => [part.type, part.value]),
  );
  return { day: Number(parts.day), time: `${parts.hour}:${parts.minute}:${parts.second}`, weekday: ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'].indexOf(parts.weekday!) + 1 };
}

describe('a budget period starts again at the boundary of the mandate’s time zone', () => {
  const zone = 'Asia/Kolkata';
  const cases = [
    { period: 'day', longestS: 86_400, starts: (first: ReturnType<typeof local>) => expect(first.time).toBe('00:00:00') },
    { period: 'week', longestS: 7 * 86_400, starts: (first: ReturnType<typeof local>) => expect([first.weekday, first.time]).toEqual([1, '00:00:00']) },
    { period: 'month', longestS: 31 * 86_400, starts: (first: ReturnType<typeof local>) => expect([first.day, first.time]).toEqual([1, '00:00:00']) },
  ] as const;

  for (const { period, longestS, starts } of cases) {
    it(`${period}: usage counts up to local midnight${period === 'week' ? ' of Monday' : period === 'month' ? ' of the 1st' : ''} in ${zone}, then starts from 0`, async () => {
      const agent = await budgetedAgent({ budgets: [{ id: period, limitUc: '2000000', period }], timeZone: zone });
      const offer = await shop.offer({ priceUc: '1000000' });
      let boundaryS: number = (await usageOf(agent)).resetsAt;
      // The test mints in the period's last two minutes: when the clock (frozen at the wall clock's time when the
      // file began) is in them already, it takes the next period instead.
      if (boundaryS - world.gw.clock.nowS() <= 120) {
        moveTo(boundaryS);
        boundaryS = (await usageOf(agent)).resetsAt;
      }
      const nowS = world.gw.clock.nowS();
      expect(boundaryS > nowS && boundaryS <= nowS + longestS).toBe(true);
      starts(local(zone, boundaryS));
      expect(local(zone, boundaryS - 1).time).toBe('23:59:59');
      expect(local('UTC', boundaryS).time).not.toBe('00:00:00');

      // The last seconds of the period: two mints fill it, a third is refused until the boundary.
      moveTo(boundaryS - 120);
      expect((await mint(world, agent.token, offer.id)).status).toBe(200);
      expect((await mint(world, agent.token, offer.id)).status).toBe(200);
      moveTo(boundaryS - 1);
      const refused = await mint(world, agent.token, offer.id);
      expect(refused.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'budget_exceeded', budget: { id: period, remainingUc: '0', resetsAt: boundaryS } });
      expect(await usageOf(agent)).toMatchObject({ spentUc: '2000000', resetsAt: boundaryS });

      moveTo(boundaryS);
      expect(await usageOf(agent)).toMatchObject({ periodStart: boundaryS, spentUc: '0', remainingUc: '2000000' });
      expect((await mint(world, agent.token, offer.id)).status).toBe(200);
      expect(await usageOf(agent)).toMatchObject({ periodStart: boundaryS, spentUc: '1000000', remainingUc: '1000000' });
      const periods = await budgetPeriodTotals(world.gw.gateway.db, [agent.id]);
      expect(periods.map((p) => [Number(p.period_start_s) < boundaryS ? 'before' : 'after', p.spent_uc])).toEqual([
        ['before', 2_000_000n],
        ['after', 1_000_000n],
      ]);
      await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
    });
  }

  it('total: never starts again, across every boundary', async () => {
    const agent = await budgetedAgent({ budgets: [{ id: 'total', limitUc: '2000000', period: 'total' }], timeZone: zone });
    const offer = await shop.offer({ priceUc: '1000000' });
    expect(await usageOf(agent)).toMatchObject({ periodStart: 0, resetsAt: null });
    // Captured, so it stays spent (a hold left open would expire and give back).
    for (let i = 0; i < 2; i++) {
      const held = await mint(world, agent.token, offer.id);
      expect((await world.api('POST', `/v1/redemptions/${held.body.redemption.id}/capture`, { token: shop.key, key: `periods-${++counter}`, body: {} })).status).toBe(200);
    }
    world.gw.clock.advance(40 * 86_400 * 1000);
    expect((await mint(world, agent.token, offer.id)).body).toMatchObject({ code: 'CAP_EXCEEDED', budget: { id: 'total', remainingUc: '0', resetsAt: null } });
    expect(await usageOf(agent)).toMatchObject({ periodStart: 0, spentUc: '2000000' });
  });
});

describe('a hold settled in a later period gives back to the period it was made in', () => {
  it('release, partial capture, expiry and refund after the boundary lower the hold’s period, never the new one (America/New_York)', async () => {
    const zone = 'America/New_York';
    const agent = await budgetedAgent({ budgets: [{ id: 'daily', limitUc: '5000000', period: 'day' }], timeZone: zone });
    const [two, one] = [await shop.offer({ priceUc: '2000000', holdLifetimeS: 3600 }), await shop.offer({ priceUc: '1000000', holdLifetimeS: 3600 })];
    const brief = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    const boundaryS: number = (await usageOf(agent)).resetsAt;
    expect(local(zone, boundaryS).time).toBe('00:00:00');
    moveTo(boundaryS - 120);
    const released = (await mint(world, agent.token, two.id)).body.redemption.id;
    const captured = (await mint(world, agent.token, one.id)).body.redemption.id;
    expect((await mint(world, agent.token, brief.id)).status).toBe(200);
    const before = (await usageOf(agent)).periodStart as number;
    /** Spent in the hold's period and in the new one, as the running totals have them. */
    const spent = async () => {
      const periods = await budgetPeriodTotals(world.gw.gateway.db, [agent.id]);
      await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
      return Object.fromEntries(periods.map((p) => [Number(p.period_start_s) === before ? 'held in' : Number(p.period_start_s) === boundaryS ? 'new' : String(p.period_start_s), p.spent_uc]));
    };
    expect(await spent()).toEqual({ 'held in': 4_000_000n });

    moveTo(boundaryS + 30);
    expect((await mint(world, agent.token, one.id)).status).toBe(200);
    expect(await spent()).toEqual({ 'held in': 4_000_000n, new: 1_000_000n });

    const merchantCall = (path: string, body: unknown = {}) => world.api('POST', path, { token: shop.key, key: `periods-${++counter}`, body });
    expect((await merchantCall(`/v1/redemptions/${released}/release`)).status).toBe(200);
    expect(await spent()).toEqual({ 'held in': 2_000_000n, new: 1_000_000n });
    expect((await merchantCall(`/v1/redemptions/${captured}/capture`, { amountUc: '400000' })).status).toBe(200);
    expect(await spent()).toEqual({ 'held in': 1_400_000n, new: 1_000_000n });
    // Reclaimed now, or already by the sweeper: either way it gave back to its period.
    await world.gw.services.ledger.expireDue({ agentId: agent.id });
    expect(await spent()).toEqual({ 'held in': 400_000n, new: 1_000_000n });
    expect((await merchantCall(`/v1/redemptions/${captured}/refunds`, { amountUc: '100000' })).status).toBe(201);
    expect(await spent()).toEqual({ 'held in': 300_000n, new: 1_000_000n });
    // What the owner and the agent read is the new period, untouched.
    expect(await usageOf(agent)).toMatchObject({ periodStart: boundaryS, spentUc: '1000000', remainingUc: '4000000' });
    expect((await world.api('GET', '/v1/me', { token: agent.token })).body.budgets).toEqual([expect.objectContaining({ budgetId: 'daily', spentUc: '1000000' })]);
  });
});

describe('a budget whose time zone or period changes keeps counting what its current period holds', () => {
  it('UTC → Asia/Kolkata in the middle of a day: the new day counts the holds made since it began; then day → total counts them all', async () => {
    const agent = await budgetedAgent({ budgets: [{ id: 'daily', limitUc: '3000000', period: 'day' }], timeZone: 'UTC' });
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 7 * 86_400 });
    const midnightS: number = (await usageOf(agent)).resetsAt;
    const kolkataDayS = midnightS - 19_800; // 00:00 in Kolkata (UTC+5:30) is 18:30 UTC the evening before
    const spent = async () => {
      await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
      const periods = await budgetPeriodTotals(world.gw.gateway.db, [agent.id]);
      return Object.fromEntries(periods.map((p) => [String(p.period_start_s), p.spent_uc]));
    };
    const setMandate = async (mandate: Record<string, unknown>) => {
      const res = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `periods-mandate-${++counter}`, body: mandate });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body;
    };
    moveTo(kolkataDayS - 1_800); // the day before, in both zones
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
    moveTo(midnightS - 3_600); // 23:00 UTC, the same day as before in UTC; 04:30 of the next day in Kolkata
    const early = (await mint(world, agent.token, offer.id)).body.redemption.id as string;
    moveTo(midnightS + 3_600);
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
    expect(await spent()).toEqual({ [midnightS - 86_400]: 2_000_000n, [midnightS]: 1_000_000n });

    const inKolkata = await setMandate({ budgets: [{ id: 'daily', limitUc: '3000000', period: 'day' }], timeZone: 'Asia/Kolkata' });
    expect(inKolkata.usage[0]).toMatchObject({ periodStart: kolkataDayS, spentUc: '2000000', remainingUc: '1000000' });
    expect(await spent()).toEqual({ [midnightS - 86_400]: 1_000_000n, [midnightS]: 0n, [kolkataDayS]: 2_000_000n });
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
    expect((await mint(world, agent.token, offer.id)).body).toMatchObject({ code: 'CAP_EXCEEDED', budget: { id: 'daily', remainingUc: '0' } });

    // The moved hold gives back to the period it now counts in.
    const released = await world.api('POST', `/v1/redemptions/${early}/release`, { token: shop.key, key: `periods-${++counter}`, body: {} });
    expect(released.status).toBe(200);
    expect(await usageOf(agent)).toMatchObject({ periodStart: kolkataDayS, spentUc: '2000000' });

    // A total counts every hold still spending, whenever it was made.
    const total = await setMandate({ budgets: [{ id: 'daily', limitUc: '3000000', period: 'total' }], timeZone: 'Asia/Kolkata' });
    expect(total.usage[0]).toMatchObject({ periodStart: 0, spentUc: '3000000', remainingUc: '0' });
    expect((await spent())['0']).toBe(3_000_000n);
    // And back: the day counts the holds made since it began, the older one stays in the total's row.
    const daily = await setMandate({ budgets: [{ id: 'daily', limitUc: '3000000', period: 'day' }], timeZone: 'Asia/Kolkata' });
    expect(daily.usage[0]).toMatchObject({ periodStart: kolkataDayS, spentUc: '2000000' });
    expect(await spent()).toMatchObject({ '0': 1_000_000n, [kolkataDayS]: 2_000_000n });
    await expectLedgerInvariants(world.gw.gateway.db);
  });
  // A black-box check found that a budget kept by id with another scope went on counting its old scope's holds:
  // re-scoped from one merchant to another, it refused the other merchant's first purchase.
  it('another merchant, then no merchant: the budget counts the holds of its new scope in the current period, and gives back only for them', async () => {
    const budget = (merchantId?: string) => ({ budgets: [{ id: 'shop', limitUc: '5000000', period: 'day', ...(merchantId ? { merchantId } : {}) }] });
    const agent = await budgetedAgent(budget(shop.merchantId));
    const [here, there] = [await shop.offer({ priceUc: '1000000' }), await other.offer({ priceUc: '1000000' })];
    const holdAt = async (offerId: string) => (await mint(world, agent.token, offerId)).body.redemption.id as string;
    const [firstHere, secondHere, firstThere] = [await holdAt(here.id), await holdAt(here.id), await holdAt(there.id)];
    expect(await usageOf(agent)).toMatchObject({ spentUc: '2000000' });
    const setMandate = async (mandate: Record<string, unknown>) => {
      const res = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `periods-mandate-${++counter}`, body: mandate });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.usage[0];
    };

    expect(await setMandate(budget(other.merchantId))).toMatchObject({ spentUc: '1000000', remainingUc: '4000000' });
    await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
    const release = (holdId: string, key: Shop) => world.api('POST', `/v1/redemptions/${holdId}/release`, { token: key.key, key: `periods-${++counter}`, body: {} });
    expect((await release(firstHere, shop)).status).toBe(200);
    expect(await usageOf(agent)).toMatchObject({ spentUc: '1000000' });
    expect((await release(firstThere, other)).status).toBe(200);
    expect(await usageOf(agent)).toMatchObject({ spentUc: '0' });

    // Every purchase: the hold still held at the first merchant counts again.
    expect(await setMandate(budget())).toMatchObject({ spentUc: '1000000' });
    expect((await release(secondHere, shop)).status).toBe(200);
    expect(await usageOf(agent)).toMatchObject({ spentUc: '0' });
    await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('a budget added counts what its period spent already, by its scope (found from outside: it started from nothing, so a day under a new 1-credit budget allowed 2)', async () => {
    const agent = await budgetedAgent({ budgets: [] });
    const [here, there] = [await shop.offer({ priceUc: '1000000' }), await other.offer({ priceUc: '1000000' })];
    expect((await mint(world, agent.token, here.id)).status).toBe(200);
    const put = async (budgets: unknown[]) => {
      const res = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `periods-mandate-${++counter}`, body: { budgets } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.usage as Array<{ budgetId: string; spentUc: string; remainingUc: string }>;
    };
    const usage = await put([
      { id: 'daily', limitUc: '1000000', period: 'day' },
      { id: 'there', limitUc: '5000000', period: 'day', merchantId: other.merchantId },
    ]);
    expect(usage.map((u) => [u.budgetId, u.spentUc, u.remainingUc])).toEqual([
      ['daily', '1000000', '0'],
      ['there', '0', '5000000'],
    ]);
    const refused = await mint(world, agent.token, there.id);
    expect([refused.status, refused.body.code, refused.body.budget?.id]).toEqual([402, 'CAP_EXCEEDED', 'daily']);
    await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('an id removed and then brought back counts by its new definition, whatever the earlier budget of that id counted; its old holds give back nothing to it', async () => {
    const budget = (merchantId: string) => ({ budgets: [{ id: 'shop', limitUc: '2000000', period: 'day', merchantId }] });
    const agent = await budgetedAgent(budget(shop.merchantId));
    const [here, there] = [await shop.offer({ priceUc: '1000000' }), await other.offer({ priceUc: '1000000' })];
    const firstHere = (await mint(world, agent.token, here.id)).body.redemption.id as string;
    await mint(world, agent.token, here.id);
    expect(await usageOf(agent)).toMatchObject({ spentUc: '2000000' });
    const setMandate = async (mandate: Record<string, unknown>) => {
      const res = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `periods-mandate-${++counter}`, body: mandate });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.usage[0];
    };
    await setMandate({ budgets: [] });
    // Back, scoped to the other merchant: the first merchant's two holds are not its spending.
    expect(await setMandate(budget(other.merchantId))).toMatchObject({ spentUc: '0', remainingUc: '2000000' });
    await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
    for (let n = 0; n < 2; n++) expect((await mint(world, agent.token, there.id)).status).toBe(200);
    const third = await mint(world, agent.token, there.id);
    expect([third.status, third.body.code]).toEqual([402, 'CAP_EXCEEDED']);
    // A release of an earlier hold gives nothing back to the budget that never counted it.
    expect((await world.api('POST', `/v1/redemptions/${firstHere}/release`, { token: shop.key, key: `periods-${++counter}`, body: {} })).status).toBe(200);
    expect(await usageOf(agent)).toMatchObject({ spentUc: '2000000' });
    await expectBudgetInvariants(world.gw.gateway.db, [agent.id]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it("a parent's budget counts its delegate's holds in the parent's new time zone", async () => {
    const parent = await budgetedAgent({ budgets: [{ id: 'daily', limitUc: '5000000', period: 'day' }], timeZone: 'UTC', delegation: { allowed: true, maxDepth: 1 } });
    const subject = `periods-child-${++counter}`;
    const created = await world.api('POST', `/v1/agents/${parent.id}/delegates`, {
      token: parent.token,
      key: `periods-child-${counter}`,
      body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, mandate: { budgets: [{ id: 'daily', limitUc: '5000000', period: 'day' }] } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const email = `periods-${counter - 1}@example.com`;
    const child = { id: created.body.id as string, token: await world.agentIssuer.mint({ sub: subject, owner_email: email }, { expiresInS: TOKEN_LIFETIME_S }) };
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 7 * 86_400 });
    const midnightS: number = (await usageOf(parent)).resetsAt;
    moveTo(midnightS - 3_600); // 23:00 UTC; 04:30 of the next day in Kolkata
    expect((await mint(world, child.token, offer.id)).status).toBe(200);
    moveTo(midnightS + 60);
    expect((await mint(world, child.token, offer.id)).status).toBe(200);
    expect(await usageOf(parent)).toMatchObject({ periodStart: midnightS, spentUc: '1000000' });

    const set = await world.api('PUT', `/v1/owner/agents/${parent.id}/mandate`, {
      token: parent.ownerToken,
      key: `periods-mandate-${++counter}`,
      body: { budgets: [{ id: 'daily', limitUc: '5000000', period: 'day' }], timeZone: 'Asia/Kolkata', delegation: { allowed: true, maxDepth: 1 } },
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body.usage[0]).toMatchObject({ periodStart: midnightS - 19_800, spentUc: '2000000' });
    // The child's own budget of the same id, still in UTC, did not change.
    const childUsage = await world.api('GET', `/v1/owner/agents/${child.id}/mandate`, { token: parent.ownerToken });
    expect(childUsage.body.usage[0]).toMatchObject({ budgetId: 'daily', periodStart: midnightS, spentUc: '1000000' });
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});
