// Over MCP, execute's approval_required is a URL elicitation of the approval page: on 2026-07-28 an
// input_required result that the official client fulfils through its elicitation handler and then retries;
// on 2025-11-25 the -32042 URLElicitationRequired error, to a client whose call shows it declared URL mode
// (a stateless legacy call never does: it gets the problem body). After the owner approves, the gateway runs the
// retained intent by itself, and the retry with the same idempotencyKey returns its outcome. A voucher mint
// above the agent's approval threshold is the same elicitation of the purchase's approval page; after the
// owner approves, the retry with the same idempotencyKey takes the hold and returns the voucher.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { grant, openShop, type Shop } from '../support/ledger-fixture.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, MODERN, toolBody } from './helpers.ts';

let world: World;
let github: FakeGitHub;
let counter = 0;

const repoRequest = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'Hello-World' } };

beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local', ACG_GITHUB_API_URL: github.url } });
});
afterAll(async () => {
  await world?.close();
  await github?.close();
});

function structured(result: unknown): any {
  return toolBody(result);
}

/** An agent with no credit, its MCP access token and its owner's human session. */
async function brokeAgent(label: string) {
  const agent = await world.createAgent(`${label}-${++counter}@example.com`, `${label}-agent-${counter}`);
  const mcpToken = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`);
  return { ...agent, mcpToken };
}

/** What the owner does on the approval page: approve the top-up (through the API the page calls). */
async function approveOnPage(approvalUrl: string, ownerToken: string): Promise<{ topupId: string; intentId: string }> {
  expect(approvalUrl.startsWith(`${world.url}/payments/topups/`)).toBe(true);
  const topupId = new URL(approvalUrl).pathname.split('/').pop()!;
  const approved = await world.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: ownerToken, body: {} });
  expect(approved.body.status).toBe('settled');
  return { topupId, intentId: approved.body.intentId };
}

async function executed(intentId: string, token: string) {
  return waitFor(async () => (await world.api('GET', `/v1/intents/${intentId}`, { token })).body, {
    until: (body) => body.state === 'executed',
    what: 'the intent to run',
    timeoutMs: 15_000,
    intervalMs: 50,
  });
}

describe('execute_service when credit is short and a provider is configured', () => {
  it('2026-07-28: a URL elicitation of the approval page; after approval the retry returns the result, and get_intent shows it', async () => {
    const agent = await brokeAgent('modern');
    const client = new Client(
      { name: 'acg-test', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: MODERN } }, capabilities: { elicitation: { url: {} } } },
    );
    const asked: Array<{ mode?: string; url?: string; message: string }> = [];
    let intentId = '';
    client.setRequestHandler('elicitation/create', async (request) => {
      const params = request.params as { mode?: string; url?: string; message: string };
      asked.push(params);
      ({ intentId } = await approveOnPage(params.url!, agent.ownerToken));
      await executed(intentId, agent.token);
      return { action: 'accept' };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${world.url}/mcp`), { authProvider: { token: async () => agent.mcpToken } }));
    try {
      const result = await client.callTool({ name: 'execute_service', arguments: { ...repoRequest, idempotencyKey: 'elicit-modern-1' } });
      expect(asked).toHaveLength(1);
      expect(asked[0]).toMatchObject({ mode: 'url', message: expect.stringContaining(asked[0]!.url!) });
      expect(result.isError).toBeFalsy();
      expect(structured(result)).toMatchObject({ state: 'succeeded', result: { fullName: 'octocat/Hello-World' }, receipt: { state: 'captured', capturedUc: '1000000' } });
      const intent = structured(await client.callTool({ name: 'get_intent', arguments: { id: intentId } }));
      expect(intent).toMatchObject({ id: intentId, state: 'executed', executionId: structured(result).executionId, result: { fullName: 'octocat/Hello-World' } });
      // Once answered, the same key replays the outcome without asking again.
      const again = await client.callTool({ name: 'execute_service', arguments: { ...repoRequest, idempotencyKey: 'elicit-modern-1' } });
      expect(structured(again).executionId).toBe(structured(result).executionId);
      expect(asked).toHaveLength(1);
    } finally {
      await client.close();
    }
  });

  it('2026-07-28: a retry that answers the elicitation while the approval is still pending gets the problem body, not a second elicitation', async () => {
    const agent = await brokeAgent('pending');
    const client = new Client(
      { name: 'acg-test', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: MODERN } }, capabilities: { elicitation: { url: {} } } },
    );
    let asked = 0;
    client.setRequestHandler('elicitation/create', async () => {
      asked += 1;
      return { action: 'accept' };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${world.url}/mcp`), { authProvider: { token: async () => agent.mcpToken } }));
    try {
      const result = await client.callTool({ name: 'execute_service', arguments: { ...repoRequest, idempotencyKey: 'elicit-pending-1' } });
      expect(asked).toBe(1);
      expect(result.isError).toBe(true);
      expect(structured(result)).toMatchObject({ code: 'approval_required', charged: false, payment: { status: 'pending_approval' } });
    } finally {
      await client.close();
    }
  });

  it('2026-07-28 without the elicitation.url capability: the approval_required problem body, with the approval URL', async () => {
    const agent = await brokeAgent('no-capability');
    const client = await connect(world.url, agent.mcpToken, 'modern');
    try {
      const refused = await client.callTool({ name: 'execute_service', arguments: { ...repoRequest, idempotencyKey: 'elicit-plain-1' } });
      expect(refused.isError).toBe(true);
      expect(structured(refused)).toMatchObject({ code: 'approval_required', status: 402, charged: false, payment: { status: 'pending_approval' } });
      expect(structured(refused).payment.approvalUrl).toMatch(/\/payments\/topups\/top_/);
    } finally {
      await client.close();
    }
  });

  // The -32042 URL elicitation error goes only to a client that declared URL-mode elicitation on a revision that
  // defines it (see approval-reach.test.ts). A legacy exchange is served statelessly: a tools/call never carries
  // what `initialize` declared, so even a client that declared `elicitation.url` there gets the problem body.
  it('2025-11-25 (stateless: the call carries no capabilities): the approval_required problem body names the page; after approval the retry returns the result', async () => {
    const agent = await brokeAgent('legacy');
    const client = new Client({ name: 'acg-test', version: '1.0.0' }, { versionNegotiation: { mode: 'legacy' }, capabilities: { elicitation: { url: {} } } });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${world.url}/mcp`), { authProvider: { token: async () => agent.mcpToken } }));
    try {
      const call = () => client.callTool({ name: 'execute_service', arguments: { ...repoRequest, idempotencyKey: 'elicit-legacy-1' } });
      const refused = await call();
      expect(refused.isError).toBe(true);
      const problem = structured(refused);
      expect(problem).toMatchObject({ code: 'approval_required', status: 402, charged: false, intentId: expect.stringMatching(/^int_/) });
      // It names the tool that reads the intent with this token, beside the route (found from outside: only the route).
      expect(problem.instructions).toContain(`read its result with GET /v1/intents/${problem.intentId} (over MCP, the get_intent tool)`);
      const { intentId } = await approveOnPage(problem.payment.approvalUrl, agent.ownerToken);
      expect(problem.intentId).toBe(intentId);
      await executed(intentId, agent.token);
      const result = await call();
      expect(result.isError).toBeFalsy();
      expect(structured(result)).toMatchObject({ state: 'succeeded', result: { fullName: 'octocat/Hello-World' } });
    } finally {
      await client.close();
    }
  });
});

describe('mint_voucher above the approval threshold', () => {
  let shop: Shop;
  beforeAll(async () => {
    shop = await openShop(world);
  });

  /** A funded agent whose mandate asks its owner above 1 credit, its MCP token, and an offer of 3 credits. */
  async function askingAgent(label: string) {
    const agent = await brokeAgent(label);
    await grant(world, agent.id, 10_000_000n);
    const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `${label}-mandate-${counter}`, body: { approvalAboveUc: '1000000' } });
    expect(put.status).toBe(200);
    return { ...agent, offer: await shop.offer({ priceUc: '3000000' }) };
  }

  /** What the owner does on the purchase's approval page: approve it (through the API the page calls). */
  async function approvePurchase(approvalUrl: string, ownerToken: string): Promise<string> {
    expect(approvalUrl.startsWith(`${world.url}/payments/purchases/pur_`)).toBe(true);
    const id = new URL(approvalUrl).pathname.split('/').pop()!;
    const approved = await world.api('POST', `/v1/payments/purchases/${id}/approve`, { token: ownerToken, body: {} });
    expect(approved.body.status).toBe('approved');
    return id;
  }

  const holdCount = async (agentId: string) => (await world.gw.gateway.db.query('SELECT id FROM holds WHERE agent_id = $1', [agentId])).rows.length;

  it('2026-07-28: a URL elicitation of the purchase page; after approval the retry returns the voucher, once', async () => {
    const agent = await askingAgent('mint-modern');
    const client = new Client(
      { name: 'acg-test', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: MODERN } }, capabilities: { elicitation: { url: {} } } },
    );
    const asked: Array<{ mode?: string; url?: string; message: string }> = [];
    client.setRequestHandler('elicitation/create', async (request) => {
      const params = request.params as { mode?: string; url?: string; message: string };
      asked.push(params);
      await approvePurchase(params.url!, agent.ownerToken);
      return { action: 'accept' };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${world.url}/mcp`), { authProvider: { token: async () => agent.mcpToken } }));
    try {
      const args = { offerId: agent.offer.id, idempotencyKey: 'mint-elicit-modern-1' };
      const result = await client.callTool({ name: 'mint_voucher', arguments: args });
      expect(asked).toHaveLength(1);
      expect(asked[0]).toMatchObject({ mode: 'url', message: expect.stringContaining(asked[0]!.url!) });
      // It names the key as this face takes it, an argument, not only HTTP's header (found from outside).
      expect(asked[0]!.message).toContain('over MCP, the idempotencyKey argument');
      expect(result.isError).toBeFalsy();
      expect(structured(result)).toMatchObject({ voucher: expect.any(String), redemption: { agentId: agent.id, amountUc: '3000000', state: 'held' } });
      const again = await client.callTool({ name: 'mint_voucher', arguments: args });
      expect(structured(again).voucher).toBe(structured(result).voucher);
      expect(asked).toHaveLength(1);
      expect(await holdCount(agent.id)).toBe(1);
    } finally {
      await client.close();
    }
  });

  it('2025-11-25 (stateless: the call carries no capabilities): the approval_required problem body names the purchase page; after approval the retry returns the voucher', async () => {
    const agent = await askingAgent('mint-legacy');
    const client = new Client({ name: 'acg-test', version: '1.0.0' }, { versionNegotiation: { mode: 'legacy' }, capabilities: { elicitation: { url: {} } } });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${world.url}/mcp`), { authProvider: { token: async () => agent.mcpToken } }));
    try {
      const call = () => client.callTool({ name: 'mint_voucher', arguments: { offerId: agent.offer.id, idempotencyKey: 'mint-elicit-legacy-1' } });
      const refused = await call();
      expect(refused.isError).toBe(true);
      const problem = structured(refused);
      expect(problem).toMatchObject({ code: 'approval_required', status: 402, intentId: expect.stringMatching(/^pur_/) });
      expect(await holdCount(agent.id)).toBe(0);
      const id = await approvePurchase(problem.approvalUrl, agent.ownerToken);
      expect(problem.intentId).toBe(id);
      const result = await call();
      expect(result.isError).toBeFalsy();
      expect(structured(result)).toMatchObject({ voucher: expect.any(String), redemption: { amountUc: '3000000' } });
      expect(structured(await call()).voucher).toBe(structured(result).voucher);
      expect(await holdCount(agent.id)).toBe(1);
    } finally {
      await client.close();
    }
  });

  it('2026-07-28 without the elicitation.url capability: the approval_required problem body, with the purchase page', async () => {
    const agent = await askingAgent('mint-plain');
    const client = await connect(world.url, agent.mcpToken, 'modern');
    try {
      const refused = await client.callTool({ name: 'mint_voucher', arguments: { offerId: agent.offer.id, idempotencyKey: 'mint-elicit-plain-1' } });
      expect(refused.isError).toBe(true);
      expect(structured(refused)).toMatchObject({ code: 'approval_required', status: 402, reason: 'above_approval_threshold', intent: { offerId: agent.offer.id } });
      expect(structured(refused).approvalUrl).toMatch(/\/payments\/purchases\/pur_/);
    } finally {
      await client.close();
    }
  });
});
