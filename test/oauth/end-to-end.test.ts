// The whole flow as a strict third-party client sees it: oauth4webapi does discovery, registration,
// the authorization response checks, the token exchange and an independent RFC 9068 validation; the
// consent happens in headless Chromium through the gateway's real page (dev mode's built-in issuers).
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as oauth from 'oauth4webapi';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log('SKIPPED: chromium not installed; .ci/run installs it');

const insecure = { [oauth.allowInsecureRequests]: true } as const;
const ownerEmail = 'e2e-owner@example.com';
const agentSubject = 'e2e-agent';

let gw: TestGateway;
let dataDir: string;
let browser: Browser;
let callbackServer: Server;
let redirectUri: string;
let as: oauth.AuthorizationServer;
let client: oauth.Client;

beforeAll(async () => {
  if (!hasChromium) return;
  dataDir = mkdtempSync(path.join(tmpdir(), 'acg-oauth-e2e-'));
  gw = await startTestGateway({ env: { ACG_DATA_DIR: dataDir } });
  callbackServer = createServer((_request, response) => response.writeHead(200, { 'content-type': 'text/html' }).end('<p>back in the app</p>'));
  await new Promise<void>((resolve) => callbackServer.listen(0, '127.0.0.1', resolve));
  redirectUri = `http://127.0.0.1:${(callbackServer.address() as AddressInfo).port}/callback`;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });

  const issuer = new URL(gw.url);
  as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
  client = await oauth.processDynamicClientRegistrationResponse(
    await oauth.dynamicClientRegistrationRequest(
      as,
      { redirect_uris: [redirectUri], client_name: 'E2E strict client', token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], response_types: ['code'] },
      insecure,
    ),
  );

  // The agent signs in through the dev agent issuer, so its owner registers it under that issuer first.
  const login = await fetch(`${gw.url}/dev/issuers/human/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: ownerEmail }) });
  const { token: humanSession } = (await login.json()) as { token: string };
  const created = await fetch(`${gw.url}/v1/owner/agents`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${humanSession}`, 'idempotency-key': 'e2e-agent' },
    body: JSON.stringify({ name: 'E2E agent', identity: { issuer: `${gw.url}/dev/issuers/agent`, subject: agentSubject } }),
  });
  expect(created.status).toBe(201);
}, 60_000);

afterAll(async () => {
  if (!hasChromium) return;
  await browser?.close();
  await new Promise((resolve) => callbackServer?.close(resolve));
  await gw?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** An authorization request of the strict client, with a fresh PKCE verifier and state. */
async function authorizationRequest(resource: string, extra: Record<string, string> = {}): Promise<{ verifier: string; state: string; url: URL }> {
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const url = new URL(as.authorization_endpoint!);
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: client.client_id,
    redirect_uri: redirectUri,
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    resource,
    ...extra,
  }).toString();
  return { verifier, state, url };
}

/** Authorization request → consent in Chromium → callback checks → token exchange → RFC 9068 validation. */
async function flow(provider: 'human' | 'agent', resource: string): Promise<string> {
  const { verifier, state, url: authorizationUrl } = await authorizationRequest(resource);

  const context = await browser.newContext();
  const page = await context.newPage();
  const cspViolations: string[] = [];
  page.on('console', (message) => {
    if (/Content.Security.Policy/i.test(message.text())) cspViolations.push(message.text());
  });
  try {
    await page.goto(authorizationUrl.href);
    expect(page.url()).toContain('/oauth/consent?request_id=');
    await expect(page.locator('h1').textContent()).resolves.toContain('E2E strict client');
    const form = page.locator(`form[data-provider="${provider}"]`);
    if (provider === 'human') {
      await form.locator('input[name="email"]').fill(ownerEmail);
    } else {
      await form.locator('input[name="subject"]').fill(agentSubject);
      await form.locator('input[name="ownerEmail"]').fill(ownerEmail);
    }
    await Promise.all([page.waitForURL((u) => u.pathname === '/callback', { timeout: 15_000 }), form.locator('button').click()]);
    expect(cspViolations).toEqual([]);
    const callbackParams = oauth.validateAuthResponse(as, client, new URL(page.url()), state);

    const response = await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callbackParams, redirectUri, verifier, {
      additionalParameters: { resource },
      ...insecure,
    });
    const result = await oauth.processAuthorizationCodeResponse(as, client, response);
    expect(result.token_type).toBe('bearer');
    expect(result.expires_in).toBe(600);
    expect(result.refresh_token).toBeUndefined();
    expect(result.scope).toBe(provider === 'human' ? 'svc:owner' : 'svc:agent');

    const claims = await oauth.validateJwtAccessToken(
      as,
      new Request(resource, { headers: { authorization: `Bearer ${result.access_token}` } }),
      resource,
      insecure,
    );
    expect(claims).toMatchObject({ iss: gw.url, aud: resource, client_id: client.client_id, scope: result.scope });
    return result.access_token;
  } finally {
    await context.close();
  }
}

async function me(token: string) {
  const res = await fetch(`${gw.url}/v1/me`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

describe.skipIf(!hasChromium)('OAuth end to end with a strict client and a real browser', () => {
  it('discovers RFC 9728 metadata for /mcp and the API with exact resource identifiers', async () => {
    for (const resource of [`${gw.url}/mcp`, gw.url]) {
      const metadata = await oauth.processResourceDiscoveryResponse(new URL(resource), await oauth.resourceDiscoveryRequest(new URL(resource), insecure));
      expect(metadata.authorization_servers).toEqual([gw.url]);
    }
  });

  it('a human owner consents and the O token works on an owner route', async () => {
    const accessToken = await flow('human', gw.url);
    const res = await me(accessToken);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ kind: 'owner', credential: 'oauth', owner: { email: ownerEmail } });
  });

  it('an agent consents and the A token works as that agent', async () => {
    const accessToken = await flow('agent', gw.url);
    const res = await me(accessToken);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ kind: 'agent', credential: 'oauth', agent: { identity: { subject: agentSubject } } });
  });

  it('a second authorization in the same browser completes without the consent page (remembered consent)', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      const authorize = async () => {
        const { verifier, state, url } = await authorizationRequest(`${gw.url}/mcp`, { scope: 'svc:owner' });
        return { verifier, state, url: url.href };
      };
      const redeem = async (request: { verifier: string; state: string }) => {
        const callbackParams = oauth.validateAuthResponse(as, client, new URL(page.url()), request.state);
        const response = await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callbackParams, redirectUri, request.verifier, {
          additionalParameters: { resource: `${gw.url}/mcp` },
          ...insecure,
        });
        return oauth.processAuthorizationCodeResponse(as, client, response);
      };

      const first = await authorize();
      await page.goto(first.url);
      expect(page.url()).toContain('/oauth/consent?request_id=');
      await expect(page.locator('#remembered').textContent()).resolves.toContain('remembered in this browser for 24 hours');
      await page.locator('form[data-provider="human"] input[name="email"]').fill(ownerEmail);
      await Promise.all([page.waitForURL((u) => u.pathname === '/callback', { timeout: 15_000 }), page.locator('form[data-provider="human"] button').click()]);
      expect((await redeem(first)).scope).toBe('svc:owner');

      const second = await authorize();
      const visited: string[] = [];
      page.on('framenavigated', (frame) => visited.push(new URL(frame.url()).pathname));
      await page.goto(second.url);
      expect(new URL(page.url()).pathname).toBe('/callback');
      expect(visited).not.toContain('/oauth/consent');
      const result = await redeem(second);
      expect(result.scope).toBe('svc:owner');
      const claims = await oauth.validateJwtAccessToken(
        as,
        new Request(`${gw.url}/mcp`, { headers: { authorization: `Bearer ${result.access_token}` } }),
        `${gw.url}/mcp`,
        insecure,
      );
      expect(claims).toMatchObject({ aud: `${gw.url}/mcp`, client_id: client.client_id, scope: 'svc:owner' });
    } finally {
      await context.close();
    }
  });

  it('wraps a long unbroken client name instead of scrolling the consent page sideways (found from outside)', async () => {
    const long = await oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(as, { redirect_uris: [redirectUri], client_name: `Long ${'X'.repeat(110)}`, token_endpoint_auth_method: 'none' }, insecure),
    );
    const context = await browser.newContext({ viewport: { width: 375, height: 800 } });
    try {
      const page = await context.newPage();
      const url = (await authorizationRequest(`${gw.url}/mcp`)).url;
      url.searchParams.set('client_id', long.client_id);
      await page.goto(url.href);
      await expect(page.locator('h1').textContent()).resolves.toContain('X'.repeat(110));
      expect(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth)).toBe(true);
    } finally {
      await context.close();
    }
  });

  it("declining on the consent page returns to the client at once with access_denied, which the strict client reads as the person's refusal", async () => {
    const { state, url: authorizationUrl } = await authorizationRequest(`${gw.url}/mcp`);
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(authorizationUrl.href);
      await Promise.all([page.waitForURL((u) => u.pathname === '/callback', { timeout: 15_000 }), page.getByRole('button', { name: 'Decline and return to the application' }).click()]);
      const error = (() => {
        try {
          oauth.validateAuthResponse(as, client, new URL(page.url()), state);
          return undefined;
        } catch (thrown) {
          return thrown as { error?: string; cause?: URLSearchParams };
        }
      })();
      expect(error?.error ?? error?.cause?.get?.('error')).toBe('access_denied');
    } finally {
      await context.close();
    }
  });

  it('a token for the MCP resource is refused by the API (wrong audience)', async () => {
    const accessToken = await flow('agent', `${gw.url}/mcp`);
    const res = await me(accessToken);
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('unauthorized');
  });
});
