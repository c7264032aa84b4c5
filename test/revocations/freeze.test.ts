// The kill switch with reach: a freeze with releaseHolds releases every outstanding hold of the agent, gives its
// credit and budgets back exactly, revokes the vouchers, tells each merchant holding one (a signed
// voucher.revoked, verified here with the standardwebhooks library), lists them in each merchant's feed, and
// refuses their capture; the freeze report says how far it reached.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';
import { ENDPOINT_CONCURRENCY_MAX } from '../../src/events/worker.ts';

let target: HookTarget;
let world: World;

interface HookedMerchant {
  id: string;
  /** An API key with every scope the test uses. */
  key: string;
  secret: string;
  offerId: string;
}

let merchantA: HookedMerchant;
let merchantB: HookedMerchant;
/** A merchant without a webhook: only its feed and capture refusals tell it. */
let shopC: Shop;
let offerC: string;
let merchantOwner: string;

beforeAll(async () => {
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
  merchantOwner = await world.humanToken('revocation-shops@example.com');
  merchantA = await hookedMerchant('a.shop-test.com', '1000000');
  merchantB = await hookedMerchant('b.shop-test.com', '2000000');
  shopC = await openShop(world);
  offerC = (await shopC.offer({ priceUc: '3000000' })).id;
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

/** A verified merchant on `domain` with its webhook there, an API key and one offer at `priceUc`. */
async function hookedMerchant(domain: string, priceUc: string): Promise<HookedMerchant> {
  const { merchant } = await registerMerchant(world, merchantOwner, { domain, categories: ['books'] });
  await markVerified(world, merchant.id);
  const hook = await configureWebhook(world, merchantOwner, merchant.id, `https://${domain}/acg/events`);
  expect(hook.status).toBe(200);
  const key = await world.api('POST', `/v1/merchants/${merchant.id}/api-keys`, {
    token: merchantOwner,
    key: uniqueKey('key'),
    body: { name: 'server', scopes: ['offers:write', 'offers:read', 'redemptions:capture', 'redemptions:release'] },
  });
  expect(key.status).toBe(201);
  const offer = await world.api('POST', `/v1/merchants/${merchant.id}/offers`, {
    token: key.body.secretKey,
    key: uniqueKey('offer'),
    body: { name: 'Book', category: 'books', priceUc, holdLifetimeS: 900 },
  });
  expect(offer.status).toBe(201);
  return { id: merchant.id, key: key.body.secretKey, secret: hook.body.webhookSecret, offerId: offer.body.id };
}

async function holdAt(token: string, offerId: string): Promise<string> {
  const minted = await mint(world, token, offerId);
  expect(minted.status).toBe(200);
  return minted.body.redemption.id;
}

async function balanceOf(agentId: string) {
  return world.gw.services.ledger.balance(world.gw.gateway.db, agentId);
}

/** The voucher.revoked deliveries the receiver got, each verified with the secret of the merchant it names. */
function revokedEvents(): Array<{ merchantId: string; verified: boolean; revocation: { agentId: string; reason: string; holdIds: string[]; revokedAt: number } }> {
  const secrets = new Map([merchantA, merchantB].map((m) => [m.id, m.secret]));
  return target.receiver.received.flatMap((request) => {
    const envelope = JSON.parse(request.body) as { type: string; merchantId: string; data: { revocation: never } };
    if (envelope.type !== 'voucher.revoked') return [];
    const headers = Object.fromEntries(Object.entries(request.headers).filter((entry): entry is [string, string] => typeof entry[1] === 'string'));
    let verified = true;
    try {
      new Webhook(secrets.get(envelope.merchantId)!).verify(request.body, headers);
    } catch {
      verified = false;
    }
    return [{ merchantId: envelope.merchantId, verified, revocation: envelope.data.revocation }];
  });
}

const sorted = (ids: readonly string[]) => [...ids].sort();

/** Runs the delivery worker until it finds nothing due (it takes a few per endpoint at a time). */
async function deliverAll(): Promise<void> {
  for (let pass = 0; pass < 20; pass++) {
    if ((await world.gw.services.webhookWorker.runOnce()).claimed === 0) return;
  }
  throw new Error('deliveries still due after 20 worker passes');
}

describe('a freeze with releaseHolds', () => {
  let agent: { id: string; token: string; ownerToken: string };
  const holds = { a: [] as string[], b: [] as string[], c: [] as string[], captured: '' };
  let answer: { status: number; body: any };

  beforeAll(async () => {
    agent = await world.createAgent('revoker@example.com', 'revoked-agent');
    await grant(world, agent.id, 20_000_000n);
    await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: agent.ownerToken,
      key: uniqueKey('mandate'),
      body: { budgets: [{ id: 'daily', limitUc: '15000000', period: 'day' }] },
    });
    holds.captured = await holdAt(agent.token, merchantA.offerId);
    const capture = await world.api('POST', `/v1/redemptions/${holds.captured}/capture`, { token: merchantA.key, key: uniqueKey('capture'), body: {} });
    expect(capture.status).toBe(200);
    holds.a.push(await holdAt(agent.token, merchantA.offerId), await holdAt(agent.token, merchantA.offerId));
    holds.b.push(await holdAt(agent.token, merchantB.offerId));
    holds.c.push(await holdAt(agent.token, offerC));
    const before = await balanceOf(agent.id);
    expect(before).toMatchObject({ availableUc: '12000000', heldUc: '7000000', capturedUc: '1000000' });
    answer = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: 'freeze-release-1', body: { releaseHolds: true } });
  });

  it('freezes the agent and releases every outstanding hold, its balance and budget restored exactly', async () => {
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ id: agent.id, status: 'frozen' });
    expect(answer.body.freeze).toMatchObject({ agentId: agent.id, releaseHolds: true, releasedHolds: 4, releasedUc: '7000000' });
    expect(answer.body.freeze.id).toMatch(/^frz_/);
    expect(await balanceOf(agent.id)).toMatchObject({ availableUc: '19000000', heldUc: '0', capturedUc: '1000000', grantedUc: '20000000' });
    const mandate = await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken });
    expect(mandate.body.usage[0]).toMatchObject({ budgetId: 'daily', spentUc: '1000000' });
    for (const holdId of [...holds.a, ...holds.b, ...holds.c]) {
      const hold = await world.gw.services.ledger.getHold(world.gw.gateway.db, holdId);
      expect(hold.state, holdId).toBe('released');
    }
    expect((await world.gw.services.ledger.getHold(world.gw.gateway.db, holds.captured)).state).toBe('captured');
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('reports each merchant with its holds and where its event stands', () => {
    const merchants = answer.body.freeze.merchants as Array<{ merchantId: string; holdIds: string[]; eventId: string; webhook: string; lastAttemptAt: number | null }>;
    const byId = new Map(merchants.map((m) => [m.merchantId, m]));
    expect(sorted([...byId.keys()])).toEqual(sorted([merchantA.id, merchantB.id, shopC.merchantId]));
    expect(sorted(byId.get(merchantA.id)!.holdIds)).toEqual(sorted(holds.a));
    expect(byId.get(merchantB.id)!.holdIds).toEqual(holds.b);
    expect(byId.get(shopC.merchantId)!.holdIds).toEqual(holds.c);
    expect(byId.get(merchantA.id)).toMatchObject({ webhook: 'pending', lastAttemptAt: null });
    expect(byId.get(merchantB.id)).toMatchObject({ webhook: 'pending', lastAttemptAt: null });
    expect(byId.get(shopC.merchantId)).toMatchObject({ webhook: 'none', lastAttemptAt: null });
    for (const m of merchants) expect(m.eventId).toMatch(/^evt_/);
  });

  it('sends voucher.revoked ahead of every other event waiting for the endpoint: in the worker\'s first pass (found from outside: it came after a redemption.released per hold, seconds later)', async () => {
    // Merchant A's endpoint has eight deliveries due (three holds, a capture, two releases, the revocation), more than
    // one pass takes of an endpoint; written last, the revocation was claimed last.
    const due = await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM webhook_deliveries WHERE merchant_id = $1 AND state = $2', [merchantA.id, 'pending']);
    expect(Number(due.rows[0]!.n)).toBeGreaterThan(ENDPOINT_CONCURRENCY_MAX);
    await world.gw.services.webhookWorker.runOnce();
    expect(revokedEvents().map((e) => e.merchantId).sort()).toEqual(sorted([merchantA.id, merchantB.id]));
  });

  it("sends each merchant one signed voucher.revoked with exactly its holds, and the report then says delivered", async () => {
    await deliverAll();
    const events = revokedEvents();
    expect(events.map((e) => e.merchantId).sort()).toEqual(sorted([merchantA.id, merchantB.id]));
    for (const event of events) {
      expect(event.verified).toBe(true);
      expect(event.revocation).toMatchObject({ agentId: agent.id, reason: 'agent_frozen', revokedAt: answer.body.freeze.frozenAt });
    }
    expect(sorted(events.find((e) => e.merchantId === merchantA.id)!.revocation.holdIds)).toEqual(sorted(holds.a));
    expect(events.find((e) => e.merchantId === merchantB.id)!.revocation.holdIds).toEqual(holds.b);
    // Each hold's redemption.released says it was revoked, as a read of the hold does (found from outside: it said null).
    const releasedEvents = target.receiver.received
      .map((request) => JSON.parse(request.body) as { type: string; data: { redemption: { id: string; revocation: unknown } } })
      .filter((envelope) => envelope.type === 'redemption.released');
    expect(sorted(releasedEvents.map((envelope) => envelope.data.redemption.id))).toEqual(sorted([...holds.a, ...holds.b]));
    for (const envelope of releasedEvents) {
      expect(envelope.data.redemption.revocation).toEqual({ revokedAt: answer.body.freeze.frozenAt, reason: 'agent_frozen' });
      const read = await world.api('GET', `/v1/redemptions/${envelope.data.redemption.id}`, { token: agent.token });
      expect(read.body.revocation).toEqual(envelope.data.redemption.revocation);
    }

    const report = await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
    expect(report.status).toBe(200);
    expect(report.body.id).toBe(answer.body.freeze.id);
    const reached = new Map((report.body.merchants as Array<{ merchantId: string; webhook: string; lastAttemptAt: number | null }>).map((m) => [m.merchantId, m]));
    for (const id of [merchantA.id, merchantB.id]) {
      expect(reached.get(id)!.webhook).toBe('delivered');
      expect(reached.get(id)!.lastAttemptAt).toEqual(expect.any(Number));
    }
    expect(reached.get(shopC.merchantId)!.webhook).toBe('none');
  });

  it("lists the same holds in each merchant's feed, in pages that follow nextSince", async () => {
    const feed = (merchant: string, token: string, query = '') => world.api('GET', `/v1/merchants/${merchant}/revocations${query}`, { token });
    const first = await feed(merchantA.id, merchantA.key, '?limit=1');
    expect(first.status).toBe(200);
    expect(first.body.revocations).toHaveLength(1);
    expect(first.body.hasMore).toBe(true);
    expect(first.body.nextSince).toBe(first.body.revocations[0].cursor);
    const second = await feed(merchantA.id, merchantA.key, `?limit=1&since=${first.body.nextSince}`);
    expect(second.body.revocations).toHaveLength(1);
    expect(second.body.hasMore).toBe(false);
    const listed = [...first.body.revocations, ...second.body.revocations];
    expect(sorted(listed.map((r: { holdId: string }) => r.holdId))).toEqual(sorted(holds.a));
    for (const item of listed) expect(item).toMatchObject({ agentId: agent.id, reason: 'agent_frozen', revokedAt: answer.body.freeze.frozenAt });
    const empty = await feed(merchantA.id, merchantA.key, `?since=${second.body.nextSince}`);
    expect(empty.body).toEqual({ revocations: [], nextSince: second.body.nextSince, hasMore: false });

    const whole = await feed(merchantA.id, merchantOwner);
    expect(whole.status).toBe(200);
    expect(sorted(whole.body.revocations.map((r: { holdId: string }) => r.holdId))).toEqual(sorted(holds.a));
    expect((await feed(merchantB.id, merchantB.key)).body.revocations.map((r: { holdId: string }) => r.holdId)).toEqual(holds.b);
    expect((await feed(shopC.merchantId, shopC.key)).body.revocations.map((r: { holdId: string }) => r.holdId)).toEqual(holds.c);
  });

  // Found from outside (bb77): cursors were one counter over every merchant, so the gaps between a merchant's own
  // told it how many holds of other merchants were revoked meanwhile.
  it("numbers each merchant's feed on its own, whatever other merchants' revocations came between, and still reads a cursor of the old form", async () => {
    const feed = (merchant: string, token: string, query = '') => world.api('GET', `/v1/merchants/${merchant}/revocations${query}`, { token });
    const a = await feed(merchantA.id, merchantA.key);
    const b = await feed(merchantB.id, merchantB.key);
    const cursors = (page: { body: { revocations: Array<{ cursor: string }> } }) => page.body.revocations.map((r) => r.cursor);
    expect(cursors(a)).toEqual(holds.a.map((_, i) => `p${i + 1}`));
    expect(cursors(b)).toEqual(holds.b.map((_, i) => `p${i + 1}`));
    // A cursor kept from before (the row's seq over every merchant) resumes after that row, and hands back today's form.
    const { rows } = await world.gw.gateway.db.query<{ seq: string }>('SELECT seq::text FROM hold_revocations WHERE merchant_id = $1 ORDER BY seq', [merchantA.id]);
    const resumed = await feed(merchantA.id, merchantA.key, `?since=${rows[0]!.seq}`);
    expect(cursors(resumed)).toEqual(cursors(a).slice(1));
    const caughtUp = await feed(merchantA.id, merchantA.key, `?since=${rows.at(-1)!.seq}`);
    expect(caughtUp.body).toEqual({ revocations: [], nextSince: `p${rows.length}`, hasMore: false });
  });

  it('refuses a capture of a revoked hold with 409 voucher_revoked; its release replays as released', async () => {
    const capture = await world.api('POST', `/v1/redemptions/${holds.a[0]}/capture`, { token: merchantA.key, key: uniqueKey('capture'), body: {} });
    expect(capture.status).toBe(409);
    expect(capture.body).toMatchObject({ code: 'voucher_revoked', holdId: holds.a[0], revokedAt: answer.body.freeze.frozenAt, reason: 'agent_frozen' });
    const release = await world.api('POST', `/v1/redemptions/${holds.a[0]}/release`, { token: merchantA.key, key: uniqueKey('release'), body: {} });
    expect(release.status).toBe(200);
    const revocation = { revokedAt: answer.body.freeze.frozenAt, reason: 'agent_frozen' };
    expect(release.body).toMatchObject({ id: holds.a[0], state: 'released', releasedUc: '1000000', revocation });
    // The read a merchant polls tells the owner's withdrawal from a release of its own.
    const read = await world.api('GET', `/v1/redemptions/${holds.a[0]}`, { token: merchantA.key });
    expect([read.status, read.body.state, read.body.revocation]).toEqual([200, 'released', revocation]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('answers a retry under the same Idempotency-Key with the same answer', async () => {
    const retry = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: 'freeze-release-1', body: { releaseHolds: true } });
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body).toEqual(answer.body);
  });

  it('answers a repeat with releaseHolds, under a new key, with the report that released: nothing is left to release (found from outside: an empty report hid it)', async () => {
    const repeats = await Promise.all(
      ['freeze-release-2', 'freeze-release-3'].map((key) => world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key, body: { releaseHolds: true } })),
    );
    for (const repeat of repeats) {
      expect(repeat.status).toBe(200);
      expect(repeat.body.freeze).toMatchObject({ id: answer.body.freeze.id, releaseHolds: true, releasedHolds: 4, releasedUc: '7000000' });
    }
    const read = await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
    expect([read.status, read.body.id, read.body.merchants.length]).toEqual([200, answer.body.freeze.id, 3]);
  });

  it('refuses the frozen agent its next mint, and unfreezing lets it spend again', async () => {
    const refused = await mint(world, agent.token, merchantA.offerId);
    expect([refused.status, refused.body.code]).toEqual([403, 'FROZEN']);
    const thawed = await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken });
    expect(thawed.body.status).toBe('active');
    expect((await mint(world, agent.token, merchantA.offerId)).status).toBe(200);
  });
});

describe('the freeze report follows each event', () => {
  it('says failing while the webhook answers 5xx, paused for a paused webhook, and delivered once the resume delivers it', async () => {
    const agent = await world.createAgent('watcher@example.com', 'watched-agent');
    await grant(world, agent.id, 5_000_000n);
    const holdA = await holdAt(agent.token, merchantA.offerId);
    const holdB = await holdAt(agent.token, merchantB.offerId);
    await deliverAll();
    const pause = (enabled: boolean) =>
      world.api('PATCH', `/v1/merchants/${merchantB.id}/webhook`, { token: merchantOwner, key: uniqueKey('pause'), body: { enabled, deliverMissed: true } });
    expect((await pause(false)).status).toBe(200);
    // A delivery made before the pause waits through it: paused, with no next attempt (found from outside, bb137).
    const earlier = await holdAt(agent.token, merchantB.offerId);
    expect((await pause(true)).status).toBe(200);
    expect((await pause(false)).status).toBe(200);
    target.receiver.answerWith(500);
    try {
      const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, body: { releaseHolds: true } });
      expect(frozen.status).toBe(200);
      await world.gw.services.webhookWorker.runOnce();
      const report = async () =>
        new Map(
          ((await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken })).body.merchants as Array<{ merchantId: string; holdIds: string[]; webhook: string; lastAttemptAt: number | null; nextAttemptAt: number | null }>).map(
            (m) => [m.merchantId, m],
          ),
        );
      const failing = await report();
      expect(failing.get(merchantA.id)).toMatchObject({ holdIds: [holdA], webhook: 'failing', lastAttemptAt: expect.any(Number) });
      expect(failing.get(merchantB.id)).toMatchObject({ holdIds: [holdB, earlier].sort(), webhook: 'paused', lastAttemptAt: null, nextAttemptAt: null });
      const waiting = (await world.api('GET', `/v1/merchants/${merchantB.id}/webhook/deliveries?limit=100`, { token: merchantOwner })).body.deliveries as Array<{ state: string; nextAttemptAt: number | null }>;
      expect(waiting.filter((d) => d.state === 'pending').map((d) => d.nextAttemptAt)).toEqual(waiting.filter((d) => d.state === 'pending').map(() => null));
      expect(waiting.some((d) => d.state === 'pending')).toBe(true);
    } finally {
      target.receiver.answerWith(200);
    }
    expect((await pause(true)).status).toBe(200);
    await deliverAll();
    const resumed = new Map(
      ((await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken })).body.merchants as Array<{ merchantId: string; webhook: string }>).map((m) => [m.merchantId, m.webhook]),
    );
    expect(resumed.get(merchantB.id)).toBe('delivered');
  });
});

describe('the freeze report says when each waiting merchant will be told', () => {
  it("gives every pending delivery its next attempt, the end of the merchant's open circuit when that holds it back, and null once delivered", async () => {
    const agent = await world.createAgent('waiter@example.com', 'waited-agent');
    await grant(world, agent.id, 5_000_000n);
    await holdAt(agent.token, merchantA.offerId);
    await holdAt(agent.token, merchantB.offerId);
    await deliverAll();
    type Reached = { merchantId: string; webhook: string; nextAttemptAt: number | null };
    const byMerchant = (merchants: Reached[]) => new Map(merchants.map((m) => [m.merchantId, m]));
    const read = async () => byMerchant((await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken })).body.merchants);
    // Merchant A's circuit opened after failures in a row: no attempt to its webhook for five minutes.
    const openUntilMs = world.gw.clock.nowMs() + 5 * 60_000;
    await world.gw.gateway.db.query('UPDATE webhook_endpoints SET consecutive_failures = 5, circuit_open_until_ms = $2 WHERE merchant_id = $1', [merchantA.id, openUntilMs]);
    try {
      const circuit = (await world.api('GET', `/v1/merchants/${merchantA.id}/webhook`, { token: merchantOwner })).body.configuration.circuit;
      expect(circuit).toEqual({ openUntil: Math.ceil(openUntilMs / 1000), consecutiveFailures: 5 });
      const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: uniqueKey('freeze'), body: { releaseHolds: true } });
      expect(frozen.status).toBe(200);
      const nowS = Math.ceil(world.gw.clock.nowMs() / 1000);
      for (const reached of [byMerchant(frozen.body.freeze.merchants), await read()]) {
        expect(reached.get(merchantA.id)).toMatchObject({ webhook: 'pending', nextAttemptAt: circuit.openUntil });
        expect(reached.get(merchantB.id)).toMatchObject({ webhook: 'pending' });
        expect(reached.get(merchantB.id)!.nextAttemptAt).toBeGreaterThanOrEqual(frozen.body.freeze.frozenAt);
        expect(reached.get(merchantB.id)!.nextAttemptAt).toBeLessThanOrEqual(nowS);
      }
      // The report agrees with the merchant's own list of its deliveries.
      const deliveries = (await world.api('GET', `/v1/merchants/${merchantA.id}/webhook/deliveries?limit=100`, { token: merchantOwner })).body.deliveries as Array<{ eventId: string; nextAttemptAt: number | null }>;
      const revocationEventId = frozen.body.freeze.merchants.find((m: { merchantId: string }) => m.merchantId === merchantA.id).eventId;
      expect(deliveries.find((d) => d.eventId === revocationEventId)!.nextAttemptAt).toBe(circuit.openUntil);

      await deliverAll();
      const told = await read();
      expect(told.get(merchantB.id)).toMatchObject({ webhook: 'delivered', nextAttemptAt: null });
      expect(told.get(merchantA.id)).toMatchObject({ webhook: 'pending', nextAttemptAt: circuit.openUntil });
    } finally {
      await world.gw.gateway.db.query('UPDATE webhook_endpoints SET consecutive_failures = 0, circuit_open_until_ms = 0 WHERE merchant_id = $1', [merchantA.id]);
    }
    await deliverAll();
    expect((await read()).get(merchantA.id)).toMatchObject({ webhook: 'delivered', nextAttemptAt: null });
  });
});

describe('a freeze without releaseHolds', () => {
  it('revokes nothing: the hold stays held and can be captured', async () => {
    const agent = await world.createAgent('keeper@example.com', 'kept-agent');
    await grant(world, agent.id, 5_000_000n);
    const holdId = await holdAt(agent.token, merchantA.offerId);
    const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
    expect(frozen.status, JSON.stringify(frozen.body)).toBe(200);
    expect(frozen.body.status).toBe('frozen');
    expect(frozen.body.freeze).toMatchObject({ releaseHolds: false, releasedHolds: 0, releasedUc: '0', merchants: [] });
    expect((await world.gw.services.ledger.getHold(world.gw.gateway.db, holdId)).state).toBe('held');
    const again = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, body: {} });
    expect(again.body.freeze.id).toBe(frozen.body.freeze.id);
    const feed = await world.api('GET', `/v1/merchants/${merchantA.id}/revocations`, { token: merchantA.key });
    expect(feed.body.revocations.map((r: { holdId: string }) => r.holdId)).not.toContain(holdId);
    const capture = await world.api('POST', `/v1/redemptions/${holdId}/capture`, { token: merchantA.key, key: uniqueKey('capture'), body: {} });
    expect([capture.status, capture.body.state]).toEqual([200, 'captured']);
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});

describe('refusals', () => {
  it('answers 404 for an unknown agent and for another owner\'s agent, and 400 for a bad body', async () => {
    const agent = await world.createAgent('refusals@example.com', 'refusals-agent');
    const stranger = await world.humanToken('stranger@example.com');
    expect((await world.api('POST', '/v1/owner/agents/agt_nobody/freeze', { token: agent.ownerToken, body: { releaseHolds: true } })).status).toBe(404);
    const theirs = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: stranger, body: { releaseHolds: true } });
    expect([theirs.status, theirs.body.code]).toEqual([404, 'not_found']);
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: stranger })).status).toBe(404);
    for (const body of [{ releaseHolds: 'yes' }, { releaseHolds: true, everything: true }]) {
      const bad = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, body });
      expect([bad.status, bad.body.code], JSON.stringify(body)).toEqual([400, 'invalid_input']);
    }
    // Unfreeze takes no body, or {}: a member sent by mistake is refused, not ignored.
    const unfreezeWith = await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: { releaseHolds: true } });
    expect([unfreezeWith.status, unfreezeWith.body.code]).toEqual([400, 'invalid_input']);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    const never = await world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
    expect([never.status, never.body.code]).toEqual([404, 'not_found']);
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.status).toBe('active');
  });

  it('refuses a bad cursor (400), a key without offers:read (403) and another merchant\'s feed (404)', async () => {
    for (const since of ['abc', '-1', '1.5', '99999999999999999999', 'p', 'p-1', 'p01', 'q1']) {
      const bad = await world.api('GET', `/v1/merchants/${merchantA.id}/revocations?since=${since}`, { token: merchantA.key });
      expect([bad.status, bad.body.code], since).toEqual([400, 'invalid_input']);
    }
    expect((await world.api('GET', `/v1/merchants/${merchantA.id}/revocations?limit=501`, { token: merchantA.key })).status).toBe(400);
    // A cursor past the feed's end was never this feed's (found from outside: it was echoed, and would skip what came).
    const feed = await world.api('GET', `/v1/merchants/${merchantA.id}/revocations?limit=500`, { token: merchantA.key });
    const end = Number(String(feed.body.nextSince).slice(1));
    expect(end).toBeGreaterThan(0);
    const atEnd = await world.api('GET', `/v1/merchants/${merchantA.id}/revocations?since=p${end}`, { token: merchantA.key });
    expect([atEnd.status, atEnd.body.revocations, atEnd.body.nextSince]).toEqual([200, [], `p${end}`]);
    const past = await world.api('GET', `/v1/merchants/${merchantA.id}/revocations?since=p${end + 1}`, { token: merchantA.key });
    const pastEnd = `"p${end + 1}" is past the end of this merchant's feed (p${end}): positions are per merchant; poll from p${end}, or from the start without since`;
    expect([past.status, past.body.code, past.body.detail, past.body.errors]).toEqual([400, 'invalid_input', `querystring/since ${pastEnd}`, [{ path: 'querystring/since', message: pastEnd }]]);
    const narrow = await world.api('POST', `/v1/merchants/${merchantA.id}/api-keys`, {
      token: merchantOwner,
      key: uniqueKey('key'),
      body: { name: 'capture only', scopes: ['redemptions:capture'] },
    });
    const forbidden = await world.api('GET', `/v1/merchants/${merchantA.id}/revocations`, { token: narrow.body.secretKey });
    expect([forbidden.status, forbidden.body.code]).toEqual([403, 'scope_required']);
    const elsewhere = await world.api('GET', `/v1/merchants/${merchantB.id}/revocations`, { token: merchantA.key });
    expect([elsewhere.status, elsewhere.body.code]).toEqual([404, 'not_found']);
  });
});

describe('a freeze with releaseHolds reaches the subtree', () => {
  it("releases every delegate's holds into the root's lots, and each delegate is refused at its next mint", async () => {
    const ownerEmail = 'tree-owner@example.com';
    const root = await world.createAgent(ownerEmail, 'tree-root');
    await grant(world, root.id, 10_000_000n);
    const delegation = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, {
      token: root.ownerToken,
      key: uniqueKey('mandate'),
      body: { delegation: { allowed: true, maxDepth: 2 } },
    });
    expect(delegation.status).toBe(200);
    const child = await world.api('POST', `/v1/agents/${root.id}/delegates`, {
      token: root.ownerToken,
      key: uniqueKey('delegate'),
      body: { name: 'child', identity: { issuer: world.agentIssuer.issuer, subject: 'tree-child' }, mandate: { delegation: { allowed: true, maxDepth: 1 } } },
    });
    expect(child.status).toBe(201);
    const childToken = await world.agentToken('tree-child', ownerEmail);
    const grandchild = await world.api('POST', `/v1/agents/${child.body.id}/delegates`, {
      token: childToken,
      key: uniqueKey('delegate'),
      body: { name: 'grandchild', identity: { issuer: world.agentIssuer.issuer, subject: 'tree-grandchild' }, mandate: {} },
    });
    expect(grandchild.status).toBe(201);
    const grandchildToken = await world.agentToken('tree-grandchild', ownerEmail);

    const rootHold = await holdAt(root.token, merchantA.offerId);
    const childHold = await holdAt(childToken, merchantB.offerId);
    const grandchildHold = await holdAt(grandchildToken, merchantA.offerId);
    expect(await balanceOf(root.id)).toMatchObject({ availableUc: '6000000', heldUc: '4000000' });

    const frozen = await world.api('POST', `/v1/owner/agents/${root.id}/freeze`, { token: root.ownerToken, body: { releaseHolds: true } });
    expect(frozen.status).toBe(200);
    expect(frozen.body.freeze).toMatchObject({ releasedHolds: 3, releasedUc: '4000000' });
    const byId = new Map((frozen.body.freeze.merchants as Array<{ merchantId: string; holdIds: string[] }>).map((m) => [m.merchantId, m.holdIds]));
    expect(sorted(byId.get(merchantA.id)!)).toEqual(sorted([rootHold, grandchildHold]));
    expect(byId.get(merchantB.id)).toEqual([childHold]);
    expect(await balanceOf(root.id)).toMatchObject({ availableUc: '10000000', heldUc: '0' });
    await expectLedgerInvariants(world.gw.gateway.db);

    for (const token of [childToken, grandchildToken]) {
      const refused = await mint(world, token, merchantA.offerId);
      expect([refused.status, refused.body.code]).toEqual([403, 'FROZEN']);
    }
    const capture = await world.api('POST', `/v1/redemptions/${grandchildHold}/capture`, { token: merchantA.key, key: uniqueKey('capture'), body: {} });
    expect([capture.status, capture.body.code]).toEqual([409, 'voucher_revoked']);
  });
});
