// End to end against the real `acg serve` in dev mode (built-in issuers, the dev DNS zone; the run's database):
// an agent whose mandate asks its owner above 2 credits mints a voucher of 3 credits and gets 402 with the
// purchase's approval URL; its owner opens that page in headless Chromium, signs in with the dev login, sees
// the agent, the merchant, the offer and the amount, and approves; the agent's retry with the same
// Idempotency-Key gets the voucher, a second retry replays it, and the ledger shows one hold. A second
// purchase the owner declines on the page takes nothing, and its retry gets the stored refusal. An x402
// authorize above the threshold shows the owner the resource it pays for, as text.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { operatorTokenFile } from '../../src/operator/credential.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { spawnGateway, type GatewayProcess } from '../support/process.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log('SKIPPED: chromium not installed; .ci/run installs it');

const ownerEmail = 'purchase-owner@example.com';
const agentSubject = 'purchase-agent';

/** The dev base URL names the port, so the process gets a known free one rather than 0. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

async function call(url: string, method: string, route: string, token: string, body?: unknown, key?: string): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (key) headers['idempotency-key'] = key;
  const res = await fetch(`${url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
}

async function devLogin(url: string, kind: 'human' | 'agent', body: Record<string, string>): Promise<string> {
  const res = await fetch(`${url}/dev/issuers/${kind}/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return ((await res.json()) as { token: string }).token;
}

describe.runIf(hasChromium)('a purchase above the approval threshold, approved and declined in the browser', () => {
  let gateway: GatewayProcess;
  let browser: Browser;
  let dataDir: string;
  let dropDatabase: (() => Promise<void>) | undefined;
  let url: string;
  let ownerToken: string;
  let agentToken: string;
  let agentId: string;
  let merchantId: string;
  let offerId: string;
  let counter = 0;

  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'acg-purchase-e2e-'));
    let databaseUrl = '';
    if (onPostgres()) ({ url: databaseUrl, drop: dropDatabase } = await createPostgresDatabase());
    gateway = await spawnGateway({ ACG_DATA_DIR: dataDir, PORT: String(await freePort()), DATABASE_URL: databaseUrl, ACG_PAYMENT_PROVIDER: '' }, { timeoutMs: 120_000 });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    url = gateway.url;
    const operator = readFileSync(operatorTokenFile(dataDir), 'utf8').trim();
    ownerToken = await devLogin(url, 'human', { email: ownerEmail });
    const created = await call(url, 'POST', '/v1/owner/agents', ownerToken, { name: 'Purchase agent', identity: { issuer: `${url}/dev/issuers/agent`, subject: agentSubject } }, 'e2e-agent');
    expect(created.status).toBe(201);
    agentId = created.body.id;
    agentToken = await devLogin(url, 'agent', { subject: agentSubject, ownerEmail });
    expect((await call(url, 'POST', '/v1/operator/credit-grants', operator, { agentId, amountUc: '20000000' }, 'e2e-grant')).status).toBe(201);
    const merchant = await call(url, 'POST', '/v1/merchants', ownerToken, { name: 'Ada Books', domain: 'ada-books.example.com', categories: ['books'] }, 'e2e-merchant');
    merchantId = merchant.body.merchant.id;
    expect((await call(url, 'POST', '/dev/dns/records', operator, { merchantId })).status).toBe(200);
    expect((await call(url, 'POST', `/v1/merchants/${merchantId}/verify-domain`, ownerToken, undefined, 'e2e-verify')).body.verified).toBe(true);
    offerId = (await call(url, 'POST', `/v1/merchants/${merchantId}/offers`, ownerToken, { name: 'One e-book', category: 'books', priceUc: '3000000' }, 'e2e-offer')).body.id;
    const mandate = await call(url, 'PUT', `/v1/owner/agents/${agentId}/mandate`, ownerToken, { approvalAboveUc: '2000000' }, 'e2e-mandate');
    expect(mandate.status).toBe(200);
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await gateway?.kill();
    await dropDatabase?.();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const mint = (key: string, offer = offerId) => call(url, 'POST', '/v1/vouchers', agentToken, { offerId: offer }, key);
  const holds = async () => (await call(url, 'GET', `/v1/owner/agents/${agentId}/holds`, ownerToken)).body.redemptions as Array<{ id: string; amountUc: string }>;

  /** Opens the approval page in a fresh browser context, signs in with the dev login, and hands the page over. */
  async function onThePage<T>(approvalUrl: string, act: (page: Page) => Promise<T>): Promise<T> {
    const context = await browser.newContext();
    const page = await context.newPage();
    const cspViolations: string[] = [];
    page.on('console', (message) => {
      if (/Content.Security.Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    try {
      await page.goto(approvalUrl);
      await expect(page.title()).resolves.toBe('Approve a purchase · Agent Credit Gateway');
      await page.locator('#signin input[name="email"]').fill(ownerEmail);
      await page.locator('#signin button').click();
      await page.locator('#details').waitFor({ state: 'visible', timeout: 15_000 });
      const result = await act(page);
      expect(cspViolations).toEqual([]);
      return result;
    } finally {
      await context.close();
    }
  }

  it('402 with the approval URL → the owner approves in Chromium → the retry returns the voucher once, a second retry replays it, one hold', async () => {
    const key = `e2e-approve-${++counter}`;
    const asked = await mint(key);
    expect(asked.status).toBe(402);
    expect(asked.body).toMatchObject({ code: 'approval_required', reason: 'above_approval_threshold', intent: { offerId, agentId } });
    const approvalUrl = asked.body.approvalUrl as string;
    expect(approvalUrl).toBe(`${url}/payments/purchases/${asked.body.intentId}`);
    expect(await holds()).toEqual([]);

    await onThePage(approvalUrl, async (page) => {
      await expect(page.locator('#agent-name').textContent()).resolves.toBe('Purchase agent');
      await expect(page.locator('#agent').textContent()).resolves.toBe(agentId);
      await expect(page.locator('#merchant-name').textContent()).resolves.toBe('Ada Books');
      await expect(page.locator('#merchant').textContent()).resolves.toBe('ada-books.example.com');
      await expect(page.locator('#offer-name').textContent()).resolves.toBe('One e-book');
      await expect(page.locator('#offer').textContent()).resolves.toBe(offerId);
      await expect(page.locator('#amount').textContent()).resolves.toBe('3.00 credits ($0.03)');
      await expect(page.locator('#state').textContent()).resolves.toBe('waiting for your answer');
      expect(await page.locator('#reason').isHidden()).toBe(true);
      expect(await page.locator('#stopped').isHidden()).toBe(true);
      // An agent its owner registered: no parent is named.
      expect(await page.locator('#agent-parent').isHidden()).toBe(true);
      // A voucher names no resource: the row is not shown.
      expect(await page.locator('#resource-row').isHidden()).toBe(true);
      await page.locator('#approve').click();
      await page.locator('#status', { hasText: 'This purchase is approved.' }).waitFor({ timeout: 15_000 });
      await expect(page.locator('#state').textContent()).resolves.toBe('approved');
      expect(await page.locator('#status').evaluate((element) => getComputedStyle(element).color)).toBe('rgb(26, 127, 55)');
      expect(await page.locator('#approve').isHidden()).toBe(true);
      // An approval not used yet may still be withdrawn, and the button says so; the deadline is the retry's.
      expect(await page.locator('#decline').isVisible()).toBe(true);
      await expect(page.locator('#decline').textContent()).resolves.toBe('Withdraw the approval');
      await expect(page.locator('#expires-label').textContent()).resolves.toBe('The agent retries before');
      await expect(page.locator('#status').textContent()).resolves.toMatch(/^This purchase is approved\. Purchase agent's retry of the purchase, before .+, takes the hold; withdraw the approval to refuse it\.$/);
    });

    const retry = await mint(key);
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.body.redemption).toMatchObject({ agentId, offerId, amountUc: '3000000', state: 'held' });
    const replay = await mint(key);
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.voucher).toBe(retry.body.voucher);
    expect(await holds()).toMatchObject([{ id: retry.body.redemption.id, amountUc: '3000000' }]);
    expect((await call(url, 'GET', `/v1/owner/agents/${agentId}/balance`, ownerToken)).body).toMatchObject({ heldUc: '3000000', availableUc: '17000000' });
    expect((await call(url, 'GET', `/v1/payments/purchases/${asked.body.intentId}`, agentToken)).body).toMatchObject({ status: 'used', holdId: retry.body.redemption.id, resource: null });
  }, 120_000);

  it('an x402 authorize above the threshold: the owner sees the resource it pays for, as text, and approves it', async () => {
    // One offer may price many routes: the resource is what says what the agent buys. Markup in it stays text.
    const resource = 'https://api.ada-books.example.com/report?q=<b>bold</b>&n="1"';
    const body = { amount: '2500000', asset: 'microcredit', resource, payTo: merchantId, offerId };
    const key = `e2e-x402-${++counter}`;
    const asked = await call(url, 'POST', '/x402/authorize', agentToken, body, key);
    expect(asked.status).toBe(402);
    expect(asked.body).toMatchObject({ code: 'approval_required', purchase: { operation: 'authorizeX402Payment', resource } });
    // The owner's list says it too (found from outside: only the record and the page did).
    const listed = (await call(url, 'GET', '/v1/owner/approvals', ownerToken)).body.approvals.find((a: { id: string }) => a.id === asked.body.intentId);
    expect(listed).toMatchObject({ kind: 'purchase', resource, agentEffectiveStatus: 'active' });
    await onThePage(asked.body.approvalUrl, async (page) => {
      await expect(page.locator('#offer-name').textContent()).resolves.toBe('One e-book');
      await expect(page.locator('#amount').textContent()).resolves.toBe('2.50 credits ($0.025)');
      expect(await page.locator('#resource-row').isVisible()).toBe(true);
      await expect(page.locator('#resource').textContent()).resolves.toBe(resource);
      expect(await page.locator('#details b').count()).toBe(0);
      await page.locator('#approve').click();
      await page.locator('#status', { hasText: 'This purchase is approved.' }).waitFor({ timeout: 15_000 });
    });
    const held = await call(url, 'POST', '/x402/authorize', agentToken, body, key);
    expect(held.status).toBe(201);
    expect(held.body.redemption).toMatchObject({ agentId, offerId, amountUc: '2500000', state: 'held' });
    const used = await call(url, 'GET', `/v1/payments/purchases/${asked.body.intentId}`, ownerToken);
    expect(used.body).toMatchObject({ status: 'used', resource, holdId: held.body.redemption.id });
  }, 120_000);

  it('the owner declines in Chromium → nothing is taken and the retry gets the stored refusal', async () => {
    const before = await holds();
    const key = `e2e-decline-${++counter}`;
    const asked = await mint(key);
    expect(asked.status).toBe(402);
    await onThePage(asked.body.approvalUrl, async (page) => {
      await expect(page.locator('#expires-label').textContent()).resolves.toBe('Expires');
      await page.locator('#decline').click();
      await page.locator('#status', { hasText: 'This purchase is declined.' }).waitFor({ timeout: 15_000 });
      expect(await page.locator('#approve').isHidden()).toBe(true);
      expect(await page.locator('#decline').isHidden()).toBe(true);
      // Closed: no deadline shown (found from outside: "Expires" stayed on answered requests).
      expect(await page.locator('#expires-row').isHidden()).toBe(true);
    });
    // A page read while the purchase waited, approved meanwhile elsewhere: its Decline says so and withdraws nothing
    // (found from outside: a stale tab's Decline withdrew the approval just given in another).
    const stale = await mint(`e2e-decline-${++counter}`);
    await onThePage(stale.body.approvalUrl, async (page) => {
      await expect(page.locator('#state').textContent()).resolves.toBe('waiting for your answer');
      expect((await call(url, 'POST', `/v1/payments/purchases/${stale.body.intentId}/approve`, ownerToken, {}, `e2e-approve-elsewhere-${counter}`)).status).toBe(200);
      await page.locator('#decline').click();
      await page.locator('#status', { hasText: 'Not declined: the purchase for Purchase agent was approved meanwhile' }).waitFor({ timeout: 15_000 });
      await expect(page.locator('#state').textContent()).resolves.toBe('approved');
      await expect(page.locator('#decline').textContent()).resolves.toBe('Withdraw the approval');
    });
    expect((await call(url, 'GET', `/v1/payments/purchases/${stale.body.intentId}`, ownerToken)).body.status).toBe('approved');
    const retry = await mint(key);
    expect(retry.status).toBe(409);
    expect(retry.body).toMatchObject({ code: 'conflict', reason: 'purchase_declined' });
    expect((await mint(key)).headers.get('idempotent-replayed')).toBe('true');
    expect(await holds()).toEqual(before);
  }, 120_000);

  it('a lapsed sign-in asks for a new one on the page, and a refusal shows what became of the purchase (found from outside: a dead end)', async () => {
    const asked = await mint(`e2e-lapsed-${++counter}`);
    expect(asked.status).toBe(402);
    await onThePage(asked.body.approvalUrl, async (page) => {
      // The gateway refuses the lapsed session as it does (401, the JWT library's words in `detail`).
      await page.route('**/approve', (route) =>
        route.fulfill({ status: 401, contentType: 'application/problem+json', body: JSON.stringify({ code: 'unauthorized', status: 401, detail: 'invalid human identity token: "exp" claim timestamp check failed' }) }),
        { times: 1 },
      );
      await page.locator('#approve').click();
      await page.locator('#status', { hasText: 'Your sign-in has lapsed: sign in again, then approve the purchase.' }).waitFor({ timeout: 15_000 });
      expect(await page.locator('#signin').isVisible()).toBe(true);
      await page.locator('#signin input[name="email"]').fill(ownerEmail);
      await page.locator('#signin button').click();
      await page.locator('#signin').waitFor({ state: 'hidden', timeout: 15_000 });
      await page.locator('#approve').click();
      await page.locator('#status', { hasText: 'This purchase is approved.' }).waitFor({ timeout: 15_000 });
      expect(await page.locator('#status').getAttribute('role')).toBe('status');
    });

    // Declined elsewhere while the page showed it pending: approving is refused, and the page shows it declined.
    const other = await mint(`e2e-lapsed-${++counter}`);
    await onThePage(other.body.approvalUrl, async (page) => {
      const declined = await call(url, 'POST', `/v1/payments/purchases/${other.body.intentId}/decline`, ownerToken, {}, `e2e-decline-elsewhere-${counter}`);
      expect(declined.status).toBe(200);
      await page.locator('#approve').click();
      await page.locator('#status', { hasText: /^Not done: / }).waitFor({ timeout: 15_000 });
      // A refusal is an alert and has the focus, which the hidden Approve had (found from outside: on <body>, said politely).
      expect(await page.locator('#status').getAttribute('role')).toBe('alert');
      expect(await page.evaluate(() => document.activeElement?.id)).toBe('status');
      await expect(page.locator('#state').textContent()).resolves.toBe('declined');
      expect(await page.locator('#approve').isHidden()).toBe(true);
    });
  }, 120_000);

  it('says before the owner decides that the agent is frozen, as the console does (found from outside: a plain Approve)', async () => {
    const asked = await mint(`e2e-frozen-${++counter}`);
    expect(asked.status).toBe(402);
    expect((await call(url, 'POST', `/v1/owner/agents/${agentId}/freeze`, ownerToken, {}, `e2e-freeze-${counter}`)).status).toBe(200);
    try {
      await onThePage(asked.body.approvalUrl, async (page) => {
        await page.locator('#stopped').waitFor({ state: 'visible', timeout: 15_000 });
        await expect(page.locator('#stopped').textContent()).resolves.toBe(
          'Purchase agent is frozen: this purchase cannot be approved until it is unfrozen (its retry would be refused). You can decline it.',
        );
        // No Approve the gateway can only refuse (found from outside: the button stayed); Decline stays.
        expect(await page.locator('#approve').isHidden()).toBe(true);
        expect(await page.locator('#decline').isVisible()).toBe(true);
      });
    } finally {
      expect((await call(url, 'POST', `/v1/owner/agents/${agentId}/unfreeze`, ownerToken, {}, `e2e-unfreeze-${counter}`)).status).toBe(200);
    }
  }, 120_000);

  it("names a delegate's parent beside the name the delegate chose, another agent's here (found from outside)", async () => {
    const allowed = await call(url, 'PUT', `/v1/owner/agents/${agentId}/mandate`, ownerToken, { approvalAboveUc: '2000000', delegation: { allowed: true, maxDepth: 1 } }, 'e2e-delegation');
    expect(allowed.status).toBe(200);
    const subject = `${agentSubject}-delegate`;
    const created = await call(url, 'POST', `/v1/agents/${agentId}/delegates`, agentToken, { name: 'Purchase agent', identity: { issuer: `${url}/dev/issuers/agent`, subject } }, 'e2e-delegate');
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const delegateToken = await devLogin(url, 'agent', { subject, ownerEmail });
    const asked = await call(url, 'POST', '/v1/vouchers', delegateToken, { offerId }, `e2e-delegate-mint-${++counter}`);
    expect(asked.status).toBe(402);
    await onThePage(asked.body.approvalUrl as string, async (page) => {
      await expect(page.locator('#agent-name').textContent()).resolves.toBe('Purchase agent');
      await expect(page.locator('#agent').textContent()).resolves.toBe(created.body.id);
      await page.locator('#agent-parent').waitFor({ state: 'visible', timeout: 15_000 });
      await expect(page.locator('#agent-parent').textContent()).resolves.toBe(`, a delegate of Purchase agent ${agentId}, which named it; it spends its root's credit`);
    });
  }, 60_000);

  it('a purchase at the threshold is not asked about', async () => {
    const small = (await call(url, 'POST', `/v1/merchants/${merchantId}/offers`, ownerToken, { name: 'A short story', category: 'books', priceUc: '2000000' }, 'e2e-small')).body.id;
    const res = await mint(`e2e-small-${++counter}`, small);
    expect(res.status).toBe(200);
  }, 60_000);
});
