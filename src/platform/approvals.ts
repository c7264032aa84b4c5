// How a human approves what an agent cannot do alone: a top-up of its credit today (execute found the credit
// short and retained the request), a purchase next. A feature that needs a human's yes (execute now, the
// voucher mint next) asks a `HumanApprover`; the payments feature is one. The interface lives here, below
// both, so that neither the askers nor the approver import each other for it.
//
// The answer is a page for the human and what to tell them: the asker throws it as `ApiError.approval`
// (`humanApproval` below), which HTTP shows as `approvalUrl` and MCP turns into a URL elicitation.
import type { HumanApproval } from './errors.ts';

/** The spec's Service intent: an execute request as it was made, retained until credit covers it. */
export interface ServiceIntent {
  serviceId: string;
  action: string;
  input: unknown;
  agentId: string;
}

/**
 * What waits on the human's answer. Its `id` names the approval across retries: asked again for the same
 * id, the approver answers the same pending approval instead of opening a second one.
 */
export type ApprovalSubject = { type: 'intent'; id: string; intent: ServiceIntent };

/** What kind of approval: `topup` credits the agent, so that the subject can then run. */
export type ApprovalKind = 'topup';

export interface ApprovalRequest {
  kind: ApprovalKind;
  agentId: string;
  /** The human who approves: the agent's owner. */
  ownerId: string;
  /** What is at stake: the price the agent's credit did not cover. */
  amountUc: bigint;
  subject: ApprovalSubject;
}

/** A pending approval: where the human goes, and what the asker tells its caller. */
export interface PendingApproval {
  /** The page where the human approves (and pays, on a checkout rail). */
  url: string;
  /** One or two sentences for the agent to relay to its human, and when to retry. */
  instructions: string;
  /** The payment the approval opened (the top-up record), shown to the caller as `payment`. */
  payment: Record<string, unknown>;
  /** Each way the human can pay and where it stands, e.g. `{type: 'owner_approval', status: 'pending_approval'}`. */
  paymentMethods: Array<{ type: string; status: string }>;
}

export interface HumanApprover {
  /**
   * Opens (or finds, for the same subject id) the approval. Throws when the approver cannot be reached
   * (the asker answers 503 payment_unavailable).
   */
  requestApproval(request: ApprovalRequest): Promise<PendingApproval>;
}

/** The refusal's `approval`: the page, named by the subject (the MCP elicitation id), and the instructions. */
export function humanApproval(request: ApprovalRequest, pending: PendingApproval): HumanApproval {
  return { url: pending.url, id: request.subject.id, message: pending.instructions };
}
