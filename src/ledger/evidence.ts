// Evidence for a dispute: one compact ES256 JWS (typ evidence+jwt) from the gateway's signing key that
// ties together what the owner authorised, what was sold, what it was bought with, what was settled and
// what happened to the money, so that a third party with the JWKS can check a purchase against its rules:
//   mandate     the mandate version in force at the hold: its canonical JSON (RFC 8785) and its hash, the
//               `mandate` claim of the voucher and of every receipt;
//   ancestorMandates  for a delegate's hold, each ancestor's mandate version in force at the hold (they bound it
//               too), root first; [] for a root's hold;
//   approval    the owner's approval of a purchase above the mandate's `approvalAboveUc` (null when it needed none);
//   offer       the offer as it was sold (for an execution, the built-in service and action);
//   voucher     the voucher as issued, or an x402 payment's attestation (null for an execution, which has none);
//   receipts    every signed receipt, in order: the capture's, then each refund's;
//   history     the hold's movements from its journal entries (durable, never purged): held, captured,
//               released, expired, refunded, each with its time and amount;
//   redemption  the Redemption as it stands.
// Everything is read in one snapshot (a read-only REPEATABLE READ transaction), so the parts agree with
// each other even while a capture or a refund commits. See docs/decisions.md "Evidence for a dispute".
import type { AgentService } from '../agents/service.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { formatUc } from '../platform/money.ts';
import type { Principal } from '../platform/principal.ts';
import type { JournalKind } from './journal.ts';
import type { LedgerService, Redemption } from './service.ts';
import * as store from './store.ts';

export const EVIDENCE_TYP = 'evidence+jwt';

/** The mandate version a hold was taken under, as kept: the hash is the SHA-256 of `canonical`, base64url. */
export interface EvidenceMandate {
  version: number;
  hash: string;
  canonical: string;
}

export type HistoryEvent = 'held' | 'captured' | 'released' | 'expired' | 'refunded';

/** One journal operation of the hold, as a movement of its money. */
export interface HistoryEntry {
  event: HistoryEvent;
  /** When it was journaled (Unix seconds); an expiry's is when its credit was reclaimed, at or after expiresAt. */
  at: number;
  /** What moved: held, captured, given back to the agent (release, expiry), or refunded. */
  amountUc: string;
  /** For a capture: what went back to the agent in the same operation (the uncaptured rest). */
  releasedUc?: string;
  /** The journal operation: the hold id, `<hold>:capture|release|expire`, or the refund id. */
  operationId: string;
}

/** An ancestor's mandate version a delegate's hold was taken under, as kept. */
export interface EvidenceAncestorMandate extends EvidenceMandate {
  agentId: string;
}

/** The owner's approval a hold above the mandate's approval threshold was taken under. */
export interface EvidenceApproval {
  /** The purchase approval (`pur_…`). */
  id: string;
  /** When the agent's purchase asked for it (Unix seconds). */
  requestedAt: number;
  /** When the owner approved it (Unix seconds). */
  approvedAt: number;
  /** The owner who approved it. */
  approvedBy: string;
  /** The amount the owner approved. */
  amountUc: string;
  /** The offer (or, for an execution, the service) the owner approved. */
  offerId: string;
}

/** Who keeps the owners' purchase approvals (payments, PurchaseApprovals): the one a hold used, in the caller's snapshot. */
export interface HoldApprovals {
  approvalOfHold(db: Queryable, holdId: string): Promise<EvidenceApproval | null>;
}

/** The evidence's claims (the JWS payload). */
export interface EvidenceClaims {
  iss: string;
  iat: number;
  jti: string;
  /** The redemption (hold) id. */
  sub: string;
  /** Null only for a hold taken before mandates existed. */
  mandate: EvidenceMandate | null;
  /** Root first; [] for a root's hold; null for a delegate's hold taken before they were recorded. */
  ancestorMandates: EvidenceAncestorMandate[] | null;
  /** The owner's approval the hold was taken under; null when the purchase needed none (at or below the threshold). */
  approval: EvidenceApproval | null;
  offer: Record<string, unknown> | null;
  voucher: string | null;
  receipts: string[];
  history: HistoryEntry[];
  redemption: Redemption;
}

const EVENT_OF: Record<JournalKind, HistoryEvent | undefined> = {
  grant: undefined,
  hold: 'held',
  capture: 'captured',
  release: 'released',
  expire: 'expired',
  refund: 'refunded',
};


/**
 * The hold's history from its journal: one entry per operation, in the order written. Every operation of a
 * hold moves money into the hold (hold), out of it to the agent's lots (release, expiry, the rest of a
 * capture) or to the earnings account (capture), or from the earnings account to a new lot (refund).
 */
function historyOf(holdId: string, rows: readonly store.JournalRow[]): HistoryEntry[] {
  const operations = new Map<string, store.JournalRow[]>();
  for (const row of rows) {
    const lines = operations.get(row.operation_id);
    if (lines) lines.push(row);
    else operations.set(row.operation_id, [row]);
  }
  return [...operations].map(([operationId, lines]) => {
    const { kind, created_at_s: atS } = lines[0]!;
    const event = EVENT_OF[kind];
    if (!event) throw new Error(`evidence invariant: journal operation ${operationId} (${kind}) is not a movement of hold ${holdId}`);
    const into = (account: (name: string) => boolean) => lines.filter((line) => line.amount_uc > 0n && account(line.account)).reduce((sumUc, line) => sumUc + line.amount_uc, 0n);
    const toLotsUc = into((name) => name.startsWith('lot:'));
    if (event === 'held') return { event, at: Number(atS), amountUc: formatUc(into((name) => name === `hold:${holdId}`)), operationId };
    if (event === 'captured') {
      const capturedUc = into((name) => !name.startsWith('lot:') && !name.startsWith('hold:'));
      return { event, at: Number(atS), amountUc: formatUc(capturedUc), releasedUc: formatUc(toLotsUc), operationId };
    }
    return { event, at: Number(atS), amountUc: formatUc(toLotsUc), operationId };
  });
}

export class EvidenceService {
  constructor(
    private readonly gateway: Gateway,
    private readonly ledger: LedgerService,
    private readonly agents: AgentService,
    private readonly approvals: HoldApprovals,
  ) {}

  /**
   * Who may read a hold's evidence: the holding merchant's key, and whoever acts for the hold's agent (its
   * owner; AgentService.agentFor). Anyone else finds no such redemption (404), as for a missing id.
   */
  async reach(db: Queryable, principal: Principal, holdId: string): Promise<void> {
    const missing = new ApiError('not_found', { detail: `no redemption ${holdId}` });
    const hold = await store.findHold(db, holdId);
    if (!hold) throw missing;
    if (principal.kind === 'merchant') {
      if (hold.merchant_id === null || hold.merchant_id !== principal.merchantId) throw missing;
      return;
    }
    try {
      await this.agents.agentFor(db, principal, hold.agent_id);
    } catch (error) {
      // The agent's refusal names the agent; the caller asked for a redemption and learns nothing more.
      if (error instanceof ApiError && error.code === 'not_found') throw missing;
      throw error;
    }
  }

  /** The hold's evidence, signed now. 503 signing_configuration_required without a signing key. */
  async evidence(holdId: string): Promise<{ evidence: string }> {
    if (!this.gateway.signing.configured) throw this.gateway.signing.unconfigured('evidence is signed');
    const claims = await this.gateway.db.transaction(async (tx) => {
      await tx.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
      return this.claimsOf(tx, holdId);
    });
    return { evidence: await this.gateway.signing.sign({ ...claims }, EVIDENCE_TYP) };
  }

  /** The claims, read in the caller's snapshot. */
  private async claimsOf(tx: Tx, holdId: string): Promise<EvidenceClaims> {
    const hold = await store.findHold(tx, holdId);
    if (!hold) throw new ApiError('not_found', { detail: `no redemption ${holdId}` });
    const redemption = await this.ledger.getHold(tx, holdId);
    const refundIds = redemption.refunds.map((refund) => refund.id);
    const settlements = ['capture', 'release', 'expire'].map((kind) => `${holdId}:${kind}`);
    const history = historyOf(holdId, await store.journalOf(tx, [holdId, ...settlements, ...refundIds]));
    const [held] = history;
    if (held?.event !== 'held' || held.amountUc !== redemption.amountUc) {
      throw new Error(`evidence invariant: the journal of hold ${holdId} does not start with holding its ${redemption.amountUc} µc`);
    }
    const receipts = [redemption.captureReceipt, ...redemption.refunds.map((refund) => refund.receipt)].filter((receipt): receipt is string => receipt !== null);
    return {
      iss: this.gateway.config.baseUrl,
      iat: this.gateway.clock.nowS(),
      jti: newId('evd'),
      sub: hold.id,
      mandate: await this.mandateOf(tx, hold),
      ancestorMandates: await this.ancestorMandatesOf(tx, hold),
      approval: await this.approvals.approvalOfHold(tx, hold.id),
      offer: hold.offer_snapshot,
      voucher: hold.voucher,
      receipts,
      history,
      redemption,
    };
  }

  /** The mandate version the hold names, as kept; its hash must be the one the hold (and voucher) carry. */
  private async mandateOf(tx: Tx, hold: store.HoldRow): Promise<EvidenceMandate | null> {
    if (hold.mandate_version === null || hold.mandate_version < 1) return null;
    return this.keptMandate(tx, hold, hold.agent_id, hold.mandate_version, hold.mandate_hash);
  }

  /**
   * The mandate versions of a delegate's ancestors the hold recorded, as kept, root first: [] for a root's hold (the
   * hold's payer is its own agent), null for a delegate's hold taken before they were recorded (migration 0037). An
   * ancestor at version 0 (no mandate yet, the defaults) has no kept document and is left out.
   */
  private async ancestorMandatesOf(tx: Tx, hold: store.HoldRow): Promise<EvidenceAncestorMandate[] | null> {
    if (!hold.ancestor_mandates) return hold.payer_id === hold.agent_id ? [] : null;
    const kept: EvidenceAncestorMandate[] = [];
    for (const [agentId, version, hash] of hold.ancestor_mandates) {
      if (version < 1) continue;
      kept.push({ agentId, ...(await this.keptMandate(tx, hold, agentId, version, hash)) });
    }
    return kept;
  }

  /** An agent's kept mandate version the hold names; its hash must be the one the hold recorded. */
  private async keptMandate(tx: Tx, hold: store.HoldRow, agentId: string, version: number, hash: string | null): Promise<EvidenceMandate> {
    const agent = await this.agents.agentRow(tx, agentId);
    if (!agent) throw new Error(`evidence invariant: hold ${hold.id} names agent ${agentId}, which does not exist`);
    const kept = await this.agents.mandateVersion(tx, agent, version).catch((error: unknown) => {
      // Every version ever in force is kept: a missing one is a broken invariant, not a missing redemption.
      throw error instanceof ApiError ? new Error(`evidence invariant: hold ${hold.id} names mandate version ${version} of ${agentId}, which is not kept`) : error;
    });
    if (kept.hash !== hash) {
      throw new Error(`evidence invariant: hold ${hold.id} names mandate version ${version} of ${agentId} with hash ${hash}, kept as ${kept.hash}`);
    }
    return { version: kept.version, hash: kept.hash, canonical: kept.document };
  }
}
