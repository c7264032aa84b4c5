// The OpenAPI document describes every route the gateway answers (docs/decisions.md "Every route the gateway
// answers is in its document"), the headers its redirects and streams carry, and a 400 wherever an operation's path,
// query, headers or body are checked (docs/decisions.md "What the OpenAPI document declares beyond the route schemas").
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPagePath } from '../../src/platform/http/pages.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

type Operation = { operationId?: string; parameters?: Array<{ in: string; name: string }>; requestBody?: unknown; responses: Record<string, { headers?: Record<string, unknown>; content?: Record<string, unknown>; description?: string }> };

let gw: TestGateway;
let paths: Record<string, Record<string, Operation>>;
beforeAll(async () => {
  gw = await startTestGateway();
  paths = (await (await fetch(`${gw.url}/openapi.json`)).json()).paths;
});
afterAll(() => gw.close());

const operations = (): Array<[string, string, Operation]> =>
  Object.entries(paths).flatMap(([path, methods]) => Object.entries(methods).map(([method, operation]) => [path, method, operation] as [string, string, Operation]));

describe('the routes people and browsers use', () => {
  it('are in the document, each with the media type it answers', async () => {
    const expected: Array<[string, string]> = [
      ['/', 'text/html'],
      ['/favicon.ico', 'image/png'],
      ['/docs', 'text/html'],
      ['/docs/errors', 'text/html'],
      ['/console/{path}', 'text/html'],
      ['/openapi.json', 'application/json'],
    ];
    for (const [path, type] of expected) {
      const get = paths[path]?.get;
      expect(get, path).toBeDefined();
      expect(Object.keys(get!.responses['200']!.content ?? {}), path).toContain(type);
      expect(get!.operationId, path).toMatch(/^[a-z][A-Za-z]+$/);
      const res = await fetch(`${gw.url}${path === '/console/{path}' ? '/console/agents' : path}`);
      expect(res.headers.get('content-type'), path).toContain(type === 'text/html' && path === '/console/{path}' ? 'text/html' : type);
    }
  });

  it('the error catalogue carries the headers of every page: no framing, a CSP its style sheet runs under, no referrer (found from outside: it alone had none)', async () => {
    const res = await fetch(`${gw.url}/docs/errors`);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("frame-ancestors 'none'");
    const nonce = /style-src 'nonce-([^']+)'/.exec(csp)?.[1];
    expect(nonce).toBeDefined();
    expect(await res.text()).toContain(`<style nonce="${nonce}">`);
  });

  it('the API reference and its files are never framed, send no referrer and load from this origin only (found from outside: its CSP allowed framing by this origin and style sheets from anywhere)', async () => {
    for (const path of ['/docs', '/docs/static/swagger-ui.css', '/docs/static/swagger-initializer.js']) {
      const res = await fetch(`${gw.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
      expect(res.headers.get('referrer-policy'), path).toBe('no-referrer');
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, path).toContain("frame-ancestors 'none'");
      expect(csp, path).not.toContain('https:');
      expect(csp, path).not.toContain('validator.swagger.io');
    }
  });

  it('the API reference with a query string redirects once to the page without it (found from outside: it could not render, and its index redirected to itself)', async () => {
    for (const path of ['/docs?utm_source=x', '/docs/?x=1', '/docs/static/index.html?x=1', '/docs/static/']) {
      const res = await fetch(`${gw.url}${path}`, { redirect: 'manual' });
      expect(res.status, path).toBe(302);
      expect(res.headers.get('location'), path).toBe('/docs');
    }
    const followed = await fetch(`${gw.url}/docs/static/index.html?x=1`);
    expect(followed.status).toBe(200);
    expect(new URL(followed.url).pathname).toBe('/docs');
    expect(await followed.text()).toContain('swagger');
  });

  it('declares no body on a redirect or a 304, as none is sent (found from outside: the API reference’s 302 declared JSON)', async () => {
    const bodied = operations().flatMap(([path, method, operation]) =>
      Object.entries(operation.responses)
        .filter(([status, response]) => /^3\d\d$/.test(status) && response.content !== undefined)
        .map(([status]) => `${method.toUpperCase()} ${path} ${status}`),
    );
    expect(bodied).toEqual([]);
    const res = await fetch(`${gw.url}/docs?utm_source=x`, { redirect: 'manual' });
    expect(res.status).toBe(302);
    expect(await res.text()).toBe('');
  });

  it('references every component schema from an operation, but the evidence JWS payload its description names (found from outside: the OAuth answers were inline copies)', async () => {
    const document = await (await fetch(`${gw.url}/openapi.json`)).json();
    const text = JSON.stringify(document);
    const unused = Object.keys(document.components.schemas).filter((name: string) => !text.includes(`"#/components/schemas/${name}"`));
    expect(unused).toEqual(['EvidenceClaims']);
  });

  it('names no wildcard as `{*}`: the console’s client-side routes are `{path}`', () => {
    expect(Object.keys(paths).filter((path) => path.includes('{*}'))).toEqual([]);
    expect(paths['/console/{path}']!.get!.parameters).toEqual([expect.objectContaining({ in: 'path', name: 'path', required: true })]);
  });
});

describe('response headers the document declares', () => {
  it('the authorization start’s redirect: Location and Set-Cookie', () => {
    expect(Object.keys(paths['/oauth/authorize']!.get!.responses['303']!.headers ?? {}).sort()).toEqual(['Location', 'Set-Cookie']);
  });

  it('the identity choice’s Set-Cookie, and /mcp’s X-Accel-Buffering', () => {
    expect(Object.keys(paths['/oauth/select']!.post!.responses['200']!.headers ?? {})).toContain('Set-Cookie');
    expect(Object.keys(paths['/mcp']!.post!.responses['200']!.headers ?? {})).toContain('X-Accel-Buffering');
  });
});

describe('an operation that checks its path, query, headers or body', () => {
  it('declares 400 (the refusal its own checks give)', () => {
    const missing = operations()
      .filter(([, , operation]) => (operation.parameters ?? []).length > 0 || operation.requestBody !== undefined)
      .filter(([, , operation]) => operation.responses['400'] === undefined)
      .map(([path, method, operation]) => `${method} ${path} ${operation.operationId}`);
    expect(missing).toEqual([]);
  });

  it('a mutating operation that takes no body declares 400 too: it refuses a body with members', () => {
    expect(paths['/v1/owner/webhook']!.delete!.responses['400']!.description).toMatch(/takes no body/);
  });

  it('listAgents and verifyMerchantDomain among them, with a problem body', () => {
    expect(Object.keys(paths['/v1/owner/agents']!.get!.responses['400']!.content ?? {})).toEqual(['application/problem+json']);
    expect(Object.keys(paths['/v1/merchants/{id}/verify-domain']!.post!.responses['400']!.content ?? {})).toEqual(['application/problem+json']);
  });
});

describe('idempotency in the document (found from outside, 2026-12-06)', () => {
  it('declares Idempotent-Replayed on the refusals an operation may store and replay, never on those it does not store', () => {
    const capture = paths['/v1/redemptions/{id}/capture']!.post!;
    for (const status of ['200', '400', '409']) expect(capture.responses[status]!.headers, status).toHaveProperty('Idempotent-Replayed');
    for (const status of ['401', '413', '415', '429', '503']) expect(capture.responses[status]?.headers ?? {}, status).not.toHaveProperty('Idempotent-Replayed');
    // A read has no key, so nothing of it is replayed.
    expect(paths['/v1/me']!.get!.responses['403']?.headers ?? {}).not.toHaveProperty('Idempotent-Replayed');
  });

  it("takes the Idempotency-Key's quoted form in its pattern, as the header does", () => {
    const key = (paths['/v1/vouchers']!.post!.parameters as Array<{ in: string; name: string; schema: { pattern: string } }>).find((one) => one.name === 'Idempotency-Key')!;
    const pattern = new RegExp(key.schema.pattern, 'u');
    expect(['k-1', '"k-1"', '550e8400-e29b-41d4-a716-446655440000'].filter((value) => !pattern.test(value))).toEqual([]);
    expect(['"k-1', 'k-1"', '""', 'k 1', '"k"1"'].filter((value) => pattern.test(value))).toEqual([]);
  });

  it('a refusal declared without the header (401) is answered afresh each time, never replayed', async () => {
    const key = `replayed-refusal-${Date.now()}`;
    const send = () => fetch(`${gw.url}/v1/redemptions/no_such_hold/capture`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{}' });
    const first = await send();
    const second = await send();
    expect([first.status, second.status]).toEqual([401, 401]);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
  });
});

describe('a purchase refused or held, in the document (found from outside, 2026-12-06)', () => {
  it("types the 402 members of a mint and an x402 authorize: the rule's, the budget's and the approval's", async () => {
    const document = await (await fetch(`${gw.url}/openapi.json`)).json();
    for (const path of ['/v1/vouchers', '/x402/authorize']) {
      expect(paths[path]!.post!.responses['402']!.content!['application/problem+json'], path).toEqual({ schema: { $ref: '#/components/schemas/SpendingProblem' } });
    }
    const members = document.components.schemas.SpendingProblem.properties;
    expect(Object.keys(members)).toEqual(expect.arrayContaining(['reason', 'agentId', 'budget', 'approvalUrl', 'intentId', 'intent', 'purchase', 'instructions', 'error']));
    expect(Object.keys(members.budget.properties)).toEqual(['id', 'agentId', 'limitUc', 'remainingUc', 'resetsAt']);
    // Members it does not name still pass, as a Problem's do.
    expect(document.components.schemas.SpendingProblem.additionalProperties).toBe(true);
  });
});

describe('rate limits in the document', () => {
  it('declare 429 with Retry-After on every rate-limited route, and none on the routes the limit skips (found from outside: no response declared the header)', () => {
    const skipped = new Set(['/healthz', '/readyz', '/metrics', '/openapi.json']);
    for (const [path, method, operation] of operations()) {
      if (skipped.has(path)) {
        expect(operation.responses['429'], `${method} ${path}`).toBeUndefined();
        expect(operation.responses['4XX']?.description, `${method} ${path}`).not.toContain('429');
      } else {
        expect(operation.responses['429']?.headers, `${method} ${path}`).toHaveProperty('Retry-After');
      }
    }
    expect(operations().filter(([path]) => skipped.has(path)).length).toBeGreaterThanOrEqual(4);
  });
});

describe('the front door in the document', () => {
  it('every operation but /healthz declares the 503 with Retry-After it answers while the gateway starts or stops, a page as a page (found from outside: 16 did not)', () => {
    for (const [path, method, operation] of operations()) {
      const unavailable = operation.responses['503'];
      if (path === '/healthz') {
        expect(unavailable, `${method} ${path}`).toBeUndefined();
        continue;
      }
      expect(unavailable?.headers, `${method} ${path}`).toHaveProperty('Retry-After');
      const page = Object.values(operation.responses).some((response) => response.content?.['text/html'] !== undefined);
      expect(Object.keys(unavailable!.content ?? {}), `${method} ${path}`).toEqual([page ? 'text/html' : path.startsWith('/oauth/') ? 'application/json' : 'application/problem+json']);
    }
  });

  it("names as pages exactly the paths whose document answers pages, so the front door's answer is the one documented", () => {
    for (const [path, method, operation] of operations()) {
      if (method !== 'get') continue;
      const page = Object.values(operation.responses).some((response) => response.content?.['text/html'] !== undefined);
      expect(isPagePath(path.replace(/\{[^}]+\}/g, 'x_1')), path).toBe(page);
    }
  });
});

describe('the document itself, to a linter', () => {
  it('names its licence, and defines no security scheme that no operation uses (found from outside: metrics, on a dev gateway serving /metrics openly)', async () => {
    const document = await (await fetch(`${gw.url}/openapi.json`)).json();
    expect(document.info.license).toEqual({ name: 'Apache-2.0', identifier: 'Apache-2.0' });
    const used = new Set(operations().flatMap(([, , operation]) => ((operation as { security?: Array<Record<string, unknown>> }).security ?? []).flatMap((requirement) => Object.keys(requirement))));
    expect(Object.keys(document.components.securitySchemes).filter((scheme) => !used.has(scheme))).toEqual([]);
  });
});

describe('bodies in the document', () => {
  it('every operation that takes a body declares the 413 and 415 it may answer before reading it (found from outside: most listed them only through 4XX)', () => {
    const missing = operations()
      .filter(([, , operation]) => operation.requestBody !== undefined)
      .filter(([, , operation]) => operation.responses['413'] === undefined || operation.responses['415'] === undefined)
      .map(([path, method]) => `${method} ${path}`);
    expect(missing).toEqual([]);
    expect(paths['/v1/owner/agents']!.post!.responses['413']!.description).toMatch(/^payload_too_large: /);
    expect(paths['/v1/vouchers']!.post!.responses['415']!.description).toMatch(/^unsupported_media_type: /);
  });
});

describe('the document itself', () => {
  it('carries an ETag and no-cache, and a request naming the current ETag gets 304 without it (found from outside: 568 KB again on every read)', async () => {
    const first = await fetch(`${gw.url}/openapi.json`);
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(first.headers.get('cache-control')).toBe('no-cache');
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^"[\w-]{27}"$/);
    expect((await first.json()).openapi).toMatch(/^3\.1\./);
    const again = await fetch(`${gw.url}/openapi.json`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe('');
    expect(again.headers.get('etag')).toBe(etag);
    const stale = await fetch(`${gw.url}/openapi.json`, { headers: { 'if-none-match': '"something-else"' } });
    expect(stale.status).toBe(200);
    expect(stale.headers.get('etag')).toBe(etag);
  });
});

describe('the examples in the document (found from outside, 2026-12-07)', () => {
  it('name ids in the form the gateway issues (a prefix and 26 lower-case base32 characters), not the ULID form it never does', async () => {
    const text = await (await fetch(`${gw.url}/openapi.json`)).text();
    // An id in the examples: a short lower-case prefix, '_', and a body of about an id's length.
    const ids = [...text.matchAll(/\b[a-z]{2,6}_[0-9A-Za-z]{24,28}\b/g)].map(([id]) => id);
    expect(ids.length).toBeGreaterThan(10);
    expect(ids.filter((id) => !/^[a-z]{2,6}_[a-z2-7]{26}$/.test(id))).toEqual([]);
  });
});
