// The kill switch as a merchant meets it, against a real gateway: the owner freezes an agent with
// `releaseHolds`, and a merchant server built on the SDK (the README's example) refuses the agent's voucher
// offline, having heard of it from the `voucher.revoked` webhook; another merchant client that only polls
// the revocations feed refuses it within one interval. Each test prints the delay it measured, from the
// freeze answer to the first refusal.
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError, MerchantClient, VerificationError } from '@agent-credit-gateway/merchant';
import { shopHandler } from '../examples/server.ts';
import { grant } from '../../../test/support/ledger-fixture.ts';
import { configureWebhook, HOOK_DOMAIN, HOOK_HOST, markVerified, pemFile, registerMerchant, uniqueKey } from '../../../test/support/merchants.ts';
import { makeTestCertificate, type TestCertificate } from '../../../test/support/test-certificate.ts';
import { waitFor } from '../../../test/support/wait.ts';
import { startWorld, type World } from '../../../test/support/world.ts';

/** The poller's interval in the polling test: its refusal must come within it, plus one feed request. */
const POLL_INTERVAL_MS = 1_000;
/** What one feed request may take on a loaded 2-core machine, on top of the interval. */
const FEED_REQUEST_ALLOWANCE_MS = 1_500;

let world: World;
let cert: TestCertificate;
let ca: { file: string; remove(): void };
/** The merchant server: HTTPS on a public-looking name for the gateway's webhook, plain HTTP for the test's payments. */
let hooks: https.Server;
let shop: http.Server;
let shopUrl: string;
/** The status of each answer the merchant server gave to the gateway's deliveries. */
const deliveryAnswers: number[] = [];
let merchantClient: MerchantClient;
let merchantId: string;
let apiKey: string;
let offerId: string;

async function listen(server: http.Server | https.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function close(server: http.Server | https.Server | undefined): Promise<void> {
  if (!server) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** An agent of its own owner, with 10 credits. */
async function fundedAgent(name: string): Promise<{ id: string; token: string; ownerToken: string }> {
  const agent = await world.createAgent(`${name}-owner@example.com`, name);
  await grant(world, agent.id, 10_000_000n);
  return agent;
}

async function mint(token: string): Promise<{ voucher: string; redemption: { id: string } }> {
  const res = await world.api('POST', '/v1/vouchers', { token, key: uniqueKey('mint'), body: { offerId } });
  if (res.status !== 200) throw new Error(`mint failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Freezes the agent with releaseHolds and returns the answer, and when it arrived (performance.now()). */
async function freezeReleasingHolds(agent: { id: string; ownerToken: string }): Promise<{ body: any; answeredAtMs: number }> {
  const res = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: uniqueKey('freeze'), body: { releaseHolds: true } });
  const answeredAtMs = performance.now();
  if (res.status !== 200) throw new Error(`freeze failed: ${res.status} ${JSON.stringify(res.body)}`);
  return { body: res.body, answeredAtMs };
}

/** Pays the shop with the voucher: its status and answer (`refused` says who refused: the shop offline, or the gateway at capture). */
async function pay(voucher: string): Promise<{ status: number; body: { refused?: string; code?: string; paidUc?: string } }> {
  const res = await fetch(shopUrl, { headers: { authorization: `Bearer ${voucher}` } });
  return { status: res.status, body: await res.json() };
}

beforeAll(async () => {
  cert = makeTestCertificate({ dns: [HOOK_HOST, `*.${HOOK_DOMAIN}`] });
  ca = pemFile(cert.certPem);
  let hooksPort = 0;
  world = await startWorld({
    env: { ACG_OUTBOUND_CA_FILE: ca.file, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' },
    outbound: {
      lookupHost: async (hostname) => {
        if (hostname === HOOK_DOMAIN || hostname.endsWith(`.${HOOK_DOMAIN}`)) return ['127.0.0.1'];
        throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
      },
      connectPort: () => hooksPort,
    },
  });
  const ownerToken = await world.humanToken('revoking-shop@example.com');
  merchantId = (await registerMerchant(world, ownerToken)).merchant.id;
  await markVerified(world, merchantId);
  const webhook = await configureWebhook(world, ownerToken, merchantId);
  if (webhook.status !== 200) throw new Error(`webhook failed: ${webhook.status} ${JSON.stringify(webhook.body)}`);
  const key = await world.api('POST', `/v1/merchants/${merchantId}/api-keys`, {
    token: ownerToken,
    key: uniqueKey('api-key'),
    body: { name: 'shop', scopes: ['offers:read', 'redemptions:capture'] },
  });
  if (key.status !== 201) throw new Error(`api key failed: ${key.status} ${JSON.stringify(key.body)}`);
  apiKey = key.body.secretKey;
  const offer = await world.api('POST', `/v1/merchants/${merchantId}/offers`, {
    token: ownerToken,
    key: uniqueKey('offer'),
    body: { name: 'Report', category: 'books', priceUc: '1000000', holdLifetimeS: 900 },
  });
  if (offer.status !== 201) throw new Error(`offer failed: ${offer.status} ${JSON.stringify(offer.body)}`);
  offerId = offer.body.id;

  merchantClient = new MerchantClient({ gatewayUrl: world.url, merchantId, apiKey });
  const handler = shopHandler(merchantClient, offerId, webhook.body.webhookSecret);
  hooks = https.createServer({ cert: cert.certPem, key: cert.keyPem }, (request, response) => {
    response.on('finish', () => deliveryAnswers.push(response.statusCode));
    return handler(request, response);
  });
  hooksPort = await listen(hooks);
  shop = http.createServer(handler);
  shopUrl = `http://127.0.0.1:${await listen(shop)}/report`;
  // Background work as `acg serve` runs it: the delivery worker polls at its default interval, so the delay
  // measured is the one a merchant would see.
  world.gw.gateway.startBackgroundWork();
});
afterAll(async () => {
  await close(shop);
  await close(hooks);
  await world?.close();
  cert?.remove();
  ca?.remove();
});

describe('a revoked voucher at a merchant built on the SDK', () => {
  it('is refused offline once the voucher.revoked webhook has reached the merchant server, and the others are still accepted', async () => {
    const agent = await fundedAgent('revoked-by-webhook');
    const paid = await mint(agent.token);
    expect(await pay(paid.voucher)).toMatchObject({ status: 200, body: { paidUc: '1000000' } });
    // The merchant server takes the gateway's signed deliveries (the payment's redemption events).
    await waitFor(() => deliveryAnswers.includes(204), { what: 'the merchant server to accept a delivery of the gateway' });
    expect(deliveryAnswers.filter((status) => status !== 204)).toEqual([]);
    const { voucher, redemption } = await mint(agent.token);

    const { body: frozen, answeredAtMs } = await freezeReleasingHolds(agent);
    // Checked before paying with it: were the hold still held, the shop would capture it.
    expect(frozen.freeze).toMatchObject({ agentId: agent.id, releaseHolds: true, releasedHolds: 1, releasedUc: '1000000' });
    expect(frozen.freeze.merchants).toEqual([expect.objectContaining({ merchantId, holdIds: [redemption.id] })]);
    // Until the webhook arrives, the shop takes the voucher and the gateway refuses its capture; from then on
    // the shop refuses it itself, without asking the gateway.
    await waitFor(() => pay(voucher), {
      what: 'the shop to refuse the revoked voucher offline',
      until: ({ body }) => body.refused === 'voucher_refused',
      intervalMs: 5,
      timeoutMs: 20_000,
    });
    const refusedAfterMs = performance.now() - answeredAtMs;
    process.stdout.write(
      `[revocation] webhook: freeze answer → first offline refusal by the merchant server: ${refusedAfterMs.toFixed(0)} ms ` +
        `(gateway webhook poll interval ${world.gw.config.webhookPollIntervalMs} ms)\n`,
    );

    expect(await pay(voucher)).toMatchObject({ status: 402, body: { refused: 'voucher_refused', code: 'voucher_revoked' } });
    expect(merchantClient.revocations.has(redemption.id)).toBe(true);
    expect(merchantClient.revocations.has(paid.redemption.id)).toBe(false);
    expect(deliveryAnswers.filter((status) => status !== 204)).toEqual([]);
    // A revocation the merchant has not heard of still stops the money: the gateway refuses the capture.
    const capture = await merchantClient.capture(redemption.id).then(
      () => 'captured',
      (error: unknown) => error,
    );
    expect(capture).toBeInstanceOf(GatewayError);
    expect(capture).toMatchObject({ status: 409, code: 'voucher_revoked' });
    // The owner sees the merchant's endpoint took the event.
    await waitFor(() => world.api('GET', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken }), {
      what: "the freeze report to show the merchant's voucher.revoked event delivered",
      until: (res) => res.status === 200 && res.body.merchants?.[0]?.webhook === 'delivered',
    });

    const unfrozen = await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, key: uniqueKey('unfreeze') });
    expect(unfrozen.status).toBe(200);
    expect(await pay((await mint(agent.token)).voucher)).toMatchObject({ status: 200, body: { paidUc: '1000000' } });
  });

  it('is refused within one poll interval (plus one feed request) by a client that polls the revocations feed', async () => {
    const agent = await fundedAgent('revoked-by-polling');
    const { voucher, redemption } = await mint(agent.token);
    const poller = new MerchantClient({ gatewayUrl: world.url, merchantId, apiKey });
    const errors: unknown[] = [];
    // Caught up with the feed as it stands (earlier tests' revocations included), then polling.
    await poller.syncRevocations();
    const polling = poller.pollRevocations({ intervalMs: POLL_INTERVAL_MS, onError: (error) => errors.push(error) });
    try {
      expect((await poller.verifyVoucher(voucher, { offerId })).redemptionId).toBe(redemption.id);

      const { answeredAtMs } = await freezeReleasingHolds(agent);
      const refusal = await waitFor(() => poller.verifyVoucher(voucher, { offerId }).then(() => undefined, (error: unknown) => error), {
        what: 'the polling client to refuse the revoked voucher',
        until: (error) => error !== undefined,
        intervalMs: 5,
        timeoutMs: POLL_INTERVAL_MS + 10_000,
      });
      const refusedAfterMs = performance.now() - answeredAtMs;
      process.stdout.write(`[revocation] polling every ${POLL_INTERVAL_MS} ms: freeze answer → first refusal: ${refusedAfterMs.toFixed(0)} ms\n`);

      expect(refusal).toBeInstanceOf(VerificationError);
      expect(refusal).toMatchObject({ code: 'voucher_revoked' });
      expect(refusedAfterMs).toBeLessThanOrEqual(POLL_INTERVAL_MS + FEED_REQUEST_ALLOWANCE_MS);
      expect(errors).toEqual([]);
      const feed = await world.api('GET', `/v1/merchants/${merchantId}/revocations`, { headers: { authorization: `Bearer ${apiKey}` } });
      expect(feed.status).toBe(200);
      expect(feed.body.revocations.filter((entry: { agentId: string }) => entry.agentId === agent.id).map((entry: { holdId: string }) => entry.holdId)).toEqual([redemption.id]);
    } finally {
      await polling.stop();
    }
  });
});
