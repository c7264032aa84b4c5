// A freeze closes the top-ups it made pointless: the one execute opened for a retained intent the freeze
// cancels is closed with it, in the freeze's transaction (status `expired`, `topup.expired` to the owner), so the
// owner's approvals list and the approval page no longer offer to pay for an intent that will not run (found from
// outside: the card still promised the gateway would run it, and approving it credited money for nothing). Money
// already paid, or paid after all, still credits: a top-up that settled before the freeze is left alone, and a
// rail's payment arriving after the freeze credits late (`expired` is the status a late payment may settle).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { startWorld, type World } from '../support/world.ts';
import { execute, holdsOf, newKey } from '../execute/helpers.ts';
import { repoRequest, topupLots } from '../payments/helpers.ts';

let world: World;
let github: FakeGitHub;
let counter = 0;

beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local', ACG_GITHUB_API_URL: github.url } });
});
afterAll(async () => {
  await world?.close();
  await github?.close();
});

const repoCalls = () => github.requests.filter((r) => r.path === '/repos/octocat/Hello-World').length;

/** An agent without credit, and the top-up execute opened for its retained intent when its owner asked for it. */
async function waitingOnTopup(label: string) {
  const email = `${label}-${++counter}@example.com`;
  const agent = await world.createAgent(email, `${label}-agent-${counter}`);
  const asked = await execute(world, agent.ownerToken, { ...repoRequest, agentId: agent.id }, newKey('exec'));
  expect(asked.status, JSON.stringify(asked.body)).toBe(402);
  expect(asked.body.payment).toMatchObject({ status: 'pending_approval', intentId: asked.body.intentId });
  return { agent, intentId: asked.body.intentId as string, topupId: asked.body.payment.id as string };
}

async function eventsOf(type: string, id: string): Promise<any[]> {
  const { rows } = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE type = $1 AND payload LIKE $2 ORDER BY seq`, [type, `%${id}%`]);
  return rows.map((row) => JSON.parse(row.payload).data);
}

async function approvals(ownerToken: string, status: 'pending' | 'all'): Promise<any[]> {
  const res = await world.api('GET', `/v1/owner/approvals?status=${status}`, { token: ownerToken });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.approvals;
}

describe("a freeze and its retained intents' top-ups", () => {
  for (const releaseHolds of [false, true]) {
    it(`closes the pending top-up of each intent it cancels, in its transaction (expired, topup.expired); approving or declining it is then 409 (releaseHolds ${releaseHolds})`, async () => {
      const { agent, intentId, topupId } = await waitingOnTopup('closing');
      expect((await approvals(agent.ownerToken, 'pending')).map((a) => a.id)).toEqual([topupId]);
      const callsBefore = repoCalls();

      const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: newKey('freeze'), body: { releaseHolds } });
      expect(frozen.status, JSON.stringify(frozen.body)).toBe(200);
      expect((await world.api('GET', `/v1/intents/${intentId}`, { token: agent.ownerToken })).body).toMatchObject({ state: 'cancelled', cancellationReason: 'agent_frozen' });
      const topup = await world.api('GET', `/v1/payments/topups/${topupId}`, { token: agent.ownerToken });
      expect(topup.body).toMatchObject({ status: 'expired', lotId: null, intentId, nextAction: { resolution: 'none' } });
      expect(topup.body.finishedAt).toBe(frozen.body.freeze.frozenAt);
      // One event each, for the owner: the intent's cancellation and the top-up's end.
      expect(await eventsOf('intent.cancelled', intentId)).toEqual([{ intent: expect.objectContaining({ id: intentId, cancellationReason: 'agent_frozen' }) }]);
      expect(await eventsOf('topup.expired', topupId)).toEqual([{ topup: expect.objectContaining({ id: topupId, status: 'expired', intentId }) }]);
      // No longer waiting for the owner: off the approvals list, read as closed everywhere.
      expect(await approvals(agent.ownerToken, 'pending')).toEqual([]);
      expect((await approvals(agent.ownerToken, 'all')).find((a) => a.id === topupId)).toMatchObject({ kind: 'topup', status: 'expired' });
      for (const action of ['approve', 'decline']) {
        const refused = await world.api('POST', `/v1/payments/topups/${topupId}/${action}`, { token: agent.ownerToken, body: {} });
        expect([refused.status, refused.body.code], JSON.stringify(refused.body)).toEqual([409, 'conflict']);
      }
      // Freezing again finds nothing more to close.
      await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: newKey('freeze') });
      expect(await eventsOf('topup.expired', topupId)).toHaveLength(1);

      // Nothing credited, nothing run, frozen or after; the agent's own retry asks its owner again, with a new top-up.
      await world.gw.services.payments!.runJobs();
      expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
      await world.gw.services.payments!.runJobs();
      expect(await topupLots(world, agent.id)).toEqual([]);
      expect(await holdsOf(world, agent.id)).toEqual([]);
      expect(repoCalls()).toBe(callsBefore);
      expect((await world.api('GET', `/v1/intents/${intentId}`, { token: agent.ownerToken })).body.state).toBe('cancelled');
    });
  }

  it('a payment that reaches the rail after the freeze still credits (late, as for any expired top-up), and the intent stays cancelled', async () => {
    const { agent, intentId, topupId } = await waitingOnTopup('late');
    const callsBefore = repoCalls();
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: newKey('freeze') })).status).toBe(200);
    // A rail's notification (Stripe's signed webhook: the owner was paying at Checkout when the freeze came).
    expect(await world.gw.services.payments!.settle(topupId, 'test:paid-during-freeze')).toBe('settled');
    expect((await world.api('GET', `/v1/payments/topups/${topupId}`, { token: agent.ownerToken })).body).toMatchObject({ status: 'settled' });
    expect(await topupLots(world, agent.id)).toEqual([expect.objectContaining({ source_ref: topupId, granted_uc: 500_000_000n })]);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    await world.gw.services.payments!.runJobs();
    expect((await world.api('GET', `/v1/intents/${intentId}`, { token: agent.ownerToken })).body.state).toBe('cancelled');
    expect(repoCalls()).toBe(callsBefore);
  });

  it('a top-up the owner approves as the freeze comes is either settled and credited, or closed and refused: never closed after its money landed', async () => {
    for (let round = 0; round < 4; round++) {
      const { agent, topupId } = await waitingOnTopup('race');
      const [approved, frozen] = await Promise.all([
        world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: agent.ownerToken, body: {} }),
        world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: newKey('freeze'), body: { releaseHolds: round % 2 === 1 } }),
      ]);
      expect(frozen.status, JSON.stringify(frozen.body)).toBe(200);
      const topup = (await world.api('GET', `/v1/payments/topups/${topupId}`, { token: agent.ownerToken })).body;
      if (approved.status === 200) {
        expect(topup).toMatchObject({ status: 'settled' });
        expect(await topupLots(world, agent.id)).toHaveLength(1);
        expect(await eventsOf('topup.expired', topupId)).toEqual([]);
      } else {
        expect([approved.status, approved.body.code]).toEqual([409, 'conflict']);
        expect(topup).toMatchObject({ status: 'expired', lotId: null });
        expect(await topupLots(world, agent.id)).toEqual([]);
      }
    }
  });

  it('leaves a top-up the agent or owner asked for without an intent: a freeze stops spending, not the owner funding it', async () => {
    const email = `plain-${++counter}@example.com`;
    const agent = await world.createAgent(email, `plain-agent-${counter}`);
    const body = {
      agentId: agent.id,
      amountUsdCents: 500,
      reason: 'The agent is about to read a repository for its owner and needs credit to pay for the metered GitHub calls it makes.',
    };
    const asked = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: newKey('topup'), body });
    expect(asked.status, JSON.stringify(asked.body)).toBe(200);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: newKey('freeze') })).status).toBe(200);
    expect((await approvals(agent.ownerToken, 'pending')).map((a) => a.id)).toEqual([asked.body.id]);
    const approved = await world.api('POST', `/v1/payments/topups/${asked.body.id}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.body.status).toBe('settled');
    expect(await topupLots(world, agent.id)).toHaveLength(1);
  });
});
