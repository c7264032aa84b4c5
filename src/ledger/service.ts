// The credit ledger. Money is never created, lost or spent twice:
//   - a hold locks the agent's row and its ancestors' (the per-agent mutex; a delegate's tree shares its
//     root's), then the lots of its payer (the root of its tree: a delegate owns no lots) in one fixed
//     order, and takes credit from them in burn-down order, recording one allocation per lot;
//   - a hold resolves at most once (held → captured | released | expired); capture posts up to the held
//     amount and returns the remainder to the same lots in the same transaction;
//   - expiry is a deadline: at or after expiresAt a hold can no longer be captured or released, whether
//     or not the sweeper has reclaimed it yet;
//   - every balance change is journaled in the same transaction, and each operation's journal sums to 0,
//     checked before its SQL (./journal.ts);
//   - whether an agent may spend is the spending policy's answer (src/policy), asked inside the hold pass.
import type { RefusalReason } from '../platform/reasons.ts';
import { emitEvent, emitEvents, eventsPart, type EventType, type OwnerEventInput } from '../events/outbox.ts';
import type { AgentRow } from '../agents/service.ts';
import { unwrap, type Settled } from '../platform/batcher.ts';
import type { AgentService } from '../agents/service.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { isStorageUnavailable } from '../platform/db/faults.ts';
import { pageBySeq, type PageOrder } from '../platform/db/paging.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, type Microcredits } from '../platform/money.ts';
import type { Principal } from '../platform/principal.ts';
import type { Page } from '../platform/schemas.ts';
import type { SpanRef } from '../platform/telemetry.ts';
import { afterTaking, budgetPeriodsOf, chargesOf, spendingRefusal, thresholdsCrossed, traceSpendingDecision, usageOf, type BudgetCharge, type BudgetSpend, type Usage } from '../policy/spending.ts';
import { budgetPeriodKey, budgetUsageOf, type BudgetChargeRow, type BudgetPeriodKey } from '../policy/budget-usage.ts';
import { appendJournal, balancedEntries, combined, type BalancedJournal, type JournalLine } from './journal.ts';
import { signReceipt } from './receipts.ts';
import { refundLots } from './refund-lots.ts';
import * as store from './store.ts';

export const GATEWAY_ACCEPTOR_ID = 'gateway';
export const DEFAULT_LOT_PRIORITY = 100;
/** Operator grants (`acg credit grant`, POST /v1/operator/credit-grants): the largest priority, the longest note. */
export const GRANT_PRIORITY_MAX = 1_000_000;
export const GRANT_NOTE_CHARS_MAX = 200;
const SWEEP_BATCH_MAX = 100;
/** Batches one sweeper pass takes while each comes back full: a backlog (after an outage) clears in a pass, not a batch per interval. */
const SWEEP_BATCHES_PER_PASS_MAX = 20;
/**
 * How long a hold that failed to expire on its own is left out of every expiry (sweep, tree, hold pass) on this
 * instance before it is tried again: it stays held, counted as before, while the rest of the ledger moves on.
 */
const UNEXPIRABLE_SET_ASIDE_MS = 10 * 60 * 1000;
/** Thirty days, as card networks and Stripe's dashboards default to; an offer may set its own. */
export const REFUND_WINDOW_S_DEFAULT = 30 * 86_400;
/** Bounds the refunds list a redemption carries. */
export const REFUNDS_PER_REDEMPTION_MAX = 100;
const REFUND_REASON_LENGTH_MAX = 500;

export interface Refund {
  id: string;
  redemptionId: string;
  amountUc: string;
  reason: string | null;
  createdAt: number;
  /** Signed refund receipt (compact ES256 JWS, typ receipt+jwt); null without a signing key. */
  receipt: string | null;
}

export interface Redemption {
  id: string;
  agentId: string;
  acceptorId: string;
  offerId: string;
  category: string;
  amountUc: string;
  state: 'held' | 'captured' | 'released' | 'expired';
  expiresAt: number;
  createdAt: number;
  capturedUc: string;
  /** What went back to the agent when the hold resolved; once not held, amountUc = capturedUc + releasedUc. */
  releasedUc: string;
  capturedAt: number | null;
  releasedAt: number | null;
  /** Set when the kill switch released the hold and withdrew its voucher. */
  revocation: { revokedAt: number; reason: string } | null;
  refundedUc: string;
  refunds: Refund[];
  /** Signed capture receipt (compact ES256 JWS, typ receipt+jwt); null unless captured (or without a signing key). */
  captureReceipt: string | null;
  allocations: Array<{ lotId: string; amountUc: string }>;
  /** What was bought, as it was sold: only in a list that asks for it (`expand=offer`). */
  offer?: Record<string, unknown> | null;
}

/**
 * A hold as a payment protocol checks it (x402's verify and settle): the Redemption, the merchant that holds
 * it, when a freeze or a retirement revoked it (null: never), and the credential it was bought with, as issued.
 */
export interface HoldRecord {
  redemption: Redemption;
  merchantId: string | null;
  revokedAt: number | null;
  credential: string | null;
}

/** Which holds a reader may read: those of one merchant, of one agent, or (no member) any. */
export interface HoldScope {
  merchantId?: string;
  agentId?: string;
}

export interface Lot {
  id: string;
  agentId: string;
  source: 'grant' | 'topup' | 'refund';
  sourceRef: string | null;
  priority: number;
  grantedUc: string;
  remainingUc: string;
  expiresAt: number | null;
  createdAt: number;
  /** `expired` once expiresAt has passed: what remains has lapsed. */
  status: 'active' | 'expired' | 'spent';
}

export interface Balance {
  agentId: string;
  /** A delegate owns no lots: the root agent whose lots fund it, and whose balance this is (absent for a root). */
  fundedBy?: string;
  /** Spendable now: the remainder of every lot that has not expired. */
  availableUc: string;
  heldUc: string;
  capturedUc: string;
  /** Left in expired lots: no longer spendable. */
  lapsedUc: string;
  grantedUc: string;
  /** Of grantedUc, what came back as refunds. */
  refundedUc: string;
}

/** Agents' rows kept after a hold pass locked them, at most RECENT_HOLDERS_MAX, the least recently held dropped first. */
const RECENT_HOLDERS_MAX = 4096;

class RecentHolders {
  private readonly rows = new Map<string, AgentRow>();

  remember(rows: Iterable<AgentRow>): void {
    for (const row of rows) {
      this.rows.delete(row.id);
      this.rows.set(row.id, row);
      if (this.rows.size > RECENT_HOLDERS_MAX) this.rows.delete(this.rows.keys().next().value!);
    }
  }

  /** The budget periods at `atS` of these agents and their ancestors, as last seen (none for an agent not seen). */
  periodsOf(agentIds: readonly string[], atS: number): BudgetPeriodKey[] {
    const seen = new Map<string, AgentRow>();
    for (const id of agentIds) {
      const row = this.rows.get(id);
      if (!row) continue;
      seen.set(id, row);
      for (const ancestorId of row.ancestor_ids) {
        const ancestor = this.rows.get(ancestorId);
        if (ancestor) seen.set(ancestorId, ancestor);
      }
    }
    return budgetPeriodsOf([...seen.values()], atS);
  }
}

/** What a batch's holds lock first, locked in its transaction (`LedgerService.lockHolders`). */
export interface Holders {
  /** The time the lots were read at: the holds' time. */
  atS: number;
  /** The locked rows of the agents and their ancestors; throws if any of `requesters` was not among the agents locked. */
  covering(requesters: readonly string[]): Map<string, AgentRow>;
  /**
   * The payers' spendable lots, locked with the holders (throws for a payer they were not: it would be locked out
   * of order), and the budgets' running totals read with them when they are those of `budgetPeriods`
   * (`budgets` undefined otherwise: the caller reads the totals it needs).
   */
  lotsOf(payerIds: readonly string[], budgetPeriods: readonly BudgetPeriodKey[]): Promise<{ lots: Map<string, store.LotRow[]>; budgets: ReadonlyMap<string, BudgetSpend> | undefined }>;
}

export interface HoldRequest {
  agentId: string;
  acceptorId: string;
  merchantId: string | null;
  offerId: string;
  category: string;
  /** The built-in service the hold pays for, whose allowance the spending policy checks too. */
  serviceId?: string;
  amountUc: Microcredits;
  lifetimeS: number;
  /** Seconds after capture during which the merchant may refund; default REFUND_WINDOW_S_DEFAULT. */
  refundWindowS?: number;
  /** The merchant sold to, with its verified domain: what the mandate's merchant rules name. */
  merchant?: { id: string; domain: string };
  /** The owner approved this purchase above the mandate's approval threshold. */
  approved?: boolean;
  /** What is bought, as it is sold now (kept with the hold for its evidence). */
  offerSnapshot?: Record<string, unknown>;
  /**
   * Signs what the hold is bought with (the voucher), once its id, amount and deadline are known and before it
   * is written, so the row keeps it as issued; it gets the mandate version in force.
   */
  sign?: (redemption: Redemption, mandate: { version: number; hash: string | null }) => Promise<string>;
  /** The requesting call's span, when tracing: its mandate decision is recorded there, and its event's delivery continues its trace. */
  trace?: SpanRef;
}

export interface RefundRequest {
  merchantId: string;
  /** Default: everything captured and not yet refunded. */
  amountUc?: Microcredits;
  reason?: string;
}

/** A grant; a refusal of its amount or its expiry names the operator's grant's members (`amountUc`, `expiresAt`). */
export interface GrantRequest {
  agentId: string;
  amountUc: Microcredits;
  priority?: number;
  expiresAtS?: number | null;
  source?: 'grant' | 'topup';
  sourceRef?: string | null;
}

function toRefund(row: store.RefundRow): Refund {
  return { id: row.id, redemptionId: row.hold_id, amountUc: formatUc(row.amount_uc), reason: row.reason, createdAt: Number(row.created_at_s), receipt: row.receipt };
}

/**
 * Whether a hold is past its deadline and not reclaimed yet. Expiry is a deadline: such a hold is expired on every
 * path (read, capture, release, refund, the sweeper), whether or not the sweeper has reclaimed it.
 */
function overdue(hold: store.HoldRow, nowS: number): boolean {
  return hold.state === 'held' && Number(hold.expires_at_s) <= nowS;
}

/**
 * A hold as every reader sees it: a hold still `held` at or after `expiresAt` reads as expired (all of it gone back,
 * at `expiresAt`) before the sweeper reclaims it, and reads the same after.
 */
function toRedemption(hold: store.HoldRow, allocations: readonly store.AllocationRow[], refunds: readonly store.RefundRow[], nowS: number): Redemption {
  const late = overdue(hold, nowS);
  const state = late ? 'expired' : hold.state;
  const resolvedAtS = late ? Number(hold.expires_at_s) : hold.resolved_at_s === null ? null : Number(hold.resolved_at_s);
  const releasedUc = state === 'held' ? 0n : hold.amount_uc - hold.captured_uc;
  return {
    id: hold.id,
    agentId: hold.agent_id,
    acceptorId: hold.acceptor_id,
    offerId: hold.offer_id,
    category: hold.category,
    amountUc: formatUc(hold.amount_uc),
    state,
    expiresAt: Number(hold.expires_at_s),
    createdAt: Number(hold.created_at_s),
    capturedUc: formatUc(hold.captured_uc),
    releasedUc: formatUc(releasedUc),
    capturedAt: state === 'captured' ? resolvedAtS : null,
    releasedAt: releasedUc > 0n ? resolvedAtS : null,
    revocation: hold.revoked_at_s == null ? null : { revokedAt: Number(hold.revoked_at_s), reason: hold.revocation_reason! },
    refundedUc: formatUc(hold.refunded_uc),
    refunds: refunds.filter((r) => r.hold_id === hold.id).map(toRefund),
    captureReceipt: hold.capture_receipt,
    allocations: allocations.filter((a) => a.hold_id === hold.id).map((a) => ({ lotId: a.lot_id, amountUc: formatUc(a.amount_uc) })),
  };
}

function toLot(row: store.LotRow, nowS: number): Lot {
  const expired = row.expires_at_s !== null && Number(row.expires_at_s) <= nowS;
  return {
    id: row.id,
    agentId: row.agent_id,
    source: row.source,
    sourceRef: row.source_ref,
    priority: row.priority,
    grantedUc: formatUc(row.granted_uc),
    remainingUc: formatUc(row.remaining_uc),
    expiresAt: row.expires_at_s === null ? null : Number(row.expires_at_s),
    createdAt: Number(row.created_at_s),
    status: expired ? 'expired' : row.remaining_uc === 0n ? 'spent' : 'active',
  };
}

/**
 * What one pass has taken so far, per agent: as a payer (a root), the allocations from its lots (not yet
 * written) and whether its overdue holds were reclaimed; as a budget owner, the sum of its own holds (its
 * rolling cap) and the charges on its budgets (its own holds' and its delegates').
 */
interface Taken {
  allocations: Array<{ lotId: string; amountUc: bigint }>;
  amountUc: bigint;
  /** Each hold's charges on the agent's budgets, with that hold's amount. */
  charged: Array<{ charges: BudgetCharge[]; amountUc: bigint }>;
  reclaimed: boolean;
}

/** An agent's usage read afresh, with what the pass took: its own holds' sum (its rolling cap) and each charge on its budgets. */
function withTaken(usage: Usage, taken: Taken): Usage {
  return taken.charged.reduce((sum, { charges, amountUc }) => afterTaking(sum, amountUc, charges, 0n), afterTaking(usage, 0n, [], taken.amountUc));
}

/** A requester of the pass with its ancestors' rows, root first (the spending policy's chain). */
type ChainRow = AgentRow & { ancestors: AgentRow[] };

/** The agent whose lots fund an agent's holds: the root of its tree. */
function payerOf(agent: Pick<AgentRow, 'id' | 'ancestor_ids'>): string {
  return agent.ancestor_ids[0] ?? agent.id;
}

/** The owner's `budget.threshold` event: a budget crossed one of the mandate's alert thresholds in its period. */
function budgetAlert(agent: AgentRow, charge: BudgetCharge, thresholdPct: number, spentUc: bigint): OwnerEventInput {
  const { budget } = charge;
  return {
    ownerId: agent.owner_id,
    type: 'budget.threshold',
    data: {
      agentId: agent.id,
      thresholdPct,
      budget: { ...budget, spentUc: spentUc.toString(), remainingUc: (charge.limitUc > spentUc ? charge.limitUc - spentUc : 0n).toString(), periodStart: charge.periodStartS, resetsAt: charge.resetsAtS },
    },
  };
}

/** Holds locked for resolving, with their allocations (`LedgerService.lockResolving`), for a superset of the calls resolved. */
export type ResolvingHolds = Awaited<ReturnType<typeof store.lockHoldsWithAllocations>>;

/** The state of one holdMany pass, shared by its holds in order. */
interface HoldPass {
  nowS: number;
  /** Each payer's spendable lots, less what this pass has taken. */
  lots: Map<string, store.LotRow[]>;
  /** Each locked agent's usage (requesters and ancestors), as the spending policy counts it, with what this pass has taken. */
  usage: Map<string, Usage>;
  /** Budget alerts the pass's holds announce: the owner's `budget.threshold` events. */
  alerts: OwnerEventInput[];
  takenBy(agentId: string): Taken;
  reclaimDue(payerId: string): Promise<boolean>;
}

/** A capture or release of one hold, by its merchant (or by anyone, when merchantId is absent). */
/** Why a release withdraws the hold's voucher too (the kill switch), and when: its answer and event say so. */
export interface Revoking {
  reason: string;
  atS: number;
}

export type ResolveRequest = { holdId: string; merchantId?: string; trace?: SpanRef } & (
  | { action: 'capture'; amountUc?: Microcredits }
  | { action: 'release'; revoking?: Revoking }
);

/** A hold a freeze released and revoked, with the merchant that holds its voucher (none for a built-in service's). */
export interface RevokedHold {
  redemption: Redemption;
  merchantId: string | null;
}

/** The refusal of a capture of a revoked hold: names the hold, when and why its voucher was withdrawn. */
function revokedError(hold: store.HoldRow, revokedAtS: bigint): ApiError {
  return new ApiError('voucher_revoked', {
    detail: `the voucher of hold ${hold.id} was revoked at ${revokedAtS} (${hold.revocation_reason}): its credit went back to the agent; do not deliver against it`,
    // Written by revokeHolds from a RevocationReason (agent_frozen, agent_retired), both in the reasons catalogue.
    extra: { holdId: hold.id, revokedAt: Number(revokedAtS), reason: hold.revocation_reason as Extract<RefusalReason, 'agent_frozen' | 'agent_retired'> },
  });
}

/** A locked hold to resolve, and how. */
interface SettleItem {
  hold: store.HoldRow;
  state: 'captured' | 'released' | 'expired';
  capturedUc: bigint;
  /** The span of the call that settles it, when tracing (its event's delivery continues that trace). */
  trace?: SpanRef;
  /** A release that withdraws the voucher: the hold's answer and its `redemption.released` name the revocation. */
  revoking?: Revoking;
}

/** Where captured credit goes: the merchant's earnings, or the gateway's revenue for built-in services. */
function earningsAccount(hold: store.HoldRow): string {
  return hold.merchant_id ? `merchant:${hold.merchant_id}` : 'revenue:gateway';
}

/** A new hold's journal: each allocation moves from its lot to the hold. */
function holdJournal({ hold, allocations }: store.NewHold): BalancedJournal {
  return balancedEntries(
    hold.id,
    'hold',
    allocations.flatMap((a) => [
      { account: `lot:${a.lotId}`, amountUc: -a.amountUc },
      { account: `hold:${hold.id}`, amountUc: a.amountUc },
    ]),
  );
}

const SETTLEMENT_KIND = { captured: 'capture', released: 'release', expired: 'expire' } as const;

/**
 * A resolution's journal (operation `<hold>:<kind>`): what each allocation returns moves from the hold to
 * its lot, what was captured from the hold to the earnings account.
 */
function settlementJournal(settlement: store.Settlement): BalancedJournal {
  const hold = `hold:${settlement.holdId}`;
  const lines: JournalLine[] = settlement.lines
    .filter((line) => line.returnedUc > 0n)
    .flatMap((line) => [
      { account: hold, amountUc: -line.returnedUc },
      { account: `lot:${line.lotId}`, amountUc: line.returnedUc },
    ]);
  if (settlement.capturedUc > 0n) lines.push({ account: hold, amountUc: -settlement.capturedUc }, { account: settlement.earningsAccount, amountUc: settlement.capturedUc });
  const kind = SETTLEMENT_KIND[settlement.state];
  return balancedEntries(`${settlement.holdId}:${kind}`, kind, lines);
}

/**
 * Credit is granted to a tree's root: a delegate owns no lots (it spends its root's), so a grant or a top-up
 * addressed to it is refused (409 conflict naming the root, `reason` delegate_has_no_lots).
 */
export function refuseDelegate(agent: Pick<AgentRow, 'id' | 'ancestor_ids'>): void {
  const rootId = agent.ancestor_ids[0];
  if (rootId === undefined) return;
  throw new ApiError('conflict', {
    detail: `agent ${agent.id} is a delegate: it spends the credit of its root agent ${rootId}; credit ${rootId} instead`,
    extra: { reason: 'delegate_has_no_lots', rootAgentId: rootId },
  });
}

export class LedgerService {
  /** The agents' rows as the last hold pass locked them: what the next pass guesses their budget periods from. */
  private readonly lastHolders = new RecentHolders();

  constructor(
    private readonly gateway: Gateway,
    private readonly identity: AgentService,
  ) {}

  private nowS(): number {
    return this.gateway.clock.nowS();
  }

  async grant(tx: Tx, request: GrantRequest): Promise<Lot> {
    if (request.amountUc <= 0n) throw memberRefusal('amountUc', 'must be positive');
    const agent = await this.identity.agentRow(tx, request.agentId);
    if (!agent) throw new ApiError('not_found', { detail: `no agent ${request.agentId}` });
    refuseDelegate(agent);
    const nowS = this.nowS();
    if (request.expiresAtS != null && request.expiresAtS <= nowS) {
      throw memberRefusal('expiresAt', 'must be in the future');
    }
    const source = request.source ?? 'grant';
    const lot = await store.insertLot(tx, {
      id: newId('lot'),
      agent_id: request.agentId,
      source,
      source_ref: request.sourceRef ?? null,
      priority: request.priority ?? DEFAULT_LOT_PRIORITY,
      granted_uc: request.amountUc,
      remaining_uc: request.amountUc,
      expires_at_s: request.expiresAtS == null ? null : BigInt(request.expiresAtS),
      created_at_s: BigInt(nowS),
    });
    const journal = balancedEntries(lot.id, 'grant', [
      { account: `source:${source}`, amountUc: -request.amountUc },
      { account: `lot:${lot.id}`, amountUc: request.amountUc },
    ]);
    await appendJournal(tx, journal, nowS);
    return toLot(lot, nowS);
  }

  /**
   * Takes a hold. The spending policy (frozen, service and category, caps) is asked under the agent's row
   * lock, so a cap or a freeze cannot be raced. Throws FROZEN, SCOPE_FORBIDDEN, CAP_EXCEEDED or
   * INSUFFICIENT_CREDITS.
   */
  async hold(tx: Tx, request: HoldRequest): Promise<Redemption> {
    return unwrap((await this.holdMany(tx, [request]))[0]!);
  }

  /**
   * Locks what `holdMany` locks first, for a batch that sends these locks beside its other reads, in the same
   * transaction, and hands them to `holdMany`: the rows of the agents about to hold and of all their ancestors,
   * and, in the statement after (the order every hold takes them), the spendable lots of those agents' payers
   * with the payers' balance rows. `holdMany` reads only what this could not know: the budgets' running totals,
   * when a mandate changed or an ancestor was never seen since the last hold.
   */
  async lockHolders(tx: Tx, agentIds: readonly string[]): Promise<Holders> {
    const atS = this.nowS();
    const requested = [...new Set(agentIds)].sort();
    // The budget periods these agents' mandates had at their last hold: read with the lots, and used if they are
    // the periods the locked rows need (a mandate changed since, or a delegate's ancestor never seen: read again).
    const guessed = this.lastHolders.periodsOf(requested, atS);
    const [rows, own] = await Promise.all([this.identity.lockWithAncestors(tx, requested), store.lockSpendableLotsOf(tx, requested, atS, guessed)]);
    this.lastHolders.remember(rows.values());
    const guessedKeys = new Set(guessed.map(budgetPeriodKey));
    const locked = new Set(requested);
    const payersRead = new Set(requested.map((id) => rows.get(id)).filter((row) => row !== undefined).map(payerOf));
    return {
      atS,
      covering(requesters) {
        const missing = requesters.find((id) => !locked.has(id));
        if (missing !== undefined) throw new Error(`holdMany: agent ${missing} holds, but its row was not locked with the batch's holders`);
        return rows;
      },
      async lotsOf(payerIds, budgetPeriods) {
        // The statement read every payer's lots with the holders; a payer it did not would be locked out of order.
        const unread = payerIds.find((id) => !payersRead.has(id));
        if (unread !== undefined) throw new Error(`holdMany: payer ${unread} pays for the batch, but its lots were not locked with the batch's holders`);
        const guessedRight = budgetPeriods.every((key) => guessedKeys.has(budgetPeriodKey(key)));
        return { lots: new Map(payerIds.map((id) => [id, own.lots.get(id) ?? []])), budgets: guessedRight ? own.budgets : undefined };
      },
    };
  }

  /**
   * Takes many holds in one pass (group commit), each answered exactly as if they were taken one by one in
   * this order: a refused one (FROZEN, SCOPE_FORBIDDEN, CAP_EXCEEDED, INSUFFICIENT_CREDITS, not_found,
   * invalid_input) fails alone, and a later hold of the same agent, or of an agent sharing an ancestor, sees
   * what the earlier ones took, so nothing can overspend. A few statements whatever the number of holds: the
   * rows of the requesters and all their ancestors locked in one sorted statement (the per-agent mutex), the
   * payers' spendable lots locked, every locked agent's usage read (src/policy); the spending policy over
   * each chain and the allocation in memory; then one statement writes every hold, allocation, debit,
   * balanced journal, running total and budget charge (the agent's and each ancestor's), and one every
   * `redemption.held` event. Only when a hold would be refused and its tree has holds past their deadline
   * are those reclaimed first (as the one-by-one path does).
   */
  async holdMany(tx: Tx, requests: readonly HoldRequest[], holders?: Holders): Promise<Array<Settled<Redemption>>> {
    const outcomes: Array<Settled<Redemption>> = [];
    const candidates = requests.filter((request) => request.amountUc > 0n);
    // The requesters and all their ancestors locked, with their lots (`lockHolders`, here or already by the
    // caller); then whatever that could not know: the budgets' running totals.
    const requesters = [...new Set(candidates.map((request) => request.agentId))];
    const locked = holders ?? (await this.lockHolders(tx, requesters));
    const nowS = locked.atS;
    const agents = locked.covering(requesters);
    const payerIds = [...new Set([...agents.values()].map(payerOf))].sort();
    const budgetPeriods = budgetPeriodsOf([...agents.values()], nowS);
    const read = await locked.lotsOf(payerIds, budgetPeriods);
    const lots = read.lots;
    // The budget periods' running totals, read under the agents' locks: those with a row are raised, the others
    // opened, by the holds' statement (`budgetChargeParts`).
    const budgetsRead = read.budgets ?? (await budgetUsageOf(tx, budgetPeriods));
    const periodsWithRows = new Set(budgetsRead.keys());
    const usage = await usageOf(tx, [...agents.values()], nowS, budgetsRead);
    const alerts: OwnerEventInput[] = [];
    const taken = new Map<string, Taken>();
    const takenBy = (agentId: string) => {
      let entry = taken.get(agentId);
      if (!entry) taken.set(agentId, (entry = { allocations: [], amountUc: 0n, charged: [], reclaimed: false }));
      return entry;
    };
    // Holds past their deadline still count until reclaimed; reclaim a payer's tree's (in this transaction)
    // only when they could change an answer, then read its lots and its agents' usage again, with what this
    // pass took.
    const reclaimDue = async (payerId: string): Promise<boolean> => {
      const pool = takenBy(payerId);
      if (pool.reclaimed) return false;
      pool.reclaimed = true;
      if ((await this.settleDueOf(tx, payerId)) === 0) return false;
      const tree = [...agents.values()].filter((agent) => payerOf(agent) === payerId);
      const again = await store.lockSpendableLotsOf(tx, [payerId], nowS, budgetPeriodsOf(tree, nowS));
      lots.set(payerId, store.lessTaken(again.lots.get(payerId) ?? [], pool.allocations));
      for (const key of again.budgets.keys()) periodsWithRows.add(key);
      const fresh = await usageOf(tx, tree, nowS, again.budgets);
      for (const agent of tree) usage.set(agent.id, withTaken(fresh.get(agent.id)!, takenBy(agent.id)));
      return true;
    };
    const recorded: Array<store.NewHold & { redemption: Redemption; trace?: SpanRef }> = [];
    const charges: BudgetChargeRow[] = [];
    for (const request of requests) {
      try {
        const row = agents.get(request.agentId);
        const agent = row && this.identity.spendingChainOf(row, agents);
        const { hold, allocations, charged } = await this.takeOne(request, agent, { nowS, lots, usage, alerts, takenBy, reclaimDue });
        const redemption = toRedemption(hold, allocations.map((a, position) => ({ hold_id: hold.id, lot_id: a.lotId, position, amount_uc: a.amountUc, captured_uc: 0n })), [], nowS);
        if (request.sign) hold.voucher = await request.sign(redemption, { version: hold.mandate_version ?? 0, hash: hold.mandate_hash });
        recorded.push({ hold, allocations, redemption, trace: request.trace });
        charges.push(...charged);
        outcomes.push({ ok: true, value: redemption });
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        outcomes.push({ ok: false, error });
      }
    }
    // The holds and their events (redemption.held to the merchant, budget alerts to the owner) in one statement.
    const nowMs = this.gateway.clock.nowMs();
    const held = recorded.flatMap(({ hold, redemption, trace }) => (hold.merchant_id ? [{ merchantId: hold.merchant_id, type: 'redemption.held' as const, data: { redemption }, trace }] : []));
    const events = [...held, ...alerts];
    if (recorded.length === 0) await emitEvents(tx, events, nowMs);
    else store.recordHolds(tx, recorded, combined(recorded.map(holdJournal)), charges, periodsWithRows, events.length === 0 ? undefined : (first) => eventsPart(events, nowMs, first));
    return outcomes;
  }

  /**
   * One hold of a pass: the one-by-one rules against the pass's state; takes its credit from its payer's lots
   * in memory and charges every applicable budget of the agent and of each ancestor.
   */
  private async takeOne(request: HoldRequest, agent: ChainRow | undefined, pass: HoldPass): Promise<store.NewHold & { charged: BudgetChargeRow[] }> {
    if (request.amountUc <= 0n) throw new ApiError('invalid_input', { detail: 'a hold must be for a positive amount' });
    if (!agent) throw new ApiError('not_found', { detail: `no agent ${request.agentId}` });
    const payerId = payerOf(agent);
    // The spending policy (the mandates of the agent and its ancestors), against their usage with what this
    // pass took; holds past their deadline still count until reclaimed, so a period cap or a budget is asked
    // again after reclaiming them.
    const target = { category: request.category, serviceId: request.serviceId, merchant: request.merchant };
    const spend = () => ({ ...target, atS: pass.nowS, take: { amountUc: request.amountUc, usage: pass.usage.get(agent.id)!, ancestorUsage: pass.usage, approved: request.approved } });
    let refusal = spendingRefusal(agent, spend());
    if ((refusal?.rule === 'periodCap' || refusal?.rule === 'budget') && (await pass.reclaimDue(payerId))) refusal = spendingRefusal(agent, spend());
    traceSpendingDecision(request.trace, agent, spend(), refusal);
    if (refusal) throw refusal.error;
    let allocations = this.allocate(pass.lots.get(payerId)!, request.amountUc);
    if (!allocations && (await pass.reclaimDue(payerId))) allocations = this.allocate(pass.lots.get(payerId)!, request.amountUc);
    if (!allocations) {
      // The agent's own figure, which it reads in GET /v1/me anyway, and what adds credit (found from outside: the
      // refusal said neither); a delegate is not told its root's balance.
      const availableUc = pass.lots.get(payerId)!.reduce((sum, lot) => sum + lot.remaining_uc, 0n);
      const funded = payerId === agent.id ? `the agent's available credit (${availableUc} µc)` : `the available credit of its root agent ${payerId}, which funds it,`;
      // In dev the README adds credit with the operator's grant, which a newcomer who skipped it is pointed back to
      // (found from outside); live mode names only the owner's way.
      const devGrant = this.gateway.config.mode === 'dev' ? `; in dev, also \`npx acg credit grant --agent ${payerId} --amount-uc ${request.amountUc}\`` : '';
      throw new ApiError('INSUFFICIENT_CREDITS', {
        detail: `${funded} does not cover ${request.amountUc} µc: its owner adds credit by approving a top-up (asked for by the agent or its owner with POST /v1/payments/topups, over MCP the request_topup tool)${devGrant}`,
      });
    }
    const holdId = newId('hold');
    const charged: BudgetChargeRow[] = [];
    for (const member of [agent, ...agent.ancestors]) {
      const before = pass.usage.get(member.id)!;
      const memberCharges = chargesOf(member, target, pass.nowS);
      for (const charge of memberCharges) {
        const spent = before.budgets.get(charge.budget.id) ?? { spentUc: 0n, alertedPct: 0 };
        const crossed = thresholdsCrossed(member, charge, spent, spent.spentUc + request.amountUc);
        for (const thresholdPct of crossed) pass.alerts.push({ ...budgetAlert(member, charge, thresholdPct, spent.spentUc + request.amountUc), trace: request.trace });
        charged.push({ holdId, agentId: member.id, budgetId: charge.budget.id, periodStartS: charge.periodStartS, amountUc: request.amountUc, alertedPct: Math.max(0, ...crossed) });
      }
      // Only the agent's own holds count in its rolling cap; every member's budgets count this hold.
      const ownUc = member === agent ? request.amountUc : 0n;
      pass.usage.set(member.id, afterTaking(before, request.amountUc, memberCharges, ownUc));
      const mine = pass.takenBy(member.id);
      mine.amountUc += ownUc;
      mine.charged.push({ charges: memberCharges, amountUc: request.amountUc });
    }
    pass.lots.set(payerId, store.lessTaken(pass.lots.get(payerId)!, allocations));
    pass.takenBy(payerId).allocations.push(...allocations);
    const hold: store.HoldRow = {
      id: holdId,
      agent_id: agent.id,
      payer_id: payerId,
      acceptor_id: request.acceptorId,
      merchant_id: request.merchantId,
      offer_id: request.offerId,
      category: request.category,
      amount_uc: request.amountUc,
      captured_uc: 0n,
      state: 'held',
      expires_at_s: BigInt(pass.nowS + request.lifetimeS),
      created_at_s: BigInt(pass.nowS),
      resolved_at_s: null,
      refund_window_s: request.refundWindowS ?? REFUND_WINDOW_S_DEFAULT,
      refunded_uc: 0n,
      capture_receipt: null,
      mandate_version: agent.mandate_version,
      mandate_hash: agent.mandate_hash,
      ancestor_mandates: agent.ancestors.length === 0 ? null : agent.ancestors.map((ancestor): store.AncestorMandate => [ancestor.id, ancestor.mandate_version, ancestor.mandate_hash]),
      voucher: null,
      offer_snapshot: request.offerSnapshot ?? null,
    };
    return { hold, allocations, charged };
  }

  /** Burn-down allocation of `amountUc` over lots already in order, or undefined when they do not cover it. */
  private allocate(lots: readonly store.LotRow[], amountUc: bigint): Array<{ lotId: string; amountUc: bigint }> | undefined {
    const allocations: Array<{ lotId: string; amountUc: bigint }> = [];
    let neededUc = amountUc;
    for (const lot of lots) {
      if (neededUc === 0n) break;
      if (lot.remaining_uc === 0n) continue;
      const takeUc = lot.remaining_uc < neededUc ? lot.remaining_uc : neededUc;
      allocations.push({ lotId: lot.id, amountUc: takeUc });
      neededUc -= takeUc;
    }
    return neededUc === 0n ? allocations : undefined;
  }

  /**
   * Expires, inside the caller's transaction, the holds funded by `payerId` whose deadline has passed. The
   * caller (a hold pass) already holds the payer's lots and balance rows, which a sweep or a capture takes after
   * the hold: one of those holds locked elsewhere is left out, not waited for (waiting closes a deadlock), and
   * counts until its holder is done, as it would had this pass come first.
   */
  private async settleDueOf(tx: Tx, payerId: string): Promise<number> {
    return this.expireHolds(tx, await store.dueHoldIds(tx, this.nowS(), { payerId, limit: SWEEP_BATCH_MAX, except: this.setAsideHolds() }), { skipLocked: true });
  }

  /** Holds that failed to expire on their own, until when they are left out (see UNEXPIRABLE_SET_ASIDE_MS). */
  private readonly unexpirable = new Map<string, number>();

  private setAsideHolds(): string[] | undefined {
    if (this.unexpirable.size === 0) return undefined;
    const nowMs = this.gateway.clock.nowMs();
    for (const [id, untilMs] of this.unexpirable) if (untilMs <= nowMs) this.unexpirable.delete(id);
    return this.unexpirable.size === 0 ? undefined : [...this.unexpirable.keys()];
  }

  /**
   * Expires, in the caller's transaction, those of these holds still held at their deadline, set-based as
   * resolveMany: the holds locked and their allocations read in one statement, every resolution in one more.
   * Returns how many it expired.
   */
  private async expireHolds(tx: Tx, holdIds: readonly string[], options: { skipLocked?: boolean } = {}): Promise<number> {
    if (holdIds.length === 0) return 0;
    const { holds, allocations } = await store.lockHoldsWithAllocations(tx, holdIds, options);
    const nowS = this.nowS();
    const due = [...holds.values()].filter((hold) => overdue(hold, nowS));
    await this.settleMany(tx, due.map((hold) => ({ hold, state: 'expired' as const, capturedUc: 0n })), allocations);
    return due.length;
  }

  private async emit(tx: Tx, hold: store.HoldRow, type: EventType, redemption: Redemption): Promise<void> {
    if (!hold.merchant_id) return;
    await emitEvent(tx, { merchantId: hold.merchant_id, type, data: { redemption }, nowMs: this.gateway.clock.nowMs() });
  }

  /**
   * Which holds a reader may read: a merchant its own merchant's; an agent its own, in dev mode only (in live
   * mode an agent reads holds through its merchant, as the spec says: 503 provider_configuration_required).
   */
  holdReader(reader: Pick<Principal, 'kind' | 'agentId' | 'merchantId'>): HoldScope {
    if (reader.kind !== 'agent') return { merchantId: reader.merchantId };
    if (this.gateway.config.mode === 'live') {
      throw new ApiError('provider_configuration_required', { detail: 'agents read holds through their merchant in live mode' });
    }
    return { agentId: reader.agentId };
  }

  /** One hold, for a reader of `scope`; another merchant's (or agent's) hold is not found. */
  async getHold(db: Queryable, holdId: string, scope: HoldScope = {}): Promise<Redemption> {
    const hold = await store.findHold(db, holdId);
    if (!hold || (scope.merchantId !== undefined && hold.merchant_id !== scope.merchantId) || (scope.agentId !== undefined && hold.agent_id !== scope.agentId)) {
      throw new ApiError('not_found', { detail: `no redemption ${holdId}` });
    }
    return (await this.redemptionsOf(db, [hold]))[0]!;
  }

  /** Holds by id, as a payment protocol checks them (see HoldRecord); an unknown id is absent. Three statements whatever their number. */
  async holdRecords(db: Queryable, holdIds: readonly string[]): Promise<Map<string, HoldRecord>> {
    const holds = await store.findHolds(db, holdIds);
    const redemptions = await this.redemptionsOf(db, holds);
    return new Map(
      holds.map((hold, index) => [
        hold.id,
        { redemption: redemptions[index]!, merchantId: hold.merchant_id, revokedAt: hold.revoked_at_s == null ? null : Number(hold.revoked_at_s), credential: hold.voucher },
      ]),
    );
  }

  /** An agent's holds, oldest first (by creation time), or newest first. */
  /** An agent's holds, a page at a time; with `expand: 'offer'`, each with what was bought as it was sold. */
  async listHolds(db: Queryable, agentId: string, page: Page & { order?: PageOrder; expand?: 'offer' }): Promise<{ redemptions: Redemption[]; hasMore: boolean }> {
    const found = await pageBySeq<store.HoldRow>(db, 'holds', 'agent_id', agentId, page);
    const redemptions = await this.redemptionsOf(db, found.items);
    if (page.expand === 'offer') redemptions.forEach((redemption, index) => (redemption.offer = found.items[index]!.offer_snapshot));
    return { redemptions, hasMore: found.hasMore };
  }

  /** Holds as readers see them, with their allocations and refunds (two statements whatever their number). */
  private async redemptionsOf(db: Queryable, holds: readonly store.HoldRow[]): Promise<Redemption[]> {
    const ids = holds.map((hold) => hold.id);
    const [allocations, refunds] = [await store.allocationsOf(db, ids), await store.refundsOf(db, ids)];
    const nowS = this.nowS();
    return holds.map((hold) => toRedemption(hold, allocations, refunds, nowS));
  }

  /** Captures `amountUc` (default: all of it); the remainder returns to its lots in the same transaction. */
  async capture(tx: Tx, holdId: string, options: { merchantId?: string; amountUc?: Microcredits } = {}): Promise<Redemption> {
    return unwrap((await this.resolveMany(tx, [{ action: 'capture', holdId, ...options }]))[0]!);
  }

  /** Releases a hold; releasing an already released hold returns it unchanged (idempotent by resource). */
  async release(tx: Tx, holdId: string, options: { merchantId?: string } = {}): Promise<Redemption> {
    return unwrap((await this.resolveMany(tx, [{ action: 'release', holdId, ...options }]))[0]!);
  }

  /**
   * What `resolveMany` locks and reads first: the holds, in sorted order, with their allocations (one
   * statement). A capture or release batch reads it ahead, beside its claims, for every call of the batch.
   */
  lockResolving(tx: Tx, holdIds: readonly string[]): Promise<ResolvingHolds> {
    return store.lockHoldsWithAllocations(tx, holdIds);
  }

  /**
   * Captures and releases many holds in one pass (group commit), each answered exactly as one by one in this
   * order: the holds locked in sorted order and their allocations read (one statement; `read`, when the batch
   * read them ahead with its claims: `lockResolving`, for at least these holds), the checks in
   * memory against what earlier calls of the pass did, then every resolution in LedgerService.settleMany. A
   * hold found past its deadline is reclaimed in the same pass (its credit back to the agent) and its calls
   * answer 409 hold_resolved.
   */
  async resolveMany(tx: Tx, requests: readonly ResolveRequest[], read?: ResolvingHolds): Promise<Array<Settled<Redemption>>> {
    const { holds: locked, allocations } = read ?? (await this.lockResolving(tx, requests.map((request) => request.holdId)));
    const nowS = this.nowS();
    const current = new Map(locked);
    const settling = new Map<string, SettleItem>();
    const settle = (hold: store.HoldRow, state: SettleItem['state'], capturedUc: bigint, trace?: SpanRef, revoking?: Revoking) => {
      settling.set(hold.id, { hold, state, capturedUc, trace, revoking });
      current.set(hold.id, { ...hold, state, captured_uc: capturedUc });
    };
    // Each call: an error, or the id of the hold whose final form it answers.
    const answers = requests.map((request): Settled<string> => {
      const hold = current.get(request.holdId);
      if (!hold || (request.merchantId !== undefined && hold.merchant_id !== request.merchantId)) {
        return { ok: false, error: new ApiError('not_found', { detail: `no redemption ${request.holdId}` }) };
      }
      if (request.action === 'capture' && hold.revoked_at_s != null) return { ok: false, error: revokedError(hold, hold.revoked_at_s) };
      if (request.action === 'release' && hold.state === 'released') return { ok: true, value: hold.id };
      if (overdue(hold, nowS)) settle(hold, 'expired', 0n);
      const state = current.get(hold.id)!.state;
      if (state === 'expired') return { ok: false, error: new ApiError('hold_resolved', { detail: 'the hold has expired; its credit went back to the agent' }) };
      if (state !== 'held') return { ok: false, error: new ApiError('hold_resolved', { detail: `the hold is already ${state}` }) };
      if (request.action === 'release') {
        settle(hold, 'released', 0n, request.trace, request.revoking);
        return { ok: true, value: hold.id };
      }
      const captureUc = request.amountUc ?? hold.amount_uc;
      if (captureUc <= 0n) return { ok: false, error: memberRefusal('amountUc', 'must be positive (release the hold to capture nothing)') };
      if (captureUc > hold.amount_uc) {
        return { ok: false, error: memberRefusal('amountUc', `(${captureUc} µc) is more than the hold's ${hold.amount_uc} µc`) };
      }
      settle(hold, 'captured', captureUc, request.trace);
      return { ok: true, value: hold.id };
    });
    const settled = await this.settleMany(tx, [...settling.values()], allocations);
    const redemptions = new Map(settled.map((redemption) => [redemption.id, redemption]));
    return answers.map((answer) => {
      if (!answer.ok) return answer;
      const redemption = redemptions.get(answer.value) ?? toRedemption(locked.get(answer.value)!, allocations, [], nowS);
      return { ok: true, value: redemption };
    });
  }

  /**
   * Releases every hold of these agents still held and withdraws its voucher (the kill switch): each through
   * resolveMany's release (its credit back to its lots, its budgets given back, `redemption.released` to its
   * merchant), then marked revoked, so a capture answers 409 voucher_revoked. A hold found past its deadline
   * is reclaimed as expired instead (its voucher is dead already) and is not among the answer. `revokedAtS` is the
   * revocation's own time (the freeze's), so a capture's refusal names the time its event and feed name: read
   * here again, it fell a second later whenever the releases crossed a second.
   */
  async revokeHolds(tx: Tx, agentIds: readonly string[], reason: string, revokedAtS: number): Promise<RevokedHold[]> {
    const released = await this.releaseHeldOf(tx, agentIds, { reason, atS: revokedAtS });
    const revoked = new Set(await store.markRevoked(tx, released.map(({ redemption }) => redemption.id), reason, revokedAtS));
    if (revoked.size !== released.length) throw new Error(`ledger invariant: ${released.length} holds released for revocation, ${revoked.size} marked revoked`);
    return released;
  }

  /**
   * The one way a freeze or a retirement releases an agent's outstanding holds: locked first, so a hold its
   * merchant resolved meanwhile is left out (not counted as this release), then released through
   * resolveMany (credit back to its lots, budgets given back, `redemption.released` to its merchant). A hold
   * found past its deadline is reclaimed as expired instead and is not among the answer.
   */
  private async releaseHeldOf(tx: Tx, agentIds: readonly string[], revoking: Revoking): Promise<RevokedHold[]> {
    const locked = await store.lockHolds(tx, await store.heldHoldIdsOf(tx, agentIds));
    const held = [...locked.values()].filter((hold) => hold.state === 'held');
    const outcomes = await this.resolveMany(tx, held.map(({ id }) => ({ action: 'release' as const, holdId: id, revoking })));
    const released: Redemption[] = [];
    for (const outcome of outcomes) {
      if (outcome.ok && outcome.value.state === 'released') released.push(outcome.value);
      else if (!outcome.ok && !(outcome.error instanceof ApiError && outcome.error.code === 'hold_resolved')) throw outcome.error;
    }
    const merchantOf = new Map(held.map((hold) => [hold.id, hold.merchant_id]));
    return released.map((redemption) => ({ redemption, merchantId: merchantOf.get(redemption.id)! }));
  }

  /**
   * Refunds captured credit to the agent, out of the merchant's earnings: new lots (source `refund`), each
   * burning and lapsing like the lot its part came from, undone in reverse burn order (`refundLots`).
   * Under the hold's lock, so concurrent refunds of one hold are serialised and never pass its capture;
   * then the earnings account's lock (the same order as capture: hold, then account).
   */
  async refund(tx: Tx, holdId: string, request: RefundRequest): Promise<{ refund: Refund; redemption: Redemption }> {
    const hold = await store.lockHold(tx, holdId);
    if (!hold || hold.merchant_id !== request.merchantId) throw new ApiError('not_found', { detail: `no redemption ${holdId}` });
    const nowS = this.nowS();
    if (hold.state !== 'captured') {
      const state = overdue(hold, nowS) ? 'expired' : hold.state;
      throw new ApiError('conflict', { detail: `only captured credit can be refunded; the hold is ${state}` });
    }
    const closesAtS = Number(hold.resolved_at_s) + hold.refund_window_s;
    if (nowS >= closesAtS) {
      throw new ApiError('refund_window_closed', { detail: `the refund window of this offer (${hold.refund_window_s} s after capture) closed at ${closesAtS}` });
    }
    const refundableUc = hold.captured_uc - hold.refunded_uc;
    if (request.amountUc === undefined && refundableUc === 0n) throw new ApiError('conflict', { detail: 'the captured credit is already fully refunded' });
    const amountUc = request.amountUc ?? refundableUc;
    if (amountUc <= 0n) throw memberRefusal('amountUc', 'must be positive');
    if (amountUc > refundableUc) {
      throw new ApiError('refund_exceeds_captured', { detail: `cannot refund ${amountUc} µc: ${hold.captured_uc} µc captured, ${hold.refunded_uc} µc already refunded` });
    }
    if (request.reason !== undefined && request.reason.length > REFUND_REASON_LENGTH_MAX) {
      throw memberRefusal('reason', `must be at most ${REFUND_REASON_LENGTH_MAX} characters`);
    }
    const earlier = await store.refundsOf(tx, [hold.id]);
    if (earlier.length >= REFUNDS_PER_REDEMPTION_MAX) throw new ApiError('conflict', { detail: `a redemption takes at most ${REFUNDS_PER_REDEMPTION_MAX} refunds` });
    const account = earningsAccount(hold);
    const earnedUc = await store.lockAccountBalance(tx, account);
    if (earnedUc < amountUc) {
      throw new ApiError('insufficient_earnings', { detail: `the merchant's earnings (${earnedUc} µc) do not cover a refund of ${amountUc} µc` });
    }
    const refundId = newId('rfd');
    const parts = refundLots(await store.capturedSourceLots(tx, hold.id), hold.refunded_uc, amountUc);
    const lots: store.LotRow[] = [];
    for (const part of parts) {
      lots.push(
        await store.insertLot(tx, {
          id: newId('lot'),
          // Back to the lots it came from: the payer's (a delegate's purchase was funded by its root).
          agent_id: hold.payer_id,
          source: 'refund',
          source_ref: refundId,
          priority: part.priority,
          granted_uc: part.amountUc,
          remaining_uc: part.amountUc,
          expires_at_s: part.expiresAtS,
          created_at_s: BigInt(nowS),
        }),
      );
    }
    const refunded: store.HoldRow = { ...hold, refunded_uc: hold.refunded_uc + amountUc };
    const row: store.RefundRow = {
      id: refundId,
      hold_id: hold.id,
      merchant_id: request.merchantId,
      // The first of its lots (the most lasting credit); every one names the refund as its source_ref.
      lot_id: lots[0]!.id,
      amount_uc: amountUc,
      reason: request.reason ?? null,
      receipt: await signReceipt(this.gateway, { kind: 'refund', hold: refunded, nowS, refund: { id: refundId, amountUc } }),
      created_at_s: BigInt(nowS),
    };
    if (!(await store.recordRefund(tx, row, account))) throw new Error(`ledger invariant: refund ${refundId} of hold ${hold.id} passed its checks but not its guards`);
    const journal = balancedEntries(refundId, 'refund', [
      { account, amountUc: -amountUc },
      ...lots.map((lot) => ({ account: `lot:${lot.id}`, amountUc: lot.granted_uc })),
    ]);
    await appendJournal(tx, journal, nowS);
    const redemption = toRedemption(refunded, await store.allocationsOf(tx, [hold.id]), [...earlier, row], nowS);
    await this.emit(tx, refunded, 'redemption.refunded', redemption);
    return { refund: toRefund(row), redemption };
  }

  /**
   * Resolves locked holds: the first `capturedUc` of each hold's allocations (in burn order) go to the
   * earnings account, the rest back to each allocation's own lot. If that lot has expired meanwhile, the
   * credit lands in it anyway and counts as lapsed. One statement whatever the number of holds: every
   * resolution and its event (store.recordSettlements), from the holds and allocations the caller locked and read.
   */
  private async settleMany(tx: Tx, items: readonly SettleItem[], allocations: readonly store.AllocationRow[]): Promise<Redemption[]> {
    if (items.length === 0) return [];
    const nowS = this.nowS();
    const settlements: store.Settlement[] = [];
    const journals: BalancedJournal[] = [];
    const resolvedAllocations: store.AllocationRow[] = [];
    for (const { hold, state, capturedUc } of items) {
      const lines: store.SettlementLine[] = [];
      let toCaptureUc = capturedUc;
      for (const allocation of allocations.filter((a) => a.hold_id === hold.id)) {
        const fromThisUc = allocation.amount_uc < toCaptureUc ? allocation.amount_uc : toCaptureUc;
        toCaptureUc -= fromThisUc;
        resolvedAllocations.push({ ...allocation, captured_uc: fromThisUc });
        lines.push({ lotId: allocation.lot_id, capturedUc: fromThisUc, returnedUc: allocation.amount_uc - fromThisUc });
      }
      if (toCaptureUc !== 0n) throw new Error(`ledger invariant: hold ${hold.id} allocations do not cover its amount`);
      const receipt = state === 'captured' ? await signReceipt(this.gateway, { kind: 'capture', hold: { ...hold, captured_uc: capturedUc }, nowS }) : null;
      // An expired hold resolved at its deadline, whenever the sweeper reclaimed it: a settled fact reads the same every time.
      const resolvedAtS = state === 'expired' ? hold.expires_at_s : BigInt(nowS);
      // Its budgets get back what it no longer spends; a row read without its charges is taken to have some.
      const budgetCharged = hold.budget_charges !== null && capturedUc < hold.amount_uc;
      const settlement: store.Settlement = { holdId: hold.id, state, capturedUc, earningsAccount: earningsAccount(hold), receipt, resolvedAtS, lines, budgetCharged };
      settlements.push(settlement);
      journals.push(settlementJournal(settlement));
    }
    // What each hold becomes, decided here and written as decided, so its event goes in the same statement.
    // A revoking release's mark is written by the revocation (markRevoked) right after, in the same transaction.
    const becomes = items.map(({ hold, state, capturedUc, revoking }, index): store.HoldRow => ({
      ...hold,
      state,
      captured_uc: capturedUc,
      capture_receipt: settlements[index]!.receipt,
      resolved_at_s: settlements[index]!.resolvedAtS,
      ...(revoking ? { revoked_at_s: BigInt(revoking.atS), revocation_reason: revoking.reason } : {}),
    }));
    const redemptions = becomes.map((hold) => toRedemption(hold, resolvedAllocations, [], nowS));
    const events = items.flatMap(({ hold, state, trace }, index) => (hold.merchant_id ? [{ merchantId: hold.merchant_id, type: `redemption.${state}` as const, data: { redemption: redemptions[index]! }, trace }] : []));
    const nowMs = this.gateway.clock.nowMs();
    store.recordSettlements(tx, settlements, combined(journals), nowS, events.length === 0 ? undefined : (first) => eventsPart(events, nowMs, first));
    return redemptions;
  }

  /**
   * The sweeper's pass: expireDue's batches one after another while each comes back full, up to
   * SWEEP_BATCHES_PER_PASS_MAX (found from outside: 470 holds left due by a stopped instance took a batch of 100 per
   * 5 s interval, and their merchants' redemption.expired waited as long). Each batch is its own transaction.
   */
  async sweepDue(): Promise<number> {
    let expired = 0;
    for (let batch = 0; batch < SWEEP_BATCHES_PER_PASS_MAX; batch++) {
      const count = await this.expireDue();
      expired += count;
      if (count < SWEEP_BATCH_MAX) break;
    }
    return expired;
  }

  /**
   * Reclaims holds past their deadline, up to 100 in one set-based transaction (expireHolds): for one hold, one
   * agent's tree (`agentId`: every hold its root funds, which the balance and the budgets of any agent of the
   * tree count), or a batch of everyone's. Safe to run from any number of instances at once: the holds are
   * locked in sorted order, and one another instance reclaimed meanwhile is left out.
   */
  async expireDue(options: { agentId?: string; holdId?: string } = {}): Promise<number> {
    const { db, log } = this.gateway;
    const ids = await store.dueHoldIds(db, this.nowS(), { treeOf: options.agentId, holdId: options.holdId, limit: SWEEP_BATCH_MAX, except: this.setAsideHolds() });
    if (ids.length === 0) return 0;
    try {
      return await db.transaction((tx) => this.expireHolds(tx, ids));
    } catch (error) {
      if (isStorageUnavailable(error)) throw error;
      // One hold that cannot expire (a row an older release wrote in a form this one refuses, found from outside)
      // must not hold back every other: each alone, and one that fails again is set aside and said loudly. It stays
      // held, counted as before; nothing about it is guessed.
      let expired = 0;
      for (const id of ids) {
        try {
          expired += await db.transaction((tx) => this.expireHolds(tx, [id]));
        } catch (fault) {
          if (isStorageUnavailable(fault)) throw fault;
          this.unexpirable.set(id, this.gateway.clock.nowMs() + UNEXPIRABLE_SET_ASIDE_MS);
          log.error({ holdId: id, err: fault, retryInS: UNEXPIRABLE_SET_ASIDE_MS / 1000 }, `hold ${id} cannot expire; it stays held and is left out of expiry for a while`);
        }
      }
      return expired;
    }
  }

  /**
   * The holds still held past `afterS`: how many, and the latest deadline. For `acg keys rotate`, whose replaced key
   * must keep verifying their vouchers until then (no gateway needed: a command's own database).
   */
  static heldPast(db: Queryable, afterS: number): Promise<{ count: number; latestS: number | null }> {
    return store.heldPast(db, afterS);
  }

  /**
   * The agent's balance in one statement whose cost does not grow with its history: the running totals
   * (held, captured, granted, refunded) from its balance row, available and lapsed from its lots that
   * still hold credit (what lapses depends on the clock, so it is not kept).
   */
  async balance(db: Queryable, agentId: string): Promise<Balance> {
    const totals = await store.readBalance(db, agentId, this.nowS());
    return {
      agentId,
      ...(totals.payer_id === agentId ? {} : { fundedBy: totals.payer_id }),
      availableUc: formatUc(totals.available_uc),
      heldUc: formatUc(totals.held_uc),
      capturedUc: formatUc(totals.captured_uc),
      lapsedUc: formatUc(totals.lapsed_uc),
      grantedUc: formatUc(totals.granted_uc),
      refundedUc: formatUc(totals.refunded_uc),
    };
  }

  async lots(db: Queryable, agentId: string, page: Page): Promise<{ lots: Lot[]; hasMore: boolean }> {
    const nowS = this.nowS();
    const found = await store.listLots(db, agentId, page);
    return { lots: found.items.map((row) => toLot(row, nowS)), hasMore: found.hasMore };
  }

  async merchantEarnings(db: Queryable, merchantId: string): Promise<string> {
    return formatUc(await store.accountBalance(db, `merchant:${merchantId}`));
  }

  /**
   * Spending over the last `days` UTC days, today included (store.spendingByDay says what counts): the days,
   * oldest first, and for each agent that made a hold in them its amount per day, in the same order.
   */
  async spendingByDay(db: Queryable, agentIds: readonly string[], days: number): Promise<{ days: string[]; spent: Map<string, bigint[]> }> {
    const nowS = this.nowS();
    const firstDay = Math.floor(nowS / DAY_S) - (days - 1);
    const rows = await store.spendingByDay(db, agentIds, firstDay * DAY_S, nowS);
    const spent = new Map<string, bigint[]>();
    for (const row of rows) {
      const series = spent.get(row.agent_id) ?? new Array<bigint>(days).fill(0n);
      series[Number(row.day) - firstDay] = row.spent_uc;
      spent.set(row.agent_id, series);
    }
    const dates = Array.from({ length: days }, (_, i) => new Date((firstDay + i) * DAY_S * 1000).toISOString().slice(0, 10));
    return { days: dates, spent };
  }
}

const DAY_S = 86_400;
