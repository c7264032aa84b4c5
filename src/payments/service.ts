// Top-ups (POST /v1/payments/topups and the automatic top-up of a retained intent): a request to credit
// an agent, approved by its owner through the configured payment rail (rails/), settled exactly once. This
// service is also the gateway's human approver (platform/approvals.ts): execute asks it for a top-up when
// credit falls short, and the voucher mint and execute for a purchase above the mandate's approval threshold
// (purchases.ts: those need no rail, no money moving at approval).
//
// Statuses: pending_approval → settled | declined | expired | failed; every other state is final.
//   settled   the provider confirmed payment (the owner approved on our page, or Stripe's signed webhook);
//             one lot (source `topup`) is credited, journaled, in the transaction that marks it settled;
//   declined  the owner declined on our page (a Stripe session is expired first, so it cannot be paid);
//   expired   nobody approved in time (24 h locally; the Checkout Session's expiry plus an hour), or the
//             retained intent it was opened for was cancelled by a freeze or retirement (closeFundingOf);
//   failed    the provider reported the payment failed (Stripe's async_payment_failed).
// Every notification locks the top-up row first and acts only on a pending top-up, so duplicates, replays
// and notifications racing on several instances credit once; the lot's unique source_ref is the backstop.
//
// After settlement the bound intent is resumed by the gateway itself: at once by the instance that
// settled, and by every instance's resume job until the intent is no longer pending. Execute's
// Idempotency-Key claim makes the run happen once (see Intents.resume in execute). A top-up that ends
// without credit cancels its intent (no charge), unless another top-up of that intent is still open.
import { emitEvent, emitEvents } from '../events/outbox.ts';
import type { ExecuteService } from '../execute/service.ts';
import type { IntentFunding, IntentFundingEnd } from '../execute/intents.ts';
import { actsFor, type Actor } from '../agents/acting.ts';
import type { AgentService } from '../agents/service.ts';
import { refuseDelegate, type LedgerService } from '../ledger/service.ts';
import type { ApprovalRequest, HumanApprover, PendingApproval, PendingPurchase, PurchaseAnswer, PurchaseAnswering, PurchaseApprovalRequest, PurchaseApprover, RequestBinding, RequestKey } from '../platform/approvals.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, formatUsd, UC_PER_USD_CENT } from '../platform/money.ts';
import type { Principal } from '../platform/principal.ts';
import type { Page } from '../platform/schemas.ts';
import { RAILS, type ConfiguredRail, type RailKind } from './rails/index.ts';
import type { NotificationCheck, OpenedApproval, RailNotifications, SettleOutcome, TopupDraft, TopupFacts, TopupSettlement } from './rails/rail.ts';
import { PURCHASE_APPROVAL_LIFETIME_S, PurchaseApprovals } from './purchases.ts';
import { GATEWAY_REQUESTER, requesterOf, type TopupRequester } from './requester.ts';
import * as store from './store.ts';
import { SAME_KEY } from '../platform/idempotency.ts';

export const TOPUP_AMOUNT_USD_CENTS_MIN = 50;
export const TOPUP_AMOUNT_USD_CENTS_MAX = 100_000;
export const TOPUP_REASON_CHARS_MIN = 100;
export const TOPUP_REASON_CHARS_MAX = 2000;
/**
 * At most this many top-ups of one agent wait for its owner at once (`pending_approval`, before their expiry),
 * whoever asked (the agent, its owner, execute's automatic top-ups). Each is a request a human answers by hand,
 * shown on the owner's approvals page and console; one can ask for up to $1,000, and one settled top-up funds
 * every retained intent's retry, so more than ten waiting is noise, not need (ten fit on half a default page).
 */
export const PENDING_TOPUPS_PER_AGENT_MAX = 10;
/** What the gateway asks for when an execution finds the credit short: $5.00, or the price if more. */
export const AUTOMATIC_TOPUP_USD_CENTS = 500;
/** How often each instance expires stale top-ups and resumes intents whose top-up settled. */
export const TOPUP_JOB_INTERVAL_MS = 2000;
const RESUME_BATCH_MAX = 20;
const EXPIRY_BATCH_MAX = 100;
/** Another instance holds the intent's key: look again soon. */
const RESUME_BUSY_RETRY_S = 5;

export type TopupStatus = store.TopupStatus;

/** The spec's Top-up request record, plus what the gateway adds (all documented in the OpenAPI document). */
export interface Topup {
  id: string;
  agentId: string;
  amountUsdCents: number;
  amountUc: string;
  reason: string;
  /** Who wrote `reason`: the page and the console say whose words they show. */
  requestedBy: TopupRequester;
  status: TopupStatus;
  kind: 'checkout';
  provider: RailKind;
  approvalUrl: string;
  checkoutUrl: string;
  /** `resolution`: what the rail needs done next (`owner_approval`, `checkout`), `none` once final. */
  nextAction: { resolution: string; actionUrl: string };
  intentId: string | null;
  livemode: boolean;
  lotId: string | null;
  createdAt: number;
  updatedAt: number;
  expiresAt: number;
  finishedAt: number | null;
}

export interface TopupRequest {
  agentId: string;
  amountUsdCents: number;
  reason: string;
  intentId?: string;
}

/** What the payments feature needs from execute: the retained intents it pays for. */
export type RetainedIntents = Pick<ExecuteService['intents'], 'resume' | 'cancel' | 'pending'>;

export interface PaymentsDependencies {
  identity: AgentService;
  ledger: LedgerService;
  /** Absent with ACG_PAYMENT_PROVIDER=none: top-ups are still readable, but none can be created, approved or declined. */
  rail: ConfiguredRail | undefined;
  /** Late-bound: execute is built with this service as its human approver. */
  intents: () => RetainedIntents;
  /** How long the owner has to answer a purchase approval, and the approved request to be retried (default 15 minutes). */
  purchaseApprovalLifetimeS?: number;
}

/** A top-up as its readers see it. What its rail says of itself is read from the registry, whatever rail is configured now. */
/**
 * A top-up as the API shows it. With `nowS` (a read), one still pending past its deadline reads as expired, as the
 * owner's approvals list shows it and as the expiry job will make it within seconds (nobody may approve it any more).
 */
export function toTopup(row: store.TopupRow, nowS?: number): Topup {
  const status = row.status === 'pending_approval' && nowS !== undefined && Number(row.expires_at_s) <= nowS ? 'expired' : row.status;
  const pending = status === 'pending_approval';
  return {
    id: row.id,
    agentId: row.agent_id,
    amountUsdCents: row.amount_usd_cents,
    amountUc: formatUc(BigInt(row.amount_usd_cents) * UC_PER_USD_CENT),
    reason: row.reason,
    requestedBy: requesterOf(row.requested_by),
    status,
    kind: 'checkout',
    provider: row.provider,
    approvalUrl: row.approval_url,
    checkoutUrl: row.checkout_url,
    nextAction: {
      resolution: pending ? RAILS[row.provider].resolution : 'none',
      actionUrl: row.approval_url,
    },
    intentId: row.intent_id,
    livemode: row.livemode,
    lotId: row.lot_id,
    createdAt: Number(row.created_at_s),
    updatedAt: Number(row.updated_at_s),
    expiresAt: Number(row.expires_at_s),
    finishedAt: row.finished_at_s === null ? null : Number(row.finished_at_s),
  };
}

function dollars(cents: number): string {
  return formatUsd(BigInt(cents) * UC_PER_USD_CENT);
}

function factsOf(row: store.TopupRow): TopupFacts {
  return { id: row.id, provider: row.provider, providerRef: row.provider_ref, amountUsdCents: row.amount_usd_cents, livemode: row.livemode };
}

export class PaymentsService implements HumanApprover, PurchaseApprover, TopupSettlement, IntentFunding {
  /** Purchases above a mandate's approval threshold, waiting for (or holding) the owner's answer. */
  readonly purchases: PurchaseApprovals;

  constructor(
    private readonly gateway: Gateway,
    private readonly deps: PaymentsDependencies,
  ) {
    this.purchases = new PurchaseApprovals(gateway, {
      identity: deps.identity,
      intents: () => deps.intents(),
      lifetimeS: deps.purchaseApprovalLifetimeS ?? PURCHASE_APPROVAL_LIFETIME_S,
    });
  }

  /** The configured rail's name, if there is one. */
  get railKind(): RailKind | undefined {
    return this.deps.rail?.module.kind;
  }

  /** The configured rail's notification endpoint (Stripe's webhook), which the payments face serves. */
  get notifications(): RailNotifications | undefined {
    return this.deps.rail?.rail.notifications;
  }

  /**
   * The configured rail. Creating, approving and declining need one (503 payment_unavailable); reading
   * top-ups never does, so records made under an earlier configuration stay readable.
   */
  requireRail(): ConfiguredRail {
    if (!this.deps.rail) throw new ApiError('payment_unavailable', { detail: 'no payment-approval provider is configured (ACG_PAYMENT_PROVIDER)' });
    return this.deps.rail;
  }

  /** Which agent is topped up, checked before the Idempotency-Key is claimed: the acting-for rule (agents/acting.ts). */
  async authorize(caller: Actor, agentId: string): Promise<{ agentId: string; ownerId: string }> {
    const agent = await this.deps.identity.actingAgent(this.gateway.db, caller, agentId);
    // A delegate spends its root's lots: credit is bought for the root, refused here before anything is paid.
    refuseDelegate(agent);
    // A frozen agent spends nothing, so it asks its owner for nothing either (its owner may still top it up).
    if (caller.kind === 'agent' && agent.status === 'frozen') {
      throw new ApiError('FROZEN', { detail: `agent ${agent.id} is frozen: it asks for no credit until its owner unfreezes it (the owner may top it up meanwhile)`, extra: { reason: 'frozen' } });
    }
    return { agentId: agent.id, ownerId: agent.owner_id };
  }

  /**
   * Slow part of creating a top-up, outside any transaction: checks the intent it binds and the agent's
   * pending top-ups, then opens the approval at the provider. Runs after the Idempotency-Key is claimed, so a
   * replay never opens a second one, nor is refused by the limit its own top-up counts towards.
   */
  async open(request: TopupRequest): Promise<{ draft: TopupDraft; opened: OpenedApproval }> {
    if (request.intentId !== undefined) await this.checkIntent(this.gateway.db, request.intentId, request.agentId);
    await this.refuseAtPendingLimit(this.gateway.db, request.agentId);
    const draft: TopupDraft = { id: newId('top'), agentId: request.agentId, amountUsdCents: request.amountUsdCents, intentId: request.intentId ?? null };
    return { draft, opened: await this.requireRail().rail.open(draft, this.gateway.clock.nowS()) };
  }

  /**
   * Records an opened top-up (in the caller's transaction). 409 conflict when its intent has one pending, or
   * when its agent has PENDING_TOPUPS_PER_AGENT_MAX waiting.
   */
  async record(tx: Tx, owner: { ownerId: string; requestedBy: string }, request: TopupRequest, prepared: { draft: TopupDraft; opened: OpenedApproval }): Promise<Topup> {
    await this.deps.identity.lockAgent(tx, request.agentId);
    if (request.intentId !== undefined) await this.checkIntent(tx, request.intentId, request.agentId);
    await this.refuseAtPendingLimit(tx, request.agentId);
    const row = await this.insert(tx, owner, request.reason, prepared);
    if (!row) {
      throw new ApiError('conflict', { detail: `intent ${request.intentId} already has a top-up waiting for approval; approve or decline that one first` });
    }
    this.gateway.log.info({ topupId: row.id, agentId: row.agent_id, amountUsdCents: row.amount_usd_cents, provider: row.provider, intentId: row.intent_id }, 'top-up requested');
    return toTopup(row);
  }

  /**
   * 409 conflict (`reason` pending_topups_limit) when the agent has PENDING_TOPUPS_PER_AGENT_MAX top-ups waiting.
   * The count that holds is taken under the agent's row lock, which every new top-up of the agent takes before
   * it counts and inserts (`record`, `openForIntent`): concurrent requests on any number of instances cannot
   * all take the last place. Unlocked, it is only the early answer before the rail is called, so a refused
   * request opens nothing at the provider.
   */
  private async refuseAtPendingLimit(db: Queryable, agentId: string): Promise<void> {
    const pending = await store.countPendingTopups(db, agentId, this.gateway.clock.nowS());
    if (pending < PENDING_TOPUPS_PER_AGENT_MAX) return;
    throw new ApiError('conflict', {
      detail:
        `agent ${agentId} already has ${pending} top-ups waiting for its owner, and at most ${PENDING_TOPUPS_PER_AGENT_MAX} may wait at once; ` +
        'another can be requested once the owner approves or declines one, or one expires',
      extra: { reason: 'pending_topups_limit', pendingTopupsMax: PENDING_TOPUPS_PER_AGENT_MAX },
    });
  }

  /** A retained intent's automatic top-up is opened only while the intent waits and its agent is not frozen. */
  private async refuseUnlessIntentWaits(db: Queryable, agentId: string, intentId: string): Promise<void> {
    if (await this.deps.intents().pending(db, intentId, agentId)) return;
    const agent = await this.deps.identity.agentRow(db, agentId);
    if (agent?.status === 'frozen') {
      throw new ApiError('FROZEN', { detail: `agent ${agentId} was frozen meanwhile: its retained intent ${intentId} is cancelled, and no top-up is asked for it`, extra: { reason: 'frozen' } });
    }
    throw new ApiError('conflict', { detail: `the retained intent ${intentId} no longer waits for credit (cancelled or resolved meanwhile): no top-up is asked for it` });
  }

  private async checkIntent(db: Queryable, intentId: string, agentId: string): Promise<void> {
    if (!(await this.deps.intents().pending(db, intentId, agentId))) {
      throw memberRefusal('intentId', `must name a pending retained intent of agent ${agentId}`);
    }
  }

  private async insert(tx: Tx, owner: { ownerId: string; requestedBy: string }, reason: string, { draft, opened }: { draft: TopupDraft; opened: OpenedApproval }) {
    const nowS = this.gateway.clock.nowS();
    return store.insertTopup(tx, {
      id: draft.id,
      agent_id: draft.agentId,
      owner_id: owner.ownerId,
      amount_usd_cents: draft.amountUsdCents,
      reason,
      intent_id: draft.intentId,
      provider: this.requireRail().module.kind,
      provider_ref: opened.providerRef,
      approval_url: opened.approvalUrl,
      checkout_url: opened.checkoutUrl,
      livemode: opened.livemode,
      status: 'pending_approval',
      requested_by: owner.requestedBy,
      created_at_s: BigInt(nowS),
      updated_at_s: BigInt(nowS),
      expires_at_s: BigInt(opened.expiresAtS),
    });
  }

  /** The purchase approver: a purchase above the approval threshold (purchases.ts), in `tx` when given. */
  requestPurchaseApproval(request: PurchaseApprovalRequest, tx?: Tx): Promise<PendingPurchase> {
    return this.purchases.request(request, tx);
  }

  /** The human approver of execute's insufficient-credit path: a top-up (outside any transaction: the rail may be called). */
  requestApproval(request: ApprovalRequest): Promise<PendingApproval> {
    return this.requestTopup(request);
  }

  /** The human's answers for purchases about to be held, in the hold's transaction: the lock now, the answers later (purchases.ts). */
  lockApprovals(tx: Tx, requests: readonly RequestKey[]): Promise<PurchaseAnswering> {
    return this.purchases.lockApprovals(tx, requests);
  }

  /** The approval of this request, when approved and open, read without a lock (purchases.ts). */
  standingApprovalFor(db: Queryable, binding: RequestBinding, agentId: string): Promise<PurchaseAnswer> {
    return this.purchases.standingApprovalFor(db, binding, agentId);
  }

  /** Marks purchase approvals used by their holds, in the holds' transaction (purchases.ts). */
  use(tx: Tx, uses: ReadonlyArray<{ approvalId: string; holdId: string }>): Promise<void> {
    return this.purchases.use(tx, uses);
  }

  reopenUsedBy(tx: Tx, holdId: string): Promise<void> {
    return this.purchases.reopenUsedBy(tx, holdId);
  }

  /**
   * The pending top-up of the retained intent, or a new one for AUTOMATIC_TOPUP_USD_CENTS (or the price, if
   * more). A retry of the execute request answers the same one, even when its agent has
   * PENDING_TOPUPS_PER_AGENT_MAX waiting; a new one then is refused (409 conflict, which execute answers).
   */
  private async requestTopup(request: ApprovalRequest): Promise<PendingApproval> {
    const { module } = this.requireRail();
    const { subject } = request;
    const row = (await store.findPendingForIntent(this.gateway.db, subject.id)) ?? (await this.openForIntent(request));
    const topup = toTopup(row);
    return {
      url: topup.approvalUrl,
      payment: { ...topup },
      paymentMethods: [
        { type: 'credits', status: 'insufficient' },
        { type: module.paymentMethod, status: 'pending_approval' },
      ],
      instructions:
        `Ask your owner to open ${topup.approvalUrl} and ${RAILS[row.provider].ownerAction} ($${dollars(topup.amountUsdCents)}). Once the top-up settles the ` +
        `gateway runs this request by itself, once; read its result with GET /v1/intents/${subject.id} (over MCP, the get_intent tool), or retry with ` +
        `${SAME_KEY}.`,
    };
  }

  /**
   * A new top-up of the retained intent. The limit is checked before the rail is called, then again under the
   * agent's lock with the insert; a concurrent retry of the same request that got there first is answered.
   */
  private async openForIntent(request: ApprovalRequest): Promise<store.TopupRow> {
    const { db } = this.gateway;
    const { rail } = this.requireRail();
    const { subject } = request;
    const agent = await this.deps.identity.agentRow(db, request.agentId);
    if (agent) refuseDelegate(agent);
    await this.refuseAtPendingLimit(db, request.agentId);
    const priceCents = Number((request.amountUc + UC_PER_USD_CENT - 1n) / UC_PER_USD_CENT);
    const amountUsdCents = Math.min(TOPUP_AMOUNT_USD_CENTS_MAX, Math.max(AUTOMATIC_TOPUP_USD_CENTS, priceCents));
    const { intent } = subject;
    // Why the amount is more than the price, said where the amount is chosen (found from outside: a 1-credit action
    // asked for $5.00, and the page did not say why).
    const more =
      amountUsdCents > priceCents
        ? ` The gateway asks for at least $${dollars(AUTOMATIC_TOPUP_USD_CENTS)} when credit is short, more than this price, so that one approval ` +
          'also funds the requests after it rather than one approval per request.'
        : '';
    const reason =
      `Agent ${intent.agentId} asked the gateway to run ${intent.serviceId} ${intent.action} (retained intent ${subject.id}, ` +
      `price ${formatUsd(request.amountUc)} USD) and its credit did not cover it.${more} Approving adds $${dollars(amountUsdCents)} of credit; ` +
      'the gateway then runs the intent once by itself.';
    const draft: TopupDraft = { id: newId('top'), agentId: request.agentId, amountUsdCents, intentId: subject.id };
    await this.refuseUnlessIntentWaits(db, request.agentId, subject.id);
    const opened = await rail.open(draft, this.gateway.clock.nowS());
    return db.transaction(async (tx) => {
      await this.deps.identity.lockAgent(tx, request.agentId);
      const existing = await store.findPendingForIntent(tx, subject.id);
      if (existing) return existing;
      // Again under the agent's lock, which a freeze takes to cancel the agent's intents and close their top-ups: a
      // freeze that committed since the intent was retained leaves it cancelled, and no top-up is opened for it after
      // (found from outside: a freeze racing an execute left a top-up the owner could pay for nothing).
      await this.refuseUnlessIntentWaits(tx, request.agentId, subject.id);
      await this.refuseAtPendingLimit(tx, request.agentId);
      const row = await this.insert(tx, { ownerId: request.ownerId, requestedBy: GATEWAY_REQUESTER }, reason, { draft, opened });
      // Every new top-up of the agent is inserted under its row lock, after that lookup: none of this intent can be there.
      if (!row) throw new Error(`intent ${subject.id} got a pending top-up under its agent's lock`);
      return row;
    });
  }

  /** The gateway's clock, in Unix seconds: what a read judges deadlines by. */
  nowS(): number {
    return this.gateway.clock.nowS();
  }

  /** A top-up for its agent and that agent's owner; anyone else gets 404 (ids cannot be probed). */
  async topupFor(db: Queryable, caller: Actor, topupId: string): Promise<store.TopupRow> {
    return this.readable(caller, await store.findTopup(db, topupId), topupId);
  }

  /**
   * Whose top-ups a caller lists: an agent its own (agentId optional), an owner one of its agents, which it
   * must name (400 invalid_input without it; the acting-for rule otherwise).
   */
  async listedAgentId(db: Queryable, caller: Actor, agentId: string | undefined): Promise<string> {
    const target = agentId ?? (caller.kind === 'agent' ? caller.agentId! : undefined);
    if (target === undefined) throw memberRefusal('agentId', 'is required with an owner credential');
    return (await this.deps.identity.actingAgent(db, caller, target)).id;
  }

  /** An agent's top-ups, oldest first, a page at a time. */
  async list(db: Queryable, agentId: string, page: Page): Promise<{ topups: Topup[]; hasMore: boolean }> {
    const { items, hasMore } = await store.listTopups(db, agentId, page.limit, page.startingAfter);
    const nowS = this.gateway.clock.nowS();
    return { topups: items.map((row) => toTopup(row, nowS)), hasMore };
  }

  /** Its agent and that agent's owner may read a top-up; anyone else gets 404 (ids cannot be probed). */
  private readable(caller: Actor, row: store.TopupRow | undefined, topupId: string): store.TopupRow {
    const allowed = row && actsFor(caller, { id: row.agent_id, owner_id: row.owner_id });
    if (!row || !allowed) throw new ApiError('not_found', { detail: `no top-up ${topupId}` });
    return row;
  }

  /** The owner approves on the local page: settles at once. Approving a settled top-up again answers it as it is. */
  async approve(tx: Tx, owner: Actor & Pick<Principal, 'id'>, topupId: string): Promise<Topup> {
    const row = this.readable(owner, await store.lockTopup(tx, topupId), topupId);
    const paidAt = RAILS[row.provider];
    if (paidAt.resolution !== 'owner_approval') throw new ApiError('conflict', { detail: `this top-up is paid at ${paidAt.title} (${row.checkout_url}), not approved here` });
    if (row.status === 'settled') return toTopup(row);
    this.assertPending(row);
    return toTopup(await this.settleLocked(tx, row, `owner:${owner.id}`));
  }

  /** Before declining, outside any transaction: the top-up as its owner sees it; pending, or declined already. */
  async declinable(owner: Actor, topupId: string): Promise<store.TopupRow> {
    const row = this.readable(owner, await store.findTopup(this.gateway.db, topupId), topupId);
    if (row.status !== 'declined') this.assertPending(row);
    return row;
  }

  /** Outside any transaction: the provider must refuse payment before we say declined (Stripe expires the session). */
  async cancelAtProvider(row: store.TopupRow): Promise<void> {
    if (row.status === 'pending_approval') await this.requireRail().rail.cancel(row.provider_ref);
  }

  /** The owner declines: the top-up closes and its intent is cancelled, nothing charged. Declining again answers it unchanged. */
  async decline(tx: Tx, topupId: string): Promise<Topup> {
    const row = (await store.lockTopup(tx, topupId))!;
    if (row.status === 'declined') return toTopup(row);
    this.assertPending(row);
    return toTopup(await this.closeLocked(tx, row, 'declined', null));
  }

  private assertPending(row: store.TopupRow): void {
    if (row.status !== 'pending_approval') throw new ApiError('conflict', { detail: `the top-up is ${row.status}; only a pending top-up can be approved or declined` });
    if (Number(row.expires_at_s) <= this.gateway.clock.nowS()) throw new ApiError('conflict', { detail: 'the top-up has expired; request a new one' });
  }

  /** Credits the lot and marks the top-up settled, in the caller's transaction, with the row locked and pending. */
  private async settleLocked(tx: Tx, row: store.TopupRow, settlementRef: string): Promise<store.TopupRow> {
    const lot = await this.deps.ledger.grant(tx, {
      agentId: row.agent_id,
      amountUc: BigInt(row.amount_usd_cents) * UC_PER_USD_CENT,
      source: 'topup',
      sourceRef: row.id,
    });
    const settled = await store.markSettled(tx, row.id, lot.id, settlementRef, this.gateway.clock.nowS());
    await this.emit(tx, settled);
    this.gateway.log.info({ topupId: row.id, agentId: row.agent_id, lotId: lot.id, amountUc: lot.grantedUc, intentId: row.intent_id, settlementRef }, 'top-up settled');
    return settled;
  }

  private async closeLocked(tx: Tx, row: store.TopupRow, status: 'declined' | 'expired' | 'failed', reference: string | null): Promise<store.TopupRow> {
    const closed = await store.markClosed(tx, row.id, status, reference, this.gateway.clock.nowS());
    await this.emit(tx, closed);
    if (row.intent_id && !(await store.intentStillFunded(tx, row.intent_id, row.id))) {
      await this.deps.intents().cancel(tx, row.intent_id, `topup_${status}`);
    }
    this.gateway.log.info({ topupId: row.id, agentId: row.agent_id, status, intentId: row.intent_id }, 'top-up closed without credit');
    return closed;
  }

  /** The kill switch's first lock (execute's IntentFunding): the pending top-ups of these agents' retained intents. */
  async lockFundingOf(tx: Tx, agentIds: readonly string[]): Promise<void> {
    await store.lockPendingIntentTopupsOf(tx, agentIds);
  }

  /**
   * Closes the top-ups still waiting for the owner's approval of intents a freeze or retirement just cancelled (in
   * its transaction, their rows locked by `lockFundingOf`), or that ran or failed for good without them (in the
   * execution's transaction; a row an approval holds is skipped, and its settlement stands): `expired`, with
   * `topup.expired`, as a top-up that nobody may approve any more. Not `declined`: the owner said nothing of this
   * top-up, and a rail's payment already under way (the owner at Stripe Checkout) must still credit, which `settle`
   * does for an expired top-up and refuses for a declined one. A settled top-up is not touched (its credit stays);
   * the intent's end stands whatever comes later.
   */
  async closeFundingOf(tx: Tx, intentIds: readonly string[], reason: IntentFundingEnd, atS?: number): Promise<number> {
    // At the time of what closed it (a freeze's), when given: one operation, one time.
    const nowS = atS ?? this.gateway.clock.nowS();
    const closed = await store.closePendingOfIntents(tx, intentIds, 'expired', nowS);
    await emitEvents(
      tx,
      closed.map((row) => ({ ownerId: row.owner_id, type: 'topup.expired' as const, data: { topup: toTopup(row) } })),
      this.gateway.clock.nowMs(),
    );
    for (const row of closed) {
      this.gateway.log.info({ topupId: row.id, agentId: row.agent_id, intentId: row.intent_id, reason }, reason.startsWith('agent_') ? 'top-up closed with its retained intent by the kill switch' : 'top-up closed: its retained intent ended without it');
    }
    return closed.length;
  }

  /** `topup.<final status>` to the owner's webhook, in the transaction that made the top-up final. */
  private async emit(tx: Tx, row: store.TopupRow): Promise<void> {
    if (row.status === 'pending_approval') throw new Error(`top-up ${row.id}: an event is emitted only for a final status`);
    await emitEvent(tx, { ownerId: row.owner_id, type: `topup.${row.status}`, data: { topup: toTopup(row) }, nowMs: this.gateway.clock.nowMs() });
  }

  /** Verifies and applies one delivery to the configured rail's notification endpoint. */
  async receiveNotification(rawBody: Buffer, signature: string | string[] | undefined): Promise<{ received: true; outcome: string }> {
    const notifications = this.notifications;
    if (!notifications) throw new ApiError('payment_unavailable', { detail: 'the configured payment rail takes no notifications' });
    return notifications.receive(rawBody, signature, this);
  }

  /**
   * A rail says the top-up is paid. Exactly once: the row lock orders concurrent notifications, and only a
   * pending top-up is credited, or one the gateway's own clock expired: the money was collected (a delayed
   * method clearing days later, a webhook Stripe retried after an outage), so it is credited late rather than
   * kept; its intent, cancelled at the expiry, stays cancelled. Anything else is acknowledged and changes nothing.
   */
  async settle(topupId: string, settlementRef: string, check: NotificationCheck = () => undefined): Promise<SettleOutcome> {
    const outcome = await this.gateway.db.transaction(async (tx): Promise<SettleOutcome> => {
      const row = await store.lockTopup(tx, topupId);
      if (!row) {
        // Money collected with no top-up to credit (found from outside: this left no trace at all).
        this.gateway.log.error({ topupId, settlementRef }, 'a paid notification names a top-up this gateway does not have; not credited: reconcile it with the provider');
        return 'unknown_topup';
      }
      const problem = check(factsOf(row));
      if (problem) {
        this.gateway.log.error({ topupId, settlementRef, problem }, 'a payment notification does not match its top-up; not credited');
        return 'mismatch';
      }
      if (row.status === 'settled') {
        this.gateway.log.debug({ topupId, settlementRef }, 'payment notification for a top-up already credited; nothing changed');
        return 'unchanged';
      }
      if (row.status !== 'pending_approval' && row.status !== 'expired') {
        this.gateway.log.error({ topupId, status: row.status, settlementRef }, 'payment notification for a top-up that is no longer pending; not credited');
        return 'not_pending';
      }
      if (row.status === 'expired') this.gateway.log.warn({ topupId, settlementRef }, 'payment collected for a top-up that had expired: credited late (its intent stays cancelled)');
      await this.settleLocked(tx, row, settlementRef);
      return 'settled' as const;
    });
    if (outcome === 'settled') this.resumeSoon(topupId);
    return outcome;
  }

  /** A rail (or the expiry job) says the top-up will not be paid. Only a pending top-up changes. */
  async close(topupId: string, status: 'expired' | 'failed', reference: string | null, check: NotificationCheck = () => undefined): Promise<'closed' | 'unchanged'> {
    return this.gateway.db.transaction(async (tx) => {
      const row = await store.lockTopup(tx, topupId);
      if (!row || row.status !== 'pending_approval' || check(factsOf(row)) !== undefined) return 'unchanged' as const;
      await this.closeLocked(tx, row, status, reference);
      return 'closed' as const;
    });
  }

  /** After the approve route's transaction committed: resume the intent it paid for. */
  resumeSoon(topupId: string): void {
    void this.resumeOne(topupId).catch((error: unknown) => this.gateway.log.error({ err: error, topupId }, 'resuming the intent of a settled top-up failed; the resume job retries'));
  }

  private async resumeOne(topupId: string): Promise<void> {
    const { db, clock } = this.gateway;
    const row = await store.findTopup(db, topupId);
    if (!row?.resume_due) return;
    const outcome = row.intent_id ? await this.deps.intents().resume(row.intent_id) : 'finished';
    if (outcome === 'finished') await store.finishResume(db, topupId, clock.nowS());
    else await store.postponeResume(db, topupId, clock.nowS(), outcome === 'busy', RESUME_BUSY_RETRY_S);
  }

  /** The job every instance runs, whatever the rail: close purchase approvals past their deadline. */
  expirePurchases(): Promise<void> {
    return this.purchases.expireDue();
  }

  /** The job every instance runs: expire stale top-ups, then resume the intents of settled ones. */
  async runJobs(): Promise<void> {
    const { db, clock } = this.gateway;
    for (const id of await store.expiredPendingIds(db, clock.nowS(), EXPIRY_BATCH_MAX)) await this.close(id, 'expired', null);
    for (const due of await store.dueResumes(db, clock.nowS(), RESUME_BATCH_MAX)) await this.resumeOne(due.id);
  }
}
