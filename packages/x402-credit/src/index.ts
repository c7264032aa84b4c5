// @agent-credit-gateway/x402-credit: agent credit as an x402 payment scheme, the gateway as facilitator.
export {
  ATTESTATION_TYP,
  CONSUME_PAYLOAD_TYPE,
  CREDIT_ASSET,
  CREDIT_BINDING_VERSION,
  CREDIT_NETWORK,
  CREDIT_SCHEME,
  MCP_PAYMENT_META_KEY,
  MCP_PAYMENT_RESPONSE_META_KEY,
  RECEIPT_TYP,
  UC_PER_CREDIT,
  UC_PER_USD,
} from './constants.js';
export { CreditSchemeClient, type AgentCredential, type Authorization, type AuthorizeRequest, type CreditSchemeClientOptions } from './client.js';
export { CreditError, type CreditErrorCode, type CreditErrorOptions, type Problem } from './errors.js';
export { CreditFacilitatorClient, creditFacilitator, type CreditFacilitatorOptions, type CreditOffer } from './facilitator.js';
export {
  callPaidTool,
  paidTool,
  paymentRequiredOf,
  type PaidToolCall,
  type PaidToolCallback,
  type PaidToolOptions,
  type PaymentPayloadMaker,
  type ToolCaller,
  type ToolInputSchema,
  type ToolResult,
} from './mcp.js';
export { amountUcText, parseCreditPrice, settlementOverrideUc } from './money.js';
export { checkCreditRoutes, verifyCreditRoutes, type VerifyRoutesOptions } from './routes.js';
export { verifyCreditReceipt, verifyPaymentResponse, type CreditReceipt, type VerifyReceiptOptions } from './receipts.js';
export { authorityOf, creditTerms, isCreditRequirements, type CreditRequirementsExtra } from './requirements.js';
export {
  CreditSchemeServer,
  creditResourceServer,
  type CreditResourceServerOptions,
  type CreditSchemeServerOptions,
} from './server.js';
export { SingleFlight, type ReplayableResponse, type SingleFlightOptions } from './single-flight.js';
