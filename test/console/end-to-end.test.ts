// The owner console end to end, in headless Chromium against a gateway on the embedded default (dev mode:
// built-in issuers, local top-up approvals), driven as a person would: by role and visible text. One browser,
// one signed-in context reused page after page; the steps run in order and build on each other.
//   sign in as the dev owner → register an agent → credit from the operator route → a daily budget → the
//   agent mints over the API and the bar moves → a top-up approved in the console raises the balance → a
//   merchant key's secret shown once, gone after a reload → a capture receipt verified in the browser →
//   the token lapses (the gateway's clock moves) and the next action signs in again without a click →
//   frozen by keyboard, the next mint is refused → a second owner sees none of it → axe and the keyboard on
//   every page → no token in a URL or in storage → a cold load's transfer (its time is measured by
//   `npm run bench`, never by a test).
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Dialog, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { credits } from '../../console/src/money.ts';
import { emitEvents, type EventToEmit } from '../../src/events/outbox.ts';
import { insertDelivery } from '../../src/events/store.ts';
import { newId } from '../../src/platform/ids.ts';
import { onPostgres } from '../support/database.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log('SKIPPED: chromium not installed; .ci/run installs it');

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const OPERATOR_TOKEN = 'console-e2e-operator-credential-0123456789';
const OWNER = 'ada@example.com';
const OTHER_OWNER = 'bob@example.com';
const AGENT_SUBJECT = 'scout-e2e';

let gw: TestGateway;
let dataDir: string;
let browser: Browser;
let context: BrowserContext;
let page: Page;
/** Every URL the signed-in context requested or navigated to, and every access token it was given. */
const urlsSeen: string[] = [];
const accessTokens: string[] = [];
const cspViolations: string[] = [];
let tokenRequests = 0;
let consentPagesShown = 0;

// What the steps learn, for the later ones.
let agentId = '';
let offerId = '';
let holdId = '';
let merchantId = '';
let merchantSecret = '';

async function api(method: string, route: string, token: string | undefined, body?: unknown, key?: string) {
  const headers: Record<string, string> = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (key) headers['idempotency-key'] = key;
  const res = await fetch(`${gw.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: (await res.json().catch(() => undefined)) as any };
}

async function devLogin(kind: 'human' | 'agent', body: Record<string, string>): Promise<string> {
  const { body: answer } = await api('POST', `/dev/issuers/${kind}/login`, undefined, body);
  return answer.token as string;
}

const agentToken = () => devLogin('agent', { subject: AGENT_SUBJECT, ownerEmail: OWNER });
let keys = 0;
const key = (label: string) => `console-e2e-${label}-${++keys}`;

function watch(target: Page): void {
  target.on('console', (message) => {
    if (/Content.Security.Policy|Trusted.?Type/i.test(message.text())) cspViolations.push(message.text());
  });
  target.on('request', (request) => urlsSeen.push(request.url()));
  target.on('framenavigated', (frame) => {
    urlsSeen.push(frame.url());
    if (new URL(frame.url()).pathname === '/oauth/consent') consentPagesShown++;
  });
  target.on('response', async (response) => {
    if (new URL(response.url()).pathname !== '/oauth/token') return;
    tokenRequests++;
    const body = (await response.json().catch(() => ({}))) as { access_token?: string };
    if (body.access_token) accessTokens.push(body.access_token);
  });
}

/** Signs in through the console's button and the consent page's dev form; ends on the agents page. */
async function signIn(target: Page, email: string): Promise<void> {
  await target.goto(`${gw.url}/console`);
  await target.getByRole('button', { name: 'Sign in', exact: true }).click();
  await target.waitForURL((url) => url.pathname === '/oauth/consent');
  const form = target.locator('form[data-provider="human"]');
  await form.locator('input[name="email"]').fill(email);
  await form.locator('button').click();
  await target.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
}

async function nav(name: string): Promise<void> {
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name, exact: true }).click();
}

/** Whether a reload or a closed tab would ask first: a page's beforeunload handler cancels the event. */
const leavingAsks = () => page.evaluate(() => !window.dispatchEvent(new Event('beforeunload', { cancelable: true })));

async function openAgent(): Promise<void> {
  await nav('Agents');
  await page.getByRole('link', { name: 'Scout', exact: true }).click();
  await page.getByRole('heading', { name: 'Scout', level: 1 }).waitFor();
}

/** Serious and critical axe violations of the page as it is now (axe runs through the DevTools protocol, outside the page's CSP). */
async function axeViolations(target: Page): Promise<string[]> {
  await target.evaluate(AXE_SOURCE);
  return target.evaluate(async () => {
    type Found = Array<{ id: string; impact: string; nodes: Array<{ target: string[] }> }>;
    const axe = (window as unknown as { axe: { run(context: Document, options: object): Promise<{ violations: Found; incomplete: Found }> } }).axe;
    const result = await axe.run(document, { resultTypes: ['violations', 'incomplete'] });
    // A label on an element whose role takes none is left "to review" by axe, yet screen readers drop it (found from
    // outside: the landing page's command blocks): counted as a violation here.
    const prohibited = result.incomplete.filter((v) => v.id === 'aria-prohibited-attr');
    return [...result.violations, ...prohibited].filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  });
}

/** The visible controls that Tab never reaches, going from the first one. */
async function unreachableByKeyboard(target: Page): Promise<string[]> {
  const count = await target.evaluate(() => {
    const controls = [...document.querySelectorAll<HTMLElement>('a[href], button, input, select, textarea, summary')].filter(
      // checkVisibility: not hidden, and not inside a closed <details> (whose content Chrome skips).
      (element) => element.checkVisibility({ visibilityProperty: true }) && !(element as HTMLButtonElement).disabled,
    );
    controls.forEach((element, index) => element.setAttribute('data-kb', String(index)));
    const reached: string[] = [];
    (window as unknown as { reachedByTab: string[] }).reachedByTab = reached;
    document.addEventListener('focusin', (event) => reached.push((event.target as Element).getAttribute('data-kb') ?? ''));
    // Tab goes on from the first control, whatever was focused before.
    controls[0]?.focus();
    return controls.length;
  });
  // Some controls take several presses (a date-time field has one stop per part), so press on until all were reached.
  const allReached = () => target.evaluate((n) => new Set((window as unknown as { reachedByTab: string[] }).reachedByTab).size >= n, count);
  for (let press = 0; press < count * 4 + 20; press++) {
    await target.keyboard.press('Tab');
    if (press % 10 === 9 && (await allReached())) break;
  }
  return target.evaluate(() => {
    const reached = new Set((window as unknown as { reachedByTab: string[] }).reachedByTab);
    const missed = [...document.querySelectorAll<HTMLElement>('[data-kb]')].filter((element) => !reached.has(element.getAttribute('data-kb')!));
    for (const element of document.querySelectorAll('[data-kb]')) element.removeAttribute('data-kb');
    return missed.map((element) => `${element.tagName.toLowerCase()} "${(element.textContent ?? '').trim().slice(0, 40)}"`);
  });
}

/** Tabs to the control whose text is `name` and presses Enter on it: an action taken with the keyboard alone. */
async function pressByKeyboard(target: Page, name: string): Promise<void> {
  await target.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
  for (let press = 0; press < 200; press++) {
    await target.keyboard.press('Tab');
    if ((await target.evaluate(() => document.activeElement?.textContent?.trim() ?? '')) === name) {
      await target.keyboard.press('Enter');
      return;
    }
  }
  throw new Error(`Tab never reached "${name}"`);
}

/** How many lines each element's text is drawn on (runs in the page, for `evaluateAll`). */
const lineCounts = (elements: Element[]): number[] =>
  elements.map((element) => {
    const range = document.createRange();
    range.selectNodeContents(element);
    return new Set([...range.getClientRects()].filter((rect) => rect.width > 0).map((rect) => Math.round(rect.top))).size;
  });

/** The text of the focused element, or `<body>` when the focus fell to the page's body. */
const focused = (target: Page) => target.evaluate(() => (document.activeElement === document.body ? '<body>' : (document.activeElement?.textContent ?? '').trim()));

/** Presses Tab until the focused control reads `name`, and says how many presses it took (at most `most`). */
async function tabTo(target: Page, name: string, most: number): Promise<number> {
  for (let press = 1; press <= most; press++) {
    await target.keyboard.press('Tab');
    if ((await focused(target)) === name) return press;
  }
  throw new Error(`"${name}" was not within ${most} Tabs`);
}

beforeAll(async () => {
  if (!hasChromium || onPostgres()) return;
  dataDir = mkdtempSync(path.join(tmpdir(), 'acg-console-e2e-'));
  gw = await startTestGateway({
    env: {
      ACG_DATA_DIR: dataDir,
      ACG_PAYMENT_PROVIDER: 'local',
      ACG_OPERATOR_TOKEN_SHA256: createHash('sha256').update(OPERATOR_TOKEN).digest('hex'),
    },
  });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  // Under the test's own timeout, so a wait that fails says which locator it waited for.
  context.setDefaultTimeout(15_000);
  page = await context.newPage();
  watch(page);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe.runIf(hasChromium && !onPostgres())('the owner console in a browser', () => {
  it('says so when the person declines on the consent page, and offers the sign-in again (it read "Sign-in failed")', async () => {
    await page.goto(`${gw.url}/console`);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.waitForURL((url) => url.pathname === '/oauth/consent');
    await page.getByRole('button', { name: 'Decline and return to the application' }).click();
    await page.getByText('You declined the sign-in on the consent page; nothing was granted.').waitFor();
    await page.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
    expect(accessTokens).toHaveLength(0);
  });

  it('signs in as the dev owner through the consent page and lands on the agents page, with the code gone from the address bar', async () => {
    await signIn(page, OWNER);
    expect(new URL(page.url()).pathname).toBe('/console');
    expect(page.url()).not.toContain('code=');
    await page.getByText(`Signed in as ${OWNER}`).waitFor();
    expect(accessTokens).toHaveLength(1);
  });

  it('registers an agent', async () => {
    await page.getByText('Register an agent').click();
    await page.getByLabel('Name').fill('Scout');
    await page.getByLabel('Identity subject').fill(AGENT_SUBJECT);
    await page.getByRole('button', { name: 'Register agent' }).click();
    await page.getByText('Registered Scout.').waitFor();
    await page.getByRole('link', { name: 'Scout', exact: true }).waitFor();
    const owner = await devLogin('human', { email: OWNER });
    const { body } = await api('GET', '/v1/owner/agents', owner);
    expect(body.agents).toHaveLength(1);
    agentId = body.agents[0].id;
  });

  it('shows the credit an operator grants (through the operator route, from the test)', async () => {
    const granted = await api('POST', '/v1/operator/credit-grants', OPERATOR_TOKEN, { agentId, amountUc: '5000000' }, key('grant'));
    expect(granted.status).toBe(201);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.locator('.card.agent').getByText('5.00 credits').first().waitFor();
  });

  it('sets a daily budget, and its bar moves when the agent mints over the API', async () => {
    await openAgent();
    await page.getByRole('button', { name: 'Add a budget' }).click();
    await page.getByLabel('Budget 1 limit (credits)').fill('three');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Budget 1 (daily): enter an amount in credits, like 5 or 0.25').waitFor();
    // A decimal comma is refused, not read as a thousands separator ("2,5" was saved as 25 credits).
    await page.getByLabel('Budget 1 limit (credits)').fill('2,5');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Budget 1 (daily): write decimals with a dot, like 2.5').waitFor();
    // A limit of 0 and a category with a capital letter are said in the form's words, not as the API's JSON
    // pointer and pattern (found from outside: "body/budgets/0/category must match pattern …").
    await page.getByLabel('Budget 1 limit (credits)').fill('0');
    await page.getByLabel('Budget 1 covers').selectOption('category');
    await page.getByLabel('Budget 1 category').fill('Books');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Budget 1 (daily): its limit must be more than 0.').waitFor();
    await page.getByRole('alert').getByText('Budget 1 (daily): "Books" is not a category name', { exact: false }).waitFor();
    // What only the API can tell (no such merchant) names the budget as the form does.
    await page.getByLabel('Budget 1 limit (credits)').fill('3');
    await page.getByLabel('Budget 1 covers').selectOption('merchantId');
    await page.getByRole('combobox', { name: 'Budget 1 merchant', exact: true }).selectOption({ label: 'Another merchant: type its id or domain' });
    await page.getByLabel('Budget 1 merchant id or domain').fill('mer_nonexistent');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Budget 1 merchant id "mer_nonexistent"', { exact: false }).waitFor();
    await page.getByLabel('Budget 1 covers').selectOption('all');
    await page.getByLabel('Budget 1 limit (credits)').fill('3');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText('Saved: mandate version 2.').waitFor();
    // The button was disabled while it saved: the focus comes back to it, not to the page's body, from where the next
    // Tab would start at the top (found from outside).
    await expect.poll(() => focused(page)).toBe('Save mandate');
    await page.getByText('0.00 of 3.00 credits spent').waitFor();
    // The reset moment names its zone: it is midnight in the mandate's zone, shown in the browser's (found from
    // outside: a bare time read as either).
    await expect(page.locator('.budget-text time').first().textContent()).resolves.toMatch(/ (UTC|GMT([+-]\d{1,2}(:\d\d)?)?)$/);
    // A category typed, then "all spending" chosen again: the budget is a second daily budget over all spending,
    // refused as one (found from outside: the hidden category let it through).
    await page.getByRole('button', { name: 'Add a budget' }).click();
    await page.getByLabel('Budget 2 limit (credits)').fill('4');
    await page.getByLabel('Budget 2 covers').selectOption('category');
    await page.getByLabel('Budget 2 category').fill('books');
    await page.getByLabel('Budget 2 covers').selectOption('all');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Budget 2 (daily): another budget already covers the same spending over the same period; remove one.').waitFor();
    // The earlier save's "Saved" is gone: beside the refusal it read as this save's outcome (found from outside).
    expect(await page.getByText('Saved: mandate version 2.').count()).toBe(0);
    await page.getByRole('button', { name: 'Remove budget 2' }).click();
    expect(await page.getByRole('meter', { name: 'Daily budget' }).evaluate((meter: HTMLMeterElement) => meter.value)).toBe(0);

    const owner = await devLogin('human', { email: OWNER });
    const merchant = await api('POST', '/v1/merchants', owner, { name: 'Ada Books', domain: 'books-console.example.com', categories: ['books'] }, key('merchant'));
    merchantId = merchant.body.merchant.id;
    await gw.gateway.db.query('UPDATE merchants SET verified = true, verified_at_s = $2 WHERE id = $1', [merchantId, gw.clock.nowS()]);
    const offer = await api('POST', `/v1/merchants/${merchantId}/offers`, owner, { name: 'One e-book', category: 'books', priceUc: '1000000' }, key('offer'));
    offerId = offer.body.id;
    const minted = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, key('mint'));
    expect(minted.status).toBe(200);
    holdId = minted.body.redemption.id;

    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByText('1.00 of 3.00 credits spent').waitFor();
    expect(await page.getByRole('meter', { name: 'Daily budget' }).evaluate((meter: HTMLMeterElement) => meter.value)).toBe(1_000_000);
    // The open hold says when it lapses back to the agent, in a named zone (found from outside: neither was said).
    const held = page.locator('.activity .card').filter({ hasText: holdId });
    await expect(held.textContent()).resolves.toMatch(/; lapses back to the agent at .+ (UTC|GMT([+-]\d{1,2}(:\d\d)?)?) unless the merchant captures it/);
  });

  it('asks before leaving a mandate form with changes not saved, refuses an end already past, and says when the mandate is not in force', async () => {
    const owner = await devLogin('human', { email: OWNER });
    const agentPath = `/console/agents/${agentId}`;
    await openAgent();
    await page.getByLabel('Largest single purchase (credits)').fill('9');
    // The browser's own question guards a reload, a closed tab and a sign-in that leaves the page.
    await expect.poll(leavingAsks).toBe(true);
    const questions: string[] = [];
    const decline = (dialog: Dialog) => { questions.push(dialog.message()); void dialog.dismiss(); };
    page.once('dialog', decline);
    await nav('Approvals');
    page.once('dialog', decline);
    await page.evaluate(() => history.back());
    await expect.poll(() => questions.length).toBe(2);
    expect(questions).toEqual(Array(2).fill('Leave this page? Your changes to the mandate are not saved.'));
    // The page puts its address back once the dialog is answered, which can come after the dialog event on a busy machine.
    await expect.poll(() => new URL(page.url()).pathname).toBe(agentPath);
    expect(await page.getByLabel('Largest single purchase (credits)').inputValue()).toBe('9');
    // An end already past is refused in the form: it would stop every purchase at once.
    await page.getByLabel('Valid until').fill('2020-01-01T00:00');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Valid until is in the past: the agent could buy nothing at all. To stop it spending, freeze it instead.').waitFor();
    // The field it names is marked, described by the message, and has the focus (found from outside: the message sat by
    // Save, the field above it unmarked).
    const until = page.getByLabel('Valid until');
    expect([await until.getAttribute('aria-invalid'), await until.getAttribute('aria-describedby')]).toEqual(['true', 'mandate-problems']);
    expect(await until.evaluate((input) => input === document.activeElement)).toBe(true);
    expect(await page.getByLabel('Largest single purchase (credits)').getAttribute('aria-invalid')).toBeNull();
    // Put back as it was, the form leaves without a question (a question here would be declined and fail the wait).
    await page.getByLabel('Valid until').fill('');
    await page.getByLabel('Largest single purchase (credits)').fill('');
    await expect.poll(leavingAsks).toBe(false);
    await nav('Approvals');
    await page.getByRole('heading', { name: 'Approvals', level: 1 }).waitFor();
    // A half-typed date is no date: refused, not saved as "no limit" (found from outside).
    await nav('Agents');
    await openAgent();
    await page.getByLabel('Valid until').fill('2030-06-01T10:00');
    await page.getByLabel('Valid until').click({ position: { x: 14, y: 10 } });
    await page.keyboard.press('Backspace');
    expect(await page.getByLabel('Valid until').evaluate((input: HTMLInputElement) => input.validity.badInput)).toBe(true);
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Valid until is not a whole date and time: finish it, or clear it for no limit.').waitFor();
    await page.getByLabel('Valid until').fill('');
    await expect.poll(leavingAsks).toBe(false);

    // What the form does not change, a save keeps as it was: an empty allow-list (no merchant) and an end to the second.
    const { agentId: _a, version: _v, createdAt: _c, hash: _h, usage: _u, ...rulesBefore } = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    const endS = gw.clock.nowS() + 30 * 86_400 + 17;
    expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, { ...rulesBefore, notAfter: endS, merchants: { allow: [], deny: [] } }, key('narrow-mandate'))).status).toBe(200);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await expect.poll(() => page.getByLabel('Merchants it may buy from').inputValue()).toBe('only');
    expect(await page.getByLabel('Only these merchants').inputValue()).toBe('');
    await page.getByLabel('Largest single purchase (credits)').fill('4');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText('Saved: mandate version', { exact: false }).waitFor();
    expect((await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body).toMatchObject({ notAfter: endS, merchants: { allow: [], deny: [] }, caps: { perHoldUc: '4000000' } });

    // A version saved elsewhere while the form holds changes: the changes stay, the form says so, and discarding them shows it.
    await page.getByLabel('Largest single purchase (credits)').fill('7');
    const { agentId: _a2, version: _v2, createdAt: _c2, hash: _h2, usage: _u2, ...rulesNow } = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    const elsewhere = await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, { ...rulesNow, allowedCategories: ['books', 'music'] }, key('elsewhere'));
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByText(`Version ${elsewhere.body.version} was saved elsewhere while you edited version ${elsewhere.body.version - 1}`, { exact: false }).waitFor();
    expect(await page.getByLabel('Largest single purchase (credits)').inputValue()).toBe('7');
    await page.getByRole('button', { name: `Discard my changes and show version ${elsewhere.body.version}` }).click();
    await expect.poll(() => page.getByLabel('Largest single purchase (credits)').inputValue()).toBe('4');
    expect(await page.getByLabel('Allowed categories').inputValue()).toBe('books, music');
    expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, rulesBefore, key('widen-mandate'))).status).toBe(200);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await expect.poll(() => page.getByLabel('Merchants it may buy from').inputValue()).toBe('any');
    await nav('Approvals');
    await page.getByRole('heading', { name: 'Approvals', level: 1 }).waitFor();

    // A mandate ended over the API: its agent's page says that every purchase is refused, beside its Active badge.
    const { agentId: _agent, version: _version, createdAt: _created, hash: _hash, usage: _usage, ...rules } = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, { ...rules, notAfter: gw.clock.nowS() - 60 }, key('end-mandate'))).status).toBe(200);
    await nav('Agents');
    await page.locator('.card.agent').getByText('Its mandate ended', { exact: false }).waitFor();
    await openAgent();
    await page.getByText('Its mandate ended', { exact: false }).waitFor();
    await page.getByText('every purchase is refused. Change "Valid until" in its mandate to let it spend again.', { exact: false }).waitFor();
    expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, { ...rules, notAfter: null }, key('reopen-mandate'))).status).toBe(200);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByRole('heading', { name: 'Credit lots' }).waitFor();
    await expect.poll(() => page.getByText('Its mandate ended', { exact: false }).count()).toBe(0);
  });

  it('approves a top-up and the balance rises', async () => {
    // One the owner asked for too: each card says whose words its reason is (found from outside: every reason read as the agent's).
    const owner = await devLogin('human', { email: OWNER });
    const ownAsk = await api('POST', '/v1/payments/topups', owner, { agentId, amountUsdCents: 100, reason: 'The owner tops up ahead of a busy week of e-books for the family. '.repeat(2) }, key('topup-owner'));
    expect(ownAsk.status).toBe(200);
    await nav('Approvals');
    await page.locator('.card.approval dt', { hasText: "Reason, in the owner's words" }).waitFor();
    expect(await page.locator('.card.approval dt', { hasText: "the agent's own words" }).count()).toBe(0);
    expect((await api('POST', `/v1/payments/topups/${ownAsk.body.id}/decline`, owner, {}, key('topup-owner-decline'))).status).toBe(200);
    const asked = await api('POST', '/v1/payments/topups', await agentToken(), { agentId, amountUsdCents: 100, reason: 'More credit for the e-books the owner asked for. '.repeat(3) }, key('topup'));
    expect(asked.status).toBe(200);
    await nav('Agents');
    await nav('Approvals');
    await page.getByRole('heading', { name: 'Top-up for Scout' }).waitFor();
    await page.locator('.card.approval dt', { hasText: "Reason, in the agent's own words" }).waitFor();
    await page.getByText('100.00 credits ($1.00)').waitFor();
    // The card names the agent by its id too, which no other agent can take (a delegate may take its name).
    await page.locator('.card.approval').getByText(agentId, { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Approve the top-up for Scout (100.00 credits)' }).click();
    const dialog = page.getByRole('dialog', { name: 'Confirm it is you' });
    await dialog.getByLabel('Owner email').waitFor();
    expect(await dialog.getByLabel('Owner email').inputValue()).toBe(OWNER);
    await dialog.getByRole('button', { name: 'Confirm' }).click();
    await page.getByText('Approved: Scout received 100.00 credits.').waitFor();
    await nav('Agents');
    await page.locator('.card.agent').getByText('104.00 credits').waitFor();
  });

  it('forgets a confirmation by another person, so the next answer asks again instead of failing until it lapses', async () => {
    const asked = await api('POST', '/v1/payments/topups', await agentToken(), { agentId, amountUsdCents: 100, reason: 'A second top-up, for the next batch of e-books the owner asked for this week. '.repeat(2) }, key('topup-2'));
    expect(asked.status).toBe(200);
    // The owner's confirmation of the test before lapses, so this answer asks for one.
    gw.clock.advance(11 * 60 * 1000);
    await nav('Approvals');
    await page.getByRole('heading', { name: 'Top-up for Scout' }).waitFor();
    await page.getByRole('button', { name: 'Decline the top-up for Scout (100.00 credits)' }).click();
    const dialog = page.getByRole('dialog', { name: 'Confirm it is you' });
    await dialog.getByLabel('Owner email').fill('someone-else@example.com');
    await dialog.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('alert').getByText('Not found for the person who confirmed', { exact: false }).waitFor();
    await page.getByRole('button', { name: 'Decline the top-up for Scout (100.00 credits)' }).click();
    await dialog.getByLabel('Owner email').fill(OWNER);
    await dialog.getByRole('button', { name: 'Confirm' }).click();
    await page.getByText('Declined the top-up of Scout.').waitFor();
  });

  it('says that what a page shows may no longer be true when its Refresh fails (found from outside: "Nothing waits for you" while a top-up waited)', async () => {
    await nav('Approvals');
    await page.getByText('Nothing waits for you.').waitFor();
    const asked = await api('POST', '/v1/payments/topups', await agentToken(), { agentId, amountUsdCents: 100, reason: 'A third top-up, asked while the owner was offline, for the e-books. '.repeat(2) }, key('topup-3'));
    expect(asked.status).toBe(200);
    await page.context().setOffline(true);
    try {
      await page.getByRole('button', { name: 'Refresh' }).click();
      await page.locator('p.error').getByText('may no longer be true', { exact: false }).waitFor();
    } finally {
      await page.context().setOffline(false);
    }
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByRole('heading', { name: 'Top-up for Scout' }).waitFor();
    // (Once both lists are read, the frame's live region says "Updated." in place of the failure.)
    await expect.poll(() => page.getByText('may no longer be true', { exact: false }).count()).toBe(0);
    await page.getByRole('button', { name: 'Decline the top-up for Scout (100.00 credits)' }).click();
    const dialog = page.getByRole('dialog', { name: 'Confirm it is you' });
    if (await dialog.isVisible()) {
      await dialog.getByLabel('Owner email').fill(OWNER);
      await dialog.getByRole('button', { name: 'Confirm' }).click();
    }
    await page.getByText('Declined the top-up of Scout.').waitFor();
  });

  it('keeps the focus on Refresh and says its outcome once, through the frame, not once per card (found from outside: focus fell to the body, and one outage was 5 alerts)', async () => {
    const announced = page.locator('#announced');
    const refreshByKeyboard = async () => {
      await page.getByRole('button', { name: 'Refresh' }).focus();
      await page.keyboard.press('Enter');
    };
    for (const [link, heading] of [['Agents', 'Agents'], ['Approvals', 'Approvals'], ['Spending', 'Spending over the last 30 days']] as const) {
      await nav(link);
      await page.getByRole('heading', { name: heading, level: 1 }).waitFor();
      await expect.poll(() => page.getByRole('button', { name: 'Refresh' }).getAttribute('aria-busy')).toBe('false');
      await refreshByKeyboard();
      await expect.poll(() => announced.textContent()).toMatch(/^Updated\.\s?$/);
      expect(await focused(page)).toBe('Refresh');
    }
    await nav('Agents');
    await page.locator('li.card.agent').first().locator('dl.figures').waitFor();
    await page.context().setOffline(true);
    try {
      await refreshByKeyboard();
      await expect.poll(() => announced.textContent()).toMatch(/^Not updated: The gateway could not be reached\. .*may no longer be true/);
      expect(await focused(page)).toBe('Refresh');
      // Said again the second time, though its words are the same.
      const first = await announced.textContent();
      await expect.poll(() => page.getByRole('button', { name: 'Refresh' }).getAttribute('aria-busy')).toBe('false');
      await refreshByKeyboard();
      await expect.poll(() => announced.textContent()).not.toBe(first);
      expect(await announced.textContent()).toMatch(/^Not updated: The gateway could not be reached\./);
      expect(await focused(page)).toBe('Refresh');
      await expect.poll(() => page.locator('li.card.agent p.error').count()).toBeGreaterThan(0);
      // One announcement for the page (the frame's), none per card.
      expect(await page.getByRole('alert').count()).toBe(0);
      expect(await page.locator('[role=status]', { hasText: 'could not be reached' }).count()).toBe(1);
    } finally {
      await page.context().setOffline(false);
    }
    await refreshByKeyboard();
    await expect.poll(() => announced.textContent()).toMatch(/^Updated\./);
    expect(await page.locator('p.error', { hasText: 'could not be reached' }).count()).toBe(0);
    // A new page starts with nothing said.
    await nav('Approvals');
    await page.getByRole('heading', { name: 'Approvals', level: 1 }).waitFor();
    await expect.poll(() => announced.textContent()).toMatch(/^\s*$/);
  });

  it('says on the agent page the rules in force its form does not edit: the rolling cap and the allowed services (found from outside: they refused purchases with no reason shown)', async () => {
    const owner = await devLogin('human', { email: OWNER });
    const before = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    const { agentId: _a, version: _v, createdAt: _c, hash: _h, usage: _u, ...rules } = before;
    const kept = { ...rules, caps: { ...rules.caps, perPeriodUc: '30000000', periodS: 3600 }, allowedServices: ['github-public'] };
    expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, kept, key('kept-rules-on'))).status).toBe(200);
    onTestFinished(async () => {
      expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, rules, key('kept-rules-off'))).status).toBe(200);
    });
    await openAgent();
    await page.reload();
    await page.getByText('at most 30.00 credits in any 1 hour; built-in services limited to github-public.', { exact: false }).waitFor();
    // The next test begins where the one before this left the page.
    await nav('Approvals');
    await page.getByRole('heading', { name: 'Approvals', level: 1 }).waitFor();
  });

  it('declines nothing when the purchase was approved meanwhile elsewhere, and says so (found from outside: a stale tab withdrew the approval)', async () => {
    const owner = await devLogin('human', { email: OWNER });
    const before = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    const { agentId: _a, version: _v, createdAt: _c, hash: _h, usage: _u, ...rules } = before;
    expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, { ...rules, approvalAboveUc: '500000' }, key('approval-on'))).status).toBe(200);
    onTestFinished(async () => {
      expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, rules, key('approval-off'))).status).toBe(200);
    });
    const mintKey = key('mint-above-threshold');
    const asked = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, mintKey);
    expect([asked.status, asked.body.code]).toEqual([402, 'approval_required']);
    await page.reload();
    await page.getByRole('heading', { name: 'Purchase for Scout' }).waitFor();
    // Another tab (here the API) approves it while this page still shows it waiting.
    const purchaseId = asked.body.intentId;
    expect(purchaseId).toMatch(/^pur_/);
    expect((await api('POST', `/v1/payments/purchases/${purchaseId}/approve`, owner, {}, key('approve-elsewhere'))).status).toBe(200);
    await page.getByRole('button', { name: 'Decline the purchase for Scout' }).click();
    // The confirmation of the test before may have lapsed: then the dialog asks for it first.
    const dialog = page.getByRole('dialog', { name: 'Confirm it is you' });
    const said = page.getByText("Not declined: the purchase for Scout was approved meanwhile (in another tab, on its approval page, or by the agent's retry).");
    await dialog.or(said).first().waitFor();
    if (await dialog.isVisible()) {
      await dialog.getByLabel('Owner email').fill(OWNER);
      await dialog.getByRole('button', { name: 'Confirm' }).click();
    }
    await said.waitFor();
    expect((await api('GET', `/v1/payments/purchases/${purchaseId}`, owner)).body.status).toBe('approved');
    // Approved and not used yet, it is listed apart, where it can be withdrawn (found from outside: only the API showed
    // it); withdrawn, the agent's retry is refused.
    const standing = page.getByRole('region', { name: 'Approved, not used yet' });
    await standing.getByRole('heading', { name: 'Purchase for Scout, approved' }).waitFor();
    expect(await standing.getByRole('button', { name: /^Approve/ }).count()).toBe(0);
    await standing.getByRole('button', { name: 'Withdraw the approval for Scout (1.00 credits at Ada Books)' }).click();
    await dialog.or(page.getByText("Withdrew the approval of Scout's purchase: its retry will be refused.")).first().waitFor();
    if (await dialog.isVisible()) {
      await dialog.getByLabel('Owner email').fill(OWNER);
      await dialog.getByRole('button', { name: 'Confirm' }).click();
    }
    await page.getByText("Withdrew the approval of Scout's purchase: its retry will be refused.").waitFor();
    await standing.waitFor({ state: 'detached' });
    expect((await api('GET', `/v1/payments/purchases/${purchaseId}`, owner)).body.status).toBe('declined');
    const retry = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, mintKey);
    expect([retry.status, retry.body.reason]).toEqual([409, 'purchase_declined']);

    // Declined elsewhere while this page shows it waiting: approving it here is refused, the page's notice says so, and
    // the card leaves (found from outside: it stayed with live buttons, under an older success notice).
    const second = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, key('mint-declined-elsewhere'));
    expect([second.status, second.body.code]).toEqual([402, 'approval_required']);
    await page.getByRole('button', { name: 'Refresh' }).click();
    const card = page.getByRole('heading', { name: 'Purchase for Scout', exact: true });
    await card.waitFor();
    expect((await api('POST', `/v1/payments/purchases/${second.body.intentId}/decline`, owner, {}, key('decline-elsewhere'))).status).toBe(200);
    await page.getByRole('button', { name: 'Approve the purchase for Scout (1.00 credits at Ada Books)' }).click();
    const notApproved = page.locator('p.notice').filter({ hasText: /^Not approved: / });
    await dialog.or(notApproved).first().waitFor();
    if (await dialog.isVisible()) {
      await dialog.getByLabel('Owner email').fill(OWNER);
      await dialog.getByRole('button', { name: 'Confirm' }).click();
    }
    await notApproved.waitFor();
    await card.waitFor({ state: 'detached' });
    expect((await api('GET', `/v1/payments/purchases/${second.body.intentId}`, owner)).body.status).toBe('declined');
  });

  it("says on a purchase's card that its agent is frozen, and why it cannot be approved (found from outside: the card did not say)", async () => {
    const owner = await devLogin('human', { email: OWNER });
    const before = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    const { agentId: _a, version: _v, createdAt: _c, hash: _h, usage: _u, ...rules } = before;
    expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, { ...rules, approvalAboveUc: '500000' }, key('frozen-card-on'))).status).toBe(200);
    const asked = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, key('mint-frozen-card'));
    expect([asked.status, asked.body.code]).toEqual([402, 'approval_required']);
    expect((await api('POST', `/v1/owner/agents/${agentId}/freeze`, owner, {}, key('frozen-card-freeze'))).status).toBe(200);
    onTestFinished(async () => {
      await api('POST', `/v1/payments/purchases/${asked.body.intentId}/decline`, owner, {}, key('frozen-card-decline'));
      expect((await api('POST', `/v1/owner/agents/${agentId}/unfreeze`, owner, {}, key('frozen-card-unfreeze'))).status).toBe(200);
      expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, rules, key('frozen-card-off'))).status).toBe(200);
    });
    await nav('Approvals');
    await page.reload();
    const card = page.locator('li.approval', { hasText: 'Scout is frozen: this purchase cannot be approved until it is unfrozen' });
    await card.waitFor();
    await card.locator('.badge', { hasText: 'Frozen' }).waitFor();
    // No Approve the gateway can only refuse (found from outside: it stayed enabled); the reason is its description.
    const approve = card.getByRole('button', { name: /^Approve the purchase/ });
    expect(await approve.isDisabled()).toBe(true);
    await expect(approve.getAttribute('aria-describedby').then((id) => page.locator(`[id="${id}"]`).textContent())).resolves.toMatch(/^Scout is frozen: this purchase cannot be approved/);
    expect(await card.getByRole('button', { name: /^Decline the purchase/ }).isEnabled()).toBe(true);
  });

  it('keeps the keyboard focus where the person was after an approval is answered, and after a budget row is removed (found from outside: it fell to the body)', async () => {
    for (const n of [1, 2]) {
      const asked = await api('POST', '/v1/payments/topups', await agentToken(), { agentId, amountUsdCents: 100, reason: `Top-up number ${n} for the e-books the owner asked for, answered by keyboard. `.repeat(2) }, key('topup-keyboard'));
      expect(asked.status).toBe(200);
    }
    await nav('Approvals');
    await page.reload();
    await expect.poll(() => page.getByRole('heading', { name: 'Top-up for Scout' }).count()).toBe(2);
    // Two cards alike: their buttons' names say when each was asked, and which it is (asked the same minute), so a
    // screen reader's list of buttons tells them apart (found from outside: word for word the same).
    const alike = page.getByRole('button', { name: /^Decline the top-up for Scout \(100\.00 credits, asked .+, top_/ });
    await expect.poll(() => alike.count()).toBe(2);
    expect(new Set(await alike.evaluateAll((buttons) => buttons.map((button) => button.getAttribute('aria-label')))).size).toBe(2);
    // What is drawn stays as it was.
    expect(await alike.first().textContent()).toBe('Decline the top-up for Scout (100.00 credits)');
    const links = page.getByRole('link', { name: /^Open its approval page: the top-up for Scout \(100\.00 credits, asked / });
    await expect.poll(() => links.count()).toBe(2);
    const dialog = page.getByRole('dialog', { name: 'Confirm it is you' });
    const confirmIfAsked = async (done: ReturnType<Page['getByText']>) => {
      await dialog.or(done).first().waitFor();
      if (!(await dialog.isVisible())) return;
      await dialog.getByLabel('Owner email').fill(OWNER);
      await dialog.getByRole('button', { name: 'Confirm' }).click();
    };
    await pressByKeyboard(page, 'Decline the top-up for Scout (100.00 credits)');
    await confirmIfAsked(page.getByText('Declined the top-up of Scout.'));
    await page.getByText('Declined the top-up of Scout.').waitFor();
    // The card left; the one now in its place has the focus, on its heading (not on a button a second Enter would press).
    await expect.poll(() => page.getByRole('heading', { name: 'Top-up for Scout' }).count()).toBe(1);
    await expect.poll(() => focused(page)).toBe('Top-up for Scout');
    expect(await tabTo(page, 'Decline the top-up for Scout (100.00 credits)', 3)).toBe(3);
    await page.keyboard.press('Enter');
    await confirmIfAsked(page.getByText('Nothing waits for you.'));
    await page.getByText('Nothing waits for you.').waitFor();
    // None left: the outcome has the focus.
    await expect.poll(() => focused(page)).toBe('Declined the top-up of Scout.');

    // "Remove budget 2" takes its own button away: the focus goes to the row now in its place, then to "Add a budget".
    await openAgent();
    await page.getByRole('button', { name: 'Add a budget' }).click();
    await page.getByRole('button', { name: 'Add a budget' }).click();
    await page.getByLabel('Budget 3 period').selectOption('week');
    await pressByKeyboard(page, 'Remove budget 2');
    await expect.poll(() => page.getByLabel('Budget 2 period').evaluate((select) => select === document.activeElement)).toBe(true);
    expect(await page.getByLabel('Budget 2 period').inputValue()).toBe('week');
    await page.getByRole('button', { name: 'Remove budget 2' }).focus();
    await page.keyboard.press('Enter');
    await expect.poll(() => focused(page)).toBe('Add a budget');
    expect(await page.getByLabel('Budget 2 period').count()).toBe(0);
    await expect.poll(leavingAsks).toBe(false);
  });

  it("creates a merchant key whose secret is shown once, with a copy button, and not again after a reload", async () => {
    await nav('Merchants');
    await page.getByRole('link', { name: 'Ada Books' }).click();
    await page.getByRole('heading', { name: 'Ada Books', level: 1 }).waitFor();
    await page.getByText('Create an API key').click();
    await page.getByLabel('Key name').fill('shop server');
    await page.getByLabel(/capture holds/).check();
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByText('Created the key shop server.').waitFor();
    merchantSecret = (await page.locator('.secret-value').textContent())!;
    expect(merchantSecret).toMatch(/^acg_mk_/);
    await page.getByRole('button', { name: 'Copy secret key' }).waitFor();
    // The secret is gone once the page is left: the browser asks first.
    expect(await leavingAsks()).toBe(true);
    await page.reload();
    await page.getByRole('cell', { name: 'shop server', exact: true }).waitFor();
    expect(await page.getByText(merchantSecret).count()).toBe(0);
    expect(await page.content()).not.toContain(merchantSecret);
    // Revoking a key asks first; then the key is refused.
    await page.getByText('Create an API key').click();
    await page.getByLabel('Key name').fill('old server');
    await page.getByLabel(/capture holds/).check();
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByText('Created the key old server.').waitFor();
    const oldSecret = (await page.locator('.secret-value').textContent())!;
    await page.getByRole('button', { name: 'Revoke old server' }).click();
    const question = page.getByRole('dialog', { name: 'Revoke the key old server?' });
    await question.getByText('A revoked key cannot be restored', { exact: false }).waitFor();
    await question.getByRole('button', { name: 'Revoke the key' }).click();
    await page.getByText('Revoked old server.').waitFor();
    await page.getByRole('cell', { name: 'Revoked' }).waitFor();
    expect((await api('GET', `/v1/me`, oldSecret)).status).toBe(401);
    // Its secret still shown, a console link asks before leaving; confirmed, it leaves.
    page.once('dialog', (dialog) => void dialog.accept());
    await nav('Agents');
    await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
  });

  it('verifies a capture receipt in the browser against the JWKS and shows its claims', async () => {
    const captured = await api('POST', `/v1/redemptions/${holdId}/capture`, merchantSecret, { amountUc: '1000000' }, key('capture'));
    expect(captured.status).toBe(200);
    await openAgent();
    await page.getByRole('button', { name: 'Verify capture receipt' }).click();
    await page.getByText(/^Signature valid: signed by this gateway/).waitFor();
    const claims = page.locator('.claims');
    await claims.getByText('redemption_id').waitFor();
    await claims.getByText(holdId).waitFor();
    await claims.getByText('captured_uc').waitFor();
  });

  it("shows as Spent what stays spent after a refund, as the Spending page does (found from outside: it showed what was captured before refunds)", async () => {
    const owner = await devLogin('human', { email: OWNER });
    const refunds = await api('POST', `/v1/merchants/${merchantId}/api-keys`, owner, { name: 'refunds', scopes: ['redemptions:refund'] }, key('refund-key'));
    expect(refunds.status).toBe(201);
    const refunded = await api('POST', `/v1/redemptions/${holdId}/refunds`, refunds.body.secretKey, { amountUc: '400000' }, key('refund'));
    expect(refunded.status).toBe(201);
    const balance = (await api('GET', `/v1/owner/agents/${agentId}/balance`, owner)).body;
    expect([balance.capturedUc, balance.refundedUc]).toEqual(['1000000', '400000']);
    await openAgent();
    const spent = page.locator('.figures > div').filter({ has: page.getByText('Spent', { exact: true }) }).locator('dd');
    await expect.poll(() => spent.textContent()).toBe('0.60 credits 1.00 captured, 0.40 refunded');
    await nav('Spending');
    await page.getByText('Scout: 0.60 credits').first().waitFor();
    expect((await api('GET', '/v1/owner/spending?days=30', owner)).body.agents[0].totalUc).toBe('600000');
    // Its figures' table says their unit (found from outside: bare "0.60" under the agent's name, and no caption).
    // (In a closed <details>: hidden until opened.)
    const figures = page.getByRole('table', { name: 'Credits spent per agent and UTC day', includeHidden: true });
    expect(await figures.locator('caption').count()).toBe(1);
    expect(await figures.getByRole('columnheader', { name: 'Scout (credits)', exact: true, includeHidden: true }).count()).toBe(1);
    // The chart is drawn at the width it is shown at, so its 12-unit labels are 12 px on a phone too (found from
    // outside: drawn at 720 and scaled down, they were about 6 px at 375 px).
    const labelPx = () => page.locator('.chart svg[role="img"] text').first().evaluate((text: SVGTextElement) => text.getBoundingClientRect().height);
    try {
      await page.setViewportSize({ width: 375, height: 667 });
      await expect.poll(labelPx).toBeGreaterThanOrEqual(12);
      // At 320 px, the width WCAG 1.4.10 reflows to, the agents' cards and their budget bars fit (found from outside:
      // the page scrolled sideways by 18 px).
      await page.setViewportSize({ width: 320, height: 640 });
      await nav('Agents');
      await page.getByRole('meter').first().waitFor();
      expect(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth)).toBe(true);
      // An amount in a table is one line, and a heading of it not cut inside its word; the table scrolls in its own
      // box, not the page (found from outside: "1,200.00 credits" over five lines, "S/ou/rce").
      await page.getByRole('link', { name: 'Scout', exact: true }).click();
      const lots = page.getByRole('region', { name: 'Credit lots' });
      await lots.locator('td .amount').first().waitFor();
      const counts = await lots.locator('td .amount, th').evaluateAll(lineCounts);
      expect(counts.length).toBeGreaterThan(6);
      expect(counts.filter((lines) => lines !== 1)).toEqual([]);
      expect(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth)).toBe(true);
    } finally {
      await page.setViewportSize({ width: 1280, height: 900 });
    }
  });

  it('after the token lapses (the gateway clock moves 11 minutes), the next action signs in again without a click and succeeds; frozen by keyboard, the next mint is refused', async () => {
    const before = { tokens: tokenRequests, consents: consentPagesShown };
    gw.clock.advance(11 * 60 * 1000);
    await nav('Agents');
    await pressByKeyboard(page, 'Freeze Scout');
    await page.getByText('Scout is frozen: its next purchase will be refused.').waitFor();
    // The focus stays on the control, now Unfreeze (or, were it gone, on the outcome), never the page's body (found from outside).
    await expect.poll(() => focused(page)).toMatch(/^(Unfreeze Scout|Scout is frozen: its next purchase will be refused\.)/);
    expect(tokenRequests).toBe(before.tokens + 1);
    expect(consentPagesShown).toBe(before.consents);
    await page.getByText('Frozen', { exact: true }).waitFor();
    const refused = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, key('mint-frozen'));
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('FROZEN');
  });

  it('shows a second owner none of the first owner’s agents or merchants', async () => {
    const other = await browser.newContext();
    const page2 = await other.newPage();
    try {
      await signIn(page2, OTHER_OWNER);
      await page2.getByText('No agents yet: register one above.').waitFor();
      expect(await page2.getByText('Scout').count()).toBe(0);
      await page2.goto(`${gw.url}/console/agents/${agentId}`);
      await page2.getByText('Not found (or not yours).').first().waitFor();
      await page2.goto(`${gw.url}/console/merchants`);
      await page2.getByText('No merchants yet.').waitFor();
      await page2.goto(`${gw.url}/console/merchants/${merchantId}`);
      await page2.getByText('Not found (or not yours).').first().waitFor();
      await page2.goto(`${gw.url}/console/spending`);
      await page2.getByText('No spending in the last 30 days.').waitFor();
      expect(await page2.getByText('Ada Books').count()).toBe(0);
    } finally {
      await other.close();
    }
  });

  it('has no serious or critical axe violation, and Tab reaches every control, on every page', async () => {
    const pages: Array<[string, () => Promise<void>]> = [
      ['agents', async () => nav('Agents').then(() => page.getByRole('link', { name: 'Scout', exact: true }).waitFor())],
      ['agent', openAgent],
      ['approvals', async () => nav('Approvals').then(() => page.getByText('Nothing waits for you.').waitFor())],
      ['spending', async () => nav('Spending').then(() => page.getByRole('img', { name: /Spending per day/ }).waitFor())],
      ['merchants', async () => nav('Merchants').then(() => page.getByRole('link', { name: 'Ada Books' }).waitFor())],
      ['merchant', async () => page.getByRole('link', { name: 'Ada Books' }).click().then(() => page.getByRole('heading', { name: 'API keys' }).waitFor())],
      ['owner webhook', async () => nav('Owner webhook').then(() => page.getByRole('heading', { name: 'Deliveries' }).waitFor())],
    ];
    const found: Record<string, { axe: string[]; keyboard: string[] }> = {};
    for (const [name, open] of pages) {
      await open();
      found[name] = { axe: await axeViolations(page), keyboard: await unreachableByKeyboard(page) };
    }
    const outside = await browser.newContext();
    try {
      const signedOut = await outside.newPage();
      await signedOut.goto(`${gw.url}/console`);
      await signedOut.getByRole('button', { name: 'Sign in', exact: true }).waitFor();
      found['sign-in'] = { axe: await axeViolations(signedOut), keyboard: await unreachableByKeyboard(signedOut) };
      await signedOut.goto(`${gw.url}/`);
      found.landing = { axe: await axeViolations(signedOut), keyboard: await unreachableByKeyboard(signedOut) };
      // On a phone its code blocks scroll sideways: each must be reachable by keyboard to be read (found from outside).
      await signedOut.setViewportSize({ width: 375, height: 667 });
      found['landing on a phone'] = { axe: await axeViolations(signedOut), keyboard: await unreachableByKeyboard(signedOut) };
    } finally {
      await outside.close();
    }
    for (const [name, result] of Object.entries(found)) expect({ name, ...result }).toEqual({ name, axe: [], keyboard: [] });
    expect(Object.keys(found)).toHaveLength(10);
  }, 90_000);

  it("lists the agent's delegates on its page, each with its budget bar, linked to its own page", async () => {
    const owner = await devLogin('human', { email: OWNER });
    await openAgent();
    const { agentId: _agent, version: _version, createdAt: _created, hash: _hash, usage: _usage, ...rules } = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    const allowed = await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, { ...rules, delegation: { allowed: true, maxDepth: 1 } }, key('allow-delegates'));
    expect(allowed.status).toBe(200);
    // The page still shows the version before: its save would overwrite the change, so it is refused, and the form
    // shows the new version.
    // The refusal reloads the mandate; the form is filled again only once that answer is in (under load the fill
    // came first, and the save went out on the old version again).
    const reloaded = page.waitForResponse((response) => response.request().method() === 'GET' && new URL(response.url()).pathname === `/v1/owner/agents/${agentId}/mandate`);
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText(`Not saved: the mandate changed since this page showed it (version ${allowed.body.version - 1}, now ${allowed.body.version})`, { exact: false }).waitFor();
    await reloaded;
    // The form is filled again from the new version in an effect after the answer's render: typed before that, the
    // change was wiped by the refill and the save found nothing to change (flaky, 2 runs in 4).
    await page.locator(`form.mandate[data-version="${allowed.body.version}"]`).waitFor();
    // Saved from the new version with a change, the mandate keeps the delegation that version allows (the form shows
    // it). (A save that changes nothing writes no version.)
    await page.getByLabel('Largest single purchase (credits)').fill('6');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText(`Saved: mandate version ${allowed.body.version + 1}.`).waitFor();
    // Saved again unchanged: nothing is written, and the page says so rather than "Saved" with the same number.
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText(`No change: mandate version ${allowed.body.version + 1} is in force as it was.`).waitFor();
    expect((await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body.version).toBe(allowed.body.version + 1);
    expect((await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body.delegation).toEqual({ allowed: true, maxDepth: 1 });
    // The alert thresholds and the levels of delegates are on the form (found from outside: only the API set them).
    const alertAt = page.getByLabel('Alert at', { exact: false });
    const levels = page.getByLabel('Levels of delegates', { exact: false });
    expect(await alertAt.inputValue()).toBe('80, 100');
    expect(await levels.inputValue()).toBe('1');
    await alertAt.fill('150');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByRole('alert').getByText('Alert at: each threshold is a whole percentage from 1 to 100', { exact: false }).waitFor();
    await alertAt.fill('90, 50, 90');
    await levels.fill('2');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText(`Saved: mandate version ${allowed.body.version + 2}.`).waitFor();
    const widened = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    expect([widened.alertThresholds, widened.delegation]).toEqual([[50, 90], { allowed: true, maxDepth: 2 }]);
    await alertAt.fill('80, 100');
    await levels.fill('1');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText(`Saved: mandate version ${allowed.body.version + 3}.`).waitFor();
    const back = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    expect([back.alertThresholds, back.delegation]).toEqual([[80, 100], { allowed: true, maxDepth: 1 }]);
    const scout = (await api('GET', `/v1/owner/agents/${agentId}`, owner)).body;
    // Scout was frozen above, and a frozen agent registers no delegate.
    expect((await api('POST', `/v1/owner/agents/${agentId}/unfreeze`, owner, {}, key('unfreeze'))).status).toBe(200);
    const buyer = await api(
      'POST',
      `/v1/agents/${agentId}/delegates`,
      owner,
      { name: 'Buyer', identity: { issuer: scout.identity.issuer, subject: 'buyer-e2e' }, mandate: { budgets: [{ id: 'daily', limitUc: '2000000', period: 'day' }] } },
      key('delegate'),
    );
    expect(buyer.status).toBe(201);
    await openAgent();
    const delegates = page.getByRole('region', { name: 'Delegates' });
    await delegates.getByRole('link', { name: 'Buyer' }).waitFor();
    await delegates.getByText('0.00 of 2.00 credits spent').waitFor();
    await delegates.getByRole('link', { name: 'Buyer' }).click();
    await page.getByRole('heading', { name: 'Buyer', level: 1 }).waitFor();
    // A delegate owns no credit: its figures are its root's, and say so.
    await page.getByText('A delegate: these figures are the credit of its root agent', { exact: false }).waitFor();
    await page.getByText("Available (its tree's)").waitFor();
    await page.getByRole('region', { name: 'Delegates' }).getByText('No delegates.', { exact: false }).waitFor();
    expect(await axeViolations(page)).toEqual([]);
    // A budget wider than the parent's is refused by the API, in credits as the form is, not microcredits (found from outside).
    const parentDaily = ((await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body.budgets as Array<{ id: string; period: string; limitUc: string }>).find((budget) => budget.period === 'day')!;
    await page.getByLabel('Budget 1 limit (credits)').fill(String(BigInt(parentDaily.limitUc) / 1_000_000n + 1n));
    await page.getByRole('button', { name: 'Save mandate' }).click();
    const refusal = page.getByRole('alert').getByText(`the parent's budget "${parentDaily.id}" (${credits(parentDaily.limitUc)} credits per day, all spending) needs a budget`, { exact: false });
    await refusal.waitFor();
    expect(await refusal.textContent()).toContain(`of at most ${credits(parentDaily.limitUc)} credits`);
    expect(await refusal.textContent()).not.toContain('µc');
    await page.getByLabel('Budget 1 limit (credits)').fill('2');
    await expect.poll(leavingAsks).toBe(false);
    // Its parent frozen, the delegate's own page names the freeze that stops it, which its own Unfreeze cannot lift.
    expect((await api('POST', `/v1/owner/agents/${agentId}/freeze`, owner, {}, key('freeze-parent'))).status).toBe(200);
    await page.reload();
    // It names the ancestor by its name, linked to its page, its id beside (found from outside: "Frozen by agt_…").
    const frozenBy = page.locator('.page-head .badge.frozen');
    await frozenBy.getByRole('link', { name: 'Scout', exact: true }).waitFor();
    expect(await frozenBy.textContent()).toBe('Frozen by Scout');
    expect(await frozenBy.getByRole('link').getAttribute('href')).toBe(`/console/agents/${agentId}`);
    await page.locator('.page-head').getByText(`(its ancestor ${agentId})`, { exact: true }).waitFor();
    expect(await axeViolations(page)).toEqual([]);
    // On the agents list too, where the ancestor is one of the cards.
    await nav('Agents');
    const buyerCard = page.locator('.card.agent').filter({ has: page.getByRole('link', { name: 'Buyer', exact: true }) });
    await buyerCard.locator('.badge.frozen').getByRole('link', { name: 'Scout', exact: true }).waitFor();
    // An ancestor that cannot be read (gone, or not among the owner's agents) is "an ancestor", by its id.
    const delegatePath = `/console/agents/${buyer.body.id}`;
    const unreadable = (url: URL) => url.pathname === `/v1/owner/agents/${agentId}`;
    await page.route(unreadable, (route) => route.fulfill({ status: 404, contentType: 'application/problem+json', body: JSON.stringify({ type: 'about:blank', title: 'Not Found', status: 404, code: 'not_found', detail: 'no such agent' }) }));
    try {
      await page.goto(`${gw.url}${delegatePath}`);
      await page.locator('.page-head').getByText(`(its ancestor ${agentId}, not found among your agents)`, { exact: true }).waitFor();
      expect(await frozenBy.textContent()).toBe('Frozen by an ancestor');
      expect(await frozenBy.getByRole('link').count()).toBe(0);
    } finally {
      await page.unroute(unreadable);
    }
    expect((await api('POST', `/v1/owner/agents/${agentId}/unfreeze`, owner, {}, key('unfreeze-parent'))).status).toBe(200);
  });

  it("freezes an agent and releases its outstanding holds (the kill switch), so their merchant can no longer capture them", async () => {
    const owner = await devLogin('human', { email: OWNER });
    const minted = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, key('mint-before-kill'));
    expect(minted.status).toBe(200);
    await openAgent();
    // What cannot be undone asks first, and Cancel (where the dialog's focus starts) does nothing.
    await page.getByRole('button', { name: 'Freeze Scout and release its holds', exact: true }).click();
    const question = page.getByRole('dialog', { name: 'Freeze Scout and release its holds?' });
    await question.getByText('This cannot be undone.', { exact: false }).waitFor();
    expect(await question.getAttribute('aria-describedby')).toBe(await question.locator('p').first().getAttribute('id'));
    // The second click of a double-click acts on nothing: once a dialog's first click closed it, the second would land
    // on whatever button was under it (found from outside: a double-click on Cancel unfroze another agent).
    await page.getByRole('button', { name: 'Freeze Scout', exact: true }).dispatchEvent('click', { detail: 2 });
    expect((await api('GET', `/v1/owner/agents/${agentId}`, owner)).body.status).toBe('active');
    expect(await question.getByRole('button', { name: 'Cancel' }).evaluate((button) => button === document.activeElement)).toBe(true);
    await question.getByRole('button', { name: 'Cancel' }).click();
    await question.waitFor({ state: 'hidden' });
    const untouched = (await api('GET', `/v1/owner/agents/${agentId}/holds?limit=100`, owner)).body.redemptions as Array<{ id: string; state: string }>;
    expect(untouched.find((hold) => hold.id === minted.body.redemption.id)?.state).toBe('held');
    await page.getByRole('button', { name: 'Freeze Scout and release its holds', exact: true }).click();
    expect(await axeViolations(page)).toEqual([]);
    await question.getByRole('button', { name: 'Freeze and release', exact: true }).click();
    await page.getByText('Scout is frozen, and 1 outstanding hold released: 1.00 credits are back', { exact: false }).waitFor();
    const holds = (await api('GET', `/v1/owner/agents/${agentId}/holds?limit=100`, owner)).body.redemptions as Array<{ id: string; state: string; revocation: { reason: string } | null }>;
    const read = holds.find((hold) => hold.id === minted.body.redemption.id)!;
    expect([read.state, read.revocation?.reason]).toEqual(['released', 'agent_frozen']);
    // The activity shows the newest purchase first: the one just released, then the one captured before it.
    await page.locator('.activity li').first().getByText(minted.body.redemption.id).waitFor();
    await page.locator('.activity li').nth(1).getByText(holdId).waitFor();
    // Each says what was bought, by the names it was sold under, and a hold the kill switch released reads as revoked,
    // not as a merchant's release (found from outside: ids only, and "Released" for both).
    const newest = page.locator('.activity li').first();
    await newest.getByText('Revoked by a freeze', { exact: true }).waitFor();
    await newest.getByText('One e-book from books-console.example.com', { exact: false }).waitFor();
    await page.locator('.activity li').nth(1).getByText('Captured', { exact: true }).waitFor();
    // How far it reached, as the API's report says it: the merchant that held the voucher, and where its telling stands
    // (found from outside: the console said only how many holds were released).
    const reach = page.getByRole('region', { name: 'Kill switch' });
    await reach.getByText('1 hold released, 1.00 credits back, their vouchers revoked.', { exact: false }).waitFor();
    await reach.getByRole('listitem').filter({ hasText: `${merchantId}, 1 voucher: ` }).waitFor();
    const told = (await api('GET', `/v1/owner/agents/${agentId}/freeze`, owner)).body.merchants;
    expect(told).toMatchObject([{ merchantId, holdIds: [minted.body.redemption.id] }]);
    expect(await axeViolations(page)).toEqual([]);
    await page.getByRole('button', { name: 'Unfreeze Scout', exact: true }).click();
    await page.getByText('Scout can spend again.').waitFor();
    // A partial capture says what was taken, then the hold (found from outside: "Captured · 1.00 credits" for 0.60 taken).
    const partial = await api('POST', '/v1/vouchers', await agentToken(), { offerId }, key('mint-partial'));
    expect((await api('POST', `/v1/redemptions/${partial.body.redemption.id}/capture`, merchantSecret, { amountUc: '600000' }, key('capture-partial'))).status).toBe(200);
    await page.reload();
    const taken = page.locator('.activity li').filter({ hasText: partial.body.redemption.id });
    await taken.getByText('0.60 credits of 1.00 credits held', { exact: false }).waitFor();
  });

  it("picks a merchant budget's merchant from those the owner's agents dealt with, and still takes a typed id or verified domain (found from outside: only a typed id)", async () => {
    const owner = await devLogin('human', { email: OWNER });
    const before = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body;
    const { agentId: _a, version: _v, createdAt: _c, hash: _h, usage: _u, ...rules } = before;
    onTestFinished(async () => {
      expect((await api('PUT', `/v1/owner/agents/${agentId}/mandate`, owner, rules, key('picker-off'))).status).toBe(200);
    });
    // A merchant of another owner, which Scout bought from: known to this owner only through Scout's holds, by its domain.
    const bob = await devLogin('human', { email: OTHER_OWNER });
    const records = (await api('POST', '/v1/merchants', bob, { name: 'Bob Records', domain: 'records-console.example.com', categories: ['books'] }, key('records'))).body.merchant;
    await gw.gateway.db.query('UPDATE merchants SET verified = true, verified_at_s = $2 WHERE id = $1', [records.id, gw.clock.nowS()]);
    const record = await api('POST', `/v1/merchants/${records.id}/offers`, bob, { name: 'One record', category: 'books', priceUc: '100000' }, key('record'));
    expect((await api('POST', '/v1/vouchers', await agentToken(), { offerId: record.body.id }, key('mint-record'))).status).toBe(200);

    await openAgent();
    await page.getByRole('button', { name: 'Add a budget' }).click();
    const row = page.locator('.budget-row').last();
    const n = await page.locator('.budget-row').count();
    await page.getByLabel(`Budget ${n} limit (credits)`).fill('2');
    await page.getByLabel(`Budget ${n} covers`).selectOption('merchantId');
    const picker = page.getByRole('combobox', { name: `Budget ${n} merchant`, exact: true });
    // The owner's own merchant by its name, the other owner's by the verified domain its offer was sold under.
    await expect.poll(async () => (await picker.locator('option').allTextContents()).filter((text) => !text.startsWith('Choose'))).toEqual([
      'Ada Books (books-console.example.com)',
      'records-console.example.com',
      'Another merchant: type its id or domain',
    ]);
    expect(await axeViolations(page)).toEqual([]);
    // By keyboard: the select has the focus, and the arrow keys choose.
    await picker.focus();
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowDown');
    expect(await picker.evaluate((select: HTMLSelectElement) => select.selectedOptions[0]?.textContent)).toBe('records-console.example.com');
    expect(await row.getByRole('textbox', { name: /id or domain/ }).count()).toBe(0);
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText('Saved: mandate version', { exact: false }).waitFor();
    const saved = (await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body.budgets as Array<{ merchantId?: string }>;
    expect(saved.map((budget) => budget.merchantId).filter(Boolean)).toEqual([records.id]);

    // One not in the list is typed: Ada's verified domain, saved as its id.
    await page.getByRole('button', { name: 'Add a budget' }).click();
    await page.getByLabel(`Budget ${n + 1} limit (credits)`).fill('1');
    await page.getByLabel(`Budget ${n + 1} covers`).selectOption('merchantId');
    await page.getByRole('combobox', { name: `Budget ${n + 1} merchant`, exact: true }).selectOption({ label: 'Another merchant: type its id or domain' });
    await page.getByLabel(`Budget ${n + 1} merchant id or domain`).fill('BOOKS-console.example.com');
    await page.getByRole('button', { name: 'Save mandate' }).click();
    await page.getByText('Saved: mandate version', { exact: false }).waitFor();
    await expect.poll(async () => ((await api('GET', `/v1/owner/agents/${agentId}/mandate`, owner)).body.budgets as Array<{ merchantId?: string }>).map((budget) => budget.merchantId).filter(Boolean)).toEqual([records.id, merchantId]);
    // Saved, each shows its merchant by name in its picker.
    await expect.poll(() => page.getByRole('combobox', { name: `Budget ${n + 1} merchant`, exact: true }).evaluate((select: HTMLSelectElement) => select.selectedOptions[0]?.textContent)).toBe('Ada Books (books-console.example.com)');
    await expect.poll(leavingAsks).toBe(false);
  });

  it('pages the owner events and the webhook deliveries past their first 20, older on request (found from outside: only the newest 20 were shown)', async () => {
    const owner = await devLogin('human', { email: OWNER });
    const ownerId = (await gw.gateway.db.query<{ owner_id: string }>('SELECT owner_id FROM agents WHERE id = $1', [agentId])).rows[0]!.owner_id;
    const emit = (events: EventToEmit[]) => gw.gateway.db.transaction((tx) => emitEvents(tx, events, gw.clock.nowMs()));
    await emit(Array.from({ length: 25 }, (_, n): EventToEmit => ({ ownerId, type: 'budget.threshold', data: { agentId, n } })));
    // A merchant without a webhook: its deliveries wait for none, so nothing is sent anywhere.
    const merchantEvents = await emit(Array.from({ length: 25 }, (_, n): EventToEmit => ({ merchantId, type: 'redemption.held', data: { redemption: { id: `red_paging_${n}` } } })));
    for (const event of merchantEvents) await insertDelivery(gw.gateway.db, { id: newId('whd'), eventId: event.id, eventType: 'redemption.held', account: { kind: 'merchant', id: merchantId }, nowMs: gw.clock.nowMs(), nowS: gw.clock.nowS() });
    const eventIds = ((await api('GET', '/v1/owner/events?limit=100', owner)).body.events as Array<{ id: string }>).map((event) => event.id);
    expect(eventIds.length).toBeGreaterThanOrEqual(25);
    expect(eventIds.length).toBeLessThanOrEqual(40);

    await nav('Owner webhook');
    const events = page.getByRole('region', { name: 'Events' });
    const eventRows = events.locator('tbody tr');
    await expect.poll(() => eventRows.count()).toBe(20);
    await pressByKeyboard(page, 'Show 20 older events');
    await expect.poll(() => eventRows.count()).toBe(eventIds.length);
    // Newest first, in the API's order, none twice; the last page shown, a note takes the button's place and its focus.
    expect(await events.locator('tbody tr code').allTextContents()).toEqual(eventIds);
    await expect.poll(() => focused(page)).toBe(`All ${eventIds.length} events of the last 30 days are shown.`);
    expect(await events.getByRole('button', { name: /older events/ }).count()).toBe(0);

    // A dead delivery of the owner's webhook, re-sent from the page (the owner had no re-send: found from outside).
    const hook = await api('PUT', '/v1/owner/webhook', owner, { url: 'https://hooks.console-e2e.dev/acg' }, key('owner-hook'));
    expect(hook.status).toBe(200);
    const deadId = newId('whd');
    await insertDelivery(gw.gateway.db, { id: deadId, eventId: eventIds[0]!, eventType: 'budget.threshold', account: { kind: 'owner', id: ownerId }, nowMs: gw.clock.nowMs(), nowS: gw.clock.nowS() });
    await gw.gateway.db.query(`UPDATE webhook_deliveries SET state = 'dead', attempts = 8 WHERE id = $1`, [deadId]);
    await page.getByRole('button', { name: 'Refresh' }).click();
    const ownerDeliveries = page.getByRole('region', { name: 'Deliveries' });
    await ownerDeliveries.getByText('budget.threshold · dead · 8 attempts', { exact: false }).waitFor();
    await ownerDeliveries.getByRole('button', { name: 'Re-send budget.threshold' }).click();
    await ownerDeliveries.getByText('Queued to be sent again.').waitFor();
    // Made due again: pending, or already tried once more by the worker (the name resolves nowhere here, so dead again).
    const resent = (await gw.gateway.db.query<{ state: string; attempts: number }>('SELECT state, attempts FROM webhook_deliveries WHERE id = $1', [deadId])).rows[0]!;
    expect(resent.state === 'pending' || resent.attempts === 9).toBe(true);
    expect(await axeViolations(page)).toEqual([]);
    // An event of before the webhook existed has no delivery: its row sends it (found from outside: no way to, in the console).
    const never = eventIds[1]!;
    expect((await gw.gateway.db.query('SELECT 1 FROM webhook_deliveries WHERE event_id = $1', [never])).rows).toEqual([]);
    // At 320 px its label is one word on one line, and the page does not scroll sideways (found from outside: "S/e/n/d").
    try {
      await page.setViewportSize({ width: 320, height: 640 });
      expect(await events.getByRole('button', { name: `Send budget.threshold ${never} to the webhook` }).evaluateAll(lineCounts)).toEqual([1]);
      expect(await events.locator('thead th').evaluateAll(lineCounts)).toEqual([1, 1, 1, 1]);
      expect(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth)).toBe(true);
    } finally {
      await page.setViewportSize({ width: 1280, height: 900 });
    }
    await events.getByRole('button', { name: `Send budget.threshold ${never} to the webhook` }).click();
    await events.getByText(`Queued to be sent: ${never}`, { exact: false }).waitFor();
    expect((await gw.gateway.db.query('SELECT 1 FROM webhook_deliveries WHERE event_id = $1', [never])).rows).toHaveLength(1);
    expect(await axeViolations(page)).toEqual([]);

    // Pause, save the URL, resume: a save keeps the webhook as it is (found from outside: saving the URL of a paused
    // webhook resumed it), and a paused webhook's deliveries offer no re-send (it would be refused).
    const endpoint = page.getByRole('region', { name: 'Endpoint' });
    const enabled = async () => (await api('GET', '/v1/owner/webhook', owner)).body.configuration.enabled as boolean;
    await endpoint.getByRole('button', { name: 'Pause deliveries' }).click();
    await endpoint.getByText('Paused: events are kept', { exact: false }).waitFor();
    expect(await enabled()).toBe(false);
    await endpoint.getByText('· paused', { exact: false }).waitFor();
    expect(await ownerDeliveries.getByRole('button', { name: /^Re-send/ }).count()).toBe(0);
    await endpoint.getByRole('button', { name: 'Save webhook' }).click();
    await endpoint.getByRole('status').filter({ hasText: 'signing secret is unchanged' }).first().waitFor();
    expect(await enabled()).toBe(false);
    await endpoint.getByRole('button', { name: 'Resume deliveries' }).click();
    await endpoint.getByText('Resumed: new events are delivered.').waitFor();
    expect(await enabled()).toBe(true);
    // Rotating the secret asks first, then shows the new one once; the old one keeps signing beside it for the
    // overlap (found from outside: the console replaced it at once, failing a receiver not yet switched).
    await endpoint.getByRole('button', { name: 'Rotate signing secret' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Rotate the secret' }).click();
    await page.locator('.secret-value').filter({ hasText: /^whsec_/ }).waitFor();
    await endpoint.getByText('the old one keeps signing beside it until', { exact: false }).waitFor();
    const rotated = (await api('GET', '/v1/owner/webhook', owner)).body.configuration;
    expect(rotated.enabled).toBe(true);
    expect(rotated.previousSecretExpiresAt).toBeGreaterThan(gw.clock.nowS() + 23 * 3600);
    expect(await axeViolations(page)).toEqual([]);
    expect((await api('DELETE', '/v1/owner/webhook', owner, undefined, key('owner-hook-gone'))).status).toBe(200);

    // The secret is on the page: leaving asks first (the page's leave guard), and the owner confirms.
    page.once('dialog', (dialog) => void dialog.accept());
    await nav('Merchants');
    await page.getByRole('link', { name: 'Ada Books' }).click();
    const webhook = page.getByRole('region', { name: 'Webhook' });
    const deliveries = webhook.locator('ul.deliveries > li');
    await expect.poll(() => deliveries.count()).toBe(20);
    await webhook.getByRole('button', { name: 'Show 20 older deliveries' }).click();
    await expect.poll(() => deliveries.count()).toBe(25);
    await webhook.getByText('All 25 deliveries are shown.').waitFor();
    expect(await axeViolations(page)).toEqual([]);
  });

  it('never put a token in a URL or in localStorage or sessionStorage, and the page broke no CSP rule', async () => {
    expect(accessTokens.length).toBeGreaterThanOrEqual(2);
    for (const token of accessTokens) expect(urlsSeen.filter((url) => url.includes(token))).toEqual([]);
    expect(urlsSeen.filter((url) => /access_token|[?&]token=/.test(url))).toEqual([]);
    const storage = await page.evaluate(() => ({ local: JSON.stringify(localStorage), session: JSON.stringify(sessionStorage) }));
    expect(storage).toEqual({ local: '{}', session: '{}' });
    expect(cspViolations).toEqual([]);
  });

  it('loads cold (no cache) to the agents list, transferring the page, script and style sheet compressed', async () => {
    // A new context with the same cookies (the browser binding that a remembered consent needs), and no cache.
    const fresh = await browser.newContext({ storageState: await context.storageState() });
    const cold = await fresh.newPage();
    try {
      const cdp = await fresh.newCDPSession(cold);
      await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
      await cold.goto(`${gw.url}/console`);
      await cold.getByRole('link', { name: 'Scout', exact: true }).waitFor();
      const transfer = await cold.evaluate(() => {
        const entries = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')] as PerformanceResourceTiming[];
        const shell = entries.filter((entry) => !entry.name.includes('/v1/') && !entry.name.includes('/oauth/'));
        const sum = (list: PerformanceResourceTiming[]) => list.reduce((total, entry) => total + entry.transferSize, 0);
        return { all: sum(entries), shell: sum(shell), requests: entries.length };
      });
      // Compressed on the wire (the bundle's own budget is 40 KB brotli: security.test.ts).
      expect(transfer.shell).toBeGreaterThan(0);
      expect(transfer.shell).toBeLessThan(45 * 1024);
    } finally {
      await fresh.close();
    }
  });
});
