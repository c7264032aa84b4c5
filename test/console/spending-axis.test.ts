// The spending chart's value axis: exact labels from BigInt, round ticks, and room for the longest label
// (found from outside, 2026-12-04: "24,691.35" was clipped to "4,691.35", and 123,456,789,012.345678 credits
// read "123,456,789,012.34568" through a float).
import { describe, expect, it } from 'vitest';
import { fractionOf, LABEL_CHAR_PX, valueAxis } from '../../console/src/chart.ts';

const UC = 1_000_000n;

describe('the spending chart axis', () => {
  it('ticks in round 1-2-5 steps at or above the largest day, labelled exactly', () => {
    const axis = valueAxis(24_691_350_000n);
    expect(axis.labels).toEqual(['0.00', '10,000.00', '20,000.00', '30,000.00']);
    expect(axis.topUc).toBe(30_000n * UC);
  });

  it('never goes through a float, however large the amount', () => {
    const axis = valueAxis(123_456_789_012_345_678n);
    expect(axis.labels).toEqual(['0.00', '50,000,000,000.00', '100,000,000,000.00', '150,000,000,000.00']);
    expect(axis.topUc >= 123_456_789_012_345_678n).toBe(true);
    // The largest day sits below the top, by an exact ratio.
    expect(fractionOf(123_456_789_012_345_678n, axis.topUc)).toBeCloseTo(0.823045, 6);
  });

  it('leaves room left of the plot for its longest label, beyond the old fixed 64 px', () => {
    for (const maxUc of [1n, 9_999n * UC, 24_691_350_000n, 123_456_789_012_345_678n, 10n ** 30n]) {
      const axis = valueAxis(maxUc);
      const longest = Math.max(...axis.labels.map((label) => label.length));
      expect(axis.labelWidthPx - 8).toBeGreaterThanOrEqual(longest * LABEL_CHAR_PX);
    }
    expect(valueAxis(24_691_350_000n).labelWidthPx).toBeGreaterThan(64);
  });

  it('draws a day without spending as an axis from 0 to 0.01', () => {
    expect(valueAxis(0n).labels).toEqual(['0.00', '0.01']);
  });
});
