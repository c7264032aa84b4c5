// Refunds of captured credit through POST /v1/redemptions/{id}/refunds, and the settled shape of a
// redemption: every effect is read back from the routes and the database.
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, parseApiKey } from '../../src/identity/api-keys.ts';
import { onPostgres } from '../support/database.ts';
import type { TestGateway } from '../support/gateway.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
let counter = 0;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(() => world.close());
afterEach(() => {
  world.gw.clock.thaw();
  world.gw.clock.offsetMs = 0;
});

const nextKey = (label: string) => `${label}-${++counter}`;

async function fundedAgent(amountUc = 10_000_000n) {
  const agent = await world.createAgent(`refund${++counter}@example.com`, `refund-agent-${counter}`);
  await grant(world, agent.id, amountUc);
  return agent;
}

/** A hold of `priceUc`, captured for `captureUc` (default all). */
async function captured(agent: { token: string }, priceUc = '2500000', captureUc?: string, offerInput: { refundWindowS?: number } = {}) {
  const offer = await offerWith({ priceUc, ...offerInput });
  const minted = await mint(world, agent.token, offer.id);
  if (minted.status !== 200) throw new Error(`mint failed: ${minted.status} ${JSON.stringify(minted.body)}`);
  const res = await world.api('POST', `/v1/redemptions/${minted.body.redemption.id}/capture`, {
    token: shop.key,
    key: nextKey('capture'),
    body: captureUc === undefined ? {} : { amountUc: captureUc },
  });
  if (res.status !== 200) throw new Error(`capture failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

async function offerWith(input: { priceUc: string; refundWindowS?: number }): Promise<{ id: string }> {
  const res = await world.api('POST', `/v1/merchants/${shop.merchantId}/offers`, {
    token: shop.key,
    key: nextKey('offer'),
    body: { name: 'Report', category: 'books', priceUc: input.priceUc, ...(input.refundWindowS === undefined ? {} : { refundWindowS: input.refundWindowS }) },
  });
  if (res.status !== 201) throw new Error(`offer failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

function refund(holdId: string, body: Record<string, unknown> = {}, options: { key?: string; token?: string } = {}) {
  return world.api('POST', `/v1/redemptions/${holdId}/refunds`, { token: options.token ?? shop.key, key: options.key ?? nextKey('refund'), body });
}

async function balance(agentId: string) {
  return world.gw.services.ledger.balance(world.gw.gateway.db, agentId);
}

async function earnings(): Promise<bigint> {
  return BigInt(await world.gw.services.ledger.merchantEarnings(world.gw.gateway.db, shop.merchantId));
}

/** Everything a refund could have changed, to compare before and after a refused one. */
async function snapshot(holdId: string, agentId: string) {
  const db = world.gw.gateway.db;
  const { rows } = await db.query<{ refunds: bigint; journal: bigint; events: bigint }>(
    `SELECT (SELECT count(*) FROM refunds WHERE hold_id = $1)::bigint AS refunds,
            (SELECT count(*) FROM journal_entries WHERE kind = 'refund')::bigint AS journal,
            (SELECT count(*) FROM events WHERE type = 'redemption.refunded' AND payload LIKE '%' || $1 || '%')::bigint AS events`,
    [holdId],
  );
  const redemption = await world.api('GET', `/v1/redemptions/${holdId}`, { token: shop.key });
  return { ...rows[0], redemption: redemption.body, lots: (await world.gw.services.ledger.lots(db, agentId, { limit: 100 })).lots, earnings: await earnings() };
}

describe('POST /v1/redemptions/{id}/refunds', () => {
  it('refunds everything captured by default: a new refund lot for the agent, out of the earnings, with an event', async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent);
    const earnedBefore = await earnings();
    const res = await refund(hold.id, { reason: 'not delivered' });
    expect(res.status).toBe(201);
    expect(res.body.refund).toMatchObject({ redemptionId: hold.id, amountUc: '2500000', reason: 'not delivered', receipt: expect.any(String) });
    expect(res.body.refund.id).toMatch(/^rfd_/);
    expect(res.body.redemption).toMatchObject({ id: hold.id, state: 'captured', capturedUc: '2500000', refundedUc: '2500000', refunds: [res.body.refund] });
    expect(await earnings()).toBe(earnedBefore - 2_500_000n);
    const lots = (await world.gw.services.ledger.lots(world.gw.gateway.db, agent.id, { limit: 100 })).lots;
    expect(lots.filter((l) => l.source === 'refund')).toEqual([expect.objectContaining({ sourceRef: res.body.refund.id, grantedUc: '2500000', remainingUc: '2500000', status: 'active' })]);
    expect(await balance(agent.id)).toMatchObject({ availableUc: '10000000', capturedUc: '2500000', grantedUc: '12500000', refundedUc: '2500000' });
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(`SELECT count(*) AS n FROM events WHERE type = 'redemption.refunded' AND payload LIKE $1`, [`%${hold.id}%`]);
    expect(rows[0]!.n).toBe(1n);
    const read = await world.api('GET', `/v1/redemptions/${hold.id}`, { token: shop.key });
    expect(read.body.refunds).toEqual([res.body.refund]);
  });

  it('refunds partly, several times, up to what was captured, and no further', async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent, '2500000', '2000000');
    expect((await refund(hold.id, { amountUc: '500000' })).body.redemption.refundedUc).toBe('500000');
    expect((await refund(hold.id, { amountUc: '700000' })).body.redemption.refundedUc).toBe('1200000');
    const rest = await refund(hold.id);
    expect(rest.status).toBe(201);
    expect(rest.body.refund.amountUc).toBe('800000');
    expect(rest.body.redemption).toMatchObject({ refundedUc: '2000000', capturedUc: '2000000' });
    expect(rest.body.redemption.refunds.map((r: { amountUc: string }) => r.amountUc)).toEqual(['500000', '700000', '800000']);
    const more = await refund(hold.id, { amountUc: '1' });
    expect([more.status, more.body.code]).toEqual([400, 'refund_exceeds_captured']);
    const nothingLeft = await refund(hold.id);
    expect([nothingLeft.status, nothingLeft.body.code]).toEqual([409, 'conflict']);
    expect((await balance(agent.id)).availableUc).toBe('10000000');
  });

  it('answers 400 refund_exceeds_captured one µc past the captured amount, changing nothing', async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent, '2500000', '1000000');
    const before = await snapshot(hold.id, agent.id);
    const res = await refund(hold.id, { amountUc: '1000001' });
    expect([res.status, res.body.code]).toEqual([400, 'refund_exceeds_captured']);
    expect(await snapshot(hold.id, agent.id)).toEqual(before);
    for (const amountUc of ['0', '-1', '1.5', 5]) expect((await refund(hold.id, { amountUc })).status).toBe(400);
    expect((await refund(hold.id, { amountUc: '1000000' })).status).toBe(201);
  });

  it("names the member a rule the schema cannot state refuses, as the schema does (body/…, in detail and errors): a capture of 0 or past the hold, a refund of 0, a reason longer than 500 UTF-16 code units", async () => {
    const agent = await fundedAgent();
    const offer = await offerWith({ priceUc: '1000000' });
    const held = (await mint(world, agent.token, offer.id)).body.redemption.id as string;
    const capture = (amountUc: string) => world.api('POST', `/v1/redemptions/${held}/capture`, { token: shop.key, key: nextKey('capture'), body: { amountUc } });
    const named = (res: { status: number; body: Record<string, unknown> }) => [res.status, res.body.code, res.body.detail, res.body.errors];
    const refused = (path: string, message: string) => [400, 'invalid_input', `${path} ${message}`, [{ path, message }]];
    expect(named(await capture('0'))).toEqual(refused('body/amountUc', 'must be positive (release the hold to capture nothing)'));
    expect(named(await capture('1000001'))).toEqual(refused('body/amountUc', "(1000001 µc) is more than the hold's 1000000 µc"));
    const hold = await captured(agent, '2000000');
    expect(named(await refund(hold.id, { amountUc: '0' }))).toEqual(refused('body/amountUc', 'must be positive'));
    // 500 characters as the schema counts them (code points), 1000 UTF-16 code units as the rule does.
    expect(named(await refund(hold.id, { reason: '\u{1F600}'.repeat(500) }))).toEqual(refused('body/reason', 'must be at most 500 characters'));
    expect((await refund(hold.id, { reason: 'late' })).status).toBe(201);
  });

  it("answers 409 refund_window_closed once the offer's window after capture has passed", async () => {
    const agent = await fundedAgent();
    // Time stands still, so the real milliseconds between capture and refund cannot cross a second.
    world.gw.clock.freeze();
    const hold = await captured(agent, '1000000', undefined, { refundWindowS: 120 });
    world.gw.clock.advance(119_000);
    expect((await refund(hold.id, { amountUc: '100000' })).status).toBe(201);
    world.gw.clock.advance(1_000);
    const late = await refund(hold.id, { amountUc: '100000' });
    expect([late.status, late.body.code]).toEqual([409, 'refund_window_closed']);
    const never = await captured(agent, '1000000', undefined, { refundWindowS: 0 });
    expect((await refund(never.id)).body.code).toBe('refund_window_closed');
  });

  it("keeps the refund window a hold was minted with when the offer's window changes later", async () => {
    const agent = await fundedAgent();
    const offer = await offerWith({ priceUc: '1000000', refundWindowS: 60 });
    const minted = await mint(world, agent.token, offer.id);
    await world.api('PATCH', `/v1/merchants/${shop.merchantId}/offers/${offer.id}`, { token: shop.key, body: { refundWindowS: 86_400 } });
    await world.api('POST', `/v1/redemptions/${minted.body.redemption.id}/capture`, { token: shop.key, key: nextKey('capture'), body: {} });
    world.gw.clock.advance(61_000);
    expect((await refund(minted.body.redemption.id)).body.code).toBe('refund_window_closed');
  });

  it('answers 409 insufficient_earnings when the earnings are short, changing nothing', async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent, '1000000');
    // Stands in for a payout (the gateway has none yet): the earnings are now below the refund.
    const shortUc = 999_999n;
    await world.gw.gateway.db.query(`UPDATE ledger_accounts SET balance_uc = $2 WHERE id = $1`, [`merchant:${shop.merchantId}`, shortUc]);
    const before = await snapshot(hold.id, agent.id);
    const res = await refund(hold.id);
    expect([res.status, res.body.code]).toEqual([409, 'insufficient_earnings']);
    expect(await snapshot(hold.id, agent.id)).toEqual(before);
    expect(await earnings()).toBe(shortUc);
    expect((await refund(hold.id, { amountUc: shortUc.toString() })).status).toBe(201);
    expect(await earnings()).toBe(0n);
  });

  it("answers 404 for another merchant's key, and 403 for a key without redemptions:refund", async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent, '1000000');
    const other = await seedMerchantKey(world, { ownerEmail: 'other-refunder@example.com', scopes: ['redemptions:refund'] });
    const foreign = await refund(hold.id, {}, { token: other.key });
    expect([foreign.status, foreign.body.code]).toEqual([404, 'not_found']);
    const noScope = await seedMerchantKey(world, { ownerEmail: 'capturer@example.com', scopes: ['redemptions:capture'] });
    expect((await refund(hold.id, {}, { token: noScope.key })).status).toBe(403);
    expect((await refund('hold_doesnotexist')).status).toBe(404);
  });

  it('replays a retry with the same key without moving credit twice, and requires a key', async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent, '2000000');
    const first = await refund(hold.id, { amountUc: '600000' }, { key: 'refund-once' });
    const second = await refund(hold.id, { amountUc: '600000' }, { key: 'refund-once' });
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body).toEqual(first.body);
    const read = await world.api('GET', `/v1/redemptions/${hold.id}`, { token: shop.key });
    expect(read.body).toMatchObject({ refundedUc: '600000', refunds: [first.body.refund] });
    expect((await balance(agent.id)).refundedUc).toBe('600000');
    const reused = await refund(hold.id, { amountUc: '1' }, { key: 'refund-once' });
    expect([reused.status, reused.body.code]).toEqual([409, 'idempotency_key_reused']);
    const missing = await world.api('POST', `/v1/redemptions/${hold.id}/refunds`, { token: shop.key, body: {} });
    expect([missing.status, missing.body.code]).toEqual([400, 'idempotency_required']);
  });

  it('refuses holds that are not captured (held, released) with 409 conflict', async () => {
    const agent = await fundedAgent();
    const offer = await offerWith({ priceUc: '1000000' });
    const held = (await mint(world, agent.token, offer.id)).body.redemption;
    expect((await refund(held.id)).body.code).toBe('conflict');
    await world.api('POST', `/v1/redemptions/${held.id}/release`, { token: shop.key, key: nextKey('release'), body: {} });
    expect((await refund(held.id)).body.code).toBe('conflict');
  });

  it('calls a hold past its deadline expired when refusing its refund, before the sweeper has reclaimed it (found from outside: "the hold is held")', async () => {
    const agent = await fundedAgent();
    const offer = await offerWith({ priceUc: '1000000' });
    const held = (await mint(world, agent.token, offer.id)).body.redemption;
    world.gw.clock.freeze();
    world.gw.clock.advance((held.expiresAt - world.gw.clock.nowS() + 1) * 1000);
    const refused = await refund(held.id);
    expect([refused.status, refused.body.code, refused.body.detail]).toEqual([409, 'conflict', 'only captured credit can be refunded; the hold is expired']);
    expect((await world.api('GET', `/v1/redemptions/${held.id}`, { token: shop.key })).body.state).toBe('expired');
  });

  it('gives back each part to a lot that burns and lapses like its source, the last-burned first', async () => {
    const agent = await world.createAgent(`refund${++counter}@example.com`, `refund-agent-${counter}`);
    const nowS = world.gw.clock.nowS();
    await grant(world, agent.id, 600_000n, { priority: 5, expiresAtS: nowS + 3600 });
    await grant(world, agent.id, 600_000n, { priority: 20, expiresAtS: nowS + 7200 });
    await grant(world, agent.id, 5_000_000n, { priority: 50 });
    // 600,000 from the first lot, 400,000 from the second.
    const hold = await captured(agent, '1000000');
    const res = await refund(hold.id);
    expect(res.status).toBe(201);
    const lots = ((await world.gw.services.ledger.lots(world.gw.gateway.db, agent.id, { limit: 100 })).lots).filter((l) => l.sourceRef === res.body.refund.id);
    expect(lots.map(({ source, priority, expiresAt, grantedUc }) => ({ source, priority, expiresAt, grantedUc }))).toEqual(
      expect.arrayContaining([
        { source: 'refund', priority: 20, expiresAt: nowS + 7200, grantedUc: '400000' },
        { source: 'refund', priority: 5, expiresAt: nowS + 3600, grantedUc: '600000' },
      ]),
    );
    expect(lots).toHaveLength(2);
    // One journal operation: the earnings out, each lot in.
    const { rows } = await world.gw.gateway.db.query<{ account: string; amount_uc: bigint }>(
      `SELECT account, amount_uc FROM journal_entries WHERE operation_id = $1 ORDER BY amount_uc`,
      [res.body.refund.id],
    );
    expect(rows.map((row) => [row.account, row.amount_uc])).toEqual(
      expect.arrayContaining([[`merchant:${shop.merchantId}`, -1_000_000n], [`lot:${lots.find((l) => l.priority === 20)!.id}`, 400_000n], [`lot:${lots.find((l) => l.priority === 5)!.id}`, 600_000n]]),
    );
    expect(rows).toHaveLength(3);
  });

  it('never turns expiring credit into lasting credit: partial refunds undo the lasting part first, then the promotional part expiring', async () => {
    const agent = await world.createAgent(`refund${++counter}@example.com`, `refund-agent-${counter}`);
    const nowS = world.gw.clock.nowS();
    await grant(world, agent.id, 1_000_000n, { priority: 1, expiresAtS: nowS + 600 });
    await grant(world, agent.id, 5_000_000n, { priority: 50 });
    // 1,000,000 of promotional credit burned first, then 1,500,000 of lasting credit.
    const hold = await captured(agent, '2500000');
    const refundLots = async (res: Awaited<ReturnType<typeof refund>>) =>
      ((await world.gw.services.ledger.lots(world.gw.gateway.db, agent.id, { limit: 100 })).lots)
        .filter((l) => l.sourceRef === res.body.refund.id)
        .map(({ priority, expiresAt, grantedUc }) => ({ priority, expiresAt, grantedUc }));
    const first = await refund(hold.id, { amountUc: '1000000' });
    expect(await refundLots(first)).toEqual([{ priority: 50, expiresAt: null, grantedUc: '1000000' }]);
    const second = await refund(hold.id, { amountUc: '1000000' });
    expect(await refundLots(second)).toEqual(
      expect.arrayContaining([
        { priority: 50, expiresAt: null, grantedUc: '500000' },
        { priority: 1, expiresAt: nowS + 600, grantedUc: '500000' },
      ]),
    );
    // Once the promotional lot has expired, what is left of it comes back lapsed, as a release into it would.
    world.gw.clock.advance(601_000);
    const before = await balance(agent.id);
    const third = await refund(hold.id);
    expect(third.status).toBe(201);
    expect(await refundLots(third)).toEqual([{ priority: 1, expiresAt: nowS + 600, grantedUc: '500000' }]);
    const after = await balance(agent.id);
    expect(after.availableUc).toBe(before.availableUc);
    expect(BigInt(after.refundedUc) - BigInt(before.refundedUc)).toBe(500_000n);
  });
});

describe('the settled shape of a redemption', () => {
  it('states what was released: amountUc = capturedUc + releasedUc once not held, with capturedAt and releasedAt', async () => {
    const agent = await fundedAgent();
    const offer = await offerWith({ priceUc: '2500000' });
    const held = (await mint(world, agent.token, offer.id)).body.redemption;
    expect(held).toMatchObject({ state: 'held', capturedUc: '0', releasedUc: '0', capturedAt: null, releasedAt: null, refundedUc: '0', refunds: [], captureReceipt: null });
    const partial = await captured(agent, '2500000', '1000000');
    expect(partial).toMatchObject({ amountUc: '2500000', capturedUc: '1000000', releasedUc: '1500000', capturedAt: expect.any(Number), captureReceipt: expect.any(String) });
    expect(partial.releasedAt).toBe(partial.capturedAt);
    const full = await captured(agent, '2500000');
    expect(full).toMatchObject({ capturedUc: '2500000', releasedUc: '0', releasedAt: null });
    const released = await world.api('POST', `/v1/redemptions/${held.id}/release`, { token: shop.key, key: nextKey('release'), body: {} });
    expect(released.body).toMatchObject({ state: 'released', capturedUc: '0', releasedUc: '2500000', capturedAt: null, releasedAt: expect.any(Number), captureReceipt: null, revocation: null });
    const expiring = (await mint(world, agent.token, offer.id)).body.redemption;
    world.gw.clock.advance(901_000);
    const expired = await world.api('GET', `/v1/redemptions/${expiring.id}`, { token: shop.key });
    expect(expired.body).toMatchObject({ state: 'expired', releasedUc: '2500000', releasedAt: expiring.expiresAt, capturedAt: null });
  });
});

describe.runIf(onPostgres())('refunds under concurrency (PostgreSQL, two instances)', () => {
  let second: TestGateway;
  beforeAll(async () => {
    second = await world.anotherInstance();
  });
  afterAll(() => second?.close());

  it('never refunds more than was captured, whichever instance each refund reaches', async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent, '5000000');
    const urls = [world.url, second.url];
    const responses = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        fetch(`${urls[i % 2]}/v1/redemptions/${hold.id}/refunds`, {
          method: 'POST',
          headers: { authorization: `Bearer ${shop.key}`, 'content-type': 'application/json', 'idempotency-key': `race-${hold.id}-${i}` },
          body: JSON.stringify({ amountUc: '1000000' }),
        }).then(async (res) => ({ status: res.status, body: (await res.json()) as { code?: string } })),
      ),
    );
    expect(responses.filter((r) => r.status === 201)).toHaveLength(5);
    const refused = responses.filter((r) => r.status !== 201);
    expect(refused).toHaveLength(19);
    expect(refused.every((r) => r.status === 400 && r.body.code === 'refund_exceeds_captured')).toBe(true);
    const { rows } = await world.gw.gateway.db.query<{ refunded_uc: bigint; lots: bigint; journal: bigint }>(
      `SELECT h.refunded_uc,
              (SELECT count(*) FROM credit_lots WHERE agent_id = h.agent_id AND source = 'refund')::bigint AS lots,
              (SELECT COALESCE(SUM(amount_uc), 0) FROM journal_entries)::bigint AS journal
         FROM holds h WHERE h.id = $1`,
      [hold.id],
    );
    expect(rows[0]).toEqual({ refunded_uc: 5_000_000n, lots: 5n, journal: 0n });
    expect((await balance(agent.id)).availableUc).toBe('10000000');
  });
});

describe("a merchant's Idempotency-Keys", () => {
  /** Another API key of the shop's own merchant. */
  async function secondKey(): Promise<string> {
    const key = newApiKey(world.gw.config.apiKeyPepper!);
    await world.gw.gateway.db.query(
      `INSERT INTO merchant_api_keys (id, merchant_id, owner_id, name, scopes, secret_hash, created_at_s, revoked_at_s)
       VALUES ($1, $2, $3, 'second', $4, $5, $6, NULL)`,
      [key.keyId, shop.merchantId, shop.ownerId, JSON.stringify(['redemptions:refund', 'redemptions:capture']), key.secretHash, world.gw.clock.nowS()],
    );
    return key.plaintext;
  }

  it('are the merchant’s, whichever of its API keys sends them: a refund retried through another key replays, once', async () => {
    const agent = await fundedAgent();
    const hold = await captured(agent, '2000000');
    const other = await secondKey();
    const key = nextKey('refund-across-keys');
    const first = await refund(hold.id, { amountUc: '500000' }, { key });
    expect(first.status).toBe(201);
    const retried = await refund(hold.id, { amountUc: '500000' }, { key, token: other });
    expect([retried.status, retried.headers.get('idempotent-replayed'), retried.body.refund.id]).toEqual([201, 'true', first.body.refund.id]);
    const changed = await refund(hold.id, { amountUc: '400000' }, { key, token: other });
    expect([changed.status, changed.body.code]).toEqual([409, 'idempotency_key_reused']);
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM refunds WHERE hold_id = $1', [hold.id]);
    expect(rows[0]!.n).toBe(1n);
    // A capture too: the second key's retry of the first key's capture answers the same capture.
    const offer = await offerWith({ priceUc: '1000000' });
    const held = (await mint(world, agent.token, offer.id)).body.redemption;
    const captureKey = nextKey('capture-across-keys');
    const byFirst = await world.api('POST', `/v1/redemptions/${held.id}/capture`, { token: shop.key, key: captureKey, body: { amountUc: '600000' } });
    const bySecond = await world.api('POST', `/v1/redemptions/${held.id}/capture`, { token: other, key: captureKey, body: { amountUc: '600000' } });
    expect([byFirst.status, bySecond.status, bySecond.headers.get('idempotent-replayed')]).toEqual([200, 200, 'true']);
    expect(bySecond.body).toEqual(byFirst.body);
  });

  it('moved with migration 0033: a record stored per API key lands in its merchant’s scope, the newest of two keys’ records kept', async () => {
    const db = world.gw.gateway.db;
    const other = await secondKey();
    const [firstKeyId, secondKeyId] = [(parseApiKey(shop.key) ?? { keyId: '' }).keyId, parseApiKey(other)!.keyId];
    const record = (scope: string, key: string, createdAtMs: number, body: string) =>
      db.query(
        `INSERT INTO idempotency_keys (scope, route, key, fingerprint, state, claim_token, status_code, response_body, response_headers, created_at_ms, locked_until_ms, expires_at_ms)
         VALUES ($1, 'refundRedemption', $2, 'f', 'done', 't', 201, $3, '{}', $4, $4, $5)`,
        [scope, key, body, createdAtMs, createdAtMs + 86_400_000],
      );
    const [lone, shared] = [nextKey('old-lone'), nextKey('old-shared')];
    await record(`merchant:${firstKeyId}`, lone, 1_000, '"lone"');
    await record(`merchant:${firstKeyId}`, shared, 1_000, '"older"');
    await record(`merchant:${secondKeyId}`, shared, 2_000, '"newer"');
    const migration = readFileSync(new URL('../../migrations/0033_merchant_idempotency_scope.sql', import.meta.url), 'utf8');
    for (const statement of migration.split(';').map((text) => text.trim()).filter((text) => text.replace(/--.*$/gm, '').trim() !== '')) await db.query(statement);
    const { rows } = await db.query<{ scope: string; key: string; response_body: string }>(
      'SELECT scope, key, response_body FROM idempotency_keys WHERE key = ANY($1::text[]) ORDER BY key',
      [[lone, shared]],
    );
    expect(rows).toEqual(
      expect.arrayContaining([
        { scope: `merchant:${shop.merchantId}`, key: lone, response_body: '"lone"' },
        { scope: `merchant:${shop.merchantId}`, key: shared, response_body: '"newer"' },
      ]),
    );
    expect(rows).toHaveLength(2);
  });
});
