// The package on its own, as x402's SDK drives it, without a gateway: prices in exact microcredits, what the
// agent's scheme refuses before it asks the gateway for anything, what it sends when it asks, the
// requirements the merchant's scheme states, and single flight when a settle's answer is lost (the one case
// the end-to-end tests in test/x402/ cannot provoke against a real gateway).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { x402Client } from '@x402/core/client';
import { decodePaymentResponseHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { HTTPFacilitatorClient, x402ResourceServer, type FacilitatorClient } from '@x402/core/server';
import type { PaymentPayload, PaymentRequired, PaymentRequirements, SettleResponse, SupportedResponse, VerifyResponse } from '@x402/core/types';
import { paymentMiddleware, setSettlementOverrides } from '@x402/express';
import { fromJsonSchema, type JsonSchemaType } from '@modelcontextprotocol/server';
import express from 'express';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  checkCreditRoutes,
  CREDIT_NETWORK,
  CREDIT_SCHEME,
  CreditError,
  creditFacilitator,
  CreditSchemeClient,
  creditResourceServer,
  CreditSchemeServer,
  MCP_PAYMENT_META_KEY,
  paidTool,
  parseCreditPrice,
  settlementOverrideUc,
  type ToolResult,
  verifyCreditRoutes,
} from '@agent-credit-gateway/x402-credit';
import { onPostgres } from '../../../test/support/database.ts';

const GATEWAY = 'https://gateway.example.com';
const MERCHANT = 'mer_test';
const OFFER = 'off_test';

function requirements(overrides: Partial<PaymentRequirements> = {}, extra: Record<string, unknown> = {}): PaymentRequirements {
  return {
    scheme: CREDIT_SCHEME,
    network: CREDIT_NETWORK,
    asset: 'microcredit',
    amount: '500000',
    payTo: MERCHANT,
    maxTimeoutSeconds: 300,
    ...overrides,
    extra: { version: '1.0.0', authority: GATEWAY, offerId: OFFER, resource: 'https://api.shop.example/report', ...extra },
  };
}

/** A compact JWS-shaped token with these claims (unsigned: only the facilitator would verify it). */
function attestationWith(claims: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  return `${part({ alg: 'ES256', typ: 'x402-credit+jwt' })}.${part(claims)}.c2lnbmF0dXJl`;
}

/** A fetch that answers the authorize call from a script, and records every call. */
function scriptedFetch(answers: Array<(body: Record<string, unknown>) => Response | Error>) {
  const calls: Array<{ url: string; headers: Headers; body: Record<string, unknown> }> = [];
  const fetchFn = (async (input: string | URL | Request, init?: RequestInit) => {
    const body = JSON.parse(String(init?.body)) as Record<string, unknown>;
    calls.push({ url: String(input), headers: new Headers(init?.headers), body });
    const answer = answers[Math.min(calls.length - 1, answers.length - 1)]!(body);
    if (answer instanceof Error) throw answer;
    return answer;
  }) as typeof fetch;
  return { fetchFn, calls };
}

const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
const granted = (body: Record<string, unknown>) => json(201, { attestation: attestationWith({ jti: `hold_${String(body.idempotencyKey)}`, exp: 4_000_000_000 }), redemption: { id: 'hold_1' } });
/** The gateway's 402 approval_required for an authorize above the mandate's threshold (its purchase approval named after the key). */
const asksApproval = (body: Record<string, unknown>) => {
  const id = `pur_${String(body.idempotencyKey)}`;
  return json(402, {
    type: `${GATEWAY}/docs/errors#approval_required`,
    title: 'The owner must approve this before it runs',
    status: 402,
    code: 'approval_required',
    detail: 'the purchase of 500000 µc is above the agent\'s approval threshold of 100000 µc: its owner must approve it. Nothing was taken; once the owner approved, retry with the same Idempotency-Key and the retry takes the hold.',
    approvalUrl: `${GATEWAY}/payments/purchases/${id}`,
    reason: 'above_approval_threshold',
    intentId: id,
    intent: { offerId: OFFER, agentId: 'agt_1', amountUc: '500000' },
    purchase: { id, status: 'pending_approval' },
    instructions: 'Ask your owner to approve the purchase.',
  });
};
/** The CreditError a payment attempt was refused with. */
async function refusalOf(attempt: Promise<unknown>): Promise<CreditError> {
  const error = await attempt.then(
    () => undefined,
    (failure: unknown) => failure,
  );
  expect(error).toBeInstanceOf(CreditError);
  return error as CreditError;
}
const neverCalled = (() => {
  throw new Error('the client must not call the gateway here');
}) as unknown as typeof fetch;

/** The merchant's offers as the scripted gateway has them: OFFER at one credit, and what a test adds (a status: its refusal of the read). */
type ScriptedOffers = Record<string, { priceUc: string; active: boolean } | number>;
const OFFERS: ScriptedOffers = { [OFFER]: { priceUc: '1000000', active: true } };

/** The scripted gateway's answer to a read of one of MERCHANT's offers (`reads` records the offers read), or undefined for another path. */
function offerAnswer(path: string, offers: ScriptedOffers, reads: string[]): Response | undefined {
  const offerId = new RegExp(`^/v1/merchants/${MERCHANT}/offers/([^/]+)$`).exec(path)?.[1];
  if (offerId === undefined) return undefined;
  reads.push(offerId);
  const offer = offers[offerId];
  if (typeof offer === 'number') return json(offer, { status: offer, code: offer === 403 ? 'scope_required' : 'service_unavailable', detail: offer === 403 ? 'the API key needs scope offers:read' : 'down' });
  if (offer === undefined) return json(404, { status: 404, code: 'not_found', detail: `no offer ${offerId}` });
  return json(200, { id: offerId, merchantId: MERCHANT, name: 'Report', category: 'books', holdLifetimeS: 900, refundWindowS: 0, createdAt: 1, updatedAt: 1, ...offer });
}

/**
 * The gateway as a merchant's resource server meets it, scripted: the key is the merchant's, its offers `offers`,
 * every payment verifies (or `verify` says otherwise), every settle succeeds at what it asks; `settles` records the
 * amounts settled, `offerReads` the offers read.
 */
function scriptedGateway(verify: () => Record<string, unknown> = () => ({ isValid: true, payer: 'agt_1' }), offers: ScriptedOffers = OFFERS) {
  const settles: string[] = [];
  const offerReads: string[] = [];
  const fetchFn = (async (input: string | URL | Request, init: RequestInit = {}) => {
    const path = new URL(String(input)).pathname;
    if (path === '/x402/supported') return json(200, { kinds: [{ x402Version: 2, scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, extra: { authority: GATEWAY, asset: 'microcredit', version: '1.0.0' } }], extensions: [], signers: {} });
    if (path === '/v1/me') return json(200, { merchant: { merchantId: MERCHANT, keyId: 'key_1', scopes: ['offers:read', 'redemptions:capture', 'redemptions:release'] } });
    if (path === '/x402/verify') return json(200, verify());
    const offer = offerAnswer(path, offers, offerReads);
    if (offer) return offer;
    const { paymentPayload, paymentRequirements } = JSON.parse(String(init.body)) as { paymentPayload: PaymentPayload; paymentRequirements: PaymentRequirements };
    const { amount } = paymentRequirements;
    settles.push(amount);
    const jti = JSON.parse(Buffer.from((paymentPayload.payload.attestation as string).split('.')[1]!, 'base64url').toString()).jti as string;
    return json(200, { success: true, transaction: '', network: CREDIT_NETWORK, payer: 'agt_1', amount, extra: { commitmentId: jti, chargedAmount: amount, receipt: null } });
  }) as typeof fetch;
  return { fetchFn, settles, offerReads };
}

// What is tested is the package, not a database: once is enough.
describe.skipIf(onPostgres())('prices in microcredits', () => {
  it('reads dollar, credit and microcredit prices exactly', () => {
    const cases: Array<[Parameters<typeof parseCreditPrice>[0], string]> = [
      ['$0.005', '500000'],
      ['0.005', '500000'],
      ['0.005 USD', '500000'],
      ['$ 1', '100000000'],
      ['$0.00000001', '1'],
      ['0.5 credits', '500000'],
      ['1 credit', '1000000'],
      ['0.000001 credits', '1'],
      [0.005, '500000'],
      [1e-7, '10'],
      [12.34, '1234000000'],
      [{ amount: '500000', asset: 'microcredit' }, '500000'],
    ];
    for (const [price, amount] of cases) expect(parseCreditPrice(price), JSON.stringify(price)).toEqual({ amount, asset: 'microcredit' });
  });

  it('refuses what it cannot state exactly, never rounding', () => {
    const refused: Array<Parameters<typeof parseCreditPrice>[0]> = ['$0.000000001', 0.1 + 0.2, '$0', 0, -1, Number.NaN, 'abc', '$1e3', '0.5 credits USD', '$0.5 credits', { amount: '5', asset: 'USD' }, { amount: '1.5', asset: 'microcredit' }, { amount: '99999999999999999999', asset: 'microcredit' }];
    for (const price of refused) expect(() => parseCreditPrice(price), JSON.stringify(price)).toThrow(CreditError);
  });

  it("refuses a price above the gateway's largest amount (18 digits of microcredits) when it is configured", () => {
    expect(parseCreditPrice('$9999999999.99999999').amount).toBe('999999999999999999');
    expect(parseCreditPrice({ amount: '999999999999999999', asset: 'microcredit' }).amount).toBe('999999999999999999');
    const refused: Array<Parameters<typeof parseCreditPrice>[0]> = ['$10000000000', '1000000000000 credits', 1e10, { amount: '1000000000000000000', asset: 'microcredit' }];
    for (const price of refused) expect(() => parseCreditPrice(price), JSON.stringify(price)).toThrow(expect.objectContaining({ code: 'invalid_price' }));
    expect(() => new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', maxAmountUc: 10n ** 18n })).toThrow(expect.objectContaining({ code: 'invalid_price' }));
  });

  it('any amount of microcredits written in dollars or in credits reads back as itself', () => {
    const amountUc = fc.bigInt({ min: 1n, max: 10n ** 17n });
    fc.assert(
      fc.property(amountUc, (uc) => {
        const dollars = `$${uc / 100_000_000n}.${(uc % 100_000_000n).toString().padStart(8, '0')}`;
        const credits = `${uc / 1_000_000n}.${(uc % 1_000_000n).toString().padStart(6, '0')} credits`;
        return parseCreditPrice(dollars).amount === uc.toString() && parseCreditPrice(credits).amount === uc.toString();
      }),
    );
  });
});

describe.skipIf(onPostgres())("the agent's scheme", () => {
  it('refuses requirements it must not pay, before it asks the gateway', async () => {
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: neverCalled, maxAmountUc: 1_000_000n });
    const refusals: Array<[PaymentRequirements, string]> = [
      [requirements({}, { authority: 'https://credits.evil.example' }), 'authority_not_trusted'],
      [requirements({}, { authority: 'https://gateway.example.com.evil.example' }), 'authority_not_trusted'],
      [requirements({}, { authority: 'not a url' }), 'authority_not_trusted'],
      [requirements({}, { version: '2.0.0' }), 'unsupported_requirements'],
      [requirements({ asset: 'USD' }), 'unsupported_requirements'],
      [requirements({ amount: '0.5' }), 'unsupported_requirements'],
      [requirements({}, { resource: undefined }), 'unsupported_requirements'],
      [requirements({ scheme: 'exact' }), 'unsupported_requirements'],
      [requirements({ amount: '1000001' }), 'amount_over_limit'],
      [requirements({ amount: '1000000000000000000' }), 'unsupported_requirements'],
    ];
    for (const [req, code] of refusals) await expect(scheme.createPaymentPayload(2, req), JSON.stringify(req)).rejects.toMatchObject({ code });
    await expect(scheme.createPaymentPayload(2, requirements(), { maxAmountPerPayment: '499999' })).rejects.toMatchObject({ code: 'amount_over_limit' });
  });

  it("asks with a fresh idempotency key per payment, the same one on each retry, and the requirements' terms", async () => {
    const { fetchFn, calls } = scriptedFetch([() => new TypeError('fetch failed'), () => json(503, { status: 503, code: 'unavailable' }), granted, granted]);
    const scheme = new CreditSchemeClient({ gatewayUrl: `${GATEWAY}/`, credential: async () => 'fresh-token', fetch: fetchFn, backoffMs: () => 1 });
    const first = await scheme.createPaymentPayload(2, requirements());
    expect(first.payload.type).toBe('consume');
    expect(calls).toHaveLength(3);
    expect(calls[0]!.url).toBe(`${GATEWAY}/x402/authorize`);
    expect(calls[0]!.headers.get('authorization')).toBe('Bearer fresh-token');
    expect(calls[0]!.body).toEqual({
      amount: '500000',
      asset: 'microcredit',
      resource: 'https://api.shop.example/report',
      payTo: MERCHANT,
      offerId: OFFER,
      maxTimeoutSeconds: 300,
      idempotencyKey: calls[0]!.headers.get('idempotency-key'),
    });
    expect(new Set(calls.map((call) => call.body.idempotencyKey)).size).toBe(1);
    await scheme.createPaymentPayload(2, requirements());
    expect(calls[3]!.body.idempotencyKey).not.toBe(calls[0]!.body.idempotencyKey);
  });

  it("surfaces the gateway's refusal as a typed CreditError with the draft's code, without retrying it", async () => {
    const problem = { type: 'about:blank', title: 'Payment Required', status: 402, code: 'insufficient_credit', error: 'insufficient_credits', detail: 'the agent has 100000 µc' };
    const { fetchFn, calls } = scriptedFetch([() => json(402, problem)]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn });
    const error = await scheme.createPaymentPayload(2, requirements()).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(CreditError);
    expect(error).toMatchObject({ code: 'insufficient_credits', status: 402, problem: { ...problem } });
    expect((error as Error).message).toMatch(/^insufficient_credits: /);
    expect(calls).toHaveLength(1);
  });

  it("after its attempts at a gateway that keeps failing, throws gateway_unavailable with the last answer's status, problem and Retry-After; no Retry-After means backoff, not no wait", async () => {
    const busy = (status: number, code: string, retryAfter?: string) => () =>
      new Response(JSON.stringify({ status, code, title: 'busy' }), { status, headers: { 'content-type': 'application/problem+json', ...(retryAfter === undefined ? {} : { 'retry-after': retryAfter }) } });
    const { fetchFn, calls } = scriptedFetch([busy(503, 'unavailable'), busy(429, 'rate_limited', '0'), busy(503, 'storage_unavailable', '0')]);
    const backoffs: number[] = [];
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn, attemptsMax: 3, backoffMs: (attempt) => (backoffs.push(attempt), 1) });
    const error = await refusalOf(scheme.createPaymentPayload(2, requirements()));
    expect(error).toMatchObject({ code: 'gateway_unavailable', status: 503, problem: { code: 'storage_unavailable' }, retryAfterS: 0, idempotencyKey: calls[0]!.body.idempotencyKey });
    expect(error.message).toMatch(/^gateway_unavailable: the gateway kept failing; the last answer: storage_unavailable: busy$/);
    expect(calls).toHaveLength(3);
    // Only the first wait was the client's own: the others were the gateway's Retry-After of 0.
    expect(backoffs).toEqual([0]);
  });

  it("presents again a payment whose merchant could not learn its outcome from the gateway, instead of paying twice (found from outside: a capture whose answers were lost was charged, and @x402/fetch's retry paid again)", async () => {
    const { fetchFn, calls } = scriptedFetch([granted]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn });
    const client = new x402Client().register(CREDIT_NETWORK, scheme);
    const required: PaymentRequired = { x402Version: 2, resource: { url: 'https://api.shop.example/report' }, accepts: [requirements()] };
    const first = await client.createPaymentPayload(required);
    const answer = (settleResponse?: SettleResponse, paymentRequired?: PaymentRequired) =>
      client.handlePaymentResponse({ paymentPayload: first, requirements: first.accepted, ...(settleResponse ? { settleResponse } : {}), ...(paymentRequired ? { paymentRequired } : {}) });
    const failedSettle = (errorReason: string): SettleResponse => ({ success: false, errorReason, transaction: '', network: CREDIT_NETWORK });
    // The merchant's settle ran out of attempts (the capture may have happened): the transport is asked to retry once, and it goes with the same attestation.
    expect(await answer(failedSettle("gateway_unavailable: no answer from the gateway's /x402/settle: fetch failed"))).toEqual({ recovered: true });
    expect((await client.createPaymentPayload(required)).payload).toEqual(first.payload);
    // Undecided again: kept again (a transport retries once per call; the caller's next attempt presents it).
    expect(await answer(failedSettle('gateway_unavailable: kept failing'))).toEqual({ recovered: true });
    expect((await client.createPaymentPayload(required)).payload).toEqual(first.payload);
    // The merchant's verify could not reach the gateway, or the same payment was still being served: the same.
    expect(await answer(undefined, { ...required, error: 'payment_in_progress: the same payment is being served' })).toEqual({ recovered: true });
    expect((await client.createPaymentPayload(required)).payload).toEqual(first.payload);
    expect(calls).toHaveLength(1);
    // Served at last: forgotten, and the next purchase is a new payment.
    expect(await answer({ success: true, transaction: '', network: CREDIT_NETWORK, payer: 'agt_1' })).toBeUndefined();
    const next = await client.createPaymentPayload(required);
    expect(calls).toHaveLength(2);
    expect(next.payload).not.toEqual(first.payload);
    // A refusal for good is forgotten at once; so is an undecided one whose attestation is out of its window (past
    // its exp by more than the merchant keeps an open payment).
    const refused = await answer(undefined, { ...required, error: 'already_settled' });
    expect(refused).toBeUndefined();
    const expiring = new CreditSchemeClient({
      gatewayUrl: GATEWAY,
      credential: 'token',
      fetch: scriptedFetch([(body) => json(201, { attestation: attestationWith({ jti: `hold_${String(body.idempotencyKey)}`, exp: Math.floor(Date.now() / 1000) - 26 }), redemption: { id: 'hold_2' } })]).fetchFn,
    });
    const shortClient = new x402Client().register(CREDIT_NETWORK, expiring);
    const short = await shortClient.createPaymentPayload(required);
    expect(await shortClient.handlePaymentResponse({ paymentPayload: short, requirements: short.accepted, settleResponse: failedSettle('gateway_unavailable: x') })).toBeUndefined();
    expect((await shortClient.createPaymentPayload(required)).payload).not.toEqual(short.payload);
  });

  it("keeps each undecided payment of two requests at once, and presents each once (found from outside: the second replaced the first, whose capture then served nothing)", async () => {
    const { fetchFn, calls } = scriptedFetch([granted]);
    const client = new x402Client().register(CREDIT_NETWORK, new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn }));
    const required: PaymentRequired = { x402Version: 2, resource: { url: 'https://api.shop.example/report' }, accepts: [requirements()] };
    const [one, two] = await Promise.all([client.createPaymentPayload(required), client.createPaymentPayload(required)]);
    expect(one.payload).not.toEqual(two.payload);
    const undecided: SettleResponse = { success: false, errorReason: 'gateway_unavailable: no answer', transaction: '', network: CREDIT_NETWORK };
    for (const payment of [one, two]) await client.handlePaymentResponse({ paymentPayload: payment, requirements: payment.accepted, settleResponse: undecided });
    const presented = [await client.createPaymentPayload(required), await client.createPaymentPayload(required)];
    expect(presented.map((payment) => payment.payload)).toEqual([one.payload, two.payload]);
    expect(calls).toHaveLength(2);
    // Both served: the next attempt is a new payment.
    for (const payment of presented) await client.handlePaymentResponse({ paymentPayload: payment, requirements: payment.accepted, settleResponse: { success: true, transaction: '', network: CREDIT_NETWORK } });
    await client.createPaymentPayload(required);
    expect(calls).toHaveLength(3);
  });

  it("pays anew for a request the merchant says the kept payment did not pay for, and keeps that payment for its own request (found from outside: forgotten, and its request paid again)", async () => {
    const { fetchFn, calls } = scriptedFetch([granted]);
    const client = new x402Client().register(CREDIT_NETWORK, new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn }));
    const required: PaymentRequired = { x402Version: 2, resource: { url: 'https://api.shop.example/report' }, accepts: [requirements()] };
    const first = await client.createPaymentPayload(required);
    await client.handlePaymentResponse({ paymentPayload: first, requirements: first.accepted, settleResponse: { success: false, errorReason: 'gateway_unavailable: no answer', transaction: '', network: CREDIT_NETWORK } });
    const other = await client.createPaymentPayload(required);
    expect(other.payload).toEqual(first.payload);
    expect(await client.handlePaymentResponse({ paymentPayload: other, requirements: other.accepted, paymentRequired: { ...required, error: 'paid_for_another_request' } })).toEqual({ recovered: true });
    // The retry of that request pays anew; the next attempt presents the kept payment again, for its own request.
    expect((await client.createPaymentPayload(required)).payload).not.toEqual(first.payload);
    expect(calls).toHaveLength(2);
    expect((await client.createPaymentPayload(required)).payload).toEqual(first.payload);
  });

  it("keeps an undecided payment through an attempt that got no answer, or an answer that says nothing of the payment (found from outside: lost with an attempt whose connection failed, and a proxy's 429, and paid again)", async () => {
    const { fetchFn, calls } = scriptedFetch([granted]);
    const client = new x402Client().register(CREDIT_NETWORK, new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn }));
    const required: PaymentRequired = { x402Version: 2, resource: { url: 'https://api.shop.example/report' }, accepts: [requirements()] };
    const first = await client.createPaymentPayload(required);
    await client.handlePaymentResponse({ paymentPayload: first, requirements: first.accepted, settleResponse: { success: false, errorReason: 'gateway_unavailable: no answer', transaction: '', network: CREDIT_NETWORK } });
    // Presented by an attempt whose connection failed (no answer, no hook): the next attempt presents it again.
    expect((await client.createPaymentPayload(required)).payload).toEqual(first.payload);
    const again = await client.createPaymentPayload(required);
    expect(again.payload).toEqual(first.payload);
    // An answer without a payment answer (a proxy's 429, the handler's own failure): still kept.
    await client.handlePaymentResponse({ paymentPayload: again, requirements: again.accepted });
    expect((await client.createPaymentPayload(required)).payload).toEqual(first.payload);
    expect(calls).toHaveLength(1);
  });

  it('refuses a redirect of the authorization at once, never following it with the token', async () => {
    const { fetchFn, calls } = scriptedFetch([() => new Response(null, { status: 307, headers: { location: 'https://elsewhere.example/x402/authorize' } })]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn });
    const error = await refusalOf(scheme.createPaymentPayload(2, requirements()));
    expect(error).toMatchObject({ code: 'unexpected_redirect', status: 307 });
    expect(error.message).toMatch(/307 to https:\/\/elsewhere\.example\/x402\/authorize/);
    expect(calls).toHaveLength(1);
  });

  it('reuses the key of a payment waiting for its approval in the next attempt at the same payment, and exposes it, the approval page and id', async () => {
    const { fetchFn, calls } = scriptedFetch([asksApproval, asksApproval, granted, asksApproval]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn });
    const first = await refusalOf(scheme.createPaymentPayload(2, requirements()));
    const key = calls[0]!.body.idempotencyKey;
    expect(first).toMatchObject({ code: 'approval_required', status: 402, idempotencyKey: key, approvalId: `pur_${String(key)}`, approvalUrl: `${GATEWAY}/payments/purchases/pur_${String(key)}` });
    expect(await refusalOf(scheme.createPaymentPayload(2, requirements()))).toMatchObject({ code: 'approval_required', idempotencyKey: key });
    // The owner approved: the next attempt at the same payment takes the hold with the same key.
    await scheme.createPaymentPayload(2, requirements());
    expect(calls.map((call) => call.body.idempotencyKey)).toEqual([key, key, key]);
    expect(calls.map((call) => call.headers.get('idempotency-key'))).toEqual([key, key, key]);
    // The hold is taken: the same payment again is a new payment, with a new key.
    await refusalOf(scheme.createPaymentPayload(2, requirements()));
    expect(calls[3]!.body.idempotencyKey).not.toBe(key);
  });

  it('names the same payment by everything the gateway fingerprints: another resource, amount, offer, merchant or window has its own key', async () => {
    const { fetchFn, calls } = scriptedFetch([asksApproval]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn });
    const variants = [
      requirements(),
      requirements({}, { resource: 'https://api.shop.example/other' }),
      requirements({ amount: '400000' }),
      requirements({}, { offerId: 'off_other' }),
      requirements({ payTo: 'mer_other' }),
      requirements({ maxTimeoutSeconds: 60 }),
    ];
    for (const variant of variants) await refusalOf(scheme.createPaymentPayload(2, variant));
    for (const variant of variants) await refusalOf(scheme.createPaymentPayload(2, variant));
    const keys = calls.map((call) => call.body.idempotencyKey);
    expect(new Set(keys.slice(0, 6)).size).toBe(6);
    expect(keys.slice(6)).toEqual(keys.slice(0, 6));
  });

  it('forgets a payment once the gateway refused it for good (declined, expired), and one past its lifetime or the oldest past its bound', async () => {
    const declined = (body: Record<string, unknown>) =>
      json(409, { status: 409, code: 'conflict', reason: 'purchase_declined', approvalId: `pur_${String(body.idempotencyKey)}`, detail: 'the owner declined this purchase. Nothing was taken.' });
    let nowMs = 0;
    const { fetchFn, calls } = scriptedFetch([asksApproval, declined, asksApproval]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn, pendingPaymentsMax: 2, pendingPaymentLifetimeMs: 60_000, nowMs: () => nowMs });
    const keyOf = (n: number) => calls[n]!.body.idempotencyKey;
    await refusalOf(scheme.createPaymentPayload(2, requirements()));
    expect(await refusalOf(scheme.createPaymentPayload(2, requirements()))).toMatchObject({ code: 'conflict', idempotencyKey: keyOf(0), approvalId: `pur_${String(keyOf(0))}` });
    expect(keyOf(1)).toBe(keyOf(0));
    // Declined: the next attempt is a new request, asking the owner again.
    await refusalOf(scheme.createPaymentPayload(2, requirements()));
    expect(keyOf(2)).not.toBe(keyOf(0));
    // Past its lifetime, a key is not sent again.
    nowMs += 60_000;
    await refusalOf(scheme.createPaymentPayload(2, requirements()));
    expect(keyOf(3)).not.toBe(keyOf(2));
    // At most two are kept: a third payment waiting makes the client forget the oldest.
    await refusalOf(scheme.createPaymentPayload(2, requirements({}, { resource: 'https://api.shop.example/b' })));
    await refusalOf(scheme.createPaymentPayload(2, requirements({}, { resource: 'https://api.shop.example/c' })));
    await refusalOf(scheme.createPaymentPayload(2, requirements({}, { resource: 'https://api.shop.example/c' })));
    await refusalOf(scheme.createPaymentPayload(2, requirements({}, { resource: 'https://api.shop.example/b' })));
    await refusalOf(scheme.createPaymentPayload(2, requirements()));
    expect(keyOf(6)).toBe(keyOf(5));
    expect(keyOf(7)).toBe(keyOf(4));
    expect(keyOf(8)).not.toBe(keyOf(3));
  });

  it('keeps the key of a payment whose answer never came (the hold may be taken), so the next attempt replays it instead of holding twice', async () => {
    const { fetchFn, calls } = scriptedFetch([() => new TypeError('fetch failed'), () => new TypeError('fetch failed'), granted]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn, attemptsMax: 2, backoffMs: () => 1 });
    expect(await refusalOf(scheme.createPaymentPayload(2, requirements()))).toMatchObject({ code: 'gateway_unavailable', idempotencyKey: calls[0]!.body.idempotencyKey });
    await scheme.createPaymentPayload(2, requirements());
    expect(calls.map((call) => call.body.idempotencyKey)).toEqual([calls[0]!.body.idempotencyKey, calls[0]!.body.idempotencyKey, calls[0]!.body.idempotencyKey]);
  });

  it('leaves a key the caller gives to the caller: authorize with an explicit key neither reuses nor remembers one', async () => {
    const { fetchFn, calls } = scriptedFetch([asksApproval]);
    const scheme = new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn });
    const request = { amount: '500000', asset: 'microcredit', resource: 'https://api.shop.example/report', payTo: MERCHANT, offerId: OFFER };
    expect(await refusalOf(scheme.authorize(request, 'my-key-1'))).toMatchObject({ code: 'approval_required', idempotencyKey: 'my-key-1' });
    await refusalOf(scheme.authorize(request));
    expect(calls[1]!.body.idempotencyKey).not.toBe('my-key-1');
  });

  it("plugs into x402Client, whose default spend cap ($1) applies to credit: 100 credits a payment", async () => {
    const { fetchFn } = scriptedFetch([granted]);
    const client = new x402Client().register(CREDIT_NETWORK, new CreditSchemeClient({ gatewayUrl: GATEWAY, credential: 'token', fetch: fetchFn }));
    const required = (amount: string): PaymentRequired => ({ x402Version: 2, resource: { url: 'https://api.shop.example/report' }, accepts: [requirements({ amount })] });
    expect((await client.createPaymentPayload(required('100000000'))).accepted.amount).toBe('100000000');
    await expect(client.createPaymentPayload(required('100000001'))).rejects.toThrow(/spendControls/);
  });
});

describe.skipIf(onPostgres())("the merchant's scheme", () => {
  const supported = { x402Version: 2, scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, extra: { authority: GATEWAY, asset: 'microcredit', version: '1.0.0' } };

  it('states payTo, the binding version, the authority and the offer; a route may name its own offer', async () => {
    const scheme = new CreditSchemeServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER });
    const base = { scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, asset: 'microcredit', amount: '500000', payTo: MERCHANT, maxTimeoutSeconds: 300, extra: {} };
    expect(await scheme.enhancePaymentRequirements(base, supported)).toEqual({ ...base, extra: { version: '1.0.0', authority: GATEWAY, offerId: OFFER } });
    expect((await scheme.enhancePaymentRequirements({ ...base, extra: { offerId: 'off_other' } }, supported)).extra.offerId).toBe('off_other');
    await expect(scheme.enhancePaymentRequirements({ ...base, payTo: 'mer_other' }, supported)).rejects.toThrow(/not this merchant/);
    await expect(new CreditSchemeServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT }).enhancePaymentRequirements(base, supported)).rejects.toThrow(/no offer/);
    expect(scheme.validateFacilitatorSupport(CREDIT_NETWORK, supported)).toBeUndefined();
    expect(scheme.validateFacilitatorSupport(CREDIT_NETWORK, { ...supported, extra: { authority: 'https://elsewhere.example' } })).toMatch(/elsewhere/);
    expect(scheme.getAssetDecimals('microcredit')).toBe(8);
  });

  it("states the resource from the request's URL, on the configured origin when the Host header is not to be trusted", async () => {
    const context = (url: string) => ({ requirements: [requirements({}, { resource: undefined })], resourceInfo: { url }, paymentRequiredResponse: {} as PaymentRequired });
    const plain = new CreditSchemeServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER });
    expect((await plain.enrichPaymentRequiredResponse(context('http://evil.example/report?q=1')))[0]!.extra.resource).toBe('http://evil.example/report?q=1');
    const pinned = new CreditSchemeServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, resourceOrigin: 'https://api.shop.example' });
    expect((await pinned.enrichPaymentRequiredResponse(context('http://evil.example/report?q=1')))[0]!.extra.resource).toBe('https://api.shop.example/report?q=1');
    expect((await pinned.enrichPaymentRequiredResponse(context('mcp://tool/analyse')))[0]!.extra.resource).toBe('mcp://tool/analyse');
  });
});

describe.skipIf(onPostgres())("a route's price, checked where the merchant states it", () => {
  let server: http.Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));
  const option = (price: unknown) => ({ scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, price: price as string, payTo: MERCHANT });

  it('checkCreditRoutes refuses at start-up every route whose price is finer than one microcredit or not one at all, naming the route and the price (found from outside: the first request answered 500)', () => {
    const routes = {
      'GET /report': { accepts: option('$0.005') },
      'GET /cheap': { accepts: [option('$0.000000001')] },
      'POST /batch': { accepts: [option('0.5 credits'), option({ amount: '1.5', asset: 'microcredit' })] },
      'GET /free': { accepts: option('$0') },
      // Another scheme's price, and a price x402 computes per request, are not this check's.
      'GET /evm': { accepts: { scheme: 'exact', network: 'eip155:8453' as const, price: '$0.000000001', payTo: '0xabc' } },
      'GET /dynamic': { accepts: { ...option('$0.005'), price: () => '$0.000000001' } },
    };
    const refusal = (() => {
      try {
        checkCreditRoutes(routes);
      } catch (error) {
        return error;
      }
    })();
    expect(refusal).toBeInstanceOf(CreditError);
    expect(refusal).toMatchObject({ code: 'invalid_price' });
    expect((refusal as CreditError).message).toBe(
      'invalid_price: ' +
        'route "GET /cheap": $0.000000001 is finer than one microcredit: a price must be a whole number of microcredits (1 µc = $0.00000001); ' +
        'route "POST /batch": the price amount must be a non-negative integer of microcredits of at most 18 digits, got 1.5; ' +
        'route "GET /free": a price must be more than 0, got $0',
    );
    const fine = { 'GET /report': { accepts: option('$0.005') }, 'GET /dynamic': routes['GET /dynamic'] };
    expect(checkCreditRoutes(fine)).toBe(fine);
    // One route config for every path, as x402 takes it.
    expect(() => checkCreditRoutes({ accepts: option(1e-9) })).toThrow('invalid_price: route "*": 1e-9 is finer than one microcredit: a price must be a whole number of microcredits (1 µc = $0.00000001)');
  });

  it("paidTool refuses such a price when the tool is wrapped, naming the tool", () => {
    const resourceServer = creditResourceServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, apiKey: 'sk_test_key', fetch: neverCalled });
    expect(() => paidTool(resourceServer, { name: 'analyse', price: '$0.000000001', payTo: MERCHANT }, async () => ({ content: [] }))).toThrow(
      new CreditError('invalid_price', 'tool "analyse": $0.000000001 is finer than one microcredit: a price must be a whole number of microcredits (1 µc = $0.00000001)'),
    );
  });

  it('a route whose price escaped the check answers 502 naming the misconfiguration, not 500, and the merchant is told', async () => {
    const { fetchFn } = scriptedGateway();
    const reported: unknown[] = [];
    const app = express();
    app.use(paymentMiddleware({ 'GET /cheap': { accepts: option('$0.000000001') } }, creditResourceServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, apiKey: 'sk_test_key', fetch: fetchFn, onError: (error) => reported.push(error) })));
    app.get('/cheap', (_req, res) => void res.json({ served: true }));
    server = http.createServer(app);
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const answer = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/cheap`);
    const detail = '$0.000000001 is finer than one microcredit: a price must be a whole number of microcredits (1 µc = $0.00000001)';
    expect(answer.status).toBe(502);
    expect(await answer.json()).toEqual({ error: `this route is misconfigured: invalid_price: ${detail}` });
    expect(reported).toEqual([new CreditError('invalid_price', detail)]);
  });
});

describe.skipIf(onPostgres())("a route's payTo and offer, checked where the merchant states it", () => {
  let server: http.Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));
  const option = (price: string, extra?: Record<string, unknown>) => ({ scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, price, payTo: MERCHANT, ...(extra ? { extra } : {}) });
  /** The merchant's offers: OFFER at one credit, one inactive, one at a tenth of a credit. */
  const offers: ScriptedOffers = { ...OFFERS, off_inactive: { priceUc: '1000000', active: false }, off_tenth: { priceUc: '100000', active: true } };
  const settingsFor = (fetchFn: typeof fetch) => ({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, apiKey: 'sk_test_key', fetch: fetchFn });
  /** The refusal an attempt threw. */
  const thrown = (attempt: Promise<unknown>) => attempt.then(() => undefined, (error: unknown) => error as CreditError);
  const unsold = {
    'GET /elsewhere': ['invalid_pay_to', `payTo mer_other is not this merchant (${MERCHANT}): the gateway settles a payment only with its payee's key`],
    'GET /unknown': ['invalid_offer', `offer off_unknown is not one of merchant ${MERCHANT}'s offers (the gateway has none of that id for it)`],
    'GET /inactive': ['invalid_offer', 'offer off_inactive is not active: the gateway sells nothing of it'],
    'GET /dear': ['invalid_offer', `the price, 2000000 µc, is more than offer ${OFFER}'s price, 1000000 µc, the most one payment of it may hold`],
    'GET /tenth': ['invalid_offer', "the price, 500000 µc, is more than offer off_tenth's price, 100000 µc, the most one payment of it may hold"],
  } as const;
  const unsoldRoutes = {
    'GET /elsewhere': { accepts: { ...option('$0.005'), payTo: 'mer_other' } },
    'GET /unknown': { accepts: option('$0.005', { offerId: 'off_unknown' }) },
    'GET /inactive': { accepts: [option('$0.005', { offerId: 'off_inactive' })] },
    'GET /dear': { accepts: option('$0.02') },
    'GET /tenth': { accepts: option('0.5 credits', { offerId: 'off_tenth' }) },
  };

  it('verifyCreditRoutes refuses at start-up what each request would: the prices, then the payTo, then the offers as the gateway has them, naming every route refused (found from outside: a bare 500, or a 402 no agent could pay)', async () => {
    const gateway = scriptedGateway(undefined, offers);
    const merchant = settingsFor(gateway.fetchFn);
    const fine = {
      'GET /report': { accepts: option('$0.005') },
      'POST /report': { accepts: [option('$0.01'), option('$0.001', { offerId: 'off_tenth' })] },
      // A price x402 computes per request is compared when x402 asks for it; another scheme's is not this check's.
      'GET /dynamic': { accepts: { ...option('$0.005'), price: () => '$1' } },
      'GET /evm': { accepts: { scheme: 'exact', network: 'eip155:8453' as const, price: '$1', payTo: '0xabc' } },
    };
    expect(await verifyCreditRoutes(fine, merchant)).toBe(fine);
    // One read of each offer, however many routes sell it.
    expect(gateway.offerReads.sort()).toEqual(['off_tenth', OFFER]);
    // The prices first, as checkCreditRoutes has them.
    expect(await thrown(verifyCreditRoutes({ ...unsoldRoutes, 'GET /cheap': { accepts: option('$0.000000001') } }, merchant))).toEqual(
      new CreditError('invalid_price', 'route "GET /cheap": $0.000000001 is finer than one microcredit: a price must be a whole number of microcredits (1 µc = $0.00000001)'),
    );
    const { 'GET /elsewhere': elsewhere, ...offerRoutes } = unsoldRoutes;
    const words = (routes: object) => Object.keys(routes).map((pattern) => `route "${pattern}": ${unsold[pattern as keyof typeof unsold][1]}`).join('; ');
    expect(await thrown(verifyCreditRoutes({ ...fine, 'GET /elsewhere': elsewhere }, merchant))).toEqual(new CreditError('invalid_pay_to', words({ 'GET /elsewhere': elsewhere })));
    expect(await thrown(verifyCreditRoutes({ ...fine, ...offerRoutes }, merchant))).toEqual(new CreditError('invalid_offer', words(offerRoutes)));
    expect(await thrown(verifyCreditRoutes(fine, { ...merchant, offerId: undefined }))).toEqual(
      new CreditError('invalid_offer', ['GET /report', 'POST /report', 'GET /dynamic'].map((pattern) => `route "${pattern}": no offer: pass offerId to the scheme, or extra: { offerId } in the payment option`).join('; ')),
    );
    // An offer the key may not read was not checked: said so, not taken for sold.
    const unread = await thrown(verifyCreditRoutes(fine, settingsFor(scriptedGateway(undefined, { ...offers, [OFFER]: 403 }).fetchFn)));
    expect(unread).toMatchObject({
      code: 'scope_required',
      status: 403,
      message: `scope_required: offer ${OFFER} could not be read to check it: the gateway's /v1/merchants/${MERCHANT}/offers/${OFFER} refused the call: 403 scope_required the API key needs scope offers:read`,
    });
  });

  it("a route that cannot be sold answers 502 naming it at each request, never a 402 no agent can pay, and the merchant is told; its offer is read once a minute, not at each request (found from outside: a bare 500, or a 402 whose payment the gateway refused)", async () => {
    const start = async (settings: Parameters<typeof creditResourceServer>[0], routes: object) => {
      const app = express();
      app.use(paymentMiddleware(routes as Parameters<typeof paymentMiddleware>[0], creditResourceServer(settings)));
      app.use((_req, res) => void res.json({ served: true }));
      server = http.createServer(app);
      await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
      const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      return (path: string) => fetch(`${origin}${path}`);
    };
    const gateway = scriptedGateway(undefined, offers);
    const reported: unknown[] = [];
    const get = await start({ ...settingsFor(gateway.fetchFn), onError: (error) => reported.push(error) }, { 'GET /report': { accepts: option('$0.005') }, ...unsoldRoutes });
    for (const [route, [code, words]] of Object.entries(unsold)) {
      reported.length = 0;
      const answer = await get(route.slice('GET '.length));
      expect(answer.status, route).toBe(502);
      expect(await answer.json(), route).toEqual({ error: `this route is misconfigured: ${code}: ${words}` });
      expect(reported, route).toEqual([new CreditError(code, words)]);
    }
    for (let n = 0; n < 3; n++) expect((await get('/report')).status).toBe(402);
    expect(gateway.offerReads.filter((offerId) => offerId === OFFER)).toEqual([OFFER]);
    await new Promise<void>((resolve) => server!.close(() => resolve()));

    // No offer at all.
    reported.length = 0;
    const noOffer = await start({ ...settingsFor(scriptedGateway().fetchFn), offerId: undefined, onError: (error) => reported.push(error) }, { 'GET /report': { accepts: option('$0.005') } });
    const answer = await noOffer('/report');
    expect(answer.status).toBe(502);
    expect(await answer.json()).toEqual({ error: 'this route is misconfigured: invalid_offer: no offer: pass offerId to the scheme, or extra: { offerId } in the payment option' });
    expect(reported).toEqual([new CreditError('invalid_offer', 'no offer: pass offerId to the scheme, or extra: { offerId } in the payment option')]);
    await new Promise<void>((resolve) => server!.close(() => resolve()));

    // An offer the key may not read is left to the gateway, which judges it when the agent pays: asked for, as before.
    const unreadable = await start(settingsFor(scriptedGateway(undefined, { [OFFER]: 403 }).fetchFn), { 'GET /report': { accepts: option('$0.005') } });
    expect((await unreadable('/report')).status).toBe(402);
  });
});

describe.skipIf(onPostgres())('a paid tool that serves nothing charges nothing', () => {
  const TICKER_JSON = { type: 'object', properties: { ticker: { type: 'string', minLength: 1 } }, required: ['ticker'] } as JsonSchemaType;
  let jti = 0;
  /** A payment for the `analyse` tool, presented as MCP SDK 2.x hands it to the tool's callback (its context's `_meta`). */
  const paidContext = () => {
    const attestation = attestationWith({ jti: `hold_${++jti}`, exp: Math.floor(Date.now() / 1000) + 300 });
    const payment = { x402Version: 2, accepted: requirements({}, { resource: 'mcp://tool/analyse' }), payload: { type: 'consume', attestation } };
    return { mcpReq: { _meta: { [MCP_PAYMENT_META_KEY]: payment } } };
  };
  /** The `analyse` tool on a resource server whose gateway verifies as `verify` says; `runs` holds the arguments each run got. */
  function analyseTool(verify?: () => Record<string, unknown>) {
    const gateway = scriptedGateway(verify);
    const runs: unknown[] = [];
    const resourceServer = creditResourceServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, apiKey: 'sk_test_key', fetch: gateway.fetchFn });
    const tool = paidTool(resourceServer, { name: 'analyse', price: '$0.005', payTo: MERCHANT, inputSchema: fromJsonSchema<{ ticker: string }>(TICKER_JSON) }, async ({ ticker }) => {
      runs.push(ticker);
      return { content: [{ type: 'text', text: `${ticker}: strong` }] };
    });
    return { tool, runs, settles: gateway.settles };
  }

  it('a paid call whose arguments the input schema refuses is answered as the MCP SDK answers it, the tool does not run, and its hold is released (it stayed held until its deadline)', async () => {
    const { tool, runs, settles } = analyseTool();
    const refused = (await tool({ ticker: 42 } as unknown as { ticker: string }, paidContext())) as ToolResult;
    expect(refused).toEqual({ isError: true, content: [{ type: 'text', text: expect.stringMatching(/^Input validation error: Invalid arguments for tool analyse: .*ticker/) }] });
    expect(runs).toEqual([]);
    expect(settles).toEqual(['0']);
    // Missing arguments too.
    settles.length = 0;
    expect(((await tool(undefined as unknown as { ticker: string }, paidContext())) as ToolResult).isError).toBe(true);
    expect(settles).toEqual(['0']);
    // Arguments it reads are served and charged.
    settles.length = 0;
    const served = (await tool({ ticker: 'ACME' }, paidContext())) as ToolResult;
    expect(served.content).toEqual([{ type: 'text', text: 'ACME: strong' }]);
    expect(runs).toEqual(['ACME']);
    expect(settles).toEqual(['500000']);
  });

  it('an unpaid call whose arguments the schema refuses is refused as such, not asked to pay', async () => {
    const { tool, settles } = analyseTool();
    const refused = (await tool({ ticker: '' }, {})) as ToolResult;
    expect(refused).toMatchObject({ isError: true, content: [{ text: expect.stringMatching(/^Input validation error: Invalid arguments for tool analyse: /) }] });
    expect(refused.structuredContent).toBeUndefined();
    expect(((await tool({ ticker: 'ACME' }, {})) as ToolResult).structuredContent).toMatchObject({ x402Version: 2, accepts: [{ amount: '500000' }] });
    expect(settles).toEqual([]);
  });

  it('is registered with a schema that lists the same JSON Schema and lets every call through to the wrapper, which reads it after the payment', async () => {
    const { tool } = analyseTool();
    const listed = tool.inputSchema['~standard'];
    expect(listed.jsonSchema.input({ target: 'draft-2020-12' })).toEqual(TICKER_JSON);
    expect(await listed.validate({ ticker: 42 })).toEqual({ value: { ticker: 42 } });
    const resourceServer = creditResourceServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, apiKey: 'sk_test_key', fetch: neverCalled });
    const schemaWithoutJson = { '~standard': { version: 1, vendor: 'other', validate: (value: unknown) => ({ value }) } };
    expect(() => paidTool(resourceServer, { name: 'analyse', price: '$0.005', payTo: MERCHANT, inputSchema: schemaWithoutJson as never }, async () => ({ content: [] }))).toThrow(
      /tool "analyse": inputSchema must be a Standard Schema with its JSON Schema/,
    );
  });

  it('a payment presented past its window has its hold released; one whose hold the gateway already expired has nothing to release', async () => {
    const expired = analyseTool(() => ({ isValid: false, invalidReason: 'attestation_expired', invalidMessage: 'the attestation expired: authorize again and retry', payer: 'agt_1' }));
    const refused = (await expired.tool({ ticker: 'ACME' }, paidContext())) as ToolResult;
    expect(refused.structuredContent).toMatchObject({ error: 'attestation_expired' });
    expect(expired.runs).toEqual([]);
    expect(expired.settles).toEqual(['0']);
    const lapsed = analyseTool(() => ({ isValid: false, invalidReason: 'hold_expired', invalidMessage: 'the hold expired', payer: 'agt_1' }));
    expect(((await lapsed.tool({ ticker: 'ACME' }, paidContext())) as ToolResult).structuredContent).toMatchObject({ error: 'hold_expired' });
    expect(lapsed.settles).toEqual([]);
  });
});

describe.skipIf(onPostgres())("the merchant's facilitator client", () => {
  /** A fetch answering from a script, recording each call's URL, init and body text. */
  function facilitatorFetch(answers: Array<() => Response | Error>) {
    const calls: Array<{ url: string; init: RequestInit; body: string | undefined; atMs: number }> = [];
    const fetchFn = (async (input: string | URL | Request, init: RequestInit = {}) => {
      calls.push({ url: String(input), init, body: init.body === undefined ? undefined : String(init.body), atMs: Date.now() });
      const answer = answers[Math.min(calls.length - 1, answers.length - 1)]!();
      if (answer instanceof Error) throw answer;
      return answer;
    }) as typeof fetch;
    return { fetchFn, calls };
  }
  const settled = () => json(200, { success: true, transaction: '', network: CREDIT_NETWORK, payer: 'agt_1', amount: '500000' });
  const problemAnswer = (status: number, code: string, retryAfter?: string) => () =>
    new Response(JSON.stringify({ type: `${GATEWAY}/docs/errors#${code}`, title: 'Not now', status, code }), {
      status,
      headers: { 'content-type': 'application/problem+json', ...(retryAfter === undefined ? {} : { 'retry-after': retryAfter }) },
    });
  const payment = { x402Version: 2, accepted: requirements(), payload: { type: 'consume', attestation: attestationWith({ jti: 'hold_1' }) } } as unknown as PaymentPayload;

  it("retries a settle with no answer, 503 and 429 as the same settle, honouring the gateway's Retry-After, with the key and no redirect (found from outside: x402's client tried once)", async () => {
    const { fetchFn, calls } = facilitatorFetch([() => new TypeError('fetch failed'), problemAnswer(503, 'storage_unavailable', '1'), problemAnswer(429, 'rate_limited', '0'), settled]);
    const backoffs: number[] = [];
    const facilitator = creditFacilitator({ gatewayUrl: `${GATEWAY}/`, apiKey: 'sk_test_key', fetch: fetchFn, backoffMs: (attempt) => (backoffs.push(attempt), 1) });
    expect(facilitator).toBeInstanceOf(HTTPFacilitatorClient);
    await expect(facilitator.settle(payment, requirements())).resolves.toMatchObject({ success: true, payer: 'agt_1' });
    expect(calls).toHaveLength(4);
    for (const call of calls) {
      expect(call.url).toBe(`${GATEWAY}/x402/settle`);
      expect(call.init).toMatchObject({ method: 'POST', redirect: 'manual' });
      expect(new Headers(call.init.headers).get('authorization')).toBe('Bearer sk_test_key');
      expect(call.body).toBe(calls[0]!.body);
    }
    expect(JSON.parse(calls[0]!.body!)).toEqual({ x402Version: 2, paymentPayload: payment, paymentRequirements: requirements() });
    // The 503's Retry-After of 1 s was waited; the client's own backoff only after the lost answer.
    expect(calls[2]!.atMs - calls[1]!.atMs).toBeGreaterThanOrEqual(990);
    expect(backoffs).toEqual([0]);
  });

  it('retries a verify too, and reads the facilitator\'s kinds with the key', async () => {
    const verified = facilitatorFetch([problemAnswer(503, 'storage_unavailable', '0'), () => json(200, { isValid: true, payer: 'agt_1' })]);
    await expect(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: verified.fetchFn }).verify(payment, requirements())).resolves.toEqual({ isValid: true, payer: 'agt_1' });
    expect(verified.calls.map((call) => call.url)).toEqual([`${GATEWAY}/x402/verify`, `${GATEWAY}/x402/verify`]);
    const supported = facilitatorFetch([
      () => json(200, { kinds: [{ x402Version: 2, scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, extra: { authority: GATEWAY } }], extensions: [], signers: {} }),
      () => json(200, { merchant: { merchantId: 'mer_1', keyId: 'key_1', scopes: ['redemptions:capture', 'redemptions:release'] } }),
    ]);
    await expect(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', merchantId: 'mer_1', fetch: supported.fetchFn }).getSupported()).resolves.toMatchObject({ kinds: [{ scheme: CREDIT_SCHEME }] });
    expect(supported.calls[0]).toMatchObject({ url: `${GATEWAY}/x402/supported`, init: { method: 'GET' }, body: undefined });
    expect(new Headers(supported.calls[0]!.init.headers).get('authorization')).toBe('Bearer key');
    // And the key itself, once, at start-up: its merchant and scopes (test/x402/e2e.test.ts has the refusals).
    expect(supported.calls[1]).toMatchObject({ url: `${GATEWAY}/v1/me`, init: { method: 'GET' } });
    expect(new Headers(supported.calls[1]!.init.headers).get('authorization')).toBe('Bearer key');
  });

  it("throws gateway_unavailable after its attempts, with the last answer's status, problem and Retry-After", async () => {
    const { fetchFn, calls } = facilitatorFetch([problemAnswer(429, 'rate_limited', '0')]);
    const error = await refusalOf(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: fetchFn, attemptsMax: 3 }).settle(payment, requirements()));
    expect(error).toMatchObject({ code: 'gateway_unavailable', status: 429, problem: { code: 'rate_limited' }, retryAfterS: 0 });
    expect(error.message).toBe("gateway_unavailable: the gateway's /x402/settle kept failing after 3 attempt(s); the last answer: 429 rate_limited Not now");
    expect(calls).toHaveLength(3);
    const unreachable = facilitatorFetch([() => new TypeError('fetch failed')]);
    const noAnswer = await refusalOf(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: unreachable.fetchFn, attemptsMax: 2, backoffMs: () => 1 }).settle(payment, requirements()));
    expect(noAnswer).toMatchObject({ code: 'gateway_unavailable', status: undefined });
    expect(noAnswer.message).toMatch(/no answer from the gateway's \/x402\/settle: fetch failed/);
    expect(unreachable.calls).toHaveLength(2);
  });

  it("keeps its retries within a window (30 s by default), so the agent is not kept waiting minutes; reports the gateway's Retry-After as it said it", async () => {
    const { fetchFn, calls } = facilitatorFetch([problemAnswer(503, 'storage_unavailable', '120')]);
    const startedMs = Date.now();
    const error = await refusalOf(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: fetchFn }).settle(payment, requirements()));
    // The next wait (30 s, the most honoured) would end past the window: no second attempt.
    expect(Date.now() - startedMs).toBeLessThan(5_000);
    expect(calls).toHaveLength(1);
    expect(error).toMatchObject({ code: 'gateway_unavailable', status: 503, retryAfterS: 120 });
    const short = facilitatorFetch([problemAnswer(503, 'storage_unavailable', '1'), settled]);
    await expect(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: short.fetchFn, retryWindowMs: 500 }).settle(payment, requirements())).rejects.toMatchObject({ code: 'gateway_unavailable' });
    expect(short.calls).toHaveLength(1);
  });

  it('refuses a redirect at once, never following it with the key', async () => {
    const { fetchFn, calls } = facilitatorFetch([() => new Response(null, { status: 308, headers: { location: 'http://elsewhere.example/x402/settle' } })]);
    const error = await refusalOf(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: fetchFn }).settle(payment, requirements()));
    expect(error).toMatchObject({ code: 'unexpected_redirect', status: 308 });
    expect(error.message).toMatch(/308 to http:\/\/elsewhere\.example\/x402\/settle/);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.init.redirect).toBe('manual');
  });

  it("refuses at once what a retry cannot mend: the gateway's refusal with its code, a 200 that is not a settle answer", async () => {
    const refused = facilitatorFetch([problemAnswer(401, 'unauthorized')]);
    expect(await refusalOf(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: refused.fetchFn }).settle(payment, requirements()))).toMatchObject({
      code: 'unauthorized',
      status: 401,
      problem: { code: 'unauthorized' },
    });
    expect(refused.calls).toHaveLength(1);
    const page = facilitatorFetch([() => new Response('<html>captive portal</html>', { status: 200, headers: { 'content-type': 'text/html' } })]);
    const error = await refusalOf(creditFacilitator({ gatewayUrl: GATEWAY, apiKey: 'key', fetch: page.fetchFn }).settle(payment, requirements()));
    expect(error).toMatchObject({ code: 'gateway_unavailable' });
    expect(error.message).toMatch(/answered 200 with a body that is not a SettleResponse: <html>captive portal/);
    expect(page.calls).toHaveLength(1);
    expect(() => creditFacilitator({ gatewayUrl: GATEWAY, apiKey: '' })).toThrow(TypeError);
  });
});

describe.skipIf(onPostgres())('single flight', () => {
  let server: http.Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

  const supported = async (): Promise<SupportedResponse> => ({
    kinds: [{ x402Version: 2, scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, extra: { authority: GATEWAY, asset: 'microcredit', version: '1.0.0' } }],
    extensions: [],
    signers: {},
  });
  const settled: SettleResponse = { success: true, transaction: '', network: CREDIT_NETWORK, payer: 'agt_1', amount: '500000', extra: { commitmentId: 'hold_1', chargedAmount: '500000', receipt: null } };

  /** An Express server selling /report through `facilitator`; `runs()` counts the handler's runs. */
  async function paidServer(facilitator: FacilitatorClient): Promise<{
    url: string;
    runs: () => number;
    send: (payment: PaymentPayload, init?: { path?: string; body?: unknown }) => Promise<Response>;
    payment: (attestation: string, path?: string) => PaymentPayload;
  }> {
    const resourceServer = new x402ResourceServer(facilitator).register(CREDIT_NETWORK, new CreditSchemeServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, facilitator }));
    let runs = 0;
    const app = express();
    const accepts = { scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, price: '$0.005', payTo: MERCHANT };
    // The body parsed before the payment middleware, as x402's README has it, so the middleware sees it.
    app.use(express.json());
    // As Express 4's body parsers leave it: `{}` on a body of a type they did not read, unmarked (`_body`).
    app.use((req, _res, next) => {
      req.body ??= {};
      next();
    });
    app.use(paymentMiddleware({ 'GET /report': { accepts }, 'POST /report': { accepts }, 'GET /plain': { accepts }, 'POST /echo': { accepts } }, resourceServer));
    app.get('/report', (_req, res) => void res.json({ report: 'quarterly', run: ++runs }));
    app.post('/report', (req, res) => {
      const text = (req.body as { text?: string }).text;
      if (text === 'fail') return void res.status(400).json({ error: 'refused', run: ++runs });
      res.json({ report: text, run: ++runs });
    });
    app.post('/echo', express.text(), (req, res) => void res.json({ echoed: req.body, run: ++runs }));
    app.get('/plain', (_req, res) => void res.type('text/plain').send(`plain ${++runs}`));
    server = http.createServer(app);
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const url = `${origin}/report`;
    return {
      url,
      runs: () => runs,
      send: (payment, init = {}) =>
        fetch(`${origin}${init.path ?? '/report'}`, {
          method: init.body === undefined ? 'GET' : 'POST',
          headers: {
            'payment-signature': encodePaymentSignatureHeader(payment),
            ...(init.body === undefined ? {} : { 'content-type': typeof init.body === 'string' ? 'text/plain' : 'application/json' }),
          },
          body: init.body === undefined ? undefined : typeof init.body === 'string' ? init.body : JSON.stringify(init.body),
        }),
      payment: (attestation, path = '/report') => ({ x402Version: 2, accepted: { ...requirements(), extra: { ...requirements().extra, resource: `${origin}${path}` } }, payload: { type: 'consume', attestation } }),
    };
  }

  it("a forged token naming a payment's jti neither blocks the real one nor, once it is served, gets its answer", async () => {
    const exp = Math.floor(Date.now() / 1000) + 300;
    const genuine = attestationWith({ jti: 'hold_1', exp });
    const forged = `${genuine.split('.').slice(0, 2).join('.')}.Zm9yZ2Vk`;
    const facilitator: FacilitatorClient = {
      getSupported: supported,
      // The gateway takes a while to refuse the forgery, which arrives first.
      verify: async (payment): Promise<VerifyResponse> => {
        if (payment.payload.attestation !== forged) return { isValid: true, payer: 'agt_1' };
        await new Promise((resolve) => setTimeout(resolve, 150));
        return { isValid: false, invalidReason: 'attestation_invalid' };
      },
      settle: async () => settled,
    };
    const shop = await paidServer(facilitator);
    const forgedFirst = shop.send(shop.payment(forged));
    await new Promise((resolve) => setTimeout(resolve, 30));
    const [refused, served] = await Promise.all([forgedFirst, shop.send(shop.payment(genuine))]);
    expect(refused.status).toBe(402);
    expect(served.status).toBe(200);
    const late = await shop.send(shop.payment(forged));
    expect(late.status).toBe(402);
    expect(JSON.parse(Buffer.from(late.headers.get('payment-required')!, 'base64').toString()).error).toBe('attestation_invalid');
    expect(shop.runs()).toBe(1);
  });

  it('keeps the response of a payment whose settle got no answer, and answers its repeat with it once the settle goes through', async () => {
    const settles: string[] = [];
    const facilitator: FacilitatorClient = {
      getSupported: supported,
      verify: async (): Promise<VerifyResponse> => ({ isValid: true, payer: 'agt_1' }),
      settle: async (_payload, req) => {
        settles.push(req.amount);
        if (settles.length === 1) throw new Error('socket hang up');
        return settled;
      },
    };
    const shop = await paidServer(facilitator);
    const payment = shop.payment(attestationWith({ jti: 'hold_1', exp: Math.floor(Date.now() / 1000) + 300 }));

    const lost = await shop.send(payment);
    expect(lost.status).toBe(402);
    const repeat = await shop.send(payment);
    expect(repeat.status).toBe(200);
    expect(await repeat.json()).toEqual({ report: 'quarterly', run: 1 });
    expect(decodePaymentResponseHeader(repeat.headers.get('payment-response')!)).toMatchObject({ success: true, extra: { commitmentId: 'hold_1' } });
    const third = await shop.send(payment);
    expect(await third.json()).toEqual({ report: 'quarterly', run: 1 });
    // The handler ran once; the gateway was asked to settle twice (the lost one and its retry), never a third time.
    expect(shop.runs()).toBe(1);
    expect(settles).toEqual(['500000', '500000']);
  });
  /**
   * A facilitator whose first settle captures but whose answer is lost, and whose later ones answer that capture; a
   * verify after it is refused (already_settled), as the gateway's. `settles` counts them.
   */
  function losingFirstSettle() {
    const settles: string[] = [];
    const facilitator: FacilitatorClient = {
      getSupported: supported,
      verify: async (): Promise<VerifyResponse> => (settles.length > 0 ? { isValid: false, invalidReason: 'already_settled' } : { isValid: true, payer: 'agt_1' }),
      settle: async (_payload, req) => {
        settles.push(req.amount);
        if (settles.length === 1) throw new Error('socket hang up');
        return settled;
      },
    };
    return { facilitator, settles };
  }

  it("answers a repeat with the kept answer only for the same request: another request under a payment that was never settled runs, and one that was served is refused (found from outside: a later POST got an earlier POST's answer)", async () => {
    const { facilitator, settles } = losingFirstSettle();
    const shop = await paidServer(facilitator);
    const payment = shop.payment(attestationWith({ jti: 'hold_1', exp: Math.floor(Date.now() / 1000) + 300 }));
    const lost = await shop.send(payment, { body: { text: 'transfer 5 to alice' } });
    expect(lost.status).toBe(402);
    // The agent got nothing for the payment: its next request under it runs, and settles (the gateway answers the first capture).
    const other = await shop.send(payment, { body: { text: 'hello world' } });
    expect(other.status).toBe(200);
    expect(await other.json()).toEqual({ report: 'hello world', run: 2 });
    expect(decodePaymentResponseHeader(other.headers.get('payment-response')!)).toMatchObject({ success: true });
    // Served now: the same request again gets its answer; any other is refused, never given it.
    const same = await shop.send(payment, { body: { text: 'hello world' } });
    expect(await same.json()).toEqual({ report: 'hello world', run: 2 });
    const first = await shop.send(payment, { body: { text: 'transfer 5 to alice' } });
    expect(first.status).toBe(402);
    expect(JSON.parse(Buffer.from(first.headers.get('payment-required')!, 'base64').toString()).error).toBe('paid_for_another_request');
    const members = await shop.send(payment, { body: { text: 'hello world', extra: 1 } });
    expect(members.status).toBe(402);
    expect(shop.runs()).toBe(2);
    expect(settles).toEqual(['500000', '500000']);
  });

  it('runs again the repeat of a payment never settled whose answer could not be kept (not JSON or HTML), and charges once (found from outside: refused already_settled, and the agent paid again)', async () => {
    const { facilitator, settles } = losingFirstSettle();
    const shop = await paidServer(facilitator);
    const payment = shop.payment(attestationWith({ jti: 'hold_1', exp: Math.floor(Date.now() / 1000) + 300 }), '/plain');
    expect((await shop.send(payment, { path: '/plain' })).status).toBe(402);
    const repeat = await shop.send(payment, { path: '/plain' });
    expect(repeat.status).toBe(200);
    expect(await repeat.text()).toBe('plain 2');
    expect(settles).toEqual(['500000', '500000']);
    // Served: it cannot be replayed, and is not run a third time.
    const third = await shop.send(payment, { path: '/plain' });
    expect(third.status).toBe(402);
    expect(shop.runs()).toBe(2);
  });
  it('lets one request at a time take up a payment never settled: the same request and another at once get one answer between them (found from outside: both got one)', async () => {
    const { facilitator, settles } = losingFirstSettle();
    const slowSettle = facilitator.settle.bind(facilitator);
    facilitator.settle = async (payload, req) => {
      const answer = await slowSettle(payload, req);
      await new Promise((resolve) => setTimeout(resolve, 150));
      return answer;
    };
    const shop = await paidServer(facilitator);
    const payment = shop.payment(attestationWith({ jti: 'hold_1', exp: Math.floor(Date.now() / 1000) + 300 }));
    expect((await shop.send(payment, { body: { text: 'a' } })).status).toBe(402);
    const answers = await Promise.all([shop.send(payment, { body: { text: 'a' } }), shop.send(payment, { body: { text: 'b' } })]);
    expect(answers.map((answer) => answer.status).sort()).toEqual([200, 402]);
    const refused = answers.find((answer) => answer.status === 402)!;
    expect(JSON.parse(Buffer.from(refused.headers.get('payment-required')!, 'base64').toString()).error).toBe('paid_for_another_request');
    expect(settles).toHaveLength(2);
  });
  it("never takes a body no parser read for another: Express 4's `{}` for an unread type is not the body (found from outside: two 2-byte text bodies were one request)", async () => {
    const { facilitator, settles } = losingFirstSettle();
    const shop = await paidServer(facilitator);
    const payment = shop.payment(attestationWith({ jti: 'hold_1', exp: Math.floor(Date.now() / 1000) + 300 }), '/echo');
    expect((await shop.send(payment, { path: '/echo', body: 'no' })).status).toBe(402);
    const other = await shop.send(payment, { path: '/echo', body: 'ok' });
    expect(other.status).toBe(200);
    expect(await other.json()).toEqual({ echoed: 'ok', run: 2 });
    expect(settles).toHaveLength(2);
  });

  it("leaves a payment never settled open when the request that took it up fails in its handler, and releases nothing (found from outside: it was dropped, its release refused as captured, and the agent paid again)", async () => {
    const { facilitator, settles } = losingFirstSettle();
    const shop = await paidServer(facilitator);
    const payment = shop.payment(attestationWith({ jti: 'hold_1', exp: Math.floor(Date.now() / 1000) + 300 }));
    expect((await shop.send(payment, { body: { text: 'a' } })).status).toBe(402);
    const failed = await shop.send(payment, { body: { text: 'fail' } });
    expect(failed.status).toBe(400);
    const next = await shop.send(payment, { body: { text: 'b' } });
    expect(next.status).toBe(200);
    expect(await next.json()).toEqual({ report: 'b', run: 3 });
    // The lost settle, then the one that served b: no release (amount 0) in between.
    expect(settles).toEqual(['500000', '500000']);
  });
});

describe.skipIf(onPostgres())('settlement overrides', () => {
  let server: http.Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

  it('reads the forms x402 settles exactly, and refuses the rest with invalid_price, never rounding', () => {
    const exact: Array<[string, string]> = [
      ['$0.003', '300000'],
      ['$0.00500000000', '500000'],
      ['$0.00000001', '1'],
      ['$0', '0'],
      ['60%', '300000'],
      ['33.33%', '166650'],
      ['0%', '0'],
      ['300000', '300000'],
      ['0', '0'],
    ];
    for (const [override, amountUc] of exact) expect(settlementOverrideUc(override, '500000'), override).toBe(amountUc);
    const finer: Array<[string, string]> = [
      ['$0.0000000001', '500000'],
      ['$0.004999999999', '500000'],
      ['$0.0000001234', '500000'],
      ['50%', '7'],
    ];
    for (const [override, priceUc] of finer) {
      expect(() => settlementOverrideUc(override, priceUc), override).toThrow(
        new CreditError('invalid_price', `${override}${override.endsWith('%') ? ` of ${priceUc} µc` : ''} is finer than one microcredit: a settlement override must be a whole number of microcredits (1 µc = $0.00000001)`),
      );
    }
    // A bare decimal is dollars as a price, but x402 passes it on as µc: neither reading is safe, so it is refused.
    for (const override of ['0.00000019', '12.5', '1e3', '0.005', '$ 0.003', '0.003 USD', '33.333%', '-1', '']) {
      expect(() => settlementOverrideUc(override, '500000'), override).toThrow(/^invalid_price: cannot read the settlement override .*: dollars with a "\$" \("\$0\.003"\), a share of the price \("60%"\) or an integer of microcredits \("300000"\)$/);
    }
  });

  it("refuses before the settle an override x402 would round, or read as microcredits, and releases the hold: the agent gets 402, the merchant the CreditError (found from outside, bb118: $0.0000000001 settled 0, the request served free)", async () => {
    const settles: string[] = [];
    let jti = 0;
    // The gateway, scripted: the key is the merchant's, every payment verifies, every settle succeeds at what it asks.
    const fetchFn = (async (input: string | URL | Request, init: RequestInit = {}) => {
      const path = new URL(String(input)).pathname;
      if (path === '/x402/supported') return json(200, { kinds: [{ x402Version: 2, scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, extra: { authority: GATEWAY, asset: 'microcredit', version: '1.0.0' } }], extensions: [], signers: {} });
      if (path === '/v1/me') return json(200, { merchant: { merchantId: MERCHANT, keyId: 'key_1', scopes: ['redemptions:capture', 'redemptions:release'] } });
      if (path === '/x402/verify') return json(200, { isValid: true, payer: 'agt_1' });
      const offer = offerAnswer(path, OFFERS, []);
      if (offer) return offer;
      const amount = (JSON.parse(String(init.body)) as { paymentRequirements: PaymentRequirements }).paymentRequirements.amount;
      settles.push(amount);
      return json(200, { success: true, transaction: '', network: CREDIT_NETWORK, payer: 'agt_1', amount, extra: { commitmentId: `hold_${jti}`, chargedAmount: amount, receipt: null } });
    }) as typeof fetch;
    const reported: unknown[] = [];
    const settleFailures: string[] = [];
    const resourceServer = creditResourceServer({ gatewayUrl: GATEWAY, merchantId: MERCHANT, offerId: OFFER, apiKey: 'sk_test_key', fetch: fetchFn, onError: (error) => reported.push(error) });
    resourceServer.onSettleFailure(async ({ error }) => void settleFailures.push(error.message));
    const app = express();
    app.use(paymentMiddleware({ 'GET /report': { accepts: { scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, price: '$0.005', payTo: MERCHANT } } }, resourceServer));
    app.get('/report', (req, res) => {
      setSettlementOverrides(res, { amount: req.get('x-override')! });
      res.json({ report: 'quarterly' });
    });
    server = http.createServer(app);
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/report`;
    const pay = (override: string) => {
      const payment = { x402Version: 2, accepted: requirements({}, { resource: url }), payload: { type: 'consume', attestation: attestationWith({ jti: `hold_${++jti}`, exp: Math.floor(Date.now() / 1000) + 300 }) } };
      return fetch(url, { headers: { 'payment-signature': encodePaymentSignatureHeader(payment as PaymentPayload), 'x-override': override } });
    };

    for (const [override, amountUc] of [['$0.003', '300000'], ['60%', '300000'], ['250000', '250000']] as const) {
      settles.length = 0;
      const served = await pay(override);
      expect(served.status, override).toBe(200);
      expect(settles, override).toEqual([amountUc]);
    }
    const refusals: Array<[string, string]> = [
      ['$0.0000000001', '$0.0000000001 is finer than one microcredit: a settlement override must be a whole number of microcredits (1 µc = $0.00000001)'],
      ['$0.004999999999', '$0.004999999999 is finer than one microcredit: a settlement override must be a whole number of microcredits (1 µc = $0.00000001)'],
      ['$0.0000001234', '$0.0000001234 is finer than one microcredit: a settlement override must be a whole number of microcredits (1 µc = $0.00000001)'],
      ['0.00000019', 'cannot read the settlement override "0.00000019": dollars with a "$" ("$0.003"), a share of the price ("60%") or an integer of microcredits ("300000")'],
      ['12.5', 'cannot read the settlement override "12.5": dollars with a "$" ("$0.003"), a share of the price ("60%") or an integer of microcredits ("300000")'],
    ];
    for (const [override, detail] of refusals) {
      settles.length = 0;
      reported.length = 0;
      settleFailures.length = 0;
      const refused = await pay(override);
      expect(refused.status, override).toBe(402);
      expect(decodePaymentResponseHeader(refused.headers.get('payment-response')!), override).toMatchObject({ success: false, errorReason: 'invalid_price', errorMessage: detail, network: CREDIT_NETWORK });
      // Nothing was settled at what x402 made of it ("0", 499999, 12, the text itself): the hold was released.
      expect(settles, override).toEqual(['0']);
      expect(reported, override).toEqual([new CreditError('invalid_price', detail)]);
      expect(settleFailures, override).toEqual([`invalid_price: ${detail}`]);
    }
  });
});
