// The bench's pure parts: the /proc parsers its CPU figures come from, the percentile, and the open-loop
// cell's schedule and mix (bench/proc.ts, bench/open-loop.ts). No database: nothing here touches one.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { OPEN_OPERATIONS, pickOperation, scheduledMs, type OpenOperation } from '../../bench/open-loop.ts';
import { machineTicks, parentPid, percentile, processTicks, ticksBetween } from '../../bench/proc.ts';

describe('the /proc parsers', () => {
  it("reads utime + stime of a process whose name holds spaces and parentheses", () => {
    const stat = '4242 (node (my) worker) S 4200 4242 4200 0 -1 4194560 12345 0 0 0 731 269 0 0 20 0 11 0 123456 1000000 20000 18446744073709551615';
    expect(processTicks(stat)).toBe(1000);
    expect(parentPid(stat)).toBe(4200);
  });

  it('refuses text that is not a stat line', () => {
    expect(() => processTicks('nonsense')).toThrow(/not a \/proc/);
  });

  it("counts the machine's busy ticks (user, nice, system, irq, softirq, steal) against busy + idle + iowait", () => {
    const stat = 'cpu  100 20 30 800 50 5 5 10 7 0\ncpu0 50 10 15 400 25 2 3 5 3 0\nintr 1 2 3\n';
    expect(machineTicks(stat)).toEqual({ busy: 170, total: 1020 });
  });

  it('adds differences, whole totals of new processes, and counts the ended ones', () => {
    const before = new Map([[1, 100], [2, 50], [3, 10]]);
    const after = new Map([[1, 130], [2, 50], [4, 7]]);
    expect(ticksBetween(before, after)).toEqual({ ticks: 37, gone: 1 });
  });

  it('takes the nearest-rank percentile', () => {
    const sorted = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(sorted, 50)).toBe(50);
    expect(percentile(sorted, 99)).toBe(99);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });
});

describe('the open-loop schedule and mix', () => {
  it('spaces requests evenly at the rate', () => {
    expect(scheduledMs(0, 300)).toBe(0);
    expect(scheduledMs(300, 300)).toBe(1000);
    expect(scheduledMs(150, 100)).toBe(1500);
  });

  it('draws 60% mint, 20% capture, 10% release, 5% me and 5% redemption reads once holds exist', () => {
    const counts = Object.fromEntries(OPEN_OPERATIONS.map((op) => [op, 0])) as Record<OpenOperation, number>;
    const draws = 10_000;
    for (let i = 0; i < draws; i++) counts[pickOperation((i + 0.5) / draws, 5, 5)] += 1;
    expect(counts).toEqual({ mint: 6000, capture: 2000, release: 1000, me: 500, redemption: 500 });
  });

  it('mints instead when there is no hold to capture, release or read', () => {
    expect(pickOperation(0.7, 0, 0)).toBe('mint');
    expect(pickOperation(0.85, 0, 3)).toBe('mint');
    expect(pickOperation(0.97, 0, 0)).toBe('mint');
    expect(pickOperation(0.97, 0, 1)).toBe('redemption');
    expect(pickOperation(0.92, 0, 0)).toBe('me');
  });
});
