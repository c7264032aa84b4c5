// What every page shares: the console's context (settings, the API, the owner), loading and acting with
// messages a person understands, amounts and times, budget bars, copy buttons, the human confirmation, and the
// question asked before what cannot be undone.
import type { ComponentChildren, RefObject } from 'preact';
import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useId, useRef, useState } from 'preact/hooks';
import { ApiProblem, HumanSessionRequired, type Api, type Schemas } from './api.ts';
import { SignInRequired, type Auth } from './auth.ts';
import { credits } from './money.ts';
import type { Settings } from './settings.ts';

export interface Console {
  settings: Settings;
  auth: Auth;
  api: Api;
  owner: { id: string; email: string };
  /** A human session for a step only a person may take (approving a top-up): asks the person to confirm. */
  humanSession(purpose: string): Promise<string>;
  /** Forgets the human session (it was refused). */
  forgetHumanSession(): void;
  /** Says `text` once through the frame's polite live region, without moving the focus (`PageHead`). */
  announce(text: string): void;
}

export const ConsoleContext = createContext<Console | undefined>(undefined);

export function useConsole(): Console {
  const context = useContext(ConsoleContext);
  if (!context) throw new Error('outside the console');
  return context;
}

/**
 * An id in the page's address that cannot name anything (a mistyped or pasted link): the gateway refuses the path
 * parameter itself (400 on `params/…`, or 414 when it is too long), which is "not found" in the person's words, not
 * the schema's (found from outside: `params/id must match pattern …`).
 */
function refusesAddress(problem: ApiProblem): boolean {
  if (problem.code === 'uri_too_long') return true;
  const errors = problem.body.errors;
  return problem.status === 400 && Array.isArray(errors) && errors.length > 0 && errors.every((e) => typeof e?.path === 'string' && e.path.startsWith('params/'));
}

/** What went wrong, in words: the gateway's own detail for a refusal, plainly otherwise. */
export function describe(error: unknown): string {
  if (error instanceof ApiProblem) return error.status === 404 || refusesAddress(error) ? 'Not found (or not yours).' : error.detail;
  if (error instanceof SignInRequired || error instanceof HumanSessionRequired) return error.message;
  if (error instanceof TypeError) return 'The gateway could not be reached. Check that it is running, then try again.';
  return error instanceof Error ? error.message : String(error);
}

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  /** The last read failed and `data` is an earlier answer, which may no longer be true (LoadError says so). */
  stale: boolean;
  loading: boolean;
  reload(): void;
}

/** Loads when `deps` change and when asked again; the last answer stays on screen while the next one loads. */
export function useLoad<T>(load: () => Promise<T>, deps: readonly unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let current = true;
    setState((previous) => ({ ...previous, loading: true }));
    load().then(
      (data) => current && setState({ data, loading: false }),
      (error: unknown) => current && setState((previous) => ({ data: previous.data, error, loading: false })),
    );
    return () => {
      current = false;
    };
  }, [...deps, round]);
  const reload = useCallback(() => setRound((n) => n + 1), []);
  return { data: state.data, error: state.error, stale: state.error !== undefined && state.data !== undefined, loading: state.loading, reload };
}

export interface Paged<T> extends Loaded<{ items: T[]; hasMore: boolean }> {
  /** Asks for the next page, older than the last item shown. */
  more(): void;
}

/**
 * A list the API gives a page at a time, newest first (`startingAfter` the last id shown, `hasMore`): the first
 * page, and one more each time the person asks. A reload reads every page shown again, so nothing shown goes away.
 */
export function usePages<T extends { id: string }>(loadPage: (startingAfter: string | undefined) => Promise<{ items: T[]; hasMore: boolean }>, deps: readonly unknown[]): Paged<T> {
  const [pages, setPages] = useState(1);
  const loaded = useLoad(async () => {
    const items: T[] = [];
    let hasMore = true;
    for (let page = 0; page < pages && hasMore; page++) {
      const answer = await loadPage(items.at(-1)?.id);
      items.push(...answer.items);
      hasMore = answer.hasMore;
    }
    return { items, hasMore };
  }, [...deps, pages]);
  const more = useCallback(() => setPages((n) => n + 1), []);
  return { ...loaded, more };
}

/**
 * The button that shows a paged list's next page, while the API says there is more. Once the last page is shown,
 * a note takes its place and, when the person had asked for it, the focus (it would fall to the page's body).
 */
export function ShowMore({ list, label, end }: { list: Paged<unknown>; label: string; end: string }) {
  const [asked, setAsked] = useState(false);
  const endRef = useRef<HTMLParagraphElement>(null);
  const done = !list.loading && list.data !== undefined && !list.data.hasMore;
  useEffect(() => {
    if (asked && done) endRef.current?.focus();
  }, [asked, done]);
  if (list.data?.hasMore) {
    // Not disabled while it loads: a focused button that is disabled drops the focus.
    return (
      <button
        type="button"
        aria-busy={list.loading}
        onClick={() => {
          if (list.loading) return;
          setAsked(true);
          list.more();
        }}
      >
        {label}
      </button>
    );
  }
  return asked ? (
    <p class="muted" tabIndex={-1} ref={endRef}>
      {end}
    </p>
  ) : null;
}

export interface Action {
  busy: boolean;
  error: unknown;
  notice: string | undefined;
  /** Runs one action of the person: buttons wait, its outcome is said (role=status or alert). */
  run(action: () => Promise<string | void>): Promise<void>;
  /** Forgets the last outcome: the form refused the person's input itself, and an older "saved" would read as this one's. */
  clear(): void;
  /** The outcome's element (`Outcome`), where focus goes when the control the person used is gone. */
  outcomeRef: RefObject<HTMLParagraphElement | null>;
}

/** Actions of the person still running (`useAction`), so a sign-in that ends meanwhile can say one was not done. */
let actionsRunning = 0;

/** Whether an action of the person is running now. */
export const actionRunning = (): boolean => actionsRunning > 0;

export function useAction(): Action {
  const [state, setState] = useState<{ busy: boolean; error?: unknown; notice?: string }>({ busy: false });
  const outcomeRef = useRef<HTMLParagraphElement>(null);
  const run = useCallback(async (action: () => Promise<string | void>) => {
    const origin = focusedControl();
    setState({ busy: true });
    actionsRunning += 1;
    try {
      const notice = await action();
      setState({ busy: false, notice: notice ?? undefined });
    } catch (error) {
      setState({ busy: false, error });
    } finally {
      actionsRunning -= 1;
    }
    // After the render that re-enables the controls (Preact renders in a microtask; this timer runs after it).
    setTimeout(() => keepFocus(origin, outcomeRef.current), 0);
  }, []);
  const clear = useCallback(() => setState({ busy: false }), []);
  return { busy: state.busy, error: state.error, notice: state.notice, run, clear, outcomeRef };
}

/** The element that has focus, unless none has (the body). */
function focusedControl(): HTMLElement | null {
  const active = document.activeElement;
  return active instanceof HTMLElement && active !== document.body ? active : null;
}

/**
 * The focus stays where the person was (WCAG 2.4.3): a control disabled while its action ran lost it to the body, so
 * it gets it back once enabled again, or, when it is gone (Freeze became Unfreeze, a form was replaced), the outcome
 * that says what happened does. Focus the person moved meanwhile is left where it is (found from outside: after
 * Freeze, Unfreeze or Save mandate, the next Tab started from the top of the page).
 */
function keepFocus(origin: HTMLElement | null, outcome: HTMLElement | null): void {
  if (focusedControl() !== null) return;
  if (origin !== null && origin.isConnected && !(origin as HTMLButtonElement).disabled) origin.focus();
  else outcome?.focus();
}

/** The outcome of an action, where a screen reader hears it; it takes focus when its control is gone (`keepFocus`). */
export function Outcome({ action }: { action: Pick<Action, 'error' | 'notice' | 'outcomeRef'> }) {
  if (action.error !== undefined) {
    return (
      <p class="error" role="alert" tabIndex={-1} ref={action.outcomeRef}>
        {describe(action.error)}
      </p>
    );
  }
  return (
    <p class="notice" role="status" tabIndex={-1} ref={action.outcomeRef}>
      {action.notice ?? ''}
    </p>
  );
}

/**
 * Why a read failed; `stale` when the page still shows an earlier answer under it, which it then says may no longer be
 * true (found from outside: a failed Refresh of Approvals read "Nothing waits for you" while a purchase waited). Only
 * shown, never announced here: one outage failed every card's and section's read at once, and as many alerts said the
 * same sentence (found from outside: 5 on a list of 4 agents). The page's failure is said once, by `PageHead`;
 * `alert` for a read the person asked for alone (a delivery's attempts).
 */
export function LoadError({ error, stale = false, alert = false }: { error: unknown; stale?: boolean; alert?: boolean }) {
  return error === undefined ? null : (
    <p class="error" role={alert ? 'alert' : undefined}>
      {loadErrorText(error, stale)}
    </p>
  );
}

function loadErrorText(error: unknown, stale: boolean): string {
  return `${describe(error)}${stale ? ' What this page shows below was read before, and may no longer be true: Refresh once the gateway answers.' : ''}`;
}

/**
 * The head of a page: its title, its Refresh, and why its reads failed. When the page's reads end, their outcome is
 * said once through the frame's live region (`announce`): a failure always, "Updated." when the person asked with
 * Refresh. Refresh is not disabled while it reads, as a focused button that is disabled drops the focus to the body
 * (found from outside: after every Refresh a screen reader's place was lost, and nothing said it was done).
 */
export function PageHead({ title, heading, loads, onRefresh, children }: { title: string; heading?: ComponentChildren; loads: readonly Loaded<unknown>[]; onRefresh?: () => void; children?: ComponentChildren }) {
  const { announce } = useConsole();
  const loading = loads.some((load) => load.loading);
  const failed = loads.find((load) => load.error !== undefined);
  const stale = loads.some((load) => load.stale);
  const asked = useRef(false);
  const wasLoading = useRef(loading);
  useEffect(() => {
    const ended = wasLoading.current && !loading;
    wasLoading.current = loading;
    if (!ended) return;
    if (failed !== undefined) announce(`${asked.current ? 'Not updated: ' : ''}${loadErrorText(failed.error, stale)}`);
    else if (asked.current) announce('Updated.');
    asked.current = false;
  }, [loading]);
  return (
    <>
      <div class="page-head">
        <PageTitle title={title}>{heading ?? title}</PageTitle>
        {children}
        {onRefresh ? (
          <button
            type="button"
            aria-busy={loading}
            onClick={() => {
              if (loading) return;
              asked.current = true;
              onRefresh();
            }}
          >
            Refresh
          </button>
        ) : null}
      </div>
      {failed !== undefined ? <LoadError error={failed.error} stale={stale} /> : null}
    </>
  );
}

export function Amount({ uc }: { uc: string }) {
  return <span class="amount">{credits(uc)} credits</span>;
}

const TIME = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
// dateStyle and timeStyle cannot be combined with timeZoneName (a RangeError), so the fields are named one by one.
const TIME_IN_ZONE = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: 'numeric', minute: '2-digit', timeZoneName: 'short' });

/**
 * A moment in this browser's time zone; `zoned` names the zone too, for a moment set in another one (a budget resets
 * at midnight in its mandate's zone, which need not be the browser's).
 */
export function When({ s, zoned = false }: { s: number | null | undefined; zoned?: boolean }) {
  if (s === null || s === undefined) return <span>—</span>;
  const date = new Date(s * 1000);
  return <time dateTime={date.toISOString()}>{whenText(s, zoned)}</time>;
}

/** The words of `When`, for a sentence (an action's outcome). */
export function whenText(s: number, zoned = false): string {
  return (zoned ? TIME_IN_ZONE : TIME).format(new Date(s * 1000));
}

const PERIOD_NAMES: Record<string, string> = { day: 'Daily', week: 'Weekly', month: 'Monthly', total: 'Total' };

/** A budget's use in its current period: a meter, and the same in words. */
export function BudgetBar({ usage, timeZone }: { usage: Schemas['BudgetUsage']; timeZone?: string }) {
  // A period ends at midnight in the mandate's zone: named when it is not this browser's, so a reset at 10:30 AM says
  // why (found from outside).
  const elsewhere = timeZone !== undefined && timeZone !== Intl.DateTimeFormat().resolvedOptions().timeZone;
  const scope = usage.merchantId ? ` at ${usage.merchantName ?? usage.merchantId}` : usage.category ? ` on ${usage.category}` : usage.serviceId ? ` on ${usage.serviceId}` : '';
  const label = `${PERIOD_NAMES[usage.period] ?? usage.period} budget${scope}`;
  const limit = Number(usage.limitUc);
  const spent = Number(usage.spentUc);
  const id = useId();
  return (
    <div class="budget">
      <span id={id} class="budget-label">
        {label}
      </span>
      <meter aria-labelledby={id} min={0} max={limit} low={limit * 0.8} high={limit * 0.95} optimum={0} value={Math.min(spent, limit)} />
      <span class="budget-text">
        {credits(usage.spentUc)} of {credits(usage.limitUc)} credits spent
        {usage.resetsAt ? (
          <>
            , resets <When s={usage.resetsAt} zoned />
            {elsewhere ? ` (midnight in ${timeZone}, the mandate's time zone)` : null}
          </>
        ) : null}
      </span>
    </div>
  );
}

/** Copies `text` to the clipboard and says so. */
export function CopyButton({ text, label }: { text: string; label: string }) {
  const [said, setSaid] = useState('');
  return (
    <span>
      <button
        type="button"
        onClick={async () => {
          try {
            await navigator.clipboard.writeText(text);
            setSaid('Copied.');
          } catch {
            setSaid('Copying is not allowed here: select the text and copy it.');
          }
        }}
      >
        {label}
      </button>
      <span role="status" class="muted">
        {said}
      </span>
    </span>
  );
}

export function PageTitle({ children, title }: { children: ComponentChildren; title: string }) {
  useEffect(() => {
    document.title = `${title} · Console · Agent Credit Gateway`;
  }, [title]);
  return <h1 tabIndex={-1}>{children}</h1>;
}

/** A modal dialog (the native element: focus stays inside, Escape closes it). */
export function Dialog({ title, open, onClose, children, describedBy }: { title: string; open: boolean; onClose: () => void; children: ComponentChildren; describedBy?: string }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (open && !dialog.open) dialog.showModal();
    if (!open && dialog.open) dialog.close();
  }, [open]);
  const titleId = useId();
  return (
    <dialog ref={ref} aria-labelledby={titleId} aria-describedby={describedBy} onClose={onClose}>
      <h2 id={titleId}>{title}</h2>
      {open ? children : null}
    </dialog>
  );
}

/**
 * A button for what cannot be undone (releasing holds and revoking their vouchers, revoking a key): it asks first,
 * in a modal dialog that says what will happen, and acts only on the dialog's own button. Cancel, Escape and
 * closing the dialog do nothing; the dialog opens on Cancel, so a second Enter does not act either.
 */
export function ConfirmButton(props: { label: string; title: string; consequence: string; confirmLabel: string; disabled?: boolean; onConfirm: () => void }) {
  const [open, setOpen] = useState(false);
  const consequenceId = useId();
  return (
    <>
      <button type="button" disabled={props.disabled} onClick={() => setOpen(true)}>
        {props.label}
      </button>
      <Dialog title={props.title} open={open} onClose={() => setOpen(false)} describedBy={consequenceId}>
        <p id={consequenceId}>{props.consequence}</p>
        <p>
          <button type="button" autoFocus onClick={() => setOpen(false)}>
            Cancel
          </button>{' '}
          <button
            type="button"
            class="danger"
            onClick={() => {
              setOpen(false);
              props.onConfirm();
            }}
          >
            {props.confirmLabel}
          </button>
        </p>
      </Dialog>
    </>
  );
}
