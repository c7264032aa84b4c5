// Purchase approvals beside top-ups, in-process with the local rail: an execute above the agent's approval
// threshold retains its intent and waits for the owner (the gateway does not run it by itself; the retry does,
// once), a decline cancels the intent, the approval page is the top-ups' page, and the owner's list shows what
// waits for it, top-ups and purchases alike.
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { holdsOf, ONE_CREDIT_UC } from '../execute/helpers.ts';
import { REASON, repoRequest, topupBody } from './helpers.ts';
import { onPostgres } from '../support/database.ts';
import { insertTopup } from '../../src/payments/store.ts';
import { SAME_KEY } from '../../src/platform/idempotency.ts';
import { PURCHASE_APPROVAL_LIFETIME_S } from '../../src/payments/purchases.ts';

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

let world: World;
let github: FakeGitHub;
let shop: Shop;
let counter = 0;
const key = (label: string) => `${label}-${++counter}-${Date.now()}`;

beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local', ACG_GITHUB_API_URL: github.url } });
  shop = await openShop(world);
});
afterAll(async () => {
  await world?.close();
  await github?.close();
});

const repoCalls = () => github.requests.filter((r) => r.path === '/repos/octocat/Hello-World').length;

/** A funded agent whose mandate asks its owner above `approvalAboveUc`. */
async function agentAsking(label: string, approvalAboveUc: string) {
  const email = `${label}-${++counter}@example.com`;
  const name = `${label}-agent-${counter}`;
  const agent = await world.createAgent(email, name);
  await grant(world, agent.id, 50_000_000n);
  const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: key('mandate'), body: { approvalAboveUc } });
  expect(put.status).toBe(200);
  return { ...agent, email, name };
}

const approvalIdOf = (url: string) => new URL(url).pathname.split('/').pop()!;

describe('execute above the approval threshold', () => {
  it('answers 402 with the purchase approval and the retained intent; after approval the retry runs it once and a further retry replays it', async () => {
    const agent = await agentAsking('exec', '500000');
    const k = key('exec');
    const calls = repoCalls();
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(first.status).toBe(402);
    expect(first.body).toMatchObject({
      code: 'approval_required',
      reason: 'above_approval_threshold',
      state: 'approval_pending',
      intentId: expect.stringMatching(/^int_/),
      intent: { ...repoRequest, agentId: agent.id },
      priceUc: ONE_CREDIT_UC.toString(),
      approvalUrl: expect.stringMatching(new RegExp(`^${world.url}/payments/purchases/pur_`)),
      payment: { status: 'pending_approval', operation: 'executeService', merchant: null, offer: { id: 'github-public:repository.get' } },
      paymentMethods: [{ type: 'credits', status: 'pending_approval' }],
      instructions: expect.stringContaining(SAME_KEY),
      charged: false,
    });
    expect(first.body.payment.intentId).toBe(first.body.intentId);
    expect(repoCalls()).toBe(calls);
    expect(await holdsOf(world, agent.id)).toEqual([]);
    const intent = await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token });
    expect(intent.body.state).toBe('pending');

    const id = approvalIdOf(first.body.approvalUrl);
    expect((await world.api('POST', `/v1/payments/purchases/${id}/approve`, { token: agent.ownerToken, body: {} })).body.status).toBe('approved');
    // Approval runs nothing by itself: the intent waits for its caller's retry.
    expect((await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token })).body.state).toBe('pending');
    expect(repoCalls()).toBe(calls);

    const retry = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(retry.status).toBe(200);
    expect(retry.body).toMatchObject({ state: 'succeeded', result: { fullName: 'octocat/Hello-World' }, receipt: { state: 'captured', capturedUc: '1000000' } });
    const replay = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.executionId).toBe(retry.body.executionId);
    expect(repoCalls()).toBe(calls + 1);
    expect((await holdsOf(world, agent.id)).map((hold) => hold.state)).toEqual(['captured']);
    expect((await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token })).body).toMatchObject({ state: 'executed', executionId: retry.body.executionId });
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.token })).body).toMatchObject({ status: 'used', holdId: retry.body.receipt.id });
  });

  it('declined: the intent is cancelled, nothing runs or is charged, and the retry answers 409 purchase_declined, stored', async () => {
    const agent = await agentAsking('exec-declined', '500000');
    const k = key('exec');
    const calls = repoCalls();
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    const id = approvalIdOf(first.body.approvalUrl);
    expect((await world.api('POST', `/v1/payments/purchases/${id}/decline`, { token: agent.ownerToken, body: {} })).body.status).toBe('declined');
    expect((await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token })).body).toMatchObject({ state: 'cancelled', cancellationReason: 'purchase_declined' });
    const retry = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(retry.status).toBe(409);
    expect(retry.body).toMatchObject({ code: 'conflict', reason: 'purchase_declined', charged: false, approvalId: id });
    const again = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(again.status).toBe(409);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(repoCalls()).toBe(calls);
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it('above the threshold and above the credit: the owner approves the purchase, then a top-up, and the gateway runs the intent once under that approval', async () => {
    const email = `exec-broke-${++counter}@example.com`;
    const agent = await world.createAgent(email, `exec-broke-agent-${counter}`);
    await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: key('mandate'), body: { approvalAboveUc: '500000' } });
    const k = key('exec');
    const first = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    const purchase = approvalIdOf(first.body.approvalUrl);
    await world.api('POST', `/v1/payments/purchases/${purchase}/approve`, { token: agent.ownerToken, body: {} });
    const short = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(short.status).toBe(402);
    expect(short.body).toMatchObject({ code: 'approval_required', intentId: first.body.intentId, payment: { provider: 'local', status: 'pending_approval' } });
    expect((await world.api('POST', `/v1/payments/topups/${short.body.payment.id}/approve`, { token: agent.ownerToken, body: {} })).body.status).toBe('settled');
    const intent = await waitFor(async () => (await world.api('GET', `/v1/intents/${first.body.intentId}`, { token: agent.token })).body, {
      until: (body) => body.state !== 'pending',
      what: 'the resumed intent to run',
      timeoutMs: 15_000,
      intervalMs: 50,
    });
    expect(intent).toMatchObject({ state: 'executed', receipt: { state: 'captured', capturedUc: '1000000' } });
    expect((await world.api('GET', `/v1/payments/purchases/${purchase}`, { token: agent.token })).body).toMatchObject({ status: 'used', holdId: intent.receipt.id });
    const replay = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(replay.body.executionId).toBe(intent.executionId);
  });

  it('at or below the threshold an execute runs at once', async () => {
    const agent = await agentAsking('exec-below', ONE_CREDIT_UC.toString());
    const res = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
    expect(res.status).toBe(200);
  });
});

describe('a purchase approval past its deadline', () => {
  it("says which way it lapsed: one the owner never answered is not said to have expired before it was used (found from outside), one approved and not retried in time is", async () => {
    const agent = await agentAsking('lapsed', '1000000');
    const offer = await shop.offer({ priceUc: '3000000' });
    const unansweredKey = key('unanswered');
    const approvedKey = key('approved-unused');
    const unanswered = await mint(world, agent.token, offer.id, unansweredKey);
    const approved = await mint(world, agent.token, offer.id, approvedKey);
    expect([unanswered.status, approved.status]).toEqual([402, 402]);
    const approve = await world.api('POST', `/v1/payments/purchases/${approvalIdOf(approved.body.approvalUrl)}/approve`, { token: agent.ownerToken, body: {} });
    expect(approve.status).toBe(200);
    world.gw.clock.advance((PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    try {
      // A token made now outlives the moved clock.
      const token = await world.agentIssuer.mint({ sub: agent.name, owner_email: agent.email }, { expiresInS: 3 * PURCHASE_APPROVAL_LIFETIME_S });
      const neverAnswered = await mint(world, token, offer.id, unansweredKey);
      expect(neverAnswered.body).toMatchObject({ code: 'conflict', reason: 'approval_expired' });
      expect(neverAnswered.body.detail).toMatch(/^the owner did not answer the approval of this purchase before its deadline/);
      expect(neverAnswered.body.detail).not.toContain('before it was used');
      const unused = await mint(world, token, offer.id, approvedKey);
      expect(unused.body).toMatchObject({ code: 'conflict', reason: 'approval_expired' });
      expect(unused.body.detail).toMatch(/^the owner approved this purchase, but the approval expired before a retry used it/);
      // The owner's late answer names the same state (found from outside, bb135: a 409 with no reason).
      const ownerToken = await world.human.mint({ sub: `human-${agent.email}`, email: agent.email, email_verified: true }, { expiresInS: 3 * PURCHASE_APPROVAL_LIFETIME_S });
      for (const [answered, action] of [[unanswered, 'approve'], [approved, 'decline']] as const) {
        const late = await world.api('POST', `/v1/payments/purchases/${approvalIdOf(answered.body.approvalUrl)}/${action}`, { token: ownerToken, body: {} });
        expect([late.status, late.body.code, late.body.reason]).toEqual([409, 'conflict', 'approval_expired']);
        expect(late.body).toMatchObject({ approvalId: late.body.purchase.id, purchase: { status: 'expired' } });
      }
    } finally {
      world.gw.clock.advance(-(PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    }
  });
});

describe('the approval page of a purchase', () => {
  it('is the top-ups\' page, with the consent page protections and no purchase data in it', async () => {
    const agent = await agentAsking('page', '1000000');
    const offer = await shop.offer({ priceUc: '3000000' });
    const asked = await mint(world, agent.token, offer.id, key('page'));
    const res = await fetch(asked.body.approvalUrl);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'nonce-/);
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('cache-control')).toBe('no-store');
    const html = await res.text();
    expect(html).toContain('data-kind="purchase"');
    expect(html).toContain(approvalIdOf(asked.body.approvalUrl));
    expect(html).not.toContain(offer.id);
    expect(html).toContain('Approve a purchase');
  });
});

describe('GET /v1/owner/approvals', () => {
  it('lists what waits for the owner, top-ups and purchases, oldest first and paged, with the agents\' names; status=all shows the answered ones too', async () => {
    const agent = await agentAsking('list', '1000000');
    const offer = await shop.offer({ priceUc: '3000000' });
    const topup = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('topup'), body: topupBody(agent.id) })).body;
    const askedKey = key('list');
    const asked = await mint(world, agent.token, offer.id, askedKey);
    const declined = await mint(world, agent.token, offer.id, key('list'));
    await world.api('POST', `/v1/payments/purchases/${approvalIdOf(declined.body.approvalUrl)}/decline`, { token: agent.ownerToken, body: {} });

    const pending = await world.api('GET', '/v1/owner/approvals?status=pending', { token: agent.ownerToken });
    expect(pending.status).toBe(200);
    // Oldest first, in the order they were made.
    expect(pending.body).toEqual({
      approvals: [
        {
          kind: 'topup',
          id: topup.id,
          agentId: agent.id,
          agentName: agent.name,
          agentParent: null,
          agentEffectiveStatus: 'active',
          amountUc: '500000000',
          reason: REASON,
          requestedBy: 'agent',
          status: 'pending_approval',
          approvalUrl: topup.approvalUrl,
          createdAt: topup.createdAt,
          expiresAt: topup.expiresAt,
        },
        {
          kind: 'purchase',
          id: approvalIdOf(asked.body.approvalUrl),
          agentId: agent.id,
          agentName: agent.name,
          agentParent: null,
          agentEffectiveStatus: 'active',
          amountUc: '3000000',
          merchant: { id: shop.merchantId, name: expect.any(String), domain: expect.any(String) },
          offer: { id: offer.id, name: 'Book' },
          status: 'pending_approval',
          approvalUrl: asked.body.approvalUrl,
          createdAt: asked.body.purchase.createdAt,
          expiresAt: asked.body.purchase.expiresAt,
        },
      ],
      hasMore: false,
    });
    expect((await world.api('GET', '/v1/owner/approvals', { token: agent.ownerToken })).body).toEqual(pending.body);
    const firstPage = await world.api('GET', '/v1/owner/approvals?limit=1', { token: agent.ownerToken });
    expect(firstPage.body).toEqual({ approvals: [pending.body.approvals[0]], hasMore: true });
    const secondPage = await world.api('GET', `/v1/owner/approvals?limit=1&startingAfter=${pending.body.approvals[0].id}`, { token: agent.ownerToken });
    expect(secondPage.body).toEqual({ approvals: [pending.body.approvals[1]], hasMore: false });

    const all = await world.api('GET', '/v1/owner/approvals?status=all', { token: agent.ownerToken });
    expect(all.body.approvals.map((a: { kind: string; status: string }) => `${a.kind} ${a.status}`).sort()).toEqual(['purchase declined', 'purchase pending_approval', 'topup pending_approval']);
    expect(all.body.approvals.map((a: { id: string }) => a.id)).toEqual([topup.id, approvalIdOf(asked.body.approvalUrl), approvalIdOf(declined.body.approvalUrl)]);

    // status=approved: the purchases approved and not used yet, before their deadline, so the owner can see and
    // withdraw one its agent has not retried (found from outside: only the API's status=all, among every other, showed them).
    expect((await world.api('GET', '/v1/owner/approvals?status=approved', { token: agent.ownerToken })).body).toEqual({ approvals: [], hasMore: false });
    const askedId = approvalIdOf(asked.body.approvalUrl);
    expect((await world.api('POST', `/v1/payments/purchases/${askedId}/approve`, { token: agent.ownerToken, body: {} })).body.status).toBe('approved');
    const approved = await world.api('GET', '/v1/owner/approvals?status=approved', { token: agent.ownerToken });
    expect(approved.body.approvals.map((a: { id: string; status: string }) => [a.id, a.status])).toEqual([[askedId, 'approved']]);
    expect((await world.api('GET', '/v1/owner/approvals', { token: agent.ownerToken })).body.approvals.map((a: { kind: string }) => a.kind)).toEqual(['topup']);
    // Used by the agent's retry, it leaves the list.
    expect((await mint(world, agent.token, offer.id, askedKey)).status).toBe(200);
    expect((await world.api('GET', '/v1/owner/approvals?status=approved', { token: agent.ownerToken })).body).toEqual({ approvals: [], hasMore: false });
    expect((await world.api('GET', '/v1/owner/approvals?status=bogus', { token: agent.ownerToken })).status).toBe(400);
  });

  it('refuses to approve the purchase of a frozen agent (409 agent_frozen, left pending); unfrozen, the approval and its retry go through', async () => {
    const agent = await agentAsking('frozen-approval', '1000000');
    const offer = await shop.offer({ priceUc: '3000000' });
    const k = key('frozen-approval');
    const asked = await mint(world, agent.token, offer.id, k);
    expect(asked.status).toBe(402);
    const id = approvalIdOf(asked.body.approvalUrl);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    // The owner's list says so, so a console can tell why the approval would be refused.
    const listedStatus = async () => (await world.api('GET', '/v1/owner/approvals', { token: agent.ownerToken })).body.approvals.find((a: { id: string }) => a.id === id)?.agentEffectiveStatus;
    expect(await listedStatus()).toBe('frozen');
    const refused = await world.api('POST', `/v1/payments/purchases/${id}/approve`, { token: agent.ownerToken, body: {} });
    expect([refused.status, refused.body.code, refused.body.reason, refused.body.agentId]).toEqual([409, 'conflict', 'agent_frozen', agent.id]);
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.ownerToken })).body.status).toBe('pending_approval');
    // The agent retries while frozen: refused for now, not stored under its key (found from outside, bb74: FROZEN was
    // stored, and the owner's approval after the unfreeze could never be used).
    for (const attempt of [1, 2]) {
      const frozen = await mint(world, agent.token, offer.id, k);
      expect([frozen.status, frozen.body.code, frozen.headers.get('idempotent-replayed')], `attempt ${attempt}`).toEqual([403, 'FROZEN', null]);
      expect(frozen.body.detail).toMatch(new RegExp(`This purchase's approval \\(${id}\\) still waits for the owner: once this is lifted, retry with ${escapeRegExp(SAME_KEY)}\\. Nothing was taken\\.$`));
    }
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    expect(await listedStatus()).toBe('active');
    // Unfrozen, the retry asks again with the same approval, still waiting.
    const again = await mint(world, agent.token, offer.id, k);
    expect([again.status, approvalIdOf(again.body.approvalUrl)]).toEqual([402, id]);
    expect((await world.api('POST', `/v1/payments/purchases/${id}/approve`, { token: agent.ownerToken, body: {} })).body.status).toBe('approved');
    expect((await mint(world, agent.token, offer.id, k)).status).toBe(200);
    expect(await holdsOf(world, agent.id)).toHaveLength(1);
  });

  it('keeps a waiting approval usable when a budget lowered before the owner answers refuses the retry (found from outside, bb74)', async () => {
    const agent = await agentAsking('budget-before-answer', '1000000');
    const offer = await shop.offer({ priceUc: '3000000' });
    const owner = { token: agent.ownerToken };
    const k = key('budget-before-answer');
    const asked = await mint(world, agent.token, offer.id, k);
    expect(asked.status).toBe(402);
    const id = approvalIdOf(asked.body.approvalUrl);
    const setBudget = async (limitUc: string) =>
      expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { ...owner, key: key('budget'), body: { approvalAboveUc: '1000000', budgets: [{ id: 'daily', limitUc, period: 'day' }] } })).status).toBe(200);
    await setBudget('2000000');
    const short = await mint(world, agent.token, offer.id, k);
    expect([short.status, short.body.code, short.body.budget?.id, short.headers.get('idempotent-replayed')]).toEqual([402, 'CAP_EXCEEDED', 'daily', null]);
    await setBudget('10000000');
    expect((await world.api('POST', `/v1/payments/purchases/${id}/approve`, { ...owner, body: {} })).body.status).toBe('approved');
    const held = await mint(world, agent.token, offer.id, k);
    expect([held.status, held.body.redemption?.amountUc]).toEqual([200, '3000000']);
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, owner)).body).toMatchObject({ status: 'used', holdId: held.body.redemption.id });
  });

  it("keeps an approved purchase's key for its retry while the owner has frozen the agent or lowered a budget, and the retry goes through once that is lifted (found from outside: the refusal was stored and replayed)", async () => {
    const agent = await agentAsking('approved-then-stopped', '1000000');
    const offer = await shop.offer({ priceUc: '3000000' });
    const owner = { token: agent.ownerToken };
    const approve = async (k: string) => {
      const asked = await mint(world, agent.token, offer.id, k);
      expect(asked.status).toBe(402);
      const id = approvalIdOf(asked.body.approvalUrl);
      expect((await world.api('POST', `/v1/payments/purchases/${id}/approve`, { ...owner, body: {} })).body.status).toBe('approved');
      return id;
    };

    // Frozen after the approval: refused for now, not stored (no replay), the approval still approved.
    const frozenKey = key('approved-then-frozen');
    const frozenId = await approve(frozenKey);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { ...owner, body: {} })).status).toBe(200);
    for (const attempt of [1, 2]) {
      const refused = await mint(world, agent.token, offer.id, frozenKey);
      expect([refused.status, refused.body.code, refused.headers.get('idempotent-replayed')], `attempt ${attempt}`).toEqual([403, 'FROZEN', null]);
      expect(refused.body.detail).toMatch(new RegExp(`The owner approved this purchase \\(approval ${frozenId}\\), which stands until \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z: once this is lifted, retry with ${escapeRegExp(SAME_KEY)}\\. Nothing was taken\\.$`));
    }
    expect((await world.api('GET', `/v1/payments/purchases/${frozenId}`, owner)).body.status).toBe('approved');
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { ...owner, body: {} })).status).toBe(200);
    const held = await mint(world, agent.token, offer.id, frozenKey);
    expect([held.status, held.body.redemption?.amountUc]).toEqual([200, '3000000']);
    expect((await world.api('GET', `/v1/payments/purchases/${frozenId}`, owner)).body).toMatchObject({ status: 'used', holdId: held.body.redemption.id });
    expect((await mint(world, agent.token, offer.id, frozenKey)).headers.get('idempotent-replayed')).toBe('true');

    // A budget lowered below the price after the approval, then raised again: the same.
    const budgetKey = key('approved-then-budget');
    const budgetId = await approve(budgetKey);
    const setBudget = async (limitUc: string) =>
      expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { ...owner, key: key('budget'), body: { approvalAboveUc: '1000000', budgets: [{ id: 'daily', limitUc, period: 'day' }] } })).status).toBe(200);
    await setBudget('4000000');
    const short = await mint(world, agent.token, offer.id, budgetKey);
    expect([short.status, short.body.code, short.body.budget?.id, short.headers.get('idempotent-replayed')]).toEqual([402, 'CAP_EXCEEDED', 'daily', null]);
    await setBudget('10000000');
    expect((await mint(world, agent.token, offer.id, budgetKey)).status).toBe(200);
    expect((await world.api('GET', `/v1/payments/purchases/${budgetId}`, owner)).body.status).toBe('used');
    expect(await holdsOf(world, agent.id)).toHaveLength(2);
  });

  it('an approved execute refused before its hold (a freeze, a mandate that forbids the service) says the approval stands, and runs once lifted (found from outside: it said only "frozen")', async () => {
    const agent = await agentAsking('approved-exec-stopped', '500000');
    const owner = { token: agent.ownerToken };
    const k = key('approved-exec-stopped');
    const calls = repoCalls();
    const asked = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(asked.status).toBe(402);
    const id = approvalIdOf(asked.body.approvalUrl);
    expect((await world.api('POST', `/v1/payments/purchases/${id}/approve`, { ...owner, body: {} })).body.status).toBe('approved');
    const stands = new RegExp(`The owner approved this purchase \\(approval ${id}\\), which stands until \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z: once this is lifted, retry with ${escapeRegExp(SAME_KEY)}\\. Nothing was taken\\.$`);

    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { ...owner, body: {} })).status).toBe(200);
    const frozen = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect([frozen.status, frozen.body.code, frozen.headers.get('idempotent-replayed')]).toEqual([403, 'FROZEN', null]);
    expect(frozen.body.detail).toMatch(stands);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { ...owner, body: {} })).status).toBe(200);

    const forbid = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { ...owner, key: key('forbid'), body: { approvalAboveUc: '500000', allowedServices: ['mail'] } });
    expect(forbid.status).toBe(200);
    const forbidden = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect([forbidden.status, forbidden.body.code]).toEqual([403, 'SCOPE_FORBIDDEN']);
    expect(forbidden.body.detail).toMatch(stands);
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { ...owner, key: key('allow'), body: { approvalAboveUc: '500000' } })).status).toBe(200);

    const ran = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    expect(repoCalls()).toBe(calls + 1);
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, owner)).body.status).toBe('used');
  });

  it('an execute whose approval still waits, refused while frozen, keeps its key: unfrozen and approved, it runs once (found from outside, bb74)', async () => {
    const agent = await agentAsking('waiting-exec-frozen', '500000');
    const owner = { token: agent.ownerToken };
    const k = key('waiting-exec-frozen');
    const calls = repoCalls();
    const asked = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(asked.status).toBe(402);
    const id = approvalIdOf(asked.body.approvalUrl);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { ...owner, body: {} })).status).toBe(200);
    const frozen = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect([frozen.status, frozen.body.code, frozen.headers.get('idempotent-replayed')]).toEqual([403, 'FROZEN', null]);
    expect(frozen.body.detail).toContain(`This purchase's approval (${id}) still waits for the owner`);
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { ...owner, body: {} })).status).toBe(200);
    expect((await world.api('POST', `/v1/payments/purchases/${id}/approve`, { ...owner, body: {} })).body.status).toBe('approved');
    const ran = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: repoRequest });
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    expect(repoCalls()).toBe(calls + 1);
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, owner)).body.status).toBe('used');
  });

  it('an approved execute whose upstream fails keeps its approval for the retry with the same key (found from outside, bb79: approval_used)', async () => {
    const agent = await agentAsking('approved-exec-upstream', '500000');
    const owner = { token: agent.ownerToken };
    const k = key('approved-exec-upstream');
    const broken = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'broken', repo: 'down' } };
    const brokenCalls = () => github.requests.filter((r) => r.path === '/repos/broken/down').length;
    const asked = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: broken });
    expect(asked.status).toBe(402);
    const id = approvalIdOf(asked.body.approvalUrl);
    expect((await world.api('POST', `/v1/payments/purchases/${id}/approve`, { ...owner, body: {} })).body.status).toBe('approved');
    const calls = brokenCalls();
    for (const attempt of [1, 2]) {
      const failed = await world.api('POST', '/v1/services/execute', { token: agent.token, key: k, body: broken });
      expect([failed.status, failed.headers.get('idempotent-replayed')], `attempt ${attempt}: ${JSON.stringify(failed.body)}`).toEqual([502, null]);
      // Nothing charged, and the owner's approval stands for the next retry.
      expect((await world.api('GET', `/v1/payments/purchases/${id}`, owner)).body).toMatchObject({ status: 'approved', holdId: null });
    }
    expect(brokenCalls()).toBe(calls + 2);
    expect((await holdsOf(world, agent.id)).map((hold: { state: string }) => hold.state)).toEqual(['released', 'released']);
  });

  it("a retirement after the approval is refused for good: stored under the key, never told to retry (found from outside)", async () => {
    const parent = await agentAsking('approved-then-retired', '1000000');
    const allowed = await world.api('PUT', `/v1/owner/agents/${parent.id}/mandate`, { token: parent.ownerToken, key: key('delegation'), body: { approvalAboveUc: '1000000', delegation: { allowed: true, maxDepth: 1 } } });
    expect(allowed.status).toBe(200);
    const subject = `approved-then-retired-child-${counter}`;
    const created = await world.api('POST', `/v1/agents/${parent.id}/delegates`, { token: parent.token, key: key('delegate'), body: { name: 'child', identity: { issuer: world.agentIssuer.issuer, subject } } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const child = { id: created.body.id as string, token: await world.agentToken(subject, parent.email) };
    const offer = await shop.offer({ priceUc: '3000000' });
    const k = key('approved-then-retired');
    const asked = await mint(world, child.token, offer.id, k);
    expect(asked.status).toBe(402);
    expect((await world.api('POST', `/v1/payments/purchases/${approvalIdOf(asked.body.approvalUrl)}/approve`, { token: parent.ownerToken, body: {} })).body.status).toBe('approved');
    expect((await world.api('POST', `/v1/owner/agents/${child.id}/retire`, { token: parent.ownerToken, key: key('retire'), body: {} })).status).toBe(200);
    const refused = await mint(world, child.token, offer.id, k);
    expect([refused.status, refused.body.code, refused.body.reason]).toEqual([403, 'FROZEN', 'retired']);
    expect(refused.body.detail).not.toMatch(/retry/);
    expect((await mint(world, child.token, offer.id, k)).headers.get('idempotent-replayed')).toBe('true');
  });

  it("names a delegate's parent beside its name, which the delegate chose and may be another agent's (found from outside: the owner approved a delegate named like another agent)", async () => {
    const parent = await agentAsking('delegate-named', '1000000');
    const allowed = await world.api('PUT', `/v1/owner/agents/${parent.id}/mandate`, { token: parent.ownerToken, key: key('delegation'), body: { approvalAboveUc: '1000000', delegation: { allowed: true, maxDepth: 1 } } });
    expect(allowed.status).toBe(200);
    const subject = `delegate-named-child-${counter}`;
    // The delegate takes its parent's own name.
    const created = await world.api('POST', `/v1/agents/${parent.id}/delegates`, { token: parent.token, key: key('delegate'), body: { name: parent.name, identity: { issuer: world.agentIssuer.issuer, subject } } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const child = { id: created.body.id as string, token: await world.agentToken(subject, parent.email) };
    const offer = await shop.offer({ priceUc: '3000000' });
    const byChild = approvalIdOf((await mint(world, child.token, offer.id, key('delegate-named'))).body.approvalUrl);
    const byParent = approvalIdOf((await mint(world, parent.token, offer.id, key('parent-named'))).body.approvalUrl);
    const listed = await world.api('GET', '/v1/owner/approvals?limit=100', { token: parent.ownerToken });
    const shown = (id: string) => listed.body.approvals.find((approval: { id: string }) => approval.id === id);
    expect(shown(byChild)).toMatchObject({ agentId: child.id, agentName: parent.name, agentParent: { id: parent.id, name: parent.name } });
    expect(shown(byParent)).toMatchObject({ agentId: parent.id, agentName: parent.name, agentParent: null });
  });

  it('keeps the order they were made in within one second, so a client that polls after its last id misses none (found from outside: random ids ordered them)', async () => {
    const agent = await agentAsking('order', '1000000');
    const offer = await shop.offer({ priceUc: '2000000' });
    const made: string[] = [];
    const make = async (i: number) => {
      if (i % 3 === 0) made.push((await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('order-topup'), body: topupBody(agent.id) })).body.id);
      else made.push(approvalIdOf((await mint(world, agent.token, offer.id, key('order'))).body.approvalUrl));
    };
    // Time stands still: every one of these is made in the same second.
    world.gw.clock.freeze();
    onTestFinished(() => world.gw.clock.thaw());
    for (let i = 0; i < 12; i++) await make(i);
    const listed = await world.api('GET', '/v1/owner/approvals?limit=100', { token: agent.ownerToken });
    expect(listed.body.approvals.map((a: { id: string }) => a.id)).toEqual(made);
    expect(new Set(listed.body.approvals.map((a: { createdAt: number }) => a.createdAt)).size).toBe(1);
    // A poller: what came after its last id, as each new one is made.
    let last = made.at(-1)!;
    for (let i = 12; i < 20; i++) {
      await make(i);
      const after = await world.api('GET', `/v1/owner/approvals?limit=100&startingAfter=${last}`, { token: agent.ownerToken });
      expect(after.body.approvals.map((a: { id: string }) => a.id)).toEqual([made.at(-1)]);
      last = made.at(-1)!;
    }
    // The agent's own top-ups list, the same.
    const topups = await world.api('GET', '/v1/payments/topups?limit=100', { token: agent.token });
    expect(topups.body.topups.map((t: { id: string }) => t.id)).toEqual(made.filter((_, i) => i % 3 === 0));
  });

  it.runIf(onPostgres())("numbers an owner's approvals in the order they commit: one made while an earlier is uncommitted waits for it, so a poller never passes the earlier (found from outside: a sequence's numbers commit out of order)", async () => {
    const agent = await agentAsking('commit-order', '1000000');
    const ownerId = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id as string;
    const before = (await world.api('GET', '/v1/owner/approvals?limit=100', { token: agent.ownerToken })).body.approvals as Array<{ id: string }>;
    // An earlier top-up, written by a transaction that has not committed yet.
    let commit!: () => void;
    const committing = new Promise<void>((resolve) => (commit = resolve));
    let written!: () => void;
    const wasWritten = new Promise<void>((resolve) => (written = resolve));
    const nowS = BigInt(world.gw.clock.nowS());
    const earlierId = `top_commitorder${counter}`;
    const earlier = world.gw.gateway.db.transaction(async (tx) => {
      await insertTopup(tx, {
        id: earlierId, agent_id: agent.id, owner_id: ownerId, amount_usd_cents: 500, reason: REASON, intent_id: null, provider: 'local', provider_ref: null,
        approval_url: `${world.url}/payments/topups/${earlierId}`, checkout_url: `${world.url}/payments/topups/${earlierId}`, livemode: false,
        status: 'pending_approval', requested_by: 'test', created_at_s: nowS, updated_at_s: nowS, expires_at_s: nowS + 3600n,
      });
      written();
      await committing;
    });
    await wasWritten;
    // A later one, through the API: it waits for the earlier's number, so no list shows it before the earlier.
    const later = world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('commit-order'), body: topupBody(agent.id) });
    await expect
      .poll(async () => (await world.gw.gateway.db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0]!.n, { timeout: 10_000 })
      .toBeGreaterThanOrEqual(1)
      .catch((error: unknown) => {
        commit();
        throw error;
      });
    let meanwhile: Array<{ id: string }>;
    try {
      meanwhile = (await world.api('GET', '/v1/owner/approvals?limit=100', { token: agent.ownerToken })).body.approvals;
    } finally {
      commit();
    }
    expect(meanwhile.map((a) => a.id)).toEqual(before.map((a) => a.id));
    await earlier;
    const made = await later;
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const after = await world.api('GET', `/v1/owner/approvals?limit=100${before.length > 0 ? `&startingAfter=${before.at(-1)!.id}` : ''}`, { token: agent.ownerToken });
    expect(after.body.approvals.map((a: { id: string }) => a.id)).toEqual([earlierId, made.body.id]);
  });

  it('numbers a row the release before the numbering inserts, as one still running after the migration does (found from outside: 500 on NOT NULL seq)', async () => {
    const agent = await agentAsking('older-release', '1000000');
    const ownerId = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id as string;
    const first = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('older-first'), body: topupBody(agent.id) })).body.id as string;
    // The statement of the release before migration 0043, word for word: it names no seq.
    const nowS = world.gw.clock.nowS();
    const olderId = `top_olderrelease${counter}`;
    await world.gw.gateway.db.query(
      `INSERT INTO topups (id, agent_id, owner_id, amount_usd_cents, reason, intent_id, provider, provider_ref, approval_url,
         checkout_url, livemode, status, requested_by, created_at_s, updated_at_s, expires_at_s)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
       ON CONFLICT (intent_id) WHERE status = 'pending_approval' DO NOTHING
       RETURNING *`,
      [olderId, agent.id, ownerId, 500, REASON, null, 'local', null, `${world.url}/payments/topups/${olderId}`, `${world.url}/payments/topups/${olderId}`, false, 'pending_approval', 'test', nowS, nowS, nowS + 3600],
    );
    const last = (await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('older-last'), body: topupBody(agent.id) })).body.id as string;
    const listed = await world.api('GET', '/v1/owner/approvals?limit=100', { token: agent.ownerToken });
    expect(listed.body.approvals.map((a: { id: string }) => a.id)).toEqual([first, olderId, last]);
    const after = await world.api('GET', `/v1/owner/approvals?limit=100&startingAfter=${olderId}`, { token: agent.ownerToken });
    expect(after.body.approvals.map((a: { id: string }) => a.id)).toEqual([last]);
  });

  it("shows no other owner's approvals, refuses agents and a bad status", async () => {
    const agent = await agentAsking('list-who', '1000000');
    const offer = await shop.offer({ priceUc: '3000000' });
    await mint(world, agent.token, offer.id, key('list-who'));
    const stranger = await world.humanToken(`stranger-${++counter}@example.com`);
    expect((await world.api('GET', '/v1/owner/approvals', { token: stranger })).body).toEqual({ approvals: [], hasMore: false });
    expect((await world.api('GET', '/v1/owner/approvals', { token: agent.token })).status).toBe(403);
    expect((await world.api('GET', '/v1/owner/approvals?status=waiting', { token: agent.ownerToken })).status).toBe(400);
  });
});
