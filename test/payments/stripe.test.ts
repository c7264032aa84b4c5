// The Stripe Checkout provider against a local server that speaks Stripe's wire format: the session the
// gateway opens, signed webhooks that settle, badly signed ones that change nothing, replays and racing
// settlement events that credit once and resume once (two instances on PostgreSQL).
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capturedFromAgent, holdsOf } from '../execute/helpers.ts';
import { onPostgres, openTestDatabase, type TestDatabase } from '../support/database.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { FAKE_STRIPE_SECRET_KEY, FAKE_STRIPE_WEBHOOK_SECRET, startFakeStripe, type FakeStripe } from '../support/fake-stripe.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { repoRequest, topupBody, topupLots } from './helpers.ts';

let stripe: FakeStripe;
let github: FakeGitHub;
let world: World;
let counter = 0;
/** The gateway's error lines (a payment collected and not credited must leave one, for reconciliation). */
const errorLines: Array<Record<string, unknown>> = [];
const key = (label: string) => `${label}-${++counter}-${Date.now()}`;

function stripeEnv(): Record<string, string> {
  return {
    ACG_PAYMENT_PROVIDER: 'stripe',
    ACG_STRIPE_SECRET_KEY: FAKE_STRIPE_SECRET_KEY,
    ACG_STRIPE_WEBHOOK_SECRET: FAKE_STRIPE_WEBHOOK_SECRET,
    ACG_STRIPE_API_URL: stripe.url,
    ACG_GITHUB_API_URL: github.url,
  };
}

beforeAll(async () => {
  stripe = await startFakeStripe();
  github = await startFakeGitHub();
  world = await startWorld({ env: stripeEnv(), log: pino({ level: 'error' }, { write: (line: string) => void errorLines.push(JSON.parse(line) as Record<string, unknown>) }) });
});
afterAll(async () => {
  await world?.close();
  await stripe?.close();
  await github?.close();
});

const repoCalls = () => github.requests.filter((r) => r.path === '/repos/octocat/Hello-World').length;

function deliver(baseUrl: string, delivery: { payload: string; signature: string }) {
  return fetch(`${baseUrl}/v1/payments/stripe/webhook`, {
    method: 'POST',
    headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': delivery.signature },
    body: delivery.payload,
  });
}

/** An agent without credit whose execute request was retained, with its Stripe top-up. */
async function retained(label: string) {
  const agent = await world.createAgent(`${label}-${++counter}@example.com`, `${label}-agent-${counter}`);
  const res = await world.api('POST', '/v1/services/execute', { token: agent.token, key: key('exec'), body: repoRequest });
  expect(res.status).toBe(402);
  return { agent, intentId: res.body.intentId as string, topup: res.body.payment, session: stripe.sessionForTopup(res.body.payment.id) };
}

async function intentState(intentId: string, token: string) {
  return (await world.api('GET', `/v1/intents/${intentId}`, { token })).body;
}

describe('the Stripe Checkout provider', () => {
  it('opens one Checkout Session per top-up with the amount and metadata, and answers its URL', async () => {
    const agent = await world.createAgent('stripe-open@example.com', 'stripe-open-agent');
    const res = await world.api('POST', '/v1/payments/topups', { token: agent.token, key: key('open'), body: topupBody(agent.id, { amountUsdCents: 1234 }) });
    expect(res.status).toBe(200);
    const session = stripe.sessionForTopup(res.body.id);
    const request = stripe.requests.find((r) => r.path === '/v1/checkout/sessions' && r.params.client_reference_id === res.body.id)!;
    expect(request.headers['idempotency-key']).toBe(`acg-topup-${res.body.id}`);
    expect(request.params).toMatchObject({
      mode: 'payment',
      client_reference_id: res.body.id,
      'metadata[topupId]': res.body.id,
      'metadata[agentId]': agent.id,
      'payment_intent_data[metadata][topupId]': res.body.id,
      'line_items[0][quantity]': '1',
      'line_items[0][price_data][currency]': 'usd',
      'line_items[0][price_data][unit_amount]': '1234',
      success_url: `${world.url}/payments/topups/${res.body.id}?checkout=success`,
      cancel_url: `${world.url}/payments/topups/${res.body.id}?checkout=cancel`,
    });
    expect(session.amount_total).toBe(1234);
    expect(res.body).toMatchObject({
      provider: 'stripe',
      status: 'pending_approval',
      amountUc: '1234000000',
      approvalUrl: session.url,
      checkoutUrl: session.url,
      nextAction: { resolution: 'checkout', actionUrl: session.url },
      livemode: false,
    });
    const approve = await world.api('POST', `/v1/payments/topups/${res.body.id}/approve`, { token: agent.ownerToken, body: {} });
    expect(approve.status).toBe(409);
  });

  it('binds the retained intent in the session metadata and reports checkout in the 402', async () => {
    const { intentId, topup, session } = await retained('stripe-meta');
    expect(session.metadata).toMatchObject({ topupId: topup.id, intentId });
    expect(topup).toMatchObject({ intentId, amountUsdCents: 500, provider: 'stripe' });
  });

  it('settles on a correctly signed checkout.session.completed, and the intent runs once', async () => {
    const { agent, intentId, topup, session } = await retained('stripe-settle');
    const callsBefore = repoCalls();
    const res = await deliver(world.url, stripe.event('checkout.session.completed', stripe.pay(session.id)));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ received: true, outcome: 'settled' });
    const intent = await waitFor(() => intentState(intentId, agent.token), { until: (body) => body.state !== 'pending', what: 'the intent to run', timeoutMs: 15_000, intervalMs: 50 });
    expect(intent).toMatchObject({ state: 'executed', receipt: { state: 'captured' }, result: { fullName: 'octocat/Hello-World' } });
    expect(repoCalls() - callsBefore).toBe(1);
    const lots = await topupLots(world, agent.id);
    expect(lots).toEqual([{ id: expect.any(String), granted_uc: 500_000_000n, source_ref: topup.id }]);
    expect((await world.api('GET', `/v1/payments/topups/${topup.id}`, { token: agent.token })).body).toMatchObject({ status: 'settled', lotId: lots[0]!.id });
  });

  it('refuses a wrongly signed webhook with 400 and changes nothing', async () => {
    const { agent, intentId, topup, session } = await retained('stripe-badsig');
    const paid = stripe.pay(session.id);
    const good = stripe.event('checkout.session.completed', paid);
    const deliveries = [
      stripe.event('checkout.session.completed', paid, 'whsec_someoneelse'),
      { payload: good.payload.replace('"amount_total":500', '"amount_total":50000'), signature: good.signature },
      { payload: good.payload, signature: 't=1,v1=00' },
    ];
    for (const delivery of deliveries) {
      const res = await deliver(world.url, delivery);
      expect(res.status).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe('invalid_input');
    }
    const unsigned = await fetch(`${world.url}/v1/payments/stripe/webhook`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: good.payload });
    expect(unsigned.status).toBe(400);
    expect((await world.api('GET', `/v1/payments/topups/${topup.id}`, { token: agent.token })).body.status).toBe('pending_approval');
    expect(await topupLots(world, agent.id)).toEqual([]);
    expect((await intentState(intentId, agent.token)).state).toBe('pending');
  });

  it('credits once and resumes once when the same event arrives three times', async () => {
    const { agent, intentId, session } = await retained('stripe-replay');
    const callsBefore = repoCalls();
    const delivery = stripe.event('checkout.session.completed', stripe.pay(session.id));
    const outcomes: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      const res = await deliver(world.url, delivery);
      expect(res.status).toBe(200);
      outcomes.push(((await res.json()) as { outcome: string }).outcome);
    }
    expect(outcomes).toEqual(['settled', 'unchanged', 'unchanged']);
    await waitFor(() => intentState(intentId, agent.token), { until: (body) => body.state === 'executed', what: 'the intent to run', timeoutMs: 15_000, intervalMs: 50 });
    await world.gw.services.payments!.runJobs();
    expect(await topupLots(world, agent.id)).toHaveLength(1);
    expect(repoCalls() - callsBefore).toBe(1);
    expect(await capturedFromAgent(world, agent.id)).toBe(1_000_000n);
  });

  it('waits on a completed session whose payment is still processing, and fails it on async_payment_failed with the intent cancelled', async () => {
    const { agent, intentId, topup, session } = await retained('stripe-async');
    const processing = await deliver(world.url, stripe.event('checkout.session.completed', { ...session, status: 'complete' }));
    expect(await processing.json()).toEqual({ received: true, outcome: 'awaiting_payment' });
    const failed = await deliver(world.url, stripe.event('checkout.session.async_payment_failed', { ...session, status: 'complete' }));
    expect(await failed.json()).toEqual({ received: true, outcome: 'closed' });
    // A late success for a failed top-up changes nothing.
    const late = await deliver(world.url, stripe.event('checkout.session.async_payment_succeeded', stripe.pay(session.id)));
    expect(await late.json()).toEqual({ received: true, outcome: 'not_pending' });
    expect((await world.api('GET', `/v1/payments/topups/${topup.id}`, { token: agent.token })).body.status).toBe('failed');
    expect(await intentState(intentId, agent.token)).toMatchObject({ state: 'cancelled', cancellationReason: 'topup_failed' });
    expect(await topupLots(world, agent.id)).toEqual([]);
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it('expires the top-up on checkout.session.expired, cancelling the intent with no charge', async () => {
    const { agent, intentId, topup, session } = await retained('stripe-expired');
    const res = await deliver(world.url, stripe.event('checkout.session.expired', { ...session, status: 'expired' }));
    expect(await res.json()).toEqual({ received: true, outcome: 'closed' });
    expect((await world.api('GET', `/v1/payments/topups/${topup.id}`, { token: agent.token })).body.status).toBe('expired');
    expect(await intentState(intentId, agent.token)).toMatchObject({ state: 'cancelled', cancellationReason: 'topup_expired' });
    expect(await topupLots(world, agent.id)).toEqual([]);
  });

  it('declines by expiring the Checkout Session first, and refuses to decline a paid one', async () => {
    const { agent, intentId, topup, session } = await retained('stripe-decline');
    const declined = await world.api('POST', `/v1/payments/topups/${topup.id}/decline`, { token: agent.ownerToken, body: {} });
    expect(declined.body.status).toBe('declined');
    expect(stripe.sessions.get(session.id)!.status).toBe('expired');
    expect((await intentState(intentId, agent.token)).state).toBe('cancelled');

    const paid = await retained('stripe-decline-paid');
    stripe.pay(paid.session.id);
    const refused = await world.api('POST', `/v1/payments/topups/${paid.topup.id}/decline`, { token: paid.agent.ownerToken, body: {} });
    expect(refused.status).toBe(409);
    expect(refused.body.detail).toMatch(/^this top-up can no longer be declined: its Stripe Checkout Session is not open\. If it was paid, the credit arrives when Stripe confirms the payment; .* Stripe said: Only Checkout Sessions/);
    expect((await world.api('GET', `/v1/payments/topups/${paid.topup.id}`, { token: paid.agent.token })).body.status).toBe('pending_approval');
  });

  it("credits a payment Stripe collects after the gateway's own expiry of the top-up (a delayed method), once; its intent stays cancelled", async () => {
    const { agent, intentId, topup, session } = await retained('stripe-late');
    const processing = await deliver(world.url, stripe.event('checkout.session.completed', { ...session, status: 'complete' }));
    expect(await processing.json()).toEqual({ received: true, outcome: 'awaiting_payment' });
    // Days pass: the gateway's clock expires the top-up and cancels the intent it would have resumed.
    await world.gw.gateway.db.query('UPDATE topups SET expires_at_s = $2 WHERE id = $1', [topup.id, Math.floor(Date.now() / 1000) - 1]);
    await world.gw.services.payments!.runJobs();
    expect((await world.api('GET', `/v1/payments/topups/${topup.id}`, { token: agent.token })).body.status).toBe('expired');
    const callsBefore = repoCalls();
    const cleared = stripe.event('checkout.session.async_payment_succeeded', stripe.pay(session.id));
    expect(await (await deliver(world.url, cleared)).json()).toEqual({ received: true, outcome: 'settled' });
    expect(await (await deliver(world.url, cleared)).json()).toEqual({ received: true, outcome: 'unchanged' });
    expect(await (await deliver(world.url, stripe.event('checkout.session.completed', stripe.pay(session.id)))).json()).toEqual({ received: true, outcome: 'unchanged' });
    expect((await world.api('GET', `/v1/payments/topups/${topup.id}`, { token: agent.token })).body).toMatchObject({ status: 'settled', lotId: expect.stringMatching(/^lot_/) });
    expect(await topupLots(world, agent.id)).toHaveLength(1);
    await world.gw.services.payments!.runJobs();
    expect(await intentState(intentId, agent.token)).toMatchObject({ state: 'cancelled', cancellationReason: 'topup_expired' });
    expect(repoCalls()).toBe(callsBefore);
  });

  it('never credits a session of the other mode: a live payment for a test top-up (or the reverse) changes nothing', async () => {
    const { agent, session } = await retained('stripe-mode');
    const otherMode = await deliver(world.url, stripe.event('checkout.session.completed', { ...stripe.pay(session.id), livemode: true }));
    expect(await otherMode.json()).toEqual({ received: true, outcome: 'mismatch' });
    expect(await topupLots(world, agent.id)).toEqual([]);
  });

  it('answers a correctly signed body that is not a Checkout Session event with 400 invalid_input, not 500', async () => {
    const bodies = [
      'null',
      '{"type":"checkout.session.completed"}',
      '{"id":"evt_x","object":"event","type":"checkout.session.completed","data":null}',
      '{"id":"evt_x","object":"event","type":"checkout.session.completed","data":{"object":null}}',
      '{"id":"evt_x","object":"event","type":"checkout.session.expired","data":{}}',
      '{"id":"evt_x","object":"event","type":"checkout.session.async_payment_succeeded","data":{"object":{"client_reference_id":"top_x"}}}',
      '{"id":"evt_x","object":"event","type":7}',
    ];
    for (const body of bodies) {
      const res = await deliver(world.url, stripe.signed(body));
      expect([res.status, ((await res.json()) as { code: string }).code], body).toEqual([400, 'invalid_input']);
    }
    // Events of other types, whatever they carry, are still acknowledged.
    const other = await deliver(world.url, stripe.signed('{"id":"evt_y","object":"event","type":"invoice.paid","data":null}'));
    expect(await other.json()).toEqual({ received: true, outcome: 'ignored' });
  });

  it("does not credit a signed event whose session is not the top-up's or whose amount differs", async () => {
    const { agent, topup, session } = await retained('stripe-mismatch');
    const other = await retained('stripe-mismatch-other');
    const wrongAmount = await deliver(world.url, stripe.event('checkout.session.completed', { ...stripe.pay(session.id), amount_total: 100 }));
    expect(await wrongAmount.json()).toEqual({ received: true, outcome: 'mismatch' });
    const wrongSession = await deliver(world.url, stripe.event('checkout.session.completed', { ...stripe.pay(other.session.id), client_reference_id: topup.id }));
    expect(await wrongSession.json()).toEqual({ received: true, outcome: 'mismatch' });
    expect(await topupLots(world, agent.id)).toEqual([]);
  });

  // Found from outside: a paid session naming no top-up of this gateway answered as a replay does, and logged nothing.
  it('says when a paid session names a top-up this gateway does not have, and logs it for reconciliation', async () => {
    const { session } = await retained('stripe-unknown');
    const before = errorLines.length;
    const unknown = await deliver(world.url, stripe.event('checkout.session.completed', { ...stripe.pay(session.id), client_reference_id: 'top_not_here', metadata: {} }));
    expect(await unknown.json()).toEqual({ received: true, outcome: 'unknown_topup' });
    expect(errorLines.slice(before)).toEqual([expect.objectContaining({ topupId: 'top_not_here', msg: expect.stringContaining('reconcile it with the provider') })]);
  });
});

describe.runIf(onPostgres())('racing settlement events on two instances (PostgreSQL)', () => {
  let database: TestDatabase;
  let first: World;
  let second: TestGateway;

  beforeAll(async () => {
    database = await openTestDatabase();
    first = await startWorld({ database, env: stripeEnv() });
    second = await startTestGateway({
      database,
      env: { ...stripeEnv(), ACG_HUMAN_ISSUER: first.human.issuer, ACG_AGENT_ISSUER: first.agentIssuer.issuer, ACG_API_KEY_PEPPER: first.gw.config.apiKeyPepper! },
    });
  });
  afterAll(async () => {
    await second?.close();
    await first?.close();
    await database?.drop();
  });

  it('credits once and resumes once when completed and async_payment_succeeded race, each delivered to both instances', async () => {
    const agent = await first.createAgent('race@example.com', 'race-agent');
    const execute = await first.api('POST', '/v1/services/execute', { token: agent.token, key: 'race-exec', body: repoRequest });
    expect(execute.status).toBe(402);
    const session = stripe.pay(stripe.sessionForTopup(execute.body.payment.id).id);
    const callsBefore = repoCalls();
    const completed = stripe.event('checkout.session.completed', session);
    const succeeded = stripe.event('checkout.session.async_payment_succeeded', session);
    const responses = await Promise.all(
      [first.url, second.url].flatMap((url) => [completed, succeeded, completed, succeeded].map((delivery) => deliver(url, delivery))),
    );
    const outcomes = await Promise.all(responses.map(async (res) => ((await res.json()) as { outcome: string }).outcome));
    expect(outcomes.filter((outcome) => outcome === 'settled')).toHaveLength(1);
    expect(outcomes.filter((outcome) => outcome !== 'settled').every((outcome) => outcome === 'unchanged')).toBe(true);
    // Both instances' resume jobs run too; the intent still runs once.
    await Promise.all([first.gw.services.payments!.runJobs(), second.services.payments!.runJobs()]);
    const intent = await waitFor(async () => (await first.api('GET', `/v1/intents/${execute.body.intentId}`, { token: agent.token })).body, {
      until: (body) => body.state !== 'pending',
      what: 'the intent to run',
      timeoutMs: 15_000,
      intervalMs: 50,
    });
    expect(intent.state).toBe('executed');
    await Promise.all([first.gw.services.payments!.runJobs(), second.services.payments!.runJobs()]);
    expect(repoCalls() - callsBefore).toBe(1);
    const { rows } = await database.db.query<{ n: bigint }>(`SELECT count(*)::bigint AS n FROM credit_lots WHERE agent_id = $1 AND source = 'topup'`, [agent.id]);
    expect(rows[0]!.n).toBe(1n);
    const captured = await database.db.query<{ n: bigint }>(`SELECT count(*)::bigint AS n FROM holds WHERE agent_id = $1 AND state = 'captured'`, [agent.id]);
    expect(captured.rows[0]!.n).toBe(1n);
  });
});

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log('SKIPPED: chromium not installed (the approval page after Checkout); .ci/run installs it');

// Found from outside: back from Checkout (its success_url is the approval page with ?checkout=success), the page still
// said "waiting for your answer" and offered Pay and Decline until Stripe's webhook arrived.
describe.runIf(hasChromium)('the approval page after Stripe Checkout', () => {
  it('says the payment waits for Stripe, offers nothing to answer, and shows the top-up settled once Stripe confirms; after a cancel it offers both', async () => {
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = await browser.newPage();
      // The page signs in with a session token of the owner's issuer (this gateway has no dev login route).
      const open = async (topupId: string, ownerToken: string, returned: string) => {
        await page.goto(`${world.url}/payments/topups/${topupId}?checkout=${returned}`);
        await page.getByLabel('Session token', { exact: false }).fill(ownerToken);
        await page.getByRole('button', { name: 'Sign in' }).click();
        await page.locator('#details').waitFor();
      };
      const { agent, topup, session } = await retained('stripe-return');
      await open(topup.id, agent.ownerToken, 'success');
      await page.locator('#state', { hasText: 'paid at Stripe Checkout: waiting for Stripe to confirm the payment' }).waitFor();
      await page.getByText('You paid at Stripe Checkout.', { exact: false }).waitFor();
      expect(await page.locator('#decline').isHidden()).toBe(true);
      expect(await page.locator('#checkout').isHidden()).toBe(true);
      expect(await (await deliver(world.url, stripe.event('checkout.session.completed', stripe.pay(session.id)))).json()).toEqual({ received: true, outcome: 'settled' });
      // The page looks again by itself.
      await page.getByText('This top-up is settled.').waitFor({ timeout: 10_000 });

      const left = await retained('stripe-cancel');
      await open(left.topup.id, left.agent.ownerToken, 'cancel');
      await page.getByText('You left Stripe Checkout without paying: pay now, or decline.').waitFor();
      expect(await page.locator('#decline').isVisible()).toBe(true);
      expect(await page.locator('#checkout').isVisible()).toBe(true);
    } finally {
      await browser.close();
    }
  }, 60_000);
});
