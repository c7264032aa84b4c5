// Delegates: an agent whose mandate allows it registers children under mandates within its own. A wider one
// is refused naming the rule, with nothing created; a tree is as deep as its mandates allow; the owner reads
// the tree with each agent's usage, and an agent its own subtree; a child's hold allocates from its root's
// lots and charges its own and every ancestor's budgets, which a release gives back to all of them; a frozen
// root freezes its subtree until it is unfrozen; retiring a delegate releases its subtree's holds (the root's
// balance restored exactly) and stops it for good; credit is granted to roots only.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../../src/platform/errors.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { budgetPeriodTotals, expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect } from '../mcp/helpers.ts';
import { onPostgres } from '../support/database.ts';
import { waitFor } from '../support/wait.ts';

const CREDIT_UC = 1_000_000n;
const credits = (n: number) => (BigInt(n) * CREDIT_UC).toString();

let world: World;
let shops: [Shop, Shop];
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  shops = [await openShop(world), await openShop(world)];
});
afterAll(() => world?.close());

interface TestAgent {
  id: string;
  token: string;
  ownerToken: string;
  ownerEmail: string;
  subject: string;
}

/** A root agent of a fresh owner, with 100 credits and this mandate. */
async function rootAgent(mandate: Record<string, unknown>): Promise<TestAgent> {
  const ownerEmail = `tree-${++counter}@example.com`;
  const subject = `root-${counter}`;
  const agent = await world.createAgent(ownerEmail, subject);
  await grant(world, agent.id, 100n * CREDIT_UC);
  const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `mandate-${counter}`, body: mandate });
  expect(put.status, JSON.stringify(put.body)).toBe(200);
  return { ...agent, ownerEmail, subject };
}

/** POST /v1/agents/{parent}/delegates with `token` (the parent itself, or the owner). */
async function createDelegate(parent: TestAgent, token: string, mandate?: Record<string, unknown>) {
  const subject = `delegate-${++counter}`;
  const res = await world.api('POST', `/v1/agents/${parent.id}/delegates`, {
    token,
    key: `delegate-${counter}`,
    body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, ...(mandate ? { mandate } : {}) },
  });
  const agent: TestAgent | undefined =
    res.status === 201 ? { id: res.body.id, token: await world.agentToken(subject, parent.ownerEmail), ownerToken: parent.ownerToken, ownerEmail: parent.ownerEmail, subject } : undefined;
  return { res, agent };
}

async function agentCount(ownerToken: string): Promise<number> {
  return (await world.api('GET', '/v1/owner/agents?limit=100', { token: ownerToken })).body.agents.length;
}

async function usageOf(agent: TestAgent): Promise<Record<string, string>> {
  const mandate = (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken })).body;
  return Object.fromEntries(mandate.usage.map((u: { budgetId: string; spentUc: string }) => [u.budgetId, u.spentUc]));
}

const PARENT_MANDATE = () => ({
  allowedCategories: ['books'],
  budgets: [{ id: 'daily', limitUc: credits(10), period: 'day' }],
  merchants: { allow: [shops[0].merchantId], deny: [] },
  notBefore: 1_000,
  notAfter: 4_000_000_000,
  delegation: { allowed: true, maxDepth: 2 },
});

describe('registering a delegate', () => {
  it('by the parent agent itself or by its owner: same owner, parentId and depth, its own identity, a mandate within its parent\'s', async () => {
    const root = await rootAgent(PARENT_MANDATE());
    const byAgent = await createDelegate(root, root.token, { budgets: [{ id: 'daily', limitUc: credits(8), period: 'day' }] });
    expect(byAgent.res.status, JSON.stringify(byAgent.res.body)).toBe(201);
    expect(byAgent.res.body).toMatchObject({ parentId: root.id, depth: 1, retiredAt: null, ownerId: expect.any(String), identity: { subject: byAgent.agent!.subject } });
    // Location names what the caller can read: for the parent agent its new delegate's subtree (found from outside: it
    // named the owner's route, which the agent cannot read), for the owner the owner's view.
    expect(byAgent.res.headers.get('location')).toBe(`/v1/agents/${byAgent.agent!.id}/delegates`);
    const located = await world.api('GET', byAgent.res.headers.get('location')!, { token: root.token });
    expect(located.status).toBe(200);
    const byOwner = await createDelegate(root, root.ownerToken);
    expect(byOwner.res.status).toBe(201);
    expect(byOwner.res.headers.get('location')).toBe(`/v1/owner/agents/${byOwner.agent!.id}`);
    expect((await world.api('GET', byOwner.res.headers.get('location')!, { token: root.ownerToken })).status).toBe(200);
    // Members left out take the parent's (delegation: none).
    const mandate = (await world.api('GET', `/v1/owner/agents/${byOwner.agent!.id}/mandate`, { token: root.ownerToken })).body;
    expect(mandate).toMatchObject({ allowedCategories: ['books'], budgets: [{ id: 'daily', limitUc: credits(10), period: 'day' }], merchants: { allow: [shops[0].merchantId] }, delegation: { allowed: false, maxDepth: 0 } });
    // The delegate authenticates as itself, and reads itself with its parent and depth.
    const me = await world.api('GET', '/v1/me', { token: byAgent.agent!.token });
    expect(me.body.agent).toMatchObject({ id: byAgent.agent!.id, parentId: root.id, depth: 1 });
    expect(me.body.balance).toMatchObject({ agentId: byAgent.agent!.id, fundedBy: root.id, availableUc: credits(100) });
    // Its parent's budgets bind its purchases too, so it sees them beside its own (found from outside: it saw only its own).
    expect(me.body.budgets).toEqual([expect.objectContaining({ budgetId: 'daily', limitUc: credits(8) })]);
    expect(me.body.ancestorBudgets).toEqual([{ agentId: root.id, budgets: [expect.objectContaining({ budgetId: 'daily', limitUc: credits(10), spentUc: '0' })] }]);
    expect((await world.api('GET', '/v1/me', { token: root.token })).body.ancestorBudgets).toEqual([]);
    const owned = (await world.api('GET', '/v1/owner/agents?limit=100', { token: root.ownerToken })).body.agents;
    expect(owned.map((a: { parentId: string | null }) => a.parentId)).toEqual([null, root.id, root.id]);
  });

  it('refuses every wider mandate with 400 naming the rule, and creates nothing', async () => {
    const root = await rootAgent(PARENT_MANDATE());
    const before = await agentCount(root.ownerToken);
    const wider: Array<[string, Record<string, unknown>]> = [
      ['budget_wider_than_parent', { budgets: [{ id: 'daily', limitUc: credits(11), period: 'day' }] }],
      ['budget_wider_than_parent', { budgets: [] }],
      ['budget_wider_than_parent', { budgets: [{ id: 'weekly', limitUc: credits(5), period: 'week' }] }],
      ['merchant_outside_parent', { merchants: { allow: [shops[0].merchantId, shops[1].merchantId], deny: [] } }],
      ['merchant_outside_parent', { merchants: { allow: null, deny: [] } }],
      ['window_outside_parent', { notAfter: 4_000_000_001 }],
      ['window_outside_parent', { notBefore: null }],
      ['allowance_outside_parent', { allowedCategories: ['*'] }],
      ['allowance_outside_parent', { allowedCategories: ['books', 'music'] }],
      ['depth_exceeded', { delegation: { allowed: true, maxDepth: 2 } }],
    ];
    for (const [reason, mandate] of wider) {
      const { res } = await createDelegate(root, root.token, mandate);
      expect(res.status, JSON.stringify(mandate)).toBe(400);
      expect(res.body, JSON.stringify(mandate)).toMatchObject({ code: 'invalid_input', reason });
    }
    expect(await agentCount(root.ownerToken)).toBe(before);
    // A parent whose mandate allows no delegates.
    const plain = await rootAgent({ budgets: [] });
    const refused = await createDelegate(plain, plain.token);
    expect(refused.res.status).toBe(400);
    expect(refused.res.body).toMatchObject({ code: 'invalid_input', reason: 'delegation_not_allowed' });
    expect(await agentCount(plain.ownerToken)).toBe(1);
  });

  it("compares merchant rules by merchant: a child naming its parent's merchant by verified domain (any case) is within (found from outside)", async () => {
    const root = await rootAgent({ ...PARENT_MANDATE(), merchants: { allow: [shops[0].merchantId], deny: [shops[1].merchantId] } });
    const { rows } = await world.gw.gateway.db.query<{ domain: string }>('SELECT domain FROM merchants WHERE id = $1', [shops[1].merchantId]);
    const [allowed] = (await world.gw.gateway.db.query<{ domain: string }>('SELECT domain FROM merchants WHERE id = $1', [shops[0].merchantId])).rows;
    const within = await createDelegate(root, root.token, { merchants: { allow: [allowed!.domain.toUpperCase()], deny: [rows[0]!.domain] } });
    expect(within.res.status, JSON.stringify(within.res.body)).toBe(201);
    // Still refused: a merchant outside the parent's allowlist, however it is named, and a deny the child drops.
    const outside = await createDelegate(root, root.token, { merchants: { allow: [allowed!.domain, rows[0]!.domain], deny: [shops[1].merchantId] } });
    expect(outside.res.body).toMatchObject({ code: 'invalid_input', reason: 'merchant_outside_parent' });
    const undenied = await createDelegate(root, root.token, { merchants: { allow: [allowed!.domain], deny: [] } });
    expect(undenied.res.body).toMatchObject({ code: 'invalid_input', reason: 'merchant_outside_parent' });
  });

  it("takes a delegate's merchant rules with one member: the other is its parent's (found from outside: deny alone was refused)", async () => {
    const root = await rootAgent({ ...PARENT_MANDATE(), merchants: { allow: [shops[0].merchantId], deny: [shops[1].merchantId] } });
    const extra = await openShop(world);
    const narrowed = await createDelegate(root, root.token, { merchants: { deny: [shops[1].merchantId, extra.merchantId] } });
    expect(narrowed.res.status, JSON.stringify(narrowed.res.body)).toBe(201);
    const read = await world.api('GET', `/v1/owner/agents/${narrowed.agent!.id}/mandate`, { token: root.ownerToken });
    expect(read.body.merchants).toEqual({ allow: [shops[0].merchantId], deny: [shops[1].merchantId, extra.merchantId] });
    // Denying a merchant the parent allows narrows the child: the allowlist it keeps is the parent's, not one it stated
    // beside the denial (found by a confirmation check: refused as a merchant on both lists).
    const denyingAllowed = await createDelegate(root, root.token, { merchants: { deny: [shops[0].merchantId, shops[1].merchantId] } });
    expect(denyingAllowed.res.status, JSON.stringify(denyingAllowed.res.body)).toBe(201);
    // Stated on both lists in one request, it is the contradiction it reads as.
    const both = await createDelegate(root, root.token, { merchants: { allow: [shops[0].merchantId], deny: [shops[0].merchantId, shops[1].merchantId] } });
    // Named where the registration holds it, under `mandate`, as a schema refusal names a member (`errors` too).
    const message = `names "${shops[0].merchantId}", which the deny list names too (its item 0): a merchant on both lists is denied, so keep it on one`;
    expect([both.res.status, both.res.body.detail, both.res.body.errors]).toEqual([400, `body/mandate/merchants/allow/0 ${message}`, [{ path: 'body/mandate/merchants/allow/0', message }]]);
  });

  it('a domain two merchants share names both: a child allowing it is wider than a parent allowing one, and a child denying one drops the denial of the other (found from outside)', async () => {
    const twins = [await openShop(world), await openShop(world)];
    const domain = `twins-${++counter}.example.com`;
    await world.gw.gateway.db.query('UPDATE merchants SET domain = $1 WHERE id = ANY($2::text[])', [domain, twins.map((twin) => twin.merchantId)]);
    const [first, second] = twins.map((twin) => twin.merchantId).sort() as [string, string];

    const allowing = await rootAgent({ ...PARENT_MANDATE(), merchants: { allow: [first], deny: [] } });
    const wider = await createDelegate(allowing, allowing.token, { merchants: { allow: [domain], deny: [] } });
    expect(wider.res.body, JSON.stringify(wider.res.body)).toMatchObject({ code: 'invalid_input', reason: 'merchant_outside_parent' });
    expect((await createDelegate(allowing, allowing.token, { merchants: { allow: [first], deny: [] } })).res.status).toBe(201);

    const denying = await rootAgent({ ...PARENT_MANDATE(), merchants: { allow: null, deny: [domain] } });
    for (const kept of [[first], [second]]) {
      const dropped = await createDelegate(denying, denying.token, { merchants: { allow: null, deny: kept } });
      expect(dropped.res.body, JSON.stringify(dropped.res.body)).toMatchObject({ code: 'invalid_input', reason: 'merchant_outside_parent' });
      expect(dropped.res.body.detail).toContain(kept[0] === first ? second : first);
    }
    expect((await createDelegate(denying, denying.token, { merchants: { allow: null, deny: [second, first] } })).res.status).toBe(201);
    expect((await createDelegate(denying, denying.token, { merchants: { allow: null, deny: [domain.toUpperCase()] } })).res.status).toBe(201);

    // A budget named by that domain: refused, naming every merchant verified on it rather than one of them.
    const put = await world.api('PUT', `/v1/owner/agents/${allowing.id}/mandate`, {
      token: allowing.ownerToken,
      key: `twin-budget-${counter}`,
      body: { budgets: [{ id: 'twin', limitUc: '1', period: 'day', merchantId: domain }] },
    });
    expect(put.status).toBe(400);
    expect(put.body.detail).toBe(`body/budgets/0/merchantId "${domain}" is a domain; a budget names its merchant by id (the merchants verified on it are ${first}, ${second})`);
  });

  it("a child's day, week or month budget lies within its parent's only in the parent's time zone (found from outside)", async () => {
    const root = await rootAgent({ ...PARENT_MANDATE(), timeZone: 'Asia/Kolkata', budgets: [{ id: 'daily', limitUc: credits(10), period: 'day' }, { id: 'ever', limitUc: credits(50), period: 'total' }] });
    const sameBudgets = [{ id: 'daily', limitUc: credits(10), period: 'day' }, { id: 'ever', limitUc: credits(50), period: 'total' }];
    const elsewhere = await createDelegate(root, root.token, { timeZone: 'Pacific/Kiritimati', budgets: sameBudgets });
    expect(elsewhere.res.body, JSON.stringify(elsewhere.res.body)).toMatchObject({ code: 'invalid_input', reason: 'budget_wider_than_parent' });
    expect(elsewhere.res.body.detail).toContain('timeZone "Asia/Kolkata"');
    // The parent's zone by another of its names is the same zone; left out, the creation takes the parent's.
    expect((await createDelegate(root, root.token, { timeZone: 'Asia/Calcutta', budgets: sameBudgets })).res.status).toBe(201);
    const inherited = await createDelegate(root, root.token, { budgets: sameBudgets });
    expect(inherited.res.status, JSON.stringify(inherited.res.body)).toBe(201);
    // A later PUT of the child's mandate is held to the same rule; a total budget has no zone to match.
    const put = (body: Record<string, unknown>) => world.api('PUT', `/v1/owner/agents/${inherited.agent!.id}/mandate`, { token: root.ownerToken, key: `zone-put-${++counter}`, body: { ...PARENT_MANDATE(), ...body } });
    expect((await put({ timeZone: 'UTC', budgets: sameBudgets })).body).toMatchObject({ reason: 'budget_wider_than_parent' });
    const totalOnly = await rootAgent({ ...PARENT_MANDATE(), timeZone: 'Asia/Kolkata', budgets: [{ id: 'ever', limitUc: credits(50), period: 'total' }] });
    expect((await createDelegate(totalOnly, totalOnly.token, { timeZone: 'UTC', budgets: [{ id: 'ever', limitUc: credits(50), period: 'total' }] })).res.status).toBe(201);
  });

  it('as deep as the mandates allow: maxDepth 2 gives a child and a grandchild, and no further', async () => {
    const root = await rootAgent(PARENT_MANDATE());
    const child = (await createDelegate(root, root.token, { delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const grandchild = await createDelegate(child, child.token);
    expect(grandchild.res.status).toBe(201);
    expect(grandchild.res.body).toMatchObject({ parentId: child.id, depth: 2 });
    const seen = (await world.api('GET', '/v1/me', { token: grandchild.agent!.token })).body.ancestorBudgets;
    expect(seen.map((ancestor: { agentId: string }) => ancestor.agentId)).toEqual([child.id, root.id]);
    const tooDeep = await createDelegate(grandchild.agent!, grandchild.agent!.token);
    expect(tooDeep.res.body).toMatchObject({ code: 'invalid_input', reason: 'delegation_not_allowed' });
    // Narrowing the root after the fact stops new levels below it even where a child's mandate would allow one.
    const narrowed = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: `narrow-${root.id}`, body: { ...PARENT_MANDATE(), delegation: { allowed: true, maxDepth: 1 } } });
    expect(narrowed.status).toBe(200);
    const past = await createDelegate(child, child.token);
    expect(past.res.status).toBe(400);
    expect(past.res.body).toMatchObject({ reason: 'depth_exceeded' });
    expect(await agentCount(root.ownerToken)).toBe(3);
  });

  it('only the parent itself or its owner registers a delegate: another agent gets 404', async () => {
    const root = await rootAgent(PARENT_MANDATE());
    const sibling = await rootAgent({});
    const byAgent = (await createDelegate(root, sibling.token)).res;
    expect(byAgent.status).toBe(404);
    // To an agent, the rule it broke: it acts for itself only (found from outside: "among your agents", which it has none of).
    expect(byAgent.body.detail).toBe(`no agent ${root.id} that you act for: an agent acts for itself (${sibling.id}) only`);
    expect((await createDelegate(root, sibling.ownerToken)).res.body.detail).toBe(`no agent ${root.id} among your agents`);
  });

  it("a later change of a delegate's mandate is held within its parent's (PUT and PATCH)", async () => {
    const root = await rootAgent(PARENT_MANDATE());
    const child = (await createDelegate(root, root.token, { budgets: [{ id: 'daily', limitUc: credits(8), period: 'day' }] })).agent!;
    const put = (body: Record<string, unknown>) => world.api('PUT', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken, key: `put-${++counter}`, body });
    const within = { allowedCategories: ['books'], merchants: { allow: [shops[0].merchantId], deny: [] }, notBefore: 2_000, notAfter: 3_000_000_000 };
    expect((await put({ ...within, budgets: [{ id: 'daily', limitUc: credits(12), period: 'day' }] })).body).toMatchObject({ code: 'invalid_input', reason: 'budget_wider_than_parent' });
    expect((await put({ ...within, budgets: [{ id: 'daily', limitUc: credits(6), period: 'day' }] })).status).toBe(200);
    const patched = await world.api('PATCH', `/v1/owner/agents/${child.id}`, { token: root.ownerToken, body: { allowedCategories: ['*'] } });
    expect(patched.status).toBe(400);
    expect(patched.body).toMatchObject({ reason: 'allowance_outside_parent' });
  });
});

describe("a delegate's caps and approval threshold", () => {
  /** A parent with a per-hold cap, a rolling cap and an approval threshold, allowing one level of delegates. */
  const CAPPED_PARENT = () => ({
    caps: { perHoldUc: credits(5), perPeriodUc: credits(20), periodS: 86_400 },
    approvalAboveUc: credits(2),
    delegation: { allowed: true, maxDepth: 1 },
  });
  const caps = (perHoldUc: string | null, perPeriodUc: string | null, periodS = 86_400) => ({ perHoldUc, perPeriodUc, periodS });
  const WIDER: Array<[string, Record<string, unknown>]> = [
    ['approval_wider_than_parent', { approvalAboveUc: null }],
    ['approval_wider_than_parent', { approvalAboveUc: credits(9) }],
    ['cap_wider_than_parent', { caps: caps(null, credits(20)) }],
    ['cap_wider_than_parent', { caps: caps(credits(6), credits(20)) }],
    ['cap_wider_than_parent', { caps: caps(credits(5), null) }],
    ['cap_wider_than_parent', { caps: caps(credits(5), credits(21)) }],
    // A shorter period is not within, however small the amount: ten of them fit in the parent's day.
    ['cap_wider_than_parent', { caps: caps(credits(5), credits(10), 8_640) }],
  ];

  it('refuses a wider threshold or cap at creation with 400 naming the rule, creates nothing, and fills one left out from the parent', async () => {
    const root = await rootAgent(CAPPED_PARENT());
    for (const [reason, mandate] of WIDER) {
      const { res } = await createDelegate(root, root.token, mandate);
      expect(res.status, JSON.stringify(mandate)).toBe(400);
      expect(res.body, JSON.stringify(mandate)).toMatchObject({ code: 'invalid_input', reason });
    }
    expect(await agentCount(root.ownerToken)).toBe(1);
    const inherited = (await createDelegate(root, root.token)).agent!;
    expect((await world.api('GET', `/v1/owner/agents/${inherited.id}/mandate`, { token: root.ownerToken })).body).toMatchObject({ caps: CAPPED_PARENT().caps, approvalAboveUc: credits(2) });
    // Narrower: a smaller threshold and caps, and a rolling cap over a longer period.
    const narrower = await createDelegate(root, root.token, { approvalAboveUc: credits(1), caps: caps(credits(4), credits(20), 604_800) });
    expect(narrower.res.status, JSON.stringify(narrower.res.body)).toBe(201);
    expect(narrower.res.body.caps).toEqual(caps(credits(4), credits(20), 604_800));
  });

  it("refuses a wider threshold or cap at the delegate's PUT …/mandate and PATCH of its caps, writing no version", async () => {
    const root = await rootAgent(CAPPED_PARENT());
    const child = (await createDelegate(root, root.token)).agent!;
    const version = async () => (await world.api('GET', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken })).body.version;
    const before = await version();
    for (const [reason, mandate] of WIDER) {
      const put = await world.api('PUT', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken, key: `put-${++counter}`, body: { ...CAPPED_PARENT(), delegation: { allowed: false, maxDepth: 0 }, ...mandate } });
      expect([put.status, put.body.reason], JSON.stringify(mandate)).toEqual([400, reason]);
    }
    // A PUT replaces: a threshold it leaves out is none, which is wider than the parent's.
    const leftOut = await world.api('PUT', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken, key: `put-${++counter}`, body: { caps: CAPPED_PARENT().caps } });
    expect([leftOut.status, leftOut.body.reason]).toEqual([400, 'approval_wider_than_parent']);
    for (const patch of [{ perHoldUc: null }, { perHoldUc: credits(6) }, { perPeriodUc: null }, { periodS: 3_600 }]) {
      const patched = await world.api('PATCH', `/v1/owner/agents/${child.id}`, { token: root.ownerToken, body: { caps: patch } });
      expect([patched.status, patched.body.reason], JSON.stringify(patch)).toEqual([400, 'cap_wider_than_parent']);
    }
    expect(await version()).toBe(before);
    const narrowed = await world.api('PATCH', `/v1/owner/agents/${child.id}`, { token: root.ownerToken, body: { caps: { perHoldUc: credits(3) } } });
    expect(narrowed.status, JSON.stringify(narrowed.body)).toBe(200);
    expect(narrowed.body.caps).toEqual(caps(credits(3), credits(20)));
  });

  it("a parent narrowed below its delegate is not refused, and its narrower cap still binds the delegate's holds", async () => {
    const root = await rootAgent(CAPPED_PARENT());
    const child = (await createDelegate(root, root.token)).agent!;
    const narrowed = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: `narrow-${root.id}`, body: { ...CAPPED_PARENT(), caps: caps(credits(1), credits(20)) } });
    expect(narrowed.status, JSON.stringify(narrowed.body)).toBe(200);
    const offer = await shops[0].offer({ priceUc: credits(2) });
    const refused = await mint(world, child.token, offer.id);
    // Whose rule refused is a member, as FROZEN and a budget refusal name an ancestor (found from outside: in `detail` only).
    expect([refused.status, refused.body.code, refused.body.reason, refused.body.agentId]).toEqual([402, 'CAP_EXCEEDED', 'per_hold_cap', root.id]);
    // The delegate's own rule names no agent.
    const own = await world.api('PATCH', `/v1/owner/agents/${child.id}`, { token: root.ownerToken, body: { caps: { perHoldUc: credits(1) } } });
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    const narrowedAgain = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: `widen-${root.id}`, body: CAPPED_PARENT() });
    expect(narrowedAgain.status).toBe(200);
    const byOwn = await mint(world, child.token, offer.id);
    expect([byOwn.body.reason, 'agentId' in byOwn.body]).toEqual(['per_hold_cap', false]);
    // An ancestor's category rule names it too.
    const category = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: `category-${root.id}`, body: { ...CAPPED_PARENT(), allowedCategories: ['music'] } });
    expect(category.status, JSON.stringify(category.body)).toBe(200);
    const scoped = await mint(world, child.token, (await shops[0].offer({ priceUc: credits(1) })).id);
    expect([scoped.status, scoped.body.code, scoped.body.reason, scoped.body.agentId]).toEqual([403, 'SCOPE_FORBIDDEN', 'category_not_allowed', root.id]);
  });

  it("a parent's rolling cap, narrowed later, binds each delegate's own holds at once, over the parent's window, down the tree (found from outside)", async () => {
    const root = await rootAgent({ caps: caps(credits(5), credits(5), 3_600), delegation: { allowed: true, maxDepth: 2 } });
    const child = (await createDelegate(root, root.token, { delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const grandchild = (await createDelegate(child, child.token)).agent!;
    const offer = await shops[0].offer({ priceUc: credits(1) });
    expect((await mint(world, child.token, offer.id)).status).toBe(200);
    // The owner narrows the root to 2 credits an hour over a window of its own length: the delegates' caps (5 an
    // hour, inherited) stay as written, but the root's binds each of them.
    const narrowed = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: `narrow-period-${root.id}`, body: { caps: caps(credits(5), credits(2), 7_200), delegation: { allowed: true, maxDepth: 2 } } });
    expect(narrowed.status, JSON.stringify(narrowed.body)).toBe(200);
    expect((await mint(world, child.token, offer.id)).status).toBe(200);
    const refused = await mint(world, child.token, offer.id);
    expect([refused.status, refused.body.code, refused.body.reason, refused.body.agentId]).toEqual([402, 'CAP_EXCEEDED', 'per_period_cap', root.id]);
    expect(refused.body.detail).toContain(`its ancestor ${root.id}'s cap of 2000000 µc per 7200 s`);
    // Each agent's own holds: the grandchild has taken nothing yet, and the grandparent's cap binds it too.
    expect((await mint(world, grandchild.token, offer.id)).status).toBe(200);
    expect((await mint(world, grandchild.token, offer.id)).status).toBe(200);
    expect((await mint(world, grandchild.token, offer.id)).body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'per_period_cap' });
    // The merchant check asks the same rule, with no figures.
    const check = await world.api('POST', '/v1/access/merchant-check', { token: shops[0].key, body: { offerId: offer.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject: child.subject } } });
    expect(check.body.allowed).toBe(false);
    // Past the root's window, each may spend again.
    world.gw.clock.advance(7_201_000);
    try {
      const fresh = await world.agentIssuer.mint({ sub: child.subject, owner_email: child.ownerEmail }, { expiresInS: 7_201 + 600 });
      expect((await mint(world, fresh, offer.id)).status).toBe(200);
    } finally {
      world.gw.clock.advance(-7_201_000);
    }
  });
});

describe('a retired delegate', () => {
  it('is neither unfrozen nor frozen, and its mandate no longer changes (409 conflict), while its name still does', async () => {
    const root = await rootAgent({ delegation: { allowed: true, maxDepth: 1 } });
    const child = (await createDelegate(root, root.token)).agent!;
    expect((await world.api('POST', `/v1/owner/agents/${child.id}/freeze`, { token: root.ownerToken })).status).toBe(200);
    expect((await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-${child.id}` })).status).toBe(200);
    const before = (await world.api('GET', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken })).body.version;
    const refusals = [
      await world.api('POST', `/v1/owner/agents/${child.id}/unfreeze`, { token: root.ownerToken }),
      await world.api('POST', `/v1/owner/agents/${child.id}/freeze`, { token: root.ownerToken, body: { releaseHolds: true } }),
      await world.api('PUT', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken, key: `put-retired-${child.id}`, body: {} }),
      await world.api('PATCH', `/v1/owner/agents/${child.id}`, { token: root.ownerToken, body: { caps: { perHoldUc: credits(1) } } }),
    ];
    for (const refusal of refusals) {
      expect([refusal.status, refusal.body.code], JSON.stringify(refusal.body)).toEqual([409, 'conflict']);
      expect(refusal.body.detail).toContain(`agent ${child.id} is retired`);
    }
    const agent = (await world.api('GET', `/v1/owner/agents/${child.id}`, { token: root.ownerToken })).body;
    expect(agent).toMatchObject({ status: 'frozen', effectiveStatus: 'retired' });
    expect((await world.api('GET', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken })).body.version).toBe(before);
    const renamed = await world.api('PATCH', `/v1/owner/agents/${child.id}`, { token: root.ownerToken, body: { name: 'Old buyer' } });
    expect([renamed.status, renamed.body.name]).toEqual([200, 'Old buyer']);
  });
});

describe('reading the tree', () => {
  it('the owner reads the tree with usage; an agent its own subtree; anyone else 404', async () => {
    const root = await rootAgent({ ...PARENT_MANDATE(), merchants: { allow: null, deny: [] } });
    const child = (await createDelegate(root, root.token, { budgets: [{ id: 'daily', limitUc: credits(8), period: 'day' }], delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const grandchild = (await createDelegate(child, child.token, { budgets: [{ id: 'daily', limitUc: credits(3), period: 'day' }] })).agent!;
    const offer = await shops[0].offer({ priceUc: credits(2) });
    expect((await mint(world, grandchild.token, offer.id)).status).toBe(200);

    const tree = await world.api('GET', `/v1/owner/agents/${root.id}/delegates`, { token: root.ownerToken });
    expect(tree.status).toBe(200);
    expect(tree.body).toMatchObject({ agentId: root.id, truncated: false });
    expect(tree.body.nodes.map((n: { agent: { id: string; parentId: string | null; depth: number } }) => [n.agent.id, n.agent.parentId, n.agent.depth])).toEqual([
      [root.id, null, 0],
      [child.id, root.id, 1],
      [grandchild.id, child.id, 2],
    ]);
    // The grandchild's hold counts in its own budget and in each ancestor's.
    for (const [node, limit] of [[0, 10], [1, 8], [2, 3]] as const) {
      expect(tree.body.nodes[node].usage).toEqual([
        expect.objectContaining({ budgetId: 'daily', limitUc: credits(limit), spentUc: credits(2), remainingUc: credits(limit - 2), resetsAt: expect.any(Number) }),
      ]);
    }
    // An agent reads its own subtree (itself or below), and nothing above or beside it.
    const ownSubtree = await world.api('GET', `/v1/agents/${child.id}/delegates`, { token: child.token });
    expect(ownSubtree.body.nodes.map((n: { agent: { id: string } }) => n.agent.id)).toEqual([child.id, grandchild.id]);
    expect((await world.api('GET', `/v1/agents/${grandchild.id}/delegates`, { token: root.token })).status).toBe(200);
    expect((await world.api('GET', `/v1/agents/${root.id}/delegates`, { token: child.token })).status).toBe(404);
    const stranger = await rootAgent({});
    expect((await world.api('GET', `/v1/owner/agents/${root.id}/delegates`, { token: stranger.ownerToken })).status).toBe(404);
    expect((await world.api('GET', `/v1/agents/${root.id}/delegates`, { token: stranger.token })).status).toBe(404);
  });
});

describe("a delegate's spending", () => {
  it("allocates from its root's lots, charges its parent's budget, and a release gives back to both", async () => {
    const root = await rootAgent({ budgets: [{ id: 'daily', limitUc: credits(10), period: 'day' }], delegation: { allowed: true, maxDepth: 1 } });
    const child = (await createDelegate(root, root.token, { budgets: [{ id: 'daily', limitUc: credits(8), period: 'day' }, { id: 'books', limitUc: credits(5), period: 'day', category: 'books' }] })).agent!;
    const offer = await shops[0].offer({ priceUc: credits(3) });
    const held = await mint(world, child.token, offer.id);
    expect(held.status).toBe(200);
    const redemption = held.body.redemption;
    const lots = (await world.api('GET', '/v1/me', { token: root.token })).body.lots;
    expect(redemption.allocations.map((a: { lotId: string }) => a.lotId)).toEqual([lots[0].id]);
    expect(await usageOf(root)).toEqual({ daily: credits(3) });
    expect(await usageOf(child)).toEqual({ daily: credits(3), books: credits(3) });
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, root.id)).toMatchObject({ heldUc: credits(3), availableUc: credits(97) });
    // The root's budget binds the child: 8 − 3 = 5 left for the child, but the books budget only 2.
    const overChild = await mint(world, child.token, offer.id);
    expect(overChild.status).toBe(402);
    expect(overChild.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'budget_exceeded', budget: { id: 'books', remainingUc: credits(2) } });

    const released = await world.api('POST', `/v1/redemptions/${redemption.id}/release`, { token: shops[0].key, key: `release-${redemption.id}`, body: {} });
    expect(released.status).toBe(200);
    expect(await usageOf(root)).toEqual({ daily: '0' });
    expect(await usageOf(child)).toEqual({ daily: '0', books: '0' });
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, root.id)).toMatchObject({ heldUc: '0', availableUc: credits(100) });
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it("siblings in one group-commit pass see each other's charges on their parent's budget", async () => {
    const root = await rootAgent({ budgets: [{ id: 'daily', limitUc: credits(2), period: 'day' }], delegation: { allowed: true, maxDepth: 1 } });
    const [a, b] = [(await createDelegate(root, root.token)).agent!, (await createDelegate(root, root.token)).agent!];
    const { ledger } = world.gw.services;
    const hold = (agentId: string) => ({ agentId, acceptorId: shops[0].merchantId, merchantId: shops[0].merchantId, offerId: 'off_pass', category: 'books', amountUc: CREDIT_UC, lifetimeS: 900 });
    const outcomes = await world.gw.gateway.db.transaction((tx) => ledger.holdMany(tx, [hold(a.id), hold(b.id), hold(a.id), hold(root.id)]));
    const refusal = (error: unknown) => error as ApiError & { options: { extra: { budget?: { agentId?: string } } } };
    expect(outcomes.map((o) => (o.ok ? 'held' : `${refusal(o.error).code} ${refusal(o.error).options.extra.budget?.agentId}`))).toEqual([
      'held',
      'held',
      `CAP_EXCEEDED ${root.id}`,
      'CAP_EXCEEDED undefined',
    ]);
    expect(await usageOf(root)).toEqual({ daily: credits(2) });
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it("an ancestor's budget refuses the child, naming whose budget it is", async () => {
    const root = await rootAgent({ budgets: [{ id: 'daily', limitUc: credits(4), period: 'day' }], delegation: { allowed: true, maxDepth: 1 } });
    const child = (await createDelegate(root, root.token, { budgets: [{ id: 'daily', limitUc: credits(4), period: 'day' }] })).agent!;
    const offer = await shops[0].offer({ priceUc: credits(3) });
    expect((await mint(world, root.token, offer.id)).status).toBe(200);
    const refused = await mint(world, child.token, offer.id);
    expect(refused.status).toBe(402);
    expect(refused.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'budget_exceeded', budget: { id: 'daily', agentId: root.id, remainingUc: credits(1) } });
    const periods = await budgetPeriodTotals(world.gw.gateway.db, [root.id, child.id]);
    expect(periods.map((p) => [p.agent_id, p.spent_uc, p.covered_uc])).toEqual([[root.id, 3n * CREDIT_UC, 3n * CREDIT_UC]]);
  });

  it("an ancestor's approval threshold, lowered after the child was made, asks for approval naming whose threshold it is", async () => {
    const root = await rootAgent({ approvalAboveUc: credits(5), delegation: { allowed: true, maxDepth: 1 } });
    const child = (await createDelegate(root, root.token, { approvalAboveUc: credits(5) })).agent!;
    const lowered = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: `lower-${++counter}`, body: { approvalAboveUc: credits(1), delegation: { allowed: true, maxDepth: 1 } } });
    expect(lowered.status, JSON.stringify(lowered.body)).toBe(200);
    const offer = await shops[0].offer({ priceUc: credits(2) });
    const asked = await mint(world, child.token, offer.id);
    expect(asked.status, JSON.stringify(asked.body)).toBe(402);
    // As every refusal an ancestor's rule makes (found from outside: this one named the ancestor in its detail only).
    expect(asked.body).toMatchObject({ code: 'approval_required', reason: 'above_approval_threshold', agentId: root.id, intent: { agentId: child.id } });
    const own = await mint(world, root.token, offer.id);
    expect(own.body).toMatchObject({ code: 'approval_required', reason: 'above_approval_threshold' });
    expect(own.body.agentId).toBeUndefined();
  });

  it('a frozen root freezes each descendant at its next mint; unfreezing restores each', async () => {
    const root = await rootAgent({ delegation: { allowed: true, maxDepth: 2 } });
    const child = (await createDelegate(root, root.token, { delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const grandchild = (await createDelegate(child, child.token)).agent!;
    const offer = await shops[0].offer({ priceUc: credits(1) });
    expect((await world.api('POST', `/v1/owner/agents/${root.id}/freeze`, { token: root.ownerToken })).status).toBe(200);
    for (const agent of [root, child, grandchild]) {
      const refused = await mint(world, agent.token, offer.id);
      expect(refused.status).toBe(403);
      expect(refused.body).toMatchObject({ code: 'FROZEN', reason: 'frozen', ...(agent === root ? {} : { agentId: root.id }) });
    }
    // A frozen tree grows no delegate either, asked by an agent of it or by the owner, and creates nothing.
    const before = await agentCount(root.ownerToken);
    for (const [parent, token] of [[root, root.token], [child, child.token], [child, root.ownerToken]] as const) {
      const { res } = await createDelegate(parent, token);
      expect(res.status, JSON.stringify(res.body)).toBe(403);
      expect(res.body).toMatchObject({ code: 'FROZEN', reason: 'frozen', agentId: root.id });
    }
    expect(await agentCount(root.ownerToken)).toBe(before);
    // The merchant check answers for the tree too.
    const check = await world.api('POST', '/v1/access/merchant-check', { token: shops[0].key, body: { offerId: offer.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject: grandchild.subject } } });
    expect(check.body.allowed).toBe(false);
    expect((await world.api('POST', `/v1/owner/agents/${root.id}/unfreeze`, { token: root.ownerToken })).status).toBe(200);
    for (const agent of [root, child, grandchild]) expect((await mint(world, agent.token, offer.id)).status).toBe(200);
    // A frozen child freezes its own subtree only.
    expect((await world.api('POST', `/v1/owner/agents/${child.id}/freeze`, { token: root.ownerToken })).status).toBe(200);
    expect((await mint(world, grandchild.token, offer.id)).body).toMatchObject({ code: 'FROZEN', agentId: child.id });
    expect((await mint(world, root.token, offer.id)).status).toBe(200);
  });

  it('every read shows a delegate below a frozen ancestor as effectively frozen, naming the ancestor, its own status kept', async () => {
    const root = await rootAgent({ delegation: { allowed: true, maxDepth: 2 } });
    const child = (await createDelegate(root, root.token, { delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const grandchild = (await createDelegate(child, child.token)).agent!;
    const offer = await shops[0].offer({ priceUc: credits(1) });
    const mcp = await connect(world.url, await world.accessToken({ sub: grandchild.id, scope: 'svc:agent' }, `${world.url}/mcp`), 'modern');
    /** The agent as each face shows it: the owner's GET and list, the tree, the agent's own GET /v1/me and MCP whoami. */
    const faces = async (agent: TestAgent) => {
      const listed = (await world.api('GET', '/v1/owner/agents?limit=100', { token: root.ownerToken })).body.agents;
      const tree = (await world.api('GET', `/v1/owner/agents/${root.id}/delegates`, { token: root.ownerToken })).body.nodes;
      const whoami = agent === grandchild ? ((await mcp.callTool({ name: 'whoami', arguments: {} })) as { structuredContent: { agent: unknown } }).structuredContent.agent : undefined;
      return [
        (await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: root.ownerToken })).body,
        listed.find((a: { id: string }) => a.id === agent.id),
        tree.find((n: { agent: { id: string } }) => n.agent.id === agent.id).agent,
        (await world.api('GET', '/v1/me', { token: agent.token })).body.agent,
        ...(whoami === undefined ? [] : [whoami]),
      ];
    };
    const reads = async (agent: TestAgent) => (await faces(agent)).map(({ status, effectiveStatus, frozenBy }) => ({ status, effectiveStatus, frozenBy }));
    const shown = (status: string, effectiveStatus: string, frozenBy: string | null) => ({ status, effectiveStatus, frozenBy });
    try {
      for (const agent of [root, child, grandchild]) for (const read of await reads(agent)) expect(read).toEqual(shown('active', 'active', null));
      const frozen = await world.api('POST', `/v1/owner/agents/${root.id}/freeze`, { token: root.ownerToken });
      expect(frozen.body).toMatchObject(shown('frozen', 'frozen', root.id));
      for (const read of await reads(root)) expect(read).toEqual(shown('frozen', 'frozen', root.id));
      for (const agent of [child, grandchild]) for (const read of await reads(agent)) expect(read).toEqual(shown('active', 'frozen', root.id));
      // frozenBy is the agent a refusal names: the nearest frozen one, the agent itself first, then its parent.
      expect((await world.api('POST', `/v1/owner/agents/${child.id}/freeze`, { token: root.ownerToken })).body).toMatchObject(shown('frozen', 'frozen', child.id));
      for (const read of await reads(grandchild)) expect(read).toEqual(shown('active', 'frozen', child.id));
      expect((await mint(world, grandchild.token, offer.id)).body).toMatchObject({ code: 'FROZEN', agentId: child.id });
      // Unfreezing an agent whose ancestor is still frozen answers it as still stopped.
      expect((await world.api('POST', `/v1/owner/agents/${child.id}/unfreeze`, { token: root.ownerToken })).body).toMatchObject(shown('active', 'frozen', root.id));
      expect((await world.api('POST', `/v1/owner/agents/${root.id}/unfreeze`, { token: root.ownerToken })).body).toMatchObject(shown('active', 'active', null));
      for (const agent of [root, child, grandchild]) for (const read of await reads(agent)) expect(read).toEqual(shown('active', 'active', null));
      // A retired delegate is stopped for good: `retired`, whatever the freezes.
      expect((await world.api('POST', `/v1/owner/agents/${grandchild.id}/retire`, { token: root.ownerToken, key: `retire-effective-${grandchild.id}` })).status).toBe(200);
      const retired = (await world.api('GET', `/v1/owner/agents/${grandchild.id}`, { token: root.ownerToken })).body;
      expect(retired).toMatchObject({ ...shown('active', 'retired', null), retiredAt: expect.any(Number) });
    } finally {
      await mcp.close();
    }
  });

  it('credit is granted to the root: a grant to a delegate is refused naming the root', async () => {
    const root = await rootAgent({ delegation: { allowed: true, maxDepth: 1 } });
    const child = (await createDelegate(root, root.token)).agent!;
    const refusal = await grant(world, child.id, CREDIT_UC).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(ApiError);
    expect(refusal).toMatchObject({ code: 'conflict', options: { extra: { reason: 'delegate_has_no_lots', rootAgentId: root.id } } });
    const lots = await world.gw.gateway.db.query('SELECT id FROM credit_lots WHERE agent_id = $1', [child.id]);
    expect(lots.rows).toEqual([]);
  });
});

describe('retiring a delegate', () => {
  it("releases its subtree's open holds (the root's balance restored exactly), stops the subtree for good, and replays", async () => {
    const root = await rootAgent({ budgets: [{ id: 'daily', limitUc: credits(20), period: 'day' }], delegation: { allowed: true, maxDepth: 2 } });
    const child = (await createDelegate(root, root.token, { delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const grandchild = (await createDelegate(child, child.token)).agent!;
    const offer = await shops[0].offer({ priceUc: credits(2) });
    const rootHold = await mint(world, root.token, offer.id);
    const childHold = await mint(world, child.token, offer.id);
    const grandchildHold = await mint(world, grandchild.token, offer.id);
    // One of the child's holds is captured first: what it spent stays spent.
    const captured = await mint(world, child.token, offer.id);
    expect((await world.api('POST', `/v1/redemptions/${captured.body.redemption.id}/capture`, { token: shops[0].key, key: `capture-${captured.body.redemption.id}`, body: {} })).status).toBe(200);
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, root.id)).toMatchObject({ availableUc: credits(92), heldUc: credits(6), capturedUc: credits(2) });

    expect((await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: child.token, key: 'self-retire' })).status).toBe(403);
    const withMember = await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-member-${child.id}`, body: { releaseHolds: false } });
    expect([withMember.status, withMember.body.code]).toEqual([400, 'invalid_input']);
    const retired = await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-${child.id}` });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    expect(retired.body).toMatchObject({ agent: { id: child.id, retiredAt: expect.any(Number) }, releasedHolds: 2, releasedUc: credits(4) });
    expect([...retired.body.retiredAgentIds].sort()).toEqual([child.id, grandchild.id].sort());
    // Exactly what the subtree held is back; the root's own hold and the capture stand.
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, root.id)).toMatchObject({ availableUc: credits(96), heldUc: credits(2), capturedUc: credits(2) });
    expect(await usageOf(root)).toEqual({ daily: credits(4) });
    for (const hold of [childHold, grandchildHold]) {
      expect((await world.api('GET', `/v1/redemptions/${hold.body.redemption.id}`, { token: shops[0].key })).body.state).toBe('released');
    }
    expect((await world.api('GET', `/v1/redemptions/${rootHold.body.redemption.id}`, { token: shops[0].key })).body.state).toBe('held');
    for (const agent of [child, grandchild]) {
      expect((await mint(world, agent.token, offer.id)).body).toMatchObject({ code: 'FROZEN', reason: 'retired' });
    }
    expect((await mint(world, root.token, offer.id)).status).toBe(200);
    // The same key replays; retiring again answers the retired delegate unchanged; a root is frozen, not retired.
    expect((await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-${child.id}` })).body).toEqual(retired.body);
    expect((await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-again-${child.id}` })).body).toMatchObject({ releasedHolds: 0, releasedUc: '0' });
    expect((await world.api('POST', `/v1/owner/agents/${root.id}/retire`, { token: root.ownerToken, key: `retire-${root.id}` })).status).toBe(409);
    expect((await createDelegate(child, root.ownerToken)).res.status).toBe(409);
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});

describe('retiring a delegate while it registers one (PostgreSQL: concurrent transactions)', () => {
  it.runIf(onPostgres())("retires the delegate registered while the retirement waited for its parent's lock (found from outside)", async () => {
    const root = await rootAgent({ delegation: { allowed: true, maxDepth: 2 } });
    const child = (await createDelegate(root, root.token, { delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const { db } = world.gw.gateway;
    const subject = `late-${++counter}`;
    let commit: (() => void) | undefined;
    // The registration holds the child's row until it commits, as a concurrent POST …/delegates does.
    const registering = db.transaction(async (tx) => {
      const late = await world.gw.services.identity.registerDelegate(tx, { kind: 'agent', agentId: child.id, ownerId: undefined, id: child.id } as never, child.id, {
        name: subject,
        identity: { issuer: world.agentIssuer.issuer, subject },
        mandate: {},
      });
      await new Promise<void>((resolve) => (commit = resolve));
      return late;
    });
    await waitFor(() => commit, { what: 'the registration to hold its parent' });
    const retiring = world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-race-${child.id}` });
    await waitFor(
      async () => (await db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")).rows[0]!.n,
      { until: (n) => n > 0, what: "the retirement to wait for the child's lock" },
    );
    commit!();
    const late = await registering;
    const retired = await retiring;
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    expect([...retired.body.retiredAgentIds].sort()).toEqual([child.id, late.id].sort());
    const read = await world.api('GET', `/v1/owner/agents/${late.id}`, { token: root.ownerToken });
    expect(read.body.effectiveStatus).toBe('retired');
    expect((await world.api('PUT', `/v1/owner/agents/${late.id}/mandate`, { token: root.ownerToken, key: `late-mandate-${late.id}`, body: {} })).status).toBe(409);
  });
});

describe("a retirement's reach", () => {
  it("revokes the subtree's vouchers as a freeze does: one voucher.revoked per merchant, the feed lists them, a capture is 409 voucher_revoked", async () => {
    const root = await rootAgent({ delegation: { allowed: true, maxDepth: 2 } });
    const child = (await createDelegate(root, root.token, { delegation: { allowed: true, maxDepth: 1 } })).agent!;
    const grandchild = (await createDelegate(child, child.token)).agent!;
    const offers = [await shops[0].offer({ priceUc: credits(1) }), await shops[1].offer({ priceUc: credits(1) })] as const;
    const held = {
      shop0: [(await mint(world, child.token, offers[0].id)).body.redemption.id, (await mint(world, grandchild.token, offers[0].id)).body.redemption.id],
      shop1: [(await mint(world, grandchild.token, offers[1].id)).body.redemption.id],
    };
    const rootHold = (await mint(world, root.token, offers[0].id)).body.redemption.id;
    const feedEnd = async (shop: Shop) => (await world.api('GET', `/v1/merchants/${shop.merchantId}/revocations?limit=500`, { token: shop.key })).body;
    const since = await Promise.all(shops.map(async (shop) => (await feedEnd(shop)).nextSince as string));

    const retired = await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-reach-${child.id}` });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    expect(retired.body).toMatchObject({ releasedHolds: 3, releasedUc: credits(3) });
    const retiredAt = retired.body.agent.retiredAt as number;

    for (const [index, shop] of shops.entries()) {
      const mine = index === 0 ? held.shop0 : held.shop1;
      const feed = await world.api('GET', `/v1/merchants/${shop.merchantId}/revocations?since=${since[index]!}`, { token: shop.key });
      expect(feed.body.revocations.map((r: { holdId: string }) => r.holdId).sort()).toEqual([...mine].sort());
      for (const entry of feed.body.revocations) expect(entry).toMatchObject({ agentId: child.id, reason: 'agent_retired', revokedAt: retiredAt });
      const events = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE merchant_id = $1 AND type = 'voucher.revoked' AND payload LIKE $2`, [shop.merchantId, `%${mine[0]!}%`]);
      expect(events.rows.map((row) => JSON.parse(row.payload).data.revocation)).toEqual([{ agentId: child.id, reason: 'agent_retired', holdIds: expect.arrayContaining(mine), revokedAt: retiredAt }]);
    }
    const capture = await world.api('POST', `/v1/redemptions/${held.shop0[0]!}/capture`, { token: shops[0].key, key: `capture-retired-${held.shop0[0]!}`, body: {} });
    expect([capture.status, capture.body]).toMatchObject([409, { code: 'voucher_revoked', holdId: held.shop0[0]!, reason: 'agent_retired', revokedAt: retiredAt }]);
    // The root's own hold is not the subtree's: still held, its voucher good.
    expect((await world.api('POST', `/v1/redemptions/${rootHold}/capture`, { token: shops[0].key, key: `capture-root-${rootHold}`, body: {} })).status).toBe(200);
    // Retiring again reaches nothing more: no second event, no second feed row.
    expect((await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: root.ownerToken, key: `retire-reach-again-${child.id}` })).body).toMatchObject({ releasedHolds: 0 });
    expect((await world.api('GET', `/v1/merchants/${shops[0].merchantId}/revocations?since=${since[0]}`, { token: shops[0].key })).body.revocations).toHaveLength(2);
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});

describe('the MCP face', () => {
  it('lists create_delegate only to an agent whose mandate allows delegates, and registers a child with it', async () => {
    const root = await rootAgent({ budgets: [{ id: 'daily', limitUc: credits(10), period: 'day' }], delegation: { allowed: true, maxDepth: 1 } });
    const plain = await rootAgent({});
    const mcpUrl = `${world.url}/mcp`;
    const toolsOf = async (agentId: string) => {
      const client = await connect(world.url, await world.accessToken({ sub: agentId, scope: 'svc:agent' }, mcpUrl), 'modern');
      try {
        return { client, names: (await client.listTools()).tools.map((tool) => tool.name) };
      } catch (error) {
        await client.close();
        throw error;
      }
    };
    const listed = await toolsOf(root.id);
    const unlisted = await toolsOf(plain.id);
    try {
      expect(listed.names).toContain('create_delegate');
      expect(unlisted.names).not.toContain('create_delegate');
      const subject = `mcp-delegate-${++counter}`;
      const result = await listed.client.callTool({
        name: 'create_delegate',
        arguments: { id: root.id, name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, mandate: { budgets: [{ id: 'daily', limitUc: credits(4), period: 'day' }] }, idempotencyKey: `mcp-${subject}` },
      });
      expect((result as { structuredContent: unknown }).structuredContent).toMatchObject({ parentId: root.id, depth: 1 });
      const wider = await listed.client.callTool({
        name: 'create_delegate',
        arguments: { id: root.id, name: 'x', identity: { issuer: world.agentIssuer.issuer, subject: `mcp-wide-${counter}` }, mandate: { budgets: [] }, idempotencyKey: `mcp-wide-${counter}` },
      });
      expect(wider.isError).toBe(true);
      expect(JSON.stringify(wider.content)).toContain('budget_wider_than_parent');
    } finally {
      await listed.client.close();
      await unlisted.client.close();
    }
  });
});
