// Minting a voucher: one transaction takes the hold for an offer and signs an ES256 voucher JWT bound to
// the offer and the hold (`jti` = hold id, `aud` = the merchant, `exp` = the hold's deadline). Merchants
// verify it offline against the gateway's JWKS. The same mint sells an offer over x402 (src/x402/): the
// request then names the price (at most the offer's), the merchant it means to pay and the longest the hold
// may live, and brings its own signer (the attestation instead of the voucher).
//
// A price above the agent's mandate approval threshold waits for its owner: the mint opens a purchase approval
// of its request (the human approver, platform/approvals.ts) and answers 402 approval_required with its page,
// taking nothing (not stored: the key is given back). The retry with the same Idempotency-Key reads the owner's
// answer in its batch's transaction: approved, the hold is taken and the approval used there, once (its answer
// is stored under the key, so a further retry replays the voucher); declined, expired, used or bound to
// another request, the refusal is that request's answer, stored.
import type { AgentService } from '../agents/service.ts';
import type { Holders, LedgerService, Redemption } from '../ledger/service.ts';
import { approvalUsedBy, purchaseApproval, refusalOfAnswered, type PurchaseAnswer, type PurchaseAnswering, type PurchaseApprovalRequest, type PurchaseApprover, type RequestBinding, type VoucherIntent } from '../platform/approvals.ts';
import type { OfferService, SellableOfferRow } from '../offers/service.ts';
import type { Settled } from '../platform/batcher.ts';
import type { Tx } from '../platform/db/database.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { formatUc, parseUc, type Microcredits } from '../platform/money.ts';
import type { SpanRef } from '../platform/telemetry.ts';
import { SAME_KEY } from '../platform/idempotency.ts';

export const VOUCHER_TYP = 'voucher+jwt';

export interface MintResult {
  /** What the hold was bought with, as issued: the voucher, or the request's own credential (x402's attestation). */
  voucher: string;
  redemption: Redemption;
}

/** A sale whose hold is decided: what the credential it is bought with names. */
export interface Sale {
  agentId: string;
  offer: SellableOfferRow;
  redemption: Redemption;
  /** The hash of the agent's mandate in force at the hold (null: none). */
  mandateHash: string | null;
}

/** What a mint batch reads first (`VoucherService.readAhead`). */
export interface MintReads {
  offers: Map<string, SellableOfferRow>;
  answering: PurchaseAnswering;
  holders: Holders;
}

/** Signs what a hold is bought with, once the hold is decided and before it is written (the hold keeps it as issued). */
export type CredentialSigner = (sale: Sale) => Promise<string>;

export interface MintRequest {
  agentId: string;
  offerId: string;
  maxUc?: Microcredits;
  /** The price to hold, at most the offer's (x402: the server's requirements, its authorize's `amount`); default the offer's price. */
  amountUc?: Microcredits;
  /** The merchant the buyer means to pay (x402's `payTo`): an offer of another merchant is refused. */
  merchantId?: string;
  /** What the hold pays for (x402's `resource`): a purchase approval shows it to the owner. */
  resource?: string;
  /** The longest the hold may live (x402: no longer than its key is kept); default the offer's hold lifetime. */
  lifetimeSMax?: number;
  /** The request as its Idempotency-Key names it: what a purchase approval is bound to (absent: none can be asked). */
  binding?: RequestBinding;
  /** Signs what the hold is bought with; default the voucher. */
  signer?: CredentialSigner;
  /** The call's span, when tracing: handed to its hold (its mandate decision, its event's trace). */
  trace?: SpanRef;
}

/** The agent's ceiling as sent: `maxUc`, or `maxAmount`, its older name. */
export interface MintLimits {
  maxUc?: string;
  maxAmount?: string;
}

export interface VoucherDependencies {
  ledger: LedgerService;
  offers: OfferService;
  /** The agents, whose owner is asked to approve a purchase above the threshold. */
  identity: AgentService;
  /** The owner's yes for a purchase above the agent's approval threshold. */
  purchases: PurchaseApprover;
}

export class VoucherService {
  private readonly ledger: LedgerService;
  private readonly offers: OfferService;
  private readonly purchases: PurchaseApprover;

  constructor(
    private readonly gateway: Gateway,
    private readonly deps: VoucherDependencies,
  ) {
    this.ledger = deps.ledger;
    this.offers = deps.offers;
    this.purchases = deps.purchases;
  }

  /**
   * The rules a mint checks before its Idempotency-Key is claimed (a refusal here is as if never sent):
   * `maxUc` and `maxAmount` are one limit, and a voucher needs a signing key. Returns the ceiling.
   */
  checkMint(limits: MintLimits): Microcredits | undefined {
    if (limits.maxUc !== undefined && limits.maxAmount !== undefined && parseUc(limits.maxUc, 'maxUc') !== parseUc(limits.maxAmount, 'maxAmount')) {
      throw memberRefusal('maxAmount', `(${limits.maxAmount}) differs from maxUc (${limits.maxUc}), the same limit under its newer name; send one, or equal values`);
    }
    if (!this.gateway.signing.configured) throw this.gateway.signing.unconfigured();
    const max = limits.maxUc ?? limits.maxAmount;
    return max === undefined ? undefined : parseUc(max);
  }

  /**
   * Mints many vouchers in one pass (group commit), each answered as if minted one by one in this order:
   * one statement reads the offers, one reads (and locks) the owner's answers for the purchases of these
   * requests, one locks the agents' rows (the three sent together), LedgerService.holdMany takes every hold (an approved purchase passes the approval threshold),
   * signing each voucher once the hold is decided and before it is written (the hold keeps the voucher as
   * issued, for its evidence); then the approvals used are marked, and a purchase still to approve is asked.
   */
  async mintMany(tx: Tx, requests: readonly MintRequest[], read?: MintReads): Promise<Array<Settled<MintResult>>> {
    const { offers, answering, holders } = read ?? (await this.readAhead(tx, requests));
    const outcomes: Array<Settled<MintResult> | undefined> = requests.map((request) => {
      const offer = offers.get(request.offerId);
      if (!offer || (request.merchantId !== undefined && offer.merchant_id !== request.merchantId)) {
        const seller = request.merchantId === undefined ? 'a verified merchant' : `merchant ${request.merchantId} (an offer sells once its merchant's domain is verified)`;
        return { ok: false, error: memberRefusal('offerId', `"${request.offerId}" names no active offer of ${seller}`) };
      }
      if (request.amountUc !== undefined && request.amountUc > offer.price_uc) {
        // Only x402's authorize names the price, as its `amount`.
        return { ok: false, error: memberRefusal('amount', `(${request.amountUc} µc) is more than the offer's price of ${offer.price_uc} µc, the most it sells for`) };
      }
      const priceUc = priceOf(request, offer);
      if (request.maxUc !== undefined && priceUc > request.maxUc) {
        // A frozen agent (or one below a frozen ancestor) is told that first, as the hold's policy would: its own
        // ceiling is not what stops it.
        const frozen = this.deps.identity.frozenRefusalOf(request.agentId, holders.covering([request.agentId]));
        return { ok: false, error: frozen ?? new ApiError('CAP_EXCEEDED', { detail: `the offer costs ${priceUc} µc, more than your maxUc of ${request.maxUc} µc`, extra: { reason: 'max_uc' } }) };
      }
      return undefined;
    });
    const answers = await this.answersOf(answering, requests.map((request) => ({ request, offer: offers.get(request.offerId) })));
    for (const [index, answer] of answers.entries()) {
      if (answer.state !== 'closed') continue;
      // A key that names another request's purchase approval refuses this request before anything of its own, so
      // that no refusal of this request is stored under the key, which would take it from the approved request.
      if (!outcomes[index] || answer.error.code === 'idempotency_key_reused') outcomes[index] = { ok: false, error: answer.error };
    }
    const holding = requests.flatMap((request, index) => (outcomes[index] ? [] : [{ index, request, offer: offers.get(request.offerId)!, answer: answers[index]! }]));
    const vouchers = new Map<number, string>();
    const holds = await this.ledger.holdMany(
      tx,
      holding.map(({ index, request, offer, answer }) => ({
        agentId: request.agentId,
        acceptorId: offer.merchant_id,
        merchantId: offer.merchant_id,
        merchant: { id: offer.merchant_id, domain: offer.merchant_domain },
        offerId: offer.id,
        category: offer.category,
        amountUc: priceOf(request, offer),
        lifetimeS: Math.min(offer.hold_lifetime_s, request.lifetimeSMax ?? offer.hold_lifetime_s),
        refundWindowS: offer.refund_window_s,
        offerSnapshot: offerAsSold(offer),
        approved: answer.state === 'approved',
        trace: request.trace,
        sign: async (redemption, mandate) => {
          const sign = request.signer ?? ((sale: Sale) => this.signVoucher(sale));
          const credential = await sign({ agentId: request.agentId, offer, redemption, mandateHash: mandate.hash });
          vouchers.set(index, credential);
          return credential;
        },
      })),
      holders,
    );
    const uses: Array<{ approvalId: string; holdId: string }> = [];
    const refused: Array<{ index: number; request: MintRequest; offer: SellableOfferRow; error: unknown }> = [];
    for (const [position, { index, request, offer, answer }] of holding.entries()) {
      const held = holds[position]!;
      if (held.ok) {
        outcomes[index] = { ok: true, value: { voucher: vouchers.get(index)!, redemption: held.value } };
        const approvalId = approvalUsedBy(answer);
        if (approvalId !== undefined) uses.push({ approvalId, holdId: held.value.id });
      } else {
        refused.push({ index, request, offer, error: refusalOfAnswered(answer, held.error) });
      }
    }
    // An approval opened here takes its owner's approval number under a lock held to the end of the transaction
    // (migrations 0043, 0044): opened in owner order, two batches that open approvals of the same owners never wait on each other.
    const agents = holders.covering(refused.map(({ request }) => request.agentId));
    const ownerOf = (agentId: string) => agents.get(agentId)?.owner_id ?? '';
    refused.sort((a, b) => (ownerOf(a.request.agentId) < ownerOf(b.request.agentId) ? -1 : ownerOf(a.request.agentId) > ownerOf(b.request.agentId) ? 1 : 0));
    for (const { index, request, offer, error } of refused) outcomes[index] = await this.asked(tx, request, offer, error);
    await this.purchases.use(tx, uses);
    return outcomes as Array<Settled<MintResult>>;
  }

  /**
   * What a mint batch reads and locks before anything is decided, in reads that need nothing of one another,
   * sent together (one round trip on PostgreSQL; the group-commit runner sends them with the claims), the locks
   * in the order every hold takes them: the offers, the purchase approvals of these requests, the agents' rows
   * and their lots. For a superset of the requests `mintMany` then takes (the calls whose keys were claimed).
   */
  async readAhead(tx: Tx, requests: readonly MintRequest[]): Promise<MintReads> {
    const [offers, answering, holders] = await Promise.all([
      this.offers.sellableMany(tx, requests.map((request) => request.offerId)),
      this.purchases.lockApprovals(tx, requests.flatMap((request) => (request.binding ? [request.binding] : []))),
      this.ledger.lockHolders(tx, requests.map((request) => request.agentId)),
    ]);
    return { offers, answering, holders };
  }

  /**
   * The owner's answers for these purchases (none for a request without a binding). A request without a sellable
   * offer is refused for that, unless its key is another request's, which the answer says whatever the amount.
   */
  private async answersOf(answering: PurchaseAnswering, requests: ReadonlyArray<{ request: MintRequest; offer: SellableOfferRow | undefined }>): Promise<PurchaseAnswer[]> {
    const bound = requests.filter(({ request }) => request.binding !== undefined);
    const answers = await answering(
      bound.map(({ request, offer }) => ({ ...request.binding!, agentId: request.agentId, amountUc: offer ? priceOf(request, offer) : 0n })),
    );
    let position = 0;
    return requests.map(({ request }) => (request.binding === undefined ? { state: 'none' } : answers[position++]!));
  }

  /**
   * A refused hold's answer. The approval threshold's refusal opens (or finds) the purchase approval of this
   * request, in this transaction, and answers with its page: the runner gives the key back, so the retry runs
   * again once the owner answered.
   */
  private async asked(tx: Tx, request: MintRequest, offer: SellableOfferRow, error: unknown): Promise<Settled<MintResult>> {
    if (!(error instanceof ApiError) || error.code !== 'approval_required' || request.binding === undefined) return { ok: false, error };
    const agent = await this.deps.identity.agentRow(tx, request.agentId);
    if (!agent) throw new Error(`agent ${request.agentId} held by the policy has no row`);
    const intent: VoucherIntent = {
      offerId: offer.id,
      agentId: request.agentId,
      ...(request.maxUc === undefined ? {} : { maxUc: formatUc(request.maxUc) }),
      ...(request.amountUc === undefined ? {} : { amountUc: formatUc(request.amountUc) }),
      ...(request.resource === undefined ? {} : { resource: request.resource }),
    };
    const purchase: PurchaseApprovalRequest = {
      agentId: request.agentId,
      ownerId: agent.owner_id,
      amountUc: priceOf(request, offer),
      subject: { type: 'voucher', intent },
      binding: request.binding,
      merchant: { id: offer.merchant_id, name: offer.merchant_name, domain: offer.merchant_domain },
      offer: { id: offer.id, name: offer.name },
    };
    const pending = await this.purchases.requestPurchaseApproval(purchase, tx);
    const approval = purchaseApproval(pending);
    return {
      ok: false,
      error: new ApiError('approval_required', {
        detail: `${error.options.detail}. Nothing was taken; once the owner approved, retry with ${SAME_KEY} and the retry takes the hold.`,
        approval,
        extra: { ...error.options.extra, intentId: approval.id, intent, purchase: pending.payment, instructions: pending.instructions },
      }),
    };
  }

  /** The voucher of a hold: an ES256 JWT bound to the offer, the hold (`jti`) and the mandate in force (`mandate`). */
  private signVoucher({ agentId, offer, redemption, mandateHash }: Sale): Promise<string> {
    return this.gateway.signing.sign(
      {
        iss: this.gateway.config.baseUrl,
        aud: offer.merchant_id,
        sub: agentId,
        jti: redemption.id,
        iat: redemption.createdAt,
        exp: redemption.expiresAt,
        offer_id: offer.id,
        category: offer.category,
        amount_uc: formatUc(offer.price_uc),
        ...(mandateHash === null ? {} : { mandate: mandateHash }),
      },
      VOUCHER_TYP,
    );
  }
}

/** What the hold takes: the price the request names (never more than the offer's, checked first), or the offer's. */
function priceOf(request: MintRequest, offer: SellableOfferRow): Microcredits {
  return request.amountUc ?? offer.price_uc;
}

/** The offer as it is sold now: what a hold's evidence shows, whatever the offer becomes later. */
function offerAsSold(offer: SellableOfferRow): Record<string, unknown> {
  return {
    id: offer.id,
    merchantId: offer.merchant_id,
    merchantDomain: offer.merchant_domain,
    name: offer.name,
    category: offer.category,
    priceUc: formatUc(offer.price_uc),
    holdLifetimeS: offer.hold_lifetime_s,
    refundWindowS: offer.refund_window_s,
    updatedAt: Number(offer.updated_at_s),
  };
}
