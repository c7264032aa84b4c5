// Retained intents that nothing will resume are closed when that becomes certain, not left pending for their
// lifetime: a delegate short of credit (no top-up is bought for a delegate: its root is credited) has its intent
// cancelled in the answer that says so, with `intent.cancelled` to its owner; a freeze, with releaseHolds or without,
// cancels its subtree's in its transaction, closing the top-ups that waited on them; an intent that ran or failed on credit from elsewhere
// closes its top-up too. A retry with the same key still runs the request once credit is there (or
// the owner approved). What may still come (the top-up asked of the owner) keeps its intent pending.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { grant } from '../support/ledger-fixture.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { execute, holdsOf, newKey, ONE_CREDIT_UC, runResumeJobsLater } from './helpers.ts';

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

const repoRequest = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'Hello-World' } };
const repoCalls = () => github.requests.filter((r) => r.path === '/repos/octocat/Hello-World').length;

/** A root agent of a fresh owner, without credit, whose mandate allows one level of delegates, and one delegate of it. */
async function tree() {
  const email = `closing-${++counter}@example.com`;
  const root = await world.createAgent(email, `closing-root-${counter}`);
  const mandate = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: newKey('mandate'), body: { delegation: { allowed: true, maxDepth: 1 } } });
  expect(mandate.status, JSON.stringify(mandate.body)).toBe(200);
  const subject = `closing-delegate-${counter}`;
  const created = await world.api('POST', `/v1/agents/${root.id}/delegates`, { token: root.token, key: newKey('delegate'), body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject } } });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  return { root, delegate: { id: created.body.id as string, token: await world.agentToken(subject, email) } };
}

/** The `intent.cancelled` events written for this intent, each as its payload's intent. */
async function cancelledEvents(intentId: string): Promise<Array<Record<string, unknown>>> {
  const { rows } = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE type = 'intent.cancelled' AND payload LIKE $1 ORDER BY seq`, [`%${intentId}%`]);
  return rows.map((row) => JSON.parse(row.payload).data.intent);
}

describe('a delegate short of credit', () => {
  it('is answered 409 delegate_has_no_lots, its intent cancelled at once (intent.cancelled); once its root has credit, the retry with the key runs it', async () => {
    const { root, delegate } = await tree();
    const callsBefore = repoCalls();
    const key = newKey('delegate-short');
    const refused = await execute(world, delegate.token, repoRequest, key);
    expect([refused.status, refused.body], JSON.stringify(refused.body)).toMatchObject([409, { code: 'conflict', reason: 'delegate_has_no_lots', rootAgentId: root.id, charged: false }]);
    const intentId = refused.body.intentId as string;
    const intent = await world.api('GET', `/v1/intents/${intentId}`, { token: delegate.token });
    expect(intent.body).toMatchObject({ id: intentId, state: 'cancelled', cancellationReason: 'delegate_has_no_lots', executionId: null });
    expect(await cancelledEvents(intentId)).toEqual([expect.objectContaining({ id: intentId, state: 'cancelled', cancellationReason: 'delegate_has_no_lots' })]);
    // The refusal is not kept under the key: once the root is credited, the same request runs, once.
    await grant(world, root.id, 10n * ONE_CREDIT_UC);
    const ran = await execute(world, delegate.token, repoRequest, key);
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    expect((await world.api('GET', `/v1/intents/${intentId}`, { token: delegate.token })).body).toMatchObject({ state: 'executed', cancellationReason: null, executionId: ran.body.executionId });
    expect(repoCalls()).toBe(callsBefore + 1);
  });

  it('asked by the owner acting for the delegate, the same: nothing pending, nothing charged, no top-up', async () => {
    const { root, delegate } = await tree();
    const refused = await execute(world, root.ownerToken, { ...repoRequest, agentId: delegate.id });
    expect([refused.status, refused.body.reason]).toEqual([409, 'delegate_has_no_lots']);
    const pending = await world.gw.gateway.db.query(`SELECT id FROM service_intents WHERE agent_id = $1 AND state = 'pending'`, [delegate.id]);
    expect(pending.rows).toEqual([]);
    expect(await world.gw.gateway.db.query('SELECT id FROM topups WHERE agent_id = $1', [delegate.id])).toMatchObject({ rows: [] });
    expect(await holdsOf(world, delegate.id)).toEqual([]);
  });

  it('a root short of credit keeps its intent pending: the top-up asked of its owner may still resume it', async () => {
    const { root } = await tree();
    const asked = await execute(world, root.token, repoRequest);
    expect(asked.status, JSON.stringify(asked.body)).toBe(402);
    expect((await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.token })).body).toMatchObject({ state: 'pending', cancellationReason: null });
    expect(await cancelledEvents(asked.body.intentId)).toEqual([]);
  });
});

describe("a retained intent that ends without its top-up", () => {
  /** The top-up's events of this type, each as its payload's top-up. */
  async function topupEvents(type: string, topupId: string): Promise<Array<Record<string, unknown>>> {
    const { rows } = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE type = $1 AND payload LIKE $2 ORDER BY seq`, [type, `%${topupId}%`]);
    return rows.map((row) => JSON.parse(row.payload).data.topup);
  }

  for (const ending of ['executed', 'failed'] as const) {
    it(`closes the top-up still waiting for the owner's approval when the intent ${ending === 'executed' ? 'ran' : 'failed for good'} on credit that came another way (expired, topup.expired; approving it is 409)`, async () => {
      const { root } = await tree();
      const request = ending === 'executed' ? repoRequest : { ...repoRequest, input: { owner: 'missing', repo: `gone-${counter}` } };
      const key = newKey(`ended-${ending}`);
      const asked = await execute(world, root.token, request, key);
      expect(asked.status, JSON.stringify(asked.body)).toBe(402);
      const [intentId, topupId] = [asked.body.intentId as string, asked.body.payment.id as string];
      expect(asked.body.payment).toMatchObject({ status: 'pending_approval', intentId });

      // The owner funds the agent another way, and the agent retries its request with the same key.
      await grant(world, root.id, 10n * ONE_CREDIT_UC);
      const ran = await execute(world, root.token, request, key);
      expect(ran.status, JSON.stringify(ran.body)).toBe(ending === 'executed' ? 200 : 404);
      expect((await world.api('GET', `/v1/intents/${intentId}`, { token: root.ownerToken })).body.state).toBe(ending);

      const topup = await world.api('GET', `/v1/payments/topups/${topupId}`, { token: root.ownerToken });
      expect(topup.body, JSON.stringify(topup.body)).toMatchObject({ status: 'expired', lotId: null, intentId, nextAction: { resolution: 'none' } });
      expect(await topupEvents('topup.expired', topupId)).toEqual([expect.objectContaining({ id: topupId, status: 'expired' })]);
      const pending = await world.api('GET', '/v1/owner/approvals?status=pending', { token: root.ownerToken });
      expect(pending.body.approvals).toEqual([]);
      const approved = await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: root.ownerToken, body: {} });
      expect([approved.status, approved.body.code], JSON.stringify(approved.body)).toEqual([409, 'conflict']);
      // Nothing was credited for it; the retry's answer stays the key's.
      const { rows } = await world.gw.gateway.db.query(`SELECT id FROM credit_lots WHERE agent_id = $1 AND source = 'topup'`, [root.id]);
      expect(rows).toEqual([]);
      expect((await execute(world, root.token, request, key)).status).toBe(ran.status);
    });
  }

  it('leaves a settled top-up as it is: an intent resumed by its own top-up keeps the credit and the record settled', async () => {
    const { root } = await tree();
    const asked = await execute(world, root.token, repoRequest, newKey('resumed'));
    expect(asked.status, JSON.stringify(asked.body)).toBe(402);
    const topupId = asked.body.payment.id as string;
    const approved = await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: root.ownerToken, body: {} });
    expect(approved.body.status, JSON.stringify(approved.body)).toBe('settled');
    const intent = await waitFor(async () => (await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.ownerToken })).body, {
      until: (body) => body.state !== 'pending',
      what: 'the intent to resume on its settled top-up',
    });
    expect(intent.state).toBe('executed');
    expect((await world.api('GET', `/v1/payments/topups/${topupId}`, { token: root.ownerToken })).body.status).toBe('settled');
    expect(await topupEvents('topup.expired', topupId)).toEqual([]);
  });
});

describe("an owner's rule that refuses the gateway's own resume", () => {
  it('stops the gateway from resuming the intent by itself (as a freeze does): loosened later, nothing runs until the agent retries with its key (found from outside)', async () => {
    const { root } = await tree();
    const key = newKey('forbidden-resume');
    const asked = await execute(world, root.token, repoRequest, key);
    expect(asked.status, JSON.stringify(asked.body)).toBe(402);
    const forbid = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: newKey('forbid'), body: { allowedServices: ['mail'] } });
    expect(forbid.status, JSON.stringify(forbid.body)).toBe(200);
    const callsBefore = repoCalls();
    const topupId = asked.body.payment.id as string;
    expect((await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: root.ownerToken, body: {} })).body.status).toBe('settled');
    // The resume right after the approval is refused by the mandate (SCOPE_FORBIDDEN).
    await waitFor(async () => (await world.gw.gateway.db.query<{ resume_due: boolean; resume_attempts: number }>('SELECT resume_due, resume_attempts FROM topups WHERE id = $1', [topupId])).rows[0]!, {
      until: (row) => !row.resume_due || row.resume_attempts > 0,
      what: 'the resume after the approval to be tried',
    });
    // The agent reading its intent sees why it still waits, and that only its own retry runs it now.
    const waiting = (await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.token })).body;
    expect(waiting).toMatchObject({ state: 'pending', error: null, lastAttempt: { at: expect.any(Number), retried: false, error: { code: 'SCOPE_FORBIDDEN', status: 403 } } });
    // The owner allows every service again, for another reason; the resume job comes by past its back-off.
    expect((await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: newKey('allow'), body: {} })).status).toBe(200);
    await runResumeJobsLater(world);
    // And a pass that read the top-up as due before the refused run ended (two instances' jobs) runs nothing either (found by CI).
    expect(await world.gw.services.execute.intents.resume(asked.body.intentId)).toBe('finished');
    // Before, the gateway ran the old request here by itself, and charged it.
    expect(repoCalls()).toBe(callsBefore);
    expect((await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.token })).body.state).toBe('pending');
    expect(await holdsOf(world, root.id)).toEqual([]);
    // The agent's own retry with its key asks again, and runs.
    const ran = await execute(world, root.token, repoRequest, key);
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    expect((await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.token })).body).toMatchObject({ state: 'executed', lastAttempt: null });
    expect(repoCalls()).toBe(callsBefore + 1);
  });
});

describe('a resume that the upstream refuses for now', () => {
  it('leaves the intent pending with its last run shown (when, the problem, retried by the gateway), which a pending intent read without (found from outside)', async () => {
    const { root } = await tree();
    const brokenRequest = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'broken', repo: 'resume' } };
    const asked = await execute(world, root.token, brokenRequest, newKey('upstream-resume'));
    expect(asked.status, JSON.stringify(asked.body)).toBe(402);
    expect((await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.token })).body).toMatchObject({ state: 'pending', lastAttempt: null });
    const topupId = asked.body.payment.id as string;
    expect((await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: root.ownerToken, body: {} })).body.status).toBe('settled');
    const intent = await waitFor(async () => (await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.ownerToken })).body, {
      until: (body) => body.lastAttempt !== null,
      what: 'the resume after the approval to be tried',
    });
    expect(intent).toMatchObject({ state: 'pending', error: null, lastAttempt: { retried: true, error: { status: 502, charged: false } } });
    expect(await holdsOf(world, root.id)).toEqual([expect.objectContaining({ state: 'released', capturedUc: 0n })]);
  });
});

describe("the owner's mail settings refusing the gateway's own resume", () => {
  const inboxRequest = { serviceId: 'mail', action: 'messages.list', input: { inbox: 'INBOX' } };
  const connector = { host: 'imap.example.com', port: 993, tls: 'implicit', username: 'alice', password: 'correct horse battery staple' };

  for (const [what, refuse, allow] of [
    [
      'an inbox taken off the allowlist (inbox_not_allowed)',
      (id: string, token: string) => world.api('PATCH', `/v1/owner/agents/${id}`, { token, key: newKey('narrow'), body: { inboxAllowlist: ['Other'] } }),
      (id: string, token: string) => world.api('PATCH', `/v1/owner/agents/${id}`, { token, key: newKey('widen'), body: { inboxAllowlist: ['INBOX'] } }),
    ],
    [
      'a mail connector removed (connector_not_configured)',
      (id: string, token: string) => world.api('DELETE', `/v1/owner/agents/${id}/mail-connector`, { token }),
      (id: string, token: string) => world.api('PUT', `/v1/owner/agents/${id}/mail-connector`, { token, body: connector }),
    ],
  ] as const) {
    it(`stops the gateway from resuming the intent by itself after ${what}: put back later, nothing runs and nothing is held (found from outside)`, async () => {
      const root = await world.createAgent(`mail-closing-${++counter}@example.com`, `mail-closing-${counter}`, { inboxAllowlist: ['INBOX'] });
      expect((await world.api('PUT', `/v1/owner/agents/${root.id}/mail-connector`, { token: root.ownerToken, body: connector })).status).toBe(200);
      const asked = await execute(world, root.token, inboxRequest, newKey('mail-resume'));
      expect(asked.status, JSON.stringify(asked.body)).toBe(402);
      expect([200, 204]).toContain((await refuse(root.id, root.ownerToken)).status);
      const topupId = asked.body.payment.id as string;
      expect((await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: root.ownerToken, body: {} })).body.status).toBe('settled');
      await waitFor(async () => (await world.gw.gateway.db.query<{ resume_due: boolean; resume_attempts: number }>('SELECT resume_due, resume_attempts FROM topups WHERE id = $1', [topupId])).rows[0]!, {
        until: (row) => !row.resume_due || row.resume_attempts > 0,
        what: 'the resume after the approval to be tried',
      });
      expect((await allow(root.id, root.ownerToken)).status).toBe(200);
      await runResumeJobsLater(world);
      // Before, the gateway ran the old request here by itself: a hold, then whatever the mail server answered.
      expect(await holdsOf(world, root.id)).toEqual([]);
      expect((await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.token })).body.state).toBe('pending');
    });
  }
});

describe('a freeze without releaseHolds', () => {
  it("cancels every retained intent of the agent's subtree in its transaction (agent_frozen, one intent.cancelled each) and closes their top-ups; nothing runs by itself, frozen or after", async () => {
    const { root, delegate } = await tree();
    const asked = await execute(world, root.token, repoRequest);
    expect(asked.status, JSON.stringify(asked.body)).toBe(402);
    // The delegate's purchase waits for its owner's approval (every price is above its threshold); the root's credit pays it.
    await grant(world, root.id, 10n * ONE_CREDIT_UC);
    const threshold = await world.api('PUT', `/v1/owner/agents/${delegate.id}/mandate`, { token: root.ownerToken, key: newKey('threshold'), body: { approvalAboveUc: '0' } });
    expect(threshold.status, JSON.stringify(threshold.body)).toBe(200);
    const delegateKey = newKey('above');
    const above = await execute(world, delegate.token, repoRequest, delegateKey);
    expect([above.status, above.body.reason], JSON.stringify(above.body)).toEqual([402, 'above_approval_threshold']);
    const callsBefore = repoCalls();

    const frozen = await world.api('POST', `/v1/owner/agents/${root.id}/freeze`, { token: root.ownerToken, key: newKey('freeze') });
    expect([frozen.status, frozen.body.freeze.releaseHolds]).toEqual([200, false]);
    for (const [intentId, token] of [[asked.body.intentId, root.token], [above.body.intentId, delegate.token]] as const) {
      expect((await world.api('GET', `/v1/intents/${intentId}`, { token })).body).toMatchObject({ state: 'cancelled', cancellationReason: 'agent_frozen', executionId: null });
      expect(await cancelledEvents(intentId)).toEqual([expect.objectContaining({ id: intentId, cancellationReason: 'agent_frozen' })]);
    }
    // The purchase approval is left for the owner, as a freeze leaves it (approving it waits for the unfreeze).
    const purchaseId = new URL(above.body.approvalUrl).pathname.split('/').pop()!;
    expect((await world.api('GET', `/v1/payments/purchases/${purchaseId}`, { token: root.ownerToken })).body.status).toBe('pending_approval');
    // Freezing again changes nothing.
    expect((await world.api('POST', `/v1/owner/agents/${root.id}/freeze`, { token: root.ownerToken, key: newKey('freeze') })).body.freeze.id).toBe(frozen.body.freeze.id);

    // The top-up asked for the root's intent closed with it (expired): nothing is left to approve for a run that will not happen.
    expect((await world.api('GET', `/v1/payments/topups/${asked.body.payment.id}`, { token: root.ownerToken })).body.status).toBe('expired');
    const approvedTopup = await world.api('POST', `/v1/payments/topups/${asked.body.payment.id}/approve`, { token: root.ownerToken, body: {} });
    expect([approvedTopup.status, approvedTopup.body.code]).toEqual([409, 'conflict']);
    // Paid all the same (a rail's payment under way when the freeze came): the credit lands late, and the cancelled intent is not run, frozen or after.
    expect(await world.gw.services.payments!.settle(asked.body.payment.id, 'test:paid-during-freeze')).toBe('settled');
    await world.gw.services.payments!.runJobs();
    expect((await world.api('POST', `/v1/owner/agents/${root.id}/unfreeze`, { token: root.ownerToken, body: {} })).status).toBe(200);
    // Past the resume job's back-off: before, the gateway ran the old request here by itself, and charged it.
    world.gw.clock.offsetMs += 120_000;
    try {
      await world.gw.services.payments!.runJobs();
    } finally {
      world.gw.clock.offsetMs -= 120_000;
    }
    expect((await world.api('GET', `/v1/intents/${asked.body.intentId}`, { token: root.token })).body.state).toBe('cancelled');
    expect(repoCalls()).toBe(callsBefore);
    expect(await holdsOf(world, root.id)).toEqual([]);
    // The agent's own retry with its key asks again, and runs once the owner approved.
    expect((await world.api('POST', `/v1/payments/purchases/${purchaseId}/approve`, { token: root.ownerToken, body: {} })).body.status).toBe('approved');
    const ran = await execute(world, delegate.token, repoRequest, delegateKey);
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    expect((await world.api('GET', `/v1/intents/${above.body.intentId}`, { token: delegate.token })).body).toMatchObject({ state: 'executed', cancellationReason: null });
  });
});

describe("a purchase approval's key", () => {
  it('stays the approved request\'s: another request under it is refused 409 and changes nothing, and the approved one runs', async () => {
    const { root } = await tree();
    await grant(world, root.id, 10n * ONE_CREDIT_UC);
    const threshold = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, { token: root.ownerToken, key: newKey('threshold'), body: { approvalAboveUc: '0' } });
    expect(threshold.status, JSON.stringify(threshold.body)).toBe(200);
    const key = newKey('approved-key');
    const above = await execute(world, root.token, repoRequest, key);
    expect([above.status, above.body.reason], JSON.stringify(above.body)).toEqual([402, 'above_approval_threshold']);
    const purchaseId = new URL(above.body.approvalUrl).pathname.split('/').pop()!;
    expect((await world.api('POST', `/v1/payments/purchases/${purchaseId}/approve`, { token: root.ownerToken, body: {} })).body.status).toBe('approved');
    const other = await execute(world, root.token, { ...repoRequest, input: { owner: 'octocat', repo: 'Spoon-Knife' } }, key);
    expect([other.status, other.body.code], JSON.stringify(other.body)).toEqual([409, 'idempotency_key_reused']);
    const ran = await execute(world, root.token, repoRequest, key);
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    expect((await world.api('GET', `/v1/payments/purchases/${purchaseId}`, { token: root.ownerToken })).body.status).toBe('used');
  });
});

describe('a retain after a freeze', () => {
  it('is refused 403 FROZEN (naming the frozen ancestor) when a freeze of the agent or an ancestor committed after its hold pass, so no intent outlives the freeze', async () => {
    const { root, delegate } = await tree();
    const frozen = await world.api('POST', `/v1/owner/agents/${root.id}/freeze`, { token: root.ownerToken, key: newKey('freeze') });
    expect(frozen.status).toBe(200);
    // What an execute whose hold pass ran before the freeze committed does next: retain its request.
    const { intents } = world.gw.services.execute;
    const intent = { agentId: delegate.id, serviceId: repoRequest.serviceId, action: repoRequest.action, input: repoRequest.input };
    for (const [agentId, expected] of [
      [delegate.id, { code: 'FROZEN', reason: 'frozen', agentId: root.id }],
      [root.id, { code: 'FROZEN', reason: 'frozen' }],
    ] as const) {
      const claim = { scope: `agent:${agentId}`, route: 'executeService', key: newKey('late-retain'), token: 't', fingerprint: 'f' };
      const refused = await intents.retain(claim, { ...intent, agentId }, ONE_CREDIT_UC).then(
        () => undefined,
        (error: { code: string; options: { extra?: Record<string, unknown> } }) => ({ code: error.code, ...error.options.extra }),
      );
      expect(refused, agentId).toEqual(expected);
    }
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(`SELECT count(*) AS n FROM service_intents WHERE agent_id = ANY($1::text[]) AND state = 'pending'`, [[root.id, delegate.id]]);
    expect(rows[0]!.n).toBe(0n);
  });
});
