// Top-ups through the local approval provider, in-process: every validation rule with its status and code,
// approval and its exactly-once credit, and retained intents that run once after approval or close on
// decline and expiry with nothing charged.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { capturedFromAgent, availableUc, holdsOf, intentsOf, ONE_CREDIT_UC } from '../execute/helpers.ts';
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

  it('refuses an intentId that is not a pending intent of the agent with 400 invalid_input', async () => {
    const agent = await newAgent('intent');
    const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('intent'), body: topupBody(agent.id, { intentId: 'int_unknown' }) });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('invalid_input');
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
    expect((await world.api('GET', '/v1/payments/topups', { token: agent.ownerToken })).status).toBe(400);
    expect((await world.api('GET', `/v1/payments/topups?agentId=${agent.id}`, { token: stranger.ownerToken })).body.code).toBe('owner_required');
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

  it('a freeze with releaseHolds cancels the retained intent (agent_frozen): its top-up still credits, and it never runs by itself, frozen or after', async () => {
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
    // The owner still pays the top-up it was asked for: the credit lands, the intent stays cancelled.
    const approved = await world.api('POST', `/v1/payments/topups/${first.body.payment.id}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.body.status).toBe('settled');
    await world.gw.services.payments!.runJobs();
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    await world.gw.services.payments!.runJobs();
    expect((await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.ownerToken })).body.state).toBe('cancelled');
    expect(repoCalls()).toBe(callsBefore);
    expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(await topupLots(world, agent.id)).toHaveLength(1);
  });

  it('binds a second top-up to a pending intent only when none is pending (409 conflict otherwise)', async () => {
    const agent = await newAgent('bind');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    const second = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('bind'), body: topupBody(agent.id, { intentId: first.body.intentId }) });
    expect(second.status).toBe(409);
    expect(second.body.code).toBe('conflict');
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
