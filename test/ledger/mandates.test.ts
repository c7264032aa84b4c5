// Spending mandates: the owner's rules for one agent, versioned and hashed, enforced at every hold. What
// concurrency, periods and the model-based test hold are in their own files; this one holds the contract
// of the resource and each rule's refusal.
import { createHash } from 'node:crypto';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { connect, toolBody } from '../mcp/helpers.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});

afterAll(async () => {
  await world?.close();
});

async function fundedAgent(settings: Record<string, unknown> = {}) {
  const agent = await world.createAgent(`mandate${++counter}@example.com`, `mandate-agent-${counter}`, { allowedCategories: ['books', 'music'], ...settings });
  await grant(world, agent.id, 100_000_000n);
  return agent;
}

const put = (agent: { id: string; ownerToken: string }, body: unknown) =>
  world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `mandate-${++counter}`, body });
const get = (agent: { id: string; ownerToken: string }) => world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken });

describe('the mandate resource', () => {
  it('every agent has version 1 from registration; PUT makes the next, and each version keeps its canonical JSON and hash', async () => {
    const agent = await fundedAgent({ caps: { perHoldUc: '7000000' } });
    const first = await get(agent);
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ agentId: agent.id, version: 1, allowedCategories: ['books', 'music'], caps: { perHoldUc: '7000000', perPeriodUc: null }, budgets: [], usage: [] });
    const rules = { allowedCategories: ['books'], budgets: [{ id: 'daily', limitUc: '2000000', period: 'day' }], approvalAboveUc: '50000000', timeZone: 'Europe/Paris' };
    const second = await put(agent, rules);
    expect(second.status).toBe(200);
    expect(second.body).toMatchObject({ version: 2, ...rules, allowedServices: ['*'], caps: { perHoldUc: null }, merchants: { allow: null, deny: [] }, alertThresholds: [80, 100] });
    expect(second.body.usage).toEqual([
      { budgetId: 'daily', period: 'day', limitUc: '2000000', periodStart: expect.any(Number), resetsAt: expect.any(Number), spentUc: '0', remainingUc: '2000000' },
    ]);
    expect((await get(agent)).body).toEqual(second.body);

    for (const version of [1, 2]) {
      const kept = await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions/${version}`, { token: agent.ownerToken });
      expect(kept.status).toBe(200);
      expect(createHash('sha256').update(kept.body.canonical, 'utf8').digest('base64url')).toBe(kept.body.hash);
      const document = JSON.parse(kept.body.canonical);
      expect(document).toMatchObject({ agentId: agent.id, version });
    }
    const current = JSON.parse((await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions/2`, { token: agent.ownerToken })).body.canonical);
    const { hash, usage, ...shown } = second.body;
    expect(current).toEqual(shown);
    const list = await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions?limit=1`, { token: agent.ownerToken });
    expect(list.body).toMatchObject({ hasMore: true, versions: [{ version: 2 }] });
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions/9`, { token: agent.ownerToken })).status).toBe(404);
    // A version in the path is written in decimal digits, as an integer in a query is (found from outside: 0x2 read as 2).
    for (const loose of ['0x2', '+2', '02', '2e0', '%202']) {
      const res = await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions/${loose}`, { token: agent.ownerToken });
      expect([res.status, res.body.detail], loose).toEqual([400, 'params/version must be an integer in decimal digits, like 20']);
    }
  });

  it("stores a zone in IANA's case, so the same rules spelled in another case make the same document", async () => {
    const agent = await fundedAgent();
    for (const [sent, stored] of [['Europe/Paris', 'Europe/Paris'], ['europe/paris', 'Europe/Paris'], ['EUROPE/PARIS', 'Europe/Paris'], ['utc', 'UTC'], ['Asia/Kolkata', 'Asia/Kolkata']]) {
      const res = await put(agent, { timeZone: sent });
      expect([sent, res.status, res.body.timeZone]).toEqual([sent, 200, stored]);
      const kept = await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions/${res.body.version}`, { token: agent.ownerToken });
      expect(JSON.parse(kept.body.canonical).timeZone).toBe(stored);
    }
  });

  it("PATCH's caps and allowances are a view of the mandate: they write a version and read back the same", async () => {
    const agent = await fundedAgent();
    const patched = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { caps: { perPeriodUc: '9000000', periodS: 3600 }, allowedServices: ['github-public'] } });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ caps: { perHoldUc: null, perPeriodUc: '9000000', periodS: 3600 }, allowedServices: ['github-public'] });
    expect((await get(agent)).body).toMatchObject({ version: 2, caps: { perPeriodUc: '9000000', periodS: 3600 }, allowedServices: ['github-public'] });
    // A name alone is not policy: no new version.
    await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { name: 'Renamed' } });
    expect((await get(agent)).body.version).toBe(2);
  });

  it('refuses rules it cannot keep, by name, and writes no version', async () => {
    const agent = await fundedAgent();
    const refusals = [
      [{ budgets: [{ id: 'a', limitUc: '1', period: 'day' }, { id: 'a', limitUc: '2', period: 'week' }] }, /"detail":"body\/budgets\/1\/id \\"a\\" is used twice/],
      [{ budgets: [{ id: 'a', limitUc: '1', period: 'day', category: 'books', merchantId: 'mer_x' }] }, /"detail":"body\/budgets\/0 names more than one/],
      [{ budgets: [{ id: 'a', limitUc: '0', period: 'day' }] }, /"detail":"body\/budgets\/0\/limitUc must be more than 0"/],
      [{ timeZone: 'Mars/Olympus' }, /"detail":"body\/timeZone \\"Mars\/Olympus\\" is not an IANA time zone/],
      [{ notBefore: 2000, notAfter: 1000 }, /"detail":"body\/notAfter must be later than notBefore"/],
      [{ allowedServices: ['teleport'] }, /"detail":"body\/allowedServices\/0 \\"teleport\\" is not a built-in service/],
      [{ delegation: { allowed: true, maxDepth: 0 } }, /"detail":"body\/delegation\/allowed must be true exactly when maxDepth is at least 1/],
      [{ budgets: [{ id: 'a', limitUc: '1', period: 'fortnight' }] }, /period/],
      [{ budgets: Array.from({ length: 21 }, (_, i) => ({ id: `b${i}`, limitUc: '1', period: 'day' })) }, /budgets/],
      // A member the mandate does not have is named, not only the object holding it.
      [{ budget: [] }, /"detail":"body\/budget is not a known member here"/],
      [{ budgets: [{ id: 'a', limitUc: '1', period: 'day', merchant: 'mer_x' }] }, /body\/budgets\/0\/merchant is not a known member here/],
      // A budget that could never count anything: a merchant that does not exist, a category no offer can have.
      [{ budgets: [{ id: 'a', limitUc: '1', period: 'day', merchantId: 'mer_nonexistent' }] }, /"detail":"body\/budgets\/0\/merchantId \\"mer_nonexistent\\" names no merchant/],
      [{ budgets: [{ id: 'a', limitUc: '1', period: 'day', category: 'BOOKS' }] }, /body\/budgets\/0\/category/],
      [{ allowedCategories: ['Books'] }, /body\/allowedCategories\/0/],
      [{ allowedCategories: ['books stuff'] }, /body\/allowedCategories\/0/],
    ] as const;
    for (const [body, detail] of refusals) {
      const res = await put(agent, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.code).toBe('invalid_input');
      expect(JSON.stringify(res.body)).toMatch(detail);
      // The gateway's own rules name the member as its schema does: `detail` says `errors`' first, from the body's root.
      expect(res.body.errors?.[0], JSON.stringify(body)).toMatchObject({ path: expect.stringMatching(/^body(\/|$)/) });
      expect(res.body.detail).toBe(`${res.body.errors[0].path} ${res.body.errors[0].message}`);
    }
    expect((await get(agent)).body.version).toBe(1);
    // A verified merchant named by its domain: refused, with the id to use.
    const { rows } = await world.gw.gateway.db.query<{ domain: string }>('SELECT domain FROM merchants WHERE id = $1', [shop.merchantId]);
    const byDomain = await put(agent, { budgets: [{ id: 'a', limitUc: '1', period: 'day', merchantId: rows[0]!.domain }] });
    expect(byDomain.status).toBe(400);
    expect(byDomain.body.detail).toBe(`body/budgets/0/merchantId "${rows[0]!.domain}" is a domain; a budget names its merchant by id (the merchant verified on it is ${shop.merchantId})`);
    expect((await put(agent, { budgets: [{ id: 'a', limitUc: '1', period: 'day', merchantId: shop.merchantId }], allowedCategories: ['books', '*'] })).status).toBe(200);
  });

  it('writes amounts in one form: "0005000000" is "5000000"', async () => {
    const agent = await fundedAgent();
    const set = await put(agent, {
      budgets: [{ id: 'd', limitUc: '0005000000', period: 'day' }],
      caps: { perHoldUc: '02000000', perPeriodUc: null, periodS: 86_400 },
      approvalAboveUc: '0005000000',
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body).toMatchObject({ budgets: [{ limitUc: '5000000' }], caps: { perHoldUc: '2000000' }, approvalAboveUc: '5000000' });
    const version = await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions/${set.body.version}`, { token: agent.ownerToken });
    expect(version.body.canonical).toContain('"limitUc":"5000000"');
    // maxUc and its older name maxAmount are one limit, compared as amounts.
    const voucher = await world.api('POST', '/v1/vouchers', { token: agent.token, key: `mandate-${++counter}`, body: { offerId: (await shop.offer({ priceUc: '1000000' })).id, maxUc: '1000000', maxAmount: '01000000' } });
    expect(voucher.status, JSON.stringify(voucher.body)).toBe(200);
  });

  it("another owner's agent is not found, and an agent credential is not an owner", async () => {
    const agent = await fundedAgent();
    const stranger = await fundedAgent();
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: stranger.ownerToken })).status).toBe(404);
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: stranger.ownerToken, key: 'stranger', body: {} })).status).toBe(404);
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.token })).status).toBe(403);
  });

  it('names its version in an ETag, and a PUT with If-Match changes only that version: another in force is 412 with currentVersion', async () => {
    const agent = await fundedAgent();
    const read = await get(agent);
    expect(read.headers.get('etag')).toBe('"1"');
    const putIf = (ifMatch: string, body: unknown, key = `mandate-${++counter}`) =>
      world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key, body, headers: { 'if-match': ifMatch } });

    // Two places read version 1; the first write wins, the second is told, and nothing of it is written.
    const first = await putIf('"1"', { allowedCategories: ['books'] }, 'if-match-first');
    expect([first.status, first.body.version, first.headers.get('etag')]).toEqual([200, 2, '"2"']);
    const second = await putIf('"1"', { allowedCategories: ['music'] }, 'if-match-second');
    expect(second.status).toBe(412);
    expect(second.body).toMatchObject({ code: 'precondition_failed', status: 412, currentVersion: 2 });
    expect(second.body.detail).toContain('version 2, not 1');
    expect((await get(agent)).body).toMatchObject({ version: 2, allowedCategories: ['books'] });
    // The refusal is the key's answer: the same request replays it, and the first write replays its 200 and ETag.
    expect(await putIf('"1"', { allowedCategories: ['music'] }, 'if-match-second')).toMatchObject({ status: 412, body: { currentVersion: 2 } });
    const replay = await putIf('"1"', { allowedCategories: ['books'] }, 'if-match-first');
    expect([replay.status, replay.headers.get('idempotent-replayed'), replay.headers.get('etag')]).toEqual([200, 'true', '"2"']);
    // The same key with another If-Match is another request.
    expect((await putIf('"2"', { allowedCategories: ['books'] }, 'if-match-first')).body.code).toBe('idempotency_key_reused');

    expect((await putIf('"2"', { allowedCategories: ['music'] })).body).toMatchObject({ version: 3, allowedCategories: ['music'] });
    expect((await putIf('*', { allowedCategories: ['books'] })).body.version).toBe(4);
    expect((await put(agent, { allowedCategories: ['music'] })).body.version).toBe(5);

    for (const [header, why] of [
      ['W/"5"', 'weak entity tag'],
      ['"4", "5"', 'several entity tags'],
      ['5', 'not an entity tag'],
      ['"v5"', 'not a version number'],
      ['"0"', 'not a version number'],
      ['"99999999999"', 'not a version number'],
    ]) {
      const refused = await putIf(header!, { allowedCategories: ['music'] });
      expect([header, refused.status, refused.body.code]).toEqual([header, 400, 'invalid_input']);
      expect(refused.body.detail).toContain(why);
    }
    expect((await get(agent)).body.version).toBe(5);
    // If-None-Match guards nothing on a resource that always exists: refused, not ignored (found from outside).
    for (const header of ['*', '"5"', '"4"']) {
      const refused = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `mandate-${++counter}`, body: { allowedCategories: ['music'] }, headers: { 'if-none-match': header } });
      expect([header, refused.status, refused.body.code]).toEqual([header, 400, 'invalid_input']);
      expect(refused.body.detail).toContain('If-None-Match is not taken by this write');
    }
    expect((await get(agent)).body.version).toBe(5);
  });

  // Found from outside (bb81): a PATCH of caps with a stale If-Match wrote a new mandate version all the same.
  it("a PATCH of the agent (its caps and allowances are mandate rules) honours If-Match with the mandate's version, as the PUT does", async () => {
    const agent = await fundedAgent();
    const patchIf = (ifMatch: string | undefined, body: unknown, key = `mandate-${++counter}`) =>
      world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, key, body, headers: ifMatch === undefined ? {} : { 'if-match': ifMatch } });
    expect((await put(agent, { approvalAboveUc: '5000000' })).body.version).toBe(2);

    const stale = await patchIf('"1"', { caps: { perHoldUc: '9000000' } }, 'patch-stale');
    expect(stale.status).toBe(412);
    expect(stale.body).toMatchObject({ code: 'precondition_failed', currentVersion: 2 });
    expect(stale.body.detail).toContain('version 2, not 1');
    // Nothing of it is written, the name neither: the whole PATCH is made on the version named, or not at all.
    expect(await patchIf('"1"', { name: 'Renamed' })).toMatchObject({ status: 412 });
    expect((await get(agent)).body).toMatchObject({ version: 2, caps: { perHoldUc: null } });
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.name).not.toBe('Renamed');

    const current = await patchIf('"2"', { caps: { perHoldUc: '9000000' } });
    expect(current.status, JSON.stringify(current.body)).toBe(200);
    expect((await get(agent)).body).toMatchObject({ version: 3, caps: { perHoldUc: '9000000' } });
    expect((await patchIf('*', { caps: { perHoldUc: '8000000' } })).status).toBe(200);
    expect((await patchIf(undefined, { caps: { perHoldUc: '7000000' } })).status).toBe(200);
    expect((await get(agent)).body.version).toBe(5);
    for (const header of ['W/"5"', '"garbage"']) {
      const refused = await patchIf(header, { caps: { perHoldUc: '6000000' } });
      expect(refused).toMatchObject({ status: 400, body: { code: 'invalid_input' } });
      // The agent's own GET names no version: the refusal says where the tag is read (found from outside, bb134).
      expect(refused.body.detail).toContain(`GET /v1/owner/agents/{id}/mandate answered`);
    }
    const documented = (await world.api('GET', '/openapi.json')).body.paths['/v1/owner/agents/{id}'].patch.parameters.find((p: { in: string; name: string }) => p.in === 'header' && p.name === 'If-Match');
    expect(documented.description).toContain('The ETag GET /v1/owner/agents/{id}/mandate answered');
    // Over MCP, the same check is the argument ifVersion.
    const owner = await connect(world.url, agent.ownerToken, 'modern');
    try {
      const refused = await owner.callTool({ name: 'update_agent', arguments: { id: agent.id, caps: { perHoldUc: '1000000' }, ifVersion: 4, idempotencyKey: `mandate-${++counter}` } });
      expect(refused.isError).toBe(true);
      expect(toolBody(refused)).toMatchObject({ code: 'precondition_failed', currentVersion: 5 });
      // A call naming nothing to change is refused as over HTTP (an empty PATCH body), with or without ifVersion (found from outside, bb82).
      for (const nothing of [{ id: agent.id }, { id: agent.id, ifVersion: 5 }]) {
        const empty = await owner.callTool({ name: 'update_agent', arguments: { ...nothing, idempotencyKey: `mandate-${++counter}` } });
        expect(toolBody(empty)).toMatchObject({ code: 'invalid_input', detail: expect.stringContaining('nothing to change') });
      }
      expect(await patchIf(undefined, {})).toMatchObject({ status: 400, body: { code: 'invalid_input' } });
    } finally {
      await owner.close();
    }
    expect((await get(agent)).body).toMatchObject({ version: 5, caps: { perHoldUc: '7000000' } });
  });
});

describe('enforcement at the hold', () => {
  it('a budget refuses what would pass its limit with 402 CAP_EXCEEDED naming the budget; a release gives it back', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '1000000' });
    expect((await put(agent, { budgets: [{ id: 'daily', limitUc: '2000000', period: 'day' }] })).status).toBe(200);
    const first = await mint(world, agent.token, offer.id);
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
    const refused = await mint(world, agent.token, offer.id);
    expect(refused.status).toBe(402);
    expect(refused.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'budget_exceeded', budget: { id: 'daily', limitUc: '2000000', remainingUc: '0', resetsAt: expect.any(Number) } });
    expect((await get(agent)).body.usage[0]).toMatchObject({ spentUc: '2000000', remainingUc: '0' });
    await world.api('POST', `/v1/redemptions/${first.body.redemption.id}/release`, { token: shop.key, key: `release-${++counter}`, body: {} });
    expect((await get(agent)).body.usage[0]).toMatchObject({ spentUc: '1000000', remainingUc: '1000000' });
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
  });

  it('a budget scoped to one merchant counts only that merchant; a capture keeps counting, a refund gives back', async () => {
    const agent = await fundedAgent();
    const other = await openShop(world);
    const [here, there] = [await shop.offer({ priceUc: '1500000' }), await other.offer({ priceUc: '1500000' })];
    await put(agent, { budgets: [{ id: 'shop', limitUc: '2000000', period: 'total', merchantId: shop.merchantId }] });
    const held = await mint(world, agent.token, here.id);
    expect(held.status).toBe(200);
    const over = await mint(world, agent.token, here.id);
    expect(over.status).toBe(402);
    // A total budget reads "in all", not "per total" (found from outside).
    expect(over.body.detail).toBe('the hold of 1500000 µc would exceed budget "shop" (2000000 µc in all; 500000 µc left)');
    expect((await mint(world, agent.token, there.id)).status).toBe(200);
    expect((await mint(world, agent.token, there.id)).status).toBe(200);
    const id = held.body.redemption.id;
    await world.api('POST', `/v1/redemptions/${id}/capture`, { token: shop.key, key: `capture-${++counter}`, body: {} });
    expect((await get(agent)).body.usage[0]).toMatchObject({ spentUc: '1500000', resetsAt: null, periodStart: 0 });
    // Named as a person knows it (found from outside: the console said "at mer_…"), in the agent's own view too.
    const { rows: named } = await world.gw.gateway.db.query<{ name: string }>('SELECT name FROM merchants WHERE id = $1', [shop.merchantId]);
    expect((await get(agent)).body.usage[0]).toMatchObject({ merchantId: shop.merchantId, merchantName: named[0]!.name });
    expect((await world.api('GET', '/v1/me', { token: agent.token })).body.budgets[0]).toMatchObject({ merchantId: shop.merchantId, merchantName: named[0]!.name });
    await world.api('POST', `/v1/redemptions/${id}/refunds`, { token: shop.key, key: `refund-${++counter}`, body: { amountUc: '1000000' } });
    expect((await get(agent)).body.usage[0]).toMatchObject({ spentUc: '500000', remainingUc: '1500000' });
    expect((await mint(world, agent.token, here.id)).status).toBe(200);
  });

  it('merchant rules allow or deny by merchant id or verified domain: 403 SCOPE_FORBIDDEN merchant_not_allowed', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer();
    const { rows } = await world.gw.gateway.db.query<{ domain: string }>('SELECT domain FROM merchants WHERE id = $1', [shop.merchantId]);
    await put(agent, { merchants: { allow: null, deny: [rows[0]!.domain.toUpperCase()] } });
    const denied = await mint(world, agent.token, offer.id);
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ code: 'SCOPE_FORBIDDEN', reason: 'merchant_not_allowed' });
    expect(denied.body.detail).toMatch(/: merchants\.deny names it$/);
    const elsewhere = await openShop(world);
    await put(agent, { merchants: { allow: [elsewhere.merchantId], deny: [] } });
    const outside = await mint(world, agent.token, offer.id);
    expect([outside.body.reason, outside.body.detail]).toEqual(['merchant_not_allowed', `the agent's mandate does not allow buying from merchant ${shop.merchantId} (${rows[0]!.domain})`]);
    // An empty allow list allows no merchant, and the refusal says so (found from outside: [] written for "any").
    await put(agent, { merchants: { allow: [], deny: [] } });
    expect((await mint(world, agent.token, offer.id)).body.detail).toMatch(/: its merchants\.allow is an empty list, which allows no merchant \(null allows every merchant not denied\)$/);
    await put(agent, { merchants: { allow: [shop.merchantId], deny: [] } });
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
  });

  it('takes merchant rules with one member: the other takes its default, as a rule left out does (found from outside: deny alone was refused for want of allow)', async () => {
    const agent = await fundedAgent();
    const denyOnly = await put(agent, { merchants: { deny: [shop.merchantId] } });
    expect(denyOnly.status, JSON.stringify(denyOnly.body)).toBe(200);
    expect((await get(agent)).body.merchants).toEqual({ allow: null, deny: [shop.merchantId] });
    expect((await put(agent, { merchants: { allow: [shop.merchantId] } })).status).toBe(200);
    expect((await get(agent)).body.merchants).toEqual({ allow: [shop.merchantId], deny: [] });
    expect((await put(agent, { merchants: {} })).status).toBe(200);
    expect((await get(agent)).body.merchants).toEqual({ allow: null, deny: [] });
  });

  it('refuses a merchant rule naming an id no merchant has (a mistyped deny would deny nothing), and takes a domain not yet registered (found from outside)', async () => {
    const agent = await fundedAgent();
    for (const merchants of [{ allow: null, deny: ['mer_typo'] }, { allow: [shop.merchantId, 'mer_nope'], deny: [] }]) {
      const refused = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `unknown-merchant-${Math.random()}`, body: { merchants } });
      expect(refused.status).toBe(400);
      expect(refused.body.detail).toMatch(/^body\/merchants\/(deny\/0 "mer_typo"|allow\/1 "mer_nope") names no merchant/);
      expect(refused.body.errors).toEqual([{ path: expect.stringMatching(/^body\/merchants\/(deny\/0|allow\/1)$/), message: expect.stringMatching(/^"mer_(typo|nope)" names no merchant/) }]);
    }
    await put(agent, { merchants: { allow: null, deny: ['not-yet-registered.example'] } });
    // Neither an id nor a domain: a deny entry that could match no merchant is refused too.
    for (const name of [` ${shop.merchantId}`, 'examplecom', 'not a domain!', 'mer-typo']) {
      const refused = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `not-a-name-${Math.random()}`, body: { merchants: { allow: null, deny: [name] } } });
      expect([refused.status, refused.body.detail], name).toEqual([400, expect.stringMatching(/^body\/merchants\/deny\/0 ".*" is neither a merchant id \(mer_…\) nor a domain: it /)]);
    }
  });

  it('refuses a merchant both allowed and denied, in any spelling of the same name, and stores nothing (found from outside, bb75)', async () => {
    const agent = await fundedAgent();
    const before = (await get(agent)).body;
    for (const merchants of [
      { allow: [shop.merchantId], deny: [shop.merchantId] },
      { allow: ['Shop-Both.Example.com'], deny: ['shop-both.example.com'] },
    ]) {
      const refused = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `allow-and-deny-${Math.random()}`, body: { merchants } });
      expect([refused.status, refused.body.detail]).toEqual([400, expect.stringMatching(/^body\/merchants\/allow\/0 names "(mer_\w+|shop-both\.example\.com)", which the deny list names too \(its item 0\): a merchant on both lists is denied, so keep it on one$/)]);
      expect(refused.body.errors).toEqual([{ path: 'body/merchants/allow/0', message: expect.stringMatching(/^names /) }]);
    }
    expect((await get(agent)).body.version).toBe(before.version);
  });

  it('outside its validity window a mandate refuses every purchase: 403 SCOPE_FORBIDDEN mandate_not_valid', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer();
    const nowS = world.gw.clock.nowS();
    await put(agent, { notAfter: nowS - 1 });
    expect((await mint(world, agent.token, offer.id)).body).toMatchObject({ code: 'SCOPE_FORBIDDEN', reason: 'mandate_not_valid' });
    await put(agent, { notBefore: nowS + 3600 });
    expect((await mint(world, agent.token, offer.id)).body).toMatchObject({ code: 'SCOPE_FORBIDDEN', reason: 'mandate_not_valid' });
    await put(agent, { notBefore: nowS - 10, notAfter: nowS + 3600 });
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
  });

  it('a voucher and its capture receipt name the mandate version in force at the hold', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer();
    const mandate = (await put(agent, { budgets: [{ id: 'weekly', limitUc: '50000000', period: 'week' }] })).body;
    const minted = await mint(world, agent.token, offer.id);
    expect(decodeJwt(minted.body.voucher).mandate).toBe(mandate.hash);
    // A later change does not change what the hold was made under.
    await put(agent, {});
    const captured = await world.api('POST', `/v1/redemptions/${minted.body.redemption.id}/capture`, { token: shop.key, key: `capture-${++counter}`, body: {} });
    expect(decodeJwt(captured.body.captureReceipt).mandate).toBe(mandate.hash);
  });

  it('the agent sees its mandate and its budgets in GET /v1/me', async () => {
    const agent = await fundedAgent();
    const mandate = (await put(agent, { budgets: [{ id: 'daily', limitUc: '3000000', period: 'day' }] })).body;
    const offer = await shop.offer({ priceUc: '1000000' });
    await mint(world, agent.token, offer.id);
    const me = await world.api('GET', '/v1/me', { token: agent.token });
    expect(me.body.mandate).toEqual({ version: mandate.version, hash: mandate.hash });
    expect(me.body.budgets).toEqual([expect.objectContaining({ budgetId: 'daily', spentUc: '1000000', remainingUc: '2000000' })]);
  });
});

describe('the merchant check', () => {
  it('answers allowed: false for a denied merchant, an exhausted budget and a mandate out of its window, with no figures', async () => {
    const agent = await fundedAgent();
    const subject = `mandate-agent-${counter}`;
    const offer = await shop.offer({ priceUc: '1000000' });
    const check = async () => world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: { offerId: offer.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject } } });
    expect((await check()).body.allowed).toBe(true);
    await put(agent, { merchants: { allow: null, deny: [shop.merchantId] } });
    expect((await check()).body.allowed).toBe(false);
    await put(agent, { budgets: [{ id: 'daily', limitUc: '1000000', period: 'day' }] });
    expect((await check()).body.allowed).toBe(true);
    await mint(world, agent.token, offer.id);
    const exhausted = await check();
    expect(exhausted.body.allowed).toBe(false);
    expect(Object.keys(exhausted.body).sort()).toEqual(['agentId', 'agentIdentity', 'allowed', 'merchantId', 'offerId', 'paymentRequired', 'priceUc', 'voucherEndpoint']);
    await put(agent, { notAfter: world.gw.clock.nowS() - 1 });
    expect((await check()).body.allowed).toBe(false);
  });

  it('asks the caps as a mint does: a per-hold cap below the price, and a rolling cap the purchase would pass, are allowed: false', async () => {
    const agent = await fundedAgent();
    const subject = `mandate-agent-${counter}`;
    const offer = await shop.offer({ priceUc: '1000000' });
    const check = async () => (await world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: { offerId: offer.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject } } })).body.allowed;
    await put(agent, { caps: { perHoldUc: '999999', perPeriodUc: null, periodS: 86_400 } });
    expect(await check()).toBe(false);
    expect((await mint(world, agent.token, offer.id)).body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'per_hold_cap' });
    await put(agent, { caps: { perHoldUc: null, perPeriodUc: '1500000', periodS: 86_400 } });
    expect(await check()).toBe(true);
    expect((await mint(world, agent.token, offer.id)).status).toBe(200);
    expect(await check()).toBe(false);
    expect((await mint(world, agent.token, offer.id)).body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'per_period_cap' });
  });
});

describe('the merchant check at prices the merchant sets', () => {
  it('answers a merchant at 8 different prices an hour about an agent with a budget, so yes or no cannot add up to it: the 9th is 429 with Retry-After, a price asked before is answered; without caps or budgets any price', async () => {
    const agent = await fundedAgent();
    const subject = `mandate-agent-${counter}`;
    const check = async (offerId: string) => world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: { offerId, agentIdentity: { issuer: world.agentIssuer.issuer, subject } } });
    const offers = [];
    for (let n = 1; n <= 9; n += 1) offers.push(await shop.offer({ priceUc: String(n * 1_000_000) }));
    // No cap and no budget: the answer holds for any price, so no price is counted.
    for (const offer of offers) expect((await check(offer.id)).body.allowed).toBe(true);
    await put(agent, { budgets: [{ id: 'daily', limitUc: '7345678', period: 'day' }] });
    for (const [index, offer] of offers.slice(0, 8).entries()) {
      const answer = await check(offer.id);
      expect(answer.status).toBe(200);
      expect(answer.body.allowed).toBe(index < 7); // 8 credits is above the budget's 7.35
    }
    const ninth = await check(offers[8]!.id);
    expect(ninth.status).toBe(429);
    expect(ninth.body).toMatchObject({ code: 'rate_limited' });
    expect(Number(ninth.headers.get('retry-after'))).toBeGreaterThan(3500);
    expect(JSON.stringify(ninth.body)).not.toContain('7345678');
    // A price asked before is answered, and so is another agent (the hour's end: test/access/price-probes.test.ts).
    expect((await check(offers[0]!.id)).body.allowed).toBe(true);
    const other = await fundedAgent();
    const otherCheck = await world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: { offerId: offers[8]!.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject: `mandate-agent-${counter}` } } });
    expect(otherCheck.status).toBe(200);
    expect(otherCheck.body.agentId).toBe(other.id);
  });
});

describe('agents registered before mandates', () => {
  it('get version 1 of theirs from their settings when the gateway starts', async () => {
    const agent = await fundedAgent({ caps: { perHoldUc: '4000000' } });
    await world.gw.gateway.db.query('DELETE FROM mandate_versions WHERE agent_id = $1', [agent.id]);
    await world.gw.gateway.db.query('UPDATE agents SET mandate_version = 0, mandate_hash = NULL WHERE id = $1', [agent.id]);
    expect(await world.gw.services.identity.writeMissingMandates()).toBe(1);
    expect((await get(agent)).body).toMatchObject({ version: 1, caps: { perHoldUc: '4000000' }, allowedCategories: ['books', 'music'] });
    expect(await world.gw.services.identity.writeMissingMandates()).toBe(0);
  });
});
