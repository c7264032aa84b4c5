// Issue 29's acceptance, end to end: the official x402 packages (@x402/express, @x402/hono, @x402/fetch)
// with this repository's credit scheme (@agent-credit-gateway/x402-credit, from its built dist), a real
// gateway as the facilitator, real agents paying from their credit. What each refusal looks like to the
// agent, and what the ledger shows after each payment.
import { waitFor } from '../support/wait.ts';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { x402ResourceServer } from '@x402/core/server';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ATTESTATION_TYP,
  CREDIT_ASSET,
  CREDIT_NETWORK,
  CREDIT_SCHEME,
  CreditError,
  creditFacilitator,
  CreditSchemeClient,
  CreditSchemeServer,
  creditResourceServer,
  verifyCreditReceipt,
  verifyCreditRoutes,
  verifyPaymentResponse,
} from '@agent-credit-gateway/x402-credit';
import { rotateSigningKeys } from '../../src/platform/signing.ts';
import { grant, mint } from '../support/ledger-fixture.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { uniqueKey } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';
import { capturesOf, openX402Merchant, payingAgent, startExpressServer, startHonoServer, type PaidServer, type X402Merchant } from '../support/x402.ts';

let world: World;
let merchant: X402Merchant;
let shop: PaidServer;
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  merchant = await openX402Merchant(world);
  shop = await startExpressServer(merchant);
});
afterAll(async () => {
  await shop?.close();
  await world?.close();
});

async function fundedAgent(amountUc = 100_000_000n) {
  const agent = await world.createAgent(`x402-agent-${++counter}@example.com`, `x402-agent-${counter}`, { allowedCategories: ['books', 'music'] });
  await grant(world, agent.id, amountUc);
  return agent;
}

/** What the server asks for, unpaid. */
async function paymentRequired(url: string): Promise<PaymentRequired> {
  const res = await fetch(url);
  expect(res.status).toBe(402);
  return decodePaymentRequiredHeader(res.headers.get('payment-required')!);
}

/** Sends a payment as the official client would, and reads the server's answer. */
async function pay(url: string, payment: PaymentPayload | string) {
  const header = typeof payment === 'string' ? payment : encodePaymentSignatureHeader(payment);
  const res = await fetch(url, { headers: { 'payment-signature': header } });
  const body = await res.json().catch(() => undefined);
  const required = res.headers.get('payment-required');
  const response = res.headers.get('payment-response');
  return {
    status: res.status,
    body,
    error: required ? decodePaymentRequiredHeader(required).error : undefined,
    settlement: response ? decodePaymentResponseHeader(response) : undefined,
  };
}

async function availableUc(agent: { id: string; ownerToken: string }): Promise<bigint> {
  const res = await world.api('GET', `/v1/owner/agents/${agent.id}/balance`, { token: agent.ownerToken });
  expect(res.status).toBe(200);
  return BigInt(res.body.availableUc);
}

async function redemption(holdId: string) {
  const res = await world.api('GET', `/v1/redemptions/${holdId}`, { token: merchant.apiKey });
  expect(res.status).toBe(200);
  return res.body;
}

/** The payment error (x402's client throws plain Errors) and the typed CreditError behind it. */
async function refusal(promise: Promise<unknown>, agent: ReturnType<typeof payingAgent>): Promise<{ message: string; credit: CreditError | undefined }> {
  let credit: CreditError | undefined;
  agent.client.onPaymentCreationFailure(async ({ error }) => {
    if (error instanceof CreditError) credit = error;
  });
  try {
    await promise;
  } catch (error) {
    return { message: (error as Error).message, credit };
  }
  throw new Error('expected the payment to be refused');
}

describe('the paid route', () => {
  it('answers 402 with this scheme for the merchant offer and the exact resource URL', async () => {
    const required = await paymentRequired(`${shop.url}/report?period=q3`);
    expect(required.x402Version).toBe(2);
    expect(required.accepts).toEqual([
      {
        scheme: CREDIT_SCHEME,
        network: CREDIT_NETWORK,
        asset: CREDIT_ASSET,
        amount: '500000',
        payTo: merchant.merchantId,
        maxTimeoutSeconds: 300,
        extra: { version: '1.0.0', authority: world.url, offerId: merchant.offerId, resource: `${shop.url}/report?period=q3` },
      },
    ]);
  });

  it('an agent with @x402/fetch pays 0.5 credit and gets 200, a receipt that verifies with jose, and one capture', async () => {
    const agent = await fundedAgent();
    const before = await availableUc(agent);
    const paying = payingAgent(world, agent.token);
    const res = await paying.fetch(`${shop.url}/report`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ report: 'quarterly' });
    const settlement = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    const holdId = settlement.extra!.commitmentId as string;
    expect(settlement).toMatchObject({ success: true, transaction: '', network: CREDIT_NETWORK, payer: agent.id, extra: { commitmentId: holdId, chargedAmount: '500000' } });

    // The receipt is the gateway's own signed capture receipt: plain jose against the served JWKS.
    const jwks = createRemoteJWKSet(new URL(`${world.url}/.well-known/jwks.json`));
    const { payload, protectedHeader } = await jwtVerify(settlement.extra!.receipt as string, jwks, { issuer: world.url, typ: 'receipt+jwt', algorithms: ['ES256'] });
    expect(protectedHeader.typ).toBe('receipt+jwt');
    expect(payload).toMatchObject({ kind: 'capture', redemption_id: holdId, agent_id: agent.id, merchant_id: merchant.merchantId, offer_id: merchant.offerId, captured_uc: '500000' });
    // …and the package's check of it against the response.
    expect(await verifyPaymentResponse(settlement, { gatewayUrl: world.url, agentId: agent.id, merchantId: merchant.merchantId })).toMatchObject({ capturedUc: '500000' });

    // The attestation the agent sent: the contract's claims, bound to this merchant and resource.
    const sent = JSON.parse(Buffer.from(paying.sent[0]!, 'base64').toString()) as PaymentPayload;
    expect(sent.payload.type).toBe('consume');
    const attestation = decodeJwt(sent.payload.attestation as string);
    expect(JSON.parse(Buffer.from((sent.payload.attestation as string).split('.')[0]!, 'base64url').toString()).typ).toBe(ATTESTATION_TYP);
    expect(attestation).toMatchObject({ iss: world.url, sub: agent.id, aud: merchant.merchantId, jti: holdId, amount: '500000', asset: CREDIT_ASSET, resource: `${shop.url}/report`, offer_id: merchant.offerId });

    expect(await capturesOf(world, holdId)).toBe(1);
    expect(await redemption(holdId)).toMatchObject({ state: 'captured', capturedUc: '500000', releasedUc: '0' });
    expect(before - (await availableUc(agent))).toBe(500_000n);
    expect(shop.runs.get('/report')).toBeGreaterThanOrEqual(1);
  });

  it('behind @x402/hono the handler gets the body as it was sent (found from outside: the payment middleware read it as JSON, and a binary upload arrived as other bytes)', async () => {
    const agent = await fundedAgent();
    const hono = await startHonoServer(merchant);
    try {
      const bytes = Buffer.from([0xff, 0x00, 0x80, 0x7b, 0x22, 0xfe, 0x0a, 0xc3, 0x28, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06]);
      const res = await payingAgent(world, agent.token).fetch(`${hono.url}/translate`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: bytes });
      expect(res.status).toBe(200);
      expect((await res.json()).received).toBe(bytes.toString('base64'));
    } finally {
      await hono.close();
    }
  });

  it('the same works behind @x402/hono', async () => {
    const hono = await startHonoServer(merchant);
    try {
      const agent = await fundedAgent();
      const res = await payingAgent(world, agent.token).fetch(`${hono.url}/report`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ report: 'quarterly', run: 1 });
      const settlement = decodePaymentResponseHeader(res.headers.get('payment-response')!);
      expect(await verifyPaymentResponse(settlement, { gatewayUrl: world.url, agentId: agent.id })).toMatchObject({ capturedUc: '500000' });
      expect(await capturesOf(world, settlement.extra!.commitmentId as string)).toBe(1);
    } finally {
      await hono.close();
    }
  });
});

describe('a payment sent again', () => {
  it('is neither charged twice nor served twice: the repeat gets the first answer', async () => {
    const agent = await fundedAgent();
    const paying = payingAgent(world, agent.token);
    const first = await paying.fetch(`${shop.url}/report`);
    const firstBody = await first.json();
    const firstSettlement = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    const runs = shop.runs.get('/report');
    const before = await availableUc(agent);

    const again = await pay(`${shop.url}/report`, paying.sent[0]!);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(firstBody);
    expect(again.settlement).toEqual(firstSettlement);
    expect(shop.runs.get('/report')).toBe(runs);
    expect(await availableUc(agent)).toBe(before);
    expect(await capturesOf(world, firstSettlement.extra!.commitmentId as string)).toBe(1);
  });

  it('sent twice at once, runs the handler once and captures once', async () => {
    const agent = await fundedAgent();
    const paying = payingAgent(world, agent.token);
    const payment = await paying.client.createPaymentPayload(await paymentRequired(`${shop.url}/slow`));
    const runs = shop.runs.get('/slow') ?? 0;
    const [a, b] = await Promise.all([pay(`${shop.url}/slow`, payment), pay(`${shop.url}/slow`, payment)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.body).toEqual(b.body);
    expect(a.settlement).toEqual(b.settlement);
    expect(shop.runs.get('/slow')).toBe(runs + 1);
    expect(await capturesOf(world, a.settlement!.extra!.commitmentId as string)).toBe(1);
  });

  it('at another instance of the server, which never saw it, is refused by the gateway (already_settled) and not charged again', async () => {
    // Two instances of one API behind its public origin: each states its resources on that origin.
    const settings = merchant.settings({ resourceOrigin: 'https://api.shop.example' });
    const [one, two] = [await startExpressServer(merchant, creditResourceServer(settings)), await startExpressServer(merchant, creditResourceServer(settings))];
    try {
      const agent = await fundedAgent();
      const paying = payingAgent(world, agent.token);
      const first = await paying.fetch(`${one.url}/report`);
      expect(first.status).toBe(200);
      const attestation = decodeJwt((JSON.parse(Buffer.from(paying.sent[0]!, 'base64').toString()) as PaymentPayload).payload.attestation as string);
      expect(attestation.resource).toBe('https://api.shop.example/report');
      const before = await availableUc(agent);
      const replay = await pay(`${two.url}/report`, paying.sent[0]!);
      expect(replay).toMatchObject({ status: 402, error: 'already_settled' });
      expect(two.runs.get('/report')).toBeUndefined();
      expect(await availableUc(agent)).toBe(before);
      expect(await capturesOf(world, attestation.jti!)).toBe(1);
    } finally {
      await one.close();
      await two.close();
    }
  });
});

describe('refusals', () => {
  it('insufficient credit: the gateway answers 402 insufficient_credits, nothing is held or served', async () => {
    const agent = await fundedAgent(100_000n);
    const paying = payingAgent(world, agent.token);
    const runs = shop.runs.get('/report');
    const refused = await refusal(paying.fetch(`${shop.url}/report`), paying);
    expect(refused.message).toMatch(/insufficient_credits/);
    expect(refused.credit).toMatchObject({ code: 'insufficient_credits', status: 402 });
    expect(await availableUc(agent)).toBe(100_000n);
    expect(shop.runs.get('/report')).toBe(runs);
    // Straight from x402Client, the typed error itself.
    await expect(paying.client.createPaymentPayload(await paymentRequired(`${shop.url}/report`))).rejects.toBeInstanceOf(CreditError);
  });

  it('an expired, a tampered, another resource\'s and another merchant\'s attestation are refused, each with its own error', async () => {
    const agent = await fundedAgent();
    const paying = payingAgent(world, agent.token);
    const required = await paymentRequired(`${shop.url}/report`);
    const fresh = () => paying.client.createPaymentPayload(required);
    const withAttestation = (payment: PaymentPayload, attestation: string): PaymentPayload => ({ ...payment, payload: { ...payment.payload, attestation } });

    // Expired: a valid signature, `exp` in the past.
    const expiring = await fresh();
    const claims = decodeJwt(expiring.payload.attestation as string);
    const header = JSON.parse(Buffer.from((expiring.payload.attestation as string).split('.')[0]!, 'base64url').toString());
    const nowS = Math.floor(Date.now() / 1000);
    const expired = await world.gw.gateway.signing.sign({ ...claims, iat: nowS - 600, exp: nowS - 60 }, header.typ);
    const expiredAnswer = await pay(`${shop.url}/report`, withAttestation(expiring, expired));

    // Tampered: the amount raised in the payload, the signature kept.
    const tampering = await fresh();
    const [h, p, s] = (tampering.payload.attestation as string).split('.');
    const raised = Buffer.from(JSON.stringify({ ...decodeJwt(tampering.payload.attestation as string), amount: '50000000' })).toString('base64url');
    const tamperedAnswer = await pay(`${shop.url}/report`, withAttestation(tampering, [h, raised, s].join('.')));

    // Another resource: bought for /report, presented at /other (with /other's requirements).
    const bought = await fresh();
    const otherRequired = await paymentRequired(`${shop.url}/other`);
    const otherAnswer = await pay(`${shop.url}/other`, { ...bought, accepted: otherRequired.accepts[0]!, resource: otherRequired.resource });

    // Another merchant: bought for this merchant, presented to another's server (with its requirements).
    const stranger = await openX402Merchant(world);
    const strangerShop = await startExpressServer(stranger);
    try {
      const strangerRequired = await paymentRequired(`${strangerShop.url}/report`);
      const foreign = await paying.client.createPaymentPayload({ ...required, accepts: [{ ...required.accepts[0]!, extra: { ...required.accepts[0]!.extra, resource: strangerRequired.accepts[0]!.extra.resource } }] });
      const strangerAnswer = await pay(`${strangerShop.url}/report`, { ...foreign, accepted: strangerRequired.accepts[0]!, resource: strangerRequired.resource });
      expect(strangerAnswer).toMatchObject({ status: 402, error: 'unauthorized_server' });
      expect(strangerShop.runs.size).toBe(0);
    } finally {
      await strangerShop.close();
    }

    expect(expiredAnswer).toMatchObject({ status: 402, error: 'attestation_expired' });
    expect(tamperedAnswer).toMatchObject({ status: 402, error: 'attestation_invalid' });
    expect(otherAnswer).toMatchObject({ status: 402, error: 'resource_mismatch' });
    expect(shop.runs.get('/other')).toBeUndefined();
    // None of the four was charged.
    for (const payment of [expiring, tampering, bought]) expect(await capturesOf(world, decodeJwt(payment.payload.attestation as string).jti!)).toBe(0);
    // The expired one can never be presented again: its hold was released at once, not left until its deadline.
    const expiredHold = await world.api('GET', `/v1/redemptions/${claims.jti!}`, { token: merchant.apiKey });
    expect(expiredHold.body).toMatchObject({ state: 'released', capturedUc: '0' });
  });

  it("requirements naming another authority are refused by the agent before it asks for anything (the draft's phishing rule)", async () => {
    const agent = await fundedAgent();
    const paying = payingAgent(world, agent.token);
    const required = await paymentRequired(`${shop.url}/report`);
    const phishing = { ...required, accepts: [{ ...required.accepts[0]!, extra: { ...required.accepts[0]!.extra, authority: 'https://credits.evil.example' } }] };
    await expect(paying.client.createPaymentPayload(phishing)).rejects.toMatchObject({ code: 'authority_not_trusted' });
    const { rows } = await world.gw.gateway.db.query<{ n: bigint | number }>('SELECT count(*) AS n FROM holds WHERE agent_id = $1', [agent.id]);
    expect(Number(rows[0]!.n)).toBe(0);
  });

  it("a mandate's budget and merchant rules refuse x402 payments as they refuse vouchers", async () => {
    const agent = await fundedAgent();
    const paying = payingAgent(world, agent.token);
    const putMandate = (body: unknown) => world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: uniqueKey('mandate'), body });

    expect((await putMandate({ budgets: [{ id: 'daily', limitUc: '700000', period: 'day' }] })).status).toBe(200);
    expect((await paying.fetch(`${shop.url}/report`)).status).toBe(200);
    const overBudget = await refusal(paying.fetch(`${shop.url}/report`), paying);
    const voucherOverBudget = await mint(world, agent.token, merchant.offerId, uniqueKey('mint'));
    expect(overBudget.credit).toMatchObject({ code: 'CAP_EXCEEDED', status: voucherOverBudget.status });
    expect(overBudget.credit!.problem).toMatchObject({ code: voucherOverBudget.body.code, reason: voucherOverBudget.body.reason });
    expect(voucherOverBudget.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'budget_exceeded' });

    expect((await putMandate({ merchants: { allow: null, deny: [merchant.merchantId] } })).status).toBe(200);
    const denied = await refusal(paying.fetch(`${shop.url}/report`), paying);
    const voucherDenied = await mint(world, agent.token, merchant.offerId, uniqueKey('mint'));
    expect(denied.credit).toMatchObject({ code: 'SCOPE_FORBIDDEN', status: voucherDenied.status });
    expect(denied.credit!.problem).toMatchObject({ code: voucherDenied.body.code, reason: voucherDenied.body.reason });
    expect(voucherDenied.body).toMatchObject({ code: 'SCOPE_FORBIDDEN', reason: 'merchant_not_allowed' });
  });
});

describe('release', () => {
  it('a handler that fails is not charged: the hold is settled at amount "0" and the credit comes back', async () => {
    const agent = await fundedAgent();
    const paying = payingAgent(world, agent.token);
    const before = await availableUc(agent);
    const res = await paying.fetch(`${shop.url}/fails`);
    expect(res.status).toBe(502);
    expect(res.headers.get('payment-response')).toBeNull();
    const holdId = decodeJwt((JSON.parse(Buffer.from(paying.sent[0]!, 'base64').toString()) as PaymentPayload).payload.attestation as string).jti!;
    expect(await redemption(holdId)).toMatchObject({ state: 'released', capturedUc: '0', releasedUc: '500000' });
    expect(await capturesOf(world, holdId)).toBe(0);
    expect(await availableUc(agent)).toBe(before);
    // The released payment cannot be presented again.
    const again = await pay(`${shop.url}/fails`, paying.sent[0]!);
    expect(again).toMatchObject({ status: 402, error: 'already_settled' });
  });

  it('a settle the gateway refuses for good (more than was authorized) is not charged, and the hold comes back at once, not at its expiry (found from outside)', async () => {
    const agent = await fundedAgent();
    const paying = payingAgent(world, agent.token);
    const before = await availableUc(agent);
    const res = await paying.fetch(`${shop.url}/overcharges`);
    expect(res.status).toBe(402);
    const holdId = decodeJwt((JSON.parse(Buffer.from(paying.sent[0]!, 'base64').toString()) as PaymentPayload).payload.attestation as string).jti!;
    await waitFor(async () => (await redemption(holdId)).state === 'released', { what: `hold ${holdId} released` });
    expect(await redemption(holdId)).toMatchObject({ state: 'released', capturedUc: '0', releasedUc: '500000' });
    expect(await capturesOf(world, holdId)).toBe(0);
    expect(await availableUc(agent)).toBe(before);
  });
});

/** A fetch for the merchant's facilitator that loses the answers of the first `lost` settles, after the gateway ran them. */
function settleAnswersLost(lost: number) {
  let settles = 0;
  const lossy: typeof fetch = async (input, init) => {
    if (!String(input).endsWith('/x402/settle')) return fetch(input, init);
    const answer = await fetch(input, init);
    if (++settles <= lost) {
      await answer.text();
      throw new TypeError('fetch failed: the connection was reset');
    }
    return answer;
  };
  return { fetch: lossy, settles: () => settles };
}

describe('a settle that fails for a moment', () => {
  it("is retried with the same payment: the agent gets its 200, the handler runs once, one capture, nothing left held (found from outside: a 503 or 429 at settle turned a served request into a 402 and the agent's retry paid again)", async () => {
    const agent = await fundedAgent();
    const before = await availableUc(agent);
    const settles: string[] = [];
    // Between the merchant and the real gateway: the first settle runs but its answer is lost, the second is
    // answered 503 with Retry-After by something in front of the gateway, the third goes through.
    const flaky: typeof fetch = async (input, init) => {
      if (!String(input).endsWith('/x402/settle')) return fetch(input, init);
      settles.push(String(init?.body));
      if (settles.length === 1) {
        await (await fetch(input, init)).text();
        throw new TypeError('fetch failed: the connection was reset');
      }
      if (settles.length === 2) {
        const problem = { type: `${world.url}/docs/errors#storage_unavailable`, title: 'The database is unavailable', status: 503, code: 'storage_unavailable' };
        return new Response(JSON.stringify(problem), { status: 503, headers: { 'content-type': 'application/problem+json', 'retry-after': '1' } });
      }
      return fetch(input, init);
    };
    const flakyShop = await startExpressServer(merchant, creditResourceServer(merchant.settings({ fetch: flaky, backoffMs: () => 10 })));
    try {
      const paying = payingAgent(world, agent.token);
      const res = await paying.fetch(`${flakyShop.url}/report`);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ report: 'quarterly', run: 1 });
      expect(settles).toHaveLength(3);
      expect(new Set(settles).size).toBe(1);
      const settlement = decodePaymentResponseHeader(res.headers.get('payment-response')!);
      const holdId = settlement.extra!.commitmentId as string;
      expect(await verifyPaymentResponse(settlement, { gatewayUrl: world.url, agentId: agent.id, merchantId: merchant.merchantId })).toMatchObject({ capturedUc: '500000' });
      expect(paying.sent).toHaveLength(1);
      expect(flakyShop.runs.get('/report')).toBe(1);
      expect(await capturesOf(world, holdId)).toBe(1);
      expect(await redemption(holdId)).toMatchObject({ state: 'captured', capturedUc: '500000' });
      const { rows } = await world.gw.gateway.db.query<{ n: bigint | number }>("SELECT count(*) AS n FROM holds WHERE agent_id = $1 AND state = 'held'", [agent.id]);
      expect(Number(rows[0]!.n)).toBe(0);
      expect(before - (await availableUc(agent))).toBe(500_000n);
    } finally {
      await flakyShop.close();
    }
  });

  it('that keeps failing answers the agent 402 with gateway_unavailable, charges nothing, and the next attempt presents the same payment, served once the gateway answers', async () => {
    const agent = await fundedAgent();
    let down = true;
    let settles = 0;
    const busy: typeof fetch = async (input, init) => {
      if (!String(input).endsWith('/x402/settle')) return fetch(input, init);
      settles++;
      if (!down) return fetch(input, init);
      return new Response(JSON.stringify({ title: 'Too many requests', status: 429, code: 'rate_limited' }), { status: 429, headers: { 'content-type': 'application/problem+json', 'retry-after': '0' } });
    };
    const busyShop = await startExpressServer(merchant, creditResourceServer(merchant.settings({ fetch: busy, attemptsMax: 3 })));
    try {
      const paying = payingAgent(world, agent.token);
      const res = await paying.fetch(`${busyShop.url}/report`);
      expect(res.status).toBe(402);
      // @x402/fetch presented the payment a second time at once, as the scheme asked: the same attestation, three attempts each.
      expect(settles).toBe(6);
      expect(paying.sent).toHaveLength(2);
      expect(paying.sent[1]).toBe(paying.sent[0]);
      // x402's middleware withholds the handler's answer and says why in PAYMENT-RESPONSE.
      const settlement = decodePaymentResponseHeader(res.headers.get('payment-response')!);
      expect(settlement).toMatchObject({ success: false, network: CREDIT_NETWORK });
      expect(settlement.errorReason).toMatch(/^gateway_unavailable: the gateway's \/x402\/settle kept failing after 3 attempt\(s\); the last answer: 429 rate_limited/);
      const holdId = decodeJwt((JSON.parse(Buffer.from(paying.sent[0]!, 'base64').toString()) as PaymentPayload).payload.attestation as string).jti!;
      expect(await redemption(holdId)).toMatchObject({ state: 'held', capturedUc: '0' });
      expect(await capturesOf(world, holdId)).toBe(0);
      expect(busyShop.runs.get('/report')).toBe(1);
      // The gateway answers again: the agent's next attempt presents the same payment, and gets what the handler made.
      down = false;
      const again = await paying.fetch(`${busyShop.url}/report`);
      expect(again.status).toBe(200);
      expect(await again.json()).toMatchObject({ report: 'quarterly', run: 1 });
      expect(paying.sent.at(-1)).toBe(paying.sent[0]);
      expect(busyShop.runs.get('/report')).toBe(1);
      expect(await capturesOf(world, holdId)).toBe(1);
      const { rows } = await world.gw.gateway.db.query<{ n: bigint | number }>('SELECT count(*) AS n FROM holds WHERE agent_id = $1', [agent.id]);
      expect(Number(rows[0]!.n)).toBe(1);
    } finally {
      await busyShop.close();
    }
  });

  it('whose answers were all lost after the gateway captured is presented again by the agent at once, and served: one capture, one run (found from outside: told 402, charged, and its retry paid again)', async () => {
    const agent = await fundedAgent();
    const before = await availableUc(agent);
    const lossy = settleAnswersLost(2);
    const lossyShop = await startExpressServer(merchant, creditResourceServer(merchant.settings({ fetch: lossy.fetch, attemptsMax: 2, backoffMs: () => 10 })));
    try {
      const paying = payingAgent(world, agent.token);
      const res = await paying.fetch(`${lossyShop.url}/report`);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ report: 'quarterly', run: 1 });
      expect(lossy.settles()).toBe(3);
      expect(paying.sent).toHaveLength(2);
      expect(paying.sent[1]).toBe(paying.sent[0]);
      const settlement = decodePaymentResponseHeader(res.headers.get('payment-response')!);
      expect(settlement).toMatchObject({ success: true });
      expect(lossyShop.runs.get('/report')).toBe(1);
      expect(await capturesOf(world, settlement.extra!.commitmentId as string)).toBe(1);
      expect(before - (await availableUc(agent))).toBe(500_000n);
    } finally {
      await lossyShop.close();
    }
  });

  it("presented again with another request is served for that request, never with the first one's answer: charged once (found from outside: a later POST got an earlier POST's answer)", async () => {
    const agent = await fundedAgent();
    const before = await availableUc(agent);
    // Every answer of the first four settles is lost: the first request's two attempts, and its retry at once.
    const lossy = settleAnswersLost(4);
    const lossyShop = await startExpressServer(merchant, creditResourceServer(merchant.settings({ fetch: lossy.fetch, attemptsMax: 2, backoffMs: () => 10 })));
    try {
      const paying = payingAgent(world, agent.token);
      const post = (text: string) => paying.fetch(`${lossyShop.url}/translate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text }) });
      const first = await post('transfer 5 to alice');
      expect(first.status).toBe(402);
      const second = await post('hello world');
      expect(second.status).toBe(200);
      expect(await second.json()).toEqual({ translation: '[fr] hello world', run: 2 });
      expect(new Set(paying.sent).size).toBe(1);
      const settlement = decodePaymentResponseHeader(second.headers.get('payment-response')!);
      expect(await capturesOf(world, settlement.extra!.commitmentId as string)).toBe(1);
      expect(before - (await availableUc(agent))).toBe(500_000n);
      // Served: the first request under that payment is now a new purchase.
      const again = await post('transfer 5 to alice');
      expect(again.status).toBe(200);
      expect(await again.json()).toEqual({ translation: '[fr] transfer 5 to alice', run: 3 });
      expect(new Set(paying.sent).size).toBe(2);
      expect(before - (await availableUc(agent))).toBe(1_000_000n);
    } finally {
      await lossyShop.close();
    }
  });

  it('a verify that could not reach the gateway is presented again with the same payment: one hold, one run', async () => {
    const agent = await fundedAgent();
    let verifies = 0;
    const unreachable: typeof fetch = async (input, init) => {
      if (!String(input).endsWith('/x402/verify')) return fetch(input, init);
      if (++verifies <= 2) throw new TypeError('fetch failed: connect ECONNREFUSED');
      return fetch(input, init);
    };
    const shyShop = await startExpressServer(merchant, creditResourceServer(merchant.settings({ fetch: unreachable, attemptsMax: 2, backoffMs: () => 10 })));
    try {
      const paying = payingAgent(world, agent.token);
      const res = await paying.fetch(`${shyShop.url}/report`);
      expect(res.status).toBe(200);
      expect(paying.sent).toHaveLength(2);
      expect(paying.sent[1]).toBe(paying.sent[0]);
      expect(shyShop.runs.get('/report')).toBe(1);
      const { rows } = await world.gw.gateway.db.query<{ n: bigint | number }>('SELECT count(*) AS n FROM holds WHERE agent_id = $1', [agent.id]);
      expect(Number(rows[0]!.n)).toBe(1);
    } finally {
      await shyShop.close();
    }
  });
});

describe('the agent side', () => {
  it('retries a lost authorize answer with the same idempotency key, so one payment holds credit once', async () => {
    const agent = await fundedAgent();
    const keys: string[] = [];
    let lost = 0;
    // Forwards everything to the gateway, but loses the first answer of each authorize, as a network would.
    const proxy = http.createServer(async (request, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const headers = Object.fromEntries(Object.entries(request.headers).filter(([name]) => !['host', 'content-length', 'connection'].includes(name))) as Record<string, string>;
      const upstream = await fetch(`${world.url}${request.url}`, { method: request.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
      const text = await upstream.text();
      if (request.url === '/x402/authorize') {
        keys.push(headers['idempotency-key']!);
        if (lost++ === 0) return void response.destroy();
      }
      response.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' }).end(text);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const viaProxy = new CreditSchemeClient({
        gatewayUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
        credential: async () => agent.token,
        backoffMs: () => 10,
      });
      const required = await paymentRequired(`${shop.url}/report`);
      const { attestation } = await viaProxy.authorize({ amount: '500000', asset: CREDIT_ASSET, resource: required.accepts[0]!.extra.resource as string, payTo: merchant.merchantId, offerId: merchant.offerId });
      expect(keys).toHaveLength(2);
      expect(keys[0]).toBe(keys[1]);
      const { rows } = await world.gw.gateway.db.query<{ id: string }>('SELECT id FROM holds WHERE agent_id = $1', [agent.id]);
      expect(rows.map((row) => row.id)).toEqual([decodeJwt(attestation).jti]);
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  it('a payment above the approval threshold waits for the owner, and once approved the next attempt at it takes the hold once', async () => {
    const agent = await fundedAgent();
    const putMandate = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: uniqueKey('mandate'), body: { approvalAboveUc: '100000' } });
    expect(putMandate.status).toBe(200);
    const paying = payingAgent(world, agent.token);
    const holds = async () => (await world.gw.gateway.db.query<{ id: string }>('SELECT id FROM holds WHERE agent_id = $1', [agent.id])).rows.map((row) => row.id);
    const approvals = async () => (await world.gw.gateway.db.query<{ id: string }>('SELECT id FROM purchase_approvals WHERE agent_id = $1 ORDER BY id', [agent.id])).rows.map((row) => row.id);

    const asked = (await refusal(paying.fetch(`${shop.url}/report`), paying)).credit!;
    expect(asked).toMatchObject({ code: 'approval_required', status: 402, idempotencyKey: expect.any(String), approvalId: expect.stringMatching(/^pur_/) });
    expect(asked.approvalUrl).toBe(asked.problem!.approvalUrl);
    expect(asked.problem).toMatchObject({ reason: 'above_approval_threshold', intentId: asked.approvalId, purchase: { id: asked.approvalId, status: 'pending_approval' } });
    // Asked again before the owner answered: the same request, the same approval, still nothing held.
    const again = (await refusal(paying.fetch(`${shop.url}/report`), paying)).credit!;
    expect(again).toMatchObject({ code: 'approval_required', idempotencyKey: asked.idempotencyKey, approvalId: asked.approvalId });
    expect(await approvals()).toEqual([asked.approvalId]);
    expect(await holds()).toEqual([]);

    const approved = await world.api('POST', `/v1/payments/purchases/${asked.approvalId}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    const paid = await paying.fetch(`${shop.url}/report`);
    expect(paid.status).toBe(200);
    const holdId = decodeJwt((JSON.parse(Buffer.from(paying.sent.at(-1)!, 'base64').toString()) as PaymentPayload).payload.attestation as string).jti!;
    expect(await holds()).toEqual([holdId]);
    expect(await capturesOf(world, holdId)).toBe(1);
    const used = await world.api('GET', `/v1/payments/purchases/${asked.approvalId}`, { token: agent.ownerToken });
    expect(used.body).toMatchObject({ status: 'used', holdId });

    // Another payment, and this one made again, are new requests: each has its own key and its own approval.
    const other = (await refusal(paying.fetch(`${shop.url}/other`), paying)).credit!;
    const next = (await refusal(paying.fetch(`${shop.url}/report`), paying)).credit!;
    expect(new Set([asked.idempotencyKey, other.idempotencyKey, next.idempotencyKey]).size).toBe(3);
    expect(new Set([asked.approvalId, other.approvalId, next.approvalId]).size).toBe(3);
    expect(await holds()).toEqual([holdId]);
  });

  it('a declined payment is refused once with the owner\'s answer; the attempt after it asks the owner again with a new key', async () => {
    const agent = await fundedAgent();
    await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: uniqueKey('mandate'), body: { approvalAboveUc: '100000' } });
    const paying = payingAgent(world, agent.token);
    const asked = (await refusal(paying.fetch(`${shop.url}/report`), paying)).credit!;
    const declined = await world.api('POST', `/v1/payments/purchases/${asked.approvalId}/decline`, { token: agent.ownerToken, body: {} });
    expect(declined.status, JSON.stringify(declined.body)).toBe(200);
    const refused = (await refusal(paying.fetch(`${shop.url}/report`), paying)).credit!;
    expect(refused).toMatchObject({ code: 'conflict', status: 409, idempotencyKey: asked.idempotencyKey, approvalId: asked.approvalId, problem: { reason: 'purchase_declined' } });
    const askedAgain = (await refusal(paying.fetch(`${shop.url}/report`), paying)).credit!;
    expect(askedAgain.code).toBe('approval_required');
    expect(askedAgain.idempotencyKey).not.toBe(asked.idempotencyKey);
    expect(askedAgain.approvalId).not.toBe(asked.approvalId);
  });

  it('a server whose scheme names another gateway than its facilitator fails at start-up, before any agent pays', async () => {
    const misconfigured = new x402ResourceServer(creditFacilitator({ gatewayUrl: world.url, apiKey: merchant.apiKey })).register(
      CREDIT_NETWORK,
      new CreditSchemeServer({ gatewayUrl: 'https://gateway.example', merchantId: merchant.merchantId, offerId: merchant.offerId }),
    );
    await expect(misconfigured.initialize()).rejects.toThrow(`the facilitator speaks for ${world.url}, not https://gateway.example`);
  });

  it("a server whose key cannot capture, or is another merchant's, fails at start-up; one that cannot release starts with a warning (found from outside: it took holds it could not release)", async () => {
    // x402's initialize says it loaded no kind, the cause ours (and it logs the cause as a warning).
    const refusedFor = (reason: RegExp | string) => ({ message: 'Failed to initialize: no supported payment kinds loaded from any facilitator.', cause: expect.objectContaining({ message: expect.stringMatching(reason) }) });
    const readOnly = await seedMerchantKey(world, { scopes: ['offers:read'] });
    await expect(creditResourceServer({ gatewayUrl: world.url, merchantId: readOnly.merchantId, offerId: merchant.offerId, apiKey: readOnly.key }).initialize()).rejects.toMatchObject(
      refusedFor(/the API key lacks redemptions:capture: the gateway would refuse to verify or settle every payment/),
    );
    // An owner's session is a credential /v1/me answers, and no merchant key (found from outside: "gateway_unavailable").
    const ownerSession = await world.humanToken('x402-not-a-key@example.com');
    await expect(creditResourceServer(merchant.settings({ apiKey: ownerSession })).initialize()).rejects.toMatchObject(refusedFor(/^invalid_api_key: apiKey is not a merchant API key/));
    const elsewhere = await seedMerchantKey(world, { scopes: ['redemptions:capture', 'redemptions:release'] });
    await expect(creditResourceServer(merchant.settings({ apiKey: elsewhere.key })).initialize()).rejects.toMatchObject(refusedFor(`the API key is merchant ${elsewhere.merchantId}'s, not ${merchant.merchantId}'s`));
    const captureOnly = await seedMerchantKey(world, { scopes: ['redemptions:capture'] });
    const warnings: string[] = [];
    const listen = (warning: Error) => warnings.push(warning.message);
    process.on('warning', listen);
    try {
      await creditResourceServer({ gatewayUrl: world.url, merchantId: captureOnly.merchantId, offerId: merchant.offerId, apiKey: captureOnly.key }).initialize();
      await waitFor(() => warnings.length, { until: (n) => n > 0, what: 'the warning' });
    } finally {
      process.off('warning', listen);
    }
    expect(warnings).toEqual([expect.stringMatching(/^x402-credit: the API key lacks redemptions:release: the hold of a request that fails/)]);
    // The key this suite pays with has both, and names its merchant: it starts quietly.
    await creditResourceServer(merchant.settings()).initialize();
  });
});

describe('a route that cannot be sold', () => {
  const accepts = (price: string, extra?: Record<string, unknown>) => ({ scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, price, payTo: merchant.merchantId, ...(extra ? { extra } : {}) });
  /** The CreditError an attempt threw. */
  const thrown = (attempt: Promise<unknown>) => attempt.then(() => undefined, (error: unknown) => error as CreditError);

  it("is refused at start-up by verifyCreditRoutes, as the gateway has the merchant's offers: another merchant's, none of that id, inactive, priced below the route; and another merchant as payTo (found from outside: a 402 whose payment the gateway refused, a bare 500)", async () => {
    const other = await openX402Merchant(world);
    const created = await world.api('POST', `/v1/merchants/${merchant.merchantId}/offers`, {
      token: merchant.apiKey,
      key: uniqueKey('inactive-offer'),
      body: { name: 'Retired report', category: 'books', priceUc: '500000', holdLifetimeS: 900, active: false },
    });
    expect(created.status).toBe(201);
    const inactive = created.body.id as string;
    const fine = { 'GET /report': { accepts: accepts('$0.005') }, 'GET /cheaper': { accepts: accepts('0.1 credits') } };
    expect(await verifyCreditRoutes(fine, merchant.settings())).toBe(fine);
    const offerRoutes = {
      'GET /theirs': { accepts: accepts('$0.005', { offerId: other.offerId }) },
      'GET /none': { accepts: accepts('$0.005', { offerId: 'off_doesnotexist' }) },
      'GET /garbled': { accepts: accepts('$0.005', { offerId: 'not an offer' }) },
      'GET /retired': { accepts: accepts('$0.005', { offerId: inactive }) },
      'GET /dear': { accepts: accepts('$0.01') },
    };
    const notOurs = (offerId: string) => `offer ${offerId} is not one of merchant ${merchant.merchantId}'s offers (the gateway has none of that id for it)`;
    expect(await thrown(verifyCreditRoutes({ ...fine, ...offerRoutes }, merchant.settings()))).toEqual(
      new CreditError(
        'invalid_offer',
        [
          `route "GET /theirs": ${notOurs(other.offerId)}`,
          `route "GET /none": ${notOurs('off_doesnotexist')}`,
          `route "GET /garbled": ${notOurs('not an offer')}`,
          `route "GET /retired": offer ${inactive} is not active: the gateway sells nothing of it`,
          `route "GET /dear": the price, 1000000 µc, is more than offer ${merchant.offerId}'s price, 500000 µc, the most one payment of it may hold`,
        ].join('; '),
      ),
    );
    expect(await thrown(verifyCreditRoutes({ ...fine, 'GET /misdirected': { accepts: { ...accepts('$0.005'), payTo: other.merchantId } } }, merchant.settings()))).toEqual(
      new CreditError('invalid_pay_to', `route "GET /misdirected": payTo ${other.merchantId} is not this merchant (${merchant.merchantId}): the gateway settles a payment only with its payee's key`),
    );
    // A key without offers:read cannot check them: said so, never taken for a pass.
    const blind = await seedMerchantKey(world, { scopes: ['redemptions:capture', 'redemptions:release'] });
    const blindRoutes = { 'GET /report': { accepts: { ...accepts('$0.005'), payTo: blind.merchantId } } };
    expect(await thrown(verifyCreditRoutes(blindRoutes, { gatewayUrl: world.url, merchantId: blind.merchantId, offerId: 'off_any', apiKey: blind.key }))).toMatchObject({
      code: 'scope_required',
      status: 403,
      message: expect.stringMatching(/^scope_required: offer off_any could not be read to check it: .* 403 scope_required .*offers:read/),
    });
  });

  it('answers each request 502 naming it, behind @x402/express and @x402/hono, and asks no agent to pay (found from outside: the agent paid for an offer the gateway would not sell, or got a bare 500)', async () => {
    const other = await openX402Merchant(world);
    const agent = await fundedAgent();
    const before = await availableUc(agent);
    const reported: unknown[] = [];
    const onError = (error: unknown) => void reported.push(error);
    const notOurs = `offer ${other.offerId} is not one of merchant ${merchant.merchantId}'s offers (the gateway has none of that id for it)`;
    const misdirected = `payTo ${other.merchantId} is not this merchant (${merchant.merchantId}): the gateway settles a payment only with its payee's key`;
    const servers: Array<[PaidServer, string, string]> = [
      [await startExpressServer(merchant, creditResourceServer(merchant.settings({ offerId: other.offerId, onError }))), 'invalid_offer', notOurs],
      [await startHonoServer(merchant, creditResourceServer(merchant.settings({ offerId: other.offerId, onError }))), 'invalid_offer', notOurs],
      // The routes' payTo is the other merchant; the key and the scheme are this one's.
      [await startExpressServer(other, creditResourceServer(merchant.settings({ onError }))), 'invalid_pay_to', misdirected],
    ];
    try {
      for (const [server, code, words] of servers) {
        reported.length = 0;
        const paying = payingAgent(world, agent.token);
        const res = await paying.fetch(`${server.url}/report`);
        expect(res.status).toBe(502);
        expect(await res.json()).toEqual({ error: `this route is misconfigured: ${code}: ${words}` });
        expect(paying.sent).toEqual([]);
        expect(reported).toEqual([new CreditError(code, words)]);
        expect(server.runs.get('/report')).toBeUndefined();
      }
    } finally {
      await Promise.all(servers.map(([server]) => server.close()));
    }
    expect(await availableUc(agent)).toBe(before);
  });
});

describe('integration status', () => {
  it('/v1/integrations shows x402 enabled', async () => {
    const surface = await world.api('GET', '/v1/integrations?view=surface', { token: merchant.apiKey });
    expect(surface.status).toBe(200);
    expect(surface.body.payments.x402).toEqual({ enabled: true });
    const status = await world.api('GET', '/v1/integrations', { token: merchant.apiKey });
    expect(status.body.payments.x402).toBe('configured');
  });
});

// Last in the file: it rotates the gateway's signing key.
describe('a receipt of a key that began signing just now', () => {
  it("verifies at once, though this process fetched the gateway's key set a moment before (jose's cooldown counts from any fetch)", async () => {
    const agent = await fundedAgent();
    const res = await payingAgent(world, agent.token).fetch(`${shop.url}/report`);
    expect(res.status).toBe(200);
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!).extra!.receipt as string;
    expect(await verifyCreditReceipt(receipt, { gatewayUrl: world.url })).toMatchObject({ agentId: agent.id });
    // The same receipt spelled another way (its signature's last character within the bits base64url ignores) is refused.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const respelled = receipt.slice(0, -1) + alphabet[alphabet.indexOf(receipt.at(-1)!) ^ 1];
    await expect(verifyCreditReceipt(respelled, { gatewayUrl: world.url })).rejects.toMatchObject({ code: 'invalid_receipt', message: expect.stringContaining('each in its one spelling') });
    // A forged kid just before the rotation made this process fetch the key set: the new key's receipt must still verify
    // (found from outside in the merchant SDK, which kept the same rule: refused as a forgery for the next 30 s).
    const [header, payload, signature] = receipt.split('.') as [string, string, string];
    const forgedKid = `${Buffer.from(JSON.stringify({ ...decodeProtectedHeader(receipt), kid: 'forged-kid' })).toString('base64url')}.${payload}.${signature}`;
    expect(header).not.toBe(forgedKid.split('.')[0]);
    await expect(verifyCreditReceipt(forgedKid, { gatewayUrl: world.url })).rejects.toMatchObject({ code: 'invalid_receipt' });
    await rotateSigningKeys(world.gw.gateway.db, { nowS: world.gw.clock.nowS(), leadS: 0, retentionS: 3600 });
    await world.gw.gateway.signing.reload();
    // Signed on a gateway clock 5 s behind this process's: its iat falls before the forged kid's fetch, which must not
    // count as after the new key (CI failed here when the run took a second between the receipt and the forged kid).
    const claims = decodeJwt(receipt);
    const resigned = await world.gw.gateway.signing.sign({ ...claims, iat: claims.iat! - 5 }, 'receipt+jwt');
    expect(decodeProtectedHeader(resigned).kid).not.toBe(decodeProtectedHeader(receipt).kid);
    expect(await verifyCreditReceipt(resigned, { gatewayUrl: world.url })).toMatchObject({ agentId: agent.id });
    // A gateway whose keys cannot be read says so: an outage is no forgery (found from outside: invalid_receipt, "fetch failed").
    await expect(verifyCreditReceipt(resigned, { gatewayUrl: 'http://127.0.0.1:1' })).rejects.toMatchObject({
      code: 'gateway_unavailable',
      message: expect.stringContaining("the gateway's keys (http://127.0.0.1:1/.well-known/jwks.json) could not be read"),
    });
  });
});
