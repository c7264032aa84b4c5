// One agent: its balance and budgets, its mandate (edited with messages a person understands), its credit
// lots, and its activity (holds, captures, releases, refunds) with each signed receipt and a "verify" that
// checks the receipt's signature here, in the browser, against the gateway's published keys.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiProblem, ok, newKey, type Schemas } from '../api.ts';
import { credits, creditsInput, parseCredits } from '../money.ts';
import { verifyReceipt, type Verification } from '../receipt.ts';
import { Amount, BudgetBar, LoadError, Outcome, PageHead, ShowMore, useAction, useConsole, useLoad, usePages, When } from '../ui.tsx';
import { FreezeButton, MandateWindow, StatusBadge, TreeFunds, treeLabel } from './agents.tsx';
import { takeKept, useLeaveGuard } from '../router.ts';
import { MerchantPicker, merchantIdOf, useKnownMerchants, type KnownMerchant } from './merchant-picker.tsx';

type Mandate = Schemas['Mandate'];
type Redemption = Schemas['Redemption'];
type Lot = Schemas['Lot'];
type Period = Mandate['budgets'][number]['period'];
type ScopeKind = 'all' | 'merchantId' | 'category' | 'serviceId';

const PERIODS: Array<[Period, string]> = [
  ['day', 'Per day'],
  ['week', 'Per week'],
  ['month', 'Per month'],
  ['total', 'In total'],
];
const SCOPES: Array<[ScopeKind, string]> = [
  ['all', 'all spending'],
  ['merchantId', 'one merchant'],
  ['category', 'one category'],
  ['serviceId', 'one built-in service'],
];
const PERIOD_WORD: Record<string, string> = { day: 'Daily', week: 'Weekly', month: 'Monthly', total: 'Total' };

interface BudgetRow {
  key: number;
  id?: string;
  period: Period;
  limit: string;
  scope: ScopeKind;
  scopeValue: string;
  /** The person chose to type the merchant (not one of the picker's list): the field stays, whatever is typed. */
  typed?: boolean;
}

interface Draft {
  budgets: BudgetRow[];
  approvalAbove: string;
  perHold: string;
  categories: string;
  /** `any`: any merchant not denied (`allow: null`); `only`: the listed ones, none when the list is empty (`[]`). */
  allowRule: 'any' | 'only';
  allow: string;
  deny: string;
  timeZone: string;
  notBefore: string;
  notAfter: string;
  /** The field holds a date and time half typed (`validity.badInput`): its value reads "" though it is not empty. */
  notBeforeIncomplete: boolean;
  notAfterIncomplete: boolean;
  /** Percentages of a budget's limit at which the owner's webhook hears `budget.threshold`, comma-separated. */
  alertThresholds: string;
  /** Levels of delegates allowed below the agent: 0, none (delegation.allowed false). */
  delegationDepth: string;
}

/** The gateway's bounds (src/policy/mandate.ts): the most alert thresholds, and the deepest tree of delegates. */
const ALERT_THRESHOLDS_MAX = 5;
const DELEGATION_DEPTH_MAX = 8;

let rowKeys = 0;

const list = (text: string) =>
  text
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');

function localInput(s: number | null): string {
  if (s === null) return '';
  const date = new Date(s * 1000);
  return new Date(date.getTime() - date.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
}

function draftOf(mandate: Mandate): Draft {
  return {
    budgets: mandate.budgets.map((budget) => {
      const scope: ScopeKind = budget.merchantId !== undefined ? 'merchantId' : budget.category !== undefined ? 'category' : budget.serviceId !== undefined ? 'serviceId' : 'all';
      return { key: ++rowKeys, id: budget.id, period: budget.period, limit: creditsInput(budget.limitUc), scope, scopeValue: scope === 'all' ? '' : (budget[scope] ?? '') };
    }),
    approvalAbove: creditsInput(mandate.approvalAboveUc),
    perHold: creditsInput(mandate.caps.perHoldUc),
    categories: mandate.allowedCategories.join(', '),
    allowRule: mandate.merchants.allow === null ? 'any' : 'only',
    allow: mandate.merchants.allow === null ? '' : mandate.merchants.allow.join(', '),
    deny: mandate.merchants.deny.join(', '),
    timeZone: mandate.timeZone,
    notBefore: localInput(mandate.notBefore),
    notAfter: localInput(mandate.notAfter),
    notBeforeIncomplete: false,
    notAfterIncomplete: false,
    alertThresholds: mandate.alertThresholds.join(', '),
    delegationDepth: String(mandate.delegation.allowed ? mandate.delegation.maxDepth : 0),
  };
}

/** The draft as text, without the rows' keys (which are new at every fill): equal drafts say the same. */
function draftContent(draft: Draft): string {
  // A value typed before "all spending" was chosen again is no part of the budget (mandateBody leaves it out).
  return JSON.stringify({
    ...draft,
    allow: draft.allowRule === 'any' ? '' : draft.allow,
    budgets: draft.budgets.map(({ key: _key, typed: _typed, ...row }) => ({ ...row, scopeValue: row.scope === 'all' ? '' : row.scopeValue })),
  });
}


/** The draft with each merchant budget's typed verified domain replaced by its merchant's id, when the picker knows it. */
function withMerchantIds(draft: Draft, merchants: readonly KnownMerchant[]): Draft {
  return { ...draft, budgets: draft.budgets.map((row) => (row.scope === 'merchantId' ? { ...row, scopeValue: merchantIdOf(row.scopeValue, merchants) } : row)) };
}

/** A category's name as the API takes it (CATEGORY_PATTERN in src/platform/schemas.ts). */
const CATEGORY = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const NOT_A_CATEGORY = 'is not a category name: use lower-case letters, digits and . _ - (up to 64, starting with a letter or digit), like books.';

/**
 * The API's refusal of a mandate in the form's words: its members are named by JSON pointer (`body/budgets/0/limitUc`)
 * or by path (`caps.perHoldUc`, a delegate's rule wider than its parent's), where the form says "Budget 1" and
 * "Largest single purchase"; its amounts are microcredits (`30000000 µc`) and its instants Unix seconds, where the
 * form says credits and dates (found from outside: a delegate's page read "at most 30000000 µc").
 */
export function mandateRefusalInWords(detail: string): string {
  return detail
    .replace(/(?:\bbody)?\/?\bbudgets\/(\d+)(?:\/(\w+))?/g, (_all, index: string, member?: string) => `Budget ${Number(index) + 1}${member === undefined ? '' : ` ${MEMBER_WORD[member] ?? member}`}`)
    .replace(/(?:\bbody)?\/?\ballowedCategories\/(\d+)/g, (_all, index: string) => `Allowed categories (entry ${Number(index) + 1})`)
    .replace(/(?:\bbody)?\/?\bmerchants\/(allow|deny)\/(\d+)/g, (_all, list: string, index: string) => `${list === 'allow' ? 'Allowed' : 'Denied'} merchants (entry ${Number(index) + 1})`)
    .replace(/\bbody\/(\w+)/g, (_all, member: string) => MEMBER_WORD[member] ?? member)
    .replace(/\b(notBefore|notAfter)( must be at or (?:after|before) the parent's, )(\d{1,12})\b/g, (_all, member: string, rule: string, s: string) => `${MEMBER_WORD[member]}${rule}${DATE_TIME.format(new Date(Number(s) * 1000))}`)
    .replace(/\b(caps\.\w+|merchants\.(?:allow|deny)|approvalAboveUc|allowedCategories|allowedServices|notBefore|notAfter)\b/g, (member: string) => MEMBER_WORD[member] ?? member)
    .replace(/\(null, no (?:cap|approval), is wider\)/g, '(empty, no limit, is wider)')
    .replace(/\b(\d{1,18}) µc\b/g, (_all, uc: string) => `${credits(uc)} credits`);
}
const DATE_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
const MEMBER_WORD: Record<string, string> = {
  limitUc: 'limit',
  merchantId: 'merchant id',
  category: 'category',
  serviceId: 'service id',
  period: 'period',
  approvalAboveUc: 'Approval above',
  timeZone: 'Time zone',
  notBefore: 'Valid from',
  notAfter: 'Valid until',
  'caps.perHoldUc': 'Largest single purchase',
  'caps.perPeriodUc': 'The cap per period',
  'caps.periodS': 'The cap\'s period',
  'merchants.allow': 'Only these merchants',
  'merchants.deny': 'Never these merchants',
  alertThresholds: 'Alert at',
  'delegation.maxDepth': 'Levels of delegates',
  allowedCategories: 'Allowed categories',
  allowedServices: 'Allowed services',
};

/**
 * A problem of the draft and the field it is in (`data-field` of the input, `budget-2-limit` for a row's): the form
 * marks that field invalid and moves the focus to the first one (found from outside: the message sat by Save, and the
 * field it named 2,000 px above was not marked).
 */
export interface DraftProblem {
  field: string;
  message: string;
}

/** The PUT body for the draft (every member the form does not show kept as it is), or the problems found. */
export function mandateBody(mandate: Mandate, draft: Draft): { body: Record<string, unknown> } | { problems: DraftProblem[] } {
  const problems: DraftProblem[] = [];
  const say = (field: string, message: string) => problems.push({ field, message });
  const amount = (text: string, what: string, field: string): string | null => {
    if (text.trim() === '') return null;
    const parsed = parseCredits(text, what);
    if ('problem' in parsed) {
      say(field, parsed.problem);
      return null;
    }
    return parsed.uc;
  };
  const usedIds = new Set(draft.budgets.map((row) => row.id).filter((id): id is string => id !== undefined));
  const seen = new Set<string>();
  const budgets = draft.budgets.map((row, index) => {
    const what = `Budget ${index + 1} (${PERIOD_WORD[row.period]?.toLowerCase()})`;
    const limitField = `budget-${index}-limit`;
    const scopeField = `budget-${index}-scope`;
    if (row.limit.trim() === '') say(limitField, `${what}: enter its limit in credits, like 5.`);
    const limitUc = amount(row.limit, what, limitField) ?? '0';
    if (row.limit.trim() !== '' && limitUc === '0' && !problems.some((problem) => problem.message.startsWith(what))) say(limitField, `${what}: its limit must be more than 0.`);
    // A value typed before "all spending" was chosen again stays in the row, hidden: it is no part of the budget.
    const scopeValue = row.scope === 'all' ? '' : row.scopeValue.trim();
    if (row.scope !== 'all' && scopeValue === '') say(scopeField, `${what}: name the ${row.scope === 'merchantId' ? 'merchant' : row.scope === 'category' ? 'category' : 'service'} it covers, or choose "all spending".`);
    if (row.scope === 'category' && scopeValue !== '' && !CATEGORY.test(scopeValue)) say(scopeField, `${what}: "${scopeValue}" ${NOT_A_CATEGORY}`);
    const covers = `${row.period}|${row.scope}|${scopeValue}`;
    if (seen.has(covers)) say(limitField, `${what}: another budget already covers the same spending over the same period; remove one.`);
    seen.add(covers);
    let id = row.id;
    if (id === undefined) {
      id = row.period;
      for (let n = 2; usedIds.has(id); n++) id = `${row.period}-${n}`;
      usedIds.add(id);
    }
    return { id, period: row.period, limitUc, ...(row.scope === 'all' ? {} : { [row.scope]: scopeValue }) };
  });
  if (budgets.length > 20) say(`budget-20-limit`, 'At most 20 budgets.');
  const categories = list(draft.categories);
  if (categories.length === 0) say('categories', 'Allowed categories: name at least one, or * for all.');
  for (const category of categories) if (category !== '*' && !CATEGORY.test(category)) say('categories', `Allowed categories: "${category}" ${NOT_A_CATEGORY}`);
  const timeZone = draft.timeZone.trim();
  try {
    new Intl.DateTimeFormat('en', { timeZone });
  } catch {
    say('timeZone', `Time zone: "${timeZone}" is not a time zone; use a name like Europe/Paris or UTC.`);
  }
  // A field left as the mandate has it sends the mandate's own instant: the form shows whole minutes in the
  // browser's zone, and reading them back dropped the seconds, and an hour in the night the clocks go back.
  const seconds = (text: string, incomplete: boolean, original: number | null, what: string, field: string): number | null => {
    if (incomplete) {
      say(field, `${what} is not a whole date and time: finish it, or clear it for no limit.`);
      return null;
    }
    if (text === localInput(original)) return original;
    if (text === '') return null;
    const ms = new Date(text).getTime();
    if (!Number.isFinite(ms)) {
      say(field, `${what} is not a date and time this form can read.`);
      return null;
    }
    return Math.floor(ms / 1000);
  };
  const notBefore = seconds(draft.notBefore, draft.notBeforeIncomplete, mandate.notBefore, 'Valid from', 'notBefore');
  const notAfter = seconds(draft.notAfter, draft.notAfterIncomplete, mandate.notAfter, 'Valid until', 'notAfter');
  if (notBefore !== null && notAfter !== null && notAfter <= notBefore) say('notAfter', 'Valid until must be later than valid from.');
  // An end already past stops every purchase at once, which reads as a typo rather than a wish: a freeze says so.
  if (notAfter !== null && notAfter <= Date.now() / 1000 && draft.notAfter !== localInput(mandate.notAfter)) {
    say('notAfter', 'Valid until is in the past: the agent could buy nothing at all. To stop it spending, freeze it instead.');
  }
  const approvalAboveUc = amount(draft.approvalAbove, 'Approval above', 'approvalAbove');
  const perHoldUc = amount(draft.perHold, 'Largest single purchase', 'perHold');
  const thresholds = list(draft.alertThresholds);
  if (thresholds.some((pct) => !/^(100|[1-9][0-9]?)$/.test(pct))) say('alertThresholds', 'Alert at: each threshold is a whole percentage from 1 to 100, e.g. 80, 100.');
  else if (new Set(thresholds).size > ALERT_THRESHOLDS_MAX) say('alertThresholds', `Alert at: at most ${ALERT_THRESHOLDS_MAX} thresholds.`);
  const depth = draft.delegationDepth.trim();
  if (!/^[0-9]$/.test(depth) || Number(depth) > DELEGATION_DEPTH_MAX) say('delegationDepth', `Delegates: the levels allowed below this agent are a whole number from 0 (none) to ${DELEGATION_DEPTH_MAX}.`);
  if (problems.length > 0) return { problems };
  const allow = list(draft.allow);
  return {
    body: {
      allowedServices: mandate.allowedServices,
      allowedCategories: categories,
      caps: { ...mandate.caps, perHoldUc },
      budgets,
      merchants: { allow: draft.allowRule === 'any' ? null : allow, deny: list(draft.deny) },
      approvalAboveUc,
      notBefore,
      notAfter,
      timeZone,
      alertThresholds: [...new Set(thresholds.map(Number))].sort((a, b) => a - b),
      // Every member is stated: a PUT gives one left out its default (for delegation "not allowed": a save of the
      // time zone alone turned delegation off).
      delegation: { ...mandate.delegation, allowed: Number(depth) > 0, maxDepth: Number(depth) },
    },
  };
}

/** A period of seconds in words: "1 hour", "86400 s" when it is no whole unit. */
function periodWords(seconds: number): string {
  for (const [unit, size] of [['day', 86_400], ['hour', 3_600], ['minute', 60]] as const) {
    if (seconds % size === 0) return seconds === size ? `1 ${unit}` : `${seconds / size} ${unit}s`;
  }
  return `${seconds} s`;
}

/**
 * The rules in force this form does not edit (the rolling cap, which budgets replace, and the allowed services), said
 * when they limit anything, so a purchase they refuse has a visible reason; a save keeps them as they stand (found
 * from outside: a 30-credit-an-hour cap refused purchases the page gave no reason for).
 */
function KeptRules({ mandate }: { mandate: Mandate }) {
  const rolling = mandate.caps.perPeriodUc;
  const services = mandate.allowedServices.includes('*') ? undefined : mandate.allowedServices;
  if (rolling === null && services === undefined) return null;
  return (
    <p class="hint" data-kept-rules>
      Also in force, kept as it is when you save (set it with the API or <code>acg agent mandate set</code>):{' '}
      {rolling !== null ? <>at most {credits(rolling)} credits in any {periodWords(mandate.caps.periodS)}</> : null}
      {rolling !== null && services !== undefined ? '; ' : null}
      {services !== undefined ? <>{services.length === 0 ? 'no built-in service may be used' : `built-in services limited to ${services.join(', ')}`}</> : null}.
    </p>
  );
}

/** What the form keeps when the sign-in ends under it (`useLeaveGuard`'s `keep`): the draft and the version it edits. */
interface KeptMandateDraft {
  base: Mandate;
  draft: Draft;
}

/** The draft kept for this form, with fresh row keys; none when nothing (readable) was kept. */
function keptDraft(value: unknown): KeptMandateDraft | undefined {
  const kept = value as Partial<KeptMandateDraft> | undefined;
  if (typeof kept?.base?.version !== 'number' || !Array.isArray(kept.draft?.budgets)) return undefined;
  return { base: kept.base, draft: { ...kept.draft, budgets: kept.draft.budgets.map((row) => ({ ...row, key: ++rowKeys })) } };
}

function MandateEditor({ agentId, mandate, onSaved }: { agentId: string; mandate: Mandate; onSaved: () => void }) {
  const { api, owner } = useConsole();
  const form = `mandate:${agentId}`;
  // Changes the owner had not saved when the sign-in ended under this form (a save whose renewal failed), kept in
  // this tab across the sign-in and given back here once (found from outside: they were lost, past the leave guard).
  const [restored] = useState(() => keptDraft(takeKept(owner.id, form)));
  const [restoredShown, setRestoredShown] = useState(restored !== undefined);
  // The version the draft was filled from, and the one a save makes its change on (If-Match). A newer version
  // (another tab's save) replaces the draft only when it holds no change of the person's: otherwise the draft
  // stays, and the form says so and offers to discard it (a refresh threw the edits away without a word).
  const [base, setBase] = useState<Mandate>(restored?.base ?? mandate);
  const [draft, setDraft] = useState<Draft>(() => restored?.draft ?? draftOf(mandate));
  const [problems, setProblems] = useState<DraftProblem[]>([]);
  const formRef = useRef<HTMLFormElement>(null);
  // Each refusal of the draft moves the focus to the first field it names (a count, so the same problems again move it again).
  const [refusals, setRefusals] = useState(0);
  useEffect(() => {
    if (refusals > 0) formRef.current?.querySelector<HTMLElement>('[aria-invalid="true"]')?.focus();
  }, [refusals]);
  /** The props that tie a field to the draft's problems: its name, and while a problem names it, invalid and described by them. */
  const field = (name: string) => {
    const invalid = problems.some((problem) => problem.field === name);
    return { 'data-field': name, 'aria-invalid': invalid ? ('true' as const) : undefined, 'aria-describedby': invalid ? 'mandate-problems' : undefined };
  };
  const action = useAction();
  const merchants = useKnownMerchants(agentId, mandate, draft.budgets.some((row) => row.scope === 'merchantId'));
  const set = (change: Partial<Draft>) => setDraft((current) => ({ ...current, ...change }));
  // The form's content without the rows' React keys: what a save would change, compared with the version it was filled from.
  const unsaved = draftContent(draft) !== draftContent(draftOf(base));
  const showVersion = (shown: Mandate) => {
    setBase(shown);
    setDraft(draftOf(shown));
    setRestoredShown(false);
  };
  useEffect(() => {
    if (mandate.version !== base.version && !unsaved) showVersion(mandate);
  }, [mandate.version]);
  useLeaveGuard(unsaved ? 'Leave this page? Your changes to the mandate are not saved.' : undefined, { form, draft: { base, draft } satisfies KeptMandateDraft });
  const setRow = (key: number, change: Partial<BudgetRow>) => set({ budgets: draft.budgets.map((row) => (row.key === key ? { ...row, ...change } : row)) });
  // A removed row takes its button, which had the focus, with it: the focus goes to what now stands in its place
  // (the next row's first field, or "Add a budget"), not to the page's body, whence a keyboard starts over.
  const budgetsRef = useRef<HTMLFieldSetElement>(null);
  const addBudgetRef = useRef<HTMLButtonElement>(null);
  const [removedAt, setRemovedAt] = useState<number | undefined>();
  useEffect(() => {
    if (removedAt === undefined) return;
    const next = budgetsRef.current?.querySelectorAll('.budget-row')[removedAt]?.querySelector('select');
    (next ?? addBudgetRef.current)?.focus();
    setRemovedAt(undefined);
  }, [removedAt]);
  const save = (event: Event) => {
    event.preventDefault();
    // A draft without changes is the version in force, whatever the form last showed: saved on that one.
    const on = unsaved ? base : mandate;
    const built = mandateBody(on, withMerchantIds(unsaved ? draft : draftOf(mandate), merchants.data ?? []));
    if ('problems' in built) {
      setProblems(built.problems);
      setRefusals((n) => n + 1);
      action.clear();
      return;
    }
    setProblems([]);
    void action.run(async () => {
      // A PUT replaces the whole mandate: one changed elsewhere since this form was filled (the API, another tab)
      // would be overwritten by what the form still shows. If-Match makes the change only on the version shown.
      const answer = await api.PUT('/v1/owner/agents/{id}/mandate', {
        params: { path: { id: agentId }, header: { 'Idempotency-Key': newKey(), 'If-Match': `"${on.version}"` } },
        body: built.body as never,
      });
      if (answer.response.status === 412) {
        onSaved();
        const current = (answer.error as { currentVersion?: number } | undefined)?.currentVersion;
        throw new Error(
          `Not saved: the mandate changed since this page showed it (version ${on.version}, now ${current ?? 'newer'}). ` +
            (unsaved ? 'Your changes are still in the form: discard them to see the new version, then make them again.' : 'The form shows the new version; make your change again.'),
        );
      }
      let saved;
      try {
        saved = ok(answer);
      } catch (error) {
        if (error instanceof ApiProblem && error.status === 400) throw new ApiProblem(error.status, error.code, mandateRefusalInWords(error.detail), error.body);
        throw error;
      }
      showVersion(saved as Mandate);
      onSaved();
      // The gateway writes no version for the mandate in force (docs/decisions.md "A PUT of the mandate in force writes nothing").
      return saved.version === on.version ? `No change: mandate version ${saved.version} is in force as it was.` : `Saved: mandate version ${saved.version}.`;
    });
  };
  return (
    // data-version: the version the draft was filled from (a refill after a reload lands a render after the answer).
    <form onSubmit={save} class="stack mandate" noValidate data-version={base.version} ref={formRef}>
      {restoredShown && unsaved ? (
        <div class="notice" role="status">
          <p>Your unsaved changes were restored: you were signed out before they were saved. Check them, then save.</p>
          <button type="button" onClick={() => showVersion(mandate)}>
            Discard them
          </button>
        </div>
      ) : null}
      {mandate.version !== base.version ? (
        <div class="error" role="status">
          <p>
            Version {mandate.version} was saved elsewhere while you edited version {base.version}. Your changes are still here; saving them
            would replace version {mandate.version}, so it is refused.
          </p>
          <button type="button" onClick={() => showVersion(mandate)}>
            Discard my changes and show version {mandate.version}
          </button>
        </div>
      ) : null}
      <fieldset ref={budgetsRef}>
        <legend>Budgets</legend>
        {draft.budgets.length === 0 ? <p class="muted">No budget: nothing limits spending per period.</p> : null}
        {draft.budgets.map((row, index) => (
          <div class="budget-row" key={row.key}>
            <label>
              Budget {index + 1} period
              <select value={row.period} onChange={(event) => setRow(row.key, { period: (event.currentTarget as HTMLSelectElement).value as Period })}>
                {PERIODS.map(([value, label]) => (
                  <option value={value}>{label}</option>
                ))}
              </select>
            </label>
            <label>
              Budget {index + 1} limit (credits)
              <input {...field(`budget-${index}-limit`)} inputMode="decimal" value={row.limit} onInput={(event) => setRow(row.key, { limit: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
            </label>
            <label>
              Budget {index + 1} covers
              <select value={row.scope} onChange={(event) => setRow(row.key, { scope: (event.currentTarget as HTMLSelectElement).value as ScopeKind })}>
                {SCOPES.map(([value, label]) => (
                  <option value={value}>{label}</option>
                ))}
              </select>
            </label>
            {row.scope === 'merchantId' ? (
              <MerchantPicker
                label={`Budget ${index + 1} merchant`}
                value={row.scopeValue}
                typed={row.typed === true}
                merchants={merchants.data ?? []}
                loading={merchants.loading}
                unreadable={merchants.error !== undefined && merchants.data === undefined}
                field={field(`budget-${index}-scope`)}
                onChange={(change) => setRow(row.key, change)}
              />
            ) : row.scope !== 'all' ? (
              <label>
                Budget {index + 1} {row.scope === 'category' ? 'category' : 'service id'}
                <input {...field(`budget-${index}-scope`)} value={row.scopeValue} onInput={(event) => setRow(row.key, { scopeValue: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
              </label>
            ) : null}
            <button
              type="button"
              onClick={() => {
                set({ budgets: draft.budgets.filter((other) => other.key !== row.key) });
                setRemovedAt(index);
              }}
            >
              Remove budget {index + 1}
            </button>
          </div>
        ))}
        <button type="button" ref={addBudgetRef} onClick={() => set({ budgets: [...draft.budgets, { key: ++rowKeys, period: 'day', limit: '', scope: 'all', scopeValue: '' }] })}>
          Add a budget
        </button>
      </fieldset>
      <fieldset>
        <legend>Purchases</legend>
        <label>
          Ask me to approve purchases above (credits)
          <input {...field('approvalAbove')} inputMode="decimal" value={draft.approvalAbove} onInput={(event) => set({ approvalAbove: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
          <span class="hint">Empty: no purchase waits for you.</span>
        </label>
        <label>
          Largest single purchase (credits)
          <input {...field('perHold')} inputMode="decimal" value={draft.perHold} onInput={(event) => set({ perHold: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
          <span class="hint">Empty: no limit.</span>
        </label>
        <KeptRules mandate={mandate} />
        <label>
          Allowed categories
          <input {...field('categories')} value={draft.categories} onInput={(event) => set({ categories: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
          <span class="hint">Comma-separated; * allows every category.</span>
        </label>
        <label>
          Merchants it may buy from
          <select value={draft.allowRule} onChange={(event) => set({ allowRule: (event.currentTarget as HTMLSelectElement).value as Draft['allowRule'] })}>
            <option value="any">Any merchant not refused below</option>
            <option value="only">Only the merchants listed</option>
          </select>
        </label>
        {draft.allowRule === 'only' ? (
          <label>
            Only these merchants
            <input value={draft.allow} onInput={(event) => set({ allow: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
            <span class="hint">Merchant ids or verified domains, comma-separated; empty: no merchant at all.</span>
          </label>
        ) : null}
        <label>
          Never these merchants
          <input value={draft.deny} onInput={(event) => set({ deny: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
        </label>
      </fieldset>
      <fieldset>
        <legend>When</legend>
        <label>
          Time zone of daily, weekly and monthly budgets
          <input {...field('timeZone')} value={draft.timeZone} onInput={(event) => set({ timeZone: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" />
        </label>
        <p class="hint">Valid from and until are in this browser's time zone ({Intl.DateTimeFormat().resolvedOptions().timeZone}); empty: no limit.</p>
        <label>
          Valid from
          <input
            {...field('notBefore')}
            type="datetime-local"
            value={draft.notBefore}
            onInput={(event) => set({ notBefore: (event.currentTarget as HTMLInputElement).value, notBeforeIncomplete: (event.currentTarget as HTMLInputElement).validity.badInput })}
          />
        </label>
        <label>
          Valid until
          <input
            {...field('notAfter')}
            type="datetime-local"
            value={draft.notAfter}
            onInput={(event) => set({ notAfter: (event.currentTarget as HTMLInputElement).value, notAfterIncomplete: (event.currentTarget as HTMLInputElement).validity.badInput })}
          />
        </label>
      </fieldset>
      <fieldset>
        <legend>Alerts and delegates</legend>
        <label>
          Alert at (percent of each budget; the owner webhook hears budget.threshold)
          <input {...field('alertThresholds')} value={draft.alertThresholds} onInput={(event) => set({ alertThresholds: (event.currentTarget as HTMLInputElement).value })} autocomplete="off" inputMode="numeric" />
        </label>
        <label>
          Levels of delegates this agent may register below it (0: none)
          <input
            {...field('delegationDepth')}
            type="number"
            min={0}
            max={DELEGATION_DEPTH_MAX}
            step={1}
            value={draft.delegationDepth}
            onInput={(event) => set({ delegationDepth: (event.currentTarget as HTMLInputElement).value })}
          />
        </label>
      </fieldset>
      {problems.length > 0 ? (
        <div class="error" role="alert" id="mandate-problems">
          <p>The mandate was not saved:</p>
          <ul>
            {problems.map((problem) => (
              <li>{problem.message}</li>
            ))}
          </ul>
        </div>
      ) : null}
      <p>
        <button type="submit" class="primary" disabled={action.busy}>
          Save mandate
        </button>
      </p>
      <Outcome action={action} />
    </form>
  );
}

function ReceiptCheck({ label, receipt }: { label: string; receipt: string }) {
  const { settings } = useConsole();
  const [result, setResult] = useState<Verification | undefined>();
  const [busy, setBusy] = useState(false);
  return (
    <div class="receipt">
      <button
        type="button"
        disabled={busy}
        onClick={async () => {
          setBusy(true);
          setResult(await verifyReceipt(receipt, settings));
          setBusy(false);
        }}
      >
        Verify {label}
      </button>
      {result ? (
        <div class={result.valid ? 'verified' : 'error'} role="status">
          <p>{result.valid ? `Signature valid: signed by this gateway (key ${result.kid ?? 'without kid'}).` : result.reason}</p>
          {result.claims ? (
            <dl class="claims">
              {Object.entries(result.claims).map(([name, value]) => (
                <div>
                  <dt>{name}</dt>
                  <dd>{typeof value === 'string' ? value : JSON.stringify(value)}</dd>
                </div>
              ))}
            </dl>
          ) : null}
        </div>
      ) : null}
    </div>
  );
}

const STATE_WORDS: Record<string, string> = { held: 'Held', captured: 'Captured', released: 'Released', expired: 'Expired' };
/** A hold the kill switch released: its voucher was withdrawn, which a plain "Released" would hide. */
const REVOKED_WORDS: Record<string, string> = { agent_frozen: 'Revoked by a freeze', agent_retired: 'Revoked at retirement' };

/**
 * What a hold bought, by the names it was sold under (the list's `expand=offer`): the offer and the merchant's
 * verified domain, or the built-in service's action; the ids alone for a hold older than those records.
 */
function Bought({ hold }: { hold: Redemption }) {
  const offer = hold.offer as { name?: unknown; merchantDomain?: unknown; title?: unknown } | null | undefined;
  const ids = (
    <span class="hint">
      {' '}
      <code>{hold.offerId}</code> at <code>{hold.acceptorId}</code>
    </span>
  );
  if (offer && typeof offer.name === 'string' && typeof offer.merchantDomain === 'string') {
    return (
      <>
        <bdi>{offer.name}</bdi> from <bdi>{offer.merchantDomain}</bdi>
        {ids}
      </>
    );
  }
  if (offer && typeof offer.title === 'string') {
    return (
      <>
        <bdi>{offer.title}</bdi> (built-in service){ids}
      </>
    );
  }
  return (
    <>
      offer <code>{hold.offerId}</code> at <code>{hold.acceptorId}</code>
    </>
  );
}

/** The lots that fund the agent, a page of 100 at a time, in burn-down order (every refund adds one). */
function Lots({ agentId, tick }: { agentId: string; tick: number }) {
  const { api } = useConsole();
  const lots = usePages<Lot>(async (startingAfter) => {
    const page = ok(await api.GET('/v1/owner/agents/{id}/lots', { params: { path: { id: agentId }, query: { limit: 100, startingAfter } } }));
    return { items: page.lots, hasMore: page.hasMore };
  }, [agentId, tick]);
  if (lots.error) return <LoadError error={lots.error} />;
  if (!lots.data) return <p class="muted">Loading…</p>;
  if (lots.data.items.length === 0) return <p class="muted">No credit yet.</p>;
  return (
    <>
      <div class="table-scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">Lot</th>
              <th scope="col">Source</th>
              <th scope="col">Granted</th>
              <th scope="col">Remaining</th>
              <th scope="col">Status</th>
              <th scope="col">Expires</th>
            </tr>
          </thead>
          <tbody>
            {lots.data.items.map((lot) => (
              <tr>
                <td>
                  <code>{lot.id}</code>
                </td>
                <td>{lot.source}</td>
                <td>
                  <Amount uc={lot.grantedUc} />
                </td>
                <td>
                  <Amount uc={lot.remainingUc} />
                </td>
                <td>{lot.status}</td>
                <td>
                  <When s={lot.expiresAt} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <ShowMore list={lots} label="Show 100 more lots" end={`All ${lots.data.items.length} lots are shown.`} />
    </>
  );
}

/** The agent's holds, a page of 100 at a time, newest first. */
function Activity({ agentId, tick }: { agentId: string; tick: number }) {
  const { api } = useConsole();
  const holds = usePages<Redemption>(async (startingAfter) => {
    const page = ok(await api.GET('/v1/owner/agents/{agentId}/holds', { params: { path: { agentId }, query: { limit: 100, order: 'desc', startingAfter, expand: 'offer' } } }));
    return { items: page.redemptions, hasMore: page.hasMore };
  }, [agentId, tick]);
  if (holds.error) return <LoadError error={holds.error} />;
  if (!holds.data) return <p class="muted">Loading…</p>;
  if (holds.data.items.length === 0) return <p class="muted">No purchases yet.</p>;
  return (
    <>
      <ul class="activity">
        {holds.data.items.map((hold) => (
          <li class="card">
            <p>
              <strong>{hold.revocation ? REVOKED_WORDS[hold.revocation.reason] ?? 'Revoked' : STATE_WORDS[hold.state] ?? hold.state}</strong> ·{' '}
              {/* A partial capture says what was taken, then the hold (found from outside: "Captured · 2.00" for 1.50 taken). */}
              {hold.state === 'captured' && hold.capturedUc !== hold.amountUc ? (
                <>
                  <Amount uc={hold.capturedUc} /> of <Amount uc={hold.amountUc} /> held
                </>
              ) : (
                <Amount uc={hold.amountUc} />
              )}{' '}
              for{' '}
              <Bought hold={hold} /> ({hold.category}), <When s={hold.createdAt} zoned />
              {/* An open hold lapses back to the agent at its deadline unless the merchant captures it (found from outside: not said). */}
              {hold.state === 'held' && !hold.revocation ? (
                <>
                  ; lapses back to the agent at <When s={hold.expiresAt} zoned /> unless the merchant captures it
                </>
              ) : null}
            </p>
            <p class="muted">
              Captured <Amount uc={hold.capturedUc} />, released <Amount uc={hold.releasedUc} />, refunded <Amount uc={hold.refundedUc} /> · <code>{hold.id}</code>
            </p>
            {hold.captureReceipt ? <ReceiptCheck label="capture receipt" receipt={hold.captureReceipt} /> : null}
            {hold.refunds.map((refund, index) => (refund.receipt ? <ReceiptCheck label={`refund receipt ${index + 1}`} receipt={refund.receipt} /> : null))}
          </li>
        ))}
      </ul>
      <ShowMore list={holds} label="Show 100 older purchases" end={`All ${holds.data.items.length} purchases are shown.`} />
    </>
  );
}

/** The agent's delegates at every depth (issue 28), indented by depth, each with its status and budget bars. */
/** Where a merchant's `voucher.revoked` event stands, in words (FreezeMerchant.webhook). */
const TOLD: Record<string, string> = {
  delivered: 'told: its webhook received the revocation',
  pending: 'being told: the revocation is queued for its webhook',
  failing: 'not reached yet: its webhook has not accepted the revocation (retrying)',
  disabled: 'not told by webhook: the gateway gave up on its webhook',
  paused: 'not told yet: its webhook is paused, and gets the revocation when it resumes',
  none: 'has no webhook',
};

/**
 * How far the agent's latest freeze reached (GET …/freeze): what it released, and each merchant that held a revoked
 * voucher with where its telling stands, as the CLI and the API say it (found from outside: the console said only
 * how many holds were released), and when its next attempt is due while it waits (a merchant's open circuit holds
 * it back for minutes). Shown while the agent is frozen.
 */
function FreezeReach({ agentId, tick }: { agentId: string; tick: number }) {
  const { api } = useConsole();
  const report = useLoad(async () => ok(await api.GET('/v1/owner/agents/{id}/freeze', { params: { path: { id: agentId } } })), [agentId, tick]);
  if (report.error) return <LoadError error={report.error} />;
  if (!report.data) return <p class="muted">Loading…</p>;
  const { releaseHolds, releasedHolds, releasedUc, merchants, frozenAt } = report.data;
  if (!releaseHolds) {
    return (
      <p>
        Frozen <When s={frozenAt} /> without releasing its holds: their merchants can still capture them. Release them to revoke their vouchers.
      </p>
    );
  }
  return (
    <>
      <p>
        Frozen <When s={frozenAt} />: {releasedHolds} hold{releasedHolds === 1 ? '' : 's'} released, {credits(releasedUc)} credits back, their vouchers revoked.
        {merchants.length > 0 ? ' Every merchant that held one refuses it at capture (409 voucher_revoked) and lists it in its revocations feed; by webhook:' : ''}
      </p>
      {merchants.length > 0 ? (
        <ul>
          {merchants.map((merchant) => (
            <li>
              <code>{merchant.merchantId}</code>, {merchant.holdIds.length} voucher{merchant.holdIds.length === 1 ? '' : 's'}: {TOLD[merchant.webhook] ?? merchant.webhook}
              {merchant.lastAttemptAt !== null ? (
                <>
                  {' '}
                  (last attempt <When s={merchant.lastAttemptAt} />)
                </>
              ) : null}
              {merchant.nextAttemptAt !== null ? (
                <>
                  {' '}
                  (next attempt <When s={merchant.nextAttemptAt} />)
                </>
              ) : null}
            </li>
          ))}
        </ul>
      ) : null}
    </>
  );
}

function Delegates({ agentId, tick }: { agentId: string; tick: number }) {
  const { api } = useConsole();
  const tree = useLoad(async () => ok(await api.GET('/v1/owner/agents/{id}/delegates', { params: { path: { id: agentId } } })), [agentId, tick]);
  if (tree.error) return <LoadError error={tree.error} />;
  if (!tree.data) return <p class="muted">Loading…</p>;
  const below = tree.data.nodes.filter((node) => node.agent.id !== agentId);
  if (below.length === 0) return <p class="muted">No delegates. An agent whose mandate allows delegation registers them (POST /v1/agents/{'{id}'}/delegates).</p>;
  const rootDepth = tree.data.nodes[0]!.agent.depth;
  const names = new Map(tree.data.nodes.map((node) => [node.agent.id, node.agent.name]));
  return (
    <ul class="delegates">
      {below.map((node) => (
        <li class={`level-${Math.min(node.agent.depth - rootDepth, 8)}`}>
          <a href={`/console/agents/${encodeURIComponent(node.agent.id)}`}>{node.agent.name}</a> <StatusBadge agent={node.agent} names={names} />
          {node.agent.retiredAt ? <span class="muted"> retired</span> : null} <code class="muted">{node.agent.id}</code>
          {node.usage.map((usage) => (
            <BudgetBar usage={usage} />
          ))}
        </li>
      ))}
      {tree.data.truncated ? <li class="muted">More delegates than shown (the deepest are left out).</li> : null}
    </ul>
  );
}

/**
 * What stays spent: captured by merchants, less what they refunded. `capturedUc` counts every capture before its
 * refunds (a refund comes back as a new lot), so alone it overstated spending by every refund, and disagreed with
 * the Spending page (`GET /v1/owner/spending`), which is after refunds.
 */
function Spent({ balance }: { balance: Schemas['Balance'] }) {
  const refundedUc = BigInt(balance.refundedUc);
  const spentUc = BigInt(balance.capturedUc) - refundedUc;
  return (
    <>
      <Amount uc={spentUc.toString()} />
      {refundedUc > 0n ? (
        <>
          {' '}
          <span class="hint">
            {credits(balance.capturedUc)} captured, {credits(refundedUc)} refunded
          </span>
        </>
      ) : null}
    </>
  );
}

export function AgentPage({ id }: { id: string }) {
  const { api } = useConsole();
  const [tick, setTick] = useState(0);
  const agent = useLoad(async () => ok(await api.GET('/v1/owner/agents/{id}', { params: { path: { id } } })), [id, tick]);
  const figures = useLoad(async () => {
    const path = { params: { path: { id } } };
    const [balance, mandate] = await Promise.all([api.GET('/v1/owner/agents/{id}/balance', path).then(ok), api.GET('/v1/owner/agents/{id}/mandate', path).then(ok)]);
    return { balance, mandate };
  }, [id, tick]);
  const refresh = () => setTick((n) => n + 1);
  const name = agent.data?.name ?? 'Agent';
  return (
    <>
      <p class="crumbs">
        <a href="/console">Agents</a> /
      </p>
      <PageHead title={name} loads={[agent, figures]} onRefresh={refresh}>
        {agent.data ? <StatusBadge agent={agent.data} /> : null}
      </PageHead>
      {agent.data ? (
        <p>
          <code class="muted">{agent.data.id}</code> · identity <code>{agent.data.identity.subject}</code> at <code>{agent.data.identity.issuer}</code>
        </p>
      ) : null}
      {agent.data ? <FreezeButton agent={agent.data} onChanged={refresh} /> : null}
      {figures.data ? (
        <>
          <section aria-labelledby="balance-title">
            <h2 id="balance-title">Balance and budgets</h2>
            <dl class="figures">
              <div>
                <dt>{treeLabel('Available', figures.data.balance.fundedBy)}</dt>
                <dd>
                  <Amount uc={figures.data.balance.availableUc} />
                </dd>
              </div>
              <div>
                <dt>{treeLabel('Held', figures.data.balance.fundedBy)}</dt>
                <dd>
                  <Amount uc={figures.data.balance.heldUc} />
                </dd>
              </div>
              <div>
                <dt>{treeLabel('Spent', figures.data.balance.fundedBy)}</dt>
                <dd>
                  <Spent balance={figures.data.balance} />
                </dd>
              </div>
            </dl>
            <TreeFunds fundedBy={figures.data.balance.fundedBy} />
            {figures.data.mandate.usage.map((usage) => (
              <BudgetBar usage={usage} timeZone={figures.data!.mandate.timeZone} />
            ))}
          </section>
          <section aria-labelledby="mandate-title">
            <h2 id="mandate-title">Mandate</h2>
            <p class="muted">
              Version {figures.data.mandate.version} · hash <code>{figures.data.mandate.hash}</code>
            </p>
            <MandateWindow mandate={figures.data.mandate} />
            <MandateEditor key={id} agentId={id} mandate={figures.data.mandate} onSaved={refresh} />
          </section>
          {agent.data?.status === 'frozen' ? (
            <section aria-labelledby="freeze-title">
              <h2 id="freeze-title">Kill switch</h2>
              <FreezeReach agentId={id} tick={tick} />
            </section>
          ) : null}
          <section aria-labelledby="lots-title">
            <h2 id="lots-title">Credit lots</h2>
            <Lots agentId={id} tick={tick} />
          </section>
          <section aria-labelledby="delegates-title">
            <h2 id="delegates-title">Delegates</h2>
            <Delegates agentId={id} tick={tick} />
          </section>
          <section aria-labelledby="activity-title">
            <h2 id="activity-title">Activity</h2>
            <Activity agentId={id} tick={tick} />
          </section>
        </>
      ) : null}
    </>
  );
}
