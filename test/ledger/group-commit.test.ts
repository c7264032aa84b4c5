// Group commit of voucher mints, captures and releases: concurrent calls share one transaction,
// and each still gets the answer it would get alone, in arrival order. The batcher is paused while a test queues its mints, so the
// batch is formed deterministically (no timing), then resumed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockAgentsWithAncestors } from '../../src/agents/store.ts';
import { ledgerOperations } from '../../src/ledger/operations.ts';
import { BATCH_LIMITS, batcherOf } from '../../src/platform/operations.ts';
import { voucherOperations } from '../../src/vouchers/operations.ts';
import { onPostgres } from '../support/database.ts';
import type { TestGateway } from '../support/gateway.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type ApiResponse, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
  const { captureRedemption, releaseRedemption } = ledgerOperations(world.gw.services.ledger);
  // Production limits on both databases (PGlite runs one batch at a time, which a paused batcher does not change).
  for (const batcher of [mintBatcher(), batcherOf(world.gw.gateway, captureRedemption), batcherOf(world.gw.gateway, releaseRedemption)]) batcher.limits = { ...BATCH_LIMITS };
});
afterAll(() => world.close());

const mintBatcher = (gw: TestGateway = world.gw) => batcherOf(gw.gateway, voucherOperations(gw.services.vouchers).mintVoucher);
type AnyBatcher = ReturnType<typeof mintBatcher>;

/** Waits until the batcher holds `count` queued calls (each request has passed authentication and its checks). */
async function queued(gw: TestGateway, count: number, batcher: AnyBatcher = mintBatcher(gw)): Promise<void> {
  // Every 5 ms: a test queues its calls one at a time, so this wait is paid once per call.
  await waitFor(() => batcher.queued, { until: (n) => n >= count, what: `${count} calls to reach the batcher`, intervalMs: 5 });
}

/** Sends requests one after another into a paused batcher, then lets them run together. */
async function sendAsOneBatch(batcher: AnyBatcher, sends: ReadonlyArray<() => Promise<ApiResponse>>): Promise<ApiResponse[]> {
  batcher.pause();
  const answers: Array<Promise<ApiResponse>> = [];
  try {
    for (const [index, send] of sends.entries()) {
      answers.push(send());
      await queued(world.gw, index + 1, batcher);
    }
  } finally {
    batcher.resume();
  }
  expect(batcher.queued).toBe(0);
  return Promise.all(answers);
}

interface Call {
  token: string;
  offerId: string;
  key: string;
}

/** Sends the calls one after another into the paused batcher (so their arrival order is theirs), then lets them run as one batch. */
async function asOneBatch(calls: readonly Call[], gw: TestGateway = world.gw): Promise<ApiResponse[]> {
  const batcher = mintBatcher(gw);
  batcher.pause();
  const base = batcher.queued;
  const answers: Array<Promise<ApiResponse>> = [];
  try {
    for (const [index, call] of calls.entries()) {
      answers.push(apiOf(gw)('POST', '/v1/vouchers', { token: call.token, key: call.key, body: { offerId: call.offerId } }));
      await queued(gw, base + index + 1);
    }
  } finally {
    batcher.resume();
  }
  // Every queued call left the queue at once: one batch per agent (a batch holds one agent's calls, so they never split).
  expect(batcher.queued).toBe(0);
  return Promise.all(answers);
}

function apiOf(gw: TestGateway): World['api'] {
  if (gw === world.gw) return world.api;
  return async (method, path, opts = {}) => {
    const res = await fetch(`${gw.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${opts.token}`, 'content-type': 'application/json', 'idempotency-key': opts.key! },
      body: JSON.stringify(opts.body),
    });
    return { status: res.status, headers: res.headers, body: await res.json() };
  };
}

/** What a mint answered, without ids that differ between two agents. */
function shapeOf(res: ApiResponse) {
  if (res.status !== 200) return { status: res.status, code: res.body.code, replayed: res.headers.get('idempotent-replayed') };
  const { redemption } = res.body;
  return { status: 200, amountUc: redemption.amountUc, allocations: redemption.allocations.map((a: { amountUc: string }) => a.amountUc), replayed: res.headers.get('idempotent-replayed') };
}

describe('group commit of mints', () => {
  it('answers a batch mixing sufficient and insufficient mints of one agent exactly as one by one, in order', async () => {
    const prices = ['1000000', '2500000', '500000', '3000000', '250000', '1000000', '4000000', '250000', '750000'];
    const offers = new Map<string, string>();
    for (const price of new Set(prices)) offers.set(price, (await shop.offer({ priceUc: price })).id);
    const alone = await world.createAgent('batch@example.com', 'batch-alone');
    const batched = await world.createAgent('batch@example.com', 'batch-batched');
    for (const agent of [alone, batched]) {
      await grant(world, agent.id, 2_000_000n, { priority: 1 });
      await grant(world, agent.id, 3_000_000n, { priority: 2 });
    }
    const reference: ApiResponse[] = [];
    for (const [i, price] of prices.entries()) reference.push(await mint(world, alone.token, offers.get(price)!, `alone-${i}`));
    const answers = await asOneBatch(prices.map((price, i) => ({ token: batched.token, offerId: offers.get(price)!, key: `batched-${i}` })));

    expect(answers.map(shapeOf)).toEqual(reference.map(shapeOf));
    // The credit ran out part-way: some mints succeeded after a refused one, and the refusals are INSUFFICIENT_CREDITS.
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 402, 200, 402, 402, 200, 402]);
    const balances = await Promise.all([alone, batched].map((agent) => world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)));
    expect({ ...balances[1], agentId: alone.id }).toEqual(balances[0]);
    // Each refusal is its key's stored answer: a retry replays it.
    const retried = await mint(world, batched.token, offers.get(prices[3]!)!, 'batched-3');
    expect(shapeOf(retried)).toEqual({ status: 402, code: 'INSUFFICIENT_CREDITS', replayed: 'true' });
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 60_000);

  it('replays keys inside a batch: a finished key, the same key twice (one hold), and a reused key is refused alone', async () => {
    const agent = await world.createAgent('batch@example.com', 'batch-replays');
    await grant(world, agent.id, 10_000_000n);
    const offer = await shop.offer({ priceUc: '1000000' });
    const other = await shop.offer({ priceUc: '2000000' });
    const first = await mint(world, agent.token, offer.id, 'replay-done');
    expect(first.status).toBe(200);
    const answers = await asOneBatch([
      { token: agent.token, offerId: offer.id, key: 'replay-done' },
      { token: agent.token, offerId: offer.id, key: 'replay-twice' },
      { token: agent.token, offerId: offer.id, key: 'replay-twice' },
      { token: agent.token, offerId: other.id, key: 'replay-done' },
      { token: agent.token, offerId: other.id, key: 'replay-fresh' },
    ]);
    expect(answers.map((a) => [a.status, a.headers.get('idempotent-replayed'), a.body.code])).toEqual([
      [200, 'true', undefined],
      [200, null, undefined],
      [200, 'true', undefined],
      [409, null, 'idempotency_key_reused'],
      [200, null, undefined],
    ]);
    expect(answers[0]!.body.redemption.id).toBe(first.body.redemption.id);
    expect(answers[2]!.body.redemption.id).toBe(answers[1]!.body.redemption.id);
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM holds WHERE agent_id = $1', [agent.id]);
    expect(rows[0]!.n).toBe(3n);
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).toMatchObject({ heldUc: '4000000', availableUc: '6000000' });
  }, 60_000);

  it('refuses a mint with 503 overloaded and Retry-After when the queue is full, taking no hold and keeping no key', async () => {
    const agent = await world.createAgent('batch@example.com', 'batch-full');
    await grant(world, agent.id, 10_000_000n);
    const offer = await shop.offer({ priceUc: '1000000' });
    const batcher = mintBatcher();
    const limits = batcher.limits;
    batcher.limits = { ...limits, queueLengthMax: 2 };
    batcher.pause();
    let waiting: Array<Promise<ApiResponse>> = [];
    let refused: ApiResponse;
    try {
      waiting = [mint(world, agent.token, offer.id, 'full-1'), mint(world, agent.token, offer.id, 'full-2')];
      await queued(world.gw, 2);
      refused = await mint(world, agent.token, offer.id, 'full-3');
    } finally {
      batcher.limits = limits;
      batcher.resume();
    }
    expect({ status: refused.status, code: refused.body.code, retryAfter: refused.headers.get('retry-after') }).toEqual({ status: 503, code: 'overloaded', retryAfter: '1' });
    expect((await Promise.all(waiting)).map((a) => a.status)).toEqual([200, 200]);
    const retried = await mint(world, agent.token, offer.id, 'full-3');
    expect([retried.status, retried.headers.get('idempotent-replayed')]).toEqual([200, null]);
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).toMatchObject({ heldUc: '3000000' });
  }, 60_000);

  it("answers a batch of one merchant's captures and releases as one by one: resolved once, refusals alone", async () => {
    const agent = await world.createAgent('batch@example.com', 'batch-resolve');
    await grant(world, agent.id, 10_000_000n);
    const offer = await shop.offer({ priceUc: '1000000' });
    const holds: string[] = [];
    for (let i = 0; i < 5; i++) holds.push((await mint(world, agent.token, offer.id)).body.redemption.id);
    const { captureRedemption, releaseRedemption } = ledgerOperations(world.gw.services.ledger);
    const resolve = (holdId: string, action: 'capture' | 'release', key: string, body: object = {}) => () =>
      world.api('POST', `/v1/redemptions/${holdId}/${action}`, { token: shop.key, key, body });
    const captures = await sendAsOneBatch(batcherOf(world.gw.gateway, captureRedemption), [
      resolve(holds[0]!, 'capture', 'cap-0'),
      resolve(holds[1]!, 'capture', 'cap-1', { amountUc: '400000' }),
      resolve(holds[0]!, 'capture', 'cap-0-again'),
      resolve(holds[2]!, 'capture', 'cap-2', { amountUc: '1000001' }),
      resolve(holds[1]!, 'capture', 'cap-1', { amountUc: '400000' }),
      resolve(holds[4]!, 'capture', 'cap-1'),
    ]);
    expect(captures.map((a) => [a.status, a.body.code ?? a.body.capturedUc, a.headers.get('idempotent-replayed')])).toEqual([
      [200, '1000000', null],
      [200, '400000', null],
      [409, 'hold_resolved', null],
      [400, 'invalid_input', null],
      [200, '400000', 'true'],
      [409, 'idempotency_key_reused', null],
    ]);
    const releases = await sendAsOneBatch(batcherOf(world.gw.gateway, releaseRedemption), [
      resolve(holds[3]!, 'release', 'rel-3'),
      resolve(holds[3]!, 'release', 'rel-3-again'),
      resolve(holds[0]!, 'release', 'rel-0'),
      resolve(holds[2]!, 'release', 'rel-2'),
    ]);
    expect(releases.map((a) => [a.status, a.body.code ?? a.body.state])).toEqual([
      [200, 'released'],
      [200, 'released'],
      [409, 'hold_resolved'],
      [200, 'released'],
    ]);
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).toMatchObject({
      capturedUc: '1400000',
      heldUc: '1000000',
      availableUc: '7600000',
    });
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 60_000);

  describe.runIf(onPostgres())('on two instances sharing one PostgreSQL', () => {
    let second: TestGateway;
    beforeAll(async () => {
      second = await world.anotherInstance();
    });
    afterAll(() => second?.close());

    it("lets a refund add its lot while a batch holds the agent's row: the wait that closed a deadlock cycle (found from outside)", async () => {
      // A refund holds the merchant's earnings row and then adds a lot, whose foreign key takes a share lock on the
      // agent's row; a mint batch holds that row and waits for lots that a capture batch holds, which waits for the
      // earnings row. The batches lock agents FOR NO KEY UPDATE, which a foreign key's share lock does not wait for.
      const offer = await shop.offer({ priceUc: '1000000' });
      const agent = await world.createAgent('refund-lock@example.com', 'refund-lock');
      await grant(world, agent.id, 5_000_000n);
      const holdId = (await mint(world, agent.token, offer.id)).body.redemption.id as string;
      expect((await world.api('POST', `/v1/redemptions/${holdId}/capture`, { token: shop.key, key: 'lock-capture', body: {} })).status).toBe(200);
      let release: (() => void) | undefined;
      const holding = world.gw.gateway.db.transaction(async (tx) => {
        await lockAgentsWithAncestors(tx, [agent.id]);
        await new Promise<void>((resolve) => (release = resolve));
      });
      await waitFor(() => release, { what: "a transaction holding the agent's row" });
      try {
        const refunded = await world.api('POST', `/v1/redemptions/${holdId}/refunds`, { token: shop.key, key: 'lock-refund', body: { amountUc: '400000' } });
        expect(refunded.status).toBe(201);
      } finally {
        release!();
        await holding;
      }
      await expectLedgerInvariants(world.gw.gateway.db);
    });

    it('two batches over the same agents, queued in opposite orders, stay exact and never deadlock', async () => {
      const offer = await shop.offer({ priceUc: '1000000' });
      const agents: Array<{ id: string; token: string }> = [];
      for (const name of ['race-a', 'race-b', 'race-c']) {
        const agent = await world.createAgent('batch-race@example.com', `batch-${name}`);
        await grant(world, agent.id, 10_000_000n);
        agents.push(agent);
      }
      const callsFor = (order: typeof agents, prefix: string) =>
        Array.from({ length: 15 }, (_, i) => order.map((agent) => ({ token: agent.token, offerId: offer.id, key: `${prefix}-${agent.id}-${i}` }))).flat();
      const [one, two] = await Promise.all([asOneBatch(callsFor(agents, 'one')), asOneBatch(callsFor([...agents].reverse(), 'two'), second)]);
      const answers = [...one, ...two];
      expect(answers.filter((a) => a.status !== 200 && a.status !== 402)).toEqual([]);
      for (const agent of agents) {
        const mine = answers.filter((a) => (a.status === 200 ? a.body.redemption.agentId === agent.id : true));
        expect(mine.filter((a) => a.status === 200)).toHaveLength(10);
        expect(await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).toMatchObject({ heldUc: '10000000', availableUc: '0' });
      }
      expect(answers.filter((a) => a.status === 402)).toHaveLength(60);
      await expectLedgerInvariants(world.gw.gateway.db);
    }, 120_000);
  });
});
