import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { INVALID_REASONS, SETTLE_ERROR_REASONS } from '../../src/x402/schemas.ts';
import { ERROR_CATALOGUE } from '../../src/platform/errors.ts';
import { REFUSAL_REASONS } from '../../src/platform/reasons.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

describe('operations and documentation', () => {
  it('answers /healthz and /readyz', async () => {
    expect(await (await fetch(`${gw.url}/healthz`)).json()).toEqual({ status: 'ok', mode: 'dev' });
    const ready = await (await fetch(`${gw.url}/readyz`)).json();
    expect(ready.status).toBe('ready');
    expect(ready.storage).toBe(gw.database.db.kind === 'postgres' ? 'postgresql' : 'pglite');
  });

  it('reports not ready when a migration is missing', async () => {
    await gw.gateway.db.query('DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations) RETURNING version');
    try {
      const res = await fetch(`${gw.url}/readyz`);
      expect(res.status).toBe(503);
      expect((await res.json()).code).toBe('storage_unavailable');
    } finally {
      const { listMigrations } = await import('../../src/platform/db/migrate.ts');
      const last = listMigrations().at(-1)!;
      await gw.gateway.db.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [last.version, last.name, last.checksum]);
    }
  });

  it('reports not ready on a database a newer release migrated: an older instance leaves the rotation', async () => {
    await gw.gateway.db.query(`INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'from_a_newer_release', 'x')`);
    try {
      const res = await fetch(`${gw.url}/readyz`);
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({ code: 'storage_unavailable', detail: expect.stringMatching(/^the database was migrated by a newer release of the gateway \(it has 9999_from_a_newer_release,/) });
    } finally {
      await gw.gateway.db.query('DELETE FROM schema_migrations WHERE version = 9999');
    }
    expect((await fetch(`${gw.url}/readyz`)).status).toBe(200);
  });

  it('serves a valid OpenAPI 3.1 document built from the route schemas', async () => {
    const document = await (await fetch(`${gw.url}/openapi.json`)).json();
    expect(document.openapi).toBe('3.1.0');
    const validator = new Validator();
    const result = await validator.validate(document);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(document.paths['/healthz']).toBeDefined();
    expect(document.components.schemas.Problem).toBeDefined();
  });

  it('renders the API reference page and the error catalogue', async () => {
    const docs = await fetch(`${gw.url}/docs/`);
    expect(docs.status).toBe(200);
    expect(await docs.text()).toContain('swagger');
    const errors = await fetch(`${gw.url}/docs/errors`);
    expect(await errors.text()).toContain('id="idempotency_key_reused"');
  });

  it('explains every reason the x402 facilitator answers on the error catalogue, under its own anchor', async () => {
    const page = await (await fetch(`${gw.url}/docs/errors`)).text();
    for (const reason of new Set([...INVALID_REASONS, ...SETTLE_ERROR_REASONS])) {
      expect(page, reason).toMatch(new RegExp(`<tr id="x402-${reason}"><td><code>${reason}</code></td><td>(verify|settle|verify, settle)</td><td>[A-Z][^<]{20,}</td></tr>`));
    }
    expect(page).toContain('<tr id="x402-amount_exceeds_authorized"><td><code>amount_exceeds_authorized</code></td><td>settle</td>');
    expect(page).toContain('<tr id="x402-hold_expired"><td><code>hold_expired</code></td><td>verify, settle</td>');
  });

  it('explains every reason a refusal may carry beside its code, under its own anchor, linked to its codes (found from outside: none was on the page)', async () => {
    const page = await (await fetch(`${gw.url}/docs/errors`)).text();
    const reasons = Object.entries(REFUSAL_REASONS);
    expect(reasons.length).toBeGreaterThan(20);
    for (const [reason, entry] of reasons) {
      for (const code of entry.codes) expect(Object.keys(ERROR_CATALOGUE), `${reason}: ${code}`).toContain(code);
      const codes = entry.codes.map((code) => `<a href="#${code}"><code>${code}</code></a>`).join(', ');
      expect(page, reason).toMatch(new RegExp(`<tr id="reason-${reason}"><td><code>${reason}</code></td><td>${codes.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}</td><td>[a-z][^<]{20,}</td></tr>`));
    }
    // The reasons the mandate's rules answer with, among them.
    for (const reason of ['budget_exceeded', 'merchant_not_allowed', 'mandate_not_valid', 'above_approval_threshold', 'budget_wider_than_parent', 'agent_frozen']) {
      expect(page).toContain(`id="reason-${reason}"`);
    }
  });

  it('exposes Prometheus metrics counting requests by route', async () => {
    await fetch(`${gw.url}/healthz`);
    const text = await (await fetch(`${gw.url}/metrics`)).text();
    expect(text).toMatch(/acg_http_requests_total\{method="GET",route="\/healthz",status="200"\} \d+/);
  });
});

describe('rate limits', () => {
  it('answers 429 rate_limited with Retry-After once an address exceeds its limit', async () => {
    const limited = await startTestGateway({ env: { ACG_RATE_LIMIT_PER_ADDRESS: '3' } });
    try {
      const statuses: number[] = [];
      let last: Response | undefined;
      for (let i = 0; i < 5; i++) {
        last = await fetch(`${limited.url}/docs/errors`);
        statuses.push(last.status);
      }
      expect(statuses).toEqual([200, 200, 200, 429, 429]);
      // The refusal names the address (found from outside: behind a proxy it is the proxy's, and says so).
      expect((await last!.clone().json()).detail).toContain('from this address (127.0.0.1)');
      expect(Number(last!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect((await last!.json()).code).toBe("rate_limited");
      expect((await fetch(`${limited.url}/healthz`)).status).toBe(200); // health checks are never limited
    } finally {
      await limited.close();
    }
  });
});

describe('live mode', () => {
  it('answers 503 signing_configuration_required where a signing key is needed and none is configured', async () => {
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example' } });
    try {
      const res = await fetch(`${live.url}/.well-known/jwks.json`);
      expect(res.status).toBe(503);
      expect((await res.json()).code).toBe('signing_configuration_required');
    } finally {
      await live.close();
    }
  });
});
