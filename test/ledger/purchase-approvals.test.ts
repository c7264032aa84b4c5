// A purchase above the agent's mandate approval threshold waits for its owner: the mint answers 402
// approval_required with the approval page and takes nothing; after the owner approves, the retry with the same
// Idempotency-Key takes the hold exactly once and a further retry replays it; a decline or an expiry takes
// nothing and closes the request with a stored refusal; the approval serves no other request, and two
// concurrent retries take one hold. No payment rail is configured here: approving a purchase moves no money.
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PURCHASE_APPROVAL_LIFETIME_S } from '../../src/payments/purchases.ts';
import { batcherOf } from '../../src/platform/operations.ts';
import { voucherOperations } from '../../src/vouchers/operations.ts';
import { onPostgres } from '../support/database.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type ApiResponse, type World } from '../support/world.ts';
import { SAME_KEY } from '../../src/platform/idempotency.ts';

let world: World;
let shop: Shop;
let counter = 0;
/** At or below this a purchase is not asked about. */
const THRESHOLD_UC = '5000000';

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(async () => {
  await world?.close();
});

/** A funded agent whose mandate asks its owner above THRESHOLD_UC. */
async function agentWithThreshold() {
  const n = ++counter;
  const agent = await world.createAgent(`approver${n}@example.com`, `approval-agent-${n}`);
  await grant(world, agent.id, 100_000_000n);
  const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
    token: agent.ownerToken,
    key: `threshold-${n}`,
    body: { allowedCategories: ['books', 'music'], approvalAboveUc: THRESHOLD_UC },
  });
  expect(put.status).toBe(200);
  return agent;
}

async function holdsOf(agentId: string): Promise<Array<{ id: string; amount_uc: bigint }>> {
  const { rows } = await world.gw.gateway.db.query<{ id: string; amount_uc: bigint }>('SELECT id, amount_uc FROM holds WHERE agent_id = $1 ORDER BY seq', [agentId]);
  return rows;
}

const approvalIdOf = (res: ApiResponse) => new URL(res.body.approvalUrl as string).pathname.split('/').pop()!;
const decide = (token: string, id: string, verb: 'approve' | 'decline', headers: Record<string, string> = {}) =>
  world.api('POST', `/v1/payments/purchases/${id}/${verb}`, { token, body: {}, headers });

describe('a purchase above the approval threshold', () => {
  it('at or below the threshold a purchase is not asked about', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: THRESHOLD_UC });
    const res = await mint(world, agent.token, offer.id, `at-threshold-${counter}`);
    expect(res.status).toBe(200);
    const { rows } = await world.gw.gateway.db.query('SELECT id FROM purchase_approvals WHERE agent_id = $1', [agent.id]);
    expect(rows).toEqual([]);
  });

  it('answers 402 approval_required with the approval page and the retained purchase, takes nothing, and a retry before the answer names the same approval', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '7000000' });
    const key = `asked-${counter}`;
    const before = await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id);
    const first = await mint(world, agent.token, offer.id, key, { maxUc: '9000000' });
    expect(first.status).toBe(402);
    expect(first.body).toMatchObject({
      code: 'approval_required',
      reason: 'above_approval_threshold',
      approvalUrl: expect.stringMatching(new RegExp(`^${world.url}/payments/purchases/pur_`)),
      intentId: approvalIdOf(first),
      intent: { offerId: offer.id, agentId: agent.id, maxUc: '9000000' },
      purchase: { id: approvalIdOf(first), status: 'pending_approval', amountUc: '7000000', offer: { id: offer.id, name: 'Book' }, merchant: { id: shop.merchantId } },
      instructions: expect.stringContaining(SAME_KEY),
    });
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const again = await mint(world, agent.token, offer.id, key, { maxUc: '9000000' });
    expect(again.status).toBe(402);
    expect(again.body.approvalUrl).toBe(first.body.approvalUrl);
    expect(await holdsOf(agent.id)).toEqual([]);
    expect(await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id)).toEqual(before);
    const read = await world.api('GET', `/v1/payments/purchases/${approvalIdOf(first)}`, { token: agent.token });
    expect(read.body).toMatchObject({ status: 'pending_approval', operation: 'mintVoucher', holdId: null, usedAt: null });
    expect(read.body.expiresAt - read.body.createdAt).toBe(PURCHASE_APPROVAL_LIFETIME_S);
  });

  it('after approval the retry takes the hold and returns the voucher once; a second retry replays it; the approval is used', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '6000000' });
    const key = `approved-${counter}`;
    const asked = await mint(world, agent.token, offer.id, key);
    const id = approvalIdOf(asked);
    const approved = await decide(agent.ownerToken, id, 'approve');
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ id, status: 'approved', decidedAt: expect.any(Number) });
    expect((await decide(agent.ownerToken, id, 'approve')).body.status).toBe('approved');

    const retry = await mint(world, agent.token, offer.id, key);
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    const claims = decodeJwt(retry.body.voucher);
    expect(claims).toMatchObject({ jti: retry.body.redemption.id, sub: agent.id, amount_uc: '6000000', offer_id: offer.id });
    const replay = await mint(world, agent.token, offer.id, key);
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.voucher).toBe(retry.body.voucher);
    expect(await holdsOf(agent.id)).toEqual([{ id: retry.body.redemption.id, amount_uc: 6_000_000n }]);
    const used = await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.ownerToken });
    expect(used.body).toMatchObject({ status: 'used', holdId: retry.body.redemption.id, usedAt: expect.any(Number) });
    expect((await decide(agent.ownerToken, id, 'decline')).status).toBe(409);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('a waiting approval whose request took its hold without it (the owner lifted the threshold) is closed as used by that hold, unanswerable, and never expires into purchase.declined (found from outside)', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '6000000' });
    const key = `lifted-${counter}`;
    const asked = await mint(world, agent.token, offer.id, key);
    expect(asked.status).toBe(402);
    const id = approvalIdOf(asked);
    const lifted = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: agent.ownerToken,
      key: `lift-${counter}`,
      body: { allowedCategories: ['books', 'music'] },
    });
    expect(lifted.status).toBe(200);
    const retry = await mint(world, agent.token, offer.id, key);
    expect(retry.status).toBe(200);
    const read = await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.ownerToken });
    expect(read.body).toMatchObject({ status: 'used', holdId: retry.body.redemption.id, usedAt: expect.any(Number), decidedAt: null });
    const waiting = await world.api('GET', '/v1/owner/approvals?status=pending', { token: agent.ownerToken });
    expect(waiting.status).toBe(200);
    expect((waiting.body.approvals as Array<{ id: string }>).map((approval) => approval.id)).not.toContain(id);
    for (const verb of ['approve', 'decline'] as const) expect((await decide(agent.ownerToken, id, verb)).status, verb).toBe(409);
    world.gw.clock.advance((PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    try {
      await world.gw.services.payments.expirePurchases();
    } finally {
      world.gw.clock.advance(-(PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    }
    const { rows } = await world.gw.gateway.db.query<{ type: string }>(`SELECT type FROM events WHERE payload::jsonb #>> '{data,purchase,id}' = $1 ORDER BY seq`, [id]);
    expect(rows.map((row) => row.type)).toEqual(['purchase.approval_requested']);
    expect((await mint(world, agent.token, offer.id, key)).headers.get('idempotent-replayed')).toBe('true');
    expect(await holdsOf(agent.id)).toEqual([{ id: retry.body.redemption.id, amount_uc: 6_000_000n }]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it('cannot be used by another request: another key asks again, and the same key for another offer is refused, nothing taken', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '6000000' });
    const other = await shop.offer({ priceUc: '6000000' });
    const key = `bound-${counter}`;
    const id = approvalIdOf(await mint(world, agent.token, offer.id, key));
    expect((await decide(agent.ownerToken, id, 'approve')).status).toBe(200);

    const anotherKey = await mint(world, agent.token, offer.id, `${key}-other`);
    expect(anotherKey.status).toBe(402);
    expect(approvalIdOf(anotherKey)).not.toBe(id);
    const anotherOffer = await mint(world, agent.token, other.id, key);
    expect(anotherOffer.status).toBe(409);
    expect(anotherOffer.body).toMatchObject({ code: 'idempotency_key_reused', approvalId: id });
    // Another request of the same offer whose own refusal (its maxUc) would come first is refused for the key too.
    const anotherCeiling = await mint(world, agent.token, offer.id, key, { maxUc: '5999999' });
    expect(anotherCeiling.status).toBe(409);
    expect(anotherCeiling.body).toMatchObject({ code: 'idempotency_key_reused', approvalId: id });
    expect(await holdsOf(agent.id)).toEqual([]);
    // The approval was never used: it still waits for the request it was given to, whose retry takes it (found
    // from outside: the refusals above were stored under the key, so the approved request could never be retried).
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.ownerToken })).body.status).toBe('approved');
    const retry = await mint(world, agent.token, offer.id, key);
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.ownerToken })).body).toMatchObject({ status: 'used', holdId: retry.body.redemption.id });
    // Once the key holds the approved request's answer, another request under it is the store's refusal.
    expect((await mint(world, agent.token, other.id, key)).body).toMatchObject({ code: 'idempotency_key_reused' });
    expect((await mint(world, agent.token, offer.id, key)).headers.get('idempotent-replayed')).toBe('true');
  });

  it('keeps the key for the request it was asked for while it waits: another request under it changes nothing', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '6000000' });
    const other = await shop.offer({ priceUc: '6000000' });
    const key = `pending-bound-${counter}`;
    const id = approvalIdOf(await mint(world, agent.token, offer.id, key));
    expect((await mint(world, agent.token, other.id, key)).body).toMatchObject({ code: 'idempotency_key_reused', approvalId: id });
    expect((await decide(agent.ownerToken, id, 'approve')).status).toBe(200);
    expect((await mint(world, agent.token, offer.id, key)).status).toBe(200);
  });

  it('declined: nothing is taken, and the retry answers 409 purchase_declined, stored under its key', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '8000000' });
    const key = `declined-${counter}`;
    const id = approvalIdOf(await mint(world, agent.token, offer.id, key));
    const declined = await decide(agent.ownerToken, id, 'decline');
    expect(declined.body).toMatchObject({ status: 'declined' });
    expect((await decide(agent.ownerToken, id, 'decline')).body.status).toBe('declined');
    expect((await decide(agent.ownerToken, id, 'approve')).status).toBe(409);
    const retry = await mint(world, agent.token, offer.id, key);
    expect(retry.status).toBe(409);
    expect(retry.body).toMatchObject({ code: 'conflict', reason: 'purchase_declined', approvalId: id, intentId: id });
    const again = await mint(world, agent.token, offer.id, key);
    expect(again.status).toBe(409);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await holdsOf(agent.id)).toEqual([]);
  });

  it('an approval withdrawn before it was used takes nothing either', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '8000000' });
    const key = `withdrawn-${counter}`;
    const id = approvalIdOf(await mint(world, agent.token, offer.id, key));
    expect((await decide(agent.ownerToken, id, 'approve')).body.status).toBe('approved');
    expect((await decide(agent.ownerToken, id, 'decline')).body.status).toBe('declined');
    expect((await mint(world, agent.token, offer.id, key)).body).toMatchObject({ code: 'conflict', reason: 'purchase_declined' });
    expect(await holdsOf(agent.id)).toEqual([]);
  });

  it('expired (the clock moved past its deadline, unanswered or approved and unused): the retry answers 409 approval_expired, stored; nothing taken', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '8000000' });
    const unanswered = approvalIdOf(await mint(world, agent.token, offer.id, `lapsed-${counter}`));
    const approved = approvalIdOf(await mint(world, agent.token, offer.id, `lapsed-approved-${counter}`));
    expect((await decide(agent.ownerToken, approved, 'approve')).status).toBe(200);
    world.gw.clock.advance((PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    try {
      // Tokens made now outlive the moved clock.
      const token = await world.agentIssuer.mint({ sub: `approval-agent-${counter}`, owner_email: `approver${counter}@example.com` }, { expiresInS: 3 * PURCHASE_APPROVAL_LIFETIME_S });
      const owner = await world.human.mint({ sub: `human-approver${counter}@example.com`, email: `approver${counter}@example.com`, email_verified: true }, { expiresInS: 3 * PURCHASE_APPROVAL_LIFETIME_S });
      expect((await decide(owner, unanswered, 'approve')).status).toBe(409);
      for (const [key, id] of [[`lapsed-${counter}`, unanswered], [`lapsed-approved-${counter}`, approved]] as const) {
        const retry = await mint(world, token, offer.id, key);
        expect(retry.status, key).toBe(409);
        expect(retry.body, key).toMatchObject({ code: 'conflict', reason: 'approval_expired', approvalId: id });
        expect((await mint(world, token, offer.id, key)).headers.get('idempotent-replayed')).toBe('true');
        expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: owner })).body.status).toBe('expired');
      }
    } finally {
      world.gw.clock.advance(-(PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    }
    expect(await holdsOf(agent.id)).toEqual([]);
  });

  it('the job closes an approval nobody answered, and its read shows it expired', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '8000000' });
    const id = approvalIdOf(await mint(world, agent.token, offer.id, `job-${counter}`));
    world.gw.clock.advance((PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    try {
      await world.gw.services.payments.expirePurchases();
    } finally {
      world.gw.clock.advance(-(PURCHASE_APPROVAL_LIFETIME_S + 1) * 1000);
    }
    const { rows } = await world.gw.gateway.db.query<{ status: string }>('SELECT status FROM purchase_approvals WHERE id = $1', [id]);
    expect(rows).toEqual([{ status: 'expired' }]);
  });

  it('only the human owner answers: an agent 403, another owner 404, an unknown id 404, a foreign Origin 403; reads are the agent\'s and its owner\'s', async () => {
    const agent = await agentWithThreshold();
    const stranger = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '8000000' });
    const id = approvalIdOf(await mint(world, agent.token, offer.id, `guards-${counter}`));
    const owner = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner;
    const oauthOwner = await world.accessToken({ sub: owner.id, scope: 'svc:owner', email: owner.email });
    for (const [token, code] of [[agent.token, 'owner_required'], [oauthOwner, 'human_required']] as const) {
      const res = await decide(token, id, 'approve');
      expect(res.status).toBe(403);
      expect(res.body.code).toBe(code);
    }
    expect((await decide(stranger.ownerToken, id, 'approve')).status).toBe(404);
    expect((await decide(stranger.ownerToken, id, 'decline')).status).toBe(404);
    expect((await decide(agent.ownerToken, 'pur_unknown', 'approve')).status).toBe(404);
    const crossSite = await decide(agent.ownerToken, id, 'approve', { origin: 'https://evil.example' });
    expect(crossSite.status).toBe(403);
    expect(crossSite.body.code).toBe('forbidden');
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: stranger.token })).status).toBe(404);
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: stranger.ownerToken })).status).toBe(404);
    expect((await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.token })).body.status).toBe('pending_approval');
  });

  it('a batch with the approved retry, a purchase below the threshold and a new one above answers each as one by one', async () => {
    const agent = await agentWithThreshold();
    const big = await shop.offer({ priceUc: '6000000' });
    const small = await shop.offer({ priceUc: '1000000' });
    const key = `batch-${counter}`;
    const id = approvalIdOf(await mint(world, agent.token, big.id, key));
    await decide(agent.ownerToken, id, 'approve');
    const batcher = batcherOf(world.gw.gateway, voucherOperations(world.gw.services.vouchers).mintVoucher);
    batcher.pause();
    const answers: Array<Promise<ApiResponse>> = [];
    try {
      for (const [offerId, k] of [[big.id, key], [small.id, `${key}-small`], [big.id, `${key}-new`]] as const) {
        answers.push(mint(world, agent.token, offerId, k));
        await waitFor(() => batcher.queued, { until: (n) => n >= answers.length, what: 'the mint to reach the batcher', intervalMs: 5 });
      }
    } finally {
      batcher.resume();
    }
    const [approved, below, above] = await Promise.all(answers);
    expect([approved!.status, below!.status, above!.status]).toEqual([200, 200, 402]);
    expect(approvalIdOf(above!)).not.toBe(id);
    expect((await holdsOf(agent.id)).map((hold) => hold.amount_uc)).toEqual([6_000_000n, 1_000_000n]);
    // The new approval and its event were written in the batch's transaction, though its answer was not stored.
    const { rows } = await world.gw.gateway.db.query<{ type: string }>(`SELECT type FROM events WHERE payload::jsonb #>> '{data,purchase,id}' = $1`, [approvalIdOf(above!)]);
    expect(rows).toEqual([{ type: 'purchase.approval_requested' }]);
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});

describe('concurrent retries after approval', () => {
  it('take one hold: every answer is the same voucher', async () => {
    const agent = await agentWithThreshold();
    const offer = await shop.offer({ priceUc: '6000000' });
    const key = `concurrent-${counter}`;
    const id = approvalIdOf(await mint(world, agent.token, offer.id, key));
    await decide(agent.ownerToken, id, 'approve');
    const answers = await Promise.all(Array.from({ length: 8 }, () => mint(world, agent.token, offer.id, key)));
    // A retry that meets the first still running may be told so (409 idempotency_key_in_use); none takes a second hold.
    const done = answers.filter((a) => a.status === 200);
    expect(done.length).toBeGreaterThanOrEqual(1);
    for (const a of answers.filter((x) => x.status !== 200)) expect(a.body.code).toBe('idempotency_key_in_use');
    expect(new Set(done.map((a) => a.body.voucher)).size).toBe(1);
    expect(await holdsOf(agent.id)).toHaveLength(1);
  });

  it.runIf(onPostgres())('on two instances take one hold', async () => {
    const second = await world.anotherInstance();
    try {
      const agent = await agentWithThreshold();
      const offer = await shop.offer({ priceUc: '6000000' });
      const key = `two-instances-${counter}`;
      const id = approvalIdOf(await mint(world, agent.token, offer.id, key));
      await decide(agent.ownerToken, id, 'approve');
      const viaSecond = async () => {
        const res = await fetch(`${second.url}/v1/vouchers`, {
          method: 'POST',
          headers: { authorization: `Bearer ${agent.token}`, 'content-type': 'application/json', 'idempotency-key': key },
          body: JSON.stringify({ offerId: offer.id }),
        });
        return { status: res.status, headers: res.headers, body: await res.json() } as ApiResponse;
      };
      const answers = await Promise.all([mint(world, agent.token, offer.id, key), viaSecond(), mint(world, agent.token, offer.id, key), viaSecond()]);
      const done = answers.filter((a) => a.status === 200);
      expect(done.length).toBeGreaterThanOrEqual(1);
      for (const a of answers.filter((x) => x.status !== 200)) expect(a.body.code).toBe('idempotency_key_in_use');
      expect(new Set(done.map((a) => a.body.voucher)).size).toBe(1);
      expect(await holdsOf(agent.id)).toHaveLength(1);
      await expectLedgerInvariants(world.gw.gateway.db);
    } finally {
      await second.close();
    }
  });
});
