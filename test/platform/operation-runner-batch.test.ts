// Group commit in the operation runner: the batcher's bounds and order, and the runner's batches (one
// transaction for many calls; a fault in one call sends every call of the batch down the one-by-one path,
// where only the faulty one fails; an unreachable database answers them all at once).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Type, type Static } from '@sinclair/typebox';
import { Batcher, togetherOrAlone, type Settled } from '../../src/platform/batcher.ts';
import { StorageUnavailableError } from '../../src/platform/db/faults.ts';
import { ApiError } from '../../src/platform/errors.ts';
import { BATCH_LIMITS, batcherOf, runOperation, type SingleStepOperation } from '../../src/platform/operations.ts';
import type { Principal } from '../../src/platform/principal.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

interface Item {
  key: string;
  value: number;
}

/** A batcher whose batches the test finishes by hand, recording what each batch held. */
function manualBatcher(limits: { batchSizeMax?: number; batchesInFlightMax?: number; queueLengthMax?: number; gatherOneTurn?: boolean } = {}) {
  const batches: Array<{ items: readonly Item[]; finish: () => void }> = [];
  const batcher = new Batcher<Item, number>(
    (items) =>
      new Promise<Array<Settled<number>>>((resolve) => {
        batches.push({ items, finish: () => resolve(items.map((item) => ({ ok: true, value: item.value * 10 }))) });
      }),
    (item) => item.key,
    { batchSizeMax: 3, batchesInFlightMax: 2, queueLengthMax: 100, retryAfterS: 1, ...limits },
  );
  return { batcher, batches };
}

const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('the batcher', () => {
  it('runs a call at once when nothing is running (no window to wait out when idle)', async () => {
    const { batcher, batches } = manualBatcher();
    const answer = batcher.submit({ key: 'a', value: 1 });
    expect(batches.map((b) => b.items)).toEqual([[{ key: 'a', value: 1 }]]);
    batches[0]!.finish();
    expect(await answer).toBe(10);
  });

  it('gathers one key\'s calls that arrive while its batch runs, in order, up to the batch size; other keys run beside it', async () => {
    const { batcher, batches } = manualBatcher({ batchesInFlightMax: 2 });
    const answers = [batcher.submit({ key: 'a', value: 1 })];
    for (const [key, value] of [['a', 2], ['b', 3], ['a', 4], ['a', 5], ['a', 6], ['b', 7], ['a', 8]] as const) answers.push(batcher.submit({ key, value }));
    // a1 at once; b3 in the second slot; a's later calls wait for a's running batch, never overtaking it.
    expect(batches.map((b) => b.items.map((i) => i.value))).toEqual([[1], [3]]);
    batches[0]!.finish();
    await settled();
    // a's next batch: its queued calls in arrival order, three at most (the batch size).
    expect(batches.map((b) => b.items.map((i) => i.value))).toEqual([[1], [3], [2, 4, 5]]);
    expect(batcher.queued).toBe(3);
    batches[1]!.finish();
    await settled();
    expect(batches[3]!.items.map((i) => i.value)).toEqual([7]);
    batches[2]!.finish();
    await settled();
    expect(batches[4]!.items.map((i) => i.value)).toEqual([6, 8]);
    batches[3]!.finish();
    batches[4]!.finish();
    expect(await Promise.all(answers)).toEqual([10, 20, 30, 40, 50, 60, 70, 80]);
  });

  it('with gatherOneTurn (PGlite), starts a batch after one event-loop turn, so calls of the same turn share it', async () => {
    const { batcher, batches } = manualBatcher({ gatherOneTurn: true });
    const answers = [1, 2, 3].map((value) => batcher.submit({ key: `k${value}`, value }));
    expect(batches).toHaveLength(0);
    await new Promise((resolve) => setImmediate(resolve));
    expect(batches.map((b) => b.items.map((i) => i.value))).toEqual([[1, 2, 3]]);
    batches[0]!.finish();
    expect(await Promise.all(answers)).toEqual([10, 20, 30]);
  });

  it('refuses a call with 503 overloaded and Retry-After once the queue is full', async () => {
    const { batcher, batches } = manualBatcher({ batchesInFlightMax: 1, queueLengthMax: 2 });
    const answers = [1, 2, 3].map((value) => batcher.submit({ key: 'a', value }));
    const refused = await batcher.submit({ key: 'b', value: 4 }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({ code: 'overloaded', status: 503, retryAfterS: 1, httpHeaders: { 'retry-after': '1' } });
    batches[0]!.finish();
    await settled();
    batches[1]!.finish();
    expect(await Promise.all(answers)).toEqual([10, 20, 30]);
  });
});

const Input = Type.Object({ amount: Type.Integer() }, { additionalProperties: false });
type Input = Static<typeof Input>;
const alice: Principal = { kind: 'owner', id: 'own_batch_alice', ownerId: 'own_batch_alice', scopes: [], credential: 'test' };

const attempts = new Map<number, number>();
async function amountOf(tx: { query(sql: string): Promise<unknown> }, amount: number): Promise<{ amount: number }> {
  attempts.set(amount, (attempts.get(amount) ?? 0) + 1);
  await tx.query('SELECT 1');
  if (amount === 0) throw new ApiError('conflict', { detail: 'zero is refused' });
  if (amount < 0) throw new Error('a fault, not an answer');
  return { amount };
}
const batchedAmount: SingleStepOperation<Input, { amount: number }> = {
  name: 'batchedAmount',
  input: Input,
  idempotency: { key: 'required' },
  batch: {
    orderKey: () => 'one',
    runMany: async (tx, calls) => {
      const outcomes: Array<Settled<{ amount: number }>> = [];
      for (const { call } of calls) {
        try {
          outcomes.push({ ok: true, value: await amountOf(tx, call.input.amount) });
        } catch (error) {
          if (!(error instanceof ApiError)) throw error;
          outcomes.push({ ok: false, error });
        }
      }
      return outcomes;
    },
  },
};

describe('together or alone', () => {
  const items = ['a', 'b', 'c'];
  const failing = (first: Error) => {
    const applied: Array<readonly string[]> = [];
    const apply = async (some: readonly string[]): Promise<Array<Settled<string>>> => {
      applied.push(some);
      if (applied.length === 1) throw first;
      return some.map((item) => ({ ok: true, value: item.toUpperCase() }));
    };
    return { applied, apply };
  };

  it('applies each item alone, in order, after a fault of the batch: one bad item fails only itself', async () => {
    const { applied, apply } = failing(new Error('a fault, not an answer'));
    expect(await togetherOrAlone(items, apply)).toEqual(items.map((item) => ({ ok: true, value: item.toUpperCase() })));
    expect(applied).toEqual([items, ['a'], ['b'], ['c']]);
    // A statement or lock past its bound may be one item's doing: the others still get their answers.
    const timedOut = failing(new StorageUnavailableError('timeout', new Error('canceling statement due to statement timeout')));
    expect((await togetherOrAlone(items, timedOut.apply)).every((outcome) => outcome.ok)).toBe(true);
    expect(timedOut.applied).toHaveLength(4);
  });

  it('answers every item with an unreachable database at once, instead of waiting for it again once per item', async () => {
    const unreachable = new StorageUnavailableError('unreachable', new Error('timeout exceeded when trying to connect'));
    const { applied, apply } = failing(unreachable);
    expect(await togetherOrAlone(items, apply)).toEqual(items.map(() => ({ ok: false, error: unreachable })));
    expect(applied).toEqual([items]);
  });
});

describe('batches in the operation runner', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway();
  });
  afterAll(() => gw.close());

  const call = (amount: number, key: string) => runOperation(gw.gateway, batchedAmount, { principal: alice, idempotencyKey: key, input: { amount } });

  it('a fault in one call reruns each call alone: the others succeed once, a refusal is stored, only the faulty call fails', async () => {
    const batcher = batcherOf(gw.gateway, batchedAmount);
    batcher.limits = { ...BATCH_LIMITS };
    batcher.pause();
    const answers = [call(1, 'fault-1'), call(0, 'fault-0'), call(-1, 'fault-bad'), call(2, 'fault-2')].map((p) => p.then((v) => v, (error: unknown) => error));
    expect(batcher.queued).toBe(4);
    batcher.resume();
    const [one, zero, bad, two] = await Promise.all(answers);
    expect(one).toEqual({ result: { amount: 1 }, replayed: false });
    expect(two).toEqual({ result: { amount: 2 }, replayed: false });
    expect(zero).toMatchObject({ code: 'conflict' });
    expect(bad).toMatchObject({ message: 'a fault, not an answer' });
    // In the batch, then alone; the batch's effects were rolled back, so each key holds one answer.
    expect(attempts.get(1)).toBe(2);
    expect(await call(1, 'fault-1')).toEqual({ result: { amount: 1 }, replayed: true });
    expect(await call(0, 'fault-0').catch((error: unknown) => error)).toMatchObject({ code: 'conflict', options: { headers: { 'idempotent-replayed': 'true' } } });
    // The faulty call's key was given back: it runs again.
    expect(await call(-1, 'fault-bad').catch((error: unknown) => error)).toMatchObject({ message: 'a fault, not an answer' });
    expect(attempts.get(-1)).toBe(3);
  });

  it('reads ahead for every call of a batch, beside the claims, and hands the read to the owned calls only', async () => {
    const readFor: number[][] = [];
    const ranWith: Array<{ amounts: number[]; read: string | undefined }> = [];
    const readingAmount: SingleStepOperation<Input, { amount: number }> = {
      name: 'readingAmount',
      input: Input,
      idempotency: { key: 'optional' },
      batch: {
        orderKey: () => 'one',
        readAhead: async (tx, calls) => {
          readFor.push(calls.map(({ call }) => call.input.amount));
          const { rows } = await tx.query<{ read: string }>("SELECT 'read' AS read");
          return rows[0]!.read;
        },
        runMany: async (_tx, calls, read: string | undefined) => {
          ranWith.push({ amounts: calls.map(({ call }) => call.input.amount), read });
          return calls.map(({ call }) => ({ ok: true, value: { amount: call.input.amount } }));
        },
      },
    };
    const run = (amount: number, key?: string) => runOperation(gw.gateway, readingAmount, { principal: alice, input: { amount }, ...(key ? { idempotencyKey: key } : {}) });
    expect(await run(5, 'ahead-5')).toEqual({ result: { amount: 5 }, replayed: false });
    const batcher = batcherOf(gw.gateway, readingAmount);
    batcher.limits = { ...BATCH_LIMITS };
    batcher.pause();
    const answers = [run(6, 'ahead-6'), run(5, 'ahead-5'), run(7, 'ahead-7')];
    batcher.resume();
    expect(await Promise.all(answers)).toEqual([
      { result: { amount: 6 }, replayed: false },
      { result: { amount: 5 }, replayed: true },
      { result: { amount: 7 }, replayed: false },
    ]);
    // Without a key, the call runs as a batch of one in its own transaction, read first.
    expect(await run(8)).toEqual({ result: { amount: 8 }, replayed: false });
    expect(readFor).toEqual([[5], [6, 5, 7], [8]]);
    expect(ranWith).toEqual([
      { amounts: [5], read: 'read' },
      { amounts: [6, 7], read: 'read' },
      { amounts: [8], read: 'read' },
    ]);
  });

  it("runs a batch's statements on generic plans that probe rather than scan, for that transaction only", async () => {
    const settings = "SELECT current_setting('plan_cache_mode') AS mode, current_setting('enable_seqscan') AS seqscan";
    type Settings = { mode: string; seqscan: string };
    const seen: Array<{ read: Settings; run: Settings }> = [];
    const planned: SingleStepOperation<Input, { amount: number }> = {
      name: 'plannedAmount',
      input: Input,
      idempotency: { key: 'optional' },
      batch: {
        orderKey: () => 'one',
        readAhead: async (tx) => (await tx.query<Settings>(settings)).rows[0]!,
        runMany: async (tx, calls, read: Settings | undefined) => {
          seen.push({ read: read!, run: (await tx.query<Settings>(settings)).rows[0]! });
          return calls.map(({ call }) => ({ ok: true, value: { amount: call.input.amount } }));
        },
      },
    };
    expect(await runOperation(gw.gateway, planned, { principal: alice, input: { amount: 1 }, idempotencyKey: 'planned-1' })).toEqual({ result: { amount: 1 }, replayed: false });
    const batch = { mode: 'force_generic_plan', seqscan: 'off' };
    expect(seen).toEqual([{ read: batch, run: batch }]);
    // The settings were the transaction's own: the next transaction on the pool plans as configured.
    const after = await gw.gateway.db.transaction(async (tx) => (await tx.query<Settings>(settings)).rows[0]!);
    expect(after).toEqual({ mode: 'auto', seqscan: 'on' });
  });
});
