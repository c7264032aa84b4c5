// The metrics on /metrics beyond HTTP (docs/operations.md lists each): per operation its rate by idempotency
// outcome and result, its errors by code and its duration; group commit's batch sizes and queue depth; webhook
// attempts by outcome, their lag, and the outbox backlog read at the scrape.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { Metrics } from '../../src/platform/metrics.ts';
import { grant } from '../support/ledger-fixture.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';
import { startTestGateway } from '../support/gateway.ts';
import { sha256Hex } from '../../src/platform/hashed-credential.ts';

let target: HookTarget;
let world: World;

beforeAll(async () => {
  target = await startHookTarget();
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

async function scrape(): Promise<string> {
  return (await fetch(`${world.url}/metrics`)).text();
}

/** The value of one sample line, e.g. sample(text, 'acg_operations_total{operation="mintVoucher",…}'). */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('/metrics', () => {
  it('counts each operation by idempotency outcome and result, its errors by code and its duration, and group commit, webhooks and the outbox', async () => {
    const owner = await world.humanToken('metrics-owner@example.com');
    const { merchant } = await registerMerchant(world, owner);
    await markVerified(world, merchant.id);
    const webhook = await configureWebhook(world, owner, merchant.id);
    target.receiver.useSecret(webhook.body.webhookSecret);
    const offer = await world.api('POST', `/v1/merchants/${merchant.id}/offers`, { token: owner, key: 'metrics-offer', body: { name: 'Book', category: 'books', priceUc: '1000000' } });
    const agent = await world.createAgent('metrics-agents@example.com', 'metrics-agent');
    await grant(world, agent.id, 1_500_000n);
    const mint = (key: string, offerId = offer.body.id) => world.api('POST', '/v1/vouchers', { token: agent.token, key, body: { offerId } });

    expect((await mint('m-1')).status).toBe(200);
    expect((await mint('m-1')).status).toBe(200); // a replay
    expect((await world.api('POST', '/v1/vouchers', { token: agent.token, key: 'm-1', body: { offerId: offer.body.id, maxUc: '1000000' } })).status).toBe(409); // the key, reused
    expect((await mint('m-2')).status).toBe(402); // 0.5 credit left: INSUFFICIENT_CREDITS
    // Refused while its credential was checked, before it ran: counted under its operation too (found from outside:
    // an outage's 503s there were missing from the operations' errors).
    expect((await world.api('POST', '/v1/vouchers', { token: 'not-a-token', key: 'm-3', body: { offerId: offer.body.id } })).status).toBe(401);
    // Refused for want of a key, before any was claimed: unclaimed too, not new (found from outside, bb71: a span and
    // the metrics called it new).
    expect((await world.api('POST', '/v1/vouchers', { token: agent.token, body: { offerId: offer.body.id } })).status).toBe(400);
    // Refused by the body's schema, before the operation ran: unclaimed too, with its code (found from outside, bb79:
    // missing from the operations' errors by code).
    expect((await world.api('POST', '/v1/vouchers', { token: agent.token, key: 'm-4', body: { offerId: 5 } })).status).toBe(400);

    const before = await scrape();
    const mintSeries = (labels: string) => `acg_operations_total{operation="mintVoucher",${labels}}`;
    expect(sample(before, mintSeries('idempotency="new",result="ok"'))).toBe(1);
    expect(sample(before, mintSeries('idempotency="replay",result="ok"'))).toBe(1);
    expect(sample(before, mintSeries('idempotency="conflict",result="refused"'))).toBe(1);
    expect(sample(before, mintSeries('idempotency="new",result="refused"'))).toBe(1);
    expect(sample(before, 'acg_operation_errors_total{operation="mintVoucher",code="idempotency_key_reused"}')).toBe(1);
    expect(sample(before, 'acg_operation_errors_total{operation="mintVoucher",code="INSUFFICIENT_CREDITS"}')).toBe(1);
    expect(sample(before, mintSeries('idempotency="unclaimed",result="refused"'))).toBe(3);
    expect(sample(before, 'acg_operation_errors_total{operation="mintVoucher",code="unauthorized"}')).toBe(1);
    expect(sample(before, 'acg_operation_errors_total{operation="mintVoucher",code="idempotency_required"}')).toBe(1);
    expect(sample(before, 'acg_operation_errors_total{operation="mintVoucher",code="invalid_input"}')).toBe(1);
    expect(sample(before, 'acg_operation_duration_seconds_count{operation="mintVoucher"}')).toBe(5);
    // Four batches of one: a batched operation claims its key in the batch, so a replay and a reused key pass through one too.
    expect(sample(before, 'acg_batch_size_count{batcher="mintVoucher"}')).toBe(4);
    expect(sample(before, 'acg_batch_size_bucket{le="1",batcher="mintVoucher"}')).toBe(4);
    expect(sample(before, 'acg_batch_queue_depth{batcher="mintVoucher"}')).toBe(0);
    // The held voucher's event waits in the outbox until the worker runs.
    expect(sample(before, 'acg_webhook_outbox_pending')).toBe(1);
    expect(sample(before, 'acg_webhook_outbox_oldest_due_age_seconds')).toBeGreaterThanOrEqual(0);

    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, succeeded: 1 });
    const after = await scrape();
    expect(sample(after, 'acg_webhook_attempts_total{outcome="succeeded"}')).toBe(1);
    expect(sample(after, 'acg_webhook_delivery_lag_seconds_count')).toBe(1);
    expect(sample(after, 'acg_webhook_outbox_pending')).toBe(0);
    expect(sample(after, 'acg_webhook_outbox_oldest_due_age_seconds')).toBe(0);
  });

  it('observes the webhook delivery lag for every attempt, a failed one too, and its help says what it measures: from due to started', async () => {
    const owner = await world.humanToken('metrics-lag-owner@example.com');
    const { merchant } = await registerMerchant(world, owner);
    await markVerified(world, merchant.id);
    const webhook = await configureWebhook(world, owner, merchant.id);
    target.receiver.useSecret(webhook.body.webhookSecret);
    const before = sample(await scrape(), 'acg_webhook_delivery_lag_seconds_count') ?? 0;
    const retrying = sample(await scrape(), 'acg_webhook_attempts_total{outcome="retrying"}') ?? 0;
    await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: 'red_lag' } }, nowMs: world.gw.clock.nowMs() }),
    );
    target.receiver.answerWith(500);
    try {
      expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ claimed: 1, retrying: 1 });
    } finally {
      target.receiver.answerWith(200);
    }
    const after = await scrape();
    expect(sample(after, 'acg_webhook_attempts_total{outcome="retrying"}')).toBe(retrying + 1);
    expect(sample(after, 'acg_webhook_delivery_lag_seconds_count')).toBe(before + 1);
    const help = after.split('\n').find((line) => line.startsWith('# HELP acg_webhook_delivery_lag_seconds '));
    expect(help).toMatch(/was due .* to when it started; every attempt, whatever its outcome$/);
    expect(help).not.toMatch(/answer|succeeded/);
  });
});

describe('the outbox gauges', () => {
  it('answer the scrape without a read the database does not answer, keep their last values, and say they are stale (found from outside: a stalled database held /metrics 6 s)', async () => {
    const metrics = new Metrics({ processMetrics: false });
    let answer: ((backlog: { pending: number; oldestDueAgeS: number }) => void) | undefined;
    let reads = 0;
    metrics.readOutboxWith(() => {
      reads += 1;
      return reads === 1 ? Promise.resolve({ pending: 3, oldestDueAgeS: 7 }) : new Promise((resolve) => (answer = resolve));
    });
    const fresh = await metrics.registry.metrics();
    expect(fresh).toMatch(/^acg_webhook_outbox_pending 3$/m);
    expect(fresh).toMatch(/^acg_webhook_outbox_read_ok 1$/m);
    // The database stops answering: the scrape still answers, with the last values, marked stale.
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^acg_webhook_outbox_pending 3$/m);
    expect(text).toMatch(/^acg_webhook_outbox_read_ok 0$/m);
    // The read still running is shared, not started again; once it answers, the next scrape is fresh.
    answer!({ pending: 5, oldestDueAgeS: 0 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(await metrics.registry.metrics()).toMatch(/^acg_webhook_outbox_pending 5$/m);
    expect(reads).toBeLessThanOrEqual(3);
  });
});

describe('the metrics documentation', () => {
  it('lists every metric of the gateway in docs/operations.md, and the sample dashboard queries only metrics that exist', async () => {
    const names = (await new Metrics({ processMetrics: true }).registry.getMetricsAsJSON()).map((metric) => metric.name);
    const documented = readFileSync('docs/operations.md', 'utf8');
    for (const name of names.filter((metric) => !/^acg_(process|nodejs)_/.test(metric))) expect(documented, name).toContain(`| \`${name}\` |`);
    const queried = new Set(readFileSync('deploy/grafana/agent-credit-gateway.json', 'utf8').match(/\bacg_\w+/g));
    for (const name of queried) expect(names, name).toContain(name.replace(/_(bucket|sum|count)$/, ''));
  });

  it('declares the media type it serves in the OpenAPI document: the text exposition format, not JSON (found from outside)', async () => {
    const scraped = await fetch(`${world.url}/metrics`);
    await scraped.text();
    const served = scraped.headers.get('content-type')!;
    expect(served).toMatch(/^text\/plain; version=0\.0\.4/);
    const document = await (await fetch(`${world.url}/openapi.json`)).json();
    expect(Object.keys(document.paths['/metrics'].get.responses['200'].content)).toEqual([served]);
  });
});

describe('who may scrape', () => {
  const scrape = (url: string, token?: string) => fetch(`${url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });

  it('with ACG_METRICS_TOKEN_SHA256 set: the scrape credential only (401 with a Bearer challenge otherwise); live mode without it: 401 to everyone', async () => {
    const token = 'acg_scrape_0123456789abcdef';
    const guarded = await startTestGateway({ env: { ACG_METRICS_TOKEN_SHA256: sha256Hex(token) } });
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com' } });
    try {
      for (const presented of [undefined, 'wrong', `${token}x`]) {
        const refused = await scrape(guarded.url, presented);
        expect([refused.status, refused.headers.get('www-authenticate')], String(presented)).toEqual([401, 'Bearer realm="metrics"']);
        expect(await refused.text()).not.toContain('acg_operations_total');
      }
      const allowed = await scrape(guarded.url, token);
      expect(allowed.status).toBe(200);
      expect((await fetch(`${guarded.url}/metrics`, { headers: { authorization: `bearer ${token}` } })).status, 'the scheme in lower case').toBe(200);
      expect(await allowed.text()).toContain('# TYPE');
      for (const presented of [undefined, token]) expect((await scrape(live.url, presented)).status).toBe(401);
      // The OpenAPI says so where it applies: the live document names the scheme, the open dev one does not.
      const documented = async (url: string) => ((await (await fetch(`${url}/openapi.json`)).json()) as { paths: Record<string, { get: { security?: unknown } }> }).paths['/metrics']!.get.security;
      expect(await documented(live.url)).toEqual([{ metrics: [] }]);
      expect(await documented(world.url)).toEqual([]);
    } finally {
      await guarded.close();
      await live.close();
    }
  });
});
