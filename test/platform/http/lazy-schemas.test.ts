// Route schemas compile on first use (src/platform/http/lazy-schemas.ts): start-up compiles none, a route's
// first request compiles what it needs and answers as an eager compile would, and every schema of every
// route compiles (what Fastify's eager compile used to prove at each start).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../../support/gateway.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

describe('route schemas compiled on first use', () => {
  it('compiles nothing at start, then a route its own schemas when it is first called, with the same answers', async () => {
    const atStart = gw.app.schemas.pendingCount;
    expect(atStart).toBeGreaterThan(100);

    // A body that fails validation: the validator compiles, runs and hands Fastify its errors.
    const refused = await fetch(`${gw.url}/v1/agents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'lazy-schemas-1' },
      body: JSON.stringify({ unexpected: true }),
    });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect(refused.status).toBeLessThan(500);
    expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);

    // A serialized answer: the health route's response schema compiles and shapes the body.
    const health = await fetch(`${gw.url}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: expect.any(String) });

    expect(gw.app.schemas.pendingCount).toBeLessThan(atStart);
  });

  it('compiles every schema of every route without an error', () => {
    const compiled = gw.app.schemas.compileAll();
    expect(compiled).toBeGreaterThan(100);
    expect(gw.app.schemas.pendingCount).toBe(0);
    expect(gw.app.schemas.compileAll()).toBe(0);
  });
});
