// Top-ups through the local approval provider, in-process: every validation rule with its status and code,
// approval and its exactly-once credit, and retained intents that run once after approval or close on
// decline and expiry with nothing charged.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { capturedFromAgent, availableUc, holdsOf, intentsOf, ONE_CREDIT_UC } from '../execute/helpers.ts';
import { PENDING_TOPUPS_PER_AGENT_MAX } from '../../src/payments/service.ts';
import { insertTopup } from '../../src/payments/store.ts';
import { grant } from '../support/ledger-fixture.ts';
import { ownerId, REASON, repoRequest, topupBody, topupJournal, topupLots } from './helpers.ts';

let world: World;
let github: FakeGitHub;
let counter = 0;
const key = (label: string) => `${label}-${++counter}-${Date.now()}`;

beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local', ACG_GITHUB_API_URL: github.url } });
});
afterAll(async () => {
  await world?.close();
  await github?.close();
});

const repoCalls = () => github.requests.filter((r) => r.path === '/repos/octocat/Hello-World').length;

async function newAgent(label: string) {
  const email = `${label}-${++counter}@example.com`;
  return { email, ...(await world.createAgent(email, `${label}-agent-${counter}`)) };
}

describe('POST /v1/payments/topups', () => {
  it('answers 200 with a pending Top-up request record whose approval URL is the gateway page, and replays it for the same key', async () => {
    const agent = await newAgent('create');
    const k = key('topup');
    const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: k, body: topupBody(agent.id) });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      agentId: agent.id,
      amountUsdCents: 500,
      amountUc: '500000000',
      reason: REASON,
      status: 'pending_approval',
      kind: 'checkout',
      provider: 'local',
      approvalUrl: `${world.url}/payments/topups/${res.body.id}`,
      checkoutUrl: `${world.url}/payments/topups/${res.body.id}`,
      nextAction: { resolution: 'owner_approval', actionUrl: `${world.url}/payments/topups/${res.body.id}` },
      intentId: null,
      livemode: false,
      lotId: null,
      finishedAt: null,
    });
    expect(res.body.id).toMatch(/^top_/);
    const again = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: k, body: topupBody(agent.id) });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(res.body);
    expect(await topupLots(world, agent.id)).toEqual([]);
  });

  it('refuses every malformed body with 400 invalid_input', async () => {
    const agent = await newAgent('invalid');
    const bodies: Array<[string, unknown]> = [
      ['amount below 50', topupBody(agent.id, { amountUsdCents: 49 })],
      ['amount above 100000', topupBody(agent.id, { amountUsdCents: 100_001 })],
      ['amount not an integer', topupBody(agent.id, { amountUsdCents: 50.5 })],
      ['amount as a string', topupBody(agent.id, { amountUsdCents: '500' })],
      ['reason of 99 characters', topupBody(agent.id, { reason: 'x'.repeat(99) })],
      ['reason of 2001 characters', topupBody(agent.id, { reason: 'x'.repeat(2001) })],
      // The owner reads the reason to decide: white space or invisible characters alone say nothing (found from outside).
      ['reason of 100 spaces', topupBody(agent.id, { reason: ' '.repeat(100) })],
      ['reason of 100 zero-width spaces', topupBody(agent.id, { reason: '\u200b'.repeat(100) })],
      ['no agentId', { amountUsdCents: 500, reason: REASON }],
      ['no reason', { agentId: agent.id, amountUsdCents: 500 }],
      ['an unknown member', topupBody(agent.id, { currency: 'usd' })],
      ['an empty intentId', topupBody(agent.id, { intentId: '' })],
    ];
    for (const [label, body] of bodies) {
      const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('bad'), body });
      expect({ label, status: res.status, code: res.body.code }).toEqual({ label, status: 400, code: 'invalid_input' });
    }
    const bounds = [50, 100_000];
    for (const amountUsdCents of bounds) {
      const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('bound'), body: topupBody(agent.id, { amountUsdCents, reason: 'r'.repeat(amountUsdCents === 50 ? 100 : 2000) }) });
      expect(res.status).toBe(200);
    }
  });

  it('refuses a frozen agent its own request with 403 FROZEN, recording nothing; its owner may still top it up (found from outside)', async () => {
    const agent = await newAgent('frozen');
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: key('freeze'), body: {} })).status).toBe(200);
    const asked = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('frozen'), body: topupBody(agent.id) });
    // With its reason, as every other FROZEN refusal (found from outside: this one had none).
    expect([asked.status, asked.body.code, asked.body.reason]).toEqual([403, 'FROZEN', 'frozen']);
    const listed = await world.api('GET', `/v1/payments/topups?agentId=${agent.id}`, { token: agent.ownerToken });
    expect(listed.body.topups).toEqual([]);
    const byOwner = await world.api('POST', '/v1/payments/topups', { token: agent.ownerToken, key: key('owner-frozen'), body: topupBody(agent.id) });
    expect(byOwner.status).toBe(200);
  });

  it('refuses an intentId that is not a pending intent of the agent with 400 invalid_input', async () => {
    const agent = await newAgent('intent');
    const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('intent'), body: topupBody(agent.id, { intentId: 'int_unknown' }) });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('invalid_input');
    // Named as the schema names a member, in detail and errors.
    const message = `must name a pending retained intent of agent ${agent.id}`;
    expect([res.body.detail, res.body.errors]).toEqual([`body/intentId ${message}`, [{ path: 'body/intentId', message }]]);
  });

  it('requires an Idempotency-Key: 400 idempotency_required without one, 400 invalid_input for a malformed one, 409 for a reused one', async () => {
    const agent = await newAgent('nokey');
    const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, body: topupBody(agent.id) });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('idempotency_required');
    const malformed = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: 'not a key!', body: topupBody(agent.id) });
    expect(malformed.status).toBe(400);
    expect(malformed.body.code).toBe('invalid_input');
    const k = key('reuse');
    expect((await world.api('POST', '/v1/payments/topups', { token: agent.token, key: k, body: topupBody(agent.id) })).status).toBe(200);
    const reused = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: k, body: topupBody(agent.id, { amountUsdCents: 600 }) });
    expect(reused.status).toBe(409);
    expect(reused.body.code).toBe('idempotency_key_reused');
  });

  it('lets an agent top up only itself: 403 agent_mismatch', async () => {
    const agent = await newAgent('self');
    const other = await newAgent('other');
    const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('mismatch'), body: topupBody(other.id) });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('agent_mismatch');
  });

  it("lets an owner top up only its own agents: 403 owner_required, for another owner's agent and an unknown id alike", async () => {
    const agent = await newAgent('mine');
    const stranger = await newAgent('theirs');
    for (const agentId of [stranger.id, 'agt_unknown']) {
      const res = await world.api('POST', '/v1/payments/topups', { token: agent.ownerToken, key: key('owner'), body: topupBody(agentId) });
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('owner_required');
    }
    const own = await world.api('POST', '/v1/payments/topups', { token: agent.ownerToken, key: key('owner'), body: topupBody(agent.id) });
    expect(own.status).toBe(200);
  });

  it('lets the agent and its owner read and list top-ups, and answers 404 to anyone else', async () => {
    const agent = await newAgent('read');
    const stranger = await newAgent('stranger');
    const created = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('read'), body: topupBody(agent.id) })).body;
    for (const token of [agent.token, agent.ownerToken]) {
      expect((await world.api('GET', `/v1/payments/topups/${created.id}`, { token })).body).toEqual(created);
    }
    for (const token of [stranger.token, stranger.ownerToken]) {
      const res = await world.api('GET', `/v1/payments/topups/${created.id}`, { token });
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('not_found');
    }
    const mine = await world.api('GET', '/v1/payments/topups', { token: agent.token });
    expect(mine.body).toEqual({ topups: [created], hasMore: false });
    const owners = await world.api('GET', `/v1/payments/topups?agentId=${agent.id}`, { token: agent.ownerToken });
    expect(owners.body.topups).toEqual([created]);
    const unnamed = await world.api('GET', '/v1/payments/topups', { token: agent.ownerToken });
    expect([unnamed.status, unnamed.body.detail, unnamed.body.errors]).toEqual([
      400,
      'querystring/agentId is required with an owner credential',
      [{ path: 'querystring/agentId', message: 'is required with an owner credential' }],
    ]);
    expect((await world.api('GET', `/v1/payments/topups?agentId=${agent.id}`, { token: stranger.ownerToken })).body.code).toBe('owner_required');
  });

  it('reads a pending top-up past its deadline as expired before the job closes it, as the owner\'s approvals list does (found from outside: pending_approval for seconds)', async () => {
    const agent = await newAgent('overdue');
    const created = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('overdue'), body: topupBody(agent.id) })).body;
    await world.gw.gateway.db.query('UPDATE topups SET expires_at_s = $2 WHERE id = $1', [created.id, world.gw.clock.nowS() - 1]);
    const read = await world.api('GET', `/v1/payments/topups/${created.id}`, { token: agent.token });
    expect(read.body).toMatchObject({ status: 'expired', nextAction: { resolution: 'none' } });
    expect((await world.api('GET', '/v1/payments/topups', { token: agent.token })).body.topups).toEqual([read.body]);
    const listed = await world.api('GET', '/v1/owner/approvals?status=all', { token: agent.ownerToken });
    expect(listed.body.approvals.find((approval: { id: string }) => approval.id === created.id)).toMatchObject({ status: 'expired' });
  });
});

describe('approving on the local provider', () => {
  it('settles once: one top-up lot, journaled, the balance up by the amount, however many approvals race', async () => {
    const agent = await newAgent('approve');
    const created = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('approve'), body: topupBody(agent.id) })).body;
    const approvals = await Promise.all(
      Array.from({ length: 5 }, () => world.api('POST', `/v1/payments/topups/${created.id}/approve`, { token: agent.ownerToken, body: {} })),
    );
    for (const res of approvals) expect(res.status).toBe(200);
    const settled = approvals[0]!.body;
    expect(settled).toMatchObject({ status: 'settled', nextAction: { resolution: 'none' }, lotId: expect.stringMatching(/^lot_/) });
    expect(new Set(approvals.map((res) => res.body.lotId)).size).toBe(1);
    expect(await topupLots(world, agent.id)).toEqual([{ id: settled.lotId, granted_uc: 500_000_000n, source_ref: created.id }]);
    expect(await topupJournal(world, agent.id)).toEqual([
      { account: `lot:${settled.lotId}`, amount_uc: 500_000_000n },
      { account: 'source:topup', amount_uc: -500_000_000n },
    ]);
    expect(await availableUc(world, agent.id)).toBe(500_000_000n);
    const declineAfter = await world.api('POST', `/v1/payments/topups/${created.id}/decline`, { token: agent.ownerToken, body: {} });
    expect(declineAfter.status).toBe(409);
    expect(declineAfter.body.code).toBe('conflict');
  });

  it('is for the human owner only: an agent 403 owner_required, an OAuth owner token 403 human_required, another owner 404, a foreign Origin 403', async () => {
    const agent = await newAgent('who');
    const stranger = await newAgent('who-else');
    const created = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('who'), body: topupBody(agent.id) })).body;
    const oauthOwner = await world.accessToken({ sub: await ownerId(world, agent.ownerToken), scope: 'svc:owner', email: agent.email });
    for (const [token, code] of [[agent.token, 'owner_required'], [oauthOwner, 'human_required']] as const) {
      const res = await world.api('POST', `/v1/payments/topups/${created.id}/approve`, { token, body: {} });
      expect(res.status).toBe(403);
      expect(res.body.code).toBe(code);
    }
    const foreign = await world.api('POST', `/v1/payments/topups/${created.id}/approve`, { token: stranger.ownerToken, body: {} });
    expect(foreign.status).toBe(404);
    expect((await world.api('POST', '/v1/payments/topups/top_unknown/approve', { token: agent.ownerToken, body: {} })).status).toBe(404);
    expect((await world.api('POST', `/v1/payments/topups/${created.id}/decline`, { token: stranger.ownerToken, body: {} })).status).toBe(404);
    const crossSite = await world.api('POST', `/v1/payments/topups/${created.id}/approve`, { token: agent.ownerToken, body: {}, headers: { origin: 'https://evil.example' } });
    expect(crossSite.status).toBe(403);
    expect(crossSite.body.code).toBe('forbidden');
    expect(await topupLots(world, agent.id)).toEqual([]);
  });

  it('serves the approval page with the consent page protections and no top-up data in it', async () => {
    const agent = await newAgent('page');
    const created = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('page'), body: topupBody(agent.id) })).body;
    const res = await fetch(created.approvalUrl);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'nonce-/);
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('cache-control')).toBe('no-store');
    const html = await res.text();
    expect(html).toContain(created.id);
    expect(html).not.toContain(REASON);
  });

  it('answers a link whose id cannot name an approval with a 400 page a person can read, not JSON', async () => {
    for (const path of ['/payments/topups/top_%22%3E%3Cb%3Ex', '/payments/purchases/pur_%22%3E%3Cb%3Ex', `/payments/topups/${'a'.repeat(201)}`]) {
      const res = await fetch(`${world.url}${path}`);
      expect(res.status, path).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
      const html = await res.text();
      expect(html).toMatch(/This link does not name a (top-up|purchase)/);
      expect(html).not.toContain('<b>x');
    }
  });
});

describe('retained intents', () => {
  it('answers 402 with the top-up, runs the intent once after approval, shows result and receipt, and replays the outcome to a retry', async () => {
    const agent = await newAgent('resume');
    const k = key('exec');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(first.status).toBe(402);
    expect(first.body).toMatchObject({
      code: 'approval_required',
      state: 'approval_pending',
      intent: { ...repoRequest, agentId: agent.id },
      payment: { status: 'pending_approval', provider: 'local', amountUsdCents: 500, intentId: first.body.intentId },
      paymentMethods: [
        { type: 'credits', status: 'insufficient' },
        { type: 'owner_approval', status: 'pending_approval' },
      ],
      instructions: expect.stringContaining(first.body.payment.approvalUrl),
      charged: false,
    });
    const retry = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(retry.body.payment.id).toBe(first.body.payment.id);
    const callsBefore = repoCalls();

    const approved = await world.api('POST', `/v1/payments/topups/${first.body.payment.id}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.body.status).toBe('settled');
    const intent = await waitFor(async () => (await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token })).body, {
      until: (body) => body.state !== 'pending',
      what: 'the intent to run',
      timeoutMs: 15_000,
      intervalMs: 50,
    });
    expect(intent).toMatchObject({
      id: first.body.intentId,
      state: 'executed',
      result: { fullName: 'octocat/Hello-World' },
      receipt: { state: 'captured', capturedUc: '1000000', agentId: agent.id },
      cancellationReason: null,
      error: null,
    });
    // The resume job runs on every instance every 2 s; more runs do not run the intent again.
    await world.gw.services.payments!.runJobs();
    await world.gw.services.payments!.runJobs();
    expect(repoCalls() - callsBefore).toBe(1);
    expect(await holdsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'captured' })]);

    const replay = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.executionId).toBe(intent.executionId);
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
    expect(await availableUc(world, agent.id)).toBe(500_000_000n - ONE_CREDIT_UC);
    const owners = await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.ownerToken });
    expect(owners.body.state).toBe('executed');
  });

  // A 402 that retains an intent gives its key back (so that the same request runs once credit arrives): another
  // request under that key once renewed the intent, which kept the first one's input, and was then answered with
  // the first one's result; with credit, it ran and was recorded as the intent's execution.
  it("says who asked for each top-up and so wrote its reason (requestedBy): the agent, its owner, or the gateway for execute's own, whose reason says why it asks more than the price (found from outside: the page showed the gateway's text as the agent's words)", async () => {
    const agent = await newAgent('requester');
    const byAgent = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('by-agent'), body: topupBody(agent.id) });
    const byOwner = await world.api('POST', '/v1/payments/topups', { token: agent.ownerToken, key: key('by-owner'), body: topupBody(agent.id) });
    const byGateway = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('by-gateway'), body: repoRequest });
    expect([byAgent.status, byOwner.status, byGateway.status]).toEqual([200, 200, 402]);
    expect([byAgent.body.requestedBy, byOwner.body.requestedBy, byGateway.body.payment.requestedBy]).toEqual(['agent', 'owner', 'gateway']);
    expect(byGateway.body.payment.reason).toContain(
      `price 0.01 USD) and its credit did not cover it. The gateway asks for at least $5.00 when credit is short, more than this price, so that one approval also funds the requests after it`,
    );
    expect((await world.api('GET', `/v1/payments/topups/${byGateway.body.payment.id}`, { token: agent.ownerToken })).body.requestedBy).toBe('gateway');
    // The owner's list says it too, for the console's card.
    const listed = await world.api('GET', '/v1/owner/approvals?status=all', { token: agent.ownerToken });
    expect(listed.body.approvals.map((approval: { id: string; requestedBy?: string }) => [approval.id, approval.requestedBy])).toEqual([
      [byAgent.body.id, 'agent'],
      [byOwner.body.id, 'owner'],
      [byGateway.body.payment.id, 'gateway'],
    ]);
  });

  it("refuses another request under a key whose retained intent is the first one's: 409 idempotency_key_reused, and the intent runs the first request", async () => {
    const agent = await newAgent('key-reuse');
    const k = key('exec');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(first.status).toBe(402);
    const other = { ...repoRequest, input: { owner: 'octocat', repo: 'Spoon-Knife' } };
    const reused = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: other });
    expect(reused.status).toBe(409);
    expect(reused.body).toMatchObject({ code: 'idempotency_key_reused', charged: false });
    expect(reused.body.detail).toContain(first.body.intentId);
    // With credit, the other request under the key is refused too, and runs nothing.
    await grant(world, agent.id, 5n * ONE_CREDIT_UC);
    const spoonCalls = () => github.requests.filter((r) => r.path === '/repos/octocat/Spoon-Knife').length;
    const funded = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: other });
    expect(funded.status).toBe(409);
    expect(funded.body.code).toBe('idempotency_key_reused');
    expect(spoonCalls()).toBe(0);
    expect((await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token })).body).toMatchObject({ state: 'pending', intent: { input: repoRequest.input } });
    // The first request, retried under its key, runs and finishes its intent.
    const retried = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(retried.status).toBe(200);
    expect(retried.body.result).toMatchObject({ fullName: 'octocat/Hello-World' });
    expect((await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token })).body).toMatchObject({ state: 'executed', executionId: retried.body.executionId });
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
  });

  it('a declined top-up closes its intent: no lot, no charge, no run', async () => {
    const agent = await newAgent('decline');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    const callsBefore = repoCalls();
    const declined = await world.api('POST', `/v1/payments/topups/${first.body.payment.id}/decline`, { token: agent.ownerToken, body: {} });
    expect(declined.status).toBe(200);
    expect(declined.body).toMatchObject({ status: 'declined', lotId: null, nextAction: { resolution: 'none' } });
    const again = await world.api('POST', `/v1/payments/topups/${first.body.payment.id}/decline`, { token: agent.ownerToken, body: {} });
    expect(again.body).toEqual(declined.body);
    const approveAfter = await world.api('POST', `/v1/payments/topups/${first.body.payment.id}/approve`, { token: agent.ownerToken, body: {} });
    expect(approveAfter.status).toBe(409);

    await world.gw.services.payments!.runJobs();
    const intent = await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token });
    expect(intent.body).toMatchObject({ state: 'cancelled', cancellationReason: 'topup_declined', executionId: null, result: null, receipt: null });
    expect(await topupLots(world, agent.id)).toEqual([]);
    expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(await capturedFromAgent(world, agent.id)).toBe(0n);
    expect(repoCalls()).toBe(callsBefore);
  });

  it('an expired top-up closes its intent: no lot, no charge, no run', async () => {
    const agent = await newAgent('expire');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    const callsBefore = repoCalls();
    await world.gw.gateway.db.query('UPDATE topups SET expires_at_s = $2 WHERE id = $1', [first.body.payment.id, Math.floor(Date.now() / 1000) - 1]);
    const tooLate = await world.api('POST', `/v1/payments/topups/${first.body.payment.id}/approve`, { token: agent.ownerToken, body: {} });
    expect(tooLate.status).toBe(409);
    await world.gw.services.payments!.runJobs();
    const topup = await world.api('GET', `/v1/payments/topups/${first.body.payment.id}`, { token: agent.token });
    expect(topup.body).toMatchObject({ status: 'expired', lotId: null });
    const intent = await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token });
    expect(intent.body).toMatchObject({ state: 'cancelled', cancellationReason: 'topup_expired', executionId: null });
    expect(await intentsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'cancelled', execution_id: null })]);
    expect(await topupLots(world, agent.id)).toEqual([]);
    expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(repoCalls()).toBe(callsBefore);
  });

  it('a delegate short of credit is told to credit its root (409 delegate_has_no_lots), not that the provider is down; the owner acting for it too', async () => {
    const root = await newAgent('tree');
    const mandate = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: key('mandate'), body: { delegation: { allowed: true, maxDepth: 1 } } });
    expect(mandate.status, JSON.stringify(mandate.body)).toBe(200);
    const subject = `tree-delegate-${++counter}`;
    const created = await world.api('POST', `/v1/agents/${root.id}/delegates`, { token: root.token, key: key('delegate'), body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject } } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const delegateToken = await world.agentToken(subject, root.email);
    const callsBefore = repoCalls();
    for (const [token, body] of [[delegateToken, repoRequest], [root.ownerToken, { ...repoRequest, agentId: created.body.id }]] as const) {
      const res = await world.api('POST', '/v1/services/execute', { token, key: key('exec'), body });
      expect([res.status, res.body], JSON.stringify(res.body)).toMatchObject([409, { code: 'conflict', reason: 'delegate_has_no_lots', rootAgentId: root.id, charged: false }]);
    }
    expect(await world.gw.gateway.db.query('SELECT id FROM topups WHERE agent_id = $1', [created.body.id])).toMatchObject({ rows: [] });
    expect(await holdsOf(world, created.body.id)).toEqual([]);
    expect(repoCalls()).toBe(callsBefore);
  });

  it('a freeze with releaseHolds cancels the retained intent (agent_frozen) and closes its top-up (expired): nothing to approve, and it never runs by itself, frozen or after', async () => {
    const agent = await newAgent('kill');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    expect(first.status).toBe(402);
    const callsBefore = repoCalls();
    const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: key('freeze'), body: { releaseHolds: true } });
    expect(frozen.status, JSON.stringify(frozen.body)).toBe(200);
    const intent = await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.ownerToken });
    expect(intent.body).toMatchObject({ state: 'cancelled', cancellationReason: 'agent_frozen', executionId: null });
    const events = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE type = 'intent.cancelled' AND payload LIKE $1`, [`%${first.body.intentId}%`]);
    expect(events.rows.map((row) => JSON.parse(row.payload).data.intent)).toEqual([expect.objectContaining({ id: first.body.intentId, cancellationReason: 'agent_frozen' })]);
    // The top-up opened for it closed with it (test/revocations/topups.test.ts): the owner is no longer asked to pay for it.
    expect((await world.api('GET', `/v1/payments/topups/${first.body.payment.id}`, { token: agent.ownerToken })).body).toMatchObject({ status: 'expired', lotId: null });
    const approved = await world.api('POST', `/v1/payments/topups/${first.body.payment.id}/approve`, { token: agent.ownerToken, body: {} });
    expect([approved.status, approved.body.code]).toEqual([409, 'conflict']);
    await world.gw.services.payments!.runJobs();
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    await world.gw.services.payments!.runJobs();
    expect((await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.ownerToken })).body.state).toBe('cancelled');
    expect(repoCalls()).toBe(callsBefore);
    expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(await topupLots(world, agent.id)).toEqual([]);
  });

  it('opens no top-up for an intent a freeze cancelled since it was retained: the race of an execute short of credit and a freeze (found from outside)', async () => {
    const agent = await newAgent('kill-race');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    expect(first.status).toBe(402);
    // The freeze commits between the intent's retention and its top-up's opening: as if first's top-up came after.
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: key('freeze'), body: {} })).status).toBe(200);
    const asked = { kind: 'topup', agentId: agent.id, ownerId: await ownerId(world, agent.ownerToken), amountUc: ONE_CREDIT_UC } as const;
    const opening = world.gw.services.payments!.requestApproval({ ...asked, subject: { type: 'intent', id: first.body.intentId, intent: first.body.intent } });
    await expect(opening).rejects.toMatchObject({ code: 'FROZEN', options: { extra: { reason: 'frozen' } } });
    const pending = await world.gw.gateway.db.query(`SELECT id FROM topups WHERE agent_id = $1 AND status = 'pending_approval'`, [agent.id]);
    expect(pending.rows).toEqual([]);
  });

  it('binds a second top-up to a pending intent only when none is pending (409 conflict otherwise)', async () => {
    const agent = await newAgent('bind');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    const second = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('bind'), body: topupBody(agent.id, { intentId: first.body.intentId }) });
    expect(second.status).toBe(409);
    expect(second.body.code).toBe('conflict');
  });
});

describe(`at most ${PENDING_TOPUPS_PER_AGENT_MAX} top-ups of an agent wait for its owner`, () => {
  type Agent = Awaited<ReturnType<typeof newAgent>>;
  const requestTopup = (agent: Agent, k = key('cap'), token = agent.token) =>
    world.api('POST', '/v1/payments/topups', { token, key: k, body: topupBody(agent.id) });

  /** Requests `count` top-ups one after another, each answered 200; their keys and records. */
  async function fill(agent: Agent, count: number): Promise<Array<{ key: string; topup: any }>> {
    const made: Array<{ key: string; topup: any }> = [];
    for (let n = 0; n < count; n++) {
      const k = key('cap');
      const res = await requestTopup(agent, k);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      made.push({ key: k, topup: res.body });
    }
    return made;
  }

  async function topupStatuses(agentId: string): Promise<string[]> {
    const { rows } = await world.gw.gateway.db.query<{ status: string }>('SELECT status FROM topups WHERE agent_id = $1 ORDER BY created_at_s, id', [agentId]);
    return rows.map((row) => row.status);
  }

  /** Every event whose payload names the agent: a refusal adds none. */
  async function eventsNaming(agentId: string): Promise<number> {
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*)::bigint AS n FROM events WHERE payload LIKE $1', [`%${agentId}%`]);
    return Number(rows[0]!.n);
  }

  const limitRefusal = {
    type: expect.stringMatching(/\/docs\/errors#conflict$/),
    title: expect.any(String),
    status: 409,
    code: 'conflict',
    reason: 'pending_topups_limit',
    pendingTopupsMax: PENDING_TOPUPS_PER_AGENT_MAX,
  };

  it('refuses one more with 409 conflict naming the limit, recording nothing, for the agent and its owner alike; the refusal is its key\'s answer', async () => {
    const agent = await newAgent('cap');
    await fill(agent, PENDING_TOPUPS_PER_AGENT_MAX);
    const eventsBefore = await eventsNaming(agent.id);
    const k = key('beyond');
    const refused = await requestTopup(agent, k);
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(refused.body).toMatchObject(limitRefusal);
    expect(refused.body.detail).toContain(`${PENDING_TOPUPS_PER_AGENT_MAX} top-ups waiting`);
    const byOwner = await requestTopup(agent, key('beyond'), agent.ownerToken);
    expect(byOwner.status).toBe(409);
    expect(byOwner.body).toMatchObject(limitRefusal);
    const again = await requestTopup(agent, k);
    expect(again.status).toBe(409);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await topupStatuses(agent.id)).toEqual(Array(PENDING_TOPUPS_PER_AGENT_MAX).fill('pending_approval'));
    expect(await eventsNaming(agent.id)).toBe(eventsBefore);
    expect(await topupLots(world, agent.id)).toEqual([]);
  });

  it('still replays a top-up created before the limit was reached', async () => {
    const agent = await newAgent('cap-replay');
    const made = await fill(agent, PENDING_TOPUPS_PER_AGENT_MAX);
    for (const { key: k, topup } of [made[0]!, made.at(-1)!]) {
      const replayed = await requestTopup(agent, k);
      expect(replayed.status).toBe(200);
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
      expect(replayed.body).toEqual(topup);
    }
    expect(await topupStatuses(agent.id)).toHaveLength(PENDING_TOPUPS_PER_AGENT_MAX);
  });

  it('lets exactly one of several racing requests take the last place, requested top-ups and execute\'s automatic ones alike', async () => {
    const agent = await newAgent('cap-race');
    await fill(agent, PENDING_TOPUPS_PER_AGENT_MAX - 1);
    const racing = await Promise.all([
      ...Array.from({ length: 4 }, () => requestTopup(agent)),
      ...Array.from({ length: 2 }, () => world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest })),
    ]);
    const passed = racing.filter((res) => res.status === 200 || res.status === 402);
    const refused = racing.filter((res) => res.status === 409);
    expect(passed, JSON.stringify(racing.map((res) => [res.status, res.body.code]))).toHaveLength(1);
    expect(refused).toHaveLength(racing.length - 1);
    for (const res of refused) expect(res.body).toMatchObject(limitRefusal);
    expect(await topupStatuses(agent.id)).toEqual(Array(PENDING_TOPUPS_PER_AGENT_MAX).fill('pending_approval'));
  });

  /**
   * Records the top-up that takes the last place in a transaction kept open while `contender` runs, then commits
   * it. The contender counts the places in its own transaction: under the agent's lock it waits for that commit
   * and finds none left; without the lock it would count before the commit and take a place too.
   */
  async function whileTheLastPlaceIsTaken<T>(agent: Agent, contender: () => Promise<T>): Promise<PromiseSettledResult<T>> {
    const payments = world.gw.services.payments!;
    const owner = { ownerId: await ownerId(world, agent.ownerToken), requestedBy: 'test' };
    const request = topupBody(agent.id);
    const prepared = await payments.open(request);
    let recorded!: () => void;
    let release!: () => void;
    const isRecorded = new Promise<void>((resolve) => (recorded = resolve));
    const released = new Promise<void>((resolve) => (release = resolve));
    const holder = world.gw.gateway.db.transaction(async (tx) => {
      await payments.record(tx, owner, request, prepared);
      recorded();
      await released;
    });
    await isRecorded;
    const contended = Promise.allSettled([contender()]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    release();
    await holder;
    return (await contended)[0];
  }

  it("counts under the agent's lock: a request racing the one that takes the last place waits for its commit and is refused", async () => {
    const agent = await newAgent('cap-lock');
    await fill(agent, PENDING_TOPUPS_PER_AGENT_MAX - 1);
    const contender = await whileTheLastPlaceIsTaken(agent, () => requestTopup(agent));
    expect(contender.status).toBe('fulfilled');
    const res = (contender as PromiseFulfilledResult<Awaited<ReturnType<typeof requestTopup>>>).value;
    expect([res.status, res.body]).toMatchObject([409, limitRefusal]);
    expect(await topupStatuses(agent.id)).toEqual(Array(PENDING_TOPUPS_PER_AGENT_MAX).fill('pending_approval'));
  });

  it("counts execute's automatic top-up under the agent's lock too", async () => {
    const agent = await newAgent('cap-lock-exec');
    // A retained intent that waits with no top-up: retained at the limit (409), then one place freed. (Its top-up
    // declined would not do: a declined top-up cancels its intent, and no top-up is opened for a cancelled one.)
    const made = await fill(agent, PENDING_TOPUPS_PER_AGENT_MAX);
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    expect([first.status, first.body.reason]).toEqual([409, 'pending_topups_limit']);
    await world.api('POST', `/v1/payments/topups/${made[0]!.topup.id}/decline`, { token: agent.ownerToken, body: {} });
    const payments = world.gw.services.payments!;
    const asked = { kind: 'topup', agentId: agent.id, ownerId: await ownerId(world, agent.ownerToken), amountUc: ONE_CREDIT_UC } as const;
    const contender = await whileTheLastPlaceIsTaken(agent, () =>
      payments.requestApproval({ ...asked, subject: { type: 'intent', id: first.body.intentId, intent: first.body.intent } }),
    );
    expect(contender.status).toBe('rejected');
    expect((contender as PromiseRejectedResult).reason).toMatchObject({ code: 'conflict', options: { extra: { reason: 'pending_topups_limit' } } });
    expect((await topupStatuses(agent.id)).filter((status) => status === 'pending_approval')).toHaveLength(PENDING_TOPUPS_PER_AGENT_MAX);
  });

  it('frees a place when one is declined, approved or expired', async () => {
    const agent = await newAgent('cap-free');
    const made = await fill(agent, PENDING_TOPUPS_PER_AGENT_MAX);
    expect((await requestTopup(agent)).status).toBe(409);

    const declined = await world.api('POST', `/v1/payments/topups/${made[0]!.topup.id}/decline`, { token: agent.ownerToken, body: {} });
    expect(declined.body.status).toBe('declined');
    expect((await requestTopup(agent)).status).toBe(200);
    expect((await requestTopup(agent)).status).toBe(409);

    const approved = await world.api('POST', `/v1/payments/topups/${made[1]!.topup.id}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.body.status).toBe('settled');
    expect((await requestTopup(agent)).status).toBe(200);
    expect((await requestTopup(agent)).status).toBe(409);

    // Past its expiry a top-up no longer waits for the owner, before the expiry job closes it too.
    await world.gw.gateway.db.query('UPDATE topups SET expires_at_s = $2 WHERE id = $1', [made[2]!.topup.id, Math.floor(Date.now() / 1000) - 1]);
    expect((await requestTopup(agent)).status).toBe(200);
    expect((await requestTopup(agent)).status).toBe(409);
    await world.gw.services.payments!.runJobs();
    expect((await world.api('GET', `/v1/payments/topups/${made[2]!.topup.id}`, { token: agent.token })).body.status).toBe('expired');
    expect((await requestTopup(agent)).status).toBe(409);
    expect((await topupStatuses(agent.id)).filter((status) => status === 'pending_approval')).toHaveLength(PENDING_TOPUPS_PER_AGENT_MAX);
  });

  it("holds for execute's automatic top-up: at the limit a new intent is answered 409 (retained, nothing charged), its own top-up still 402, and a freed place lets its retry open one", async () => {
    const agent = await newAgent('cap-exec');
    const kFirst = key('exec');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: kFirst, body: repoRequest });
    expect(first.status).toBe(402);
    const made = await fill(agent, PENDING_TOPUPS_PER_AGENT_MAX - 1);

    const retry = await world.api('POST', '/v1/services/execute', { token: agent.token, key: kFirst, body: repoRequest });
    expect(retry.status).toBe(402);
    expect(retry.body.payment.id).toBe(first.body.payment.id);

    const kSecond = key('exec');
    const second = await world.api('POST', '/v1/services/execute', { token: agent.token, key: kSecond, body: repoRequest });
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({ ...limitRefusal, charged: false, intentId: expect.stringMatching(/^int_/) });
    expect((await world.api('GET', `/v1/intents/${second.body.intentId}`, { token: agent.token })).body.state).toBe('pending');
    expect(await topupStatuses(agent.id)).toHaveLength(PENDING_TOPUPS_PER_AGENT_MAX);
    expect(await holdsOf(world, agent.id)).toEqual([]);

    await world.api('POST', `/v1/payments/topups/${made[0]!.topup.id}/decline`, { token: agent.ownerToken, body: {} });
    const reopened = await world.api('POST', '/v1/services/execute', { token: agent.token, key: kSecond, body: repoRequest });
    expect(reopened.status, JSON.stringify(reopened.body)).toBe(402);
    expect(reopened.body).toMatchObject({ intentId: second.body.intentId, payment: { intentId: second.body.intentId, status: 'pending_approval' } });
  });
});

describe('without a provider', () => {
  it('answers 503 payment_unavailable to creating, approving and declining, while reads answer 200 and 404', async () => {
    const bare = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'none' } });
    try {
      const agent = await bare.createAgent('bare@example.com', 'bare-agent');
      const res = await bare.api('POST', '/v1/payments/topups', { token: agent.token, key: 'bare-1', body: topupBody(agent.id) });
      expect(res.status).toBe(503);
      expect(res.body.code).toBe('payment_unavailable');
      const integrations = await bare.api('GET', '/v1/integrations', { token: agent.token });
      // x402 is the facilitator's own state (a signing key and merchant API keys), not the top-up provider's.
      expect(integrations.body.payments).toEqual({ link: 'unconfigured', provider: 'none', x402: 'configured' });

      expect((await bare.api('GET', '/v1/payments/topups', { token: agent.token })).body).toEqual({ topups: [], hasMore: false });
      const missing = await bare.api('GET', '/v1/payments/topups/top_unknown', { token: agent.token });
      expect(missing.status).toBe(404);
      expect(missing.body.code).toBe('not_found');
      // A top-up recorded while a provider was configured stays readable after the provider is switched off.
      const nowS = BigInt(bare.gw.clock.nowS());
      const owner = await ownerId(bare, agent.ownerToken);
      await bare.gw.gateway.db.transaction((tx) =>
        insertTopup(tx, {
          id: 'top_earlier',
          agent_id: agent.id,
          owner_id: owner,
          amount_usd_cents: 500,
          reason: REASON,
          intent_id: null,
          provider: 'local',
          provider_ref: null,
          approval_url: `${bare.url}/payments/topups/top_earlier`,
          checkout_url: `${bare.url}/payments/topups/top_earlier`,
          livemode: false,
          status: 'pending_approval',
          requested_by: 'test',
          created_at_s: nowS,
          updated_at_s: nowS,
          expires_at_s: nowS + 3600n,
        }),
      );
      for (const token of [agent.token, agent.ownerToken]) {
        const one = await bare.api('GET', '/v1/payments/topups/top_earlier', { token });
        expect(one.status).toBe(200);
        expect(one.body).toMatchObject({ id: 'top_earlier', status: 'pending_approval', agentId: agent.id });
      }
      expect((await bare.api('GET', `/v1/payments/topups?agentId=${agent.id}`, { token: agent.ownerToken })).body.topups.map((t: { id: string }) => t.id)).toEqual(['top_earlier']);
      for (const action of ['approve', 'decline']) {
        const refused = await bare.api('POST', `/v1/payments/topups/top_earlier/${action}`, { token: agent.ownerToken, body: {} });
        expect(refused.status, action).toBe(503);
        expect(refused.body.code, action).toBe('payment_unavailable');
      }
      expect(await topupLots(bare, agent.id)).toEqual([]);
    } finally {
      await bare.close();
    }
  });

  it('reports the local provider in /v1/integrations, with x402 configured (the dev gateway is its facilitator) and distinct capabilities', async () => {
    const agent = await newAgent('integrations');
    const status = await world.api('GET', '/v1/integrations', { token: agent.token });
    expect(status.body.payments).toEqual({ link: 'configured', provider: 'local', x402: 'configured' });
    const surface = await world.api('GET', '/v1/integrations?view=surface', { token: agent.token });
    expect(surface.body.payments).toEqual({ directMerchantLink: { enabled: false }, optionalCreditPurchases: { enabled: true }, x402: { enabled: true } });
  });
});
