// @agent-credit-gateway/merchant: everything a merchant needs to accept the gateway's vouchers.
export {
  EVIDENCE_TYP,
  MerchantClient,
  RECEIPT_TYP,
  VOUCHER_TYP,
  type MerchantClientOptions,
  type PollRevocationsOptions,
  type RevocationPolling,
  type RevocationSync,
  type VoucherBounds,
} from './client.js';
export { ConnectionError, GatewayError, VerificationError, type GatewayErrorOptions, type VerificationCode } from './errors.js';
export {
  RevocationSet,
  REVOCATION_TOLERANCE_S_DEFAULT,
  REVOCATIONS_MAX_DEFAULT,
  VOUCHER_LIFETIME_S_MAX_DEFAULT,
  type RevocationFacts,
  type RevocationSetOptions,
} from './revocations.js';
export { verifyWebhook, WEBHOOK_TOLERANCE_S_DEFAULT, type HeaderSource } from './webhooks.js';
// Named, not `export type *` (TypeScript 5.0), so the declarations read in TypeScript 3.8 and later.
export type {
  EvidenceApproval,
  EvidenceClaims,
  EvidenceMandate,
  Problem,
  ReceiptClaims,
  Redemption,
  RedemptionState,
  Refund,
  RefundResult,
  RevocationFeedEntry,
  RevocationFeedPage,
  VoucherClaims,
  VoucherRevocation,
  WebhookEvent,
  WebhookEventType,
} from './types.js';
