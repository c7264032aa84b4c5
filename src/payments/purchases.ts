// Purchase approvals: a purchase above the agent's mandate threshold waits for its owner's yes, on the same
// gateway page as top-ups (no money moves at approval: the agent's credit pays when the hold is taken, so no
// payment rail is needed). The payments service is the `PurchaseApprover` (platform/approvals.ts) through
// this part.
//
// An approval is bound to the request that asked: its Idempotency-Key as claimed (scope, operation, key), its
// fingerprint (the operation and its input: the offer, the service action and its input), the agent and the
// amount. Statuses (each change locks the row first, so the owner, the expiry job and the hold are ordered):
//   pending_approval → approved (the owner)  → used (the hold of its request's retry, in the hold's transaction)
//                                             | declined (the owner withdrew it) | expired (not used in time)
//   pending_approval → declined (the owner)  | expired (not answered in time)
//                    | used (its request's retry took the hold without it: the mandate no longer asks; no decision)
// Its deadline (`expires_at_s`) is the owner's until approval, then the retry's: PURCHASE_APPROVAL_LIFETIME_S
// each. Past it the approval reads as expired at once, and the next reader (the hold, a read, the job) closes it.
// Events to the owner, each in the transaction of its change: `purchase.approval_requested` (opened),
// `purchase.approved`, `purchase.declined` (`reason` `declined`, or `expired` when the owner never answered).
// Declining or expiring an execute's approval cancels its retained intent (nothing was charged).
import type { RefusalReason } from '../platform/reasons.ts';
import { emitEvent } from '../events/outbox.ts';
import type { EvidenceApproval } from '../ledger/evidence.ts';
import { actsFor, type Actor } from '../agents/acting.ts';
import type { AgentService, EffectiveStatus } from '../agents/service.ts';
import type {
  PendingPurchase,
  PurchaseAnswer,
  PurchaseAnswering,
  PurchaseApprovalRequest,
  PurchaseCheck,
  RequestBinding,
  RequestKey,
  ServiceIntent,
  VoucherIntent,
} from '../platform/approvals.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, formatUsd, UC_PER_USD_CENT } from '../platform/money.ts';
import type { Principal } from '../platform/principal.ts';
import type { Page } from '../platform/schemas.ts';
import { requesterOf, type TopupRequester } from './requester.ts';
import * as store from './store.ts';
import { NEW_KEY, SAME_KEY } from '../platform/idempotency.ts';

/** The kind of a purchase approval's id (`pur_…`), which the MCP face's get_intent also reads. */
export const PURCHASE_APPROVAL_ID_KIND = 'pur';

/** Whether `id` names a purchase approval (by its kind; whether one exists is the query's to say). */
export function isPurchaseApprovalId(id: string): boolean {
  return id.startsWith(`${PURCHASE_APPROVAL_ID_KIND}_`);
}

/** How long the owner has to answer, and then how long the approved request has to be retried: 15 minutes each. */
export const PURCHASE_APPROVAL_LIFETIME_S = 900;
const EXPIRY_BATCH_MAX = 100;

export type PurchaseStatus = store.PurchaseStatus;

/** A purchase approval as its agent and owner read it, and as its events carry it. */
export interface PurchaseApproval {
  id: string;
  agentId: string;
  status: PurchaseStatus;
  /** The operation of the request it belongs to: `mintVoucher`, `authorizeX402Payment` or `executeService`. */
  operation: string;
  amountUc: string;
  /** The merchant as it was when asked; null for a built-in service of the gateway (execute). */
  merchant: { id: string; name: string; domain: string } | null;
  /** The offer (or the built-in service's action) as it was when asked. */
  offer: { id: string; name: string };
  /**
   * What an x402 authorize pays for: the resource its attestation will be bound to (one offer may price many
   * routes, so the offer alone does not say it); null for a voucher mint or an execute.
   */
  resource: string | null;
  /** The retained purchase: this approval's id for a voucher mint, the retained intent for an execute (null once swept). */
  intentId: string | null;
  intent: VoucherIntent | ServiceIntent;
  approvalUrl: string;
  /** The hold its request took under it, once used. */
  holdId: string | null;
  createdAt: number;
  updatedAt: number;
  /** Until then the owner may answer (pending), or the request may be retried (approved). */
  expiresAt: number;
  decidedAt: number | null;
  usedAt: number | null;
}

/** One entry of the owner's list of approvals (GET /v1/owner/approvals). */
export interface OwnerApproval {
  kind: 'topup' | 'purchase';
  id: string;
  agentId: string;
  agentName: string;
  /** A delegate's parent (it registered and named the delegate); null for an agent the owner registered. */
  agentParent: { id: string; name: string } | null;
  /** The agent's effectiveStatus now: a frozen or retired agent's approved retry is still refused. */
  agentEffectiveStatus: EffectiveStatus;
  amountUc: string;
  merchant?: { id: string; name: string; domain: string };
  offer?: { id: string; name: string };
  /** What an x402 authorize pays for. */
  resource?: string;
  /** A top-up's reason, in the words of `requestedBy`. */
  reason?: string;
  /** Who asked for a top-up and wrote its reason. */
  requestedBy?: TopupRequester;
  status: string;
  approvalUrl: string;
  createdAt: number;
  expiresAt: number;
}

export interface PurchaseDependencies {
  identity: AgentService;
  /** Late-bound (execute is built with the payments service as its human approver): closes a retained intent. */
  intents: () => { cancel(tx: Queryable, intentId: string, reason: string): Promise<boolean> };
  lifetimeS: number;
}

/** The gateway page where the owner sees a purchase and approves or declines it. */
export function purchasePageUrl(baseUrl: string, approvalId: string): string {
  return `${baseUrl}/payments/purchases/${approvalId}`;
}

/** The resource of a retained x402 authorize (its intent's `resource`); null for any other purchase. */
function resourceOf(intent: VoucherIntent | ServiceIntent): string | null {
  return 'resource' in intent && typeof intent.resource === 'string' ? intent.resource : null;
}

function isOpen(status: PurchaseStatus): boolean {
  return status === 'pending_approval' || status === 'approved';
}

function merchantOf(row: { merchant_id: string | null; merchant_name: string | null; merchant_domain: string | null }): { id: string; name: string; domain: string } | null {
  if (row.merchant_id === null || row.merchant_domain === null) return null;
  return { id: row.merchant_id, name: row.merchant_name ?? row.merchant_domain, domain: row.merchant_domain };
}

/** The words of a refusal that closes a request for good (stored under its key): 409 conflict with a `reason`. */
function closed(reason: RefusalReason, detail: string, approval: PurchaseApproval): ApiError {
  return new ApiError('conflict', { detail: `${detail} Nothing was taken.`, extra: { reason, approvalId: approval.id, intentId: approval.intentId, purchase: approval } });
}

export class PurchaseApprovals {
  constructor(
    private readonly gateway: Gateway,
    private readonly deps: PurchaseDependencies,
  ) {}

  private nowS(): number {
    return this.gateway.clock.nowS();
  }

  /** An approval as its readers see it: open and past its deadline, it reads as expired. */
  view(row: store.PurchaseApprovalRow): PurchaseApproval {
    const overdue = isOpen(row.status) && Number(row.expires_at_s) <= this.nowS();
    const intent = row.intent as unknown as VoucherIntent | ServiceIntent;
    return {
      id: row.id,
      agentId: row.agent_id,
      status: overdue ? 'expired' : row.status,
      operation: row.operation,
      amountUc: formatUc(row.amount_uc),
      merchant: merchantOf(row),
      offer: { id: row.offer_id, name: row.offer_name },
      resource: resourceOf(intent),
      intentId: row.subject === 'voucher' ? row.id : row.intent_id,
      intent,
      approvalUrl: row.approval_url,
      holdId: row.hold_id,
      createdAt: Number(row.created_at_s),
      updatedAt: Number(row.updated_at_s),
      expiresAt: Number(row.expires_at_s),
      decidedAt: row.decided_at_s === null ? null : Number(row.decided_at_s),
      usedAt: row.used_at_s === null ? null : Number(row.used_at_s),
    };
  }

  /**
   * Opens the approval of a request, or finds the one it has: in `tx` when given (the mint's batch), else in a
   * transaction of its own. Opening emits `purchase.approval_requested`.
   */
  async request(request: PurchaseApprovalRequest, tx?: Tx): Promise<PendingPurchase> {
    const open = async (within: Tx) => (await store.findPurchaseApprovalFor(within, request.binding)) ?? (await this.insert(within, request));
    const row = tx ? await open(tx) : await this.gateway.db.transaction(open);
    return this.pending(row);
  }

  private async insert(tx: Tx, request: PurchaseApprovalRequest): Promise<store.PurchaseApprovalRow> {
    const nowS = this.nowS();
    const id = newId(PURCHASE_APPROVAL_ID_KIND);
    const { binding, subject } = request;
    const inserted = await store.insertPurchaseApproval(tx, {
      id,
      agent_id: request.agentId,
      owner_id: request.ownerId,
      operation: binding.operation,
      idem_scope: binding.scope,
      idem_key: binding.key,
      request_fingerprint: binding.fingerprint,
      subject: subject.type,
      intent: subject.intent as unknown as Record<string, unknown>,
      intent_id: subject.type === 'intent' ? subject.id : null,
      amount_uc: request.amountUc,
      merchant_id: request.merchant?.id ?? null,
      merchant_name: request.merchant?.name ?? null,
      merchant_domain: request.merchant?.domain ?? null,
      offer_id: request.offer.id,
      offer_name: request.offer.name,
      approval_url: purchasePageUrl(this.gateway.config.baseUrl, id),
      created_at_s: BigInt(nowS),
      expires_at_s: BigInt(nowS + this.deps.lifetimeS),
    });
    // Another instance opened it for the same request meanwhile (its key was claimed there first): that one.
    if (!inserted) return (await store.findPurchaseApprovalFor(tx, binding))!;
    await this.emit(tx, 'purchase.approval_requested', inserted);
    this.gateway.log.info({ approvalId: id, agentId: request.agentId, amountUc: formatUc(request.amountUc), operation: binding.operation }, 'purchase approval requested');
    return inserted;
  }

  /** What the asker tells its caller: the page, the record, and when to retry. */
  private pending(row: store.PurchaseApprovalRow): PendingPurchase {
    const approval = this.view(row);
    const minutes = Math.round(this.deps.lifetimeS / 60);
    const offered = approval.merchant ? `${approval.offer.name} from ${approval.merchant.name} (${approval.merchant.domain})` : approval.offer.name;
    const what = approval.resource === null ? offered : `${offered} for ${approval.resource}`;
    return {
      id: row.id,
      url: row.approval_url,
      payment: { ...approval },
      paymentMethods: [{ type: 'credits', status: 'pending_approval' }],
      instructions:
        `Ask your owner to open ${row.approval_url} and approve the purchase of ${what} for ${formatUsd(row.amount_uc)} USD ` +
        `(${formatUc(row.amount_uc)} µc) within ${minutes} minutes. Nothing was taken. Once approved, retry with ${SAME_KEY} ` +
        `within ${minutes} minutes; read GET /v1/payments/purchases/${row.id} (over MCP, the get_intent tool) for the owner's answer.`,
    };
  }

  /**
   * The owner's answers for these requests: their approvals locked now, until `tx` ends (one statement), the
   * answers once the purchases' prices are known. An approval past its deadline is closed then first (as the
   * job would). A request other than the one an approval was asked for (same key, other input or agent) cannot
   * use it: 409 idempotency_key_reused, stored under that key.
   */
  async lockApprovals(tx: Tx, requests: readonly RequestKey[]): Promise<PurchaseAnswering> {
    const rows = await store.lockPurchaseApprovalsFor(tx, requests);
    const byRequest = new Map(rows.map((row) => [`${row.idem_scope}\n${row.operation}\n${row.idem_key}`, row]));
    return async (checks) => {
      const answers: PurchaseAnswer[] = [];
      for (const check of checks) {
        let row = byRequest.get(`${check.scope}\n${check.operation}\n${check.key}`);
        if (row && isOpen(row.status) && Number(row.expires_at_s) <= this.nowS()) row = await this.expireLocked(tx, row);
        answers.push(row ? this.answer(row, check) : { state: 'none' });
      }
      return answers;
    };
  }

  /** The approval of this request, read without a lock, when it is approved or still waiting, before its deadline (to word a refusal). */
  async standingApprovalFor(db: Queryable, binding: RequestBinding, agentId: string): Promise<PurchaseAnswer> {
    const row = await store.findPurchaseApprovalFor(db, binding);
    if (!row || Number(row.expires_at_s) <= this.nowS()) return { state: 'none' };
    // The hold's own rule (same request, same agent, approved), at the price the owner approved.
    const answer = this.answer(row, { ...binding, agentId, amountUc: row.amount_uc });
    return answer.state === 'closed' ? { state: 'none' } : answer;
  }

  private answer(row: store.PurchaseApprovalRow, check: PurchaseCheck): PurchaseAnswer {
    const approval = this.view(row);
    if (row.request_fingerprint !== check.fingerprint || row.agent_id !== check.agentId) {
      return {
        state: 'closed',
        error: new ApiError('idempotency_key_reused', {
          detail: `this idempotency key belongs to another request, whose purchase approval is ${row.id}; use ${NEW_KEY} for a new request. Nothing was taken.`,
          extra: { approvalId: row.id },
        }),
      };
    }
    switch (row.status) {
      case 'pending_approval':
        return { state: 'none', waitingId: row.id };
      case 'approved':
        if (row.amount_uc !== check.amountUc) {
          return { state: 'closed', error: closed('approval_amount_changed', `the owner approved ${formatUc(row.amount_uc)} µc, but the purchase now costs ${formatUc(check.amountUc)} µc; ask again with ${NEW_KEY}.`, approval) };
        }
        return { state: 'approved', approvalId: row.id, expiresAt: Number(row.expires_at_s) };
      case 'declined':
        return { state: 'closed', error: closed('purchase_declined', 'the owner declined this purchase.', approval) };
      case 'expired':
        // Which way it lapsed (found from outside: one the owner never answered was said to have expired before it was used).
        return {
          state: 'closed',
          error: closed(
            'approval_expired',
            row.decided_at_s === null
              ? `the owner did not answer the approval of this purchase before its deadline, so it expired unanswered; ask again with ${NEW_KEY}.`
              : `the owner approved this purchase, but the approval expired before a retry used it; ask again with ${NEW_KEY}.`,
            approval,
          ),
        };
      case 'used':
        return { state: 'closed', error: closed('approval_used', `the approval of this purchase was used already, by hold ${row.hold_id}.`, approval) };
    }
  }

  /**
   * Marks approvals used by the holds of their requests, in the holds' transaction; each was locked, and approved or
   * still waiting (a hold that passed without it, the mandate no longer asking: its request is answered for good, so
   * the owner is no longer asked, and it never expires into `purchase.declined`; `decidedAt` stays null).
   */
  async use(tx: Tx, uses: ReadonlyArray<{ approvalId: string; holdId: string }>): Promise<void> {
    const used = await store.markPurchasesUsed(tx, uses, this.nowS());
    if (used !== uses.length) throw new Error(`purchase approval invariant: ${used} of ${uses.length} approvals were approved when their holds used them`);
  }

  /** See `PurchaseApprover.reopenUsedBy`. */
  /** The owner's approval a hold was taken under, as its evidence states it (ledger/evidence.ts); null when it needed none. */
  async approvalOfHold(db: Queryable, holdId: string): Promise<EvidenceApproval | null> {
    const row = await store.findApprovalUsedBy(db, holdId);
    if (!row || row.decided_by === null || row.decided_at_s === null) return null;
    return {
      id: row.id,
      requestedAt: Number(row.created_at_s),
      approvedAt: Number(row.decided_at_s),
      approvedBy: row.decided_by,
      amountUc: formatUc(row.amount_uc),
      offerId: row.offer_id,
    };
  }

  async reopenUsedBy(tx: Tx, holdId: string): Promise<void> {
    await store.reopenPurchaseUsedBy(tx, holdId, this.nowS());
  }

  /** An approval for its agent and that agent's owner; anyone else gets 404 (ids cannot be probed). */
  async approvalFor(db: Queryable, caller: Actor, approvalId: string): Promise<store.PurchaseApprovalRow> {
    const row = await store.findPurchaseApproval(db, approvalId);
    if (!row || !actsFor(caller, { id: row.agent_id, owner_id: row.owner_id })) throw new ApiError('not_found', { detail: `no purchase approval ${approvalId}` });
    return row;
  }

  /**
   * The owner approves: the request's retry may take the hold for the next lifetime. Approving an approved
   * purchase again answers it unchanged; a declined, expired or used one, or one past its deadline, is 409.
   */
  async approve(tx: Tx, owner: Actor & Pick<Principal, 'id'>, approvalId: string): Promise<PurchaseApproval> {
    const row = await this.lockedFor(tx, owner, approvalId);
    if (row.status === 'approved') return this.view(row);
    this.assertOpen(row, 'approved');
    await this.assertAgentMaySpend(tx, row.agent_id);
    const nowS = this.nowS();
    const approved = await store.markPurchaseDecided(tx, row.id, 'approved', `owner:${owner.id}`, nowS + this.deps.lifetimeS, nowS);
    await this.emit(tx, 'purchase.approved', approved);
    this.gateway.log.info({ approvalId, agentId: row.agent_id }, 'purchase approved');
    return this.view(approved);
  }

  /**
   * The owner declines (or withdraws an approval not used yet): the request's retry gets a final refusal, and an
   * execute's retained intent is cancelled. Declining again answers it unchanged.
   */
  async decline(tx: Tx, owner: Actor & Pick<Principal, 'id'>, approvalId: string): Promise<PurchaseApproval> {
    const row = await this.lockedFor(tx, owner, approvalId);
    if (row.status === 'declined') return this.view(row);
    this.assertOpen(row, 'declined');
    const declined = await store.markPurchaseDecided(tx, row.id, 'declined', `owner:${owner.id}`, Number(row.expires_at_s), this.nowS());
    await this.emit(tx, 'purchase.declined', declined, 'declined');
    await this.cancelIntent(tx, declined, 'purchase_declined');
    this.gateway.log.info({ approvalId, agentId: row.agent_id }, 'purchase declined');
    return this.view(declined);
  }

  /**
   * An approval is only worth giving to an agent that may spend: a frozen or retired agent (or one below a frozen
   * or retired ancestor) would be refused FROZEN at its retry, and that answer would be kept under the request's
   * key, so the approved purchase could never run. 409, the approval left pending: unfreeze first, or decline.
   */
  private async assertAgentMaySpend(db: Queryable, agentId: string): Promise<void> {
    const agent = await this.deps.identity.agentRow(db, agentId);
    if (!agent) return;
    const chain = [agent, ...(await this.deps.identity.agentRows(db, agent.ancestor_ids))];
    const stopped = chain.find((member) => member.status !== 'active' || member.retired_at_s !== null);
    if (!stopped) return;
    const state = stopped.retired_at_s !== null ? 'retired' : 'frozen';
    const whose = stopped.id === agentId ? `agent ${agentId} is ${state}` : `agent ${agentId}'s ancestor ${stopped.id} is ${state}`;
    throw new ApiError('conflict', {
      detail: `${whose}: its retry would be refused, so the purchase is not approved${state === 'frozen' ? ' (unfreeze it first, or decline)' : ' (decline it)'}`,
      extra: { reason: `agent_${state}`, agentId: stopped.id },
    });
  }

  private async lockedFor(tx: Tx, owner: Actor, approvalId: string): Promise<store.PurchaseApprovalRow> {
    const row = await store.lockPurchaseApproval(tx, approvalId);
    if (!row || !actsFor(owner, { id: row.agent_id, owner_id: row.owner_id })) throw new ApiError('not_found', { detail: `no purchase approval ${approvalId}` });
    return row;
  }

  /**
   * An owner's answer to an approval that is no longer open: 409 with the `reason` the agent's retry gives for the
   * same state (found from outside: the owner's refusal had none), and which way an expired one lapsed.
   */
  private assertOpen(row: store.PurchaseApprovalRow, wanted: 'approved' | 'declined'): void {
    const approval = this.view(row);
    if (isOpen(approval.status)) return;
    switch (approval.status) {
      case 'expired':
        throw closed(
          'approval_expired',
          row.decided_at_s === null
            ? `the purchase approval expired unanswered, so it can no longer be ${wanted}; the agent must ask again.`
            : `the purchase approval expired before a retry used it, so it can no longer be ${wanted}; the agent must ask again.`,
          approval,
        );
      case 'declined':
        throw closed('purchase_declined', `the purchase approval is declined; it can no longer be ${wanted}.`, approval);
      default:
        throw closed('approval_used', `the purchase approval was used already, by hold ${row.hold_id}; it can no longer be ${wanted}.`, approval);
    }
  }

  /**
   * Expiry-on-read of one approval (a read, the job): closes it in a transaction of its own when it is open
   * and past its deadline; nothing otherwise.
   */
  async settle(approvalId: string): Promise<void> {
    await this.gateway.db.transaction(async (tx) => {
      const row = await store.lockPurchaseApproval(tx, approvalId);
      if (row && isOpen(row.status) && Number(row.expires_at_s) <= this.nowS()) await this.expireLocked(tx, row);
    });
  }

  /**
   * Marks a locked, open, overdue approval expired: the owner hears `purchase.declined` (`reason: expired`)
   * when they never answered (an approval they gave and the agent did not use lapses quietly), and an
   * execute's retained intent is cancelled.
   */
  private async expireLocked(tx: Tx, row: store.PurchaseApprovalRow): Promise<store.PurchaseApprovalRow> {
    const expired = await store.markPurchaseExpired(tx, row.id, this.nowS());
    if (row.status === 'pending_approval') await this.emit(tx, 'purchase.declined', expired, 'expired');
    await this.cancelIntent(tx, expired, 'purchase_expired');
    this.gateway.log.info({ approvalId: row.id, agentId: row.agent_id, was: row.status }, 'purchase approval expired');
    return expired;
  }

  private async cancelIntent(tx: Tx, row: store.PurchaseApprovalRow, reason: 'purchase_declined' | 'purchase_expired'): Promise<void> {
    if (row.intent_id) await this.deps.intents().cancel(tx, row.intent_id, reason);
  }

  /** The job every instance runs: close approvals past their deadline. */
  async expireDue(): Promise<void> {
    for (const id of await store.overduePurchaseIds(this.gateway.db, this.nowS(), EXPIRY_BATCH_MAX)) await this.settle(id);
  }

  /** What waits for the owner (or everything), oldest first, a page at a time: top-ups and purchases, with the agents' names. */
  async ownerApprovals(db: Queryable, ownerId: string, shown: store.ApprovalsShown, page: Page): Promise<{ approvals: OwnerApproval[]; hasMore: boolean }> {
    const { items, hasMore } = await store.listOwnerApprovals(db, { ownerId, shown, nowS: this.nowS(), ucPerUsdCent: UC_PER_USD_CENT, limit: page.limit, startingAfter: page.startingAfter });
    const agents = new Map((await this.deps.identity.shownAgents(db, [...new Set(items.map((item) => item.agent_id))])).map((agent) => [agent.id, agent]));
    // A delegate names itself as it likes (another agent's name too): its parent is shown beside it (found from outside).
    const parentIds = [...new Set([...agents.values()].flatMap((agent) => (agent.parentId === null ? [] : [agent.parentId])))];
    const parents = new Map(parentIds.length === 0 ? [] : (await this.deps.identity.shownAgents(db, parentIds)).map((agent) => [agent.id, agent]));
    const parentOf = (agentId: string) => {
      const parent = parents.get(agents.get(agentId)?.parentId ?? '');
      return parent ? { id: parent.id, name: parent.name } : null;
    };
    const approvals = items.map((item): OwnerApproval => {
      const merchant = merchantOf(item);
      return {
        kind: item.kind,
        id: item.id,
        agentId: item.agent_id,
        agentName: agents.get(item.agent_id)?.name ?? '',
        agentParent: parentOf(item.agent_id),
        agentEffectiveStatus: agents.get(item.agent_id)?.effectiveStatus ?? 'active',
        amountUc: formatUc(item.amount_uc),
        ...(merchant ? { merchant } : {}),
        ...(item.offer_id !== null && item.offer_name !== null ? { offer: { id: item.offer_id, name: item.offer_name } } : {}),
        ...(item.resource !== null ? { resource: item.resource } : {}),
        ...(item.reason !== null ? { reason: item.reason } : {}),
        ...(item.requested_by !== null ? { requestedBy: requesterOf(item.requested_by) } : {}),
        status: item.status,
        approvalUrl: item.approval_url,
        createdAt: Number(item.created_at_s),
        expiresAt: Number(item.expires_at_s),
      };
    });
    return { approvals, hasMore };
  }

  /** `purchase.approval_requested | approved | declined` to the owner's webhook, in the transaction of the change. */
  private async emit(tx: Tx, type: 'purchase.approval_requested' | 'purchase.approved' | 'purchase.declined', row: store.PurchaseApprovalRow, reason?: 'declined' | 'expired'): Promise<void> {
    const data = reason === undefined ? { purchase: this.view(row) } : { purchase: this.view(row), reason };
    await emitEvent(tx, { ownerId: row.owner_id, type, data, nowMs: this.gateway.clock.nowMs() });
  }
}
