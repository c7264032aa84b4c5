// For the x402 tests: a merchant that sells through x402 (verified, an API key for the facilitator, an
// offer), paid servers built on the official middlewares with the credit scheme, and agents paying with the
// official client. Everything speaks to the real gateway of the World.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { paymentMiddleware as expressPaymentMiddleware, setSettlementOverrides } from '@x402/express';
import { wrapFetchWithPayment, x402Client } from '@x402/fetch';
import { paymentMiddleware as honoPaymentMiddleware } from '@x402/hono';
import type { x402ResourceServer } from '@x402/core/server';
import express from 'express';
import { Hono } from 'hono';
import {
  CREDIT_NETWORK,
  CREDIT_SCHEME,
  CreditSchemeClient,
  creditResourceServer,
  type CreditResourceServerOptions,
  type CreditSchemeClientOptions,
} from '@agent-credit-gateway/x402-credit';
import { openShop } from './ledger-fixture.ts';
import type { World } from './world.ts';

export interface X402Merchant {
  merchantId: string;
  apiKey: string;
  offerId: string;
  /** Another offer of the same merchant (a second price list). */
  offer(priceUc: string): Promise<string>;
  /** The merchant's settings for creditResourceServer. */
  settings(overrides?: Partial<CreditResourceServerOptions>): CreditResourceServerOptions;
}

/** A verified merchant with an all-scopes API key and an offer of `priceUc` (0.5 credit by default). */
export async function openX402Merchant(world: World, priceUc = '500000'): Promise<X402Merchant> {
  const shop = await openShop(world);
  const offerId = (await shop.offer({ priceUc, holdLifetimeS: 900 })).id;
  return {
    merchantId: shop.merchantId,
    apiKey: shop.key,
    offerId,
    offer: async (price) => (await shop.offer({ priceUc: price, holdLifetimeS: 900 })).id,
    settings: (overrides = {}) => ({ gatewayUrl: world.url, merchantId: shop.merchantId, offerId, apiKey: shop.key, ...overrides }),
  };
}

/** A paid HTTP server: its URL, how often each route's handler ran, and close(). */
export interface PaidServer {
  url: string;
  resourceServer: x402ResourceServer;
  /** Handler runs by path. */
  runs: Map<string, number>;
  close(): Promise<void>;
}

const PRICE = '$0.005';

/** The routes every paid server has, each at 0.5 credit: a report, another resource, a failing one, a slow one. */
function routes(merchantId: string) {
  const accepts = { scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, price: PRICE, payTo: merchantId };
  return {
    'GET /report': { accepts, description: 'A quarterly report', mimeType: 'application/json' },
    'GET /other': { accepts, description: 'Another report' },
    'GET /fails': { accepts, description: 'A resource whose upstream is down' },
    'GET /slow': { accepts, description: 'A report that takes a while' },
    'GET /overcharges': { accepts, description: 'A report whose handler asks to settle more than the price' },
    'POST /translate': { accepts, description: 'A translation of the text in the body' },
  };
}

function count(runs: Map<string, number>, path: string): number {
  const n = (runs.get(path) ?? 0) + 1;
  runs.set(path, n);
  return n;
}

/** Express with @x402/express: the README's paid route, plus the other routes. */
export async function startExpressServer(merchant: X402Merchant, resourceServer = creditResourceServer(merchant.settings())): Promise<PaidServer> {
  const runs = new Map<string, number>();
  const app = express();
  // The body parsed before the payment middleware, so a payment's repeat is told from another request (x402-credit's README).
  app.use(express.json());
  app.use(expressPaymentMiddleware(routes(merchant.merchantId), resourceServer));
  app.post('/translate', (req, res) => void res.json({ translation: `[fr] ${String((req.body as { text?: unknown }).text)}`, run: count(runs, '/translate') }));
  app.get('/report', (_req, res) => void res.json({ report: 'quarterly', run: count(runs, '/report') }));
  app.get('/other', (_req, res) => void res.json({ report: 'other', run: count(runs, '/other') }));
  app.get('/fails', (_req, res) => void res.status(502).json({ error: 'upstream down', run: count(runs, '/fails') }));
  app.get('/overcharges', (_req, res) => {
    setSettlementOverrides(res, { amount: '$0.01' });
    res.json({ report: 'overcharged', run: count(runs, '/overcharges') });
  });
  app.get('/slow', async (_req, res) => {
    const run = count(runs, '/slow');
    await new Promise((resolve) => setTimeout(resolve, 300));
    res.json({ report: 'slow', run });
  });
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    resourceServer,
    runs,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Hono with @x402/hono, on @hono/node-server. */
export async function startHonoServer(merchant: X402Merchant, resourceServer = creditResourceServer(merchant.settings())): Promise<PaidServer> {
  const runs = new Map<string, number>();
  const app = new Hono();
  app.use(honoPaymentMiddleware(routes(merchant.merchantId), resourceServer));
  app.get('/report', (c) => c.json({ report: 'quarterly', run: count(runs, '/report') }));
  app.get('/fails', (c) => c.json({ error: 'upstream down', run: count(runs, '/fails') }, 502));
  // The body as the handler receives it, byte for byte.
  app.post('/translate', async (c) => c.json({ received: Buffer.from(await c.req.arrayBuffer()).toString('base64'), run: count(runs, '/translate') }));
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const started = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, () => resolve(started));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    resourceServer,
    runs,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** An agent's x402 client with the credit scheme, and fetch wrapped to pay; `sent` records the payment headers it sent. */
export function payingAgent(world: World, token: string, options: Partial<CreditSchemeClientOptions> = {}) {
  const scheme = new CreditSchemeClient({ gatewayUrl: world.url, credential: token, backoffMs: () => 10, ...options });
  const client = new x402Client().register(CREDIT_NETWORK, scheme);
  const sent: string[] = [];
  const recording: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const payment = request.headers.get('payment-signature');
    if (payment) sent.push(payment);
    return fetch(request);
  };
  return { scheme, client, sent, fetch: wrapFetchWithPayment(recording, client) };
}

/** How many captures the journal holds for one hold (the attestation's jti). */
export async function capturesOf(world: World, holdId: string): Promise<number> {
  const { rows } = await world.gw.gateway.db.query<{ n: bigint | number }>(
    `SELECT count(*) AS n FROM journal_entries WHERE operation_id LIKE $1 AND kind = 'capture' AND account LIKE 'merchant:%'`,
    [`${holdId}%`],
  );
  return Number(rows[0]!.n);
}
