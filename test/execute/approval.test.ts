// Insufficient credit with a payment-approval provider configured: a fake provider is given to the
// composition root (buildGatewayApp's dependencies), as the payments feature will give the real one.
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildGatewayApp } from '../../src/app.ts';
import type { ApprovalRequest, HumanApprover, ServiceIntent } from '../../src/platform/approvals.ts';
import { ApiError } from '../../src/platform/errors.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { grant } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { ONE_CREDIT_UC, capturedFromAgent, holdsOf, intentsOf } from './helpers.ts';

class FakeApprovals implements HumanApprover {
  /** What each request asked for: the retained intent, its owner and the price. */
  readonly requests: Array<{ intentId: string; intent: ServiceIntent; ownerId: string; priceUc: bigint }> = [];
  failing = false;
  /** A refusal of the request itself, answered instead of a pending approval. */
  refusing: ApiError | undefined;

  async requestApproval(request: ApprovalRequest) {
    const intentId = request.subject.id;
    this.requests.push({ intentId, intent: request.subject.intent, ownerId: request.ownerId, priceUc: request.amountUc });
    if (this.failing) throw new Error('provider down');
    if (this.refusing) throw this.refusing;
    return {
      url: `https://pay.example/approve/${intentId}`,
      payment: { id: `top_${intentId}`, status: 'pending', amountUsdCents: 50, approvalUrl: `https://pay.example/approve/${intentId}` },
      paymentMethods: [{ type: 'link', status: 'pending' }],
      instructions: 'Ask your owner to open the approval URL; retry with the same Idempotency-Key once it is approved.',
    };
  }
}

let world: World;
let github: FakeGitHub;
let withProvider: FastifyInstance;
let providerUrl: string;
const approvals = new FakeApprovals();

beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_GITHUB_API_URL: github.url } });
  // A second app on the same gateway and database, composed with the provider.
  ({ app: withProvider } = await buildGatewayApp(world.gw.gateway, [], { approver: approvals }));
  await withProvider.listen({ host: '127.0.0.1', port: 0 });
  const address = withProvider.server.address();
  providerUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});
afterAll(async () => {
  await withProvider?.close();
  await world?.close();
  await github?.close();
});

async function call(token: string, key: string, body: unknown) {
  const res = await fetch(`${providerUrl}/v1/services/execute`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

const body = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'Hello-World' } };

describe('insufficient credit with a payment-approval provider', () => {
  it('answers 402 approval_required with the retained intent and the provider payment, charging nothing', async () => {
    const agent = await world.createAgent('approve1@example.com', 'approve-agent-1');
    const res = await call(agent.token, 'approve-1', body);
    expect(res.status).toBe(402);
    expect(res.headers.get('content-type')).toContain('application/problem+json');
    expect(res.body).toMatchObject({
      code: 'approval_required',
      status: 402,
      // Told apart from a purchase above the threshold by its reason (found from outside: it had none).
      reason: 'topup_required',
      state: 'approval_pending',
      intent: { ...body, agentId: agent.id },
      priceUc: '1000000',
      payment: { status: 'pending', approvalUrl: expect.stringMatching(/^https:\/\/pay\.example\/approve\/int_/) },
      paymentMethods: [{ type: 'link', status: 'pending' }],
      instructions: expect.stringContaining('retry'),
      charged: false,
    });
    expect(res.body.intentId).toMatch(/^int_/);
    const me = await world.api('GET', '/v1/me', { token: agent.ownerToken });
    expect(approvals.requests.at(-1)).toEqual({ intentId: res.body.intentId, intent: { ...body, agentId: agent.id }, ownerId: me.body.owner.id, priceUc: ONE_CREDIT_UC });
    expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(await intentsOf(world, agent.id)).toEqual([expect.objectContaining({ id: res.body.intentId, state: 'pending' })]);

    // A retry with the same key asks the provider about the same intent; once funded it runs and charges once.
    const retry = await call(agent.token, 'approve-1', body);
    expect(retry.body.intentId).toBe(res.body.intentId);
    await grant(world, agent.id, ONE_CREDIT_UC);
    const funded = await call(agent.token, 'approve-1', body);
    expect(funded.status).toBe(200);
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
    expect(await intentsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'executed', execution_id: funded.body.executionId })]);
  });

  it('answers 503 payment_unavailable with the intent when the provider fails', async () => {
    const agent = await world.createAgent('approve2@example.com', 'approve-agent-2');
    approvals.failing = true;
    try {
      const res = await call(agent.token, 'approve-2', body);
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ code: 'payment_unavailable', charged: false, intent: { agentId: agent.id } });
      expect(await holdsOf(world, agent.id)).toEqual([]);
    } finally {
      approvals.failing = false;
    }
  });

  it("closes the intent at once when the provider refuses for a reason no wait cures, and keeps it pending when the refusal may lift", async () => {
    const agent = await world.createAgent('approve4@example.com', 'approve-agent-4');
    const intentState = async (intentId: string) => (await world.gw.gateway.db.query<{ state: string; cancellation_reason: string | null }>('SELECT state, cancellation_reason FROM service_intents WHERE id = $1', [intentId])).rows[0];
    const refusals: Array<[ApiError, { state: string; cancellation_reason: string | null }]> = [
      [new ApiError('conflict', { detail: 'too many top-ups wait', extra: { reason: 'pending_topups_limit' } }), { state: 'pending', cancellation_reason: null }],
      [new ApiError('conflict', { detail: 'no reason given' }), { state: 'pending', cancellation_reason: null }],
      [new ApiError('conflict', { detail: 'a delegate', extra: { reason: 'delegate_has_no_lots', rootAgentId: 'agt_root' } }), { state: 'cancelled', cancellation_reason: 'delegate_has_no_lots' }],
    ];
    try {
      for (const [index, [refusal, expected]] of refusals.entries()) {
        approvals.refusing = refusal;
        const res = await call(agent.token, `approve-4-${index}`, body);
        expect([res.status, res.body.code, res.body.reason, res.body.charged]).toEqual([409, 'conflict', refusal.options.extra?.reason, false]);
        expect(await intentState(res.body.intentId), JSON.stringify(refusal.options.extra)).toEqual(expected);
      }
    } finally {
      approvals.refusing = undefined;
    }
    // The provider's failure may pass too: its intent waits.
    approvals.failing = true;
    try {
      const res = await call(agent.token, 'approve-4-down', body);
      expect(res.status).toBe(503);
      expect(await intentState(res.body.intentId)).toEqual({ state: 'pending', cancellation_reason: null });
    } finally {
      approvals.failing = false;
    }
  });

  it('reports the provider as configured in /v1/integrations', async () => {
    const agent = await world.createAgent('approve3@example.com', 'approve-agent-3');
    const res = await fetch(`${providerUrl}/v1/integrations`, { headers: { authorization: `Bearer ${agent.token}` } });
    expect(((await res.json()) as { payments: { link: string } }).payments.link).toBe('configured');
    const surface = await fetch(`${providerUrl}/v1/integrations?view=surface`, { headers: { authorization: `Bearer ${agent.token}` } });
    expect(((await surface.json()) as { payments: { optionalCreditPurchases: { enabled: boolean } } }).payments.optionalCreditPurchases.enabled).toBe(true);
  });
});
