// Agent management: owners register, read, update, freeze/unfreeze their agents and set their profiles
// and avatars. Every owner method takes the owner id of the caller and treats another owner's agent as not
// found. The ledger, execute and payments read and lock agent rows through here, and the credential
// verifier reads them (never writes) through its `AgentLookup`, which this service satisfies.
import { ApiError, memberRefusal, refusingMembersAt } from '../platform/errors.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { pageBySeq } from '../platform/db/paging.ts';
import type { Page } from '../platform/schemas.ts';
import { actingAgent, actsFor, type Actor } from './acting.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, parseUc } from '../platform/money.ts';
import {
  CAP_PERIOD_S_DEFAULT,
  canonicalMandate,
  checkedRules,
  defaultExtendedRules,
  DELEGATION_DEPTH_MAX,
  everyWayWider,
  extendedRulesOf,
  mandateHash,
  MERCHANT_ID,
  NO_DELEGATION,
  refuseAllowedAndDenied,
  rulesOfDocument,
  sameRules,
  type MandateDocument,
  type MandateRules,
  type MerchantsOf,
  type WiderThanParent,
} from '../policy/mandate.ts';
import { principalScope, type Principal } from '../platform/principal.ts';
import { periodOf } from '../policy/periods.ts';
import { frozenRefusal, usageOf, type Usage } from '../policy/spending.ts';
import { rearmBudgetAlerts, recountRedefinedBudgets, type RedefinedBudget } from '../policy/budget-usage.ts';
import * as store from './store.ts';

/** The agent row other features read and lock through this service (never through its store). */
export type { AgentRow, AgentWithOwnerRow, CredentialAgentRow } from './store.ts';

export const PROFILE_PRESETS = ['letter', 'robot', 'abstract', 'image'] as const;
export type ProfilePreset = (typeof PROFILE_PRESETS)[number];
export const DEFAULT_PROFILE_COLOR = '#4f46e5';
export const AVATAR_TYPES = ['image/png', 'image/jpeg', 'image/webp'] as const;
export type AvatarType = (typeof AVATAR_TYPES)[number];
export const AVATAR_BYTES_MAX = 262_144;
export const AVATAR_UPLOAD_LIFETIME_S = 900;

export interface AgentProfile {
  name: string;
  preset: string;
  color: string;
  avatarUrl: string | null;
}

export interface Agent {
  id: string;
  ownerId: string;
  name: string;
  /** The agent's own status, as its owner set it (freeze, unfreeze). */
  status: 'active' | 'frozen';
  /** Whether it may spend as far as freezes and retirement go: its own status, its ancestors' and its retirement together. */
  effectiveStatus: EffectiveStatus;
  /** The agent whose freeze stops it (itself, or its nearest frozen ancestor: the one a 403 FROZEN names); null when none. */
  frozenBy: string | null;
  identity: { issuer: string; subject: string };
  /** The agent that registered this delegate; null for an agent its owner registered. */
  parentId: string | null;
  /** Levels above the agent: 0 for a root. */
  depth: number;
  retiredAt: number | null;
  allowedServices: string[];
  allowedCategories: string[];
  inboxAllowlist: string[];
  caps: { perHoldUc: string | null; perPeriodUc: string | null; periodS: number };
  profile: AgentProfile;
  createdAt: number;
  updatedAt: number;
}

/** One budget's current period, as the mandate and `/v1/me` show it. */
export interface BudgetUsage {
  budgetId: string;
  period: string;
  limitUc: string;
  merchantId?: string;
  /** The name of the merchant `merchantId` names, when it exists: what a person reads. */
  merchantName?: string;
  category?: string;
  serviceId?: string;
  periodStart: number;
  resetsAt: number | null;
  spentUc: string;
  remainingUc: string;
}

/** The mandate in force: the version's document, its hash, and its budgets' usage. */
export type MandateView = MandateDocument & { hash: string; usage: BudgetUsage[] };

export interface AgentSettings {
  name?: string;
  allowedServices?: string[];
  allowedCategories?: string[];
  inboxAllowlist?: string[];
  caps?: { perHoldUc?: string | null; perPeriodUc?: string | null; periodS?: number };
}

export function profileOf(row: store.AgentRow): AgentProfile {
  return {
    name: row.profile_name,
    preset: row.profile_preset,
    color: row.profile_color,
    avatarUrl: row.avatar_upload_id ? `/v1/owner/agents/${row.id}/avatar` : null,
  };
}

/** What an agent's chain lets it do: `retired` for good, else `frozen` while it or an ancestor is frozen, else `active`. */
export const EFFECTIVE_STATUSES = ['active', 'frozen', 'retired'] as const;
export type EffectiveStatus = (typeof EFFECTIVE_STATUSES)[number];

/** The agent as every face shows it, from its row and the agent whose freeze stops it (read with the row: store.FROZEN_BY). */
export function toAgent(row: store.AgentRow & store.FrozenBy): Agent {
  return {
    id: row.id,
    ownerId: row.owner_id,
    name: row.name,
    status: row.status,
    effectiveStatus: row.retired_at_s !== null ? 'retired' : row.frozen_by !== null ? 'frozen' : 'active',
    frozenBy: row.frozen_by,
    identity: { issuer: row.identity_issuer, subject: row.identity_subject },
    parentId: row.parent_id,
    depth: row.ancestor_ids.length,
    retiredAt: row.retired_at_s === null ? null : Number(row.retired_at_s),
    allowedServices: row.allowed_services,
    allowedCategories: row.allowed_categories,
    inboxAllowlist: row.inbox_allowlist,
    caps: {
      perHoldUc: row.cap_per_hold_uc === null ? null : formatUc(row.cap_per_hold_uc),
      perPeriodUc: row.cap_per_period_uc === null ? null : formatUc(row.cap_per_period_uc),
      periodS: row.cap_period_s,
    },
    profile: profileOf(row),
    createdAt: Number(row.created_at_s),
    updatedAt: Number(row.updated_at_s),
  };
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}

/** Each budget of the agent's mandate in the period containing `nowS`, against its usage. */
function usageView(row: store.AgentRow, usage: Usage, nowS: number): BudgetUsage[] {
  const rules = extendedRulesOf(row.mandate_rules);
  return rules.budgets.map((budget) => {
    const bounds = periodOf(budget.period, rules.timeZone, nowS);
    const limitUc = BigInt(budget.limitUc);
    const spentUc = usage.budgets.get(budget.id)?.spentUc ?? 0n;
    const { id, period, limitUc: limit, ...scope } = budget;
    return {
      budgetId: id,
      period,
      limitUc: limit,
      ...scope,
      periodStart: bounds.startS,
      resetsAt: bounds.resetsAtS,
      spentUc: formatUc(spentUc),
      remainingUc: formatUc(limitUc > spentUc ? limitUc - spentUc : 0n),
    };
  });
}

/** POST /v1/agents/{id}/delegates: the child's name, identity and mandate (members left out: the parent's). */
export interface DelegateInput {
  name: string;
  identity: { issuer: string; subject: string };
  mandate: Partial<MandateRules>;
}

/** What inserting an agent needs besides its mandate: a delegate's parent (null for a root). */
interface NewAgent {
  ownerId: string;
  name: string;
  identity: { issuer: string; subject: string };
  inboxAllowlist?: string[];
  parent: store.AgentRow | null;
}

function depthExceeded(detail: string): ApiError {
  return new ApiError('invalid_input', { detail, extra: { reason: 'depth_exceeded' } });
}

/**
 * 400 naming the rule by which a delegate's mandate is wider than its parent's, with where (`pointer`, the delegate's
 * member) and against what (`parent`: the parent agent, its member and that member's value), as members of the
 * problem. The merchant rules are compared by merchant: a merchant's id counts as that merchant, and a verified
 * domain as every merchant verified on it (a domain need not be unique), on both sides, as the evaluation admits a
 * merchant by either (a parent allowing `books.example.com` and a child allowing its one merchant's id allow one
 * merchant; a child allowing a domain two merchants share is wider than a parent allowing one of them).
 */
async function refuseWider(db: Queryable, rules: MandateRules, parent: { id: string; rules: MandateRules }): Promise<void> {
  const every = everyWayWider(rules, parent.rules, await merchantsNamed(db, [rules, parent.rules]));
  const [wider] = every;
  if (!wider) return;
  const withParent = (way: WiderThanParent) => ({ reason: way.reason, detail: way.detail, pointer: way.pointer, parent: { agentId: parent.id, ...way.parent } });
  throw new ApiError('invalid_input', {
    detail: `the mandate is wider than its parent's: ${wider.detail}${every.length > 1 ? ` (and in ${every.length - 1} more way(s): see wider)` : ''}`,
    extra: { reason: wider.reason, pointer: wider.pointer, parent: { agentId: parent.id, ...wider.parent }, wider: every.map(withParent) },
  });
}

/**
 * The merchants each name of the rules' merchant rules names: an id itself, a verified domain every merchant verified
 * on it; a name that is neither (a domain before its merchant registers) names itself.
 */
async function merchantsNamed(db: Queryable, rulesList: readonly MandateRules[]): Promise<MerchantsOf> {
  const names = [...new Set(rulesList.flatMap(({ merchants }) => [...(merchants.allow ?? []), ...merchants.deny]))];
  const idsOf = new Map<string, string[]>();
  const add = (name: string, id: string) => idsOf.set(name, [...(idsOf.get(name) ?? []), id]);
  for (const merchant of names.length === 0 ? [] : await store.findMerchantsNamed(db, names)) {
    add(merchant.id, merchant.id);
    if (merchant.verified) add(merchant.domain, merchant.id);
  }
  return (name) => idsOf.get(name) ?? [name];
}

/**
 * 409 for a change a retired agent no longer takes (its status, its mandate): retirement is for good, so the
 * change could never let it spend again, and answering it would say otherwise.
 */
function refuseRetired(row: store.AgentRow, what: string): void {
  if (row.retired_at_s !== null) throw new ApiError('conflict', { detail: `agent ${row.id} is retired: ${what}` });
}

/** Magic numbers of the accepted image types: the declared type must match the bytes. */
function sniffImage(bytes: Uint8Array): AvatarType | undefined {
  const starts = (...sig: number[]) => sig.every((b, i) => bytes[i] === b);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return 'image/png';
  if (starts(0xff, 0xd8, 0xff)) return 'image/jpeg';
  if (starts(0x52, 0x49, 0x46, 0x46) && String.fromCharCode(...bytes.slice(8, 12)) === 'WEBP') return 'image/webp';
  return undefined;
}

/** The most agents one read of a subtree shows. */
export const DELEGATES_READ_MAX = 500;

/** A subtree as its readers see it: the agent first, then its delegates, shallowest first (each names its parentId). */
export interface DelegateTree {
  agentId: string;
  nodes: Array<{ agent: Agent; usage: BudgetUsage[] }>;
  truncated: boolean;
}

/**
 * The budgets a mandate change keeps by id but counts in other periods (another period, or another time zone for a
 * day, week or month) or over other purchases (another merchant, category or service), and those it adds, each with
 * the start of the period now falls in under the new rules and its scope: their usage follows them there, and counts
 * what their scope counts (recountRedefinedBudgets), as it follows a budget whose limit changed. A budget added
 * counts what its period has spent already, as a scope changed from none to its own: a daily budget of 1 credit added
 * after the agent spent 1 today refuses the next purchase (found from outside: it started from nothing, so the day
 * allowed 2). An id an earlier version had is recounted the same way, whatever that budget counted.
 */
function redefinedBudgets(before: MandateRules, after: MandateRules, nowS: number): RedefinedBudget[] {
  return after.budgets.flatMap((budget) => {
    const old = before.budgets.find((candidate) => candidate.id === budget.id);
    const scope = { merchantId: budget.merchantId, category: budget.category, serviceId: budget.serviceId };
    if (!old) return [{ budgetId: budget.id, periodStartS: periodOf(budget.period, after.timeZone, nowS).startS, rescoped: scope }];
    if (countsAlike(old, budget, before, after)) return [];
    const periodStartS = periodOf(budget.period, after.timeZone, nowS).startS;
    if (sameScope(old, budget)) return [{ budgetId: budget.id, periodStartS }];
    return [{ budgetId: budget.id, periodStartS, rescoped: scope }];
  });
}

type MandateBudget = MandateRules['budgets'][number];

/** Whether two definitions of a budget count the same purchases. */
function sameScope(old: MandateBudget, budget: MandateBudget): boolean {
  return old.merchantId === budget.merchantId && old.category === budget.category && old.serviceId === budget.serviceId;
}

/** Whether a budget kept by a mandate change counts the same purchases in the same periods. */
function countsAlike(old: MandateBudget, budget: MandateBudget, before: MandateRules, after: MandateRules): boolean {
  return old.period === budget.period && (budget.period === 'total' || before.timeZone === after.timeZone) && sameScope(old, budget);
}

/**
 * The budgets whose alerts a mandate change re-arms (rearmBudgetAlerts): every one when the alert thresholds changed,
 * else those added or whose limit, period, time zone or scope changed. A budget left as it was keeps what it
 * announced, so a release and a second crossing in one period stay silent.
 */
function rearmedBudgets(before: MandateRules, after: MandateRules): Array<{ budgetId: string; limitUc: bigint }> {
  const sameThresholds = before.alertThresholds.join() === after.alertThresholds.join();
  return after.budgets.flatMap((budget) => {
    const old = before.budgets.find((candidate) => candidate.id === budget.id);
    const unchanged = old !== undefined && old.limitUc === budget.limitUc && countsAlike(old, budget, before, after);
    return sameThresholds && unchanged ? [] : [{ budgetId: budget.id, limitUc: BigInt(budget.limitUc) }];
  });
}

/** Agents whose mandate version 1 is written per pass of the start-up backfill. */
const MANDATE_BACKFILL_BATCH = 500;

export class AgentService {
  constructor(
    private readonly gateway: Gateway,
    private readonly agentIssuer: () => string | undefined,
    /** The ids of the execute catalogue's services, which an agent's allowedServices may name. */
    private readonly serviceIds: readonly string[] = [],
  ) {}

  /**
   * The agent if `principal` may act for it (itself, or its owner); anyone else gets 404, so ids cannot be probed.
   * Read with what showing it needs (`toAgent`).
   */
  async agentFor(db: Queryable, principal: Actor, agentId: string): Promise<store.AgentWithOwnerRow & store.FrozenBy> {
    return this.reachable(await store.findAgentView(db, agentId), principal, agentId);
  }

  /** Agents as every face shows them, each with the agent whose freeze stops it (one statement). */
  private async show(db: Queryable, rows: readonly store.AgentRow[]): Promise<Agent[]> {
    const frozenBy = await store.findFrozenBy(db, rows.map((row) => row.id));
    return rows.map((row) => {
      const stoppedBy = frozenBy.get(row.id);
      if (stoppedBy === undefined) throw new Error(`agent ${row.id}: its row was not found to show it`);
      return toAgent({ ...row, frozen_by: stoppedBy });
    });
  }

  /** Agents as every face shows them, by id: those found (the caller already holds a right to see them). */
  async shownAgents(db: Queryable, agentIds: readonly string[]): Promise<Agent[]> {
    return this.show(db, await store.findAgents(db, agentIds));
  }

  private async showOne(db: Queryable, row: store.AgentRow): Promise<Agent> {
    return (await this.show(db, [row]))[0]!;
  }

  /** The same, its row locked for the rest of the transaction. */
  async lockAgentFor(tx: Tx, principal: Actor, agentId: string): Promise<store.AgentRow> {
    return this.reachable(await store.lockAgent(tx, agentId), principal, agentId);
  }

  /** The agent an operation acts for when the request may name one (see acting.ts): execute, top-ups. */
  async actingAgent(db: Queryable, principal: Actor, requestedAgentId: string | undefined): Promise<store.AgentWithOwnerRow> {
    return actingAgent(principal, requestedAgentId, (agentId) => store.findAgent(db, agentId));
  }

  private reachable<R extends store.AgentRow>(row: R | undefined, principal: Actor, agentId: string): R {
    if (row && actsFor(principal, row)) return row;
    // An agent acts for itself alone, whichever agent it names (its delegates included, which it may read but not act
    // for): say that rule, not "among your agents", which an agent has none of (found from outside).
    throw new ApiError('not_found', {
      detail: principal.kind === 'agent' ? `no agent ${agentId} that you act for: an agent acts for itself (${principal.agentId}) only` : `no agent ${agentId} among your agents`,
    });
  }

  async registerAgent(tx: Tx, ownerId: string, input: AgentSettings & { name: string; identity: { issuer: string; subject: string } }): Promise<Agent> {
    const rules = checkedRules(
      {
        ...defaultExtendedRules(),
        allowedServices: input.allowedServices ?? ['*'],
        allowedCategories: input.allowedCategories ?? ['*'],
        caps: { perHoldUc: input.caps?.perHoldUc ?? null, perPeriodUc: input.caps?.perPeriodUc ?? null, periodS: input.caps?.periodS ?? CAP_PERIOD_S_DEFAULT },
      },
      this.serviceIds,
    );
    return this.showOne(tx, await this.insertAgent(tx, { ownerId, name: input.name, identity: input.identity, inboxAllowlist: input.inboxAllowlist, parent: null }, rules, `owner:${ownerId}`));
  }

  /**
   * Registers a delegate of `parentId` (by the parent agent itself, or by its owner): an agent of the same
   * owner, with its own identity, whose mandate lies within its parent's. A member of `mandate` left out takes
   * the parent's (delegation: none). Refused, nothing written: 400 `invalid_input` with `reason`
   * delegation_not_allowed (the parent's mandate allows none), depth_exceeded (deeper than an ancestor's
   * maxDepth allows), or the rule the mandate breaks (mandate.ts, widerThanParent); 409 for a retired parent.
   * The parent's row lock serialises this with a change of the parent's mandate.
   */
  async registerDelegate(tx: Tx, principal: Actor & Pick<Principal, 'id' | 'kind'>, parentId: string, input: DelegateInput): Promise<Agent> {
    const parent = await this.lockAgentFor(tx, principal, parentId);
    refuseRetired(parent, 'it registers no delegates');
    const parentRules = this.rulesOf(parent);
    if (!parentRules.delegation.allowed) {
      throw new ApiError('invalid_input', { detail: `the mandate of agent ${parent.id} does not allow delegates (delegation.allowed is false)`, extra: { reason: 'delegation_not_allowed' } });
    }
    await this.checkTreeAdmits(tx, parent);
    // The rules' members are the registration's `mandate` member's: a refusal of one names it there.
    const rules = await refusingMembersAt('mandate', () => {
      refuseAllowedAndDenied(input.mandate.merchants);
      return this.checkedWithMerchants(tx, {
        ...parentRules,
        delegation: { ...NO_DELEGATION },
        ...input.mandate,
        caps: input.mandate.caps ?? parentRules.caps,
        merchants: { ...parentRules.merchants, ...input.mandate.merchants },
      });
    });
    await refuseWider(tx, rules, { id: parent.id, rules: parentRules });
    const row = await this.insertAgent(tx, { ownerId: parent.owner_id, name: input.name, identity: input.identity, parent }, rules, principalScope(principal as Principal));
    return this.showOne(tx, row);
  }

  /**
   * Whether the tree admits a delegate below `parent`: no agent of its chain is frozen (a freeze stops a tree from
   * growing as it stops it spending), and the new child lies no deeper below any ancestor than that ancestor's
   * mandate allows.
   */
  private async checkTreeAdmits(db: Queryable, parent: store.AgentRow): Promise<void> {
    const depth = parent.ancestor_ids.length + 1;
    if (depth > DELEGATION_DEPTH_MAX) throw depthExceeded(`a tree is at most ${DELEGATION_DEPTH_MAX} levels of delegates deep`);
    const ancestors = await store.findAgents(db, parent.ancestor_ids);
    const frozen = [parent, ...ancestors].find((agent) => agent.status !== 'active');
    if (frozen) {
      const whose = frozen.id === parent.id ? `agent ${parent.id} is frozen` : `agent ${parent.id}'s ancestor ${frozen.id} is frozen`;
      throw new ApiError('FROZEN', { detail: `${whose} by its owner: no delegate is registered below it until it is unfrozen`, extra: { reason: 'frozen', agentId: frozen.id } });
    }
    for (const ancestor of [parent, ...ancestors]) {
      const below = depth - ancestor.ancestor_ids.length;
      const { maxDepth } = extendedRulesOf(ancestor.mandate_rules).delegation;
      if (below > maxDepth) throw depthExceeded(`the new delegate would be ${below} level(s) below agent ${ancestor.id}, whose mandate allows ${maxDepth}`);
    }
  }

  /** Inserts an agent (a root, or a delegate of `parent`) with version 1 of its mandate. */
  private async insertAgent(tx: Tx, input: NewAgent, rules: MandateRules, createdBy: string): Promise<store.AgentRow> {
    const issuer = this.agentIssuer();
    if (!issuer) throw new ApiError('provider_configuration_required', { detail: 'no agent identity provider is configured (ACG_AGENT_ISSUER)' });
    if (input.identity.issuer !== issuer) {
      throw memberRefusal('identity/issuer', `must be the agent identity provider, ${issuer}`);
    }
    const nowS = this.gateway.clock.nowS();
    const row = await store.insertAgent(tx, {
      id: newId('agt'),
      owner_id: input.ownerId,
      name: input.name,
      identity_issuer: input.identity.issuer,
      identity_subject: input.identity.subject,
      status: 'active',
      inbox_allowlist: unique(input.inboxAllowlist ?? []),
      profile_name: input.name,
      profile_preset: 'letter',
      profile_color: DEFAULT_PROFILE_COLOR,
      avatar_upload_id: null,
      created_at_s: BigInt(nowS),
      updated_at_s: BigInt(nowS),
      parent_id: input.parent?.id ?? null,
      ancestor_ids: input.parent ? [...input.parent.ancestor_ids, input.parent.id] : [],
    });
    if (!row) throw new ApiError('conflict', { detail: "an agent with this identity (issuer + subject) is registered already, among this owner's agents" });
    return this.writeMandate(tx, row, rules, createdBy);
  }

  /** Whether the agent's mandate in force allows it to register delegates, and it is not retired. */
  async mayDelegate(db: Queryable, agentId: string): Promise<boolean> {
    const row = await store.findAgent(db, agentId);
    return row !== undefined && row.retired_at_s === null && extendedRulesOf(row.mandate_rules).delegation.allowed;
  }

  /** A delegate's new rules must lie within its parent's mandate as it stands (a root's need not). */
  private async checkWithinParent(db: Queryable, row: store.AgentRow, rules: MandateRules): Promise<void> {
    if (row.parent_id === null) return;
    const parent = await store.findAgent(db, row.parent_id);
    if (!parent) throw new Error(`agent ${row.id}: its parent ${row.parent_id} is missing`);
    await refuseWider(db, rules, { id: parent.id, rules: this.rulesOf(parent) });
  }

  /**
   * Makes `rules` the agent's mandate: the next version, its canonical document and hash kept for good, the
   * agent row's policy columns set from it (store.writeMandate, the one writer of spending policy). The
   * caller holds the agent's row lock.
   */
  private async writeMandate(tx: Tx, row: store.AgentRow, rules: MandateRules, createdBy: string): Promise<store.AgentRow> {
    const nowS = this.gateway.clock.nowS();
    const document: MandateDocument = { agentId: row.id, version: row.mandate_version + 1, createdAt: nowS, ...rules };
    const canonical = canonicalMandate(document);
    return store.writeMandate(
      tx,
      { agent_id: row.id, version: document.version, hash: mandateHash(canonical), document: canonical, created_at_s: BigInt(nowS), created_by: createdBy },
      rules,
      BigInt(nowS),
    );
  }

  /** The agent's mandate rules as they stand (its policy columns and its extended rules). */
  rulesOf(row: store.AgentRow): MandateRules {
    return {
      allowedServices: row.allowed_services,
      allowedCategories: row.allowed_categories,
      caps: {
        perHoldUc: row.cap_per_hold_uc === null ? null : formatUc(row.cap_per_hold_uc),
        perPeriodUc: row.cap_per_period_uc === null ? null : formatUc(row.cap_per_period_uc),
        periodS: row.cap_period_s,
      },
      ...extendedRulesOf(row.mandate_rules),
    };
  }

  /**
   * Replaces the mandate of one of the owner's agents (PUT …/mandate): a new version, unless the rules are the
   * mandate in force (`inForce`), which is answered as it stands, nothing written. The checks come first, as for any
   * PUT. `ifVersion`: the version the caller last read (If-Match over HTTP, `ifVersion` over MCP); another version in
   * force refuses the change with 412 precondition_failed, naming the version now in force, so a read, edit and
   * write from two places never silently overwrites (docs/decisions.md "A mandate's version is its ETag").
   */
  async setMandate(tx: Tx, principal: Actor & Pick<Principal, 'id' | 'kind'>, agentId: string, rules: MandateRules, ifVersion?: number): Promise<store.AgentRow> {
    const row = await this.lockAgentFor(tx, principal, agentId);
    refuseRetired(row, 'its mandate no longer changes');
    refuseOtherVersion(row, ifVersion);
    const checked = await this.checkedWithMerchants(tx, rules);
    await this.checkWithinParent(tx, row, checked);
    if (await this.inForce(tx, row, checked)) return row;
    const before = this.rulesOf(row);
    const redefined = redefinedBudgets(before, checked, this.gateway.clock.nowS());
    const written = await this.writeMandate(tx, row, checked, principalScope(principal as Principal));
    const payerId = row.ancestor_ids[0] ?? row.id;
    if (redefined.length > 0) {
      const scope = { agentId: row.id, subtreeIds: await store.subtreeIds(tx, row.id), payerId };
      await recountRedefinedBudgets(tx, scope, redefined);
    }
    await rearmBudgetAlerts(tx, { agentId: row.id, payerId }, rearmedBudgets(before, checked), checked.alertThresholds);
    return written;
  }

  /**
   * Whether `rules` (checked) are the mandate in force: the rules of its version's document, defaults filled in, have
   * the same canonical JSON. A PUT of them writes nothing and answers that version as it stands (Stripe's update of
   * an object to what it already is): a new version of the same rules would only move the ETag under every other
   * writer's If-Match and add a version that names nothing new (docs/decisions.md "A PUT of the mandate in force writes nothing").
   */
  private async inForce(db: Queryable, row: store.AgentRow, rules: MandateRules): Promise<boolean> {
    const current = row.mandate_version >= 1 ? await store.findMandateVersion(db, row.id, row.mandate_version) : undefined;
    return current !== undefined && sameRules(rules, rulesOfDocument(JSON.parse(current.document) as MandateDocument));
  }

  /** The rules as a mandate stores them (`checkedRules`); throws where they would be refused. */
  rulesAsStored(rules: MandateRules): MandateRules {
    return checkedRules(rules, this.serviceIds);
  }

  /**
   * checkedRules, and what only the database knows: every merchant a budget names exists. A budget scoped to a
   * merchant id that names none would count nothing, so its limit would never hold; one given a verified merchant's
   * domain is told the id to use (the merchant rules take ids or verified domains; a budget, whose usage follows
   * its merchant's id, takes the id).
   */
  private async checkedWithMerchants(db: Queryable, rules: MandateRules): Promise<MandateRules> {
    const checked = checkedRules(rules, this.serviceIds);
    // A merchant rule naming an id names a merchant that exists: a mistyped id in `deny` would deny nothing (found from
    // outside). A domain may be named before its merchant registers, so domains are taken as they are.
    const listedIds = (list: readonly string[] | null) => (list ?? []).map((name, index) => ({ name, index })).filter(({ name }) => MERCHANT_ID.test(name));
    const rulesIds = { allow: listedIds(checked.merchants.allow), deny: listedIds(checked.merchants.deny) };
    const budgetNames = checked.budgets.flatMap((budget) => (budget.merchantId === undefined ? [] : [budget.merchantId]));
    const named = [...new Set([...budgetNames, ...rulesIds.allow.map(({ name }) => name), ...rulesIds.deny.map(({ name }) => name)])];
    if (named.length === 0) return checked;
    const found = await store.findMerchantsNamed(db, named);
    for (const list of ['allow', 'deny'] as const) {
      const unknown = rulesIds[list].find(({ name }) => !found.some((merchant) => merchant.id === name));
      if (unknown) throw memberRefusal(`merchants/${list}/${unknown.index}`, `"${unknown.name}" names no merchant (an id names a registered merchant; a domain may be named before its merchant registers)`);
    }
    for (const [index, { merchantId }] of checked.budgets.entries()) {
      if (merchantId === undefined || found.some((merchant) => merchant.id === merchantId)) continue;
      // Every merchant verified on the domain (a domain need not be unique), not one of them picked by the lookup's order.
      const byDomain = found.filter((merchant) => merchant.domain === merchantId && merchant.verified).map((merchant) => merchant.id).sort();
      throw memberRefusal(
        `budgets/${index}/merchantId`,
        byDomain.length > 0
          ? `"${merchantId}" is a domain; a budget names its merchant by id (${byDomain.length === 1 ? 'the merchant verified on it is' : 'the merchants verified on it are'} ${byDomain.join(', ')})`
          : `"${merchantId}" names no merchant: a budget names its merchant by id (mer_…)`,
      );
    }
    return checked;
  }

  /** The mandate in force, as every face shows it: its document, its hash, and its budgets' usage now. */
  async mandateView(db: Queryable, row: store.AgentRow): Promise<MandateView> {
    const version = await this.mandateVersion(db, row);
    const document = JSON.parse(version.document) as MandateDocument;
    return { ...document, hash: version.hash, usage: await this.budgetUsage(db, row) };
  }

  /** Each budget of the agent's mandate in its current period: limit, spent, remaining, when it resets. */
  async budgetUsage(db: Queryable, row: store.AgentRow): Promise<BudgetUsage[]> {
    return (await this.budgetUsages(db, [row])).get(row.id)!;
  }

  /** budgetUsage of many agents (two statements whatever their number), by agent id. */
  private async budgetUsages(db: Queryable, rows: readonly store.AgentRow[]): Promise<Map<string, BudgetUsage[]>> {
    const nowS = this.gateway.clock.nowS();
    const usage = await usageOf(db, rows, nowS);
    const views = new Map(rows.map((row) => [row.id, usageView(row, usage.get(row.id)!, nowS)]));
    // A budget scoped to a merchant is shown by the merchant's name (found from outside: the console said "at mer_…").
    const scoped = [...views.values()].flat().filter((view) => view.merchantId !== undefined);
    if (scoped.length > 0) {
      const found = await store.findMerchantsNamed(db, [...new Set(scoped.map((view) => view.merchantId!))]);
      const names = new Map(found.map((merchant) => [merchant.id, merchant.name]));
      for (const view of scoped) {
        const name = names.get(view.merchantId!);
        if (name !== undefined) view.merchantName = name;
      }
    }
    return views;
  }

  /** One version of the agent's mandate (the current one by default); 404 for a version it never had. */
  async mandateVersion(db: Queryable, row: store.AgentRow, version = row.mandate_version): Promise<store.MandateVersionRow> {
    const found = version >= 1 ? await store.findMandateVersion(db, row.id, version) : undefined;
    if (!found) throw new ApiError('not_found', { detail: `agent ${row.id} has no mandate version ${version}` });
    return found;
  }

  /** The agent's mandate versions, newest first (`startingAfter` a version number). */
  async mandateVersions(db: Queryable, row: store.AgentRow, page: { limit: number; startingAfter?: number }): Promise<{ versions: store.MandateVersionRow[]; hasMore: boolean }> {
    const rows = await store.listMandateVersions(db, row.id, page.limit, page.startingAfter);
    return { versions: rows.slice(0, page.limit), hasMore: rows.length > page.limit };
  }

  /**
   * Writes version 1 of every agent registered before mandates existed, from its columns (run at start; safe
   * on several instances at once: each agent under its row lock, and only while still at version 0).
   */
  async writeMissingMandates(): Promise<number> {
    let written = 0;
    for (;;) {
      const ids = await store.agentIdsWithoutMandate(this.gateway.db, MANDATE_BACKFILL_BATCH);
      if (ids.length === 0) return written;
      for (const id of ids) {
        written += await this.gateway.db.transaction(async (tx) => {
          const row = await store.lockAgent(tx, id);
          if (!row || row.mandate_version !== 0) return 0;
          await this.writeMandate(tx, row, this.rulesOf(row), 'gateway');
          return 1;
        });
      }
    }
  }

  async listAgents(db: Queryable, ownerId: string, page: Page): Promise<{ agents: Agent[]; hasMore: boolean }> {
    const found = await pageBySeq<store.AgentRow>(db, 'agents', 'owner_id', ownerId, page);
    return { agents: await this.show(db, found.items), hasMore: found.hasMore };
  }

  /** The agent with its owner's email, whoever owns it. */
  async agentRow(db: Queryable, agentId: string): Promise<store.AgentWithOwnerRow | undefined> {
    return store.findAgent(db, agentId);
  }

  /** Many agents with their owners' emails, by id (one statement). */
  async agentRows(db: Queryable, agentIds: readonly string[]): Promise<store.AgentWithOwnerRow[]> {
    return store.findAgents(db, agentIds);
  }

  /** What a credential's check reads of many agents by identity (issuer + subject) and owner email: owner and owner's email (one statement). */
  async credentialAgentsByIdentity(db: Queryable, identities: ReadonlyArray<store.OwnedIdentity>): Promise<store.CredentialAgentRow[]> {
    return store.findAgentsByIdentity(db, identities);
  }

  /** Whether any owner has registered this identity. */
  async identityRegistered(db: Queryable, identity: { issuer: string; subject: string }): Promise<boolean> {
    return store.identityRegistered(db, identity);
  }

  /** What a credential's check reads of many agents by id (one statement). */
  async credentialAgents(db: Queryable, agentIds: readonly string[]): Promise<store.CredentialAgentRow[]> {
    return store.findCredentialAgents(db, agentIds);
  }

  /** Locks the agent row for the rest of the transaction: the per-agent mutex of the ledger. */
  async lockAgent(tx: Tx, agentId: string): Promise<store.AgentRow | undefined> {
    return store.lockAgent(tx, agentId);
  }

  /**
   * Locks the agent's row with its ancestors' (the hold pass's lock, in its order) and refuses it 403 FROZEN, by the
   * spending policy's own rule, when it or an ancestor is frozen or retired. For work that outlives its request (a
   * retained intent): a freeze or retirement takes the stopped agent's row lock, so one that committed first is seen
   * here, and one that comes later waits for this transaction and then finds the work to cancel.
   */
  async lockUnstopped(tx: Tx, agentId: string): Promise<void> {
    const refusal = this.frozenRefusalOf(agentId, await this.lockWithAncestors(tx, [agentId]));
    if (refusal) throw refusal;
  }

  /** 403 FROZEN when the agent or an ancestor is frozen or retired, from rows read with its ancestors'; else undefined. */
  frozenRefusalOf(agentId: string, rows: ReadonlyMap<string, store.AgentRow>): ApiError | undefined {
    const row = rows.get(agentId);
    return row && frozenRefusal(this.spendingChainOf(row, rows))?.error;
  }

  /** The agent and its delegates at every depth (its subtree), sorted: what a freeze with releaseHolds reaches. */
  async subtreeIds(db: Queryable, agentId: string): Promise<string[]> {
    return store.subtreeIds(db, agentId);
  }

  /**
   * Locks the rows of several agents and of all their ancestors, in one statement in sorted id order (a batch
   * of holds takes them all first; a tree never changes shape, so its ancestors need no lock to be found).
   */
  async lockWithAncestors(tx: Tx, agentIds: readonly string[]): Promise<Map<string, store.AgentRow>> {
    return new Map((await store.lockAgentsWithAncestors(tx, agentIds)).map((row) => [row.id, row]));
  }

  /** The spending settings of an agent whose ancestors' rows are in `rows`: the agent with its chain, root first. */
  spendingChainOf<R extends store.AgentRow>(row: R, rows: ReadonlyMap<string, store.AgentRow>): R & { ancestors: store.AgentRow[] } {
    return {
      ...row,
      ancestors: row.ancestor_ids.map((id) => {
        const ancestor = rows.get(id);
        if (!ancestor) throw new Error(`agent ${row.id}: its ancestor ${id} is not loaded`);
        return ancestor;
      }),
    };
  }

  /** The agent with its ancestors' rows (one more statement for a delegate), as the spending policy reads it. */
  async withAncestors<R extends store.AgentRow>(db: Queryable, row: R): Promise<R & { ancestors: store.AgentRow[] }> {
    if (row.ancestor_ids.length === 0) return { ...row, ancestors: [] };
    return this.spendingChainOf(row, new Map((await store.findAgents(db, row.ancestor_ids)).map((ancestor) => [ancestor.id, ancestor])));
  }

  /**
   * The agent and the delegates below it, shallowest first, each with its budgets' usage now (a parent's
   * budgets count its subtree's holds), at most DELEGATES_READ_MAX agents (`truncated` beyond).
   */
  async delegateTree(db: Queryable, row: store.AgentRow): Promise<DelegateTree> {
    const rows = await store.findSubtree(db, row.id, DELEGATES_READ_MAX);
    const shown = rows.slice(0, DELEGATES_READ_MAX);
    const [usage, agents] = await Promise.all([this.budgetUsages(db, shown), this.show(db, shown)]);
    return { agentId: row.id, nodes: agents.map((agent) => ({ agent, usage: usage.get(agent.id)! })), truncated: rows.length > DELEGATES_READ_MAX };
  }

  /**
   * The agent if `principal` may read its subtree: its owner, the agent itself, or one of its ancestors (an
   * agent reads its own subtree); anyone else gets 404.
   */
  async subtreeReader(db: Queryable, principal: Actor, agentId: string): Promise<store.AgentWithOwnerRow> {
    const row = await store.findAgent(db, agentId);
    const below = principal.kind === 'agent' && row !== undefined && row.ancestor_ids.includes(principal.agentId!);
    if (row && below) return row;
    return this.reachable(row, principal, agentId);
  }

  /**
   * Locks a delegate's subtree to retire it (with its ancestors' rows, in one sorted statement: the order a
   * hold of any of them takes). The owner only: an agent cannot retire itself or its delegates. A root is
   * frozen, not retired (409): its lots have nowhere to return to.
   */
  async lockSubtreeToRetire(tx: Tx, principal: Actor, agentId: string): Promise<store.AgentRow[]> {
    if (principal.kind === 'agent') throw new ApiError('forbidden', { detail: 'only the owner retires a delegate' });
    const row = this.reachable(await store.findAgent(tx, agentId), principal, agentId);
    if (row.parent_id === null) throw new ApiError('conflict', { detail: `agent ${row.id} is not a delegate; freeze it instead (POST /v1/owner/agents/${row.id}/freeze)` });
    const locked = await store.lockSubtree(tx, row.id, row.ancestor_ids);
    // A delegate registered while that statement waited for its parent's lock is not in the statement's snapshot
    // (found from outside: it escaped the retirement). Each registration holds its parent's lock until it commits,
    // so once every row is ours a fresh read (a new statement, a new snapshot) finds all of them; those found are
    // locked, and read again below them, until none is new.
    for (;;) {
      const known = new Set(locked.map((agent) => agent.id));
      const missed = (await store.subtreeIds(tx, row.id)).filter((id) => !known.has(id));
      if (missed.length === 0) break;
      locked.push(...(await store.lockAgentsWithAncestors(tx, missed)).filter((agent) => !known.has(agent.id)));
    }
    return locked.filter((agent) => agent.id === row.id || agent.ancestor_ids.includes(row.id));
  }

  /** Marks a locked subtree retired (those not retired yet); answers the subtree's top agent as it now reads. */
  async markRetired(tx: Tx, subtree: readonly store.AgentRow[], agentId: string, atS: number): Promise<Agent> {
    await store.markRetired(tx, subtree.map((agent) => agent.id), atS);
    return toAgent((await store.findAgentView(tx, agentId))!);
  }

  /**
   * PATCH: the name and inbox allowlist, and the allowances and caps, which are mandate rules: changing any of
   * those writes a new mandate version with the rest of the mandate as it was; naming them as they stand writes
   * none, as a PUT of the mandate in force (`inForce`). `ifVersion`: the mandate version the caller last read, as for
   * `setMandate`.
   */
  async updateAgent(tx: Tx, principal: Actor & Pick<Principal, 'id' | 'kind'>, agentId: string, patch: AgentSettings, ifVersion?: number): Promise<Agent> {
    let row = await this.lockAgentFor(tx, principal, agentId);
    refuseOtherVersion(row, ifVersion);
    if (patch.allowedServices !== undefined || patch.allowedCategories !== undefined || patch.caps !== undefined) {
      refuseRetired(row, 'its mandate (allowances and caps) no longer changes');
      const rules = this.rulesOf(row);
      const caps = patch.caps ?? {};
      const patched: MandateRules = {
        ...rules,
        allowedServices: patch.allowedServices ?? rules.allowedServices,
        allowedCategories: patch.allowedCategories ?? rules.allowedCategories,
        caps: {
          perHoldUc: caps.perHoldUc === undefined ? rules.caps.perHoldUc : caps.perHoldUc,
          perPeriodUc: caps.perPeriodUc === undefined ? rules.caps.perPeriodUc : caps.perPeriodUc,
          periodS: caps.periodS ?? rules.caps.periodS,
        },
      };
      const checked = checkedRules(patched, this.serviceIds);
      await this.checkWithinParent(tx, row, checked);
      if (!(await this.inForce(tx, row, checked))) row = await this.writeMandate(tx, row, checked, principalScope(principal as Principal));
    }
    const updated = await store.updateAgent(tx, {
      ...row,
      name: patch.name ?? row.name,
      inbox_allowlist: patch.inboxAllowlist ? unique(patch.inboxAllowlist) : row.inbox_allowlist,
      updated_at_s: BigInt(this.gateway.clock.nowS()),
    });
    return this.showOne(tx, updated);
  }

  /** Freeze (the kill switch's, src/revocations) or unfreeze; a retired agent's status no longer changes either way (409). */
  async setStatus(tx: Tx, principal: Actor, agentId: string, status: 'active' | 'frozen'): Promise<Agent> {
    const row = await this.lockAgentFor(tx, principal, agentId);
    refuseRetired(row, `it can never spend again, so it is not ${status === 'frozen' ? 'frozen' : 'unfrozen'}`);
    if (row.status === status) return this.showOne(tx, row);
    return this.showOne(tx, await store.updateAgent(tx, { ...row, status, updated_at_s: BigInt(this.gateway.clock.nowS()) }));
  }

  async setProfile(tx: Tx, principal: Actor, agentId: string, profile: { name: string; preset: string; color: string }): Promise<AgentProfile> {
    const row = await this.lockAgentFor(tx, principal, agentId);
    if (profile.preset === 'image' && !row.avatar_upload_id) {
      throw memberRefusal('preset', '"image" needs a finalized avatar upload first');
    }
    const updated = await store.updateAgent(tx, {
      ...row,
      profile_name: profile.name,
      profile_preset: profile.preset,
      profile_color: profile.color.toLowerCase(),
      updated_at_s: BigInt(this.gateway.clock.nowS()),
    });
    return profileOf(updated);
  }

  async startAvatarUpload(tx: Tx, principal: Actor, agentId: string, contentType: AvatarType, sizeBytes: number) {
    await this.agentFor(tx, principal, agentId);
    const nowS = this.gateway.clock.nowS();
    const upload = {
      id: newId('upl'),
      storage_id: newId('sto'),
      agent_id: agentId,
      content_type: contentType,
      size_bytes: sizeBytes,
      state: 'pending' as const,
      created_at_s: BigInt(nowS),
      expires_at_s: BigInt(nowS + AVATAR_UPLOAD_LIFETIME_S),
    };
    await store.insertAvatarUpload(tx, upload);
    return {
      uploadId: upload.id,
      storageId: upload.storage_id,
      uploadUrl: `/v1/owner/agents/${agentId}/avatar/uploads/${upload.id}`,
      method: 'PUT' as const,
      contentType,
      maxBytes: sizeBytes,
      expiresAt: nowS + AVATAR_UPLOAD_LIFETIME_S,
    };
  }

  async receiveAvatarBytes(tx: Tx, principal: Actor, agentId: string, uploadId: string, contentType: string, bytes: Uint8Array): Promise<void> {
    await this.agentFor(tx, principal, agentId);
    const upload = await store.lockAvatarUpload(tx, agentId, uploadId);
    if (!upload) throw new ApiError('not_found', { detail: `no upload ${uploadId} for this agent` });
    if (upload.state !== 'pending' || Number(upload.expires_at_s) <= this.gateway.clock.nowS()) {
      throw new ApiError('conflict', { detail: 'this upload has already received its bytes or has expired; start a new one' });
    }
    if (contentType !== upload.content_type) {
      throw new ApiError('unsupported_media_type', { detail: `this upload was started for ${upload.content_type}` });
    }
    if (bytes.length > upload.size_bytes) {
      throw new ApiError('payload_too_large', { detail: `this upload was started for at most ${upload.size_bytes} bytes` });
    }
    if (sniffImage(bytes) !== upload.content_type) {
      throw new ApiError('invalid_input', { detail: `the bytes are not a ${upload.content_type} image` });
    }
    await store.storeAvatarBytes(tx, uploadId, bytes);
  }

  async finalizeAvatar(tx: Tx, principal: Actor, agentId: string, uploadId: string, storageId: string): Promise<AgentProfile> {
    const row = await this.lockAgentFor(tx, principal, agentId);
    const upload = await store.lockAvatarUpload(tx, agentId, uploadId);
    if (!upload || upload.storage_id !== storageId) throw new ApiError('not_found', { detail: 'no such upload and storage id for this agent' });
    if (upload.state === 'pending') throw new ApiError('invalid_input', { detail: 'the upload has not received its bytes yet' });
    if (upload.state === 'uploaded' && Number(upload.expires_at_s) <= this.gateway.clock.nowS()) {
      throw new ApiError('invalid_input', { detail: 'the upload expired before it was finalized; start a new one' });
    }
    await store.markAvatarFinalized(tx, uploadId);
    const updated = await store.updateAgent(tx, {
      ...row,
      avatar_upload_id: uploadId,
      profile_preset: 'image',
      updated_at_s: BigInt(this.gateway.clock.nowS()),
    });
    return profileOf(updated);
  }

  async readAvatar(db: Queryable, row: store.AgentRow): Promise<{ contentType: string; bytes: Uint8Array }> {
    const upload = row.avatar_upload_id ? await store.findAvatarUpload(db, row.id, row.avatar_upload_id) : undefined;
    if (!upload?.bytes) throw new ApiError('not_found', { detail: 'this agent has no avatar' });
    return { contentType: upload.content_type, bytes: upload.bytes };
  }

  /** Deletes uploads that expired before they were finalized (scheduled by the composition root). */
  async sweepAvatarUploads(): Promise<number> {
    return store.deleteExpiredAvatarUploads(this.gateway.db, this.gateway.clock.nowS());
  }
}

/**
 * A change made on a mandate version (`ifVersion`, HTTP's If-Match) while another is in force: 412 precondition_failed,
 * naming the version now in force, so a read, edit and write from two places never silently overwrites
 * (docs/decisions.md "A mandate's version is its ETag").
 */
function refuseOtherVersion(row: store.AgentRow, ifVersion: number | undefined): void {
  if (ifVersion === undefined || ifVersion === row.mandate_version) return;
  throw new ApiError('precondition_failed', {
    detail: `the mandate of agent ${row.id} is at version ${row.mandate_version}, not ${ifVersion}: read it again, and make the change on what is in force`,
    extra: { currentVersion: row.mandate_version },
  });
}
