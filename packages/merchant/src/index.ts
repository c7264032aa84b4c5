// @agent-credit-gateway/merchant: everything a merchant needs to accept the gateway's vouchers.
export {
  MerchantClient,
  RECEIPT_TYP,
  VOUCHER_TYP,
  type MerchantClientOptions,
  type PollRevocationsOptions,
  type RevocationPolling,
  type RevocationSync,
  type VoucherBounds,
} from './client.ts';
export { GatewayError, VerificationError, type VerificationCode } from './errors.ts';
export {
  RevocationSet,
  REVOCATION_TOLERANCE_S_DEFAULT,
  REVOCATIONS_MAX_DEFAULT,
  VOUCHER_LIFETIME_S_MAX_DEFAULT,
  type RevocationFacts,
  type RevocationSetOptions,
} from './revocations.ts';
export { verifyWebhook, WEBHOOK_TOLERANCE_S_DEFAULT, type HeaderSource } from './webhooks.ts';
export type * from './types.ts';
