// Traces in a gateway built in the test, with the real SDK exporting to the test OTLP receiver. Group commit: a
// batch serves many traces, so it is one span linked with every call's span (and a child of its first call's),
// while what the batch decides for each call stays on that call's span (its mandate decision), and each call's
// webhook delivery continues that call's own trace, never the batch's or another call's. MCP: a tool call is a
// server span continuing the trace context its request's `_meta` carries, with the operation below it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batcherOf } from '../../src/platform/operations.ts';
import { tracing } from '../../src/platform/telemetry.ts';
import { voucherOperations } from '../../src/vouchers/operations.ts';
import { envelope, MODERN } from '../mcp/helpers.ts';
import { grant } from '../support/ledger-fixture.ts';
import { configureWebhook, markVerified, registerMerchant, type HookTarget } from '../support/merchants.ts';
import type { OtlpReceiver, ReceivedSpan } from '../support/otlp-receiver.ts';
import { startTracedWorld, type TracedWorld } from '../support/traced-world.ts';
import { waitFor } from '../support/wait.ts';
import type { World } from '../support/world.ts';

let otlp: OtlpReceiver;
let target: HookTarget;
let world: World;
let traced: TracedWorld;

beforeAll(async () => {
  traced = await startTracedWorld({ outboundHttp: false });
  ({ otlp, target, world } = traced);
});
afterAll(() => traced?.close());

describe('traces of a group-commit batch', () => {
  it('link each call with the batch that served it, keep each mandate decision on its call, and deliver each webhook in its call\'s trace', async () => {
    expect(tracing()).toBe(true);
    const owner = await world.humanToken('batch-owner@example.com');
    const { merchant } = await registerMerchant(world, owner);
    await markVerified(world, merchant.id);
    const webhook = await configureWebhook(world, owner, merchant.id);
    target.receiver.useSecret(webhook.body.webhookSecret);
    const offer = await world.api('POST', `/v1/merchants/${merchant.id}/offers`, { token: owner, key: 'batch-offer', body: { name: 'Book', category: 'books', priceUc: '1000000' } });
    const agents = [];
    for (const name of ['one', 'two', 'three']) {
      const agent = await world.createAgent('batch-agents@example.com', `batch-${name}`);
      await grant(world, agent.id, 5_000_000n);
      agents.push(agent);
    }

    const batcher = batcherOf(world.gw.gateway, voucherOperations(world.gw.services.vouchers).mintVoucher);
    batcher.pause();
    const answers = agents.map((agent, index) => world.api('POST', '/v1/vouchers', { token: agent.token, key: `batch-mint-${index}`, body: { offerId: offer.body.id } }));
    await waitFor(() => batcher.queued, { until: (n) => n === 3, what: 'three mints waiting for one batch' });
    batcher.resume();
    expect((await Promise.all(answers)).map((answer) => answer.status)).toEqual([200, 200, 200]);

    const named = (name: string) => otlp.spans.filter((span) => span.name === name);
    await waitFor(() => named('operation mintVoucher').length + named('batch mintVoucher').length, { until: (n) => n >= 4, what: 'three operation spans and their batch span' });
    const operations = named('operation mintVoucher');
    const [batch] = named('batch mintVoucher') as [ReceivedSpan];
    expect(operations).toHaveLength(3);
    expect(new Set(operations.map((span) => span.traceId)).size).toBe(3);
    expect(batch.attributes['acg.batch.size']).toBe(3);

    // One batch, three traces: each call links to it with its size; it is a child of one call and links the two others.
    const parent = operations.find((span) => span.spanId === batch.parentSpanId)!;
    expect(parent.traceId).toBe(batch.traceId);
    for (const operation of operations) expect(operation.links).toContainEqual({ traceId: batch.traceId, spanId: batch.spanId, attributes: { 'acg.batch.size': 3 } });
    expect(batch.links.map((link) => link.spanId).sort()).toEqual(operations.filter((span) => span !== parent).map((span) => span.spanId).sort());

    // Each call's own decision on its own span; none on the batch's, which belongs to one of the traces.
    for (const operation of operations) expect(operation.events.filter((event) => event.name === 'mandate.decision')).toHaveLength(1);
    expect(batch.events).toEqual([]);

    // Each delivery carries its own call's trace.
    // A new receiver is tried one attempt at a time until it answers 2xx; then the rest go at once.
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, succeeded: 1 });
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 2, succeeded: 2 });
    const held = target.receiver.received.filter((request) => JSON.parse(request.body).type === 'redemption.held');
    expect(held).toHaveLength(3);
    const traced = held.map((request) => String(request.headers.traceparent).split('-')[1]).sort();
    expect(traced).toEqual(operations.map((span) => span.traceId).sort());
  });
});

describe('traces of an MCP tool call', () => {
  it('continue the traceparent of the request\'s _meta, with the operation span as a child of the tool call\'s', async () => {
    const owner = await world.humanToken('mcp-trace-owner@example.com');
    const { merchant } = await registerMerchant(world, owner, { domain: 'mcp-trace-shop.com' });
    await markVerified(world, merchant.id);
    const offer = await world.api('POST', `/v1/merchants/${merchant.id}/offers`, { token: owner, key: 'mcp-trace-offer', body: { name: 'Book', category: 'books', priceUc: '1000000' } });
    const agent = await world.createAgent('mcp-trace-agents@example.com', 'mcp-trace-agent');
    await grant(world, agent.id, 5_000_000n);
    const token = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`);
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const response = await fetch(`${world.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': MODERN,
        'mcp-method': 'tools/call',
        'mcp-name': 'mint_voucher',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: { name: 'mint_voucher', arguments: { offerId: offer.body.id, idempotencyKey: 'mcp-traced' }, _meta: { ...envelope(), traceparent: `00-${traceId}-00f067aa0ba902b7-01` } },
      }),
    });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { result: { isError?: boolean } }).result.isError).toBeFalsy();

    const spans = await waitFor(() => otlp.spans.filter((span) => span.traceId === traceId), {
      until: (found) => found.some((span) => span.name === 'operation mintVoucher'),
      what: 'the tool call and its operation in the caller\'s trace',
    });
    const tool = spans.find((span) => span.name === 'tools/call mint_voucher')!;
    expect(tool).toMatchObject({ kind: 2, parentSpanId: '00f067aa0ba902b7' });
    expect(tool.attributes).toMatchObject({ 'mcp.method.name': 'tools/call', 'gen_ai.tool.name': 'mint_voucher', 'jsonrpc.request.id': '7' });
    expect(spans.find((span) => span.name === 'operation mintVoucher')!.parentSpanId).toBe(tool.spanId);
  });
});
