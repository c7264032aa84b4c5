// Model-based test of the ledger: random sequences of grant / mint / capture / partial capture /
// release / expire / refund / clock advance run against the real service and database and against a
// small in-memory model of the rules; after every step the database must agree with the model and every
// ledger invariant must hold. The generators aim at the corners where one-µc faults hide: many small
// lots, holds and captures that end exactly at (or one µc either side of) an allocation boundary, and
// refunds of exactly what is left, one µc more, or one µc.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ApiError } from '../../src/platform/errors.ts';
import { startWorld, type World } from '../support/world.ts';
import { openShop, type Shop } from '../support/ledger-fixture.ts';

const RUNS = Number(process.env.ACG_MODEL_RUNS ?? 250);
const AGENTS = 2;

interface ModelLot { id: string; agentId: string; priority: number; expiresAtS: number | null; granted: bigint; remaining: bigint; order: number }
interface ModelHold {
  id: string;
  agentId: string;
  amount: bigint;
  captured: bigint;
  refunded: bigint;
  state: 'held' | 'captured' | 'released' | 'expired';
  expiresAtS: number;
  refundWindowS: number;
  capturedAtS: number | null;
  allocations: Array<{ lotId: string; amount: bigint; captured: bigint }>;
}
interface Model { agents: string[]; lots: ModelLot[]; holds: ModelHold[]; earnings: bigint }
interface Real { world: World; shop: Shop }

let world: World;
let shop: Shop;
let runNumber = 0;
let ownerId: string;
beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
  ownerId = (await world.api('GET', '/v1/me', { token: await world.humanToken('model@example.com') })).body.owner.id;
  world.gw.clock.freeze();
});
afterAll(() => world.close());

const nowS = () => world.gw.clock.nowS();
const ledger = () => world.gw.services.ledger;
const tx = <T>(fn: (q: import('../../src/platform/db/database.ts').Tx) => Promise<T>) => world.gw.gateway.db.transaction(fn);
const live = (lot: ModelLot) => lot.expiresAtS === null || lot.expiresAtS > nowS();
const due = (hold: ModelHold) => hold.state === 'held' && hold.expiresAtS <= nowS();

async function errorCode(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'ok';
  } catch (error) {
    if (error instanceof ApiError) return error.code;
    throw error;
  }
}

function returnToLots(model: Model, hold: ModelHold, capturedUc: bigint) {
  let toCapture = capturedUc;
  for (const a of hold.allocations) {
    const take = a.amount < toCapture ? a.amount : toCapture;
    toCapture -= take;
    a.captured = take;
    model.lots.find((l) => l.id === a.lotId)!.remaining += a.amount - take;
  }
  hold.captured = capturedUc;
  model.earnings += capturedUc;
}

class Grant implements fc.AsyncCommand<Model, Real> {
  constructor(readonly agent: number, readonly amount: bigint, readonly priority: number, readonly lifetimeS: number | null) {}
  check = () => true;
  async run(model: Model) {
    const agentId = model.agents[this.agent]!;
    const expiresAtS = this.lifetimeS === null ? null : nowS() + this.lifetimeS;
    const lot = await tx((q) => ledger().grant(q, { agentId, amountUc: this.amount, priority: this.priority, expiresAtS }));
    model.lots.push({ id: lot.id, agentId, priority: this.priority, expiresAtS, granted: this.amount, remaining: this.amount, order: model.lots.length });
  }
  toString = () => `grant(${this.agent}, ${this.amount}, p${this.priority}, ${this.lifetimeS})`;
}

class GrantMany implements fc.AsyncCommand<Model, Real> {
  constructor(readonly agent: number, readonly amounts: bigint[], readonly priority: number) {}
  check = () => true;
  async run(model: Model) {
    for (const amount of this.amounts) await new Grant(this.agent, amount, this.priority, null).run(model);
  }
  toString = () => `grantMany(${this.agent}, [${this.amounts.join(', ')}], p${this.priority})`;
}

function spendableLots(model: Model, agentId: string): ModelLot[] {
  return model.lots
    .filter((l) => l.agentId === agentId && l.remaining > 0n && live(l))
    .sort((a, b) => a.priority - b.priority || (a.expiresAtS ?? Infinity) - (b.expiresAtS ?? Infinity) || a.order - b.order);
}

/** The `index`-th hold, among those in `state` when `targeted` and there are any (most commands aim at holds they can act on). */
function pickHold(model: Model, index: number, targeted: boolean, state: ModelHold['state']): ModelHold {
  const candidates = targeted ? model.holds.filter((h) => h.state === state && !due(h)) : [];
  const from = candidates.length > 0 ? candidates : model.holds;
  return from[index % from.length]!;
}

/** The amount that ends `delta` µc from the end of the `boundary`-th of `parts` (in order), at least 1. */
function nearBoundary(parts: readonly bigint[], boundary: number, delta: number): bigint {
  if (parts.length === 0) return 1n;
  const upTo = parts.slice(0, (boundary % parts.length) + 1).reduce((s, p) => s + p, 0n) + BigInt(delta);
  return upTo > 0n ? upTo : 1n;
}

/** A mint whose amount is fixed, or computed at run time to end near a boundary between the agent's lots. */
class Mint implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly agent: number,
    readonly amount: bigint | { boundary: number; delta: number },
    readonly lifetimeS: number,
    readonly refundWindowS: number,
  ) {}
  check = () => true;
  async run(model: Model) {
    const agentId = model.agents[this.agent]!;
    const amount =
      typeof this.amount === 'bigint' ? this.amount : nearBoundary(spendableLots(model, agentId).map((l) => l.remaining), this.amount.boundary, this.amount.delta);
    const total = (lots: ModelLot[]) => lots.reduce((s, l) => s + l.remaining, 0n);
    let spendable = spendableLots(model, agentId);
    // The rule: when credit falls short, holds past their deadline are reclaimed first — and that sticks
    // only if the hold then succeeds (otherwise the whole attempt rolls back).
    const due_ = model.holds.filter((h) => h.agentId === agentId && due(h));
    if (total(spendable) < amount && due_.length > 0) {
      const returnedToLive = due_.flatMap((h) => h.allocations).filter((a) => live(model.lots.find((l) => l.id === a.lotId)!)).reduce((s, a) => s + a.amount, 0n);
      if (total(spendable) + returnedToLive >= amount) {
        for (const hold of due_) {
          returnToLots(model, hold, 0n);
          hold.state = 'expired';
        }
        spendable = spendableLots(model, agentId);
      }
    }
    const available = total(spendable);
    let result: import('../../src/ledger/service.ts').Redemption | undefined;
    const code = await errorCode(
      tx(async (q) => {
        result = await ledger().hold(q, {
          agentId,
          acceptorId: shop.merchantId,
          merchantId: shop.merchantId,
          offerId: 'off_model',
          category: 'books',
          amountUc: amount,
          lifetimeS: this.lifetimeS,
          refundWindowS: this.refundWindowS,
        });
      }),
    );
    if (available < amount) {
      expect(code).toBe('INSUFFICIENT_CREDITS');
      return;
    }
    expect(code).toBe('ok');
    const allocations: ModelHold['allocations'] = [];
    let needed = amount;
    for (const lot of spendable) {
      if (needed === 0n) break;
      const take = lot.remaining < needed ? lot.remaining : needed;
      lot.remaining -= take;
      needed -= take;
      allocations.push({ lotId: lot.id, amount: take, captured: 0n });
    }
    expect(result!.allocations).toEqual(allocations.map((a) => ({ lotId: a.lotId, amountUc: a.amount.toString() })));
    model.holds.push({
      id: result!.id,
      agentId,
      amount,
      captured: 0n,
      refunded: 0n,
      state: 'held',
      expiresAtS: result!.expiresAt,
      refundWindowS: this.refundWindowS,
      capturedAtS: null,
      allocations,
    });
  }
  toString = () => `mint(${this.agent}, ${typeof this.amount === 'bigint' ? this.amount : `boundary ${this.amount.boundary}${this.amount.delta >= 0 ? '+' : ''}${this.amount.delta}`}, ${this.lifetimeS}s, refund ${this.refundWindowS}s)`;
}

/** numerator 0..10 of the held amount, 11 for one µc more than held; or near a boundary between its allocations. */
type CapturePick = { numerator: number } | { boundary: number; delta: number };

class Capture implements fc.AsyncCommand<Model, Real> {
  constructor(readonly hold: number, readonly targeted: boolean, readonly pick: CapturePick) {}
  check = (model: Readonly<Model>) => model.holds.length > 0;
  async run(model: Model) {
    const hold = pickHold(model, this.hold, this.targeted, 'held');
    const amount =
      'boundary' in this.pick
        ? nearBoundary(hold.allocations.map((a) => a.amount), this.pick.boundary, this.pick.delta)
        : this.pick.numerator === 11
          ? hold.amount + 1n
          : (hold.amount * BigInt(this.pick.numerator)) / 10n;
    const code = await errorCode(tx((q) => ledger().capture(q, hold.id, { merchantId: shop.merchantId, amountUc: amount })));
    if (hold.state !== 'held' || due(hold)) return void expect(code).toBe('hold_resolved');
    if (amount <= 0n || amount > hold.amount) return void expect(code).toBe('invalid_input');
    expect(code).toBe('ok');
    returnToLots(model, hold, amount);
    hold.state = 'captured';
    hold.capturedAtS = nowS();
  }
  toString = () => `capture(${this.targeted ? 'held ' : ''}#${this.hold}, ${'boundary' in this.pick ? `boundary ${this.pick.boundary}${this.pick.delta >= 0 ? '+' : ''}${this.pick.delta}` : `${this.pick.numerator}/10`})`;
}

/** What to refund: all that is left (no amount sent), exactly what is left, one µc more, one µc, or a tenth-fraction of the capture. */
type RefundPick = 'default' | 'rest' | 'rest+1' | 'one' | { numerator: number };

class Refund implements fc.AsyncCommand<Model, Real> {
  constructor(readonly hold: number, readonly targeted: boolean, readonly pick: RefundPick) {}
  check = (model: Readonly<Model>) => model.holds.length > 0;
  async run(model: Model) {
    const hold = pickHold(model, this.hold, this.targeted, 'captured');
    const refundable = hold.captured - hold.refunded;
    const pick = this.pick;
    const amount =
      pick === 'default' ? undefined : pick === 'rest' ? refundable : pick === 'rest+1' ? refundable + 1n : pick === 'one' ? 1n : (hold.captured * BigInt(pick.numerator)) / 10n;
    let result: { refund: { id: string; amountUc: string } } | undefined;
    const code = await errorCode(
      tx(async (q) => {
        result = await ledger().refund(q, hold.id, { merchantId: shop.merchantId, amountUc: amount });
      }),
    );
    const expected =
      hold.state !== 'captured'
        ? 'conflict'
        : nowS() >= hold.capturedAtS! + hold.refundWindowS
          ? 'refund_window_closed'
          : amount === undefined && refundable === 0n
            ? 'conflict'
            : amount !== undefined && amount <= 0n
              ? 'invalid_input'
              : (amount ?? refundable) > refundable
                ? 'refund_exceeds_captured'
                : (amount ?? refundable) > model.earnings
                  ? 'insufficient_earnings'
                  : 'ok';
    expect(code).toBe(expected);
    if (code !== 'ok') return;
    const refundedUc = amount ?? refundable;
    expect(result!.refund.amountUc).toBe(refundedUc.toString());
    // The credit comes back as one new lot of the hold's agent, burning and lapsing like its sources.
    const sources = hold.allocations.filter((a) => a.captured > 0n).map((a) => model.lots.find((l) => l.id === a.lotId)!);
    const { rows } = await world.gw.gateway.db.query<{ id: string; agent_id: string; source: string; priority: number; expires_at_s: bigint | null; granted_uc: bigint }>(
      `SELECT id, agent_id, source, priority, expires_at_s, granted_uc FROM credit_lots WHERE source_ref = $1`,
      [result!.refund.id],
    );
    const expiresAtS = sources.some((l) => l.expiresAtS === null) ? null : Math.max(...sources.map((l) => l.expiresAtS!));
    const priority = Math.min(...sources.map((l) => l.priority));
    expect(rows).toEqual([{ id: expect.any(String), agent_id: hold.agentId, source: 'refund', priority, expires_at_s: expiresAtS === null ? null : BigInt(expiresAtS), granted_uc: refundedUc }]);
    model.lots.push({ id: rows[0]!.id, agentId: hold.agentId, priority, expiresAtS, granted: refundedUc, remaining: refundedUc, order: model.lots.length });
    hold.refunded += refundedUc;
    model.earnings -= refundedUc;
  }
  toString = () => `refund(${this.targeted ? 'captured ' : ''}#${this.hold}, ${typeof this.pick === 'string' ? this.pick : `${this.pick.numerator}/10`})`;
}

class Release implements fc.AsyncCommand<Model, Real> {
  constructor(readonly hold: number) {}
  check = (model: Readonly<Model>) => model.holds.length > 0;
  async run(model: Model) {
    const hold = model.holds[this.hold % model.holds.length]!;
    const code = await errorCode(tx((q) => ledger().release(q, hold.id, { merchantId: shop.merchantId })));
    if (hold.state === 'released') return void expect(code).toBe('ok');
    if (hold.state !== 'held' || due(hold)) return void expect(code).toBe('hold_resolved');
    expect(code).toBe('ok');
    returnToLots(model, hold, 0n);
    hold.state = 'released';
  }
  toString = () => `release(#${this.hold})`;
}

class Sweep implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(model: Model) {
    await ledger().expireDue();
    for (const hold of model.holds.filter(due)) {
      returnToLots(model, hold, 0n);
      hold.state = 'expired';
    }
  }
  toString = () => 'sweep';
}

class Advance implements fc.AsyncCommand<Model, Real> {
  constructor(readonly seconds: number) {}
  check = () => true;
  async run() {
    world.gw.clock.advance(this.seconds * 1000);
  }
  toString = () => `advance(${this.seconds}s)`;
}

/**
 * The agent's running totals (its balance row) agree with the model, with the lots and holds they sum
 * up, and with the journal: held = Σ open holds' accounts, captured = Σ what captures credited to
 * earnings, granted = Σ grant and refund credits of its lots; and granted = Σ lot remainders + held + captured.
 */
async function checkRunningTotals(model: Model, agentId: string) {
  type Totals = Record<'held_uc' | 'captured_uc' | 'granted_uc' | 'refunded_uc' | 'remaining_uc' | 'journal_held_uc' | 'journal_captured_uc' | 'journal_granted_uc' | 'journal_refunded_uc', bigint>;
  const { rows } = await world.gw.gateway.db.query<Totals>(
    `SELECT COALESCE(b.held_uc, 0)::bigint AS held_uc, COALESCE(b.captured_uc, 0)::bigint AS captured_uc,
            COALESCE(b.granted_uc, 0)::bigint AS granted_uc, COALESCE(b.refunded_uc, 0)::bigint AS refunded_uc,
            (SELECT COALESCE(SUM(remaining_uc), 0) FROM credit_lots WHERE agent_id = a.id)::bigint AS remaining_uc,
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN holds h ON j.account = 'hold:' || h.id WHERE h.agent_id = a.id)::bigint AS journal_held_uc,
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN holds h ON j.operation_id = h.id || ':capture'
              WHERE h.agent_id = a.id AND j.account NOT LIKE 'hold:%' AND j.account NOT LIKE 'lot:%')::bigint AS journal_captured_uc,
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN credit_lots l ON j.account = 'lot:' || l.id
              WHERE l.agent_id = a.id AND j.kind IN ('grant', 'refund'))::bigint AS journal_granted_uc,
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN credit_lots l ON j.account = 'lot:' || l.id
              WHERE l.agent_id = a.id AND j.kind = 'refund')::bigint AS journal_refunded_uc
       FROM (SELECT $1::text AS id) a LEFT JOIN agent_balances b ON b.agent_id = a.id`,
    [agentId],
  );
  const totals = rows[0]!;
  const holds = model.holds.filter((h) => h.agentId === agentId);
  const sum = (values: bigint[]) => values.reduce((s, v) => s + v, 0n);
  expect(totals.held_uc, `held of ${agentId}`).toBe(sum(holds.filter((h) => h.state === 'held').map((h) => h.amount)));
  expect(totals.captured_uc, `captured of ${agentId}`).toBe(sum(holds.filter((h) => h.state === 'captured').map((h) => h.captured)));
  expect(totals.granted_uc, `granted of ${agentId}`).toBe(sum(model.lots.filter((l) => l.agentId === agentId).map((l) => l.granted)));
  expect(totals.refunded_uc, `refunded of ${agentId}`).toBe(sum(holds.map((h) => h.refunded)));
  expect(totals.held_uc, 'held agrees with the journal').toBe(totals.journal_held_uc);
  expect(totals.captured_uc, 'captured agrees with the journal').toBe(totals.journal_captured_uc);
  expect(totals.granted_uc, 'granted agrees with the journal').toBe(totals.journal_granted_uc);
  expect(totals.refunded_uc, 'refunded agrees with the journal').toBe(totals.journal_refunded_uc);
  expect(totals.granted_uc, 'granted = Σ lot remainders + held + captured').toBe(totals.remaining_uc + totals.held_uc + totals.captured_uc);
}

async function checkInvariants(model: Model) {
  const db = world.gw.gateway.db;
  const lotIds = model.lots.map((l) => l.id);
  const holdIds = model.holds.map((h) => h.id);
  const { rows: lots } = await db.query<{ id: string; remaining_uc: bigint; granted_uc: bigint; open_uc: bigint; captured_uc: bigint; journal_uc: bigint }>(
    `SELECT l.id, l.remaining_uc, l.granted_uc,
            COALESCE((SELECT SUM(a.amount_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'held'), 0)::bigint AS open_uc,
            COALESCE((SELECT SUM(a.captured_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'captured'), 0)::bigint AS captured_uc,
            COALESCE((SELECT SUM(amount_uc) FROM journal_entries WHERE account = 'lot:' || l.id), 0)::bigint AS journal_uc
       FROM credit_lots l WHERE l.id = ANY($1::text[])`,
    [lotIds],
  );
  for (const row of lots) {
    const lot = model.lots.find((l) => l.id === row.id)!;
    expect(row.remaining_uc, `remaining of ${row.id}`).toBe(lot.remaining);
    expect(row.remaining_uc >= 0n).toBe(true);
    expect(row.journal_uc, `journal replay of ${row.id}`).toBe(row.remaining_uc);
    // Σ allocations of open holds = held amount per lot; every µc of a lot is somewhere.
    const openInModel = model.holds.filter((h) => h.state === 'held').flatMap((h) => h.allocations).filter((a) => a.lotId === row.id).reduce((s, a) => s + a.amount, 0n);
    expect(row.open_uc).toBe(openInModel);
    expect(row.granted_uc).toBe(row.remaining_uc + row.open_uc + row.captured_uc);
  }
  const { rows: holds } = await db.query<{ id: string; state: string; amount_uc: bigint; captured_uc: bigint; refunded_uc: bigint; refunds_uc: bigint; journal_uc: bigint; resolutions: bigint }>(
    `SELECT h.id, h.state, h.amount_uc, h.captured_uc, h.refunded_uc,
            COALESCE((SELECT SUM(amount_uc) FROM refunds WHERE hold_id = h.id), 0)::bigint AS refunds_uc,
            COALESCE((SELECT SUM(amount_uc) FROM journal_entries WHERE account = 'hold:' || h.id), 0)::bigint AS journal_uc,
            (SELECT count(DISTINCT operation_id) FROM journal_entries WHERE operation_id LIKE h.id || ':%')::bigint AS resolutions
       FROM holds h WHERE h.id = ANY($1::text[])`,
    [holdIds],
  );
  for (const row of holds) {
    const hold = model.holds.find((h) => h.id === row.id)!;
    expect(row.state, `state of ${row.id}`).toBe(hold.state);
    expect(row.captured_uc).toBe(hold.captured);
    expect(row.captured_uc <= row.amount_uc).toBe(true);
    expect(row.refunded_uc, `refunded of ${row.id}`).toBe(hold.refunded);
    expect(row.refunds_uc).toBe(row.refunded_uc);
    expect(row.refunded_uc <= row.captured_uc).toBe(true);
    expect(row.resolutions <= 1n, `${row.id} resolved at most once`).toBe(true);
    expect(row.journal_uc).toBe(row.state === 'held' ? row.amount_uc : 0n);
  }
  // Each allocation captured exactly what burn order gives it: the first µc of a hold's allocations.
  const { rows: allocations } = await db.query<{ hold_id: string; lot_id: string; captured_uc: bigint }>(
    'SELECT hold_id, lot_id, captured_uc FROM hold_allocations WHERE hold_id = ANY($1::text[])',
    [holdIds],
  );
  for (const row of allocations) {
    const allocation = model.holds.find((h) => h.id === row.hold_id)!.allocations.find((a) => a.lotId === row.lot_id)!;
    expect(row.captured_uc, `captured from ${row.lot_id} by ${row.hold_id}`).toBe(allocation.captured);
  }
  for (const agentId of model.agents) {
    const b = await ledger().balance(db, agentId);
    expect(BigInt(b.grantedUc)).toBe(BigInt(b.availableUc) + BigInt(b.heldUc) + BigInt(b.capturedUc) + BigInt(b.lapsedUc));
    const modelAvailable = model.lots.filter((l) => l.agentId === agentId && live(l)).reduce((s, l) => s + l.remaining, 0n);
    expect(BigInt(b.availableUc)).toBe(modelAvailable);
    await checkRunningTotals(model, agentId);
  }
  // Σ merchant earnings = Σ captured − Σ refunded, and the whole journal balances.
  const { rows: totals } = await db.query<{ earned: bigint; captured: bigint; journal: bigint; journal_earned: bigint }>(
    `SELECT (SELECT COALESCE(SUM(balance_uc), 0) FROM ledger_accounts WHERE id LIKE 'merchant:%')::bigint AS earned,
            (SELECT COALESCE(SUM(captured_uc - refunded_uc), 0) FROM holds WHERE merchant_id IS NOT NULL)::bigint AS captured,
            (SELECT COALESCE(SUM(amount_uc), 0) FROM journal_entries)::bigint AS journal,
            (SELECT COALESCE(SUM(amount_uc), 0) FROM journal_entries WHERE account LIKE 'merchant:%')::bigint AS journal_earned`,
  );
  expect(totals[0]!.earned).toBe(totals[0]!.captured);
  expect(totals[0]!.journal_earned).toBe(totals[0]!.earned);
  expect(totals[0]!.journal).toBe(0n);
  expect(await world.gw.services.ledger.merchantEarnings(db, shop.merchantId)).toBe(model.earnings.toString());
}

const nearDelta = fc.integer({ min: -1, max: 1 });
const mintAmount = fc.oneof(
  fc.bigInt({ min: 1n, max: 3_000_000n }),
  fc.bigInt({ min: 1n, max: 12n }),
  fc.record({ boundary: fc.nat({ max: 7 }), delta: nearDelta }),
);
const capturePick: fc.Arbitrary<CapturePick> = fc.oneof(fc.record({ numerator: fc.integer({ min: 0, max: 11 }) }), fc.record({ boundary: fc.nat({ max: 7 }), delta: nearDelta }));
const refundPick: fc.Arbitrary<RefundPick> = fc.oneof(
  fc.constantFrom<RefundPick>('default', 'rest', 'rest+1', 'one'),
  fc.record({ numerator: fc.integer({ min: 0, max: 10 }) }),
);
/** Mostly open for a while (Advance crosses it now and then), sometimes 0 (no refunds). */
const refundWindow = fc.oneof({ arbitrary: fc.constant(0), weight: 1 }, { arbitrary: fc.integer({ min: 1, max: 1200 }), weight: 6 });

const agentIndex = fc.integer({ min: 0, max: AGENTS - 1 });
const grantFor = (agent: fc.Arbitrary<number>) => fc
  .tuple(agent, fc.bigInt({ min: 1n, max: 5_000_000n }), fc.integer({ min: 0, max: 1 }), fc.option(fc.integer({ min: 1, max: 900 }), { nil: null, freq: 2 }))
  .map(([a, amount, p, life]) => new Grant(a, amount, p, life));
/** Many small lots: holds then span several of them, and their boundaries are a few µc apart. */
const grantManyFor = (agent: fc.Arbitrary<number>) => fc
  .tuple(agent, fc.array(fc.bigInt({ min: 1n, max: 5n }), { minLength: 3, maxLength: 8 }), fc.integer({ min: 0, max: 1 }))
  .map(([a, amounts, p]) => new GrantMany(a, amounts, p));
/** Each run starts with credit for every agent, so most mints succeed and later commands have holds to work on. */
const funding = fc
  .tuple(...Array.from({ length: AGENTS }, (_, a) => fc.array(fc.oneof(grantFor(fc.constant(a)), grantManyFor(fc.constant(a))), { minLength: 1, maxLength: 3 })))
  .map((perAgent) => perAgent.flat());
const targeted = fc.oneof({ arbitrary: fc.constant(true), weight: 4 }, { arbitrary: fc.constant(false), weight: 1 });
const command = fc.oneof(
  { arbitrary: grantFor(agentIndex), weight: 1 },
  { arbitrary: grantManyFor(agentIndex), weight: 1 },
  { arbitrary: fc.tuple(agentIndex, mintAmount, fc.integer({ min: 1, max: 300 }), refundWindow).map(([a, amount, life, window]) => new Mint(a, amount, life, window)), weight: 4 },
  { arbitrary: fc.tuple(fc.nat(), targeted, capturePick).map(([h, t, pick]) => new Capture(h, t, pick)), weight: 4 },
  { arbitrary: fc.tuple(fc.nat(), targeted, refundPick).map(([h, t, pick]) => new Refund(h, t, pick)), weight: 3 },
  { arbitrary: fc.nat().map((h) => new Release(h)), weight: 1 },
  { arbitrary: fc.constant(new Sweep()), weight: 1 },
  { arbitrary: fc.integer({ min: 1, max: 400 }).map((s) => new Advance(s)), weight: 1 },
);

describe('the ledger against a reference model', () => {
  it(`keeps every invariant over ${RUNS} random command sequences`, async () => {
    await fc.assert(
      fc.asyncProperty(funding, fc.commands([command], { maxCommands: 16, size: 'max' }), async (setup, cmds) => {
        runNumber += 1;
        const agents: string[] = [];
        for (let i = 0; i < AGENTS; i++) {
          const identity = { issuer: world.agentIssuer.issuer, subject: `model-${runNumber}-${i}` };
          agents.push((await tx((q) => world.gw.services.identity.registerAgent(q, ownerId, { name: identity.subject, identity }))).id);
        }
        // The shop's earnings carry over from earlier runs (they share the database).
        const earnings = BigInt(await ledger().merchantEarnings(world.gw.gateway.db, shop.merchantId));
        const model: Model = { agents, lots: [], holds: [], earnings };
        await fc.asyncModelRun(
          () => ({ model, real: { world, shop } }),
          [...setup, ...cmds].flatMap((c) => [c, { check: () => true, run: () => checkInvariants(model), toString: () => '' } as fc.AsyncCommand<Model, Real>]),
        );
      }),
      { numRuns: RUNS },
    );
  }, 900_000);
});
