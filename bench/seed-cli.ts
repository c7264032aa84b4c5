// The seed in a process of its own, for BENCH_BASELINE_REF: bench/baseline.ts copies this file and seed.ts into
// the other ref's temporary worktree, so that ref's database is written by that ref's own code (its
// migrations, its ledger service). Reads { env, agents, budgets, budgetedAgents, pairAgents } as JSON on stdin, writes the
// World as JSON on stdout.
import { seed } from './seed.ts';

const chunks: Buffer[] = [];
for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
const { env, agents, budgets, budgetedAgents, pairAgents } = JSON.parse(Buffer.concat(chunks).toString()) as {
  env: Record<string, string>;
  agents: number;
  budgets: number;
  budgetedAgents: number;
  pairAgents: number;
};
process.stdout.write(JSON.stringify(await seed(env, agents, budgets, budgetedAgents, pairAgents)));
