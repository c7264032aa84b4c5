// Group commit of execute's two ledger transactions: the holds of concurrent executions are
// taken in one transaction, the captures of those that succeeded in another, and each call answers exactly
// as it would alone. A paused batcher gathers the calls deterministically (no timing).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Batcher } from '../../src/platform/batcher.ts';
import { grant } from '../support/ledger-fixture.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type ApiResponse, type World } from '../support/world.ts';
import { ONE_CREDIT_UC, availableUc, capturedFromAgent, execute, executionsOf, intentsOf, revenueUc } from './helpers.ts';

let world: World;
let github: FakeGitHub;

beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_GITHUB_API_URL: github.url, ACG_GITHUB_TIMEOUT_MS: '2000' } });
});
afterAll(async () => {
  await world?.close();
  await github?.close();
});

const repo = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'Hello-World' } };

/** Sends the calls one after another into the paused batcher, waits until each is queued, then lets them run. */
async function throughPaused(batcher: Batcher<unknown, unknown>, sends: ReadonlyArray<() => Promise<ApiResponse>>, queuedAfter: (index: number) => number): Promise<ApiResponse[]> {
  batcher.pause();
  const answers: Array<Promise<ApiResponse>> = [];
  try {
    for (const [index, send] of sends.entries()) {
      answers.push(send());
      // Every 5 ms: the calls are queued one at a time, so this wait is paid once per call.
      const count = queuedAfter(index);
      await waitFor(() => batcher.queued, { until: (n) => n >= count, what: `${count} calls to reach the batcher`, intervalMs: 5 });
    }
  } finally {
    batcher.resume();
  }
  return Promise.all(answers);
}

describe('group commit of execute', () => {
  it('takes the holds of concurrent executions of one agent in one transaction, in arrival order: those the credit covers run, the rest wait as intents', async () => {
    const agent = await world.createAgent('exec-batch@example.com', 'exec-batch-holds');
    await grant(world, agent.id, 3n * ONE_CREDIT_UC);
    const { begins } = world.gw.services.execute.batchers;
    const sends = Array.from({ length: 5 }, (_, i) => () => execute(world, agent.token, repo, `exec-batch-hold-${i}`));
    const answers = await throughPaused(begins as Batcher<unknown, unknown>, sends, (index) => index + 1);
    expect(answers.map((a) => [a.status, a.body.code ?? a.body.state])).toEqual([
      [200, 'succeeded'],
      [200, 'succeeded'],
      [200, 'succeeded'],
      [503, 'link_configuration_required'],
      [503, 'link_configuration_required'],
    ]);
    expect(answers.slice(3).map((a) => a.body.charged)).toEqual([false, false]);
    expect(await availableUc(world, agent.id)).toBe(0n);
    expect(await capturedFromAgent(world, agent.id)).toBe(3n * ONE_CREDIT_UC);
    expect((await executionsOf(world, agent.id)).map((e) => e.state)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect((await intentsOf(world, agent.id)).map((i) => i.state)).toEqual(['pending', 'pending']);
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 60_000);

  it('captures the executions that succeed together in one transaction, each charged once, and replays each answer', async () => {
    const agents = await Promise.all([1, 2, 3].map((n) => world.createAgent('exec-batch@example.com', `exec-batch-capture-${n}`)));
    for (const agent of agents) await grant(world, agent.id, 2n * ONE_CREDIT_UC);
    const revenueBefore = await revenueUc(world);
    const { successes } = world.gw.services.execute.batchers;
    const sends = agents.map((agent, i) => () => execute(world, agent.token, repo, `exec-batch-capture-${i}`));
    // Each call reaches the capture batcher after its hold and its upstream call.
    const answers = await throughPaused(successes as Batcher<unknown, unknown>, sends, (index) => index + 1);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(new Set(answers.map((a) => a.body.receipt.agentId))).toEqual(new Set(agents.map((a) => a.id)));
    for (const agent of agents) {
      expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
      expect(await availableUc(world, agent.id)).toBe(ONE_CREDIT_UC);
    }
    expect(await revenueUc(world)).toBe(revenueBefore + 3n * ONE_CREDIT_UC);
    const replay = await execute(world, agents[0]!.token, repo, 'exec-batch-capture-0');
    expect([replay.status, replay.headers.get('idempotent-replayed'), replay.body.executionId]).toEqual([200, 'true', answers[0]!.body.executionId]);
    expect(await capturedFromAgent(world, agents[0]!.id)).toBe(ONE_CREDIT_UC);
    await expectLedgerInvariants(world.gw.gateway.db);
  }, 60_000);
});
