// End to end on the embedded default: the real `acg serve` in dev mode (PGlite, built-in issuers, the local
// approval provider it defaults to). An agent without credit calls execute and gets 402 with an approval
// URL; its owner opens that page in headless Chromium, signs in and approves; the gateway runs the retained
// intent once by itself; its result and receipt are readable; the balance is the top-up minus one credit.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../support/database.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { spawnGateway, type GatewayProcess } from '../support/process.ts';
import { waitFor } from '../support/wait.ts';
import { repoRequest } from './helpers.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log('SKIPPED: chromium not installed; .ci/run installs it');

const ownerEmail = 'topup-owner@example.com';
const agentSubject = 'topup-agent';

/** The dev base URL names the port, so the process gets a known free one rather than 0. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function call(url: string, method: string, route: string, token: string, body?: unknown, key?: string) {
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

describe.runIf(hasChromium && !onPostgres())('a top-up approved in the browser resumes the retained intent (embedded default)', () => {
  let gateway: GatewayProcess;
  let github: FakeGitHub;
  let browser: Browser;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'acg-topup-e2e-'));
    github = await startFakeGitHub();
    gateway = await spawnGateway({ ACG_DATA_DIR: dataDir, PORT: String(await freePort()), ACG_GITHUB_API_URL: github.url, DATABASE_URL: '', ACG_PAYMENT_PROVIDER: '' }, { timeoutMs: 120_000 });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await gateway?.kill();
    await github?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('402 with an approval URL → the owner approves in Chromium → the intent runs once → balance is the top-up minus one credit', async () => {
    const { url } = gateway;
    const ownerToken = await devLogin(url, 'human', { email: ownerEmail });
    const created = await call(url, 'POST', '/v1/owner/agents', ownerToken, { name: 'Top-up agent', identity: { issuer: `${url}/dev/issuers/agent`, subject: agentSubject } }, 'e2e-agent');
    expect(created.status).toBe(201);
    const agentId = created.body.id as string;
    const agentToken = await devLogin(url, 'agent', { subject: agentSubject, ownerEmail });

    const first = await call(url, 'POST', '/v1/services/execute', agentToken, repoRequest, 'e2e-exec');
    expect(first.status).toBe(402);
    expect(first.body).toMatchObject({ code: 'approval_required', charged: false, payment: { provider: 'local', status: 'pending_approval' } });
    const approvalUrl = first.body.payment.approvalUrl as string;
    expect(approvalUrl).toBe(`${url}/payments/topups/${first.body.payment.id}`);
    const callsBefore = github.requests.length;

    const context = await browser.newContext();
    const page = await context.newPage();
    const cspViolations: string[] = [];
    page.on('console', (message) => {
      if (/Content.Security.Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    try {
      await page.goto(approvalUrl);
      await page.locator('#signin input[name="email"]').fill(ownerEmail);
      await page.locator('#signin button').click();
      await page.locator('#details').waitFor({ state: 'visible', timeout: 15_000 });
      await expect(page.locator('#agent').textContent()).resolves.toBe(agentId);
      await expect(page.locator('#agent-name').textContent()).resolves.toBe('Top-up agent');
      await expect(page.locator('#amount').textContent()).resolves.toBe('500.00 credits ($5.00)');
      await expect(page.locator('#reason').textContent()).resolves.toContain(first.body.intentId);
      // A reason is quoted, line breaks kept, and labelled with whose words it is: this top-up is execute's own, so the
      // gateway's (found from outside: the gateway's text was shown as "the agent's own words").
      await expect(page.locator('#reason').evaluate((element) => [element.tagName, getComputedStyle(element).whiteSpace])).resolves.toEqual(['Q', 'pre-line']);
      await expect(page.locator('#reason-label').textContent()).resolves.toMatch(/^Reason, in the gateway's words/);
      await expect(page.locator('dt', { hasText: "the agent's own words" }).count()).resolves.toBe(0);
      // Why $5.00 for a 1-credit action: said in the reason, and the intent's price shown beside it (found from outside).
      await expect(page.locator('#reason').textContent()).resolves.toContain('The gateway asks for at least $5.00 when credit is short, more than this price');
      await expect(page.locator('#intent').textContent()).resolves.toContain('price 1.00 credits ($0.01)');
      await expect(page.locator('#intent').textContent()).resolves.toContain('github-public repository.get');
      await expect(page.locator('#intent').textContent()).resolves.toMatch(/^GitHub public repositories: /);
      await expect(page.locator('#mode').textContent()).resolves.toContain('test mode');
      // When it stops waiting, as a purchase's page says (found from outside: a top-up's page did not).
      expect(await page.locator('#expires').isVisible()).toBe(true);
      await expect(page.locator('#expires').textContent()).resolves.toBe(await page.evaluate((s) => new Date(s * 1000).toLocaleString(undefined, { timeZoneName: 'short' }), first.body.payment.expiresAt as number));
      await page.locator('#approve').click();
      await page.locator('#status', { hasText: 'This top-up is settled.' }).waitFor({ timeout: 15_000 });
      await expect(page.locator('#state').textContent()).resolves.toBe('settled');
      // Focus moves to what was said, not to <body> with the button it was on hidden (found from outside).
      await expect(page.evaluate(() => document.activeElement?.id)).resolves.toBe('status');
      // Said in the success colour, not the error red the page uses for refusals.
      const colour = () => page.locator('#status').evaluate((element) => getComputedStyle(element).color);
      expect(await colour()).toBe('rgb(26, 127, 55)');
      await page.locator('#status').evaluate((element) => element.setAttribute('class', 'error'));
      expect(await colour()).toBe('rgb(154, 31, 31)');
      expect(await page.locator('#approve').isHidden()).toBe(true);
      expect(cspViolations).toEqual([]);
    } finally {
      await context.close();
    }

    const intent = await waitFor(async () => (await call(url, 'GET', `/v1/intents/${first.body.intentId}`, agentToken)).body, {
      until: (body) => body.state !== 'pending',
      what: 'the retained intent to run',
      timeoutMs: 20_000,
      intervalMs: 50,
    });
    expect(intent).toMatchObject({
      state: 'executed',
      intent: { ...repoRequest, agentId },
      result: { fullName: 'octocat/Hello-World' },
      receipt: { state: 'captured', capturedUc: '1000000', agentId },
    });
    const replay = await call(url, 'POST', '/v1/services/execute', agentToken, repoRequest, 'e2e-exec');
    expect(replay.status).toBe(200);
    expect(replay.body.executionId).toBe(intent.executionId);
    expect(github.requests.length - callsBefore).toBe(1);

    const balance = await call(url, 'GET', `/v1/owner/agents/${agentId}/balance`, ownerToken);
    expect(balance.body).toMatchObject({ availableUc: '499000000', capturedUc: '1000000', grantedUc: '500000000', heldUc: '0' });
  }, 120_000);
});
