// Budget periods: calendar days, ISO weeks (Monday to Monday) and months in the mandate's IANA time zone, or
// all time (`total`). A hold counts in the period that contains its creation time; the period's usage starts
// again at the next boundary. Daylight-saving changes are handled by converting the local midnight of each
// boundary to UTC in that zone (a day of 23 or 25 hours is still one day).
export const BUDGET_PERIODS = ['day', 'week', 'month', 'total'] as const;
export type BudgetPeriod = (typeof BUDGET_PERIODS)[number];

export interface PeriodBounds {
  /** Unix seconds of the period's first instant (0 for `total`). */
  startS: number;
  /** Unix seconds of the next period's first instant; null for `total`, which never resets. */
  resetsAtS: number | null;
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (!formatter) {
    formatter = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/**
 * True when `timeZone` is an IANA time zone this runtime knows (or UTC). Not the `SystemV/…` names, which the
 * runtime's ICU still knows but IANA removed in 2020b: a mandate names its zone for any reader of its evidence, whose
 * zone database need not know them.
 */
export function isTimeZone(timeZone: string): boolean {
  if (/^systemv\//i.test(timeZone)) return false;
  try {
    formatterOf(timeZone);
    return true;
  } catch {
    return false;
  }
}

/**
 * The zone as the mandate stores it: IANA's spelling when the one sent differs from the runtime's only by case
 * (`europe/paris` is `Europe/Paris`, `utc` is `UTC`), so the same rules make one document and one hash; otherwise
 * as sent, since the runtime's spelling is not always IANA's (Node 20 reads Asia/Kolkata as Asia/Calcutta).
 * For a zone `isTimeZone` accepts.
 */
export function spelledTimeZone(timeZone: string): string {
  const runtime = formatterOf(timeZone).resolvedOptions().timeZone;
  return runtime !== timeZone && runtime.toLowerCase() === timeZone.toLowerCase() ? runtime : timeZone;
}

/** Whether two zones `isTimeZone` accepts are one zone (an alias of it too: Asia/Calcutta is Asia/Kolkata). */
export function sameTimeZone(a: string, b: string): boolean {
  return a === b || formatterOf(a).resolvedOptions().timeZone === formatterOf(b).resolvedOptions().timeZone;
}

interface LocalTime {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
}

function localTime(timeZone: string, atMs: number): LocalTime {
  const parts = Object.fromEntries(formatterOf(timeZone).formatToParts(new Date(atMs)).map((part) => [part.type, part.value]));
  return { year: +parts.year!, month: +parts.month!, day: +parts.day!, hour: +parts.hour!, minute: +parts.minute!, second: +parts.second! };
}

/** The zone's offset from UTC at an instant, in milliseconds (local − UTC). */
function offsetMs(timeZone: string, atMs: number): number {
  const local = localTime(timeZone, atMs);
  const asUtc = Date.UTC(local.year, local.month - 1, local.day, local.hour, local.minute, local.second);
  return asUtc - Math.floor(atMs / 1000) * 1000;
}

const HOUR_MS = 3_600_000;
/** Where a date's local midnight can be, around the same wall time read as UTC: offsets run from −12 h to +14 h. */
const MIDNIGHT_WINDOW_MS = 14 * HOUR_MS;

/**
 * The first instant (Unix seconds) of a calendar date in the zone: its local midnight, the earlier one where
 * midnight repeats (Tunis in 1977 went back from 01:00 to 00:00; St. John's in 1995 from 00:01 to 23:01 of the day
 * before), and the end of the gap where clocks skip midnight itself (Havana, Santiago, Beirut).
 */
function localMidnightS(timeZone: string, year: number, month: number, day: number): number {
  const wallMs = Date.UTC(year, month - 1, day);
  // A midnight of the date is the wall time less the offset in force at it, one of the offsets in force around it:
  // each such offset gives a candidate, and the earliest that reads 00:00:00 on the date is the first. (The offset at
  // the wall time alone, or at a guess made with it, missed the earlier midnight where the change was just after it.)
  const offsets = new Set([-MIDNIGHT_WINDOW_MS, -HOUR_MS * 7, 0, HOUR_MS * 7, MIDNIGHT_WINDOW_MS].map((from) => offsetMs(timeZone, wallMs + from)));
  const midnights = [...offsets]
    .map((offset) => wallMs - offset)
    .filter((atMs) => {
      const local = localTime(timeZone, atMs);
      return local.year === year && local.month === month && local.day === day && local.hour === 0 && local.minute === 0 && local.second === 0;
    });
  if (midnights.length > 0) return Math.floor(Math.min(...midnights) / 1000);
  // Midnight skipped: the date begins where the gap ends, the first second whose local date is the date (or after).
  const reached = (atS: number) => {
    const local = localTime(timeZone, atS * 1000);
    return Date.UTC(local.year, local.month - 1, local.day) >= wallMs;
  };
  let before = Math.floor((wallMs - MIDNIGHT_WINDOW_MS - HOUR_MS) / 1000);
  let after = Math.floor((wallMs + MIDNIGHT_WINDOW_MS + HOUR_MS) / 1000);
  while (after - before > 1) {
    const middle = Math.floor((before + after) / 2);
    if (reached(middle)) after = middle;
    else before = middle;
  }
  return after;
}

/** A calendar date moved by whole days (month and year boundaries included). */
function addDays(date: { year: number; month: number; day: number }, days: number): { year: number; month: number; day: number } {
  const moved = new Date(Date.UTC(date.year, date.month - 1, date.day + days));
  return { year: moved.getUTCFullYear(), month: moved.getUTCMonth() + 1, day: moved.getUTCDate() };
}

const ALL_TIME: PeriodBounds = Object.freeze({ startS: 0, resetsAtS: null });

/**
 * The last period found per kind and zone. Nearly every call (each budget of each hold) falls in the same
 * period as the call before, and finding one asks the zone's calendar up to five times (about 30 µs), so the
 * hold pass would spend more on calendars than on its ledger. Bounded by the kinds times the zones the runtime
 * knows; cleared whole if it ever passes that.
 */
const lastPeriods = new Map<string, PeriodBounds>();
const LAST_PERIODS_MAX = 4_096;

/** The period of `period` that contains the instant `atS`, in `timeZone`. */
export function periodOf(period: BudgetPeriod, timeZone: string, atS: number): PeriodBounds {
  if (period === 'total') return ALL_TIME;
  const key = `${period}\n${timeZone}`;
  const last = lastPeriods.get(key);
  if (last && last.startS <= atS && atS < last.resetsAtS!) return last;
  const bounds = Object.freeze(calendarPeriodOf(period, timeZone, atS));
  if (lastPeriods.size >= LAST_PERIODS_MAX) lastPeriods.clear();
  lastPeriods.set(key, bounds);
  return bounds;
}

function calendarPeriodOf(period: Exclude<BudgetPeriod, 'total'>, timeZone: string, atS: number): PeriodBounds {
  const local = localTime(timeZone, atS * 1000);
  let start = { year: local.year, month: local.month, day: local.day };
  if (period === 'week') start = addDays(start, -((new Date(Date.UTC(start.year, start.month - 1, start.day)).getUTCDay() + 6) % 7));
  if (period === 'month') start = { ...start, day: 1 };
  const next = followingStart(period, start);
  const bounds = { startS: localMidnightS(timeZone, start.year, start.month, start.day), resetsAtS: localMidnightS(timeZone, next.year, next.month, next.day) };
  // Where clocks go back across a midnight that was shown (St. John's in 1995, from 00:01 to 23:01), the hour after
  // the change reads the earlier date again, though the next period has begun: the instant is in that one,
  // so periods follow each other without a gap or an overlap and each contains every instant it is asked for.
  if (atS < bounds.resetsAtS) return bounds;
  const after = followingStart(period, next);
  return { startS: bounds.resetsAtS, resetsAtS: localMidnightS(timeZone, after.year, after.month, after.day) };
}

/** The first date of the period after the one that begins on `start` (a day, an ISO week's Monday, a month's 1st). */
function followingStart(period: Exclude<BudgetPeriod, 'total'>, start: { year: number; month: number; day: number }): { year: number; month: number; day: number } {
  if (period === 'day') return addDays(start, 1);
  if (period === 'week') return addDays(start, 7);
  return start.month === 12 ? { year: start.year + 1, month: 1, day: 1 } : { year: start.year, month: start.month + 1, day: 1 };
}
