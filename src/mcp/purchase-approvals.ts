// get_intent's second kind of id: a purchase approval (pur_…), the id a voucher mint above the mandate's approval
// threshold hands out as its elicitationId and intentId. An MCP token cannot call its REST route (GET
// /v1/payments/purchases/{id}: another audience), so get_intent answers it with that route's own query (payments'
// getPurchaseApproval: the same access rule, the agent or its owner, 404 for anyone else, and the same view), which
// the composition root gives the MCP face (`ToolServices.purchaseApprovals`).
import type { PaymentQueries } from '../payments/queries.ts';

export type PurchaseApprovalQuery = PaymentQueries['getPurchaseApproval'];

/** The prefix of a purchase approval's id. */
export const PURCHASE_APPROVAL_PREFIX = 'pur_';
