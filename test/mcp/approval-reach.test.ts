// What an MCP client is told when a purchase waits for its owner, and what it can read afterwards (found from
// outside with the official SDK client, bb3 D1, D2, D5, D6):
// - the -32042 URL elicitation error goes only where the revision defines it (2025-11-25 and later) and the client
//   declared URL-mode elicitation; every other client gets the 402 problem body as a tool error, as on 2026-07-28;
// - get_intent reads a purchase approval (pur_…) for its agent and that agent's owner, and 404 for anyone else;
// - an unsupported protocol version is refused naming the versions this server speaks, 2026-07-28 included;
// - a tool named after an Object.prototype member is an unknown tool.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, LEGACY, MODERN, toolBody } from './helpers.ts';

let world: World;
let shop: Shop;
let counter = 0;

beforeAll(async () => {
  world = await startWorld({ env: { ACG_PAYMENT_PROVIDER: 'local' } });
  shop = await openShop(world);
});
afterAll(async () => {
  await world?.close();
});

/** A funded agent whose mandate asks its owner above 1 credit, its MCP token, and an offer of 3 credits. */
async function askingAgent(label: string) {
  const agent = await world.createAgent(`${label}-${++counter}@example.com`, `${label}-agent-${counter}`);
  const mcpToken = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`);
  await grant(world, agent.id, 10_000_000n);
  const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `${label}-mandate-${counter}`, body: { approvalAboveUc: '1000000' } });
  expect(put.status).toBe(200);
  return { ...agent, mcpToken, offer: await shop.offer({ priceUc: '3000000' }) };
}

/** A legacy (2025-11-25) client declaring `capabilities` at initialize. */
async function legacyClient(token: string, capabilities: Record<string, unknown>): Promise<Client> {
  const client = new Client({ name: 'acg-test', version: '1.0.0' }, { versionNegotiation: { mode: 'legacy' }, capabilities });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${world.url}/mcp`), { authProvider: { token: async () => token } }));
  return client;
}

/** The call's outcome: a tool result, or the JSON-RPC error it threw. */
async function outcome(call: Promise<unknown>): Promise<{ result?: any; error?: { code?: number; message?: string; data?: any } }> {
  return call.then(
    (result) => ({ result }),
    (error: unknown) => ({ error: error as { code?: number } }),
  );
}

/** One legacy JSON-RPC POST at `version`, as a client that negotiated it sends it (no session id: the server is stateless). */
async function rawLegacy(version: string, token: string, method: string, params: Record<string, unknown>) {
  const res = await fetch(`${world.url}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}`, 'mcp-protocol-version': version },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const text = await res.text();
  const data = text.startsWith('event:') || text.includes('\ndata: ') ? text.split('\n').find((line) => line.startsWith('data: '))!.slice(6) : text;
  return { status: res.status, body: JSON.parse(data) };
}

describe('D2: the -32042 URL elicitation error only where the revision defines it and the client declared URL mode', () => {
  for (const [label, capabilities] of [
    ['no capabilities', {}],
    ['form-mode elicitation only', { elicitation: {} }],
  ] as const) {
    it(`2025-11-25 with ${label}: mint_voucher above the threshold is the approval_required tool error, not -32042`, async () => {
      const agent = await askingAgent('d2-legacy');
      const client = await legacyClient(agent.mcpToken, capabilities);
      try {
        const { result, error } = await outcome(client.callTool({ name: 'mint_voucher', arguments: { offerId: agent.offer.id, idempotencyKey: `d2-${counter}` } }));
        expect(error?.code).toBeUndefined();
        expect(result.isError).toBe(true);
        expect(toolBody(result)).toMatchObject({ code: 'approval_required', status: 402, reason: 'above_approval_threshold', intentId: expect.stringMatching(/^pur_/) });
      } finally {
        await client.close();
      }
    });
  }

  for (const version of ['2025-06-18', '2025-03-26']) {
    it(`${version} (no URL elicitation in that revision): the approval_required tool error, not -32042`, async () => {
      const agent = await askingAgent('d2-old');
      const init = await rawLegacy(version, agent.mcpToken, 'initialize', { protocolVersion: version, capabilities: { elicitation: { url: {} } }, clientInfo: { name: 'raw', version: '1' } });
      expect(init.body.result.protocolVersion).toBe(version);
      const called = await rawLegacy(version, agent.mcpToken, 'tools/call', { name: 'mint_voucher', arguments: { offerId: agent.offer.id, idempotencyKey: `d2-old-${counter}` } });
      expect(called.body.error).toBeUndefined();
      expect(called.body.result.isError).toBe(true);
      expect(JSON.parse(called.body.result.content[0].text)).toMatchObject({ code: 'approval_required', status: 402 });
    });
  }
});

describe('D1: get_intent reads a purchase approval (pur_…) for its agent and its owner', () => {
  it('the agent reads its approval after the owner answers; the owner reads it too; another agent and another owner get 404', async () => {
    const agent = await askingAgent('d1');
    const client = await connect(world.url, agent.mcpToken, 'modern');
    try {
      const refused = await client.callTool({ name: 'mint_voucher', arguments: { offerId: agent.offer.id, idempotencyKey: `d1-${counter}` } });
      expect(refused.isError).toBe(true);
      const problem = toolBody(refused);
      const id: string = problem.intentId;
      expect(id).toMatch(/^pur_/);
      // What the refusal tells an MCP client to read is something it can use: the get_intent tool.
      expect(problem.instructions).toContain('get_intent');

      const pending = await client.callTool({ name: 'get_intent', arguments: { id } });
      expect(pending.isError).toBeFalsy();
      const rest = await world.api('GET', `/v1/payments/purchases/${id}`, { token: agent.token });
      expect(rest.status).toBe(200);
      expect(toolBody(pending)).toEqual(rest.body);
      expect(toolBody(pending)).toMatchObject({ id, agentId: agent.id, status: 'pending_approval' });

      const approved = await world.api('POST', `/v1/payments/purchases/${id}/approve`, { token: agent.ownerToken, body: {} });
      expect(approved.body.status).toBe('approved');
      expect(toolBody(await client.callTool({ name: 'get_intent', arguments: { id } }))).toMatchObject({ id, status: 'approved' });

      // Its owner (a human session, which /mcp takes) reads it as well.
      const owner = await connect(world.url, agent.ownerToken, 'modern');
      try {
        expect(toolBody(await owner.callTool({ name: 'get_intent', arguments: { id } }))).toMatchObject({ id, status: 'approved' });
      } finally {
        await owner.close();
      }

      // Another agent (another owner's) cannot see it.
      const other = await askingAgent('d1-other');
      const stranger = await connect(world.url, other.mcpToken, 'modern');
      try {
        const hidden = await stranger.callTool({ name: 'get_intent', arguments: { id } });
        expect(hidden.isError).toBe(true);
        expect(toolBody(hidden)).toMatchObject({ code: 'not_found', status: 404 });
      } finally {
        await stranger.close();
      }
      // Nor can another owner (its human session).
      const strangerOwner = await connect(world.url, other.ownerToken, 'modern');
      try {
        const hidden = await strangerOwner.callTool({ name: 'get_intent', arguments: { id } });
        expect(hidden.isError).toBe(true);
        expect(toolBody(hidden)).toMatchObject({ code: 'not_found', status: 404 });
      } finally {
        await strangerOwner.close();
      }
    } finally {
      await client.close();
    }
  });
});

describe('D6: an unsupported protocol version names the versions this server speaks', () => {
  it('the list includes 2026-07-28 and 2025-11-25', async () => {
    const res = await fetch(`${world.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${(await askingAgent('d6')).mcpToken}`, 'mcp-protocol-version': '1999-01-01' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string } };
    expect(body.error.message).toContain('1999-01-01');
    expect(body.error.message).toContain(MODERN);
    expect(body.error.message).toContain(LEGACY);
  });
});

describe('D5: a tool named after an Object.prototype member is an unknown tool', () => {
  for (const name of ['constructor', 'toString', 'hasOwnProperty', '__proto__']) {
    it(`tools/call ${name} answers "not found", not "disabled"`, async () => {
      const agent = await askingAgent('d5');
      const client = await connect(world.url, agent.mcpToken, 'legacy');
      try {
        const { error } = await outcome(client.callTool({ name, arguments: {} }));
        expect(error?.code).toBe(-32602);
        expect(error?.message).toContain(`Tool ${name} not found`);
      } finally {
        await client.close();
      }
    });
  }
});
