// Signed receipts: every capture (a merchant's, and execute's) and every refund carries a receipt+jwt JWS
// that a third-party JOSE library verifies against the served JWKS, and that fails once any claim changes.
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
let github: FakeGitHub;
let counter = 0;
beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_GITHUB_API_URL: github.url } });
  shop = await openShop(world);
});
afterAll(async () => {
  await world?.close();
  await github?.close();
});

async function verify(receipt: string): Promise<JWTPayload> {
  const jwks = createRemoteJWKSet(new URL(`${world.url}/.well-known/jwks.json`));
  const { payload, protectedHeader } = await jwtVerify(receipt, jwks, { issuer: world.gw.config.baseUrl, algorithms: ['ES256'], typ: 'receipt+jwt' });
  expect(protectedHeader).toMatchObject({ alg: 'ES256', typ: 'receipt+jwt', kid: expect.any(String) });
  return payload;
}

/** Re-encodes the payload with one claim changed, keeping the original header and signature. */
function tampered(receipt: string, claim: string): string {
  const [header, payload, signature] = receipt.split('.');
  const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString()) as Record<string, unknown>;
  const value = claims[claim];
  claims[claim] = typeof value === 'number' ? value + 1 : /^[0-9]+$/.test(String(value)) ? String(BigInt(String(value)) + 1n) : `${String(value)}x`;
  return [header, Buffer.from(JSON.stringify(claims)).toString('base64url'), signature].join('.');
}

async function expectEveryTamperingFails(receipt: string, payload: JWTPayload) {
  for (const claim of Object.keys(payload)) {
    await expect(verify(tampered(receipt, claim)), `changing ${claim}`).rejects.toThrow();
  }
}

async function fundedAgent() {
  const agent = await world.createAgent(`receipt${++counter}@example.com`, `receipt-agent-${counter}`);
  await grant(world, agent.id, 10_000_000n);
  return agent;
}

describe('signed receipts', () => {
  it('signs a capture: the claims state the redemption, offer, agent, merchant, amounts and time, and readable later', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '2500000' });
    const { redemption } = (await mint(world, agent.token, offer.id)).body;
    const capture = await world.api('POST', `/v1/redemptions/${redemption.id}/capture`, { token: shop.key, key: `cap-${counter}`, body: { amountUc: '1000000' } });
    const receipt = capture.body.captureReceipt as string;
    const payload = await verify(receipt);
    expect(payload).toEqual({
      iss: world.gw.config.baseUrl,
      jti: expect.stringMatching(/^rct_/),
      iat: capture.body.capturedAt,
      kind: 'capture',
      redemption_id: redemption.id,
      offer_id: offer.id,
      agent_id: agent.id,
      merchant_id: shop.merchantId,
      amount_uc: '2500000',
      captured_uc: '1000000',
      released_uc: '1500000',
      refunded_uc: '0',
      // The agent's mandate in force at the hold (its hash; see test/ledger/mandates.test.ts).
      mandate: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
    });
    await expectEveryTamperingFails(receipt, payload);
    const later = await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: shop.key });
    expect(later.body.captureReceipt).toBe(receipt);
  });

  it('signs each refund with its own amount and the running total', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '2000000' });
    const { redemption } = (await mint(world, agent.token, offer.id)).body;
    await world.api('POST', `/v1/redemptions/${redemption.id}/capture`, { token: shop.key, key: `cap-${counter}`, body: {} });
    await world.api('POST', `/v1/redemptions/${redemption.id}/refunds`, { token: shop.key, key: `rf-a-${counter}`, body: { amountUc: '500000' } });
    const second = await world.api('POST', `/v1/redemptions/${redemption.id}/refunds`, { token: shop.key, key: `rf-b-${counter}`, body: { amountUc: '300000' } });
    const receipt = second.body.refund.receipt as string;
    const payload = await verify(receipt);
    expect(payload).toMatchObject({
      kind: 'refund',
      redemption_id: redemption.id,
      refund_id: second.body.refund.id,
      refund_uc: '300000',
      refunded_uc: '800000',
      captured_uc: '2000000',
      released_uc: '0',
      merchant_id: shop.merchantId,
      agent_id: agent.id,
      iat: second.body.refund.createdAt,
    });
    await expectEveryTamperingFails(receipt, payload);
    const later = await world.api('GET', `/v1/redemptions/${redemption.id}`, { token: shop.key });
    expect(later.body.refunds.map((r: { receipt: string }) => r.receipt)[1]).toBe(receipt);
    // The API's own document names every claim a receipt carries, and says it has no aud (found from outside: it
    // pointed to a file the gateway does not serve).
    const document = await (await fetch(`${world.url}/openapi.json`)).json();
    const described: string = document.components.schemas.Refund.properties.receipt.anyOf[0].description;
    for (const claim of Object.keys(payload)) expect(described, claim).toContain(`\`${claim}\``);
    expect(described).toContain('no `aud`');
    expect(described).not.toContain('decisions.md');
  });

  it("signs execute's receipt the same way, with the gateway as the merchant", async () => {
    const agent = await fundedAgent();
    const res = await world.api('POST', '/v1/services/execute', {
      token: agent.token,
      key: `exec-${counter}`,
      body: { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'Hello-World' } },
    });
    expect(res.status).toBe(200);
    const payload = await verify(res.body.receipt.captureReceipt);
    expect(payload).toMatchObject({ kind: 'capture', redemption_id: res.body.receipt.id, merchant_id: 'gateway', agent_id: agent.id, captured_uc: '1000000', offer_id: 'github-public:repository.get' });
  });
});
