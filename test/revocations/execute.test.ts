// A freeze with releaseHolds reaches an execution in flight: its hold is released and revoked while the action
// runs, so the capture is refused, nothing is charged, the result is not handed out, and the execution is
// recorded as failed for that reason. That answer is final: stored under the request's Idempotency-Key, so a
// retry replays it, while the agent is frozen and after the owner unfreezes it, and the action never runs again.
import { Type } from '@sinclair/typebox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServiceModule } from '../../src/connectors/types.ts';
import { executionsOf, holdsOf } from '../execute/helpers.ts';
import { grant } from '../support/ledger-fixture.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

const PRICE_UC = 1_000_000n;
let world: World;
/** The running action waits for this to be called; `started` resolves when it begins. */
let finishAction: () => void = () => {};
let started: Promise<void>;
let markStarted: () => void = () => {};

/** A built-in service whose one action waits until the test lets it finish. */
const gate: ServiceModule<Record<string, never>> = {
  id: 'gate',
  title: 'Gate (tests only)',
  category: 'testing',
  context: () => async () => ({}),
  actions: {
    pass: {
      description: 'Waits for the test, then answers (tests only).',
      input: Type.Object({}, { additionalProperties: false }),
      priceUc: PRICE_UC,
      clearance: () => null,
      run: async () => {
        markStarted();
        await new Promise<void>((resolve) => (finishAction = resolve));
        return { passed: true };
      },
    },
  },
};

beforeAll(async () => {
  world = await startWorld({ dependencies: { services: [gate] } });
});
afterAll(async () => {
  await world?.close();
});

describe('a freeze with releaseHolds during an execution', () => {
  it('refuses its capture with 409 voucher_revoked, charges nothing, and replays that answer to a retry with the key, frozen or not', async () => {
    const agent = await world.createAgent('executor@example.com', 'executing-agent');
    await grant(world, agent.id, 3_000_000n);
    started = new Promise<void>((resolve) => (markStarted = resolve));
    const running = world.api('POST', '/v1/services/execute', { token: agent.token, key: 'gate-1', body: { serviceId: 'gate', action: 'pass', input: {} } });
    await started;
    const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, body: { releaseHolds: true } });
    expect(frozen.body.freeze).toMatchObject({ releasedHolds: 1, releasedUc: '1000000', merchants: [] });
    finishAction();
    const answer = await running;
    expect([answer.status, answer.body.code]).toEqual([409, 'voucher_revoked']);
    expect(answer.body).toMatchObject({ charged: false, executionId: expect.stringMatching(/^exe_/), redemptionId: expect.stringMatching(/^hold_/) });
    expect(answer.body.result).toBeUndefined();
    let runs = 0;
    markStarted = () => (runs += 1);
    const retry = () => world.api('POST', '/v1/services/execute', { token: agent.token, key: 'gate-1', body: { serviceId: 'gate', action: 'pass', input: {} } });
    const whileFrozen = await retry();
    expect([whileFrozen.status, whileFrozen.headers.get('idempotent-replayed'), whileFrozen.body]).toEqual([409, 'true', answer.body]);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    const afterUnfreeze = await retry();
    expect([afterUnfreeze.status, afterUnfreeze.headers.get('idempotent-replayed'), afterUnfreeze.body]).toEqual([409, 'true', answer.body]);
    expect(runs).toBe(0);
    expect(await holdsOf(world, agent.id)).toHaveLength(1);
    const [hold] = await holdsOf(world, agent.id);
    expect(hold).toMatchObject({ state: 'released', capturedUc: 0n });
    expect((await executionsOf(world, agent.id))[0]).toMatchObject({ state: 'failed', error_code: 'voucher_revoked' });
    expect((await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).availableUc).toBe('3000000');
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});
