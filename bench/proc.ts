// What the kernel says a cell cost, read from /proc: a process's CPU time (/proc/<pid>/stat) and the whole
// machine's busy and idle time (/proc/stat). The parsers are pure (tested in test/bench/proc.test.ts); the
// readers around them return undefined when a process is gone or not on this machine.
import { readFileSync } from 'node:fs';

/** Linux reports /proc times in clock ticks of USER_HZ, 100 per second on every architecture we run on. */
export const CLOCK_TICKS_PER_S = 100;

/** User + system ticks of one process (all its threads) from the text of /proc/<pid>/stat. */
export function processTicks(stat: string): number {
  // The command name (field 2) may hold spaces and parentheses: fields after its last ')' start at field 3;
  // utime and stime are fields 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  if (!Number.isFinite(ticks)) throw new Error(`not a /proc/<pid>/stat line: ${stat.slice(0, 80)}`);
  return ticks;
}

export interface MachineTicks {
  /** Ticks spent running anything (user, nice, system, irq, softirq, steal), all cores together. */
  busy: number;
  /** busy + idle + iowait. */
  total: number;
}

/** The aggregate "cpu" line of /proc/stat (guest time is already inside user and nice, so it is not added). */
export function machineTicks(stat: string): MachineTicks {
  const line = stat.split('\n').find((l) => l.startsWith('cpu '));
  if (!line) throw new Error('no aggregate cpu line in /proc/stat');
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = line.trim().split(/\s+/).slice(1).map(Number);
  const busy = user + nice + system + irq + softirq + steal;
  return { busy, total: busy + idle + iowait };
}

/** The process's CPU ticks now, or undefined when it is gone (or not a process of this machine). */
export function readProcessTicks(pid: number): number | undefined {
  try {
    return processTicks(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

export function readMachineTicks(): MachineTicks {
  return machineTicks(readFileSync('/proc/stat', 'utf8'));
}

/**
 * CPU ticks a set of processes used between two snapshots (pid → ticks). A process in both counts its
 * difference; one that appeared meanwhile counts all it used (it started during the interval); one that
 * ended meanwhile is lost, and is counted in `gone` so the report can say so.
 */
export function ticksBetween(before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>): { ticks: number; gone: number } {
  let ticks = 0;
  for (const [pid, end] of after) ticks += end - (before.get(pid) ?? 0);
  let gone = 0;
  for (const pid of before.keys()) if (!after.has(pid)) gone += 1;
  return { ticks, gone };
}

/** The value at percentile p (nearest rank) of an ascending list; NaN when it is empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** The parent pid (field 4) from the text of /proc/<pid>/stat. */
export function parentPid(stat: string): number {
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}
