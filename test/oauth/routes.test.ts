// The authorization server's endpoints as a client meets them before any OAuth step runs: a method an
// endpoint does not take, and a path that is no endpoint, answer their own HTTP status (RFC 9110) with the
// RFC 6749 §5.2 error body every /oauth/ refusal has.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

async function ask(method: string, path: string) {
  const res = await fetch(`${gw.url}${path}`, { method, redirect: 'manual' });
  return { status: res.status, allow: res.headers.get('allow'), type: res.headers.get('content-type'), cacheControl: `${res.headers.get('cache-control')}; ${res.headers.get('pragma')}`, body: await res.json() };
}

describe('an OAuth endpoint asked with a method it does not take', () => {
  it('answers 405 with Allow naming the methods it takes and an invalid_request body, never cached', async () => {
    const cases = [
      ['GET', '/oauth/token', 'POST'],
      ['DELETE', '/oauth/token', 'POST'],
      ['PUT', '/oauth/register', 'POST'],
      ['GET', '/oauth/register', 'POST'],
      ['PATCH', '/oauth/select', 'POST'],
      ['POST', '/oauth/authorize', 'GET, HEAD'],
      ['DELETE', '/oauth/consent', 'GET, HEAD'],
      ['DELETE', '/oauth/revoke', 'POST'],
    ];
    for (const [method, path, allow] of cases) {
      expect(await ask(method!, path!), `${method} ${path}`).toEqual({
        status: 405,
        allow,
        type: expect.stringMatching(/^application\/json/),
        cacheControl: 'no-store; no-cache',
        body: { error: 'invalid_request', error_description: `${method} is not allowed on ${path}` },
      });
    }
  });

  it('answers a method on a path that is no endpoint with 404 and the same body shape', async () => {
    for (const [method, path] of [['DELETE', '/oauth/revocation'], ['GET', '/oauth/nothing']]) {
      expect(await ask(method!, path!), `${method} ${path}`).toEqual({
        status: 404,
        allow: null,
        type: expect.stringMatching(/^application\/json/),
        cacheControl: 'no-store; no-cache',
        body: { error: 'invalid_request', error_description: `no route ${method} ${path}` },
      });
    }
  });
});

describe('a request no OAuth route takes, whatever its body', () => {
  it('answers 405 or 404 for the method or path, not 400 for a body that is not JSON, repeats a member or holds a control character', async () => {
    for (const body of ['{bad', '{"a":1,"a":2}', '{"a":"\\u0000"}']) {
      const wrongMethod = await fetch(`${gw.url}/oauth/token`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body });
      expect([wrongMethod.status, wrongMethod.headers.get('allow'), (await wrongMethod.json()).error], body).toEqual([405, 'POST', 'invalid_request']);
      const unknownPath = await fetch(`${gw.url}/oauth/nothing`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect([unknownPath.status, (await unknownPath.json()).error], body).toEqual([404, 'invalid_request']);
    }
    const controlInQuery = await fetch(`${gw.url}/oauth/token?x=%00`, { method: 'GET' });
    expect(controlInQuery.status).toBe(405);
  });
});
