// The gateway's resources and token claims as a merchant sees them. Amounts are microcredits (µc) as
// decimal strings, exactly as on the wire: 1 credit = 1,000,000 µc. Times are Unix seconds.

export type RedemptionState = 'held' | 'captured' | 'released' | 'expired';

export interface Refund {
  id: string;
  redemptionId: string;
  amountUc: string;
  reason: string | null;
  createdAt: number;
  /** Signed refund receipt (compact ES256 JWS, typ `receipt+jwt`); null when the gateway has no signing key. */
  receipt: string | null;
}

/** A hold on an agent's credit (the voucher's `jti` is its id). */
export interface Redemption {
  id: string;
  agentId: string;
  acceptorId: string;
  offerId: string;
  category: string;
  /** The held amount. Once not held: amountUc = capturedUc + releasedUc. */
  amountUc: string;
  state: RedemptionState;
  expiresAt: number;
  createdAt: number;
  capturedUc: string;
  /** What went back to the agent when the hold resolved (the uncaptured part). */
  releasedUc: string;
  capturedAt: number | null;
  releasedAt: number | null;
  /** Refunded so far; never more than capturedUc. */
  refundedUc: string;
  refunds: Refund[];
  /** Signed capture receipt (compact JWS); null unless captured. */
  captureReceipt: string | null;
  allocations: Array<{ lotId: string; amountUc: string }>;
  /** Set when the kill switch released the hold (its voucher revoked: `agent_frozen` or `agent_retired`); null otherwise. */
  revocation?: { revokedAt: number; reason: string } | null;
}

export interface RefundResult {
  refund: Refund;
  redemption: Redemption;
}

/** A verified voucher's claims, typed. */
export interface VoucherClaims {
  /** The hold the voucher stands for: capture or release it by this id. */
  redemptionId: string;
  agentId: string;
  merchantId: string;
  offerId: string;
  category: string;
  amountUc: string;
  issuedAt: number;
  expiresAt: number;
  /**
   * The hash of the agent's mandate version the hold was taken under (the voucher's `mandate` claim): the
   * base64url SHA-256 of its RFC 8785 canonical JSON, which `getEvidence` gives you. Null for a voucher without it.
   */
  mandateHash: string | null;
}

/** A verified receipt's claims, typed. */
export interface ReceiptClaims {
  receiptId: string;
  kind: 'capture' | 'refund';
  redemptionId: string;
  offerId: string;
  agentId: string;
  merchantId: string;
  amountUc: string;
  capturedUc: string;
  releasedUc: string;
  /** Refunded in total once this receipt's operation was done. */
  refundedUc: string;
  /** Refund receipts only: the refund and its amount. */
  refundId: string | null;
  refundUc: string | null;
  issuedAt: number;
  /** The hash of the mandate version the hold was taken under (the receipt's `mandate` claim), or null without it. */
  mandateHash: string | null;
}

export type WebhookEventType =
  | 'merchant.verified'
  | 'redemption.held'
  | 'redemption.captured'
  | 'redemption.released'
  | 'redemption.expired'
  | 'redemption.refunded'
  | 'voucher.revoked'
  /** Recorded when the gateway turns your webhook off; listed by the events API, never delivered. */
  | 'webhook.disabled';

/**
 * Vouchers the gateway revoked (their holds released: the owner froze the agent with `releaseHolds`, or
 * retired a delegate): the `data.revocation` of a `voucher.revoked` event. Refuse these vouchers from now on.
 */
export interface VoucherRevocation {
  /** The agent whose freeze or retirement revoked them (the holds may be its delegates'). */
  agentId: string;
  reason: 'agent_frozen' | 'agent_retired' | (string & {});
  /** Your holds it revoked: the `jti` (redemptionId) of each voucher. */
  holdIds: string[];
  revokedAt: number;
}

export interface WebhookEvent {
  id: string;
  type: WebhookEventType | (string & {});
  createdAt: number;
  merchantId: string;
  data: { redemption?: Redemption; merchant?: Record<string, unknown>; revocation?: VoucherRevocation };
}

/** One revoked hold in the revocations feed (`GET /v1/merchants/{id}/revocations`), oldest first. */
export interface RevocationFeedEntry {
  holdId: string;
  agentId: string;
  reason: 'agent_frozen' | 'agent_retired' | (string & {});
  revokedAt: number;
  /** Opaque: where this entry sits in the feed. */
  cursor: string;
}

/** One page of the revocations feed. Pass `nextSince` back as `since` for the next page (or the next poll). */
export interface RevocationFeedPage {
  revocations: RevocationFeedEntry[];
  nextSince: string;
  hasMore: boolean;
}

/** An RFC 9457 problem answered by the gateway. */
export interface Problem {
  type?: string;
  title?: string;
  status: number;
  code?: string;
  detail?: string;
  [member: string]: unknown;
}

/** A mandate version as evidence carries it: its RFC 8785 canonical JSON and the base64url SHA-256 of it. */
export interface EvidenceMandate {
  version: number;
  hash: string;
  canonical: string;
}

/** The owner's approval a purchase above its mandate's approval threshold was made under. */
export interface EvidenceApproval {
  /** The purchase approval (`pur_…`). */
  id: string;
  requestedAt: number;
  approvedAt: number;
  /** The owner who approved it. */
  approvedBy: string;
  amountUc: string;
  offerId: string;
}

/** The verified claims of a redemption's evidence (`getEvidence`), for a dispute. */
export interface EvidenceClaims {
  /** The evidence id (`evd_…`). */
  evidenceId: string;
  redemptionId: string;
  issuedAt: number;
  /** The agent's mandate version in force at the hold; null only for a hold older than mandates. */
  mandate: EvidenceMandate | null;
  /** For a delegate's hold, each ancestor's mandate version in force at the hold, root first; [] for a root's; null if not recorded. */
  ancestorMandates: Array<EvidenceMandate & { agentId: string }> | null;
  /**
   * The owner's approval of a purchase above the mandate's `approvalAboveUc`, under which the hold was taken; null when
   * the purchase needed none (evidence signed before 2026-12-07 has none either).
   */
  approval: EvidenceApproval | null;
  /** What was bought, as it was sold. */
  offer: Record<string, unknown> | null;
  /** The voucher as issued (or an x402 payment's attestation). */
  voucher: string | null;
  /** Every signed receipt, in order: the capture's, then each refund's. */
  receipts: string[];
  /** The hold's movements from its journal. */
  history: Array<{ event: 'held' | 'captured' | 'released' | 'expired' | 'refunded'; at: number; amountUc: string; releasedUc?: string; operationId: string }>;
  redemption: Redemption;
}
