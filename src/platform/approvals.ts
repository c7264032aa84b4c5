// How a human approves what an agent cannot do alone. Two kinds:
//   topup     credit for the agent, so that a retained request can then run (execute found the credit short);
//   purchase  one purchase above the mandate's approval threshold (a voucher mint, or an execute), which the
//             hold takes only once the owner said yes, bound to the request that asked.
// A feature that needs a human's yes asks: execute a `HumanApprover` for top-ups, the voucher mint and execute
// a `PurchaseApprover` for purchases; the payments feature is both. The interfaces live here, below both, so
// that neither the askers nor the approver import each other.
//
// The answer is a page for the human and what to tell them: the asker throws it as `ApiError.approval`
// (`humanApproval`, `purchaseApproval` below), which HTTP shows as `approvalUrl` and MCP turns into a URL elicitation. For a
// purchase the asker then reads the human's answer where it takes the hold, in the hold's transaction
// (`PurchaseApprover`): approved (and used there, once), or closed for good.
import type { Queryable, Tx } from './db/database.ts';
import { ApiError, type HumanApproval } from './errors.ts';
import { SAME_KEY } from './idempotency.ts';

/** The spec's Service intent: an execute request as it was made, retained until credit covers it. */
export interface ServiceIntent {
  serviceId: string;
  action: string;
  input: unknown;
  agentId: string;
}

/** A voucher mint (or an x402 authorize) as it was asked (decimal µc), retained by its purchase approval until the owner answers. */
export interface VoucherIntent {
  offerId: string;
  agentId: string;
  maxUc?: string;
  /** The price asked (an x402 authorize's `amount`); absent: the offer's price. */
  amountUc?: string;
  /** The resource an x402 authorize binds its attestation to (its `resource`), shown to the owner who approves. */
  resource?: string;
}

/**
 * What waits on a top-up: a retained execute request. Its `id` names the approval across retries: asked again
 * for the same id, the approver answers the same pending approval instead of opening a second one.
 */
export type ApprovalSubject = { type: 'intent'; id: string; intent: ServiceIntent };

/** What waits on a purchase approval: a retained execute request, or a voucher mint (the approval retains it). */
export type PurchaseSubject = ApprovalSubject | { type: 'voucher'; intent: VoucherIntent };

/** What kind of approval: `topup` credits the agent, so that the subject can then run. */
export type ApprovalKind = 'topup';

/** Credit for the agent, so that the retained intent can run. */
export interface ApprovalRequest {
  kind: ApprovalKind;
  agentId: string;
  /** The human who approves: the agent's owner. */
  ownerId: string;
  /** What is at stake: the price the agent's credit did not cover. */
  amountUc: bigint;
  subject: ApprovalSubject;
}

/**
 * The request a purchase approval belongs to: its Idempotency-Key as the operation runner claimed it (the
 * principal's scope, the operation, the key) and the request's fingerprint (the operation and its input).
 * Only a retry of that very request can use the approval.
 */
export interface RequestBinding {
  scope: string;
  operation: string;
  key: string;
  fingerprint: string;
}

/** One purchase above the approval threshold, as the owner is asked about it. */
export interface PurchaseApprovalRequest {
  agentId: string;
  ownerId: string;
  /** The price of the purchase. */
  amountUc: bigint;
  subject: PurchaseSubject;
  binding: RequestBinding;
  /** Who sells, by id, name and verified domain; null for a built-in service of the gateway itself (execute). */
  merchant: { id: string; name: string; domain: string } | null;
  /** What is bought: an offer, or a built-in service's action (`{serviceId}:{action}`). */
  offer: { id: string; name: string };
}

/** A pending approval: where the human goes, and what the asker tells its caller. */
export interface PendingApproval {
  /** The page where the human approves (and pays, on a checkout rail). */
  url: string;
  /** One or two sentences for the agent to relay to its human, and when to retry. */
  instructions: string;
  /** The record the approval opened (the top-up, or the purchase approval), shown to the caller. */
  payment: Record<string, unknown>;
  /** Each way the human can pay and where it stands, e.g. `{type: 'owner_approval', status: 'pending_approval'}`. */
  paymentMethods: Array<{ type: string; status: string }>;
}

/** A pending purchase approval, named by its own id (a voucher mint's `intentId`, the MCP elicitation id). */
export interface PendingPurchase extends PendingApproval {
  id: string;
}

/** Approves top-ups: the payments feature, or one given in code (`AppDependencies.approver`). */
export interface HumanApprover {
  /**
   * Opens (or finds, for the same subject id) the approval, outside any transaction (its rail may be called).
   * Throws when the approver cannot be reached (the asker answers 503 payment_unavailable).
   */
  requestApproval(request: ApprovalRequest): Promise<PendingApproval>;
}

/** What names a request across its retries: its Idempotency-Key as claimed. */
export type RequestKey = Pick<RequestBinding, 'scope' | 'operation' | 'key'>;

/** The answers for requests whose approvals are locked (`PurchaseApprover.lockApprovals`), in the order of `checks`. */
export type PurchaseAnswering = (checks: readonly PurchaseCheck[]) => Promise<PurchaseAnswer[]>;

/** A purchase about to be held, as the hold checks it against the approval of its request. */
export interface PurchaseCheck extends RequestBinding {
  agentId: string;
  amountUc: bigint;
}

/**
 * The owner's answer for one request: none yet (no approval, or one still waiting, `waitingId`: the hold asks),
 * approved (the hold may take it, and uses the approval), or closed for good (declined, expired, used, or bound to
 * another request or amount): the refusal that answers the request, to be stored under its key.
 */
export type PurchaseAnswer = { state: 'none'; waitingId?: string } | { state: 'approved'; approvalId: string; expiresAt: number } | { state: 'closed'; error: ApiError };

/**
 * The refusals of a hold its owner can lift (unfreeze, raise a budget or a cap, widen the merchants, top up). Not a
 * retirement, refused as FROZEN with `reason: retired`: it is for good (found from outside: told to retry).
 */
function liftable(error: ApiError): boolean {
  if (error.code === 'FROZEN') return error.options.extra?.reason !== 'retired';
  return error.code === 'CAP_EXCEEDED' || error.code === 'SCOPE_FORBIDDEN' || error.code === 'INSUFFICIENT_CREDITS';
}

/**
 * A hold's refusal as the answer of its request. A request whose approval stands, refused by what its owner can lift
 * (frozen, or a budget lowered), is refused for now only (`provisional`): the retry with the same key runs again, so
 * the owner's answer is not lost to a refusal stored under the key. That holds for an approval the owner gave (found
 * from outside: an approved purchase, refused once while frozen, replayed FROZEN after the owner unfroze the agent),
 * and for one still waiting for the owner (found from outside: an agent retrying while frozen stored FROZEN, and the
 * owner's later approval could never be used). Past its deadline the approval is expired, and that answer is stored.
 */
export function refusalOfAnswered(answer: PurchaseAnswer, error: unknown): unknown {
  if (!(error instanceof ApiError) || !liftable(error)) return error;
  const standing = standingApproval(answer);
  if (standing === undefined) return error;
  const refusal = `${(error.options.detail ?? error.title).replace(/\.?$/, '.')}`;
  const detail = `${refusal} ${standing}: once this is lifted, retry with ${SAME_KEY}. Nothing was taken.`;
  return new ApiError(error.code, { ...error.options, detail, provisional: true });
}

/** What a provisional refusal says of the approval that stands: given by the owner, or still waiting; undefined for none. */
function standingApproval(answer: PurchaseAnswer): string | undefined {
  if (answer.state === 'approved') return `The owner approved this purchase (approval ${answer.approvalId}), which stands until ${new Date(answer.expiresAt * 1000).toISOString()}`;
  if (answer.state === 'none' && answer.waitingId !== undefined) return `This purchase's approval (${answer.waitingId}) still waits for the owner`;
  return undefined;
}

/**
 * The approval a hold taken under this answer uses: the approved one, or one still waiting when the hold passed
 * without it (the mandate no longer asks), which the request's hold answers for good all the same.
 */
export function approvalUsedBy(answer: PurchaseAnswer): string | undefined {
  if (answer.state === 'approved') return answer.approvalId;
  return answer.state === 'none' ? answer.waitingId : undefined;
}

/**
 * Approves purchases above a mandate's approval threshold (the payments feature, whatever the rail: no money
 * moves). Everything happens in the database, so each step runs in the hold's own transaction.
 */
export interface PurchaseApprover {
  /** Opens (or finds, for the same request) the approval, in `tx` when given (the approval and its event commit with the answer that names it). */
  requestPurchaseApproval(request: PurchaseApprovalRequest, tx?: Tx): Promise<PendingPurchase>;
  /**
   * Locks the approvals of these requests until `tx` ends (sorted, before any agent row: a batch sends this lock
   * beside its other reads), then answers each request, in order, with what its purchase now costs.
   */
  lockApprovals(tx: Tx, requests: readonly RequestKey[]): Promise<PurchaseAnswering>;
  /** Marks approvals used by the holds of their requests (`approvalUsedBy`), in the holds' transaction: each once. */
  use(tx: Tx, uses: ReadonlyArray<{ approvalId: string; holdId: string }>): Promise<void>;
  /**
   * Gives back the approval a hold used when that hold ends uncharged and its request's key is given back for a
   * retry (an execution whose upstream failed): the approval is open again as it was before the hold (approved, or
   * still waiting), in the hold's release transaction; past its deadline the expiry sweeper closes it as any other.
   */
  reopenUsedBy(tx: Tx, holdId: string): Promise<void>;
  /**
   * The owner's approval of this request (same key, request and agent), read without a lock, to word a refusal that
   * comes before any hold (`refusalOfAnswered`): approved, or still waiting (`none` with `waitingId`), before its
   * deadline; otherwise `none`.
   */
  standingApprovalFor(db: Queryable, binding: RequestBinding, agentId: string): Promise<PurchaseAnswer>;
}

/** The refusal's `approval` for a top-up: the page, named by the subject (the MCP elicitation id), and the instructions. */
export function humanApproval(request: ApprovalRequest, pending: PendingApproval): HumanApproval {
  return { url: pending.url, id: request.subject.id, message: pending.instructions };
}

/** The refusal's `approval` for a purchase: the page, named by the purchase approval, and the instructions. */
export function purchaseApproval(pending: PendingPurchase): HumanApproval {
  return { url: pending.url, id: pending.id, message: pending.instructions };
}
