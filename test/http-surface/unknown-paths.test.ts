// A path that names no endpoint is 404 not_found "no route …" (docs/decisions.md "Unknown routes and methods"),
// whatever route it nearly matches: a trailing slash after a collection matched the resource route with an empty
// id (400 about an id the client never sent, or a 405 denying the collection's own POST), and a console static
// file's name that was too long, or not a file's, fell through to the console's shell (200 HTML).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let owner: string;
beforeAll(async () => {
  world = await startWorld();
  owner = await world.humanToken('ada@example.com');
});
afterAll(() => world?.close());

describe('a trailing slash after a path', () => {
  it('is no endpoint: 404 not_found naming the path, with or without a credential, for any method', async () => {
    const cases: Array<[string, string]> = [
      ['GET', '/v1/merchants/'],
      ['POST', '/v1/merchants/'],
      ['GET', '/v1/owner/agents/'],
      ['GET', '/v1/payments/topups/'],
      ['GET', '/v1/offers/'],
      ['DELETE', '/v1/owner/agents/'],
      ['GET', '/v1/owner/agents//mandate'],
    ];
    for (const [method, path] of cases) {
      for (const token of [owner, undefined]) {
        const res = await world.api(method, path, { token });
        expect({ status: res.status, code: res.body?.code, detail: res.body?.detail }, `${method} ${path}`).toEqual({
          status: 404,
          code: 'not_found',
          detail: `no route ${method} ${path}`,
        });
        expect(res.headers.get('allow')).toBeNull();
      }
    }
  });

  it('under /oauth/ too, with the OAuth error body', async () => {
    const res = await world.api('POST', '/oauth/token/');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: 'invalid_request', error_description: 'no route POST /oauth/token/' });
  });

  it('leaves the routes that end in a slash working', async () => {
    const landing = await world.api('GET', '/');
    expect(landing.status).toBe(200);
    const docs = await world.api('GET', '/docs/');
    expect(docs.status).toBe(200);
    expect(docs.headers.get('content-type')).toMatch(/^text\/html/);
  });
});

describe('a path one letter off a route', () => {
  it('names the route a singular or plural last word misses (found from outside: /refund for /refunds)', async () => {
    const res = await world.api('POST', '/v1/redemptions/hold_abc/refund', { token: owner });
    expect([res.status, res.body.detail]).toEqual([404, 'no route POST /v1/redemptions/hold_abc/refund; did you mean POST /v1/redemptions/hold_abc/refunds?']);
    expect((await world.api('GET', '/v1/offer')).body.detail).toBe('no route GET /v1/offer; did you mean GET /v1/offers?');
    // Only a route of the same method: no hint towards another method's route, nor for a path near nothing.
    expect((await world.api('DELETE', '/v1/offer')).body.detail).toBe('no route DELETE /v1/offer');
    expect((await world.api('GET', '/v1/nothing')).body.detail).toBe('no route GET /v1/nothing');
  });
});

describe('a console static file that is not one', () => {
  it('a name over 500 characters is 414 uri_too_long, as every other over-long path parameter', async () => {
    const res = await world.api('GET', `/console/static/${'a'.repeat(501)}`);
    expect(res.status).toBe(414);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.code).toBe('uri_too_long');
  });

  it('a path under /console/static/ that no file has is 404 problem, never the console page', async () => {
    // A single name no built file has, of any shape, is 404 too (found from outside: one not shaped like a built file's was 400 with the schema's words).
    for (const path of ['/console/static', '/console/static/', '/console/static/a/b', `/console/static/x/${'b'.repeat(600)}`, '/console/static/app.js', '/console/static/console-000000000000.js']) {
      const res = await world.api('GET', path);
      expect(res.status, path).toBe(path.length > 520 ? 414 : 404);
      expect(res.headers.get('content-type'), path).toMatch(/^application\/problem\+json/);
    }
  });

  it('every other path under /console/ is still the console’s shell (its routes are the browser’s)', async () => {
    for (const path of ['/console/agents/agt_1', '/console/callback', '/console/a/b/c']) {
      const res = await world.api('GET', path);
      expect(res.headers.get('content-type'), path).toMatch(/^text\/html/);
    }
  });
});
