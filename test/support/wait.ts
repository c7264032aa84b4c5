// The one way a test waits for something to happen: poll a probe until its value is the one awaited.
// A wait that times out throws, naming what it waited for, for how long, and what the probe last saw
// (or last threw), so a test never goes on as if the condition held.
import { inspect } from 'node:util';

export interface WaitOptions<T> {
  /** What is awaited, completing "timed out waiting for …": `'the hold to be released'`. */
  what: string;
  /** How long to keep polling before throwing. Generous: a loaded machine is slow, a passing wait returns early. */
  timeoutMs?: number;
  /** Pause between two probes. */
  intervalMs?: number;
  /** Whether the probe's value is the one awaited; without it, any truthy value is. */
  until?: (value: T) => boolean;
}

type Truthy<T> = Exclude<T, false | 0 | 0n | '' | null | undefined>;

const TIMEOUT_MS_DEFAULT = 10_000;
const INTERVAL_MS_DEFAULT = 25;
/** A last value longer than this is cut in the timeout's message. */
const SHOWN_CHARS_MAX = 2_000;

type Attempt<T> = { value: T } | { error: unknown };

/**
 * Polls `probe` every `intervalMs` until its value satisfies `until` (or is truthy), and returns that value.
 * A probe that throws is tried again; one still running at the deadline is not waited for.
 */
export function waitFor<T>(probe: () => T | Promise<T>, options: WaitOptions<T> & { until: (value: T) => boolean }): Promise<T>;
export function waitFor<T>(probe: () => T | Promise<T>, options: WaitOptions<T>): Promise<Truthy<T>>;
export async function waitFor<T>(probe: () => T | Promise<T>, options: WaitOptions<T>): Promise<T> {
  const { what, timeoutMs = TIMEOUT_MS_DEFAULT, intervalMs = INTERVAL_MS_DEFAULT, until = Boolean } = options;
  const deadlineMs = Date.now() + timeoutMs;
  let last: Attempt<T> | undefined;
  for (let probes = 1; ; probes++) {
    const attempt = await attemptBefore(probe, deadlineMs);
    if (attempt === 'late') throw timedOut(what, timeoutMs, probes, last, true);
    last = attempt;
    if ('value' in attempt && until(attempt.value)) return attempt.value;
    const leftMs = deadlineMs - Date.now();
    if (leftMs <= 0) throw timedOut(what, timeoutMs, probes, last, false);
    await new Promise((resolve) => setTimeout(resolve, Math.min(intervalMs, leftMs)));
  }
}

/** Runs the probe once; 'late' if it has not settled by the deadline (a request to a stalled server). */
function attemptBefore<T>(probe: () => T | Promise<T>, deadlineMs: number): Promise<Attempt<T> | 'late'> {
  const settled = (async () => probe())().then(
    (value): Attempt<T> => ({ value }),
    (error: unknown): Attempt<T> => ({ error }),
  );
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), Math.max(0, deadlineMs - Date.now()))));
  return Promise.race([settled, late]).finally(() => clearTimeout(timer));
}

function timedOut<T>(what: string, timeoutMs: number, probes: number, last: Attempt<T> | undefined, stillRunning: boolean): Error {
  const seen =
    last === undefined ? 'the probe never answered' : 'value' in last ? `last value: ${shown(last.value)}` : `the probe last threw: ${describeError(last.error)}`;
  const running = stillRunning && last !== undefined ? '; the probe after it was still running' : '';
  const message = `timed out after ${timeoutMs} ms (${probes} probes) waiting for ${what}; ${seen}${running}`;
  return new Error(message, last && 'error' in last ? { cause: last.error } : undefined);
}

function shown(value: unknown): string {
  const text = inspect(value, { depth: 4, breakLength: Infinity, maxArrayLength: 20, maxStringLength: SHOWN_CHARS_MAX });
  return text.length > SHOWN_CHARS_MAX ? `${text.slice(0, SHOWN_CHARS_MAX)}…` : text;
}

/** An error's name and message, and its cause's (fetch's own message, "fetch failed", names no reason). */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return shown(error);
  const cause = error.cause instanceof Error ? ` (cause: ${error.cause.name}: ${error.cause.message})` : '';
  return `${error.name}: ${error.message}${cause}`;
}
