// The gateway as the x402 facilitator for agent credit, driven through @x402/core 2.27's own
// HTTPFacilitatorClient (supported, verify, settle) and the credit binding's POST /x402/authorize, on the real
// database: each refusal its own reason, settle exactly once per jti (on two instances too), and the ledger's
// invariants after all of it.
import { HTTPFacilitatorClient } from '@x402/core/http';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { createRemoteJWKSet, decodeJwt, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey } from '../../src/identity/api-keys.ts';
import { grant, openShop, type Shop } from '../support/ledger-fixture.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});

afterAll(async () => {
  await world?.close();
});

type Agent = { id: string; token: string; ownerToken: string };

/** The facilitator client a merchant's resource server builds: the gateway's /x402 and its API key. */
function facilitator(key = shop.key, url = world.url): HTTPFacilitatorClient {
  return new HTTPFacilitatorClient({
    url: `${url}/x402`,
    createAuthHeaders: async () => {
      const headers = { Authorization: `Bearer ${key}` };
      return { verify: headers, settle: headers, supported: headers };
    },
  });
}

async function fundedAgent(creditUc = 10_000_000n): Promise<Agent> {
  const n = ++counter;
  const agent = await world.createAgent(`x402-${n}@example.com`, `x402-agent-${n}`, { allowedCategories: ['books', 'music'] });
  if (creditUc > 0n) await grant(world, agent.id, creditUc);
  return agent;
}

function requirementsFor(offerId: string, amount: string, options: { resource?: string; merchantId?: string } = {}): PaymentRequirements {
  return {
    scheme: 'batch-settlement',
    network: 'acg:credit',
    asset: 'microcredit',
    amount,
    payTo: options.merchantId ?? shop.merchantId,
    maxTimeoutSeconds: 300,
    extra: { version: '1.0.0', authority: world.url, offerId, resource: options.resource ?? 'https://api.shop.example/report' },
  };
}

function authorize(agent: Agent, requirements: PaymentRequirements, key = `pay-${++counter}`, extra: Record<string, unknown> = {}) {
  return world.api('POST', '/x402/authorize', {
    token: agent.token,
    body: {
      amount: requirements.amount,
      asset: requirements.asset,
      resource: requirements.extra.resource,
      payTo: requirements.payTo,
      offerId: requirements.extra.offerId,
      idempotencyKey: key,
      ...extra,
    },
  });
}

function paymentOf(attestation: string, requirements: PaymentRequirements): PaymentPayload {
  return { x402Version: 2, accepted: requirements, payload: { type: 'consume', attestation } };
}

/** An agent with credit that authorized one payment of `amount` for an offer priced `priceUc`. */
async function paid(options: { amount?: string; priceUc?: string; holdLifetimeS?: number; creditUc?: bigint } = {}) {
  const agent = await fundedAgent(options.creditUc);
  const offer = await shop.offer({ priceUc: options.priceUc ?? '1000000', holdLifetimeS: options.holdLifetimeS });
  const requirements = requirementsFor(offer.id, options.amount ?? '500000');
  const authorized = await authorize(agent, requirements);
  expect(authorized.status, JSON.stringify(authorized.body)).toBe(201);
  const attestation = authorized.body.attestation as string;
  return { agent, offer, requirements, attestation, payment: paymentOf(attestation, requirements), holdId: decodeJwt(attestation).jti as string };
}

/** Another API key of the shop's merchant, with these scopes. */
async function shopKey(scopes: string[]): Promise<string> {
  const key = newApiKey(world.gw.config.apiKeyPepper!);
  await world.gw.gateway.db.query(
    `INSERT INTO merchant_api_keys (id, merchant_id, owner_id, name, scopes, secret_hash, created_at_s) VALUES ($1, $2, $3, 'another', $4, $5, $6)`,
    [key.keyId, shop.merchantId, shop.ownerId, JSON.stringify(scopes), key.secretHash, world.gw.clock.nowS()],
  );
  return key.plaintext;
}

const balanceOf = (agentId: string) => world.gw.services.ledger.balance(world.gw.gateway.db, agentId);

async function advancing<T>(ms: number, work: () => Promise<T>): Promise<T> {
  world.gw.clock.advance(ms);
  try {
    return await work();
  } finally {
    world.gw.clock.advance(-ms);
  }
}

describe('GET /x402/supported', () => {
  it('lists the credit scheme with this gateway as its authority, as HTTPFacilitatorClient reads it', async () => {
    expect(await facilitator().getSupported()).toEqual({
      kinds: [{ x402Version: 2, scheme: 'batch-settlement', network: 'acg:credit', extra: { authority: world.url, asset: 'microcredit', version: '1.0.0' } }],
      extensions: [],
      signers: {},
    });
    expect((await fetch(`${world.url}/x402/supported`)).status).toBe(200);
  });
});

describe('POST /x402/authorize', () => {
  it('takes a hold of the asked amount and answers an ES256 attestation that verifies against the JWKS', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 900 });
    const requirements = requirementsFor(offer.id, '500000');
    const res = await authorize(agent, requirements);
    expect(res.status).toBe(201);
    expect(res.body.redemption).toMatchObject({ agentId: agent.id, acceptorId: shop.merchantId, offerId: offer.id, amountUc: '500000', state: 'held' });
    const { payload, protectedHeader } = await jwtVerify(res.body.attestation, createRemoteJWKSet(new URL(`${world.url}/.well-known/jwks.json`)), {
      issuer: world.url,
      audience: shop.merchantId,
      typ: 'x402-credit+jwt',
      algorithms: ['ES256'],
    });
    expect(protectedHeader.kid).toBeDefined();
    expect(payload).toMatchObject({
      sub: agent.id,
      jti: res.body.redemption.id,
      amount: '500000',
      asset: 'microcredit',
      resource: 'https://api.shop.example/report',
      offer_id: offer.id,
      holdExp: res.body.redemption.expiresAt,
      mandate: expect.any(String),
    });
    expect(payload.exp! - payload.iat!).toBe(300);
    expect(payload.exp!).toBeLessThan(payload.holdExp as number);
    expect(await balanceOf(agent.id)).toMatchObject({ availableUc: '9500000', heldUc: '500000' });
    // The hold keeps the attestation as issued: its evidence shows it where a voucher's shows the voucher.
    const evidence = await world.api('GET', `/v1/redemptions/${res.body.redemption.id}/evidence`, { token: shop.key });
    expect(evidence.status).toBe(200);
    expect(decodeJwt(evidence.body.evidence).voucher).toBe(res.body.attestation);
  });

  it('answers a retry with the same key with the same attestation and one hold; the key with another request conflicts', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '1000000' });
    const requirements = requirementsFor(offer.id, '400000');
    const first = await authorize(agent, requirements, 'same-key');
    const again = await authorize(agent, requirements, 'same-key');
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    // The header carries the same key.
    const { idempotencyKey: _key, ...body } = { amount: '400000', asset: 'microcredit', resource: requirements.extra.resource, payTo: shop.merchantId, offerId: offer.id, idempotencyKey: 'x' };
    const byHeader = await world.api('POST', '/x402/authorize', { token: agent.token, key: 'same-key', body });
    expect(byHeader.body).toEqual(first.body);
    const conflict = await authorize(agent, requirementsFor(offer.id, '300000'), 'same-key');
    expect(conflict.status).toBe(409);
    expect(conflict.body).toMatchObject({ code: 'idempotency_key_reused', error: 'idempotency_conflict' });
    const differing = await world.api('POST', '/x402/authorize', { token: agent.token, key: 'one-key', body: { ...body, idempotencyKey: 'another-key' } });
    expect([differing.status, differing.body.detail, differing.body.errors?.[0]?.path]).toEqual([
      400,
      'body/idempotencyKey differs from the Idempotency-Key header: send one, or the same key in both',
      'body/idempotencyKey',
    ]);
    expect((await authorize(agent, requirements, '')).status).toBe(400);
    const missing = await world.api('POST', '/x402/authorize', { token: agent.token, body });
    expect(missing.body.code).toBe('idempotency_required');
    expect(missing.body.detail).toBe('send an Idempotency-Key header, or the body member `idempotencyKey` (a UUID is a good key)');
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM holds WHERE agent_id = $1', [agent.id]);
    expect(rows[0]!.n).toBe(1n);
    expect(await balanceOf(agent.id)).toMatchObject({ heldUc: '400000' });
  });

  it('refuses what the agent cannot pay with 402 INSUFFICIENT_CREDITS (insufficient_credits), taking nothing', async () => {
    const agent = await fundedAgent(100_000n);
    const offer = await shop.offer({ priceUc: '1000000' });
    const res = await authorize(agent, requirementsFor(offer.id, '500000'));
    expect(res.status).toBe(402);
    expect(res.body).toMatchObject({ code: 'INSUFFICIENT_CREDITS', error: 'insufficient_credits' });
    expect(await balanceOf(agent.id)).toMatchObject({ availableUc: '100000', heldUc: '0' });
  });

  it("refuses an amount above the offer's price, another merchant's offer, a resource that is not an absolute URI, and another bundle", async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '1000000' });
    const above = await authorize(agent, requirementsFor(offer.id, '1000001'));
    // Each names the member it refuses, as the schema's refusals do: in detail, and in errors.
    const refused = (res: { status: number; body: { detail: string; errors?: Array<{ path: string }> } }) => [res.status, res.body.detail, res.body.errors?.map(({ path }) => path)];
    expect(refused(above)).toEqual([400, "body/amount (1000001 µc) is more than the offer's price of 1000000 µc, the most it sells for", ['body/amount']]);
    const other = await openShop(world);
    const elsewhere = await authorize(agent, requirementsFor(offer.id, '500000', { merchantId: other.merchantId }));
    expect(refused(elsewhere)).toEqual([400, `body/offerId "${offer.id}" names no active offer of merchant ${other.merchantId} (an offer sells once its merchant's domain is verified)`, ['body/offerId']]);
    expect(refused(await authorize(agent, requirementsFor(offer.id, '500000', { resource: 'not a url' })))).toEqual([400, expect.stringMatching(/^body\/resource must be an absolute URI: /), ['body/resource']]);
    expect((await authorize(agent, requirementsFor(offer.id, '100000', { resource: 'mcp://tool/report' }))).status).toBe(201);
    expect((await authorize(agent, { ...requirementsFor(offer.id, '500000'), asset: 'USD' })).status).toBe(400);
    expect(refused(await authorize(agent, requirementsFor(offer.id, '0')))).toEqual([400, 'body/amount must be positive', ['body/amount']]);
    const bundle = await authorize(agent, requirementsFor(offer.id, '500000'), undefined, { bundleId: 'agt_someone_else' });
    expect(bundle.status).toBe(404);
    expect(bundle.body).toMatchObject({ code: 'not_found', error: 'bundle_not_found' });
    expect((await authorize(agent, requirementsFor(offer.id, '500000'), undefined, { bundleId: agent.id })).status).toBe(201);
    expect(await balanceOf(agent.id)).toMatchObject({ heldUc: '600000' });
  });

  it("refuses as a voucher mint does under the agent's mandate: its budget (402 CAP_EXCEEDED) and its merchant rules (403 SCOPE_FORBIDDEN)", async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '1000000' });
    const put = (body: unknown) => world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `mandate-${++counter}`, body });
    expect((await put({ budgets: [{ id: 'daily', limitUc: '800000', period: 'day' }] })).status).toBe(200);
    expect((await authorize(agent, requirementsFor(offer.id, '500000'))).status).toBe(201);
    const budget = await authorize(agent, requirementsFor(offer.id, '500000'));
    expect(budget.status).toBe(402);
    expect(budget.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'budget_exceeded', budget: { id: 'daily', remainingUc: '300000' } });
    expect((await authorize(agent, requirementsFor(offer.id, '300000'))).status).toBe(201);
    expect((await put({ merchants: { allow: null, deny: [shop.merchantId] } })).status).toBe(200);
    const denied = await authorize(agent, requirementsFor(offer.id, '100000'));
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ code: 'SCOPE_FORBIDDEN', reason: 'merchant_not_allowed' });
  });

  it('asks the owner above the approval threshold, and takes the hold on the retry once approved', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '5000000' });
    await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `mandate-${++counter}`, body: { approvalAboveUc: '1000000' } });
    const requirements = requirementsFor(offer.id, '2000000');
    const asked = await authorize(agent, requirements, 'approve-me');
    expect(asked.status).toBe(402);
    expect(asked.body).toMatchObject({ code: 'approval_required', intent: { offerId: offer.id, agentId: agent.id, amountUc: '2000000' } });
    const approvalId = new URL(asked.body.approvalUrl as string).pathname.split('/').pop()!;
    // The owner is shown what is bought, the resource the attestation will be bound to, not only the offer (found from outside).
    const resource = requirements.extra.resource as string;
    expect(asked.body.purchase).toMatchObject({ operation: 'authorizeX402Payment', resource, offer: { id: offer.id } });
    expect(asked.body.instructions).toContain(`for ${resource}`);
    const shown = await world.api('GET', `/v1/payments/purchases/${approvalId}`, { token: agent.ownerToken });
    expect(shown.body).toMatchObject({ operation: 'authorizeX402Payment', resource, intent: { resource } });
    const approved = await world.api('POST', `/v1/payments/purchases/${approvalId}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.body.resource).toBe(resource);
    // A request for another resource under the key is refused and changes nothing: the approved one still runs
    // (found from outside: the refusal was stored under the key, and the owner's approval could never be used).
    const elsewhere = await authorize(agent, requirementsFor(offer.id, '2000000', { resource: 'https://api.shop.example/other' }), 'approve-me');
    expect([elsewhere.status, elsewhere.body.code, elsewhere.body.approvalId]).toEqual([409, 'idempotency_key_reused', approvalId]);
    const held = await authorize(agent, requirements, 'approve-me');
    expect(held.status).toBe(201);
    expect(held.body.redemption.amountUc).toBe('2000000');
  });

  it('refuses a frozen agent with 403 FROZEN (bundle_revoked)', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '1000000' });
    expect((await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, body: {} })).status).toBe(200);
    const res = await authorize(agent, requirementsFor(offer.id, '500000'));
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ code: 'FROZEN', error: 'bundle_revoked' });
  });
});

describe('POST /x402/verify', () => {
  it('answers a payment valid for the merchant that may take it, with the agent as payer', async () => {
    const { agent, requirements, payment } = await paid();
    expect(await facilitator().verify(payment, requirements)).toEqual({ isValid: true, payer: agent.id });
    // A lower price than authorized is acceptable.
    expect((await facilitator().verify(payment, { ...requirements, amount: '100000' })).isValid).toBe(true);
  });

  it('refuses each bad payment with its own reason', async () => {
    const { agent, requirements, attestation, payment } = await paid();
    const verify = async (p: PaymentPayload, r: PaymentRequirements = requirements, key = shop.key) => facilitator(key).verify(p, r);

    const [header, body, signature] = attestation.split('.') as [string, string, string];
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString());
    const forged = `${header}.${Buffer.from(JSON.stringify({ ...claims, amount: '900000' })).toString('base64url')}.${signature}`;
    expect(await verify(paymentOf(forged, requirements))).toMatchObject({ isValid: false, invalidReason: 'attestation_invalid' });
    expect(await verify(paymentOf('not.a.jws', requirements))).toMatchObject({ isValid: false, invalidReason: 'attestation_invalid' });
    // The token issued, exactly: with white space around or inside it, it is not (found from outside: a trailing space verified).
    for (const altered of [`${attestation} `, ` ${attestation}`, `${attestation}\n`, attestation.replace('.', '. ')]) {
      expect(await verify(paymentOf(altered, requirements)), JSON.stringify(altered.slice(-3))).toMatchObject({ isValid: false, invalidReason: 'attestation_invalid' });
    }
    expect(await verify({ ...payment, payload: { type: 'consume' } })).toMatchObject({ isValid: false, invalidReason: 'attestation_invalid' });
    // The paying client's payload, however malformed, is the facilitator's refusal and not a malformed request (found from outside).
    for (const bad of [{ type: 'consume', attestation: 'a'.repeat(9000) }, { type: 'consume', attestation: 123 }, { type: 'x'.repeat(50), attestation }, { type: ['consume'], attestation }, [], 'consume', null]) {
      expect(await verify({ ...payment, payload: bad } as PaymentPayload)).toMatchObject({ isValid: false, invalidReason: 'attestation_invalid' });
      expect(await facilitator().settle({ ...payment, payload: bad } as PaymentPayload, requirements)).toMatchObject({ success: false, errorReason: 'attestation_invalid' });
    }
    // Text the gateway would not store, in the paying client's payload, is that payload's defect too; beside a valid
    // attestation, in a member the facilitator does not read, it changes nothing (found from outside: a 400, which
    // @x402/express showed the paying client as the gateway's raw problem).
    for (const text of ['a\u0000b', '\ud800', 'eyJ\u202E.x.y', 'consume\u0007']) {
      for (const bad of [{ type: 'consume', attestation: text }, { type: text, attestation }]) {
        expect(await verify({ ...payment, payload: bad } as PaymentPayload), text).toMatchObject({ isValid: false, invalidReason: 'attestation_invalid' });
        expect(await facilitator().settle({ ...payment, payload: bad } as PaymentPayload, requirements), text).toMatchObject({ success: false, errorReason: 'attestation_invalid' });
      }
      const beside = { ...payment, extensions: { note: text }, resource: { url: 'https://api.shop.example/report', description: text, mimeType: 'application/json' }, payload: { ...payment.payload, extra: text } } as PaymentPayload;
      expect(await verify(beside), text).toEqual({ isValid: true, payer: agent.id });
    }
    // The resource server's own requirements are its request: such text there is a malformed request.
    const raw = await world.api('POST', '/x402/verify', { token: shop.key, body: { x402Version: 2, paymentPayload: payment, paymentRequirements: { ...requirements, payTo: 'a\u0000b' } } });
    expect([raw.status, raw.body.code]).toEqual([400, 'invalid_input']);
    // A voucher is not an attestation, though signed by the same key.
    const voucher = await world.api('POST', '/v1/vouchers', { token: agent.token, key: `voucher-${++counter}`, body: { offerId: requirements.extra.offerId } });
    expect(await verify(paymentOf(voucher.body.voucher, requirements))).toMatchObject({ isValid: false, invalidReason: 'attestation_invalid' });
    expect(await verify(payment, { ...requirements, extra: { ...requirements.extra, authority: 'https://elsewhere.example' } })).toMatchObject({ invalidReason: 'attestation_invalid' });
    // This gateway's base URL written another way (a trailing slash, capitals: what a server writing its requirements
    // by hand may state) is this gateway, as the x402 package's client reads it before paying (found from outside:
    // the client paid, and the facilitator refused the payment it had just authorized).
    const authority = requirements.extra.authority as string;
    for (const spelling of [`${authority}/`, authority.toUpperCase()]) {
      expect(await verify(payment, { ...requirements, extra: { ...requirements.extra, authority: spelling } }), spelling).toMatchObject({ isValid: true });
    }
    for (const other of [`${authority}/other`, `${authority}?x=1`, 'not a url']) {
      expect(await verify(payment, { ...requirements, extra: { ...requirements.extra, authority: other } }), other).toMatchObject({ invalidReason: 'attestation_invalid' });
    }

    expect(await verify(payment, { ...requirements, extra: { ...requirements.extra, resource: 'https://api.shop.example/other' } })).toMatchObject({
      isValid: false,
      invalidReason: 'resource_mismatch',
      payer: agent.id,
    });
    expect(await verify(payment, { ...requirements, amount: '500001' })).toMatchObject({ isValid: false, invalidReason: 'price_not_acceptable' });
    expect(await verify(payment, { ...requirements, extra: { ...requirements.extra, offerId: 'off_other' } })).toMatchObject({ invalidReason: 'price_not_acceptable' });

    const other = await openShop(world);
    expect(await verify(payment, { ...requirements, payTo: other.merchantId }, other.key)).toMatchObject({ isValid: false, invalidReason: 'unauthorized_server' });
    expect(await verify(payment, requirements, other.key)).toMatchObject({ isValid: false, invalidReason: 'unauthorized_server' });

    // From its exp on (the 300 s presentation window), with no leeway: the leeway is for a clock ahead, not an exp past.
    const expired = await advancing(301_000, () => verify(payment));
    expect(expired).toMatchObject({ isValid: false, invalidReason: 'attestation_expired', payer: agent.id });
    expect(await verify(payment)).toMatchObject({ isValid: true });
  });

  it("names another version, scheme, network or asset with x402's own reason, neither a forgery nor a price", async () => {
    const { requirements, payment } = await paid();
    // x402 v2's reasons (specs/x402-specification-v2.md §9); attestation_invalid is the draft's forgery signal, and
    // price_not_acceptable its "amount below resource requirements": a misconfigured server is neither (found from outside).
    const mismatches: Array<[string, PaymentRequirements, string]> = [
      ['scheme', { ...requirements, scheme: 'exact' }, 'invalid_scheme'],
      ['network', { ...requirements, network: 'eip155:8453' }, 'invalid_network'],
      ['asset', { ...requirements, asset: 'USD' }, 'invalid_payment_requirements'],
    ];
    for (const [what, stated, reason] of mismatches) {
      const verified = await facilitator().verify(payment, stated);
      expect(verified, what).toMatchObject({ isValid: false, invalidReason: reason });
      // The stated value quoted, so an empty one reads as such (found from outside: "the scheme  is not …").
      expect(verified.invalidMessage, what).toContain(`${what} ${JSON.stringify((stated as unknown as Record<string, unknown>)[what])} is not `);
      // The settlement attempted is on the network the request names (found from outside, bb118: always acg:credit).
      expect(await facilitator().settle(payment, stated), what).toMatchObject({ success: false, errorReason: reason, network: stated.network });
    }
    const request = (x402Version: number, payloadVersion: number) => ({ x402Version, paymentPayload: { ...payment, x402Version: payloadVersion }, paymentRequirements: requirements });
    for (const [top, inPayload] of [[1, 2], [2, 1], [3, 3]] as const) {
      const verified = await world.api('POST', '/x402/verify', { token: shop.key, body: request(top, inPayload) });
      expect(verified.status).toBe(200);
      expect(verified.body, `${top}/${inPayload}`).toMatchObject({ isValid: false, invalidReason: 'invalid_x402_version', invalidMessage: 'this facilitator speaks x402 version 2 only' });
      const settled = await world.api('POST', '/x402/settle', { token: shop.key, body: request(top, inPayload) });
      expect(settled.body, `${top}/${inPayload}`).toMatchObject({ success: false, errorReason: 'invalid_x402_version' });
    }
    // The version is read first: an x402 v1 request is not judged by v2's requirements.
    const v1 = await world.api('POST', '/x402/verify', { token: shop.key, body: { ...request(1, 1), paymentRequirements: { ...requirements, network: 'base' } } });
    expect(v1.body).toMatchObject({ invalidReason: 'invalid_x402_version' });
    // Requirements in another version's or another scheme's own form are answered with the reason too, not refused
    // for lacking this scheme's members (found from outside: 400, which x402's HTTPFacilitatorClient throws).
    const v1Requirements = { scheme: 'exact', network: 'base-sepolia', maxAmountRequired: '1000', resource: 'https://api.shop.example/report', description: '', mimeType: 'application/json', payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C', maxTimeoutSeconds: 60, asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e', extra: { name: 'USDC', version: '2' } };
    const exactV2 = { scheme: 'exact', network: 'eip155:84532', amount: '1.5', asset: 'USDC', payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C', maxTimeoutSeconds: 60 };
    const foreign: Array<[string, Record<string, unknown>, string]> = [
      ['a v1 request', { x402Version: 1, paymentPayload: { x402Version: 1, scheme: 'exact', network: 'base-sepolia', payload: { signature: '0x00' } }, paymentRequirements: v1Requirements }, 'invalid_x402_version'],
      ['a v1 request naming this scheme', { x402Version: 1, paymentPayload: { x402Version: 1, scheme: 'batch-settlement', network: 'acg:credit', payload: {} }, paymentRequirements: { ...v1Requirements, scheme: 'batch-settlement', network: 'acg:credit' } }, 'invalid_x402_version'],
      ['exact with a decimal amount and no extra', { x402Version: 2, paymentPayload: payment, paymentRequirements: exactV2 }, 'invalid_scheme'],
      ['this scheme on another network, without extra', { x402Version: 2, paymentPayload: payment, paymentRequirements: { ...exactV2, scheme: 'batch-settlement' } }, 'invalid_network'],
    ];
    for (const [what, body, reason] of foreign) {
      const verified = await world.api('POST', '/x402/verify', { token: shop.key, body });
      expect([verified.status, verified.body.invalidReason], what).toEqual([200, reason]);
      const settled = await world.api('POST', '/x402/settle', { token: shop.key, body });
      expect([settled.status, settled.body.errorReason, settled.body.network], what).toEqual([200, reason, (body.paymentRequirements as { network: string }).network]);
    }
    // A request naming no network it can echo is answered on this facilitator's.
    const unnamed = { x402Version: 1, paymentPayload: { x402Version: 1, payload: {} }, paymentRequirements: { ...v1Requirements, network: 7 } };
    expect((await world.api('POST', '/x402/settle', { token: shop.key, body: unnamed })).body).toMatchObject({ errorReason: 'invalid_x402_version', network: 'acg:credit' });
    // This scheme's requirements without a member it needs are the server's malformed request, named: not the
    // draft's forgery signal (a missing authority) nor a price (a missing offer) (found from outside).
    for (const member of ['authority', 'offerId', 'resource']) {
      const { [member]: _left, ...extra } = requirements.extra as Record<string, unknown>;
      for (const route of ['/x402/verify', '/x402/settle']) {
        const refused = await world.api('POST', route, { token: shop.key, body: { x402Version: 2, paymentPayload: payment, paymentRequirements: { ...requirements, extra } } });
        expect([refused.status, refused.body.code, refused.body.detail], `${route} ${member}`).toEqual([400, 'invalid_input', `body/paymentRequirements/extra must have required property '${member}'`]);
      }
    }
    // Nothing was settled by any of them.
    expect(await facilitator().verify(payment, requirements)).toMatchObject({ isValid: true });
  });

  it('answers already_settled once settled, attestation_revoked once a freeze revoked it, hold_expired past the deadline', async () => {
    const settledOne = await paid();
    expect((await facilitator().settle(settledOne.payment, settledOne.requirements)).success).toBe(true);
    expect(await facilitator().verify(settledOne.payment, settledOne.requirements)).toMatchObject({ isValid: false, invalidReason: 'already_settled' });

    const revokedOne = await paid();
    await world.api('POST', `/v1/owner/agents/${revokedOne.agent.id}/freeze`, { token: revokedOne.agent.ownerToken, body: { releaseHolds: true } });
    expect(await facilitator().verify(revokedOne.payment, revokedOne.requirements)).toMatchObject({
      isValid: false,
      invalidReason: 'attestation_revoked',
      invalidMessage: expect.stringMatching(/^the hold was revoked at \d+ \(its agent was frozen\): do not serve it$/),
    });

    // A hold of 60 s: its attestation's window ends a second before the deadline; past both, the hold is what verify names.
    const short = await paid({ holdLifetimeS: 60 });
    expect(decodeJwt(short.attestation).exp).toBe((decodeJwt(short.attestation).holdExp as number) - 1);
    expect(await advancing(61_000, () => facilitator().verify(short.payment, short.requirements))).toMatchObject({ isValid: false, invalidReason: 'hold_expired' });
  });

  it('refuses a payment nested past 128 levels with 400, never a 500 (found from outside: 2,000 levels in extra ran out of stack)', async () => {
    const { requirements, payment } = await paid();
    const deep = `${'{"a":'.repeat(1999)}{}${'}'.repeat(1999)}`;
    const valid = JSON.stringify({ x402Version: 2, paymentPayload: { ...payment, extensions: { deep: 0 } }, paymentRequirements: requirements });
    const body = valid.replace('{"deep":0}', deep);
    const res = await fetch(`${world.url}/x402/verify`, { method: 'POST', headers: { authorization: `Bearer ${shop.key}`, 'content-type': 'application/json' }, body });
    expect(res.status).toBe(400);
    expect((await res.json()).detail).toBe('body/paymentPayload nests objects and arrays more than 128 levels deep; a JSON body may nest 128 at most');
  });

  it('takes a merchant API key with redemptions:capture; anything else is a problem, which the client throws', async () => {
    const { payment, requirements } = await paid();
    const readOnly = await seedMerchantKey(world, { scopes: ['offers:read'] });
    await expect(facilitator(readOnly.key).verify(payment, requirements)).rejects.toThrow(/403/);
    const anonymous = await fetch(`${world.url}/x402/verify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ x402Version: 2, paymentPayload: payment, paymentRequirements: requirements }) });
    expect(anonymous.status).toBe(401);
    const malformed = await world.api('POST', '/x402/verify', { token: shop.key, body: { x402Version: 2, paymentPayload: payment, paymentRequirements: { ...requirements, amount: 'lots' } } });
    expect(malformed.status).toBe(400);
    expect(malformed.body.code).toBe('invalid_input');
  });
});

describe('POST /x402/settle', () => {
  it('captures the settlement-time amount, returns the rest, and answers the signed receipt; a repeat answers the same', async () => {
    const { agent, requirements, payment, holdId } = await paid({ amount: '500000' });
    const charge = { ...requirements, amount: '300000' };
    const settled = await facilitator().settle(payment, charge);
    expect(settled).toEqual({
      success: true,
      transaction: '',
      network: 'acg:credit',
      payer: agent.id,
      amount: '300000',
      extra: { commitmentId: holdId, chargedAmount: '300000', receipt: expect.any(String) },
    });
    const { payload } = await jwtVerify(settled.extra!.receipt as string, createRemoteJWKSet(new URL(`${world.url}/.well-known/jwks.json`)), {
      issuer: world.url,
      typ: 'receipt+jwt',
      algorithms: ['ES256'],
    });
    expect(payload).toMatchObject({ kind: 'capture', redemption_id: holdId, agent_id: agent.id, merchant_id: shop.merchantId, amount_uc: '500000', captured_uc: '300000', released_uc: '200000' });
    expect(await balanceOf(agent.id)).toMatchObject({ availableUc: '9700000', heldUc: '0', capturedUc: '300000' });

    expect(await facilitator().settle(payment, charge)).toEqual(settled);
    const replay = await world.api('POST', '/x402/settle', { token: shop.key, body: { x402Version: 2, paymentPayload: payment, paymentRequirements: charge } });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(settled);

    const conflict = await facilitator().settle(payment, { ...requirements, amount: '400000' });
    expect(conflict).toMatchObject({ success: false, errorReason: 'settle_conflict', transaction: '', network: 'acg:credit' });
    // Another key of the same merchant reads the settlement from the ledger: the same charge answers as then.
    const second = await shopKey(['redemptions:capture', 'redemptions:release']);
    expect(await facilitator(second).settle(payment, charge)).toEqual(settled);
    expect(await facilitator(second).settle(payment, { ...requirements, amount: '0' })).toMatchObject({ success: false, errorReason: 'settle_conflict' });
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(`SELECT count(DISTINCT operation_id) AS n FROM journal_entries WHERE operation_id LIKE $1`, [`${holdId}:%`]);
    expect(rows[0]!.n).toBe(1n);
  });

  it('a hold settled through the REST API: a settle of another charge is refused, and one of the same charge then answers as settled (found from outside)', async () => {
    // Captured through the API: a wrong charge first (its refusal is the jti's stored answer), then the right one.
    const captured = await paid({ amount: '500000' });
    const capture = await world.api('POST', `/v1/redemptions/${captured.holdId}/capture`, { token: shop.key, key: `rest-capture-${captured.holdId}`, body: { amountUc: '300000' } });
    expect(capture.status, JSON.stringify(capture.body)).toBe(200);
    const wrong = await facilitator().settle(captured.payment, { ...captured.requirements, amount: '200000' });
    expect(wrong).toMatchObject({ success: false, errorReason: 'settle_conflict' });
    expect(wrong.errorMessage).toContain('already captured (300000 µc charged)');
    const right = await facilitator().settle(captured.payment, { ...captured.requirements, amount: '300000' });
    expect(right).toMatchObject({ success: true, amount: '300000', extra: { commitmentId: captured.holdId, chargedAmount: '300000', receipt: capture.body.captureReceipt } });
    expect(await facilitator().settle(captured.payment, { ...captured.requirements, amount: '200000' })).toMatchObject({ success: false, errorReason: 'settle_conflict' });

    // Released through the API: a capture is refused, then a release at "0" answers as released.
    const released = await paid({ amount: '500000' });
    expect((await world.api('POST', `/v1/redemptions/${released.holdId}/release`, { token: shop.key, key: `rest-release-${released.holdId}`, body: {} })).status).toBe(200);
    expect(await facilitator().settle(released.payment, { ...released.requirements, amount: '300000' })).toMatchObject({ success: false, errorReason: 'settle_conflict' });
    expect(await facilitator().settle(released.payment, { ...released.requirements, amount: '0' })).toMatchObject({ success: true, amount: '0', extra: { chargedAmount: '0' } });
    expect(await balanceOf(released.agent.id)).toMatchObject({ heldUc: '0', capturedUc: '0' });
  });

  it('refuses a charge above what was authorized, another merchant, resource, offer or scheme, and a forged attestation, changing nothing', async () => {
    const { agent, requirements, attestation, payment } = await paid({ amount: '500000' });
    expect(await facilitator().settle(payment, { ...requirements, amount: '500001' })).toMatchObject({ success: false, errorReason: 'amount_exceeds_authorized' });
    // What verify refuses of the requirements, settle refuses alike: the same payment never verifies false and settles.
    const elsewhere = { ...requirements, extra: { ...requirements.extra, resource: 'https://api.shop.example/other' } };
    expect(await facilitator().settle(payment, elsewhere)).toMatchObject({ success: false, errorReason: 'resource_mismatch', payer: agent.id });
    const settled = await facilitator().settle(payment, { ...requirements, extra: { ...requirements.extra, offerId: 'off_other' } });
    expect(settled).toMatchObject({ success: false, errorReason: 'price_not_acceptable', payer: agent.id, errorMessage: `the attestation is for offer ${requirements.extra.offerId}, not "off_other"` });
    expect(await facilitator().settle(payment, { ...requirements, network: 'eip155:8453' })).toMatchObject({ success: false, errorReason: 'invalid_network' });
    const other = await openShop(world);
    expect(await facilitator(other.key).settle(payment, { ...requirements, payTo: other.merchantId })).toMatchObject({ success: false, errorReason: 'unauthorized_server' });
    const forged = `${attestation.slice(0, -4)}AAAA`;
    expect(await facilitator().settle(paymentOf(forged, requirements), requirements)).toMatchObject({ success: false, errorReason: 'attestation_invalid' });
    expect(await balanceOf(agent.id)).toMatchObject({ heldUc: '500000', capturedUc: '0' });
  });

  it('releases at "0": the hold is released and its credit is back', async () => {
    const { agent, requirements, payment, holdId } = await paid({ amount: '500000' });
    expect(await balanceOf(agent.id)).toMatchObject({ availableUc: '9500000', heldUc: '500000' });
    const released = await facilitator().settle(payment, { ...requirements, amount: '0' });
    expect(released).toEqual({
      success: true,
      transaction: '',
      network: 'acg:credit',
      payer: agent.id,
      amount: '0',
      extra: { commitmentId: holdId, chargedAmount: '0', receipt: null },
    });
    expect(await balanceOf(agent.id)).toMatchObject({ availableUc: '10000000', heldUc: '0', capturedUc: '0' });
    const hold = await world.api('GET', `/v1/redemptions/${holdId}`, { token: shop.key });
    expect(hold.body).toMatchObject({ state: 'released', releasedUc: '500000' });
    const { rows } = await world.gw.gateway.db.query<{ kind: string }>('SELECT DISTINCT kind FROM journal_entries WHERE operation_id = $1', [`${holdId}:release`]);
    expect(rows).toEqual([{ kind: 'release' }]);
    // A release needs redemptions:release as well.
    const captureOnly = await shopKey(['redemptions:capture']);
    const next = await paid();
    await expect(facilitator(captureOnly).settle(next.payment, { ...next.requirements, amount: '0' })).rejects.toThrow(/403/);
  });

  it("answers hold_expired past the hold's deadline (the presentation window does not bound settlement), and revoked after a freeze", async () => {
    const { requirements, payment } = await paid({ holdLifetimeS: 600 });
    // Past the attestation's exp (300 s) but before the hold's deadline: settlement is still accepted.
    const late = await paid({ holdLifetimeS: 600 });
    expect((await advancing(400_000, () => facilitator().settle(late.payment, late.requirements))).success).toBe(true);
    const expired = await advancing(601_000, () => facilitator().settle(payment, requirements));
    expect(expired).toMatchObject({ success: false, errorReason: 'hold_expired' });
    expect(await facilitator().settle(payment, { ...requirements, amount: '1' })).toMatchObject({ success: false, errorReason: 'hold_expired' });

    const revokedOne = await paid();
    await world.api('POST', `/v1/owner/agents/${revokedOne.agent.id}/freeze`, { token: revokedOne.agent.ownerToken, body: { releaseHolds: true } });
    expect(await facilitator().settle(revokedOne.payment, revokedOne.requirements)).toMatchObject({ success: false, errorReason: 'revoked' });
    expect(await facilitator().settle(revokedOne.payment, { ...revokedOne.requirements, amount: '0' })).toMatchObject({ success: false, errorReason: 'revoked' });
  });

  it('settles one jti once when two gateway instances settle it concurrently', async () => {
    const second = await world.anotherInstance({ env: { ACG_BASE_URL: world.url } });
    try {
      for (let round = 0; round < 5; round++) {
        const { payment, requirements, holdId } = await paid({ amount: '500000' });
        const answers = await Promise.all(
          Array.from({ length: 8 }, (_, i) => facilitator(shop.key, i % 2 === 0 ? world.url : second.url).settle(payment, { ...requirements, amount: '400000' })),
        );
        expect(answers.every((answer) => answer.success)).toBe(true);
        expect(new Set(answers.map((answer) => answer.extra!.receipt)).size).toBe(1);
        const { rows } = await world.gw.gateway.db.query<{ kind: string; n: bigint }>(
          `SELECT kind, count(DISTINCT operation_id) AS n FROM journal_entries WHERE operation_id LIKE $1 GROUP BY kind`,
          [`${holdId}:%`],
        );
        expect(rows).toEqual([{ kind: 'capture', n: 1n }]);
      }
    } finally {
      await second.close();
    }
  }, 60_000);
});

describe('the x402 routes in /openapi.json', () => {
  it('are described by their operations: the jti is settle\'s key (no header), authorize takes its key as a header or a body member', async () => {
    const document = await (await fetch(`${world.url}/openapi.json`)).json();
    const header = (operation: { parameters?: Array<{ in: string; name: string; required?: boolean }> }) =>
      operation.parameters?.find((p) => p.in === 'header' && p.name === 'Idempotency-Key');
    expect(document.paths['/x402/supported'].get.operationId).toBe('getX402Supported');
    expect(document.paths['/x402/verify'].post.operationId).toBe('verifyX402Payment');
    const { post: authorizeOp } = document.paths['/x402/authorize'];
    expect(authorizeOp.operationId).toBe('authorizeX402Payment');
    expect(header(authorizeOp)).toMatchObject({ required: false });
    expect(Object.keys(authorizeOp.responses)).toEqual(expect.arrayContaining(['201', '402', '409']));
    expect(authorizeOp.responses['200']).toBeUndefined();
    const { post: settleOp } = document.paths['/x402/settle'];
    expect(settleOp.operationId).toBe('settleX402Payment');
    expect(header(settleOp)).toBeUndefined();
    expect(settleOp.responses['200'].headers['Idempotent-Replayed']).toBeDefined();
    expect(document.components.schemas.X402SettleResponse.properties.errorReason.enum).toEqual([
      'settle_conflict', 'hold_expired', 'unauthorized_server', 'revoked', 'attestation_invalid', 'resource_mismatch', 'price_not_acceptable',
      'amount_exceeds_authorized', 'invalid_x402_version', 'invalid_scheme', 'invalid_network', 'invalid_payment_requirements',
    ]);
    expect(document.components.schemas.X402VerifyResponse.properties.invalidReason.enum).toEqual(expect.arrayContaining(['invalid_x402_version', 'invalid_scheme', 'invalid_network', 'invalid_payment_requirements']));
  });
});

describe('the ledger after x402', () => {
  it('keeps its invariants', async () => {
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});
