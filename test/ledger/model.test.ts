// Model-based test of the ledger: random sequences of grant / mint / capture / partial capture /
// release / expire / refund / clock advance / mandate change run against the real service and database and
// against a small in-memory model of the rules; after every step the database must agree with the model and
// every ledger invariant must hold. The generators aim at the corners where one-µc faults hide: many small
// lots, holds and captures that end exactly at (or one µc either side of) an allocation boundary, and
// refunds of exactly what is left, one µc more, or one µc. Each agent spends under a random mandate of a few
// budgets (over all spending, one merchant or one category; per day in a random time zone, or in total) at
// two merchants in two categories, and the clock crosses day boundaries: after every step each budget period's
// running total equals what the model says and what the holds charged to it hold (held: the amount; captured:
// captured − refunded; released or expired: nothing), and its alerts are those the model announced.
// The first agent is the root of a two-level tree: a delegate spends from its lots under a mandate of its own
// (budgets carved from the root's, plus some of its own; a remandate that would widen one is refused), each of
// its holds is checked against and charged to the root's budgets too, so after every step every ancestor's
// budget totals equal the model's, and grants to the delegate are refused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ApiError } from '../../src/platform/errors.ts';
import type { Principal } from '../../src/platform/principal.ts';
import { ALERT_THRESHOLDS_DEFAULT, defaultExtendedRules, type Budget } from '../../src/policy/mandate.ts';
import { periodOf } from '../../src/policy/periods.ts';
import { startWorld, type World } from '../support/world.ts';
import { openShop, type Shop } from '../support/ledger-fixture.ts';
import { budgetPeriodTotals } from '../support/ledger-invariants.ts';

// 150 sequences a pass, 300 a CI run (each with a new seed, which fast-check prints on a failure to replay it); a
// deeper run before a release: ACG_MODEL_RUNS=2000 npx vitest run test/ledger/model.test.ts (docs/decisions.md,
// "The suite's CPU, once more: test databases load from a tarball in memory, spawned gateways from a migrated copy").
const RUNS = Number(process.env.ACG_MODEL_RUNS ?? 150);
/** Two roots (funded by grants), then a delegate of the first root (the last agent). */
const ROOTS = 2;
const AGENTS = ROOTS + 1;
const DELEGATE = AGENTS - 1;
const SHOPS = 2;
const CATEGORIES = ['books', 'music'] as const;
const TIME_ZONES = ['UTC', 'America/New_York', 'Asia/Kolkata'] as const;

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
  merchantId: string;
  shop: number;
  category: string;
  /** The budget periods the hold counts in (its agent's and each ancestor's), moved only by a recount (`recounted`). */
  charges: Array<{ agentId: string; budgetId: string; periodStartS: number }>;
  createdAtS: number;
}
/** A budget as a run generates it: its scope names a shop by index. */
interface ModelBudget { id: string; limit: bigint; period: 'day' | 'total'; shop?: number; category?: string }
interface ModelMandate { budgets: ModelBudget[]; timeZone: string }
/** One budget period's running total and the highest alert threshold announced in it. */
interface ModelPeriod { agentId: string; budgetId: string; periodStartS: number; spent: bigint; alerted: number }
interface Model {
  agents: string[];
  /** A delegate's parent, by agent id. */
  parents: Map<string, string>;
  lots: ModelLot[];
  holds: ModelHold[];
  /** Each shop's earnings, by merchant id. */
  earnings: Map<string, bigint>;
  mandates: Map<string, ModelMandate>;
  /** By `agent budget periodStart`. */
  periods: Map<string, ModelPeriod>;
}
interface Real { world: World; shops: Shop[] }

let world: World;
let shops: Shop[];
let runNumber = 0;
let ownerId: string;
let owner: Principal;
beforeAll(async () => {
  world = await startWorld();
  shops = [];
  for (let i = 0; i < SHOPS; i++) shops.push(await openShop(world));
  ownerId = (await world.api('GET', '/v1/me', { token: await world.humanToken('model@example.com') })).body.owner.id;
  owner = { kind: 'human', id: ownerId, ownerId, scopes: [], credential: 'human_session' };
  world.gw.clock.freeze();
});
afterAll(() => world.close());

const nowS = () => world.gw.clock.nowS();
const ledger = () => world.gw.services.ledger;
const tx = <T>(fn: (q: import('../../src/platform/db/database.ts').Tx) => Promise<T>) => world.gw.gateway.db.transaction(fn);
const live = (lot: ModelLot) => lot.expiresAtS === null || lot.expiresAtS > nowS();
const due = (hold: ModelHold) => hold.state === 'held' && hold.expiresAtS <= nowS();

async function errorCode(promise: Promise<unknown>): Promise<string> {
  return (await refusalOf(promise)).code;
}

/** 'ok', or the refusal's code and, for a budget's, the budget it names (and whose, when an ancestor's). */
async function refusalOf(promise: Promise<unknown>): Promise<{ code: string; budgetId?: string; agentId?: string }> {
  try {
    await promise;
    return { code: 'ok' };
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    const budget = (error.options.extra as { budget?: { id: string; agentId?: string } } | undefined)?.budget;
    if (!budget) return { code: error.code };
    return budget.agentId === undefined ? { code: error.code, budgetId: budget.id } : { code: error.code, budgetId: budget.id, agentId: budget.agentId };
  }
}

const periodKey = (agentId: string, budgetId: string, periodStartS: number) => `${agentId} ${budgetId} ${periodStartS}`;

/** The agent's ancestors, its parent first. */
function ancestorsOf(model: Model, agentId: string): string[] {
  const ancestors: string[] = [];
  for (let at = model.parents.get(agentId); at !== undefined; at = model.parents.get(at)) ancestors.push(at);
  return ancestors;
}

/** Whose lots fund the agent's holds: the root of its tree. */
function payerOf(model: Model, agentId: string): string {
  return ancestorsOf(model, agentId).at(-1) ?? agentId;
}

/** What a hold no longer spends goes back to every budget period it counted in (the rule: held + captured − refunded). */
function giveBack(model: Model, hold: ModelHold, amount: bigint) {
  for (const charge of hold.charges) model.periods.get(periodKey(charge.agentId, charge.budgetId, charge.periodStartS))!.spent -= amount;
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
  model.earnings.set(hold.merchantId, model.earnings.get(hold.merchantId)! + capturedUc);
  giveBack(model, hold, hold.amount - capturedUc);
}

/** The budgets of the agent's mandate a spend at `shop` in `category` counts in, with their period now. */
function chargesOf(model: Model, agentId: string, shop: number, category: string) {
  const mandate = model.mandates.get(agentId)!;
  return mandate.budgets
    .filter((budget) => (budget.shop !== undefined ? budget.shop === shop : budget.category !== undefined ? budget.category === category : true))
    .map((budget) => ({ budget, periodStartS: periodOf(budget.period, mandate.timeZone, nowS()).startS }));
}

/** The budgets of a model mandate as the gateway takes them. */
function budgetsOf(mandate: ModelMandate): Budget[] {
  return mandate.budgets.map((b) => ({
    id: b.id,
    limitUc: b.limit.toString(),
    period: b.period,
    ...(b.shop !== undefined ? { merchantId: shops[b.shop]!.merchantId } : {}),
    ...(b.category !== undefined ? { category: b.category } : {}),
  }));
}

/** Writes a mandate of these budgets as the agent's owner would (a new version); a root may have one level of delegates. */
/**
 * What a new mandate does to the alerts of the budgets it adds or changes (limit, period, time zone, scope): each of
 * their periods is re-armed to the highest threshold its spend reaches under the new limit (not announced), so the
 * thresholds above it are announced again. After `recounted`, as the gateway re-arms after its recount.
 */
function rearmed(model: Model, agentId: string, before: ModelMandate | undefined, after: ModelMandate): void {
  for (const budget of after.budgets) {
    const old = before?.budgets.find((candidate) => candidate.id === budget.id);
    const unchanged =
      old !== undefined &&
      old.limit === budget.limit &&
      old.period === budget.period &&
      (budget.period === 'total' || before!.timeZone === after.timeZone) &&
      old.shop === budget.shop &&
      old.category === budget.category;
    if (unchanged) continue;
    for (const period of model.periods.values()) {
      if (period.agentId !== agentId || period.budgetId !== budget.id) continue;
      period.alerted = Math.max(0, ...ALERT_THRESHOLDS_DEFAULT.filter((pct) => period.spent * 100n >= budget.limit * BigInt(pct)));
    }
  }
}

/**
 * What a new mandate does to the budgets it keeps by id but counts in other periods (another period, or another
 * time zone for a day budget) or over other purchases (another shop or category): each hold of the agent's tree
 * still spending (held, or captured less refunded) made since the period now falls in began counts in that period,
 * with what it spends, if the budget's scope counts it (charged there, or moved there from another period), and
 * in none of its periods if not.
 */
function recounted(model: Model, agentId: string, before: ModelMandate | undefined, after: ModelMandate): void {
  for (const budget of after.budgets) {
    const old = before?.budgets.find((candidate) => candidate.id === budget.id);
    // A new id counts what its period has spent already, as a scope changed from none to its own.
    const sameScope = old !== undefined && old.shop === budget.shop && old.category === budget.category;
    if (sameScope && old.period === budget.period && (budget.period === 'total' || before!.timeZone === after.timeZone)) continue;
    const startS = periodOf(budget.period, after.timeZone, nowS()).startS;
    const periodAt = (periodStartS: number) => {
      const key = periodKey(agentId, budget.id, periodStartS);
      const period = model.periods.get(key) ?? { agentId, budgetId: budget.id, periodStartS, spent: 0n, alerted: 0 };
      model.periods.set(key, period);
      return period;
    };
    for (const hold of model.holds) {
      if ((hold.state !== 'held' && hold.state !== 'captured') || hold.createdAtS < startS) continue;
      if (hold.agentId !== agentId && model.parents.get(hold.agentId) !== agentId) continue;
      const spends = hold.state === 'held' ? hold.amount : hold.captured - hold.refunded;
      const counts = budget.shop !== undefined ? hold.shop === budget.shop : budget.category !== undefined ? hold.category === budget.category : true;
      const charge = hold.charges.find((c) => c.agentId === agentId && c.budgetId === budget.id);
      if (charge && !counts) {
        periodAt(charge.periodStartS).spent -= spends;
        hold.charges = hold.charges.filter((c) => c !== charge);
      } else if (charge && charge.periodStartS !== startS) {
        periodAt(charge.periodStartS).spent -= spends;
        periodAt(startS).spent += spends;
        charge.periodStartS = startS;
      } else if (!charge && counts && !sameScope) {
        periodAt(startS).spent += spends;
        hold.charges.push({ agentId, budgetId: budget.id, periodStartS: startS });
      }
    }
  }
}

async function setMandate(model: Model, agentId: string, mandate: ModelMandate) {
  const delegation = model.parents.has(agentId) ? { allowed: false, maxDepth: 0 } : { allowed: true, maxDepth: 1 };
  const rules = {
    ...defaultExtendedRules(),
    allowedServices: ['*'],
    allowedCategories: ['*'],
    caps: { perHoldUc: null, perPeriodUc: null, periodS: 86_400 },
    budgets: budgetsOf(mandate),
    timeZone: mandate.timeZone,
    delegation,
  };
  await tx((q) => world.gw.services.identity.setMandate(q, owner, agentId, rules));
}

/**
 * A delegate's mandate drawn as a run draws it: each of its parent's budgets carved to `numerator`/10 of it
 * (at least 1 µc; `widen` makes one of them 1 µc more than the parent's), and budgets of its own.
 */
interface DelegateMandatePick { numerators: number[]; widen: number | null; own: ModelBudget[]; timeZone: string }

function carved(model: Model, agentId: string, pick: DelegateMandatePick): { mandate: ModelMandate; wider: boolean } {
  const parent = model.mandates.get(model.parents.get(agentId)!)!;
  const widened = pick.widen === null || parent.budgets.length === 0 ? -1 : pick.widen % parent.budgets.length;
  const budgets = parent.budgets.map((b, i): ModelBudget => {
    const share = (b.limit * BigInt(pick.numerators[i % pick.numerators.length]!)) / 10n;
    return { ...b, id: `p${i}`, limit: i === widened ? b.limit + 1n : share > 0n ? share : 1n };
  });
  const mine = [...budgets, ...pick.own];
  // The rule: every parent budget is matched by one of the same scope and period at most as large, and a day
  // budget of the parent's only in the parent's time zone (a root's later change of zone is not held to it).
  const sameScope = (x: ModelBudget, y: ModelBudget) => x.period === y.period && x.shop === y.shop && x.category === y.category;
  const wider =
    parent.budgets.some((theirs) => !mine.some((b) => sameScope(b, theirs) && b.limit <= theirs.limit)) ||
    (pick.timeZone !== parent.timeZone && parent.budgets.some((theirs) => theirs.period !== 'total'));
  return { mandate: { budgets: mine, timeZone: pick.timeZone }, wider };
}

class Grant implements fc.AsyncCommand<Model, Real> {
  constructor(readonly agent: number, readonly amount: bigint, readonly priority: number, readonly lifetimeS: number | null) {}
  check = () => true;
  async run(model: Model) {
    const agentId = model.agents[this.agent]!;
    const expiresAtS = this.lifetimeS === null ? null : nowS() + this.lifetimeS;
    // A delegate owns no lots: credit is granted to its root.
    if (model.parents.has(agentId)) return void expect(await errorCode(tx((q) => ledger().grant(q, { agentId, amountUc: this.amount })))).toBe('conflict');
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
    readonly shop: number,
    readonly category: string,
  ) {}
  check = () => true;
  async run(model: Model) {
    const agentId = model.agents[this.agent]!;
    const payerId = payerOf(model, agentId);
    const shop = shops[this.shop]!;
    const amount =
      typeof this.amount === 'bigint' ? this.amount : nearBoundary(spendableLots(model, payerId).map((l) => l.remaining), this.amount.boundary, this.amount.delta);
    const total = (lots: ModelLot[]) => lots.reduce((s, l) => s + l.remaining, 0n);
    // The rule: a hold refused by a budget, or short of credit, reclaims the holds past their deadline of the
    // agent's tree (those its root funds) first (giving back their credit and their budgets) and asks again —
    // and that sticks only if the hold then succeeds (otherwise the whole attempt rolls back). Budgets are
    // asked before credit: the agent's own, then its parent's, and so on up to the root.
    const due_ = model.holds.filter((h) => payerOf(model, h.agentId) === payerId && due(h));
    const charges = [agentId, ...ancestorsOf(model, agentId)].flatMap((member) => chargesOf(model, member, this.shop, this.category).map((charge) => ({ ...charge, agentId: member })));
    const spentIn = (charge: (typeof charges)[number], reclaiming: boolean) => {
      const key = periodKey(charge.agentId, charge.budget.id, charge.periodStartS);
      const reclaimedUc = reclaiming ? due_.filter((h) => h.charges.some((c) => periodKey(c.agentId, c.budgetId, c.periodStartS) === key)).reduce((s, h) => s + h.amount, 0n) : 0n;
      return (model.periods.get(key)?.spent ?? 0n) - reclaimedUc;
    };
    const overBudget = (reclaiming: boolean) => charges.find((charge) => spentIn(charge, reclaiming) + amount > charge.budget.limit);
    let reclaiming = false;
    let refusedBy = overBudget(false);
    if (refusedBy && due_.length > 0) {
      reclaiming = true;
      refusedBy = overBudget(true);
    }
    const returnedToLive = due_.flatMap((h) => h.allocations).filter((a) => live(model.lots.find((l) => l.id === a.lotId)!)).reduce((s, a) => s + a.amount, 0n);
    if (!refusedBy && total(spendableLots(model, payerId)) < amount && due_.length > 0) reclaiming = true;
    const available = total(spendableLots(model, payerId)) + (reclaiming ? returnedToLive : 0n);
    let result: import('../../src/ledger/service.ts').Redemption | undefined;
    const outcome = await refusalOf(
      tx(async (q) => {
        result = await ledger().hold(q, {
          agentId,
          acceptorId: shop.merchantId,
          merchantId: shop.merchantId,
          merchant: { id: shop.merchantId, domain: `${shop.merchantId.replace("_", "-")}.example.com` },
          offerId: 'off_model',
          category: this.category,
          amountUc: amount,
          lifetimeS: this.lifetimeS,
          refundWindowS: this.refundWindowS,
        });
      }),
    );
    if (refusedBy) {
      const whose = refusedBy.agentId === agentId ? {} : { agentId: refusedBy.agentId };
      expect(outcome).toEqual({ code: 'CAP_EXCEEDED', budgetId: refusedBy.budget.id, ...whose });
      return;
    }
    if (available < amount) {
      expect(outcome.code).toBe('INSUFFICIENT_CREDITS');
      return;
    }
    expect(outcome.code).toBe('ok');
    if (reclaiming) {
      for (const hold of due_) {
        returnToLots(model, hold, 0n);
        hold.state = 'expired';
      }
    }
    const spendable = spendableLots(model, payerId);
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
    // Each budget it counts in (its own and its ancestors'): its period's total rises, and each alert threshold
    // crossed there is announced once.
    for (const { budget, periodStartS, agentId: owner } of charges) {
      const key = periodKey(owner, budget.id, periodStartS);
      const period = model.periods.get(key) ?? { agentId: owner, budgetId: budget.id, periodStartS, spent: 0n, alerted: 0 };
      const after = period.spent + amount;
      const crossed = ALERT_THRESHOLDS_DEFAULT.filter((pct) => pct > period.alerted && after * 100n >= budget.limit * BigInt(pct) && period.spent * 100n < budget.limit * BigInt(pct));
      model.periods.set(key, { ...period, spent: after, alerted: Math.max(period.alerted, ...crossed) });
    }
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
      merchantId: shop.merchantId,
      shop: this.shop,
      category: this.category,
      charges: charges.map(({ budget, periodStartS, agentId: owner }) => ({ agentId: owner, budgetId: budget.id, periodStartS })),
      createdAtS: nowS(),
    });
  }
  toString = () =>
    `mint(${this.agent}, ${typeof this.amount === 'bigint' ? this.amount : `boundary ${this.amount.boundary}${this.amount.delta >= 0 ? '+' : ''}${this.amount.delta}`}, ${this.lifetimeS}s, refund ${this.refundWindowS}s, shop ${this.shop}, ${this.category})`;
}

/** The same purchase again (amount, shop, category) as one of the holds: it counts in the same budgets, often full ones. */
class Rebuy implements fc.AsyncCommand<Model, Real> {
  constructor(readonly hold: number, readonly lifetimeS: number) {}
  check = (model: Readonly<Model>) => model.holds.length > 0;
  async run(model: Model) {
    const hold = model.holds[this.hold % model.holds.length]!;
    await new Mint(model.agents.indexOf(hold.agentId), hold.amount, this.lifetimeS, hold.refundWindowS, hold.shop, hold.category).run(model);
  }
  toString = () => `rebuy(#${this.hold}, ${this.lifetimeS}s)`;
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
    const code = await errorCode(tx((q) => ledger().capture(q, hold.id, { merchantId: hold.merchantId, amountUc: amount })));
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
        result = await ledger().refund(q, hold.id, { merchantId: hold.merchantId, amountUc: amount });
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
                : (amount ?? refundable) > model.earnings.get(hold.merchantId)!
                  ? 'insufficient_earnings'
                  : 'ok';
    expect(code).toBe(expected);
    if (code !== 'ok') return;
    const refundedUc = amount ?? refundable;
    expect(result!.refund.amountUc).toBe(refundedUc.toString());
    // The credit comes back to the payer's lots (a delegate's purchase was funded by its root), undoing the
    // capture from its last-burned source: each part a new lot burning and lapsing like its source, parts whose
    // sources burn and lapse alike in one lot, the most lasting first.
    const payerId = payerOf(model, hold.agentId);
    const parts: Array<{ priority: number; expiresAtS: number | null; granted: bigint }> = [];
    let skip = hold.refunded;
    let left = refundedUc;
    for (const allocation of [...hold.allocations].reverse()) {
      const source = model.lots.find((l) => l.id === allocation.lotId)!;
      const skipped = allocation.captured < skip ? allocation.captured : skip;
      skip -= skipped;
      const take = allocation.captured - skipped < left ? allocation.captured - skipped : left;
      if (take === 0n) continue;
      left -= take;
      const same = parts.find((part) => part.priority === source.priority && part.expiresAtS === source.expiresAtS);
      if (same) same.granted += take;
      else parts.push({ priority: source.priority, expiresAtS: source.expiresAtS, granted: take });
    }
    expect(left).toBe(0n);
    const { rows } = await world.gw.gateway.db.query<{ id: string; agent_id: string; source: string; priority: number; expires_at_s: bigint | null; granted_uc: bigint }>(
      `SELECT id, agent_id, source, priority, expires_at_s, granted_uc FROM credit_lots WHERE source_ref = $1 ORDER BY seq`,
      [result!.refund.id],
    );
    expect(rows).toEqual(
      parts.map((part) => ({ id: expect.any(String), agent_id: payerId, source: 'refund', priority: part.priority, expires_at_s: part.expiresAtS === null ? null : BigInt(part.expiresAtS), granted_uc: part.granted })),
    );
    rows.forEach((row, index) => model.lots.push({ id: row.id, agentId: payerId, priority: parts[index]!.priority, expiresAtS: parts[index]!.expiresAtS, granted: parts[index]!.granted, remaining: parts[index]!.granted, order: model.lots.length }));
    hold.refunded += refundedUc;
    model.earnings.set(hold.merchantId, model.earnings.get(hold.merchantId)! - refundedUc);
    giveBack(model, hold, refundedUc);
  }
  toString = () => `refund(${this.targeted ? 'captured ' : ''}#${this.hold}, ${typeof this.pick === 'string' ? this.pick : `${this.pick.numerator}/10`})`;
}

class Release implements fc.AsyncCommand<Model, Real> {
  constructor(readonly hold: number, readonly targeted: boolean) {}
  check = (model: Readonly<Model>) => model.holds.length > 0;
  async run(model: Model) {
    const hold = pickHold(model, this.hold, this.targeted, 'held');
    const code = await errorCode(tx((q) => ledger().release(q, hold.id, { merchantId: hold.merchantId })));
    if (hold.state === 'released') return void expect(code).toBe('ok');
    if (hold.state !== 'held' || due(hold)) return void expect(code).toBe('hold_resolved');
    expect(code).toBe('ok');
    returnToLots(model, hold, 0n);
    hold.state = 'released';
  }
  toString = () => `release(${this.targeted ? 'held ' : ''}#${this.hold})`;
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

/** Moves the clock to the deadline of one of the open holds (the latest, or the earliest), so holds past their deadline are common. */
class Lapse implements fc.AsyncCommand<Model, Real> {
  constructor(readonly latest: boolean) {}
  check = (model: Readonly<Model>) => model.holds.some((h) => h.state === 'held' && !due(h));
  async run(model: Model) {
    const deadlines = model.holds.filter((h) => h.state === 'held' && !due(h)).map((h) => h.expiresAtS);
    if (deadlines.length === 0) return;
    const atS = this.latest ? Math.max(...deadlines) : Math.min(...deadlines);
    world.gw.clock.advance((atS - nowS()) * 1000);
  }
  toString = () => `lapse(${this.latest ? 'latest' : 'earliest'})`;
}

/** Moves the clock to `delta` seconds from the next midnight of a zone the budgets use (day budgets start again there). */
class NextDay implements fc.AsyncCommand<Model, Real> {
  constructor(readonly zone: number, readonly delta: number) {}
  check = () => true;
  async run() {
    const zone = TIME_ZONES[this.zone % TIME_ZONES.length]!;
    const nextS = periodOf('day', zone, nowS()).resetsAtS!;
    world.gw.clock.advance(Math.max(0, nextS + this.delta - nowS()) * 1000);
  }
  toString = () => `nextDay(${TIME_ZONES[this.zone % TIME_ZONES.length]}${this.delta >= 0 ? '+' : ''}${this.delta}s)`;
}

/**
 * The owner gives the agent a new mandate: holds keep counting in (and giving back to) the periods they were
 * charged to, but for a budget it redefines (`recounted`). A root may narrow below its delegate's (the delegate's
 * holds are still charged to its budgets).
 */
class Remandate implements fc.AsyncCommand<Model, Real> {
  constructor(readonly agent: number, readonly mandate: ModelMandate) {}
  check = () => true;
  async run(model: Model) {
    const agentId = model.agents[this.agent % ROOTS]!;
    await setMandate(model, agentId, this.mandate);
    recounted(model, agentId, model.mandates.get(agentId), this.mandate);
    rearmed(model, agentId, model.mandates.get(agentId), this.mandate);
    model.mandates.set(agentId, this.mandate);
  }
  toString = () => `remandate(${this.agent % ROOTS}, ${describeMandate(this.mandate)})`;
}

/** The delegate's owner carves it a new mandate from its parent's as it stands; a wider one is refused and changes nothing. */
class RemandateDelegate implements fc.AsyncCommand<Model, Real> {
  constructor(readonly pick: DelegateMandatePick) {}
  check = () => true;
  async run(model: Model) {
    const agentId = model.agents[DELEGATE]!;
    const { mandate, wider } = carved(model, agentId, this.pick);
    const outcome = await errorCode(setMandate(model, agentId, mandate));
    if (wider) return void expect(outcome).toBe('invalid_input');
    expect(outcome).toBe('ok');
    recounted(model, agentId, model.mandates.get(agentId), mandate);
    rearmed(model, agentId, model.mandates.get(agentId), mandate);
    model.mandates.set(agentId, mandate);
  }
  toString = () => `remandateDelegate(${this.pick.numerators.join('/')}, widen ${this.pick.widen}, own [${describeMandate({ budgets: this.pick.own, timeZone: this.pick.timeZone })}])`;
}

function describeMandate(mandate: ModelMandate): string {
  const budgets = mandate.budgets.map((b) => `${b.id} ${b.limit}/${b.period}${b.shop !== undefined ? ` shop ${b.shop}` : ''}${b.category ? ` ${b.category}` : ''}`);
  return `[${budgets.join('; ')}] ${mandate.timeZone}`;
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
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN holds h ON j.account = 'hold:' || h.id WHERE h.payer_id = a.id)::bigint AS journal_held_uc,
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN holds h ON j.operation_id = h.id || ':capture'
              WHERE h.payer_id = a.id AND j.account NOT LIKE 'hold:%' AND j.account NOT LIKE 'lot:%')::bigint AS journal_captured_uc,
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN credit_lots l ON j.account = 'lot:' || l.id
              WHERE l.agent_id = a.id AND j.kind IN ('grant', 'refund'))::bigint AS journal_granted_uc,
            (SELECT COALESCE(SUM(j.amount_uc), 0) FROM journal_entries j JOIN credit_lots l ON j.account = 'lot:' || l.id
              WHERE l.agent_id = a.id AND j.kind = 'refund')::bigint AS journal_refunded_uc
       FROM (SELECT $1::text AS id) a LEFT JOIN agent_balances b ON b.agent_id = a.id`,
    [agentId],
  );
  const totals = rows[0]!;
  // The holds it pays for: its own and, for a root, its delegates'.
  const holds = model.holds.filter((h) => payerOf(model, h.agentId) === agentId);
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
    // A delegate's balance is its root's pool.
    const payerId = payerOf(model, agentId);
    expect(b.fundedBy).toBe(payerId === agentId ? undefined : payerId);
    const modelAvailable = model.lots.filter((l) => l.agentId === payerId && live(l)).reduce((s, l) => s + l.remaining, 0n);
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
  for (const shop of shops) expect(await world.gw.services.ledger.merchantEarnings(db, shop.merchantId)).toBe(model.earnings.get(shop.merchantId)!.toString());
  await checkBudgets(model);
}

/**
 * Each budget period of the run's agents: its running total (budget_usage.spent_uc) equals Σ over the holds
 * charged to it (hold_budget_charges) of what each still spends — held: its amount; captured: captured −
 * refunded; released or expired: 0 — and equals the model's, as does the highest alert announced there; and
 * each hold was charged to exactly the periods the model charged it to.
 */
async function checkBudgets(model: Model) {
  const db = world.gw.gateway.db;
  const periods = await budgetPeriodTotals(db, model.agents);
  for (const period of periods) {
    const where = `budget ${period.budget_id} of ${period.agent_id} from ${period.period_start_s}`;
    expect(period.spent_uc, `${where}: running total = Σ its holds`).toBe(period.covered_uc);
    const modelled = model.periods.get(periodKey(period.agent_id, period.budget_id, Number(period.period_start_s)));
    expect(period.spent_uc, `${where}: running total = the model's`).toBe(modelled?.spent ?? -1n);
    expect(period.alerted_pct, `${where}: the highest alert announced`).toBe(modelled?.alerted ?? -1);
  }
  expect(periods.length, 'one running total per budget period the model charged').toBe(model.periods.size);
  // Each hold was charged to the budgets of its agent and of every ancestor, exactly those the model charged.
  const { rows: charges } = await db.query<{ hold_id: string; agent_id: string; budget_id: string; period_start_s: bigint }>(
    'SELECT hold_id, agent_id, budget_id, period_start_s FROM hold_budget_charges WHERE agent_id = ANY($1::text[]) ORDER BY hold_id, agent_id, budget_id',
    [model.agents],
  );
  const sortKey = (c: { hold_id: string; agent_id: string; budget_id: string }) => `${c.hold_id} ${c.agent_id} ${c.budget_id}`;
  const modelCharges = model.holds
    .flatMap((h) => h.charges.map((c) => ({ hold_id: h.id, agent_id: c.agentId, budget_id: c.budgetId, period_start_s: BigInt(c.periodStartS) })))
    .sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : sortKey(a) > sortKey(b) ? 1 : 0));
  expect([...charges].sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : sortKey(a) > sortKey(b) ? 1 : 0))).toEqual(modelCharges);
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
/** Often short, so that holds past their deadline are common (a mint reclaims them when a budget or the credit falls short). */
const holdLifetime = fc.oneof({ arbitrary: fc.integer({ min: 1, max: 20 }), weight: 1 }, { arbitrary: fc.integer({ min: 1, max: 300 }), weight: 3 });
/** Mostly open for a while (Advance crosses it now and then), sometimes 0 (no refunds). */
const refundWindow = fc.oneof({ arbitrary: fc.constant(0), weight: 1 }, { arbitrary: fc.integer({ min: 1, max: 1200 }), weight: 6 });

const agentIndex = fc.integer({ min: 0, max: AGENTS - 1 });
/** Limits of a few µc (mints of a few µc cross them) or of a few credits (most mints fit a few times). */
const budgetLimit = fc.oneof(fc.bigInt({ min: 1n, max: 30n }), fc.bigInt({ min: 1n, max: 8_000_000n }));
const budgetScope = fc.oneof(
  { arbitrary: fc.constant({}), weight: 2 },
  { arbitrary: fc.nat({ max: SHOPS - 1 }).map((shop) => ({ shop })), weight: 1 },
  { arbitrary: fc.constantFrom(...CATEGORIES).map((category) => ({ category })), weight: 1 },
);
const budgetList = fc
  .array(fc.tuple(budgetLimit, fc.constantFrom<'day' | 'total'>('day', 'day', 'total'), budgetScope), { minLength: 1, maxLength: 3 })
  .map((budgets) => budgets.map(([limit, period, scope], i): ModelBudget => ({ id: `b${i}`, limit, period, ...scope })));
/** Mostly one to three budgets (ids b0…, so a new mandate may keep a budget's id and its running totals), sometimes none; a time zone. */
const mandateArb: fc.Arbitrary<ModelMandate> = fc.record({
  budgets: fc.oneof({ arbitrary: fc.constant<ModelBudget[]>([]), weight: 1 }, { arbitrary: budgetList, weight: 4 }),
  timeZone: fc.constantFrom(...TIME_ZONES),
});
/** A delegate's mandate carved from its parent's: mostly within it, sometimes 1 µc wider on one budget. */
const delegateMandateArb: fc.Arbitrary<DelegateMandatePick> = fc.record({
  numerators: fc.array(fc.integer({ min: 1, max: 10 }), { minLength: 1, maxLength: 3 }),
  widen: fc.option(fc.nat({ max: 2 }), { nil: null, freq: 4 }),
  own: fc.oneof({ arbitrary: fc.constant<ModelBudget[]>([]), weight: 1 }, { arbitrary: budgetList, weight: 1 }),
  timeZone: fc.constantFrom(...TIME_ZONES),
});
const grantFor = (agent: fc.Arbitrary<number>) => fc
  .tuple(agent, fc.bigInt({ min: 1n, max: 5_000_000n }), fc.integer({ min: 0, max: 1 }), fc.option(fc.integer({ min: 1, max: 900 }), { nil: null, freq: 2 }))
  .map(([a, amount, p, life]) => new Grant(a, amount, p, life));
/** Many small lots: holds then span several of them, and their boundaries are a few µc apart. */
const grantManyFor = (agent: fc.Arbitrary<number>) => fc
  .tuple(agent, fc.array(fc.bigInt({ min: 1n, max: 5n }), { minLength: 3, maxLength: 8 }), fc.integer({ min: 0, max: 1 }))
  .map(([a, amounts, p]) => new GrantMany(a, amounts, p));
/** Each run starts with credit for every root, so most mints succeed and later commands have holds to work on. */
const funding = fc
  .tuple(...Array.from({ length: ROOTS }, (_, a) => fc.array(fc.oneof(grantFor(fc.constant(a)), grantManyFor(fc.constant(a))), { minLength: 1, maxLength: 3 })))
  .map((perAgent) => perAgent.flat());
const targeted = fc.oneof({ arbitrary: fc.constant(true), weight: 4 }, { arbitrary: fc.constant(false), weight: 1 });
const command = fc.oneof(
  { arbitrary: grantFor(agentIndex), weight: 1 },
  { arbitrary: grantManyFor(agentIndex), weight: 1 },
  {
    arbitrary: fc
      .tuple(agentIndex, mintAmount, holdLifetime, refundWindow, fc.nat({ max: SHOPS - 1 }), fc.constantFrom(...CATEGORIES))
      .map(([a, amount, life, window, shop, category]) => new Mint(a, amount, life, window, shop, category)),
    weight: 4,
  },
  { arbitrary: fc.tuple(fc.nat(), holdLifetime).map(([h, life]) => new Rebuy(h, life)), weight: 2 },
  { arbitrary: fc.tuple(fc.nat(), targeted, capturePick).map(([h, t, pick]) => new Capture(h, t, pick)), weight: 4 },
  { arbitrary: fc.tuple(fc.nat(), targeted, refundPick).map(([h, t, pick]) => new Refund(h, t, pick)), weight: 3 },
  { arbitrary: fc.tuple(fc.nat(), targeted).map(([h, t]) => new Release(h, t)), weight: 3 },
  { arbitrary: fc.constant(new Sweep()), weight: 1 },
  { arbitrary: fc.integer({ min: 1, max: 400 }).map((s) => new Advance(s)), weight: 1 },
  { arbitrary: fc.boolean().map((latest) => new Lapse(latest)), weight: 1 },
  { arbitrary: fc.tuple(fc.nat({ max: TIME_ZONES.length - 1 }), fc.integer({ min: -2, max: 1 })).map(([zone, delta]) => new NextDay(zone, delta)), weight: 1 },
  { arbitrary: fc.tuple(agentIndex, mandateArb).map(([a, mandate]) => new Remandate(a, mandate)), weight: 1 },
  { arbitrary: delegateMandateArb.map((pick) => new RemandateDelegate(pick)), weight: 1 },
);

describe('the ledger against a reference model', () => {
  it(`keeps every invariant over ${RUNS} random command sequences`, async () => {
    await fc.assert(
      fc.asyncProperty(
        funding,
        fc.array(mandateArb, { minLength: ROOTS, maxLength: ROOTS }),
        delegateMandateArb.map((pick) => ({ ...pick, widen: null })),
        fc.commands([command], { maxCommands: 16, size: 'max' }),
        async (setup, mandates, delegateMandate, cmds) => {
        runNumber += 1;
        // The shops' earnings carry over from earlier runs (they share the database).
        const earnings = new Map<string, bigint>();
        for (const shop of shops) earnings.set(shop.merchantId, BigInt(await ledger().merchantEarnings(world.gw.gateway.db, shop.merchantId)));
        const model: Model = { agents: [], parents: new Map(), lots: [], holds: [], earnings, mandates: new Map(), periods: new Map() };
        const identityOf = (i: number) => ({ issuer: world.agentIssuer.issuer, subject: `model-${runNumber}-${i}` });
        for (let i = 0; i < ROOTS; i++) {
          const identity = identityOf(i);
          model.agents.push((await tx((q) => world.gw.services.identity.registerAgent(q, ownerId, { name: identity.subject, identity }))).id);
          await setMandate(model, model.agents[i]!, mandates[i]!);
          model.mandates.set(model.agents[i]!, mandates[i]!);
        }
        // The delegate: registered by its parent's owner, under a mandate carved from the parent's.
        const parentId = model.agents[0]!;
        const identity = identityOf(DELEGATE);
        const delegate = await tx((q) => world.gw.services.identity.registerDelegate(q, owner, parentId, { name: identity.subject, identity, mandate: {} }));
        model.agents.push(delegate.id);
        model.parents.set(delegate.id, parentId);
        // In its parent's time zone, as a delegate's day budgets must be at creation; the root's later remandates
        // move it to other zones, so the delegate's and its parent's days still differ during a run.
        const { mandate } = carved(model, delegate.id, { ...delegateMandate, timeZone: mandates[0]!.timeZone });
        await setMandate(model, delegate.id, mandate);
        model.mandates.set(delegate.id, mandate);
        await fc.asyncModelRun(
          () => ({ model, real: { world, shops } }),
          [...setup, ...cmds].flatMap((c) => [c, { check: () => true, run: () => checkInvariants(model), toString: () => '' } as fc.AsyncCommand<Model, Real>]),
        );
        },
      ),
      { numRuns: RUNS },
    );
  }, 900_000);
});
