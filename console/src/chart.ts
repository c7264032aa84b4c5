// The spending chart's value axis, in exact µc: the largest day, round ticks (1, 2 or 5 times a power of ten)
// and their labels come from BigInt and money.ts, never through a float, so a label reads what the table reads.
// Only a pixel position goes through Number (a ratio; a pixel needs no exactness).
import { credits } from './money.ts';

/** The smallest step between ticks: 0.01 credit, so a label never needs more than the two decimals money shows. */
const STEP_UC_MIN = 10_000n;
/** At most this many intervals above 0 (so at most five labels). */
const INTERVALS_MAX = 4n;
/** Width of one character of a 12 px label, rounded up (digits and separators of a sans-serif are narrower). */
export const LABEL_CHAR_PX = 8;

export interface Axis {
  /** The value of the axis's top: the last tick, at or above every day. */
  topUc: bigint;
  ticksUc: bigint[];
  labels: string[];
  /** Room left of the plot for the longest label and its gap. */
  labelWidthPx: number;
}

/** The smallest 1-2-5 step (× a power of ten, in µc) at or above `atLeastUc`. */
function roundStep(atLeastUc: bigint): bigint {
  for (let power = STEP_UC_MIN; ; power *= 10n) {
    for (const factor of [1n, 2n, 5n]) if (power * factor >= atLeastUc) return power * factor;
  }
}

export function valueAxis(maxUc: bigint): Axis {
  const positive = maxUc > 0n ? maxUc : 1n;
  const step = roundStep((positive + INTERVALS_MAX - 1n) / INTERVALS_MAX);
  const intervals = (positive + step - 1n) / step;
  const ticksUc = Array.from({ length: Number(intervals) + 1 }, (_, n) => BigInt(n) * step);
  const labels = ticksUc.map((tick) => credits(tick));
  const longest = Math.max(...labels.map((label) => label.length));
  return { topUc: intervals * step, ticksUc, labels, labelWidthPx: longest * LABEL_CHAR_PX + 16 };
}

/** Where `uc` sits between 0 and the axis's top, as a fraction (exact to a millionth, then a Number). */
export function fractionOf(uc: bigint, topUc: bigint): number {
  return Number((uc * 1_000_000n) / topUc) / 1_000_000;
}
