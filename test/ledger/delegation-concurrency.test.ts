// A tree's budgets under concurrency, on real PostgreSQL with two gateway instances sharing one database
// (PGlite runs one session at a time, so it cannot race): a parent with a daily budget of 10 credits and two
// children of 8 each; 60 concurrent mints of 1 credit spread over the three agents take exactly 10 holds in
// all, no child passes 8, and every budget's running total equals its holds after.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../support/database.ts';
import type { TestGateway } from '../support/gateway.ts';
import { grant, openShop, type Shop } from '../support/ledger-fixture.ts';
import { budgetPeriodTotals, expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

const CREDIT_UC = 1_000_000n;
const OWNER_EMAIL = 'tree-race@example.com';

let world: World;
let second: TestGateway;
let shop: Shop;

describe.runIf(onPostgres())("a tree's budgets under concurrency (PostgreSQL, two instances)", () => {
  beforeAll(async () => {
    world = await startWorld();
    shop = await openShop(world);
    second = await world.anotherInstance();
  });
  afterAll(async () => {
    await second?.close();
    await world?.close();
  });

  async function child(parent: { id: string; token: string }, subject: string) {
    const res = await world.api('POST', `/v1/agents/${parent.id}/delegates`, {
      token: parent.token,
      key: `create-${subject}`,
      body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, mandate: { budgets: [{ id: 'daily', limitUc: (8n * CREDIT_UC).toString(), period: 'day' }] } },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return { id: res.body.id as string, token: await world.agentToken(subject, OWNER_EMAIL) };
  }

  it('60 concurrent mints of 1 credit over a parent (10 a day) and two children (8 each): exactly 10 holds, no child past 8', async () => {
    const parent = await world.createAgent(OWNER_EMAIL, 'tree-race-parent');
    await grant(world, parent.id, 100n * CREDIT_UC);
    const mandate = await world.api('PUT', `/v1/owner/agents/${parent.id}/mandate`, {
      token: parent.ownerToken,
      key: 'tree-race-mandate',
      body: { budgets: [{ id: 'daily', limitUc: (10n * CREDIT_UC).toString(), period: 'day' }], delegation: { allowed: true, maxDepth: 1 } },
    });
    expect(mandate.status).toBe(200);
    const children = [await child(parent, 'tree-race-a'), await child(parent, 'tree-race-b')];
    const agents = [parent, ...children];
    const offer = await shop.offer({ priceUc: CREDIT_UC.toString() });

    // Every mint at once, spread over the three agents, alternating between the two instances.
    const urls = [world.url, second.url];
    const answers = await Promise.all(
      Array.from({ length: 60 }, (_, i) => {
        const agent = agents[i % agents.length]!;
        return fetch(`${urls[Math.floor(i / agents.length) % urls.length]}/v1/vouchers`, {
          method: 'POST',
          headers: { authorization: `Bearer ${agent.token}`, 'content-type': 'application/json', 'idempotency-key': `tree-race-${i}` },
          body: JSON.stringify({ offerId: offer.id }),
        }).then(async (res) => ({ agentId: agent.id, status: res.status, body: (await res.json()) as Record<string, any> }));
      }),
    );
    const held = answers.filter((a) => a.status === 200);
    expect(held).toHaveLength(10);
    expect(answers.filter((a) => a.status === 402 && a.body.code === 'CAP_EXCEEDED' && a.body.reason === 'budget_exceeded')).toHaveLength(50);
    for (const { id } of children) expect(held.filter((a) => a.agentId === id).length).toBeLessThanOrEqual(8);

    // Each budget's running total is what its holds took: the parent's counts all ten.
    const periods = await budgetPeriodTotals(world.gw.gateway.db, agents.map((a) => a.id));
    for (const period of periods) expect(period.spent_uc).toBe(period.covered_uc);
    const spent = new Map(periods.map((p) => [p.agent_id, p.spent_uc]));
    expect(spent.get(parent.id)).toBe(10n * CREDIT_UC);
    for (const { id } of children) expect(spent.get(id) ?? 0n).toBe(BigInt(held.filter((a) => a.agentId === id).length) * CREDIT_UC);
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, parent.id)).toMatchObject({ heldUc: (10n * CREDIT_UC).toString(), availableUc: (90n * CREDIT_UC).toString() });
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 120_000);
});
