// BENCH_BASELINE_REF: the gateway of another git ref, to measure a change against the code before it in the
// same run (alternated cell by cell, so both see the same neighbours). Its code is checked out in a temporary
// `git worktree` (detached, removed at the end), with a node_modules of links to this checkout's packages
// and its own workspace packages, then built with its own `node bin/build.js` (when the ref has one). Its
// database is seeded by its own code: bench/seed.ts and bench/seed-cli.ts are copied into the worktree and run
// there, so a ref must have the APIs the seed calls (createGateway, LedgerService.grant, AgentService).
import { execFile, execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { ROOT } from './gateway.ts';
import type { World } from './seed.ts';

const run = promisify(execFile);
const SEED_WAIT_MS_MAX = 600_000;

export interface Baseline {
  ref: string;
  /** The commit the ref named when the run started. */
  commit: string;
  root: string;
  remove(): Promise<void>;
}

function linkNodeModules(root: string): void {
  const own = path.join(root, 'node_modules');
  mkdirSync(path.join(own, '@agent-credit-gateway'), { recursive: true });
  for (const entry of readdirSync(path.join(ROOT, 'node_modules'))) {
    if (entry === '@agent-credit-gateway') continue;
    symlinkSync(realpathSync(path.join(ROOT, 'node_modules', entry)), path.join(own, entry));
  }
  // The ref's own workspace packages, not this checkout's.
  const packages = path.join(root, 'packages');
  if (existsSync(packages)) for (const name of readdirSync(packages)) symlinkSync(path.join(packages, name), path.join(own, '@agent-credit-gateway', name));
}

export async function prepareBaseline(ref: string): Promise<Baseline> {
  const commit = execFileSync('git', ['rev-parse', '--verify', `${ref}^{commit}`], { cwd: ROOT, encoding: 'utf8' }).trim();
  const root = path.join(mkdtempSync(path.join(tmpdir(), 'acg-bench-baseline-')), 'code');
  await run('git', ['worktree', 'add', '--detach', root, commit], { cwd: ROOT });
  const remove = async () => {
    await run('git', ['worktree', 'remove', '--force', root], { cwd: ROOT }).catch(() => {});
    rmSync(path.dirname(root), { recursive: true, force: true });
    await run('git', ['worktree', 'prune'], { cwd: ROOT }).catch(() => {});
  };
  try {
    linkNodeModules(root);
    if (existsSync(path.join(root, 'bin/build.js'))) await run(process.execPath, ['bin/build.js'], { cwd: root, maxBuffer: 1 << 24 });
    mkdirSync(path.join(root, 'bench'), { recursive: true });
    for (const file of ['seed.ts', 'seed-cli.ts']) copyFileSync(path.join(ROOT, 'bench', file), path.join(root, 'bench', file));
    return { ref, commit, root, remove };
  } catch (error) {
    await remove();
    throw error;
  }
}

/** Seeds the baseline's database with the baseline's own code (see the header). */
export async function seedBaseline(baseline: Baseline, env: Record<string, string>, agents: number, budgets: number, budgetedAgents: number, pairAgents: number): Promise<World> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(baseline.root, 'bench/seed-cli.ts')], { cwd: baseline.root, stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin.end(JSON.stringify({ env, agents, budgets, budgetedAgents, pairAgents }));
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const hung = setTimeout(() => child.kill('SIGKILL'), SEED_WAIT_MS_MAX);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearTimeout(hung);
  if (code !== 0) throw new Error(`seeding the ${baseline.ref} database with its own code failed (exit ${code}); its src/ may lack what bench/seed.ts calls`);
  return JSON.parse(stdout) as World;
}
