// A mandate: the owner's rules for one agent, the single source of its spending policy. This file owns what a
// mandate is (its rules, their defaults and limits), its canonical form and its hash; `spending.ts` evaluates
// it. Every change makes a new version whose document (the rules, the agent, the version and when it was
// made) is serialised as RFC 8785 canonical JSON and hashed with SHA-256 (base64url), so that a voucher, a
// receipt or an evidence bundle can name exactly the rules a purchase was made under, and anyone can check
// that name against the document.
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { memberRefusal } from '../platform/errors.ts';
import { normaliseDomain } from '../platform/hostnames.ts';
import { formatUc, parseUc } from '../platform/money.ts';
import { isTimeZone, sameTimeZone, spelledTimeZone, type BudgetPeriod } from './periods.ts';

export const BUDGETS_PER_MANDATE_MAX = 20;
export const MERCHANT_RULES_MAX = 100;
export const ALERT_THRESHOLDS_DEFAULT = [80, 100] as const;
export const ALERT_THRESHOLDS_MAX = 5;
export const TIME_ZONE_DEFAULT = 'UTC';
/** Today's default period for the legacy rolling cap (`caps.periodS`). */
export const CAP_PERIOD_S_DEFAULT = 86_400;
/** The most levels of delegates a mandate may allow below its agent (and so the deepest a tree can be). */
export const DELEGATION_DEPTH_MAX = 8;

/** One budget: at most `limitUc` per period, over all spending or one merchant, category or built-in service. */
export interface Budget {
  id: string;
  limitUc: string;
  period: BudgetPeriod;
  merchantId?: string;
  category?: string;
  serviceId?: string;
}

/** Which merchants the agent may buy from: by merchant id or verified domain. */
export interface MerchantRules {
  /** Only these, when set; null: any merchant not denied. */
  allow: string[] | null;
  deny: string[];
}

/**
 * Whether the agent may register delegates, and how many levels may exist below it (its children count 1).
 * `allowed` exactly when `maxDepth` ≥ 1.
 */
export interface DelegationRules {
  allowed: boolean;
  maxDepth: number;
}

/** The rules of a mandate, as the owner writes them (amounts as decimal strings, times as Unix seconds). */
export interface MandateRules {
  allowedServices: string[];
  allowedCategories: string[];
  /** The rolling caps agents had before mandates (a view kept for PATCH /v1/owner/agents/{id}). */
  caps: { perHoldUc: string | null; perPeriodUc: string | null; periodS: number };
  budgets: Budget[];
  merchants: MerchantRules;
  /** A purchase above this waits for the owner's approval; null: none does. */
  approvalAboveUc: string | null;
  notBefore: number | null;
  notAfter: number | null;
  /** The IANA time zone in which day, week and month budgets reset. */
  timeZone: string;
  /** Percentages of a budget at which `budget.threshold` fires, once per period each. */
  alertThresholds: number[];
  /** Delegates: none unless allowed. */
  delegation: DelegationRules;
}

/** The rules kept on the agent row beside the allowance and cap columns (what the hold pass reads). */
export type ExtendedRules = Pick<MandateRules, 'budgets' | 'merchants' | 'approvalAboveUc' | 'notBefore' | 'notAfter' | 'timeZone' | 'alertThresholds' | 'delegation'>;

/** What a version's hash is taken over. */
export interface MandateDocument extends MandateRules {
  agentId: string;
  version: number;
  createdAt: number;
}

export const NO_MERCHANT_RULES: MerchantRules = { allow: null, deny: [] };
export const NO_DELEGATION: DelegationRules = { allowed: false, maxDepth: 0 };

/** The rules of an agent that never had more than today's allowances and caps. */
export function defaultExtendedRules(): ExtendedRules {
  return { budgets: [], merchants: { ...NO_MERCHANT_RULES }, approvalAboveUc: null, notBefore: null, notAfter: null, timeZone: TIME_ZONE_DEFAULT, alertThresholds: [...ALERT_THRESHOLDS_DEFAULT], delegation: { ...NO_DELEGATION } };
}

/** The extended rules as stored on an agent row (JSONB), with every member present. */
export function extendedRulesOf(stored: Partial<ExtendedRules> | null | undefined): ExtendedRules {
  return { ...defaultExtendedRules(), ...stored };
}

/** The RFC 8785 canonical JSON of a mandate version: the exact bytes its hash is taken over. */
export function canonicalMandate(document: MandateDocument): string {
  const text = canonicalize(document);
  if (text === undefined) throw new Error(`mandate of agent ${document.agentId} has no JSON form`);
  return text;
}

/** The version's name: base64url SHA-256 of its canonical JSON. */
export function mandateHash(canonical: string): string {
  return createHash('sha256').update(canonical, 'utf8').digest('base64url');
}

/**
 * The rules a version's document states, with the default of every rule the document predates filled in (a version
 * written before `delegation` existed allows no delegates, as the agent row reads it).
 */
export function rulesOfDocument(document: MandateDocument): MandateRules {
  const { agentId: _agentId, version: _version, createdAt: _createdAt, ...rules } = document;
  return { ...defaultExtendedRules(), ...rules };
}

/**
 * Whether two sets of (checked) rules are one mandate: the same RFC 8785 canonical JSON, so the same hash for the
 * same agent, version and time. Lists compare in order (a budget's place decides which refusal names it).
 */
export function sameRules(a: MandateRules, b: MandateRules): boolean {
  return canonicalize(a) === canonicalize(b);
}

/** Refuses the member of the rules at `path` (from their root: a face names it from the request's, `memberRefusal`). */
function refuse(path: string, message: string): never {
  throw memberRefusal(path, message);
}

/**
 * Checks rules the schema cannot: unique budget ids, one scope per budget, amounts that parse, a time zone the
 * gateway knows, a validity window that is not empty, known service ids. Returns the rules with unique lists.
 */
export function checkedRules(rules: MandateRules, knownServiceIds: readonly string[]): MandateRules {
  const ids = new Set<string>();
  for (const [index, budget] of rules.budgets.entries()) {
    if (ids.has(budget.id)) refuse(`budgets/${index}/id`, `"${budget.id}" is used twice; budget ids are unique within a mandate`);
    ids.add(budget.id);
    const scopes = [budget.merchantId, budget.category, budget.serviceId].filter((scope) => scope !== undefined);
    if (scopes.length > 1) refuse(`budgets/${index}`, 'names more than one of merchantId, category and serviceId; a budget covers one of them, or all spending');
    if (parseUc(budget.limitUc, `budgets/${index}/limitUc`) === 0n) refuse(`budgets/${index}/limitUc`, 'must be more than 0');
    if (budget.serviceId !== undefined && !knownServiceIds.includes(budget.serviceId)) {
      refuse(`budgets/${index}/serviceId`, `"${budget.serviceId}" is not a built-in service; known: ${knownServiceIds.join(', ')}`);
    }
  }
  if (!isTimeZone(rules.timeZone)) refuse('timeZone', `"${rules.timeZone}" is not an IANA time zone this gateway knows (e.g. UTC, Europe/Paris)`);
  if (rules.notBefore !== null && rules.notAfter !== null && rules.notAfter <= rules.notBefore) refuse('notAfter', 'must be later than notBefore');
  if (rules.approvalAboveUc !== null) parseUc(rules.approvalAboveUc, 'approvalAboveUc');
  if (rules.delegation.allowed !== rules.delegation.maxDepth >= 1) {
    refuse('delegation/allowed', 'must be true exactly when maxDepth is at least 1 (the levels of delegates allowed below the agent)');
  }
  for (const [index, id] of rules.allowedServices.entries()) {
    if (id !== '*' && !knownServiceIds.includes(id)) refuse(`allowedServices/${index}`, `"${id}" is not a built-in service; known: ${knownServiceIds.join(', ')} or "*"`);
  }
  const unique = (values: readonly string[]) => [...new Set(values)];
  const thresholds = unique(rules.alertThresholds.map(String)).map(Number).sort((a, b) => a - b);
  // Amounts as the gateway writes them ("0005" is "5"), and the zone in IANA's case (`spelledTimeZone`), so the
  // document, its hash and every face show one form of each.
  const amount = (text: string | null) => (text === null ? null : formatUc(parseUc(text)));
  const allow = rules.merchants.allow === null ? null : unique(rules.merchants.allow.map((name, index) => merchantName(name, `merchants/allow/${index}`)));
  const deny = unique(rules.merchants.deny.map((name, index) => merchantName(name, `merchants/deny/${index}`)));
  return {
    ...rules,
    timeZone: spelledTimeZone(rules.timeZone),
    budgets: rules.budgets.map((budget) => ({ ...budget, limitUc: formatUc(parseUc(budget.limitUc)) })),
    caps: { ...rules.caps, perHoldUc: amount(rules.caps.perHoldUc), perPeriodUc: amount(rules.caps.perPeriodUc) },
    approvalAboveUc: amount(rules.approvalAboveUc),
    allowedServices: unique(rules.allowedServices),
    allowedCategories: unique(rules.allowedCategories),
    merchants: { allow, deny },
    alertThresholds: thresholds,
  };
}

/**
 * Refuses merchant rules that name one merchant on both lists as the request states them: deny would win, so the
 * merchant could never be paid, and a mandate that says two things of one merchant is a mistake to be told, not
 * stored (found from outside, 2026-12-06). Only the lists the request states: a delegate's registration that
 * states `deny` alone keeps its parent's `allow`, and denying one of the merchants its parent allows is narrowing,
 * not a contradiction (found by the confirmation check of the same day). Names are compared once normalised; a
 * domain on one list and a merchant's id on the other are not compared (the merchant may move domains).
 */
export function refuseAllowedAndDenied(stated: { allow?: readonly string[] | null; deny?: readonly string[] } | undefined): void {
  if (!stated?.allow || !stated.deny) return;
  const denied = stated.deny.map((name, index) => merchantName(name, `merchants/deny/${index}`));
  stated.allow.forEach((name, index) => {
    const at = denied.indexOf(merchantName(name, `merchants/allow/${index}`));
    if (at >= 0) refuse(`merchants/allow/${index}`, `names "${denied[at]}", which the deny list names too (its item ${at}): a merchant on both lists is denied, so keep it on one`);
  });
}

/** A budget's period in words: "per day", …, and "in all" for `total` (found from outside: "1000000 µc per total"). */
export function periodWords(period: string): string {
  return period === 'total' ? 'in all' : `per ${period}`;
}

/** A merchant's id (`newId('mer')`: no dot), as a merchant rule may name one; anything else there is a domain. */
export const MERCHANT_ID = /^mer_[^.]+$/;

/**
 * A merchant rule's entry in the one form it is compared in: an id in lower case, or a domain as merchants' are
 * stored (normalised: lower case, IDNA ASCII). What is neither is refused: a deny entry that can match no merchant
 * (" mer_…", "examplecom") silently denied nothing (found from outside).
 */
function merchantName(name: string, path: string): string {
  if (MERCHANT_ID.test(name.toLowerCase())) return name.toLowerCase();
  const domain = normaliseDomain(name);
  if (!domain.ok) refuse(path, `"${name}" is neither a merchant id (mer_…) nor a domain: it ${domain.reason}`);
  return domain.domain;
}

/** The rules by which a delegate's mandate may be wider than its parent's: a refusal's `reason`. */
export const WIDER_THAN_PARENT_REASONS = [
  'budget_wider_than_parent',
  'cap_wider_than_parent',
  'approval_wider_than_parent',
  'merchant_outside_parent',
  'window_outside_parent',
  'allowance_outside_parent',
  'depth_exceeded',
] as const;

/** A member of the parent's mandate a delegate's is held to: where it is (RFC 6901, into the rules) and its value there. */
export interface ParentMember {
  pointer: string;
  value: Budget | string | number | null | readonly string[];
}

/**
 * Why a delegate's mandate is not within its parent's: the rule's name (the problem's `reason`), what broke it, the
 * delegate's member that is wider (`pointer`, RFC 6901 into its rules, as GET …/mandate shows them) and the parent's
 * member it is held to, so a client needs no parsing of `detail` to show which budget, cap or merchant, and the figure.
 */
export interface WiderThanParent {
  reason: (typeof WIDER_THAN_PARENT_REASONS)[number];
  detail: string;
  pointer: string;
  parent: ParentMember;
}

/** The merchants a merchant rule's entry names (an id: itself; a verified domain: each merchant verified on it). */
export type MerchantsOf = (name: string) => readonly string[];

const sameScope = (a: Budget, b: Budget) => a.merchantId === b.merchantId && a.category === b.category && a.serviceId === b.serviceId;

function scopeOf(budget: Budget): string {
  if (budget.merchantId !== undefined) return `merchant ${budget.merchantId}`;
  if (budget.category !== undefined) return `category ${budget.category}`;
  if (budget.serviceId !== undefined) return `service ${budget.serviceId}`;
  return 'all spending';
}

/** The index of the first item `child` allows that `parent` does not ("*" allows all), or -1 when it lies within. */
function allowanceOutside(child: readonly string[], parent: readonly string[]): number {
  if (parent.includes('*')) return -1;
  return child.findIndex((item) => item === '*' || !parent.includes(item));
}

/** A limit (null: none) is within the parent's when the parent has none, or the child has one at most as large. */
function limitWithin(child: string | null, parent: string | null): boolean {
  return parent === null || (child !== null && BigInt(child) <= BigInt(parent));
}

/** The same member of the parent's rules: where the delegate's is wider, the parent's of the same name holds its figure. */
function sameMember(reason: WiderThanParent['reason'], detail: string, pointer: string, value: ParentMember['value']): WiderThanParent {
  return { reason, detail, pointer, parent: { pointer, value } };
}

/**
 * Every way the per-hold and rolling caps are wider than the parent's. A rolling cap is within when its
 * amount is at most the parent's over a period at least as long: any window of the parent's length then lies
 * inside one of the child's, in which the child takes at most its own cap. A shorter period is not comparable
 * (a tenth of the amount per tenth of the time may take it all, and more, in the parent's window), so refused.
 */
function capsWider(child: MandateRules['caps'], parent: MandateRules['caps']): WiderThanParent[] {
  const wider = (member: keyof MandateRules['caps'], detail: string) => sameMember('cap_wider_than_parent', detail, `/caps/${member}`, parent[member]);
  const found: WiderThanParent[] = [];
  if (!limitWithin(child.perHoldUc, parent.perHoldUc)) found.push(wider('perHoldUc', `caps.perHoldUc must be at most the parent's, ${parent.perHoldUc} µc (null, no cap, is wider)`));
  if (parent.perPeriodUc === null) return found;
  if (!limitWithin(child.perPeriodUc, parent.perPeriodUc)) {
    found.push(wider('perPeriodUc', `caps.perPeriodUc must be at most the parent's, ${parent.perPeriodUc} µc per ${parent.periodS} s (null, no cap, is wider)`));
  }
  if (child.periodS < parent.periodS) found.push(wider('periodS', `caps.periodS must be at least the parent's, ${parent.periodS} s: a cap over a shorter period is not within the parent's`));
  return found;
}

/**
 * The first rule by which a delegate's (checked) rules are wider than its parent's (everyWayWider lists them all), or undefined when they lie
 * within: each parent budget is matched by a child budget of the same scope and period whose limit is at most
 * the parent's (the child may add budgets); the per-hold cap, the rolling cap (capsWider) and the approval
 * threshold are at most the parent's when the parent has one (none is wider than any); the merchant allowlist
 * is a subset (when the parent has one) and the denylist a superset, compared by the merchants each entry names
 * (`merchantsOf`); the validity window lies inside; the allowed services and categories are subsets; and the levels
 * of delegates the child allows are fewer than the parent's. Asked of the mandate being written only: a parent
 * narrowed later binds its children through the chain's evaluation at each hold (spending.ts), not by rewriting or
 * refusing anything.
 */
export function widerThanParent(child: MandateRules, parent: MandateRules, merchantsOf: MerchantsOf = (name) => [name]): WiderThanParent | undefined {
  return everyWayWider(child, parent, merchantsOf)[0];
}

/**
 * Every way a delegate's rules are wider than its parent's, in the order `widerThanParent` asks: each of the parent's
 * budgets not matched, the caps, the approval threshold, the merchant rules, each end of the window, each allowance
 * and the depth, one entry each (found from outside: a parent narrowed in several rules left the owner to find them
 * one refusal at a time).
 */
export function everyWayWider(child: MandateRules, parent: MandateRules, merchantsOf: MerchantsOf = (name) => [name]): WiderThanParent[] {
  const approval = limitWithin(child.approvalAboveUc, parent.approvalAboveUc)
    ? undefined
    : sameMember('approval_wider_than_parent', `approvalAboveUc must be at most the parent's, ${parent.approvalAboveUc} µc (null, no approval, is wider)`, '/approvalAboveUc', parent.approvalAboveUc);
  return [
    ...budgetsWider(child, parent),
    ...capsWider(child.caps, parent.caps),
    approval,
    merchantsOutside(child.merchants, parent.merchants, merchantsOf),
    ...outsideParent(child, parent),
  ].filter((wider): wider is WiderThanParent => wider !== undefined);
}

/**
 * A parent budget the child's budgets do not match (same scope and period, a limit at most the parent's; for a day,
 * week or month, periods that begin when the parent's do: the same time zone). A child's day in another zone
 * straddles two of the parent's days, so by its own mandate it could take its limit in each half of one parent day.
 * The child's wider member is the limit of its budget of that scope and period, or its list of budgets when it has
 * none such, or its time zone.
 */
function budgetsWider(child: MandateRules, parent: MandateRules): WiderThanParent[] {
  const sameZone = sameTimeZone(child.timeZone, parent.timeZone);
  const wider: WiderThanParent[] = [];
  for (const [index, budget] of parent.budgets.entries()) {
    const limitUc = BigInt(budget.limitUc);
    const sameKind = [...child.budgets.entries()].filter(([, mine]) => sameScope(mine, budget) && mine.period === budget.period);
    const matches = sameKind.filter(([, mine]) => BigInt(mine.limitUc) <= limitUc);
    if (matches.length > 0 && !sameZone && budget.period !== 'total') {
      const detail = `the parent's budget "${budget.id}" counts ${periodWords(budget.period)} from midnight in ${parent.timeZone}: a budget within it counts in the same time zone (timeZone "${parent.timeZone}", not "${child.timeZone}")`;
      wider.push(sameMember('budget_wider_than_parent', detail, '/timeZone', parent.timeZone));
    } else if (matches.length === 0) {
      wider.push({
        reason: 'budget_wider_than_parent',
        detail: `the parent's budget "${budget.id}" (${budget.limitUc} µc ${periodWords(budget.period)}, ${scopeOf(budget)}) needs a budget of the same scope and period of at most ${budget.limitUc} µc`,
        pointer: sameKind[0] ? `/budgets/${sameKind[0][0]}/limitUc` : '/budgets',
        parent: { pointer: `/budgets/${index}`, value: budget },
      });
    }
  }
  return wider;
}

/**
 * Where the child's merchant rules reach outside the parent's, compared by merchant (`merchantsOf`): an allow entry
 * naming a merchant the parent's allowlist does not (or no allowlist under a parent's), a parent's deny entry naming
 * a merchant the child's denylist does not.
 */
function merchantsOutside(child: MerchantRules, parent: MerchantRules, merchantsOf: MerchantsOf): WiderThanParent | undefined {
  const merchants = (names: readonly string[]) => new Set(names.flatMap((name) => merchantsOf(name)));
  if (parent.allow !== null) {
    const allowed = merchants(parent.allow);
    const outside = child.allow === null ? -1 : child.allow.findIndex((name) => merchantsOf(name).some((id) => !allowed.has(id)));
    if (child.allow === null || outside >= 0) {
      return {
        reason: 'merchant_outside_parent',
        detail: `merchants.allow must be a subset of the parent's: ${parent.allow.join(', ') || '(none)'}`,
        pointer: child.allow === null ? '/merchants/allow' : `/merchants/allow/${outside}`,
        parent: { pointer: '/merchants/allow', value: parent.allow },
      };
    }
  }
  const denied = merchants(child.deny);
  const dropped = parent.deny.findIndex((name) => merchantsOf(name).some((id) => !denied.has(id)));
  if (dropped < 0) return undefined;
  const missing = [...merchants(parent.deny)].sort().filter((id) => !denied.has(id));
  return {
    reason: 'merchant_outside_parent',
    detail: `merchants.deny must keep the parent's denials: ${missing.join(', ')}`,
    pointer: '/merchants/deny',
    parent: { pointer: `/merchants/deny/${dropped}`, value: parent.deny[dropped]! },
  };
}

/** Where the child reaches outside its parent otherwise: each end of the validity window, each allowance, delegation depth. */
function outsideParent(child: MandateRules, parent: MandateRules): WiderThanParent[] {
  const wider: WiderThanParent[] = [];
  if (parent.notBefore !== null && (child.notBefore === null || child.notBefore < parent.notBefore)) {
    wider.push(sameMember('window_outside_parent', `notBefore must be at or after the parent's, ${parent.notBefore}`, '/notBefore', parent.notBefore));
  }
  if (parent.notAfter !== null && (child.notAfter === null || child.notAfter > parent.notAfter)) {
    wider.push(sameMember('window_outside_parent', `notAfter must be at or before the parent's, ${parent.notAfter}`, '/notAfter', parent.notAfter));
  }
  for (const member of ['allowedServices', 'allowedCategories'] as const) {
    const outside = allowanceOutside(child[member], parent[member]);
    if (outside >= 0) {
      wider.push({
        reason: 'allowance_outside_parent',
        detail: `${member} must be a subset of the parent's: ${parent[member].join(', ') || '(none)'}`,
        pointer: `/${member}/${outside}`,
        parent: { pointer: `/${member}`, value: parent[member] },
      });
    }
  }
  if (child.delegation.maxDepth > Math.max(0, parent.delegation.maxDepth - 1)) {
    const detail = `the parent allows ${parent.delegation.maxDepth} level(s) of delegates below it: this delegate may allow at most ${Math.max(0, parent.delegation.maxDepth - 1)}`;
    wider.push(sameMember('depth_exceeded', detail, '/delegation/maxDepth', parent.delegation.maxDepth));
  }
  return wider;
}
