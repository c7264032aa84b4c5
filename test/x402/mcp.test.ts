// x402's MCP transport (specs/transports-v2/mcp.md, the tool-result binding) with agent credit: a merchant's
// paid tool on the official MCP server SDK, an agent on the official client, the real gateway in between.
// The payment rides in `_meta["x402/payment"]`, the settlement comes back in `_meta["x402/payment-response"]`.
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createMcpHandler, fromJsonSchema, McpServer, type CallToolResult, type JsonSchemaType } from '@modelcontextprotocol/server';
import { x402Client } from '@x402/core/client';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { Hono } from 'hono';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CREDIT_NETWORK,
  CreditSchemeClient,
  callPaidTool,
  creditResourceServer,
  MCP_PAYMENT_META_KEY,
  paidTool,
  verifyPaymentResponse,
  type ToolResult,
} from '@agent-credit-gateway/x402-credit';
import { grant } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { capturesOf, openX402Merchant, type X402Merchant } from '../support/x402.ts';

let world: World;
let merchant: X402Merchant;
let mcpUrl: string;
let closeServer: () => Promise<void>;
const runs = { analyse: 0, broken: 0, lossy: 0 };
/** Settles of the `lossy` tool's payments, whose answers are lost after the gateway settled while `lossyLosing` is above 0. */
let lossySettles = 0;
let lossyLosing = 2;

const TICKER = fromJsonSchema<{ ticker: string }>({ type: 'object', properties: { ticker: { type: 'string' } }, required: ['ticker'] } as JsonSchemaType);

beforeAll(async () => {
  world = await startWorld();
  merchant = await openX402Merchant(world);
  const resourceServer = creditResourceServer(merchant.settings());
  const broken = paidTool(resourceServer, { name: 'broken', price: '$0.005', payTo: merchant.merchantId }, async (_args: { ticker: string }): Promise<CallToolResult> => {
    runs.broken++;
    return { isError: true, content: [{ type: 'text', text: 'upstream down' }] };
  });
  const lossyFetch: typeof fetch = async (input, init) => {
    if (!String(input).endsWith('/x402/settle')) return fetch(input, init);
    const answer = await fetch(input, init);
    lossySettles++;
    if (lossyLosing-- > 0) {
      await answer.text();
      throw new TypeError('fetch failed: the connection was reset');
    }
    return answer;
  };
  const lossy = paidTool(
    creditResourceServer(merchant.settings({ fetch: lossyFetch, attemptsMax: 2, backoffMs: () => 10 })),
    { name: 'lossy', price: '$0.005', payTo: merchant.merchantId },
    async ({ ticker }: { ticker: string }): Promise<CallToolResult> => {
      runs.lossy++;
      return { content: [{ type: 'text', text: `${ticker}: served once` }] };
    },
  );
  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'paid-tools', version: '1.0.0' }, { capabilities: { tools: {} } });
      // Written as the package's README writes it, the handler unannotated: its result must still type as the SDK's
      // CallToolResult (found from outside: it did not compile). The wrapper reads the arguments with the tool's
      // schema, registered as the wrapper's own, so a call they refuse is not charged.
      const analyse = paidTool(resourceServer, { name: 'analyse', price: '0.5 credits', payTo: merchant.merchantId, inputSchema: TICKER }, async ({ ticker }) => {
        runs.analyse++;
        return { content: [{ type: 'text', text: `${ticker}: strong fundamentals` }] };
      });
      server.registerTool('analyse', { description: 'Financial analysis, 0.5 credit a call', inputSchema: analyse.inputSchema }, analyse);
      server.registerTool('broken', { description: 'Always fails', inputSchema: TICKER }, broken);
      server.registerTool('lossy', { description: 'Its merchant loses settle answers', inputSchema: TICKER }, lossy);
      return server;
    },
    { legacy: 'stateless' },
  );
  const app = new Hono();
  app.all('/mcp', (c) => handler.fetch(c.req.raw));
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const started = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, () => resolve(started));
  });
  mcpUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
  closeServer = async () => {
    await handler.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
});
afterAll(async () => {
  await closeServer?.();
  await world?.close();
});

/** The agent's MCP client, on the 2026-07-28 protocol (modern) or the 2025-11-25 one (legacy). */
async function agentSession(amountUc = 100_000_000n, era: 'modern' | 'legacy' = 'modern') {
  const agent = await world.createAgent(`mcp-x402-${Math.random().toString(36).slice(2)}@example.com`, `mcp-x402-${Math.random().toString(36).slice(2)}`, { allowedCategories: ['books'] });
  await grant(world, agent.id, amountUc);
  const client = new Client(
    { name: 'paying-agent', version: '1.0.0' },
    era === 'modern' ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : { versionNegotiation: { mode: 'legacy' } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)));
  const x402 = new x402Client().register(CREDIT_NETWORK, new CreditSchemeClient({ gatewayUrl: world.url, credential: agent.token }));
  const payments: PaymentPayload[] = [];
  const payer = {
    async createPaymentPayload(required: PaymentRequired): Promise<PaymentPayload> {
      const payment = await x402.createPaymentPayload(required);
      payments.push(payment);
      return payment;
    },
  };
  return { agent, client, payer, payments, x402 };
}

describe('a paid MCP tool', () => {
  it('answers an unpaid call with PaymentRequired as structured content and as JSON text, and runs nothing', async () => {
    const { client } = await agentSession();
    const result = (await client.callTool({ name: 'analyse', arguments: { ticker: 'ACME' } })) as ToolResult;
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({
      x402Version: 2,
      resource: { url: 'mcp://tool/analyse' },
      accepts: [{ scheme: 'batch-settlement', network: CREDIT_NETWORK, amount: '500000', payTo: merchant.merchantId, extra: { authority: world.url, offerId: merchant.offerId, resource: 'mcp://tool/analyse' } }],
    });
    expect(JSON.parse(result.content[0]!.text as string)).toEqual(result.structuredContent);
    expect(runs.analyse).toBe(0);
    await client.close();
  });

  it.each(['modern', 'legacy'] as const)('is paid with agent credit (%s protocol): the answer carries the settlement, whose receipt verifies; one capture', async (era) => {
    const { agent, client, payer } = await agentSession(100_000_000n, era);
    const call = await callPaidTool(client, payer, { name: 'analyse', arguments: { ticker: 'ACME' } });
    expect(call.paid).toBe(true);
    expect(call.result.isError).toBeFalsy();
    expect(call.result.content[0]).toMatchObject({ type: 'text', text: 'ACME: strong fundamentals' });
    expect(call.paymentResponse).toMatchObject({ success: true, network: CREDIT_NETWORK, payer: agent.id, extra: { chargedAmount: '500000' } });
    const receipt = await verifyPaymentResponse(call.paymentResponse!, { gatewayUrl: world.url, agentId: agent.id, merchantId: merchant.merchantId });
    expect(await capturesOf(world, receipt.redemptionId)).toBe(1);
    await client.close();
  });

  it('a repeated payment gets the first answer: the tool does not run again and nothing is charged again', async () => {
    const { client, payer } = await agentSession();
    const first = (await client.callTool({ name: 'analyse', arguments: { ticker: 'XYZ' } })) as ToolResult;
    const payment = await payer.createPaymentPayload(first.structuredContent as never);
    const paid = (await client.callTool({ name: 'analyse', arguments: { ticker: 'XYZ' }, _meta: { [MCP_PAYMENT_META_KEY]: payment } })) as ToolResult;
    const before = runs.analyse;
    const again = (await client.callTool({ name: 'analyse', arguments: { ticker: 'XYZ' }, _meta: { [MCP_PAYMENT_META_KEY]: payment } })) as ToolResult;
    expect(again.content).toEqual(paid.content);
    expect(again._meta?.['x402/payment-response']).toEqual(paid._meta?.['x402/payment-response']);
    expect(runs.analyse).toBe(before);
    expect(await capturesOf(world, decodeJwt(payment.payload.attestation as string).jti!)).toBe(1);
    await client.close();
  });

  it("whose settle answers were lost after the gateway captured is presented again by callPaidTool with x402Client's hooks: served, one capture, one run", async () => {
    const { client, x402 } = await agentSession();
    const call = await callPaidTool(client, x402, { name: 'lossy', arguments: { ticker: 'LOST' } });
    expect(call.result.isError).toBeFalsy();
    expect(call.result.content[0]).toMatchObject({ type: 'text', text: 'LOST: served once' });
    expect(call.paymentResponse).toMatchObject({ success: true });
    expect(lossySettles).toBe(3);
    expect(runs.lossy).toBe(1);
    expect(await capturesOf(world, call.paymentResponse!.extra!.commitmentId as string)).toBe(1);
    await client.close();
  });

  it("presented again with other arguments is run for them, never answered with the first call's result: charged once (found from outside)", async () => {
    const { agent, client, x402 } = await agentSession();
    // The first call and its retry at once lose all four settle answers.
    lossyLosing = 4;
    const runsBefore = runs.lossy;
    const first = await callPaidTool(client, x402, { name: 'lossy', arguments: { ticker: 'CCC' } });
    expect(first.result.isError).toBe(true);
    const second = await callPaidTool(client, x402, { name: 'lossy', arguments: { ticker: 'DDD' } });
    expect(second.result.isError).toBeFalsy();
    expect(second.result.content[0]).toMatchObject({ type: 'text', text: 'DDD: served once' });
    expect(runs.lossy - runsBefore).toBe(2);
    const { rows } = await world.gw.gateway.db.query<{ n: bigint | number }>("SELECT count(*) AS n FROM holds WHERE agent_id = $1 AND state = 'captured'", [agent.id]);
    expect(Number(rows[0]!.n)).toBe(1);
    await client.close();
  });

  it('a tool that fails is not charged: its hold is released', async () => {
    const { client, payer, payments } = await agentSession();
    const call = await callPaidTool(client, payer, { name: 'broken', arguments: { ticker: 'ACME' } });
    expect(call.result).toMatchObject({ isError: true, content: [{ text: 'upstream down' }] });
    expect(call.paymentResponse).toBeUndefined();
    const holdId = decodeJwt(payments[0]!.payload.attestation as string).jti!;
    const hold = await world.api('GET', `/v1/redemptions/${holdId}`, { token: merchant.apiKey });
    expect(hold.body).toMatchObject({ state: 'released', capturedUc: '0', releasedUc: '500000' });
    expect(await capturesOf(world, holdId)).toBe(0);
    await client.close();
  });

  it("a paid call whose arguments the tool's schema refuses is not charged: the tool does not run and the hold is released at once (it stayed held until its deadline)", async () => {
    const { client, payer } = await agentSession();
    const { tools } = await client.listTools();
    expect(tools.find((tool) => tool.name === 'analyse')?.inputSchema).toMatchObject({ type: 'object', properties: { ticker: { type: 'string' } }, required: ['ticker'] });
    const required = (await client.callTool({ name: 'analyse', arguments: { ticker: 'ACME' } })) as ToolResult;
    const payment = await payer.createPaymentPayload(required.structuredContent as PaymentRequired);
    const before = runs.analyse;
    const refused = (await client.callTool({ name: 'analyse', arguments: { ticker: 42 }, _meta: { [MCP_PAYMENT_META_KEY]: payment } })) as ToolResult;
    expect(refused).toMatchObject({ isError: true, content: [{ type: 'text', text: expect.stringMatching(/^Input validation error: Invalid arguments for tool analyse: /) }] });
    expect(runs.analyse).toBe(before);
    const holdId = decodeJwt(payment.payload.attestation as string).jti!;
    const hold = await world.api('GET', `/v1/redemptions/${holdId}`, { token: merchant.apiKey });
    expect(hold.body).toMatchObject({ state: 'released', capturedUc: '0', releasedUc: '500000' });
    await client.close();
  });

  it('a payment presented past its window is refused attestation_expired and its hold released at once; the tool does not run', async () => {
    const { client, payer } = await agentSession();
    const required = (await client.callTool({ name: 'analyse', arguments: { ticker: 'ACME' } })) as ToolResult;
    const payment = await payer.createPaymentPayload(required.structuredContent as PaymentRequired);
    const attestation = payment.payload.attestation as string;
    const header = JSON.parse(Buffer.from(attestation.split('.')[0]!, 'base64url').toString()) as { typ: string };
    const nowS = Math.floor(Date.now() / 1000);
    const expired = await world.gw.gateway.signing.sign({ ...decodeJwt(attestation), iat: nowS - 600, exp: nowS - 60 }, header.typ);
    const before = runs.analyse;
    const refused = (await client.callTool({ name: 'analyse', arguments: { ticker: 'ACME' }, _meta: { [MCP_PAYMENT_META_KEY]: { ...payment, payload: { ...payment.payload, attestation: expired } } } })) as ToolResult;
    expect(refused.structuredContent).toMatchObject({ error: 'attestation_expired' });
    expect(runs.analyse).toBe(before);
    const hold = await world.api('GET', `/v1/redemptions/${decodeJwt(attestation).jti!}`, { token: merchant.apiKey });
    expect(hold.body).toMatchObject({ state: 'released', capturedUc: '0', releasedUc: '500000' });
    await client.close();
  });

  it('an agent without enough credit is refused by the gateway with insufficient_credits, and the tool does not run', async () => {
    const { client, payer } = await agentSession(1_000n);
    const before = runs.analyse;
    await expect(callPaidTool(client, payer, { name: 'analyse', arguments: { ticker: 'ACME' } })).rejects.toMatchObject({ code: 'insufficient_credits', status: 402 });
    expect(runs.analyse).toBe(before);
    await client.close();
  });
});
