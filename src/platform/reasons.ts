// The `reason` member a problem body may carry beside its `code`: a stable refinement a client can branch on (which
// rule of a mandate refused, why a request closed). One catalogue, so that every reason the gateway can send is named
// and explained on /docs/errors: `ApiErrorOptions.extra.reason` takes only these (the compiler checks every site).
// The x402 facilitator's reasons are x402's own vocabulary and have their own table (src/x402/schemas.ts).

interface ReasonEntry {
  /** The problem codes this reason refines. */
  codes: readonly string[];
  meaning: string;
}

export const REFUSAL_REASONS = {
  budget_exceeded: { codes: ['CAP_EXCEEDED'], meaning: 'a budget of the mandate (or of an ancestor\'s) would be exceeded; the `budget` member names it, with its limit, what remains and when it resets' },
  per_hold_cap: { codes: ['CAP_EXCEEDED'], meaning: 'the price is above the mandate\'s per-hold cap (`caps.perHoldUc`)' },
  per_period_cap: { codes: ['CAP_EXCEEDED'], meaning: 'the rolling per-period cap (`caps.perPeriodUc` over `caps.periodS`) of the mandate (or of the ancestor named by `agentId`) would be exceeded' },
  max_uc: { codes: ['CAP_EXCEEDED'], meaning: 'the price is above the `maxUc` the request itself set' },
  mandate_not_valid: { codes: ['SCOPE_FORBIDDEN'], meaning: 'the mandate is not in force now (before its `notBefore` or after its `notAfter`)' },
  merchant_not_allowed: { codes: ['SCOPE_FORBIDDEN'], meaning: 'the mandate\'s merchant rules (`merchants.allow` / `merchants.deny`) refuse this merchant' },
  category_not_allowed: { codes: ['SCOPE_FORBIDDEN'], meaning: 'the mandate does not allow spending in this category' },
  service_not_allowed: { codes: ['SCOPE_FORBIDDEN'], meaning: 'the mandate does not allow this built-in service' },
  frozen: { codes: ['FROZEN'], meaning: 'the agent (or the ancestor named by `agentId`) is frozen by its owner' },
  retired: { codes: ['FROZEN'], meaning: 'the agent (or the ancestor named by `agentId`) is retired' },
  topup_required: { codes: ['approval_required'], meaning: 'the agent\'s credit does not cover the execution: its owner approves a top-up (`payment`), then the retry with the same idempotency key (header, or MCP argument) runs it' },
  above_approval_threshold: { codes: ['approval_required'], meaning: 'the price is above the mandate\'s `approvalAboveUc` (or that of the ancestor named by `agentId`): the owner decides at `approvalUrl`, then the retry with the same idempotency key (header, or MCP argument) proceeds' },
  purchase_declined: { codes: ['conflict'], meaning: 'the owner declined the purchase this request waited for' },
  approval_expired: { codes: ['conflict'], meaning: 'the approval lapsed: the owner did not answer it before its deadline, or approved it and no retry used it in time; ask again with a new idempotency key' },
  approval_used: { codes: ['conflict'], meaning: 'the approval was used already, by another hold' },
  approval_amount_changed: { codes: ['conflict'], meaning: 'the price changed since the owner approved it; ask again with a new idempotency key' },
  pending_topups_limit: { codes: ['conflict'], meaning: 'ten top-ups of the agent already wait for its owner (`pendingTopupsMax`)' },
  delegate_has_no_lots: { codes: ['conflict'], meaning: 'a delegate holds no credit of its own: credit the root agent named by `rootAgentId`' },
  amount_limit: { codes: ['conflict'], meaning: 'the change would carry a balance past the largest amount the ledger keeps' },
  agent_frozen: { codes: ['voucher_revoked'], meaning: 'the owner froze the agent (or an ancestor) and released its holds: do not deliver against the voucher' },
  agent_retired: { codes: ['voucher_revoked'], meaning: 'the agent (or an ancestor) was retired and its holds released: do not deliver against the voucher' },
  budget_wider_than_parent: { codes: ['invalid_input'], meaning: 'a delegate\'s budget is wider than its parent\'s (`pointer` names the member, `parent` the parent\'s)' },
  cap_wider_than_parent: { codes: ['invalid_input'], meaning: 'a delegate\'s cap is wider than its parent\'s' },
  approval_wider_than_parent: { codes: ['invalid_input'], meaning: 'a delegate\'s approval threshold is above its parent\'s' },
  merchant_outside_parent: { codes: ['invalid_input'], meaning: 'a delegate would be allowed a merchant its parent is not' },
  window_outside_parent: { codes: ['invalid_input'], meaning: 'a delegate\'s validity window reaches outside its parent\'s' },
  allowance_outside_parent: { codes: ['invalid_input'], meaning: 'a delegate would be allowed a category or service its parent is not' },
  depth_exceeded: { codes: ['invalid_input'], meaning: 'the delegate would be deeper than an ancestor\'s `delegation.maxDepth` (or the tree\'s limit) allows' },
  delegation_not_allowed: { codes: ['invalid_input'], meaning: 'the parent\'s mandate does not allow delegates (`delegation.allowed` is false)' },
} as const satisfies Record<string, ReasonEntry>;

export type RefusalReason = keyof typeof REFUSAL_REASONS;
