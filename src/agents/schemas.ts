// Agents as every face shows them: one schema each, registered once by the composition root.
import { Type } from '@sinclair/typebox';
import { CATEGORY_PATTERN, CategoryOrAny, Microcredits, Nullable, problemMembers, UnixSeconds } from '../platform/schemas.ts';
import { ALERT_THRESHOLDS_MAX, BUDGETS_PER_MANDATE_MAX, DELEGATION_DEPTH_MAX, MERCHANT_RULES_MAX, WIDER_THAN_PARENT_REASONS } from '../policy/mandate.ts';
import { BUDGET_PERIODS } from '../policy/periods.ts';
import { EFFECTIVE_STATUSES, PROFILE_PRESETS } from './service.ts';

export const ProfileSchema = Type.Object(
  {
    name: Type.String(),
    preset: Type.String({ enum: [...PROFILE_PRESETS] }),
    color: Type.String({ description: 'hex colour #rrggbb' }),
    avatarUrl: Nullable(Type.String({ description: 'where the owner reads the finalized avatar image' })),
  },
  { $id: 'AgentProfile' },
);

const Caps = Type.Object(
  {
    perHoldUc: Nullable(Microcredits('largest single hold; null = no cap; "0" = no purchase at all (every hold is more than 0)')),
    perPeriodUc: Nullable(Microcredits("most that the agent's own holds may take per rolling period; an ancestor's cap binds each delegate's own holds too (a subtree's total is a budget's to limit); null = no cap")),
    periodS: Type.Integer({ description: 'length of the cap period in seconds (rolling window)' }),
  },
  { additionalProperties: false },
);

export const AgentSchema = Type.Object(
  {
    id: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    status: Type.String({
      enum: ['active', 'frozen'],
      description: "the agent's own status, as its owner set it (freeze, unfreeze); a frozen or retired ancestor also stops it (403 FROZEN): see effectiveStatus",
    }),
    // Optional in the schema only: every answer made now has both, but a replay of an answer stored (under its
    // Idempotency-Key, for 24 h) before they existed has neither, and a required member missing would make the
    // replay's serializer fail.
    effectiveStatus: Type.Optional(
      Type.String({
        enum: [...EFFECTIVE_STATUSES],
        description:
          'what the agent may do now, its ancestors included: `retired` (for good: retiredAt), else `frozen` while the agent or any ancestor is ' +
          'frozen (frozenBy names which; every spend answers 403 FROZEN), else `active`. `status` stays the agent\'s own: unfreezing the agent ' +
          'itself does not lift an ancestor\'s freeze. Always present, except in a replay of an answer stored before 2026-12-03',
      }),
    ),
    frozenBy: Type.Optional(
      Nullable(
        Type.String({
          description:
            'the agent whose freeze stops this one: itself when its own status is frozen, else its nearest frozen ancestor (the `agentId` a 403 ' +
            'FROZEN names); null when none is frozen. Always present, except in a replay of an answer stored before 2026-12-03',
        }),
      ),
    ),
    identity: Type.Object({ issuer: Type.String(), subject: Type.String() }),
    parentId: Nullable(Type.String({ description: 'the agent that registered this delegate; null for an agent its owner registered' })),
    depth: Type.Integer({ minimum: 0, description: 'levels above the agent: 0 for a root, 1 for its delegates, …' }),
    retiredAt: Nullable(UnixSeconds('the delegate (or an ancestor) was retired: it can no longer spend; null while not retired')),
    allowedServices: Type.Array(Type.String(), { description: 'service ids the agent may execute; "*" = all, [] = none' }),
    allowedCategories: Type.Array(Type.String(), { description: 'offer categories the agent may buy; "*" = all, [] = none' }),
    inboxAllowlist: Type.Array(Type.String(), { description: 'mailboxes the mail service may read' }),
    caps: Caps,
    profile: Type.Ref('AgentProfile'),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'Agent' },
);


const Budget = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9._:-]+$', description: 'names the budget within the mandate; its usage follows it across versions (a new period or time zone counts, in the period now falls in, the holds made since that period began)' }),
    limitUc: Microcredits('at most this much per period (held plus captured, less refunded)'),
    period: Type.String({ enum: [...BUDGET_PERIODS], description: 'day, week (ISO, from Monday) or month in the mandate\'s time zone, or total (never resets)' }),
    merchantId: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'only purchases from this merchant count' })),
    category: Type.Optional(Type.String({ pattern: CATEGORY_PATTERN, description: 'only spending in this category (a lower-case slug, as offers have) counts' })),
    serviceId: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'only this built-in service counts' })),
  },
  { additionalProperties: false, description: 'a budget without merchantId, category or serviceId covers all spending; at most one of them' },
);

const MerchantAllow = Nullable(Type.Array(Type.String({ minLength: 1, maxLength: 253 }), { maxItems: MERCHANT_RULES_MAX, description: 'only these merchants (ids or verified domains); null: any not denied; []: none. An id must name a registered merchant (400 otherwise); a domain may be named before its merchant registers' }));
const MerchantDeny = Type.Array(Type.String({ minLength: 1, maxLength: 253 }), { maxItems: MERCHANT_RULES_MAX, description: 'never these merchants (ids or verified domains). An id must name a registered merchant (400 otherwise), so a mistyped one does not deny nothing; a name on both allow and deny is refused (400), since it could never be paid (names are compared as written: a merchant\'s id on one list and its domain on the other are not, since a merchant may move domains; deny wins at the hold)' });
const MerchantRules = Type.Object({ allow: MerchantAllow, deny: MerchantDeny }, { additionalProperties: false });

/**
 * The merchant rules as a PUT or a delegate's registration states them: a member left out takes its default (allow
 * null, deny []; a delegate's, its parent's), as a rule left out of the mandate does (found from outside: `{deny: […]}`
 * alone was refused for want of `allow`).
 */
export const MerchantRulesInput = Type.Object(
  { allow: Type.Optional(MerchantAllow), deny: Type.Optional(MerchantDeny) },
  { additionalProperties: false, description: 'a member left out takes its default: allow null (any merchant not denied), deny []; for a delegate, its parent\'s' },
);

/** The rules of a mandate, as PUT takes them and every face shows them. */
export const MandateRulesProperties = {
  allowedServices: Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 20, description: 'built-in services the agent may execute; "*" = all, [] = none' }),
  allowedCategories: Type.Array(CategoryOrAny, { maxItems: 100, description: 'offer categories (lower-case slugs) the agent may buy; "*" = all, [] = none' }),
  caps: Type.Object(
    {
      perHoldUc: Nullable(Microcredits('largest single hold; null = no cap; "0" = no purchase at all (every hold is more than 0)')),
      perPeriodUc: Nullable(Microcredits("most that the agent's own holds may take per rolling period; an ancestor's cap binds each delegate's own holds too (a subtree's total is a budget's to limit); null = no cap")),
      periodS: Type.Integer({ minimum: 60, maximum: 31_536_000, description: 'the rolling period of perPeriodUc, in seconds' }),
    },
    { additionalProperties: false },
  ),
  budgets: Type.Array(Budget, { maxItems: BUDGETS_PER_MANDATE_MAX, description: `up to ${BUDGETS_PER_MANDATE_MAX}; every budget that applies to a purchase must hold` }),
  merchants: MerchantRules,
  approvalAboveUc: Nullable(Microcredits('a purchase above this waits for the owner\'s approval; null = none does')),
  notBefore: Nullable(UnixSeconds('the mandate is in force from')),
  notAfter: Nullable(UnixSeconds('the mandate is no longer in force from')),
  timeZone: Type.String({ minLength: 1, maxLength: 64, description: 'IANA time zone of the day, week and month budgets, e.g. Europe/Paris or America/New_York. Name a place: the old fixed-offset names (EST, Etc/GMT+5, which is UTC−5) keep no daylight saving time, so such budgets reset an hour off in summer' }),
  alertThresholds: Type.Array(Type.Integer({ minimum: 1, maximum: 100 }), { maxItems: ALERT_THRESHOLDS_MAX, description: 'percent of a budget at which `budget.threshold` fires, once per period each; kept in ascending order, a value given twice once (a budget id given twice is refused: two budgets of one id would be ambiguous, two equal thresholds are not)' }),
  delegation: Type.Object(
    {
      allowed: Type.Boolean({ description: 'the agent may register delegates (POST /v1/agents/{id}/delegates); true exactly when maxDepth ≥ 1' }),
      maxDepth: Type.Integer({ minimum: 0, maximum: DELEGATION_DEPTH_MAX, description: 'how many levels of delegates may be registered below the agent (its children are 1). Narrowed, it stops new registrations; delegates already registered stay, each hold of theirs still checked against every ancestor\'s rules (retire one to remove it)' }),
    },
    {
      additionalProperties: false,
      description: "Delegates: default {allowed: false, maxDepth: 0}. A delegate's mandate must lie within its parent's (every parent budget matched by one of the same scope and period at most as large, merchants, window, allowances and depth inside); a child's holds also count against every ancestor's budgets.",
      examples: [{ allowed: true, maxDepth: 2 }],
    },
  ),
};

export const BudgetUsageSchema = Type.Object(
  {
    budgetId: Type.String(),
    period: Type.String({ enum: [...BUDGET_PERIODS] }),
    limitUc: Microcredits(),
    merchantId: Type.Optional(Type.String()),
    merchantName: Type.Optional(Type.String({ description: "the name of the merchant merchantId names, when that merchant exists (as it registered it, not verified): what to show a person" })),
    category: Type.Optional(Type.String()),
    serviceId: Type.Optional(Type.String()),
    periodStart: UnixSeconds('the current period began (0 for total)'),
    resetsAt: Nullable(UnixSeconds('the next period begins; null for total')),
    spentUc: Microcredits('held plus captured, less refunded, in the current period'),
    remainingUc: Microcredits('what the current period still allows: limitUc less spentUc, and 0 when spentUc is at or above limitUc (spent passes the limit when the owner lowered it, or narrowed or rescoped the budget, after the spend; what was taken stays counted)'),
  },
  { $id: 'BudgetUsage' },
);

export const MandateSchema = Type.Object(
  {
    agentId: Type.String(),
    version: Type.Integer({ minimum: 1, description: 'every change makes a new version; old ones stay readable' }),
    createdAt: UnixSeconds('this version was made'),
    hash: Type.String({ description: 'base64url SHA-256 of the version\'s RFC 8785 canonical JSON (every member above `hash` and `usage` excluded): what vouchers, receipts and evidence name as `mandate`' }),
    ...MandateRulesProperties,
    usage: Type.Array(Type.Ref('BudgetUsage'), { description: "each budget's current period" }),
  },
  { $id: 'Mandate', description: 'An agent\'s mandate in force: the owner\'s rules, versioned and hashed, and its budgets\' usage' },
);

export const MandateVersionSchema = Type.Object(
  {
    agentId: Type.String(),
    version: Type.Integer({ minimum: 1 }),
    createdAt: UnixSeconds('made'),
    hash: Type.String(),
    canonical: Type.String({ description: 'the RFC 8785 canonical JSON the hash is taken over, byte for byte' }),
  },
  { $id: 'MandateVersion' },
);

/**
 * The 400 of a route that writes a mandate a delegate's must lie within (registration of a delegate, PUT …/mandate,
 * PATCH of allowances and caps): a Problem, and when the mandate is wider than the parent's, which rule (`reason`),
 * the delegate's member (`pointer`) and the parent's (`parent`), so no client parses `detail` for them.
 */
const WiderParent = Type.Object(
  {
    agentId: Type.String({ description: 'the parent agent' }),
    pointer: Type.String({ description: "the parent's member the delegate's is held to: an RFC 6901 JSON pointer into the parent's mandate, e.g. /budgets/0" }),
    value: Type.Unknown({
      description:
        "that member's value as the parent's GET …/mandate shows it: a budget {id, limitUc, period, merchantId | category | serviceId}, an amount " +
        '(a decimal string of µc, or null for none), a number (periodS, notBefore, notAfter, maxDepth), a time zone, a list, or a merchant rule entry',
    }),
  },
  { additionalProperties: false, description: "with a `reason` of a mandate wider than its parent's: what of the parent's mandate it is held to" },
);

const WiderReason = Type.String({
  enum: [...WIDER_THAN_PARENT_REASONS, 'delegation_not_allowed'],
  description: "invalid_input for a delegate's mandate: the rule by which it is not within its parent's (or the parent allows no delegates)",
});

export const MandateProblemSchema = Type.Object(
  {
    ...problemMembers(),
    reason: Type.Optional(WiderReason),
    pointer: Type.Optional(
      Type.String({
        description:
          "with a `reason` of a mandate wider than its parent's: the delegate's member that is wider, as an RFC 6901 JSON pointer into its mandate's rules " +
          "(as GET …/mandate shows them; a registration's `mandate` member, its members left out filled from the parent's), e.g. /budgets/1/limitUc, " +
          "/caps/perHoldUc, /merchants/allow/0; a list (/budgets, /merchants/deny) when what is missing from it is the parent's member",
      }),
    ),
    parent: Type.Optional(WiderParent),
    wider: Type.Optional(
      Type.Array(
        Type.Object(
          {
            reason: WiderReason,
            detail: Type.String({ description: 'what the rule asks, as the problem\'s `detail` says it for the first' }),
            pointer: Type.String({ description: "the delegate's member that is wider, as `pointer`" }),
            parent: WiderParent,
          },
          { additionalProperties: false },
        ),
        { description: "with a `reason` of a mandate wider than its parent's: every rule by which it is, in the order asked; the first is the one `reason`, `pointer` and `parent` name" },
      ),
    ),
  },
  {
    $id: 'MandateProblem',
    additionalProperties: true,
    description: "RFC 9457 problem details (as Problem); a delegate's mandate wider than its parent's adds `reason`, `pointer`, `parent` and `wider`",
  },
);

/**
 * The problem body of a purchase the mandate refused or holds for its owner (402 of a voucher mint and an x402
 * authorize): every member a 402 may add, each optional, so that a client generated from the document reads the
 * rule's members typed (found from outside: they were a `Problem`'s untyped members). Members beyond these pass
 * unchanged, as a `Problem`'s do.
 */
export const SpendingProblemSchema = Type.Object(
  {
    ...problemMembers('stable machine-readable code: CAP_EXCEEDED, INSUFFICIENT_CREDITS, approval_required, …'),
    reason: Type.Optional(
      Type.String({
        description: 'the rule: per_hold_cap, per_period_cap, budget_exceeded or max_uc (CAP_EXCEEDED); above_approval_threshold (approval_required); see /docs/errors',
      }),
    ),
    agentId: Type.Optional(Type.String({ description: "the ancestor whose rule it is, when it is not the agent's own" })),
    budget: Type.Optional(
      Type.Object(
        {
          id: Type.String({ description: "the budget's id in its mandate" }),
          agentId: Type.Optional(Type.String({ description: "the ancestor whose budget it is, when it is not the agent's own" })),
          limitUc: Microcredits('its limit'),
          remainingUc: Microcredits('what its current period still allows'),
          resetsAt: Nullable(UnixSeconds('its next period begins; null for a total budget')),
        },
        { additionalProperties: true, description: 'with budget_exceeded: the budget that would be exceeded' },
      ),
    ),
    approvalUrl: Type.Optional(Type.String({ description: "with approval_required: the gateway's approval page, for the owner" })),
    intentId: Type.Optional(Type.String({ description: 'with approval_required: the purchase approval (pur_…) the retry with the same key is decided by' })),
    intent: Type.Optional(Type.Object({}, { additionalProperties: true, description: 'with approval_required: the purchase as it was asked, `{offerId, agentId, maxUc?}` (an x402 authorize: `amountUc` and `resource` too)' })),
    purchase: Type.Optional(Type.Object({}, { additionalProperties: true, description: 'with approval_required: the purchase approval, as GET /v1/payments/purchases/{id} shows it (PurchaseApproval)' })),
    instructions: Type.Optional(Type.String({ description: 'with approval_required: what to tell the owner, in words' })),
    error: Type.Optional(Type.String({ description: "an x402 authorize's refusal: the credit binding draft's code, where it has one (insufficient_credits, …)" })),
  },
  { $id: 'SpendingProblem', additionalProperties: true, description: 'RFC 9457 problem details of a purchase refused or held by the mandate, or not covered by the credit' },
);

export const AGENT_SCHEMAS = [ProfileSchema, AgentSchema, BudgetUsageSchema, MandateSchema, MandateVersionSchema, MandateProblemSchema, SpendingProblemSchema];
