// Three defects of the owner console found from outside (2026-12-04), in headless Chromium against a gateway on
// the embedded default (dev mode):
//   - "Sign out" sent nothing: the console's consent stayed remembered, and a reload signed the owner straight
//     back in without a click. It now gives its token back (POST /oauth/revoke), which revokes that consent (and
//     with it the console's live tokens), in one click.
//   - The agents list and a merchant's offers stopped at 100 with no way to the rest: a new agent past 100 (and
//     its kill switch) was unreachable. They now page with "Show more", as holds and deliveries do.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page, type Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../support/database.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log('SKIPPED: chromium not installed; .ci/run installs it');

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const OWNER = 'grace@example.com';

let gw: TestGateway;
let dataDir: string;
let browser: Browser;
let context: BrowserContext;
let page: Page;
const accessTokens: string[] = [];
let keys = 0;

async function api(method: string, route: string, token: string | undefined, body?: unknown) {
  const headers: Record<string, string> = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET') headers['idempotency-key'] = `sign-out-and-lists-${++keys}`;
  const res = await fetch(`${gw.url}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: (await res.json().catch(() => undefined)) as any };
}

async function ownerSession(): Promise<string> {
  return (await api('POST', '/dev/issuers/human/login', undefined, { email: OWNER })).body.token as string;
}

/** Signs in through the console's button and the consent page's dev form; ends on the agents page. */
async function signInThroughConsent(target: Page): Promise<void> {
  await target.getByRole('button', { name: 'Sign in', exact: true }).click();
  await target.waitForURL((url) => url.pathname === '/oauth/consent');
  const form = target.locator('form[data-provider="human"]');
  await form.locator('input[name="email"]').fill(OWNER);
  await form.locator('button').click();
  await target.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
}

/** What a freshly loaded console settles on: its agents page (signed in without a click) or its sign-in screen. */
async function settledOn(target: Page): Promise<'agents' | 'sign-in'> {
  const agents = target.getByRole('heading', { name: 'Agents', level: 1 });
  const signIn = target.getByRole('button', { name: 'Sign in', exact: true });
  await agents.or(signIn).first().waitFor();
  return (await agents.count()) > 0 ? 'agents' : 'sign-in';
}

/** Each test starts signed in on the agents page, whatever the one before it left. */
async function onAgentsPage(): Promise<void> {
  await page.goto(`${gw.url}/console`);
  if ((await settledOn(page)) === 'sign-in') await signInThroughConsent(page);
}

/** Serious and critical axe violations of the page as it is now. */
async function axeViolations(target: Page): Promise<string[]> {
  await target.evaluate(AXE_SOURCE);
  return target.evaluate(async () => {
    const axe = (window as unknown as { axe: { run(context: Document, options: object): Promise<{ violations: Array<{ id: string; impact: string; nodes: Array<{ target: string[] }> }> }> } }).axe;
    const result = await axe.run(document, { resultTypes: ['violations'] });
    return result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  });
}

beforeAll(async () => {
  if (!hasChromium || onPostgres()) return;
  dataDir = mkdtempSync(path.join(tmpdir(), 'acg-console-fixes-'));
  gw = await startTestGateway({ env: { ACG_DATA_DIR: dataDir, ACG_PAYMENT_PROVIDER: 'local' } });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(15_000);
  page = await context.newPage();
  page.on('response', async (response) => {
    if (new URL(response.url()).pathname !== '/oauth/token') return;
    const body = (await response.json().catch(() => ({}))) as { access_token?: string };
    if (body.access_token) accessTokens.push(body.access_token);
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe.runIf(hasChromium && !onPostgres())('the owner console (found from outside, 2026-12-04)', () => {
  it('signs out for good: the consent is revoked, a reload or a new tab shows the sign-in screen, and signing in asks again', async () => {
    await page.goto(`${gw.url}/console`);
    await signInThroughConsent(page);
    // The remembered consent signs a reload in without a click, as before.
    await page.reload();
    expect(await settledOn(page)).toBe('agents');
    const token = accessTokens.at(-1)!;
    expect((await api('GET', '/v1/me', token)).status).toBe(200);

    const revocations: Array<{ method: string; path: string; body: URLSearchParams }> = [];
    page.on('request', (request) => {
      const url = new URL(request.url());
      if (url.pathname === '/oauth/revoke' || url.pathname.startsWith('/v1/owner/oauth-grants/')) {
        revocations.push({ method: request.method(), path: url.pathname, body: new URLSearchParams(request.postData() ?? '') });
      }
    });
    // One click: the console gives its token back (RFC 7009), which revokes the consent; no confirmation asked.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByText(/You are signed out/).waitFor();
    expect(await page.getByRole('dialog', { name: 'Confirm it is you' }).count()).toBe(0);
    expect(revocations.map(({ method, path, body }) => [method, path, body.get('client_id'), body.get('token_type_hint'), (body.get('token') ?? '').length > 0])).toEqual([
      ['POST', '/oauth/revoke', 'acg-console', 'access_token', true],
    ]);
    // The token the tab held is refused too, not only forgotten.
    expect((await api('GET', '/v1/me', token)).status).toBe(401);

    await page.reload();
    expect(await settledOn(page)).toBe('sign-in');
    const tab = await context.newPage();
    await tab.goto(`${gw.url}/console`);
    expect(await settledOn(tab)).toBe('sign-in');
    await tab.close();

    // Only the click signs in again, and through the consent page, since the consent is gone.
    await signInThroughConsent(page);
    await page.getByText(`Signed in as ${OWNER}`).waitFor();
  });

  it("with the tab's token lapsed, signs out only once the gateway takes a token back, and says 'this browser' when its consent had ended (found from outside)", async () => {
    const lapsing = await context.newPage();
    await lapsing.clock.install();
    await lapsing.goto(`${gw.url}/console`);
    if ((await settledOn(lapsing)) === 'sign-in') await signInThroughConsent(lapsing);
    const revokes: string[] = [];
    lapsing.on('request', (request) => {
      if (new URL(request.url()).pathname === '/oauth/revoke') revokes.push(request.method());
    });
    // Past the token's life in the page; the token endpoint fails, so no token can be given back: not signed out,
    // the header still there (it said "signed out" and a new tab signed straight back in).
    await lapsing.clock.fastForward('11:00');
    await lapsing.route('**/oauth/token', (route) => route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ error: 'temporarily_unavailable', error_description: 'down for a moment' }) }));
    await lapsing.getByRole('button', { name: 'Sign out' }).click();
    await lapsing.getByRole('alert').getByText('Not signed out: Sign-in failed: down for a moment').waitFor();
    await lapsing.getByText(`Signed in as ${OWNER}`).waitFor();
    expect(revokes).toEqual([]);
    // The gateway back: the lapsed token is renewed without a click, then given back.
    await lapsing.unroute('**/oauth/token');
    await lapsing.getByRole('button', { name: 'Sign out' }).click();
    await lapsing.getByText(/You are signed out, in every browser/).waitFor();
    expect(revokes).toEqual(['POST']);

    // Signed in again; the consent then ends outside this tab (the owner revokes the console elsewhere) and the
    // token lapses: nothing here can sign back in, and the page says what it knows, this browser.
    await signInThroughConsent(lapsing);
    // The page's own reads done first: one still in flight when the consent ends is answered 401, and its renewal,
    // finding no consent, signed the page out before the click (a flaky CI run: no "Sign out" button to click).
    await lapsing.waitForLoadState('networkidle');
    expect((await api('DELETE', '/v1/owner/oauth-grants/acg-console', await ownerSession())).status).toBe(200);
    await lapsing.clock.fastForward('11:00');
    await lapsing.getByRole('button', { name: 'Sign out' }).click();
    await lapsing.getByText(/You are signed out in this browser: its sign-in had already ended/).waitFor();
    expect(revokes).toEqual(['POST']);
    await lapsing.close();
  });

  it('pages the agents past the first page, and a new agent and its freeze are reachable (found from outside: stopped at 100)', async () => {
    await onAgentsPage();
    const owner = await ownerSession();
    const issuer = await page.evaluate(() => (JSON.parse(document.querySelector<HTMLMetaElement>('meta[name="acg-console"]')!.content) as { agentIssuer: string }).agentIssuer);
    for (let n = 0; n < 101; n++) {
      const registered = await api('POST', '/v1/owner/agents', owner, { name: `Bulk ${n}`, identity: { issuer, subject: `bulk-${n}` } });
      expect(registered.status).toBe(201);
    }
    await page.getByText('Register an agent').click();
    await page.getByLabel('Name').fill('Latecomer');
    await page.getByLabel('Identity subject').fill('latecomer');
    await page.getByRole('button', { name: 'Register agent' }).click();
    await page.getByText('Registered Latecomer.').waitFor();

    const cards = page.locator('ul.cards > li');
    const latecomer = page.getByRole('link', { name: 'Latecomer', exact: true });
    // Wherever the list puts it, "Show more" reaches it, and the page says where it went meanwhile.
    for (let shown = 0; shown < 5 && (await latecomer.count()) === 0; shown++) {
      await page.getByText(/Latecomer is further down the list/).waitFor();
      if (shown === 0) expect(await axeViolations(page)).toEqual([]);
      await page.getByRole('button', { name: /^Show \d+ more agents$/ }).click();
      await expect.poll(async () => (await latecomer.count()) > 0 || (await cards.count()) > 50 * (shown + 1)).toBe(true);
    }
    await latecomer.waitFor();
    while ((await page.getByRole('button', { name: /^Show \d+ more agents$/ }).count()) > 0) {
      const before = await cards.count();
      await page.getByRole('button', { name: /^Show \d+ more agents$/ }).click();
      await expect.poll(() => cards.count()).toBeGreaterThan(before);
    }
    await page.getByText('All 102 agents are shown.').waitFor();
    expect(await cards.count()).toBe(102);
    await cards.filter({ has: latecomer }).getByRole('button', { name: 'Freeze Latecomer', exact: true }).waitFor();
  });

  it('says a Freeze was not done when the sign-in ended under it, rather than only "signed out" (found from outside: the kill switch silently dropped)', async () => {
    const owner = await ownerSession();
    const issuer = await page.evaluate(() => (JSON.parse(document.querySelector<HTMLMetaElement>('meta[name="acg-console"]')!.content) as { agentIssuer: string }).agentIssuer);
    const registered = await api('POST', '/v1/owner/agents', owner, { name: 'Runaway', identity: { issuer, subject: 'runaway' } });
    expect(registered.status).toBe(201);
    const agentId = registered.body.id as string;
    const lapsing = await context.newPage();
    await lapsing.goto(`${gw.url}/console`);
    if ((await settledOn(lapsing)) === 'sign-in') await signInThroughConsent(lapsing);
    await lapsing.goto(`${gw.url}/console/agents/${agentId}`);
    const freeze = lapsing.getByRole('button', { name: 'Freeze Runaway', exact: true });
    await freeze.waitFor();
    // The page's own reads all answered first: one answered 401 after the revocation below would sign the tab out
    // before the Freeze is pressed (as it should), and take the button away (seen once in a full run).
    await lapsing.waitForLoadState('networkidle');
    // The owner revokes the console elsewhere, which revokes this tab's token too: the Freeze is refused 401, and the
    // renewal under it fails (no consent is left to renew with).
    expect((await api('DELETE', '/v1/owner/oauth-grants/acg-console', await ownerSession())).status).toBe(200);
    await freeze.click();
    await lapsing.getByText('You are signed out, so what you just did was not done: sign in again, then do it again.').waitFor();
    expect((await api('GET', `/v1/owner/agents/${agentId}`, await ownerSession())).body.status).toBe('active');
    await lapsing.close();
  });

  it('keeps the mandate edits a save could not make when the sign-in ended under it, and gives them back once signed in again (found from outside: they were lost, past the leave guard)', async () => {
    const owner = await ownerSession();
    const issuer = await page.evaluate(() => (JSON.parse(document.querySelector<HTMLMetaElement>('meta[name="acg-console"]')!.content) as { agentIssuer: string }).agentIssuer);
    const registered = await api('POST', '/v1/owner/agents', owner, { name: 'Keeper', identity: { issuer, subject: 'keeper' } });
    expect(registered.status).toBe(201);
    const agentId = registered.body.id as string;
    const tab = await context.newPage();
    const leavingAsks = () => tab.evaluate(() => !window.dispatchEvent(new Event('beforeunload', { cancelable: true })));
    await tab.goto(`${gw.url}/console`);
    if ((await settledOn(tab)) === 'sign-in') await signInThroughConsent(tab);
    await tab.goto(`${gw.url}/console/agents/${agentId}`);
    await tab.getByLabel('Largest single purchase (credits)').fill('7');
    await tab.getByRole('button', { name: 'Add a budget' }).click();
    await tab.getByLabel('Budget 1 limit (credits)').fill('3');
    // The page's own reads answered first (one answered 401 after the revocation would sign the tab out before the save).
    await tab.waitForLoadState('networkidle');
    // The owner revokes the console elsewhere: the save is refused 401, and the renewal under it finds no consent.
    expect((await api('DELETE', '/v1/owner/oauth-grants/acg-console', await ownerSession())).status).toBe(200);
    await tab.getByRole('button', { name: 'Save mandate' }).click();
    await tab.getByText('You are signed out, so what you just did was not done: sign in again, then do it again.').waitFor();
    await tab.getByRole('status').getByText('Your unsaved changes are kept in this tab: sign in again to get them back.').waitFor();
    expect(await axeViolations(tab)).toEqual([]);
    // The sign-in leaves the page and comes back to it, through the consent page.
    await tab.getByRole('button', { name: 'Sign in', exact: true }).click();
    await tab.waitForURL((url) => url.pathname === '/oauth/consent');
    const form = tab.locator('form[data-provider="human"]');
    await form.locator('input[name="email"]').fill(OWNER);
    await form.locator('button').click();
    await tab.getByRole('heading', { name: 'Keeper', level: 1 }).waitFor();
    expect(await tab.getByLabel('Largest single purchase (credits)').inputValue()).toBe('7');
    expect(await tab.getByLabel('Budget 1 limit (credits)').inputValue()).toBe('3');
    await tab.getByRole('status').getByText('Your unsaved changes were restored', { exact: false }).waitFor();
    // Given back once: nothing stays in the tab's storage, and the changes are unsaved again, guarded as before.
    expect(await tab.evaluate(() => sessionStorage.length)).toBe(0);
    expect(await leavingAsks()).toBe(true);
    await tab.getByRole('button', { name: 'Save mandate' }).click();
    await tab.getByText('Saved: mandate version 2.').waitFor();
    expect((await api('GET', `/v1/owner/agents/${agentId}/mandate`, await ownerSession())).body).toMatchObject({ caps: { perHoldUc: '7000000' }, budgets: [{ period: 'day', limitUc: '3000000' }] });
    expect(await tab.getByText('Your unsaved changes were restored', { exact: false }).count()).toBe(0);

    // Signing out, confirmed over changes not saved, keeps nothing for the next sign-in.
    await tab.getByLabel('Largest single purchase (credits)').fill('8');
    tab.once('dialog', (dialog) => void dialog.accept());
    await tab.getByRole('button', { name: 'Sign out' }).click();
    await tab.getByText(/You are signed out, in every browser/).waitFor();
    expect(await tab.evaluate(() => sessionStorage.length)).toBe(0);
    await tab.close();
  });

  it('says so when the gateway gives no answer in 30 s, rather than staying busy with nothing said (found from outside: a hung gateway)', async () => {
    const hung = await context.newPage();
    await hung.clock.install();
    await hung.goto(`${gw.url}/console`);
    if ((await settledOn(hung)) === 'sign-in') await signInThroughConsent(hung);
    await hung.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
    // Every card's own reads answered first: the clock's jump below would give up any still waiting too.
    await hung.waitForLoadState('networkidle');
    const held: Route[] = [];
    await hung.route((url) => url.pathname === '/v1/owner/agents', (route) => void held.push(route));
    await hung.getByRole('button', { name: 'Refresh' }).click();
    await expect.poll(() => held.length).toBe(1);
    await hung.clock.fastForward('00:31');
    // (The cards' own reads, queued behind the held one, are given up by the same jump of the clock: the first is the list's.)
    // Said once, by the frame's live region; shown on the page.
    await hung.locator('p.error').getByText('The gateway did not answer within 30 seconds. Try again; an action sent again is done at most once.').first().waitFor();
    await expect.poll(() => hung.locator('#announced').textContent()).toMatch(/^Not updated: The gateway did not answer within 30 seconds\./);
    expect(await hung.getByRole('button', { name: 'Refresh' }).isEnabled()).toBe(true);
    for (const route of held) await route.abort().catch(() => undefined);
    await hung.close();
  });

  // After the agents' paging, which counts the owner's agents.
  it('wraps a long unbroken name instead of scrolling the page sideways (found from outside)', async () => {
    await onAgentsPage();
    const owner = await ownerSession();
    const issuer = await page.evaluate(() => (JSON.parse(document.querySelector<HTMLMetaElement>('meta[name="acg-console"]')!.content) as { agentIssuer: string }).agentIssuer);
    const name = 'W'.repeat(100);
    const registered = await api('POST', '/v1/owner/agents', owner, { name, identity: { issuer, subject: 'unbroken-name' } });
    expect(registered.status).toBe(201);
    await page.goto(`${gw.url}/console/agents/${registered.body.id}`);
    await page.getByRole('heading', { name, level: 1 }).waitFor();
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth)).toBe(true);
  });

  it('does an action once when "try again" follows an answer that was lost: the retry goes under the first Idempotency-Key (found from outside: two live keys)', async () => {
    await onAgentsPage();
    const owner = await ownerSession();
    const merchant = await api('POST', '/v1/merchants', owner, { name: 'Lost Answers', domain: 'lost-answers.example.com', categories: ['books'] });
    expect(merchant.status).toBe(201);
    const merchantId = merchant.body.merchant.id as string;
    const keysPath = `/v1/merchants/${merchantId}/api-keys`;
    const sent: Array<{ key: string | undefined; status: number | 'lost' }> = [];
    // The gateway makes the first key, and its answer never reaches the page (the connection drops on the way back).
    await page.route(`**${keysPath}`, async (route) => {
      if (route.request().method() !== 'POST') return route.fallback();
      const response = await route.fetch();
      const first = sent.length === 0;
      sent.push({ key: route.request().headers()['idempotency-key'], status: first ? 'lost' : response.status() });
      if (first) return route.abort('connectionreset');
      return route.fulfill({ response });
    });
    try {
      await page.goto(`${gw.url}/console/merchants/${merchantId}`);
      const keys = page.getByRole('region', { name: 'API keys' });
      await keys.getByText('Create an API key').click();
      await keys.getByLabel('Key name').fill('shop server');
      await keys.getByRole('checkbox', { name: /offers:read/ }).check();
      await keys.getByRole('button', { name: 'Create key' }).click();
      await keys.getByText(/could not be reached/).waitFor();
      await keys.getByRole('button', { name: 'Create key' }).click();
      // The replay carries no secret: the page says the key was shown once and to revoke it if it was lost (found
      // from outside: it said only "Created the key", and nobody learnt that a live key's secret was gone).
      await keys.getByText(/^Created the key shop server\. The key was shown once, in the first answer to this request, and cannot be recovered\. If it was lost, revoke it/).waitFor();
    } finally {
      await page.unroute(`**${keysPath}`);
    }
    expect(sent.map((s) => s.status)).toEqual(['lost', 201]);
    expect(sent[1]!.key).toBe(sent[0]!.key);
    const listed = await api('GET', keysPath, owner);
    expect(listed.body.apiKeys.map((k: { name: string }) => k.name)).toEqual(['shop server']);
  });

  it('says "not found" for an id in the address that cannot name anything, not the schema\'s words (found from outside)', async () => {
    await onAgentsPage();
    for (const id of ['%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E', '..%2F..%2Fv1%2Fme', 'a'.repeat(600), 'agt_unknown']) {
      await page.goto(`${gw.url}/console/agents/${id}`);
      await page.getByText('Not found (or not yours).').first().waitFor();
      expect(await page.getByText(/params\/|must match pattern|path parameter/).count(), id).toBe(0);
    }
  });

  it("pages a merchant's offers past the first page, and a new offer is reachable (found from outside: hasMore was ignored)", async () => {
    await onAgentsPage();
    const owner = await ownerSession();
    const merchant = await api('POST', '/v1/merchants', owner, { name: 'Grace Goods', domain: 'goods.example.com', categories: ['books'] });
    expect(merchant.status).toBe(201);
    const merchantId = merchant.body.merchant.id as string;
    for (let n = 0; n < 101; n++) {
      const created = await api('POST', `/v1/merchants/${merchantId}/offers`, owner, { name: `Offer ${n}`, category: 'books', priceUc: '1000000' });
      expect(created.status).toBe(201);
    }
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Merchants', exact: true }).click();
    await page.getByRole('link', { name: 'Grace Goods' }).click();
    const offers = page.getByRole('region', { name: 'Offers' });
    await offers.getByText('Create an offer').click();
    await offers.getByLabel('Offer name').fill('Latest offer');
    await offers.getByLabel('Category').fill('books');
    await offers.getByLabel('Price (credits)').fill('2');
    await offers.getByRole('button', { name: 'Create offer' }).click();
    await offers.getByText('Created the offer Latest offer.').waitFor();

    const rows = offers.locator('tbody tr');
    while ((await offers.getByRole('button', { name: /^Show \d+ more offers$/ }).count()) > 0) {
      const before = await rows.count();
      await offers.getByRole('button', { name: /^Show \d+ more offers$/ }).click();
      await expect.poll(() => rows.count()).toBeGreaterThan(before);
    }
    await offers.getByText('All 102 offers are shown.').waitFor();
    expect(await rows.count()).toBe(102);
    await rows.filter({ hasText: 'Latest offer' }).waitFor();
  });
});
