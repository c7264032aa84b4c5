// A page for people answers its refusals as a page: where a route's document declares a status as text/html, the
// platform's refusals of that status (the text guard's control and bidi characters) are an HTML error page with the
// page headers, not a problem or OAuth JSON body (docs/decisions.md "A page's refusals are pages").
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

async function get(path: string) {
  const res = await fetch(`${gw.url}${path}`, { redirect: 'manual' });
  return { status: res.status, headers: res.headers, body: await res.text() };
}

describe('a page asked with text the gateway refuses', () => {
  it('answers 400 as an HTML page, as the document declares, with the pages’ headers', async () => {
    for (const path of [
      '/oauth/authorize?client_id=a%00',
      '/oauth/consent?request_id=a%E2%80%AE',
      '/payments/topups/a%00b',
      '/payments/purchases/a%00b',
      '/payments/purchases/a%E2%80%AEb',
    ]) {
      const res = await get(path);
      expect(res.status, path).toBe(400);
      expect(res.headers.get('content-type'), path).toBe('text/html; charset=utf-8');
      expect(res.headers.get('content-security-policy'), path).toMatch(/frame-ancestors 'none'/);
      expect(res.headers.get('cache-control'), path).toBe('no-store');
      expect(res.body, path).toMatch(/^<!doctype html>/);
      expect(res.body, path).toContain('control character');
      // What the request carried is never echoed into the page.
      expect(res.body, path).not.toMatch(/[\u0000\u202e]/);
    }
  });

  it('answers a page path that is not valid percent-encoded UTF-8 as an HTML page too, though no route is found for it (found from outside)', async () => {
    for (const path of ['/payments/topups/%ED%A0%80', '/payments/purchases/a%FFb', '/console/agents/%ED%A0%80', '/console/%zz']) {
      const res = await get(path);
      expect([res.status, res.headers.get('content-type')], path).toEqual([400, 'text/html; charset=utf-8']);
      expect(res.headers.get('content-security-policy'), path).toMatch(/frame-ancestors 'none'/);
      expect(res.body, path).toMatch(/^<!doctype html>/);
      expect(res.body, path).toContain('not valid percent-encoded UTF-8');
    }
    const api = await get('/v1/redemptions/%ED%A0%80');
    expect([api.status, api.headers.get('content-type')]).toEqual([400, 'application/problem+json; charset=utf-8']);
  });

  it('the document declares those 400s as text/html only', async () => {
    const document = await (await fetch(`${gw.url}/openapi.json`)).json();
    for (const [path, method] of [['/oauth/authorize', 'get'], ['/oauth/consent', 'get'], ['/payments/topups/{id}', 'get'], ['/payments/purchases/{id}', 'get']] as const) {
      expect(Object.keys(document.paths[path][method].responses['400'].content), path).toEqual(['text/html']);
    }
  });

  it('an API route and an OAuth endpoint keep their bodies', async () => {
    const api = await get('/v1/offers?category=a%00');
    expect(api.status).toBe(400);
    expect(api.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    const token = await fetch(`${gw.url}/oauth/token?x=a%00`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '' });
    expect(token.status).toBe(400);
    expect(token.headers.get('content-type')).toMatch(/^application\/json/);
    expect((await token.json()).error).toBe('invalid_request');
  });
});
