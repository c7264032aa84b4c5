import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { accessQueries } from '../../src/access/queries.ts';
import type { Principal } from '../../src/platform/principal.ts';
import { runQuery } from '../../src/platform/queries.ts';
import { startWorld, type World } from '../support/world.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';

let world: World;
let shop: Shop;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(() => world.close());

async function balance(agent: { id: string; ownerToken: string }) {
  return (await world.api('GET', `/v1/owner/agents/${agent.id}/balance`, { token: agent.ownerToken })).body;
}

async function events(type: string, holdId: string): Promise<number> {
  const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(`SELECT count(*) AS n FROM events WHERE type = $1 AND payload LIKE $2`, [type, `%${holdId}%`]);
  return Number(rows[0]!.n);
}

describe('POST /v1/vouchers', () => {
  it('takes a hold and returns a voucher that verifies offline against the JWKS with a third-party library', async () => {
    const agent = await world.createAgent('v1@example.com', 'v1-agent');
    const lot = await grant(world, agent.id, 5_000_000n);
    const offer = await shop.offer({ priceUc: '1500000' });
    const res = await mint(world, agent.token, offer.id);
    expect(res.status).toBe(200);
    const { voucher, redemption } = res.body;
    expect(redemption).toMatchObject({
      agentId: agent.id,
      acceptorId: shop.merchantId,
      offerId: offer.id,
      category: 'books',
      amountUc: '1500000',
      state: 'held',
      capturedUc: '0',
      allocations: [{ lotId: lot.id, amountUc: '1500000' }],
    });
    expect(redemption.expiresAt - redemption.createdAt).toBe(900);
    const jwks = createRemoteJWKSet(new URL(`${world.url}/.well-known/jwks.json`));
    const { payload, protectedHeader } = await jwtVerify(voucher, jwks, { issuer: world.gw.config.baseUrl, audience: shop.merchantId, algorithms: ['ES256'] });
    expect(protectedHeader.typ).toBe('voucher+jwt');
    expect(payload).toMatchObject({ jti: redemption.id, sub: agent.id, exp: redemption.expiresAt, offer_id: offer.id, amount_uc: '1500000' });
    expect(await balance(agent)).toMatchObject({ availableUc: '3500000', heldUc: '1500000', grantedUc: '5000000' });
    expect(await events('redemption.held', redemption.id)).toBe(1);
    // A voucher is never an access token.
    const asToken = await world.api('GET', '/v1/me', { token: voucher });
    expect(asToken.status).toBe(401);
  });

  it('replays a retry with the same key without taking a second hold', async () => {
    const agent = await world.createAgent('v2@example.com', 'v2-agent');
    await grant(world, agent.id, 2_000_000n);
    const offer = await shop.offer();
    const first = await mint(world, agent.token, offer.id, 'retry-key');
    const second = await mint(world, agent.token, offer.id, 'retry-key');
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body.redemption.id).toBe(first.body.redemption.id);
    expect((await balance(agent)).heldUc).toBe('1000000');
    const missing = await world.api('POST', '/v1/vouchers', { token: agent.token, body: { offerId: offer.id } });
    expect(missing.status).toBe(400);
    expect(missing.body.code).toBe('idempotency_required');
  });

  it('allocates across lots by priority, then earliest expiry, then age', async () => {
    const agent = await world.createAgent('v3@example.com', 'v3-agent');
    const nowS = Math.floor(Date.now() / 1000);
    const late = await grant(world, agent.id, 1_000_000n, { priority: 100 });
    const soon = await grant(world, agent.id, 1_000_000n, { priority: 100, expiresAtS: nowS + 3600 });
    const first = await grant(world, agent.id, 500_000n, { priority: 10 });
    const offer = await shop.offer({ priceUc: '2200000' });
    const res = await mint(world, agent.token, offer.id);
    expect(res.body.redemption.allocations).toEqual([
      { lotId: first.id, amountUc: '500000' },
      { lotId: soon.id, amountUc: '1000000' },
      { lotId: late.id, amountUc: '700000' },
    ]);
  });

  it('refuses with the spec codes: 402 INSUFFICIENT_CREDITS, 402 CAP_EXCEEDED, 403 FROZEN, 403 SCOPE_FORBIDDEN, 400 invalid_input', async () => {
    const agent = await world.createAgent('v4@example.com', 'v4-agent', { allowedCategories: ['books'], caps: { perHoldUc: '3000000', perPeriodUc: '4000000', periodS: 3600 } });
    await grant(world, agent.id, 10_000_000n);
    const cheap = await shop.offer({ priceUc: '2000000' });
    const dear = await shop.offer({ priceUc: '3500000' });
    const music = await shop.offer({ priceUc: '1000', category: 'music' });
    const inactive = await shop.offer({ active: false });
    const codes = async (offerId: string, extra = {}) => {
      const res = await mint(world, agent.token, offerId, undefined, extra);
      return res.body.reason === undefined ? [res.status, res.body.code ?? 'ok'] : [res.status, res.body.code, res.body.reason];
    };
    expect(await codes(dear.id)).toEqual([402, 'CAP_EXCEEDED', 'per_hold_cap']); // per hold
    // The agent's own limit, named as every CAP_EXCEEDED names its rule (found from outside: no reason).
    expect(await codes(cheap.id, { maxUc: '1999999' })).toEqual([402, 'CAP_EXCEEDED', 'max_uc']);
    expect(await codes(cheap.id, { maxUc: '2000000', maxAmount: '2000001' })).toEqual([400, 'invalid_input']);
    expect(await codes(cheap.id, { maxUc: 2000000 })).toEqual([400, 'invalid_input']); // amounts are strings
    expect(await codes(cheap.id)).toEqual([200, 'ok']);
    expect(await codes(cheap.id)).toEqual([200, 'ok']);
    expect(await codes(cheap.id)).toEqual([402, 'CAP_EXCEEDED', 'per_period_cap']); // per period: 4,000,000 taken
    expect(await codes(music.id)).toEqual([403, 'SCOPE_FORBIDDEN', 'category_not_allowed']);
    expect(await codes(inactive.id)).toEqual([400, 'invalid_input']);
    expect(await codes('off_doesnotexist')).toEqual([400, 'invalid_input']);
    const poor = await world.createAgent('v4@example.com', 'v4-poor');
    await grant(world, poor.id, 1_000_000n);
    const res = await mint(world, poor.token, cheap.id);
    expect([res.status, res.body.code]).toEqual([402, 'INSUFFICIENT_CREDITS']);
    // What the agent has, and what adds credit (found from outside: the refusal said neither), with the README's
    // grant in dev (found from outside: a newcomer who skipped it was sent to top-ups only).
    expect(res.body.detail).toBe(
      `the agent's available credit (1000000 µc) does not cover 2000000 µc: its owner adds credit by approving a top-up (asked for by the agent or its owner with POST /v1/payments/topups, over MCP the request_topup tool); in dev, also \`npx acg credit grant --agent ${poor.id} --amount-uc 2000000\``,
    );
    await world.api('POST', `/v1/owner/agents/${poor.id}/freeze`, { token: poor.ownerToken });
    const frozen = await mint(world, poor.token, cheap.id);
    expect([frozen.status, frozen.body.code]).toEqual([403, 'FROZEN']);
    // A frozen agent's ceiling below the price is not what stops it: raising it would not help (found from outside:
    // 402 CAP_EXCEEDED "raise your maxUc", then FROZEN).
    const frozenBelow = await mint(world, poor.token, cheap.id, undefined, { maxUc: '1999999' });
    expect([frozenBelow.status, frozenBelow.body.code, frozenBelow.body.reason]).toEqual([403, 'FROZEN', 'frozen']);
  });

  it('answers 503 signing_configuration_required in live mode without a signing key, taking no hold', async () => {
    const live = await startWorld({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1' } });
    try {
      const agent = await live.createAgent('live@example.com', 'live-agent');
      const liveShop = await openShop(live);
      await grant(live, agent.id, 5_000_000n);
      const offer = await liveShop.offer();
      const res = await mint(live, agent.token, offer.id);
      expect(res.status).toBe(503);
      expect(res.body.code).toBe('signing_configuration_required');
      const { rows } = await live.gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM holds');
      expect(rows[0]!.n).toBe(0n);
    } finally {
      await live.close();
    }
  });
});

describe('redemptions', () => {
  async function held(priceUc = '3000000') {
    const agent = await world.createAgent('r@example.com', `r-${Math.random().toString(36).slice(2)}`);
    await grant(world, agent.id, 10_000_000n);
    const offer = await shop.offer({ priceUc });
    const res = await mint(world, agent.token, offer.id);
    return { agent, redemption: res.body.redemption };
  }
  const post = (path: string, body: unknown, token = shop.key, key: string | null = `k-${Math.random()}`) => world.api('POST', path, { token, body, key: key ?? undefined });

  it('captures in full: the merchant earns it and the agent is charged once', async () => {
    const before = (await world.api('GET', `/v1/merchants/${shop.merchantId}/earnings`, { token: shop.key })).body.earnedUc;
    const { agent, redemption } = await held();
    const res = await post(`/v1/redemptions/${redemption.id}/capture`, {}, shop.key, 'cap-full');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ state: 'captured', capturedUc: '3000000', amountUc: '3000000' });
    const replay = await post(`/v1/redemptions/${redemption.id}/capture`, {}, shop.key, 'cap-full');
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await balance(agent)).toMatchObject({ availableUc: '7000000', heldUc: '0', capturedUc: '3000000' });
    const after = (await world.api('GET', `/v1/merchants/${shop.merchantId}/earnings`, { token: shop.key })).body.earnedUc;
    expect(BigInt(after) - BigInt(before)).toBe(3_000_000n);
    expect(await events('redemption.captured', redemption.id)).toBe(1);
  });

  it('captures partly and returns the remainder to the lots in the same transaction', async () => {
    const { agent, redemption } = await held();
    const res = await post(`/v1/redemptions/${redemption.id}/capture`, { amountUc: '1200000' });
    expect(res.body).toMatchObject({ state: 'captured', capturedUc: '1200000' });
    expect(await balance(agent)).toMatchObject({ availableUc: '8800000', heldUc: '0', capturedUc: '1200000' });
  });

  it('refuses capturing more than held (400) and resolving twice (409 hold_resolved)', async () => {
    const { redemption } = await held();
    const over = await post(`/v1/redemptions/${redemption.id}/capture`, { amountUc: '3000001' });
    expect([over.status, over.body.code]).toEqual([400, 'invalid_input']);
    expect((await post(`/v1/redemptions/${redemption.id}/release`, {})).status).toBe(200);
    const again = await post(`/v1/redemptions/${redemption.id}/release`, {});
    expect(again.status).toBe(200);
    expect(again.body.state).toBe('released');
    const capture = await post(`/v1/redemptions/${redemption.id}/capture`, {});
    expect([capture.status, capture.body.code]).toEqual([409, 'hold_resolved']);
  });

  it('releases: the credit returns to the agent and redemption.released is emitted', async () => {
    const { agent, redemption } = await held();
    const res = await post(`/v1/redemptions/${redemption.id}/release`, {});
    expect(res.body).toMatchObject({ state: 'released', capturedUc: '0' });
    expect(await balance(agent)).toMatchObject({ availableUc: '10000000', heldUc: '0' });
    expect(await events('redemption.released', redemption.id)).toBe(1);
    const captured = await held();
    await post(`/v1/redemptions/${captured.redemption.id}/capture`, {});
    const late = await post(`/v1/redemptions/${captured.redemption.id}/release`, {});
    expect([late.status, late.body.code]).toEqual([409, 'hold_resolved']);
  });

  it("keeps merchants to their own holds: another merchant's key gets 404 everywhere", async () => {
    const { redemption } = await held();
    const other = await openShop(world);
    expect((await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: other.key })).status).toBe(404);
    expect((await post(`/v1/redemptions/${redemption.id}/release`, {}, other.key)).status).toBe(404);
    expect((await post(`/v1/redemptions/${redemption.id}/capture`, {}, other.key)).status).toBe(404);
    const mine = await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: shop.key });
    expect(mine.body).toEqual(redemption);
  });

  it('requires the right key scope and a valid release key', async () => {
    const { seedMerchantKey } = await import('../support/merchant-key.ts');
    const { redemption } = await held();
    const readOnly = await seedMerchantKey(world, { scopes: ['offers:read'] });
    const res = await post(`/v1/redemptions/${redemption.id}/release`, {}, readOnly.key);
    expect([res.status, res.body.code]).toEqual([403, 'scope_required']);
    const noKey = await post(`/v1/redemptions/${redemption.id}/release`, {}, shop.key, null);
    expect([noKey.status, noKey.body.code]).toEqual([400, 'idempotency_required']);
    const longKey = await post(`/v1/redemptions/${redemption.id}/release`, {}, shop.key, 'k'.repeat(256));
    expect([longKey.status, longKey.body.code]).toEqual([400, 'invalid_input']);
    const notEmpty = await post(`/v1/redemptions/${redemption.id}/release`, { reason: 'x' });
    expect(notEmpty.status).toBe(400);
  });

  it('lets an agent read its own holds in dev mode only', async () => {
    const { agent, redemption } = await held();
    expect((await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: agent.token })).status).toBe(200);
    const other = await world.createAgent('r@example.com', 'r-other');
    expect((await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: other.token })).status).toBe(404);
  });
});

describe('POST /v1/access/merchant-check', () => {
  it('answers from the registration and clearance without creating anything or leaking the owner', async () => {
    const agent = await world.createAgent('mc@example.com', 'mc-agent', { allowedCategories: ['books'] });
    const offer = await shop.offer({ priceUc: '2500000' });
    const music = await shop.offer({ category: 'music' });
    const check = (offerId: string, subject = 'mc-agent', token = shop.key) =>
      world.api('POST', '/v1/access/merchant-check', { token, body: { offerId, agentIdentity: { issuer: world.agentIssuer.issuer, subject } } });
    const { rows: before } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT (SELECT count(*) FROM holds) + (SELECT count(*) FROM journal_entries) AS n');
    const ok = await check(offer.id);
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({
      agentId: agent.id,
      agentIdentity: { issuer: world.agentIssuer.issuer, subject: 'mc-agent' },
      merchantId: shop.merchantId,
      offerId: offer.id,
      allowed: true,
      paymentRequired: true,
      priceUc: '2500000',
      voucherEndpoint: '/v1/vouchers',
    });
    expect(JSON.stringify(ok.body)).not.toContain('mc@example.com');
    expect((await check(music.id)).body.allowed).toBe(false);
    await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
    expect((await check(offer.id)).body.allowed).toBe(false);
    expect((await check(offer.id, 'nobody')).status).toBe(404);
    expect((await check('off_missing')).status).toBe(404);
    const other = await openShop(world);
    expect((await check(offer.id, 'mc-agent', other.key)).status).toBe(404);
    // A merchant that has not proved its domain sells nothing, so it learns nothing of the agent (found from outside:
    // an unproven claim to any domain answered with the agent's id).
    await world.gw.gateway.db.query('UPDATE merchants SET verified = false WHERE id = $1', [other.merchantId]);
    const unproven = await check((await other.offer({ priceUc: '2500000' })).id, 'mc-agent', other.key);
    expect(unproven.status).toBe(404);
    expect(unproven.body.detail).toContain(`until your merchant proves its domain (POST /v1/merchants/${other.merchantId}/verify-domain)`);
    expect(JSON.stringify(unproven.body)).not.toContain(agent.id);
    const bad = await world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: { offerId: '', agentIdentity: { issuer: 'x', subject: 'y' } } });
    expect(bad.status).toBe(400);
    const { rows: after } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT (SELECT count(*) FROM holds) + (SELECT count(*) FROM journal_entries) AS n');
    expect(after[0]!.n).toBe(before[0]!.n);
  });
  it("names no agent for an identity two owners registered, saying so (the question names no owner; each agent's own token does)", async () => {
    const offer = await shop.offer({ priceUc: '2500000' });
    const check = () => world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: { offerId: offer.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject: 'mc-shared' } } });
    const first = await world.createAgent('mc-first@example.com', 'mc-shared', { allowedCategories: ['books'] });
    expect((await check()).body).toMatchObject({ agentId: first.id, allowed: true });
    await world.createAgent('mc-second@example.com', 'mc-shared');
    const ambiguous = await check();
    expect(ambiguous.status).toBe(404);
    expect(ambiguous.body.detail).toBe("more than one owner registered this identity, so it names no one agent; the agent's own credential names its owner");
    // A delegate registration retired for good does not count while another is not (found from outside).
    const third = await world.createAgent('mc-third@example.com', 'mc-parent', { allowedCategories: ['books'] });
    await world.api('PUT', `/v1/owner/agents/${third.id}/mandate`, { token: third.ownerToken, key: 'mc-deleg', body: { allowedCategories: ['books'], delegation: { allowed: true, maxDepth: 1 } } });
    const delegate = await world.api('POST', `/v1/agents/${third.id}/delegates`, { token: third.token, key: 'mc-del-1', body: { name: 'd', identity: { issuer: world.agentIssuer.issuer, subject: 'mc-solo' } } });
    expect(delegate.status, JSON.stringify(delegate.body)).toBe(201);
    const solo = await world.createAgent('mc-fourth@example.com', 'mc-solo', { allowedCategories: ['books'] });
    const soloCheck = () => world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: { offerId: offer.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject: 'mc-solo' } } });
    expect((await soloCheck()).status).toBe(404);
    expect((await world.api('POST', `/v1/owner/agents/${delegate.body.id}/retire`, { token: third.ownerToken, key: 'mc-retire' })).status).toBe(200);
    expect((await soloCheck()).body).toMatchObject({ agentId: solo.id, allowed: true });
  });
  it('asks the spending policy with the price as a mint would (a cap below it is allowed: false), for a merchant only, whatever the face', async () => {
    await world.createAgent('mc2@example.com', 'mc-capped', { allowedCategories: ['books'], caps: { perHoldUc: '1', perPeriodUc: '1', periodS: 3600 } });
    const offer = await shop.offer({ priceUc: '2500000' });
    const input = { offerId: offer.id, agentIdentity: { issuer: world.agentIssuer.issuer, subject: 'mc-capped' } };
    const res = await world.api('POST', '/v1/access/merchant-check', { token: shop.key, body: input });
    expect([res.status, res.body.allowed]).toEqual([200, false]);
    const { checkMerchantAccess } = accessQueries();
    const agent: Principal = { kind: 'agent', id: 'agt_x', agentId: 'agt_x', scopes: [], credential: 'agent_identity' };
    await expect(runQuery(world.gw.gateway, checkMerchantAccess, { principal: agent, input })).rejects.toMatchObject({ code: 'forbidden', status: 403 });
  });
});
