// Model-based test of the ledger: random sequences of grant / mint / capture / partial capture /
// release / expire / clock advance run against the real service and database and against a small
// in-memory model of the rules; after every step the database must agree with the model and every
// ledger invariant must hold.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ApiError } from '../../src/platform/errors.ts';
import { startWorld, type World } from '../support/world.ts';
import { openShop, type Shop } from '../support/ledger-fixture.ts';

const RUNS = Number(process.env.ACG_MODEL_RUNS ?? 2000);
const AGENTS = 2;

interface ModelLot { id: string; agentId: string; priority: number; expiresAtS: number | null; granted: bigint; remaining: bigint; order: number }
interface ModelHold { id: string; agentId: string; amount: bigint; captured: bigint; state: 'held' | 'captured' | 'released' | 'expired'; expiresAtS: number; allocations: Array<{ lotId: string; amount: bigint; captured: bigint }> }
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

class Mint implements fc.AsyncCommand<Model, Real> {
  constructor(readonly agent: number, readonly amount: bigint, readonly lifetimeS: number) {}
  check = () => true;
  async run(model: Model) {
    const agentId = model.agents[this.agent]!;
    const spendableLots = () =>
      model.lots
        .filter((l) => l.agentId === agentId && l.remaining > 0n && live(l))
        .sort((a, b) => a.priority - b.priority || (a.expiresAtS ?? Infinity) - (b.expiresAtS ?? Infinity) || a.order - b.order);
    const total = (lots: ModelLot[]) => lots.reduce((s, l) => s + l.remaining, 0n);
    let spendable = spendableLots();
    // The rule: when credit falls short, holds past their deadline are reclaimed first — and that sticks
    // only if the hold then succeeds (otherwise the whole attempt rolls back).
    const due_ = model.holds.filter((h) => h.agentId === agentId && due(h));
    if (total(spendable) < this.amount && due_.length > 0) {
      const returnedToLive = due_.flatMap((h) => h.allocations).filter((a) => live(model.lots.find((l) => l.id === a.lotId)!)).reduce((s, a) => s + a.amount, 0n);
      if (total(spendable) + returnedToLive >= this.amount) {
        for (const hold of due_) {
          returnToLots(model, hold, 0n);
          hold.state = 'expired';
        }
        spendable = spendableLots();
      }
    }
    const available = total(spendable);
    let result: import('../../src/ledger/service.ts').Redemption | undefined;
    const code = await errorCode(
      tx(async (q) => {
        result = await ledger().hold(q, { agentId, acceptorId: shop.merchantId, merchantId: shop.merchantId, offerId: 'off_model', category: 'books', amountUc: this.amount, lifetimeS: this.lifetimeS });
      }),
    );
    if (available < this.amount) {
      expect(code).toBe('INSUFFICIENT_CREDITS');
      return;
    }
    expect(code).toBe('ok');
    const allocations: ModelHold['allocations'] = [];
    let needed = this.amount;
    for (const lot of spendable) {
      if (needed === 0n) break;
      const take = lot.remaining < needed ? lot.remaining : needed;
      lot.remaining -= take;
      needed -= take;
      allocations.push({ lotId: lot.id, amount: take, captured: 0n });
    }
    expect(result!.allocations).toEqual(allocations.map((a) => ({ lotId: a.lotId, amountUc: a.amount.toString() })));
    model.holds.push({ id: result!.id, agentId, amount: this.amount, captured: 0n, state: 'held', expiresAtS: result!.expiresAt, allocations });
  }
  toString = () => `mint(${this.agent}, ${this.amount}, ${this.lifetimeS}s)`;
}

class Capture implements fc.AsyncCommand<Model, Real> {
  constructor(readonly hold: number, readonly numerator: number) {}
  check = (model: Readonly<Model>) => model.holds.length > 0;
  async run(model: Model) {
    const hold = model.holds[this.hold % model.holds.length]!;
    // numerator 0..10 of the held amount; 11 means one more than held.
    const amount = this.numerator === 11 ? hold.amount + 1n : (hold.amount * BigInt(this.numerator)) / 10n;
    const code = await errorCode(tx((q) => ledger().capture(q, hold.id, { merchantId: shop.merchantId, amountUc: amount })));
    if (hold.state !== 'held' || due(hold)) return void expect(code).toBe('hold_resolved');
    if (amount <= 0n || amount > hold.amount) return void expect(code).toBe('invalid_input');
    expect(code).toBe('ok');
    returnToLots(model, hold, amount);
    hold.state = 'captured';
  }
  toString = () => `capture(#${this.hold}, ${this.numerator}/10)`;
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
  const { rows: holds } = await db.query<{ id: string; state: string; amount_uc: bigint; captured_uc: bigint; journal_uc: bigint; resolutions: bigint }>(
    `SELECT h.id, h.state, h.amount_uc, h.captured_uc,
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
    expect(row.resolutions <= 1n, `${row.id} resolved at most once`).toBe(true);
    expect(row.journal_uc).toBe(row.state === 'held' ? row.amount_uc : 0n);
  }
  for (const agentId of model.agents) {
    const b = await ledger().balance(db, agentId);
    expect(BigInt(b.grantedUc)).toBe(BigInt(b.availableUc) + BigInt(b.heldUc) + BigInt(b.capturedUc) + BigInt(b.lapsedUc));
    const modelAvailable = model.lots.filter((l) => l.agentId === agentId && live(l)).reduce((s, l) => s + l.remaining, 0n);
    expect(BigInt(b.availableUc)).toBe(modelAvailable);
  }
  // Σ merchant earnings = Σ captured, and the whole journal balances.
  const { rows: totals } = await db.query<{ earned: bigint; captured: bigint; journal: bigint; journal_earned: bigint }>(
    `SELECT (SELECT COALESCE(SUM(balance_uc), 0) FROM ledger_accounts WHERE id LIKE 'merchant:%')::bigint AS earned,
            (SELECT COALESCE(SUM(captured_uc), 0) FROM holds WHERE merchant_id IS NOT NULL)::bigint AS captured,
            (SELECT COALESCE(SUM(amount_uc), 0) FROM journal_entries)::bigint AS journal,
            (SELECT COALESCE(SUM(amount_uc), 0) FROM journal_entries WHERE account LIKE 'merchant:%')::bigint AS journal_earned`,
  );
  expect(totals[0]!.earned).toBe(totals[0]!.captured);
  expect(totals[0]!.journal_earned).toBe(totals[0]!.earned);
  expect(totals[0]!.journal).toBe(0n);
}

const commands = [
  fc.tuple(fc.integer({ min: 0, max: AGENTS - 1 }), fc.bigInt({ min: 1n, max: 5_000_000n }), fc.integer({ min: 0, max: 1 }), fc.option(fc.integer({ min: 1, max: 900 }), { nil: null, freq: 2 }))
    .map(([a, amount, p, life]) => new Grant(a, amount, p, life)),
  fc.tuple(fc.integer({ min: 0, max: AGENTS - 1 }), fc.bigInt({ min: 1n, max: 3_000_000n }), fc.integer({ min: 1, max: 300 })).map(([a, amount, life]) => new Mint(a, amount, life)),
  fc.tuple(fc.nat(), fc.integer({ min: 0, max: 11 })).map(([h, n]) => new Capture(h, n)),
  fc.nat().map((h) => new Release(h)),
  fc.constant(new Sweep()),
  fc.integer({ min: 1, max: 400 }).map((s) => new Advance(s)),
];

describe('the ledger against a reference model', () => {
  it(`keeps every invariant over ${RUNS} random command sequences`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 16 }), async (cmds) => {
        runNumber += 1;
        const agents: string[] = [];
        for (let i = 0; i < AGENTS; i++) {
          const identity = { issuer: world.agentIssuer.issuer, subject: `model-${runNumber}-${i}` };
          agents.push((await tx((q) => world.gw.services.identity.registerAgent(q, ownerId, { name: identity.subject, identity }))).id);
        }
        const model: Model = { agents, lots: [], holds: [], earnings: 0n };
        await fc.asyncModelRun(
          () => ({ model, real: { world, shop } }),
          [...cmds].flatMap((c) => [c, { check: () => true, run: () => checkInvariants(model), toString: () => '' } as fc.AsyncCommand<Model, Real>]),
        );
      }),
      { numRuns: RUNS },
    );
  }, 600_000);
});
