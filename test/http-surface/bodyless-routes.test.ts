// A route that takes no body refuses a JSON body with members, as a route with a body refuses a member it does not
// know (docs/decisions.md "Strict request bodies"; "A route that takes no body takes {} at most"): a client that
// believes verify-domain takes {"domain": …} is told so rather than answered 200. An empty object is no body.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let owner: string;
let keys = 0;
beforeAll(async () => {
  world = await startWorld();
  owner = await world.humanToken('ada@example.com');
});
afterAll(() => world?.close());

async function send(method: string, path: string, body: string | undefined, contentType = 'application/json') {
  const headers: Record<string, string> = { authorization: `Bearer ${owner}`, 'idempotency-key': `bodyless-${++keys}` };
  if (body !== undefined) headers['content-type'] = contentType;
  const res = await fetch(`${world.url}${path}`, { method, headers, body });
  return { status: res.status, body: await res.json().catch(() => undefined) };
}

describe('a route that takes no body', () => {
  it('refuses a JSON body with members, naming the first, before anything runs', async () => {
    const webhook = await send('DELETE', '/v1/owner/webhook', '{"a":1}');
    expect(webhook.status).toBe(400);
    expect(webhook.body.code).toBe('invalid_input');
    expect(webhook.body.detail).toBe('body/a is not a known member here: DELETE /v1/owner/webhook takes no body (send none, or {})');
    expect(webhook.body.errors).toEqual([{ path: 'body/a', message: 'is not a known member here' }]);

    // Refused before the handler looks for the merchant (400, not 404), so nothing is asked of DNS either.
    const verify = await send('POST', '/v1/merchants/mer_nothing/verify-domain', '{"domain":"example.com"}');
    expect(verify.status).toBe(400);
    expect(verify.body.detail).toMatch(/^body\/domain is not a known member here: POST \/v1\/merchants\/:id\/verify-domain takes no body/);
  });

  it('refuses a JSON body that is not an object', async () => {
    for (const body of ['[]', 'null', '"x"', '0', '[1]']) {
      const res = await send('DELETE', '/v1/owner/webhook', body);
      expect(res.status, body).toBe(400);
      expect(res.body.detail, body).toBe('body must be empty: DELETE /v1/owner/webhook takes no body (send none, or {})');
    }
  });

  it('takes an empty object as no body, as it takes an empty body or none', async () => {
    for (const body of ['{}', ' { } ', '', undefined]) {
      const res = await send('DELETE', '/v1/owner/webhook', body);
      expect(res.status, JSON.stringify(body)).toBe(200);
      expect(res.body.deleted, JSON.stringify(body)).toBe(false);
    }
    expect((await send('POST', '/v1/merchants/mer_nothing/verify-domain', '{}')).status).toBe(404);
  });

  it('still answers a body in another media type 415', async () => {
    expect((await send('DELETE', '/v1/owner/webhook', 'a', 'text/plain')).status).toBe(415);
  });
});
