// The MCP tools: one row per operation or query, naming who may call it and truthful annotations. A tool
// names an operation (it changes state) or a query (it reads) of the same objects the HTTP routes serve, so
// its input and output schemas, its idempotency key space, its access check and its answer are theirs: the
// HTTP twin of a tool is the route whose operationId is the tool's operation or query name (a test compares
// their schemas and their answers). No business rule lives here.
import type { TSchema } from '@sinclair/typebox';
import type { ToolAnnotations } from '@modelcontextprotocol/server';
import type { ExecuteOperations } from '../execute/operations.ts';
import type { ExecuteQueries } from '../execute/queries.ts';
import type { AgentOperations } from '../agents/operations.ts';
import type { AgentQueries } from '../agents/queries.ts';
import type { DelegationOperations } from '../delegation/operations.ts';
import type { DelegationQueries } from '../delegation/queries.ts';
import type { IdentityQueries } from '../identity/queries.ts';
import type { LedgerQueries } from '../ledger/queries.ts';
import type { OfferQueries } from '../offers/queries.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { PrincipalKind } from '../platform/principal.ts';
import type { RevocationOperations } from '../revocations/operations.ts';
import type { VoucherOperations } from '../vouchers/operations.ts';
import type { PaymentOperations } from '../payments/operations.ts';
import type { PaymentQueries } from '../payments/queries.ts';
import { PENDING_TOPUPS_PER_AGENT_MAX } from '../payments/service.ts';

/** The operations the MCP face runs; the same objects' names and schemas as the HTTP routes'. */
export type McpOperations = Pick<VoucherOperations, 'mintVoucher'> &
  Pick<ExecuteOperations, 'executeService'> &
  Pick<AgentOperations, 'registerAgent' | 'updateAgent' | 'unfreezeAgent' | 'setMandate'> &
  Pick<RevocationOperations, 'freezeAgent'> &
  Pick<DelegationOperations, 'createDelegate'> &
  Pick<PaymentOperations, 'requestTopup'>;

/** The queries the MCP face runs: the same objects as the HTTP routes'. */
export type McpQueries = Pick<IdentityQueries, 'getMe'> &
  Pick<OfferQueries, 'listSellableOffers'> &
  Pick<LedgerQueries, 'getRedemption' | 'listAgentHolds'> &
  Pick<ExecuteQueries, 'getIntent'> &
  Pick<AgentQueries, 'listAgents' | 'getMandate' | 'listMandateVersions' | 'getMandateVersion'> &
  Pick<DelegationQueries, 'listDelegates' | 'listOwnDelegates'> &
  Pick<PaymentQueries, 'getTopup'>;

export interface ToolServices {
  gateway: Gateway;
  operations: McpOperations;
  queries: McpQueries;
  /** Every named schema (`$id`) a tool's input or output refers to; tools carry none, so they are inlined. */
  schemas: readonly TSchema[];
  /** Whether the agent's mandate in force allows it to register delegates (and it is not retired): who sees `requires: 'delegation'` tools. */
  mayDelegate(agentId: string): Promise<boolean>;
  /** Payments' getPurchaseApproval (GET /v1/payments/purchases/{id}), which get_intent answers for a pur_… id. */
  purchaseApprovals: PaymentQueries['getPurchaseApproval'];
}

interface ToolBase {
  name: string;
  title: string;
  description: string;
  /** Who may call it; the tool list a principal sees holds only its own tools. */
  kinds: readonly PrincipalKind[];
  /** Listed only for an agent whose mandate allows delegates (ToolServices.mayDelegate). */
  requires?: 'delegation';
  annotations: ToolAnnotations;
}

/** A read, run by the query runner; its input and output are the query's. */
export interface QueryToolDefinition extends ToolBase {
  query: keyof McpQueries;
  /** An `id` naming a purchase approval (pur_…) reads it instead (ToolServices.purchaseApprovals); the output is either. */
  readsPurchaseApprovals?: true;
}

/** A tool run by the operation runner; its input is the operation's plus `idempotencyKey`. */
export interface OperationToolDefinition extends ToolBase {
  operation: keyof McpOperations;
}

export type ToolDefinition = QueryToolDefinition | OperationToolDefinition;

const AGENT = ['agent'] as const;
const OWNER = ['human', 'owner'] as const;
const EVERYONE = ['human', 'agent', 'owner'] as const;

/** A read: no side effect on the gateway's state, the same answer until something else changes it. */
const READ: ToolAnnotations = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };

/** Changes state; the same idempotency key makes a retry return the first answer, so it is idempotent. */
const WRITE: ToolAnnotations = { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false };

/** The operation or query a tool runs (its key is its name): its HTTP twin's operationId. */
export function twinName(tool: ToolDefinition): string {
  return 'query' in tool ? tool.query : tool.operation;
}

/**
 * Where an approval comes as a URL elicitation, in the words of the tool descriptions (server.ts `mayAskToVisit`): a
 * legacy exchange is stateless here, so a later call cannot show what `initialize` declared (found from outside: the
 * descriptions promised -32042 to 2025-11-25 clients that declared URL mode, which never got it; then still named
 * -32042 for a call "whose own request shows the capability", which no client's call does).
 */
const ELICITED_WHERE =
  'to a client whose request declares elicitation.url (MCP 2026-07-28: input_required, as the official v2 client ' +
  '@modelcontextprotocol/client sends it), else as the tool error with the page\'s URL (every 2025 revision: served stateless ' +
  'here, a call does not carry what initialize declared)';

export const TOOLS: readonly ToolDefinition[] = [
  {
    name: 'whoami',
    title: 'Who am I',
    description:
      'Who this credential belongs to (as GET /v1/me). For an agent: its settings (status, allowed services and categories, caps), its ' +
      'balance (availableUc, heldUc, capturedUc, lapsedUc, grantedUc, refundedUc; microcredits as decimal strings, 1 credit = 1,000,000) ' +
      'and its credit lots in burn-down order, after its holds past their deadline are reclaimed; its mandate with each budget\'s usage in its ' +
      'current period (spentUc, remainingUc, resetsAt), and its ancestors\' budgets that bind it too (ancestorBudgets). For a human owner: the owner id and verified email.',
    kinds: EVERYONE,
    annotations: READ,
    query: 'getMe',
  },
  {
    name: 'list_offers',
    title: 'List offers I can buy',
    description:
      "Active offers of verified merchants in the agent's allowed categories, oldest first (as GET /v1/offers; `limit` 1–100, default " +
      "20; pass the last offer's id as `startingAfter` for the next page). Mint a voucher for one with its id.",
    kinds: AGENT,
    annotations: READ,
    query: 'listSellableOffers',
  },
  {
    name: 'get_hold',
    title: 'Read one of my holds',
    description:
      'One of the agent\'s holds (a Redemption, as GET /v1/redemptions/{id}: amountUc, state held | captured | released | expired, expiresAt, ' +
      'allocations, refunds). Another agent\'s hold is not_found. In live mode holds are read through their merchant (provider_configuration_required), as on HTTP.',
    kinds: AGENT,
    annotations: READ,
    query: 'getRedemption',
  },
  {
    name: 'list_delegates',
    title: 'Read my delegates',
    description:
      "The agent's own subtree (as GET /v1/agents/{id}/delegates): `id` is the agent itself (whoami's id) or one of its delegates; the " +
      "answer is that agent and the delegates below it, shallowest first, each with its budgets' usage in the current period (a parent's " +
      'budgets count its delegates\' holds). Any other id is not_found.',
    kinds: AGENT,
    annotations: READ,
    query: 'listOwnDelegates',
  },
  {
    name: 'get_intent',
    title: 'Read a retained intent',
    description:
      'A service execution the agent asked for when its credit did not cover the price (as GET /v1/intents/{id}): the retained request ' +
      '(serviceId, action, input, agentId), its state (pending until a top-up settles or a retry with the same idempotency key executes it; ' +
      'then executed with its result and receipt, failed with its problem, or cancelled) and its deadline. The intentId comes from the ' +
      'approval_required or link_configuration_required error. A purchase approval\'s id (pur_…, the intentId of a mint above the ' +
      "mandate's approval threshold) reads that approval instead, as GET /v1/payments/purchases/{id}: its status (pending_approval, approved, " +
      'declined, expired, used), the purchase and its deadline. The agent reads its own; the owner, those of its agents (an owner executing for an agent is told to read it here).',
    kinds: EVERYONE,
    annotations: READ,
    query: 'getIntent',
    readsPurchaseApprovals: true,
  },
  {
    name: 'get_topup',
    title: 'Read a top-up',
    description:
      'A top-up (top_…, as GET /v1/payments/topups/{id}): the credit asked for (amountUsdCents, amountUc), its reason, `approvalUrl` (the page ' +
      'where the owner approves it, or pays at Checkout), `intentId` (the retained intent it funds, if any), and its status: pending_approval until ' +
      'the owner answers, then settled (credited: `lotId`), declined, expired or failed; a pending top-up past `expiresAt` reads expired. Its ' +
      "agent and that agent's owner read it; any other id is not_found. The id comes from request_topup, or from execute_service's approval_required (`payment.id`).",
    kinds: EVERYONE,
    annotations: READ,
    query: 'getTopup',
  },
  {
    name: 'list_agents',
    title: 'List my agents',
    description:
      "The owner's agents, oldest first, with status (active | frozen: the agent's own) and effectiveStatus (a frozen ancestor included, frozenBy naming it), allowances and caps (as GET /v1/owner/agents; `limit` 1–100, " +
      "default 20; pass the last agent's id as `startingAfter` for the next page).",
    kinds: OWNER,
    annotations: READ,
    query: 'listAgents',
  },
  {
    name: 'list_agent_holds',
    title: "List an agent's holds",
    description:
      "The holds (Redemptions) of one of the owner's agents, `agentId`, oldest first, or newest first with `order` desc (as GET /v1/owner/agents/{agentId}/holds; `limit` 1–100, " +
      "default 20; pass the last hold's id as `startingAfter` for the next page). Holds past their deadline are reclaimed first. " +
      "Another owner's agent is not_found.",
    kinds: OWNER,
    annotations: READ,
    query: 'listAgentHolds',
  },
  {
    name: 'list_agent_delegates',
    title: "Read an agent's delegates",
    description:
      "One of the owner's agents, `id`, and the delegates below it, shallowest first, each with its budgets' usage in the current period " +
      "(as GET /v1/owner/agents/{id}/delegates; `truncated` when the subtree is larger than the read). Another owner's agent is not_found.",
    kinds: OWNER,
    annotations: READ,
    query: 'listDelegates',
  },
  {
    name: 'get_mandate',
    title: "Read an agent's mandate",
    description:
      "The mandate in force of one of the owner's agents, `id` (as GET /v1/owner/agents/{id}/mandate): its rules (allowed services and " +
      'categories, caps, budgets, merchants allowed or denied, approval threshold, validity window, time zone, alert thresholds), its ' +
      "version and hash, and each budget's usage in its current period (spentUc, remainingUc, resetsAt).",
    kinds: OWNER,
    annotations: READ,
    query: 'getMandate',
  },
  {
    name: 'list_mandate_versions',
    title: "List an agent's mandate versions",
    description:
      "Every version of the mandate of one of the owner's agents, `id`, newest first, a page at a time (`limit`, `startingAfter` the last " +
      'version number seen), each with its canonical JSON and hash (as GET /v1/owner/agents/{id}/mandate/versions).',
    kinds: OWNER,
    annotations: READ,
    query: 'listMandateVersions',
  },
  {
    name: 'get_mandate_version',
    title: 'Read one mandate version',
    description:
      "One version of the mandate of one of the owner's agents (`id`, `version`), as GET /v1/owner/agents/{id}/mandate/versions/{version}: " +
      'its `canonical` JSON, byte for byte, and `hash` = base64url(SHA-256(canonical)), the `mandate` claim a voucher, receipt or evidence names.',
    kinds: OWNER,
    annotations: READ,
    query: 'getMandateVersion',
  },
  {
    name: 'mint_voucher',
    title: 'Mint a voucher for an offer',
    description:
      "Takes a hold of the offer's price against the agent's credit and returns the signed voucher (an ES256 JWT the merchant " +
      'verifies) with the hold (a Redemption). `maxUc` refuses a price above it (CAP_EXCEEDED, `reason` max_uc). Refusals: INSUFFICIENT_CREDITS or ' +
      'CAP_EXCEEDED (402, with `reason` and, for a budget, `budget`), FROZEN or SCOPE_FORBIDDEN (403, with `reason`); no hold is taken ' +
      "then; when credit is short, request_topup asks the owner for more. A price above the mandate's approval threshold asks the owner: approval_required comes as a URL elicitation of the " +
      `purchase's approval page (its id is the purchase approval, pur_…, which get_intent reads) ${ELICITED_WHERE}; once the owner approves, retry with the same key to get ` +
      'the voucher; a retry after the owner declined, or after the approval expired or was used, is conflict with `reason` purchase_declined, ' +
      'approval_expired, approval_used or approval_amount_changed (kept under the key: ask again with a new one). An offer that is not active ' +
      '(or of a merchant whose domain is not verified) is invalid_input. `idempotencyKey` is required: a retry MUST reuse the same key, and then returns the first answer without a ' +
      'second hold (the same key over HTTP is the same key); the same key with other arguments is idempotency_key_reused. Amounts are microcredits as decimal strings.',
    kinds: AGENT,
    annotations: WRITE,
    operation: 'mintVoucher',
  },
  {
    name: 'execute_service',
    title: 'Execute a metered service action',
    description:
      "Runs one action of a built-in service (the input schema's `serviceId` and `action` list them; `input`'s description gives each action's input) " +
      "and charges its price (1 credit) to the agent's credit: a hold, the action, then capture; the receipt is the captured hold. An agent executes " +
      'as itself; an owner names one of its agents in `agentId` (agent_required without it). Refusals before the hold charge nothing: ' +
      'FROZEN, SCOPE_FORBIDDEN, inbox_not_allowed, connector_not_configured; when credit is short the request is retained ' +
      '(link_configuration_required, or approval_required with an intentId). approval_required comes as a URL elicitation of the ' +
      `owner's approval page ${ELICITED_WHERE}; once the ` +
      'owner approves, the gateway runs the request by itself, once. A price above the mandate\'s approval threshold asks the owner ' +
      'to approve the purchase the same way; once approved, retry with the same key to run it. The mandate\'s budgets and caps apply (CAP_EXCEEDED); ' +
      'an owner naming an agent that is not its own is owner_required. After the hold, the upstream\'s failure releases it (nothing charged): ' +
      'upstream_not_found and upstream_unprocessable are kept under the key (the retry answers the same), while upstream_unavailable, upstream_auth_failed, ' +
      'upstream_timeout and upstream_rate_limited (with retryAfterS) are not, so a retry with the same key runs the action again. `idempotencyKey` is required: a retry MUST reuse the same ' +
      'key, and then returns the first answer (or the outcome of the retained request) and charges once; while the first is still running it is idempotency_key_in_use.',
    kinds: EVERYONE,
    annotations: { ...WRITE, openWorldHint: true },
    operation: 'executeService',
  },
  {
    name: 'request_topup',
    title: 'Ask the owner for credit (a top-up)',
    description:
      "Asks the agent's owner to add credit (as POST /v1/payments/topups), when mint_voucher is refused INSUFFICIENT_CREDITS or to fund the " +
      'next purchases: `agentId` (an agent tops up only itself, see whoami; an owner, one of its agents), `amountUsdCents` (1 US cent buys 1 ' +
      'credit, 1,000,000 µc) and `reason`, shown to the owner as written. Answers the top-up (pending_approval) whose `approvalUrl` is the page where ' +
      'the owner approves it (or pays at Stripe Checkout): give it to the owner. Nothing is credited until then; follow it with get_topup, and once ' +
      'it is settled the credit is the agent\'s (whoami), so a mint refused for credit can be asked again with a new key. `intentId` names a pending ' +
      "retained intent of the agent (execute_service's approval_required), which the gateway then runs once by itself (an intent has at most one " +
      `pending top-up: conflict). At most ${PENDING_TOPUPS_PER_AGENT_MAX} top-ups of an agent wait at once (conflict, \`reason\` pending_topups_limit). ` +
      'Refused for a frozen agent asking for itself (FROZEN; its owner still may), for a delegate (conflict, `reason` delegate_has_no_lots: credit ' +
      'its root), and without a payment provider (payment_unavailable). `idempotencyKey` is required: a retry MUST reuse the same key, and then ' +
      'answers the same top-up (the same key over HTTP is the same key).',
    kinds: EVERYONE,
    // The Stripe rail opens a Checkout Session at Stripe.
    annotations: { ...WRITE, openWorldHint: true },
    operation: 'requestTopup',
  },
  {
    name: 'register_agent',
    title: 'Register an agent',
    description:
      "Registers an agent identity (issuer and subject at the agent identity provider) under the owner, with optional allowances and " +
      '`caps` (perHoldUc, perPeriodUc over periodS). `idempotencyKey` is required: a retry MUST reuse the same key.',
    kinds: OWNER,
    annotations: WRITE,
    operation: 'registerAgent',
  },
  {
    name: 'update_agent',
    title: "Set an agent's caps and allowances",
    description:
      "Changes one of the owner's agents: `caps` (perHoldUc and perPeriodUc in microcredits, null = no cap; periodS), allowedServices, " +
      'allowedCategories, inboxAllowlist, name. Members left out keep their value. `ifVersion`: the mandate version get_mandate showed, to make the ' +
      'change only on it (another in force: 412 precondition_failed with `currentVersion`). `idempotencyKey` is optional; a retry should reuse it.',
    kinds: OWNER,
    annotations: { ...WRITE, destructiveHint: true },
    operation: 'updateAgent',
  },
  {
    name: 'set_mandate',
    title: "Replace an agent's mandate",
    description:
      "Replaces the mandate of one of the owner's agents, `id` (as PUT /v1/owner/agents/{id}/mandate): a new version (the mandate in force, normalised, writes none and is answered as it stands). Members left out " +
      'take their defaults, so send what get_mandate shows, changed. Budgets: up to 20 of {id, limitUc, period day|week|month|total, and ' +
      'at most one of merchantId, category, serviceId}; every budget that applies to a purchase must hold. `approvalAboveUc`: a purchase ' +
      'above it waits for the owner. `ifVersion`: the version get_mandate showed; if another change came first, precondition_failed ' +
      'names the version in force (`currentVersion`) and nothing changes. `idempotencyKey` is required: a retry MUST reuse the same key.',
    kinds: OWNER,
    annotations: { ...WRITE, destructiveHint: true },
    operation: 'setMandate',
  },
  {
    name: 'create_delegate',
    title: 'Register a delegate (a sub-agent)',
    description:
      'Registers a child agent under you (as POST /v1/agents/{id}/delegates; `id` is your own agent id, see whoami): same owner, its own ' +
      "identity (`identity.issuer`, your agent identity provider's issuer, and `identity.subject` there), and a `mandate` within yours (a member left out takes yours; delegation " +
      "none). Its purchases draw on your tree's credit and count against your budgets too. Refused with invalid_input and a `reason`: " +
      'budget_wider_than_parent, cap_wider_than_parent, approval_wider_than_parent, merchant_outside_parent, window_outside_parent, ' +
      'allowance_outside_parent, depth_exceeded, delegation_not_allowed. ' +
      'Listed only while your mandate allows delegates. `idempotencyKey` is required: a retry MUST reuse the same key.',
    kinds: AGENT,
    requires: 'delegation',
    annotations: WRITE,
    operation: 'createDelegate',
  },
  {
    name: 'freeze_agent',
    title: 'Freeze an agent',
    description:
      'Stops one of the owner\'s agents, and every delegate below it, from spending: every hold or execution they ask for is refused ' +
      'with FROZEN until it is unfrozen. `releaseHolds: true` also releases their outstanding holds now (credit back, budgets given back) ' +
      'and revokes those vouchers: each merchant holding one is told (voucher.revoked) and a capture is refused; without it, holds already ' +
      'taken stay capturable by their merchants. Answers the agent and the ' +
      'freeze report (released holds and credit, each merchant reached, its event\'s delivery state and, while it waits, when its next ' +
      'attempt is due: `nextAttemptAt`). Freezing a frozen agent without ' +
      'releaseHolds changes nothing; a retired agent is conflict (retirement already released everything). `idempotencyKey` is optional; a retry should reuse it.',
    kinds: OWNER,
    annotations: { ...WRITE, destructiveHint: true },
    operation: 'freezeAgent',
  },
  {
    name: 'unfreeze_agent',
    title: 'Unfreeze an agent',
    description: "Lets one of the owner's frozen agents spend again (a retired one never does: conflict). `idempotencyKey` is optional; a retry should reuse it.",
    kinds: OWNER,
    annotations: WRITE,
    operation: 'unfreezeAgent',
  },
];
