// The official MCP client (@modelcontextprotocol/client, its own OAuth support) against the gateway, as
// an MCP host would run it: a bare 401, protected-resource discovery, dynamic registration, consent in
// headless Chromium on the gateway's real page (dev mode's built-in issuers), then tools; the same token
// on a legacy 2025-11-25 session; a token for another audience refused.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, StreamableHTTPClientTransport, UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/client';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/platform/ids.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { connect, toolBody } from './helpers.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log('SKIPPED: chromium not installed; .ci/run installs it');

const ownerEmail = 'mcp-e2e-owner@example.com';
const agentSubject = 'mcp-e2e-agent';

type Stored = NonNullable<Awaited<ReturnType<OAuthClientProvider['tokens']>>>;
type StoredClient = NonNullable<Awaited<ReturnType<OAuthClientProvider['clientInformation']>>>;
type Discovery = NonNullable<Awaited<ReturnType<NonNullable<OAuthClientProvider['discoveryState']>>>>;

/** An MCP host's OAuth state, kept in memory; "redirecting" records the URL for the browser to open. */
class HostProvider implements OAuthClientProvider {
  authorizationUrl?: URL;
  private client?: StoredClient;
  private stored?: Stored;
  private verifier = '';
  private discovery?: Discovery;
  constructor(private readonly callbackUrl: string) {}
  get redirectUrl() {
    return this.callbackUrl;
  }
  get clientMetadata() {
    return { client_name: 'MCP e2e host', redirect_uris: [this.callbackUrl], token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], response_types: ['code'] };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(client: StoredClient) {
    this.client = client;
  }
  tokens() {
    return this.stored;
  }
  saveTokens(tokens: Stored) {
    this.stored = tokens;
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
  saveDiscoveryState(state: Discovery) {
    this.discovery = state;
  }
  discoveryState() {
    return this.discovery;
  }
}

let gw: TestGateway;
let github: FakeGitHub;
let dataDir: string;
let browser: Browser;
let callbackServer: Server;
let callbackUrl: string;
let agentId: string;
let offerId: string;
const seen: string[] = [];

/** fetch that records `METHOD path → status`, so the test can show the discovery the client did. */
const recordingFetch: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  const url = new URL(input instanceof Request ? input.url : String(input));
  seen.push(`${init?.method ?? 'GET'} ${url.pathname} ${res.status}`);
  return res;
};

beforeAll(async () => {
  if (!hasChromium) return;
  dataDir = mkdtempSync(path.join(tmpdir(), 'acg-mcp-e2e-'));
  github = await startFakeGitHub();
  gw = await startTestGateway({ env: { ACG_DATA_DIR: dataDir, ACG_GITHUB_API_URL: github.url } });
  callbackServer = createServer((_request, response) => response.writeHead(200, { 'content-type': 'text/html' }).end('<p>back in the host</p>'));
  await new Promise<void>((resolve) => callbackServer.listen(0, '127.0.0.1', resolve));
  callbackUrl = `http://127.0.0.1:${(callbackServer.address() as AddressInfo).port}/callback`;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });

  // The owner registers the agent under the dev agent issuer, funds it, and a verified merchant sells an offer.
  const login = await fetch(`${gw.url}/dev/issuers/human/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: ownerEmail }) });
  const { token: human } = (await login.json()) as { token: string };
  const created = await fetch(`${gw.url}/v1/owner/agents`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${human}`, 'idempotency-key': 'mcp-e2e-agent' },
    body: JSON.stringify({ name: 'MCP e2e agent', identity: { issuer: `${gw.url}/dev/issuers/agent`, subject: agentSubject } }),
  });
  const agent = (await created.json()) as { id: string; ownerId: string };
  agentId = agent.id;
  const { db } = gw.gateway;
  await db.transaction((tx) => gw.services.ledger.grant(tx, { agentId, amountUc: 10_000_000n }));
  const merchantId = newId('mer');
  offerId = newId('off');
  const nowS = Math.floor(Date.now() / 1000);
  await db.query(
    `INSERT INTO merchants (id, owner_id, name, domain, categories, verification_challenge, verified, accepted_payment_methods, created_at_s, updated_at_s)
     VALUES ($1, $2, 'Bookshop', 'books.example.com', '["books"]', 'challenge', true, '["credits"]', $3, $3)`,
    [merchantId, agent.ownerId, nowS],
  );
  await db.query(
    `INSERT INTO offers (id, merchant_id, name, category, price_uc, active, hold_lifetime_s, created_at_s, updated_at_s)
     VALUES ($1, $2, 'A book', 'books', 2000000, true, 900, $3, $3)`,
    [offerId, merchantId, nowS],
  );
}, 120_000);

afterAll(async () => {
  if (!hasChromium) return;
  await browser?.close();
  await new Promise((resolve) => callbackServer?.close(resolve));
  await gw?.close();
  await github?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The person at the consent page signs in as the agent; returns the callback's query. */
async function consentInBrowser(authorizationUrl: URL): Promise<URLSearchParams> {
  const context = await browser.newContext();
  const page = await context.newPage();
  try {
    await page.goto(authorizationUrl.href);
    expect(page.url()).toContain('/oauth/consent?request_id=');
    const form = page.locator('form[data-provider="agent"]');
    await form.locator('input[name="subject"]').fill(agentSubject);
    await form.locator('input[name="ownerEmail"]').fill(ownerEmail);
    await Promise.all([page.waitForURL((u) => u.pathname === '/callback', { timeout: 15_000 }), form.locator('button').click()]);
    return new URL(page.url()).searchParams;
  } finally {
    await context.close();
  }
}

function structured(result: unknown): any {
  return toolBody(result);
}

describe.skipIf(!hasChromium)('MCP end to end with the official client and a real browser', () => {
  let token: string;

  it('starts from a bare 401, discovers, registers, authorizes, then lists and calls tools; the ledger shows exactly its holds', async () => {
    const mcpUrl = new URL(`${gw.url}/mcp`);
    const provider = new HostProvider(callbackUrl);
    const first = new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider, fetch: recordingFetch });
    await expect(new Client({ name: 'host', version: '1' }, { versionNegotiation: { mode: 'auto' } }).connect(first)).rejects.toBeInstanceOf(UnauthorizedError);
    expect(seen[0]).toBe('POST /mcp 401');
    expect(seen).toContain('GET /.well-known/oauth-protected-resource/mcp 200');
    expect(seen).toContain('POST /oauth/register 201');
    expect(provider.authorizationUrl?.searchParams.get('resource')).toBe(mcpUrl.href);

    await first.finishAuth(await consentInBrowser(provider.authorizationUrl!));
    token = provider.tokens()!.access_token;

    const client = new Client({ name: 'host', version: '1' }, { versionNegotiation: { mode: 'auto' } });
    await client.connect(new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider }));
    expect(client.getProtocolEra()).toBe('modern');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['mint_voucher', 'execute_service', 'whoami']));

    const minted = await client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'e2e-mint-1' } });
    expect(minted.isError).toBeFalsy();
    const executed = await client.callTool({
      name: 'execute_service',
      arguments: { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'Hello-World' }, idempotencyKey: 'e2e-exec-1' },
    });
    expect(executed.isError).toBeFalsy();
    expect(structured(executed).result.fullName).toBe('octocat/Hello-World');
    await client.close();

    const { rows } = await gw.gateway.db.query<{ id: string; state: string; amount_uc: bigint }>('SELECT id, state, amount_uc FROM holds WHERE agent_id = $1 ORDER BY seq', [agentId]);
    expect(rows.map((row) => ({ id: row.id, state: row.state, amountUc: String(row.amount_uc) }))).toEqual([
      { id: structured(minted).redemption.id, state: 'held', amountUc: '2000000' },
      { id: structured(executed).receipt.id, state: 'captured', amountUc: '1000000' },
    ]);
  });

  it('the same token works through a legacy 2025-11-25 session', async () => {
    const legacy = await connect(gw.url, token, 'legacy');
    expect(legacy.getProtocolEra()).toBe('legacy');
    const me = structured(await legacy.callTool({ name: 'whoami', arguments: {} }));
    expect(me).toMatchObject({ kind: 'agent', agent: { id: agentId }, balance: { heldUc: '2000000', capturedUc: '1000000' } });
    await legacy.close();
  });

  it("a token for another audience is refused: the API's token at /mcp, the MCP token at the API", async () => {
    const nowS = Math.floor(Date.now() / 1000);
    const apiToken = await gw.gateway.signing.sign(
      { iss: gw.url, aud: gw.url, sub: agentId, scope: 'svc:agent', actor_type: 'agent', client_id: 'e2e', iat: nowS, exp: nowS + 600, jti: 'e2e-api-token' },
      'at+jwt',
    );
    await expect(connect(gw.url, apiToken, 'modern')).rejects.toThrow();
    const res = await fetch(`${gw.url}/v1/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(401);
  });
});
