// What execute needs from a payment-approval provider when credit does not cover an execution: ask a
// human to approve a top-up bound to the retained intent. The payments feature implements it; when none is
// configured, execute answers 503 link_configuration_required instead of 402 approval_required.

/** The spec's Service intent: the execute request as it was made. */
export interface ServiceIntent {
  serviceId: string;
  action: string;
  input: unknown;
  agentId: string;
}

export interface ApprovalRequest {
  intentId: string;
  intent: ServiceIntent;
  /** The agent's owner: the human who approves. */
  ownerId: string;
  /** The execution's price, which the agent's credit did not cover. */
  priceUc: bigint;
}

export interface PaymentApproval {
  /** The page where the human approves (and pays, with a checkout provider). */
  approvalUrl: string;
  /** The provider's pending payment (top-up request record or similar); shown to the caller as `payment`. */
  payment: Record<string, unknown>;
  /** Each way the human can pay and where it stands, e.g. `{type: 'link', status: 'pending'}`. */
  paymentMethods: Array<{ type: string; status: string }>;
  /** One or two sentences telling the agent what to relay to its human and when to retry. */
  instructions: string;
}

export interface PaymentApprovalProvider {
  /**
   * Starts (or finds) the approval for an intent. Called again for the same intentId when the caller
   * retries with the same Idempotency-Key, so it must answer the same pending approval rather than open
   * a second one. Throws when the provider cannot be reached (execute answers 503 payment_unavailable).
   */
  requestApproval(request: ApprovalRequest): Promise<PaymentApproval>;
}
