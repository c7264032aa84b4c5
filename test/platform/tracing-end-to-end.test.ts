// OpenTelemetry end to end: a real `acg serve` exporting to an OTLP/HTTP receiver (test/support/otlp-receiver.ts)
// with nothing but the standard variables, once per protocol (http/protobuf and http/json). A merchant with a
// webhook sells an offer; the agent mints a voucher with a `traceparent` and a `tracestate` of its own. That one
// trace then holds the server span, the operation span and its database statements, a link to the group-commit
// batch that names its size, and the webhook attempt, whose request reaches the merchant with the same trace id
// and the caller's tracestate; the request's log line names the trace. Neither the exported spans nor the logs
// carry any credential or secret the test used (bearer tokens, the operator credential, the API key, the webhook
// secret, the voucher).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDevIssuerKeys, mintDevToken } from '../../src/identity/dev-issuers.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { freePort } from '../support/doh-server.ts';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.ts';
import { spawnGateway, type GatewayProcess } from '../support/process.ts';
import { makeTestCertificate, type TestCertificate } from '../support/test-certificate.ts';
import { waitFor } from '../support/wait.ts';
import { startWebhookReceiverOn443, type WebhookReceiver } from '../support/webhook-receiver.ts';

const DOMAIN = 'otel-shop.com';
const HOOK_URL = `https://hooks.${DOMAIN}/acg/events`;
const PRELOAD = pathToFileURL(path.resolve('test/support/loopback-dns.mjs')).href;
const SERVER = 2;
const CLIENT = 3;

interface Shop {
  secrets: Record<string, string>;
  agentToken: string;
  offerId: string;
}

/** Owner, funded agent, verified merchant with an API key, a webhook and an offer: all through the gateway's API. */
async function openShop(baseUrl: string, dataDir: string, receiver: WebhookReceiver): Promise<Shop> {
  const keys = await loadDevIssuerKeys(dataDir);
  const nowS = Math.floor(Date.now() / 1000);
  const common = { baseUrl, audience: 'agent-credit-gateway', nowS, ownerEmailClaim: 'owner_email', email: 'otel@example.com', ownerEmail: 'otel@example.com' };
  const human = await mintDevToken(keys, { ...common, kind: 'human', subject: 'human:otel@example.com' });
  const agentToken = await mintDevToken(keys, { ...common, kind: 'agent', subject: 'otel-agent' });
  const operator = readFileSync(path.join(dataDir, 'operator-token'), 'utf8').trim();
  let n = 0;
  const api = async (method: string, route: string, token: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Bearer ${token}`, 'idempotency-key': `setup-${++n}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(`${baseUrl}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const answer = (await response.json()) as any;
    if (response.status >= 300) throw new Error(`${method} ${route}: ${response.status} ${JSON.stringify(answer)}`);
    return answer;
  };
  const agent = await api('POST', '/v1/owner/agents', human, { name: 'Traced agent', identity: { issuer: `${baseUrl}/dev/issuers/agent`, subject: 'otel-agent' } });
  await api('POST', '/v1/operator/credit-grants', operator, { agentId: agent.id, amountUc: '5000000', note: 'tracing test' });
  const { merchant } = await api('POST', '/v1/merchants', human, { name: 'Traced shop', domain: DOMAIN, categories: ['books'] });
  await api('POST', '/dev/dns/records', operator, { merchantId: merchant.id });
  await api('POST', `/v1/merchants/${merchant.id}/verify-domain`, human);
  const key = await api('POST', `/v1/merchants/${merchant.id}/api-keys`, human, { name: 'traced', scopes: ['redemptions:capture'] });
  const webhook = await api('PUT', `/v1/merchants/${merchant.id}/webhook`, human, { url: HOOK_URL });
  receiver.useSecret(webhook.webhookSecret);
  const offer = await api('POST', `/v1/merchants/${merchant.id}/offers`, human, { name: 'Traced book', category: 'books', priceUc: '1000000' });
  return {
    secrets: { human, agentToken, operator, apiKey: key.secretKey, webhookSecret: webhook.webhookSecret },
    agentToken,
    offerId: offer.id,
  };
}

function hex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}

describe.each(['http/protobuf', 'http/json'])('OpenTelemetry traces of a real acg serve, exported over OTLP %s', (protocol) => {
  let otlp: OtlpReceiver;
  let cert: TestCertificate;
  let hooks: WebhookReceiver;
  let dataDir: string;
  let gateway: GatewayProcess;
  let dropDatabase = async () => {};

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    cert = makeTestCertificate({ dns: [`hooks.${DOMAIN}`] });
    hooks = await startWebhookReceiverOn443(cert);
    dataDir = mkdtempSync(path.join(tmpdir(), 'acg-tracing-'));
    writeFileSync(path.join(dataDir, 'ca.pem'), cert.certPem);
    let databaseUrl = '';
    if (onPostgres()) {
      const created = await createPostgresDatabase();
      databaseUrl = created.url;
      dropDatabase = created.drop;
    }
    gateway = await spawnGateway(
      {
        ACG_DATA_DIR: dataDir,
        PORT: String(await freePort()),
        DATABASE_URL: databaseUrl,
        ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true',
        ACG_OUTBOUND_CA_FILE: path.join(dataDir, 'ca.pem'),
        ACG_WEBHOOK_POLL_INTERVAL_MS: '200',
        NODE_OPTIONS: `--import ${PRELOAD}`,
        ACG_TEST_LOOPBACK_SUFFIX: DOMAIN,
        ACG_TEST_LOOPBACK_ADDRESS: new URL(hooks.url).hostname,
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
        OTEL_SERVICE_NAME: 'acg-under-test',
        OTEL_BSP_SCHEDULE_DELAY: '100',
      },
      { timeoutMs: 120_000 },
    );
  }, 150_000);
  afterAll(async () => {
    await gateway?.kill();
    await hooks?.close();
    await otlp?.close();
    await dropDatabase();
    cert?.remove();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('follows a mint from the caller through the operation, its batch and its statements to the merchant\'s webhook, and exports no secret', async () => {
    const shop = await openShop(gateway.url, dataDir, hooks);
    const traceId = hex(16);
    const callerSpanId = hex(8);
    const minted = await fetch(`${gateway.url}/v1/vouchers`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${shop.agentToken}`,
        'content-type': 'application/json',
        'idempotency-key': 'traced-mint',
        traceparent: `00-${traceId}-${callerSpanId}-01`,
        tracestate: 'vendor=abc,other=x',
      },
      body: JSON.stringify({ offerId: shop.offerId }),
    });
    expect(minted.status).toBe(200);
    const voucher = ((await minted.json()) as { voucher: string }).voucher;
    const secrets = { ...shop.secrets, voucher };

    // The merchant's webhook request carries the trace, and the caller's vendor state with it (found from outside: it was dropped).
    const delivery = await waitFor(() => hooks.received.find((r) => JSON.parse(r.body).type === 'redemption.held'), { what: 'the redemption.held webhook', timeoutMs: 15_000 });
    expect(delivery.verified).toBe(true);
    expect(delivery.headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(delivery.headers.tracestate).toBe('vendor=abc,other=x');

    const inTrace = () => otlp.spans.filter((span) => span.traceId === traceId);
    const named = (name: string) => (span: ReceivedSpan) => span.name === name;
    const spans = await waitFor(inTrace, {
      until: (found) => found.some(named('POST /v1/vouchers')) && found.some(named('webhook attempt')) && found.some((span) => span.kind === CLIENT && span.attributes['server.address'] === `hooks.${DOMAIN}`),
      what: 'the mint, its batch and the webhook attempt in one trace',
      timeoutMs: 15_000,
    });
    const byId = new Map(spans.map((span) => [span.spanId, span]));
    const within = (span: ReceivedSpan, ancestor: ReceivedSpan): boolean => {
      for (let at: ReceivedSpan | undefined = span; at; at = byId.get(at.parentSpanId)) if (at.parentSpanId === ancestor.spanId) return true;
      return false;
    };

    const server = spans.find(named('POST /v1/vouchers'))!;
    expect(server).toMatchObject({ kind: SERVER, parentSpanId: callerSpanId });
    expect(server.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.route': '/v1/vouchers', 'url.path': '/v1/vouchers', 'http.response.status_code': 200 });
    // The server the client named, and its port (found from outside: neither was there).
    expect(server.attributes).toMatchObject({ 'server.address': '127.0.0.1', 'server.port': Number(new URL(gateway.url).port) });
    expect(server.resource['service.name']).toBe('acg-under-test');

    const operation = spans.find(named('operation mintVoucher'))!;
    expect(operation.parentSpanId).toBe(server.spanId);
    expect(operation.attributes).toMatchObject({ 'acg.operation.name': 'mintVoucher', 'acg.idempotency.outcome': 'new' });
    expect(operation.events.find((event) => event.name === 'mandate.decision')?.attributes).toMatchObject({ 'acg.mandate.decision': 'allowed' });

    // The batch: linked from the operation with its size; alone in it, the mint's batch is a child of its operation.
    const batch = spans.find(named('batch mintVoucher'))!;
    expect(batch.attributes).toMatchObject({ 'acg.batch.name': 'mintVoucher', 'acg.batch.size': 1 });
    expect(operation.links).toContainEqual({ traceId, spanId: batch.spanId, attributes: { 'acg.batch.size': 1 } });
    expect(batch.parentSpanId).toBe(operation.spanId);

    // The operation's statements: the batch's transaction, in PostgreSQL's dialect on either driver.
    const statements = spans.filter((span) => span.kind === CLIENT && span.attributes['db.system.name'] === 'postgresql' && within(span, operation));
    expect(statements.length).toBeGreaterThanOrEqual(3);
    expect(statements.some((span) => within(span, batch) && /INSERT INTO holds/.test(String(span.attributes['db.query.text'])))).toBe(true);
    expect(new Set(statements.map((span) => span.attributes['acg.db.driver']))).toEqual(new Set([onPostgres() ? 'pg' : 'pglite']));
    // Each names its operation as the database conventions ask: a command word, the first operation after a WITH
    // (found from outside: WITH, a clause), and on PostgreSQL the database and its server.
    const operations = new Set(statements.map((span) => span.attributes['db.operation.name']));
    expect(operations.has('WITH')).toBe(false);
    expect(operations.has('INSERT')).toBe(true);
    const hold = statements.find((span) => /INSERT INTO holds/.test(String(span.attributes['db.query.text'])))!;
    expect(hold.name).toBe(hold.attributes['db.operation.name']);
    if (onPostgres()) {
      const url = new URL(process.env.TEST_DATABASE_URL!);
      expect(statements.every((span) => span.attributes['server.address'] === url.hostname && span.attributes['server.port'] === Number(url.port || 5432))).toBe(true);
      expect(statements.every((span) => typeof span.attributes['db.namespace'] === 'string' && span.attributes['db.namespace'] !== '')).toBe(true);
    } else {
      expect(statements.some((span) => 'server.address' in span.attributes || 'db.namespace' in span.attributes)).toBe(false);
    }

    // The webhook attempt continues the trace, and its HTTP request is a child of it.
    const attempt = spans.find(named('webhook attempt'))!;
    expect(attempt.attributes).toMatchObject({ 'acg.webhook.outcome': 'succeeded', 'http.response.status_code': 200, 'server.address': `hooks.${DOMAIN}` });
    const post = spans.find((span) => span.kind === CLIENT && span.attributes['server.address'] === `hooks.${DOMAIN}`)!;
    expect(post.parentSpanId).toBe(attempt.spanId);
    expect(delivery.headers.traceparent).toBe(`00-${traceId}-${attempt.spanId}-01`);

    // The request's log line names the trace and the server span.
    expect(gateway.logs).toContainEqual(expect.objectContaining({ trace_id: traceId, span_id: server.spanId, msg: 'request completed' }));

    // No secret anywhere: every export as received, every decoded span, every log line.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const exported = [...otlp.exports.map((e) => e.body.toString('latin1')), JSON.stringify(otlp.spans)].join('\n');
    const logged = gateway.logs.map((line) => JSON.stringify(line)).join('\n');
    for (const [name, secret] of Object.entries(secrets)) {
      expect(secret.length, name).toBeGreaterThan(20);
      expect(exported.includes(secret), `${name} in the exported spans`).toBe(false);
      expect(logged.includes(secret), `${name} in the logs`).toBe(false);
    }
    expect(otlp.exports.every((e) => e.path === '/v1/traces' && e.contentType.startsWith(protocol === 'http/json' ? 'application/json' : 'application/x-protobuf'))).toBe(true);
  }, 90_000);
});
