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
  return { status: res.status, allow: res.headers.get('allow'), type: res.headers.get('content-type'), cacheControl: res.headers.get('cache-control'), body: await res.json() };
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
    ];
    for (const [method, path, allow] of cases) {
      expect(await ask(method!, path!), `${method} ${path}`).toEqual({
        status: 405,
        allow,
        type: expect.stringMatching(/^application\/json/),
        cacheControl: 'no-store',
        body: { error: 'invalid_request', error_description: `${method} is not allowed on ${path}` },
      });
    }
  });

  it('answers a method on a path that is no endpoint with 404 and the same body shape', async () => {
    for (const [method, path] of [['DELETE', '/oauth/revoke'], ['GET', '/oauth/nothing']]) {
      expect(await ask(method!, path!), `${method} ${path}`).toEqual({
        status: 404,
        allow: null,
        type: expect.stringMatching(/^application\/json/),
        cacheControl: 'no-store',
        body: { error: 'invalid_request', error_description: `no route ${method} ${path}` },
      });
    }
  });
});
