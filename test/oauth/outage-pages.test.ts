// The pages a person's browser opens during an OAuth flow (authorize, consent) say in HTML that the gateway cannot
// serve them now, with Retry-After, rather than OAuth's JSON error body (found from outside: the console's sign-in
// showed raw JSON while the database was down).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import { newClient } from './helpers.ts';

let world: World;
let clientId: string;
beforeAll(async () => {
  world = await startWorld();
  clientId = await newClient(world.url, ['http://127.0.0.1:9/callback']);
});
afterAll(async () => {
  await world?.close().catch(() => {});
});

it('answers /oauth/authorize and /oauth/consent with a 503 page and Retry-After while the database is gone', async () => {
  const query = new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: 'http://127.0.0.1:9/callback', code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256', state: 's', resource: world.url });
  // A consent page this browser was sent to while the database answered.
  const started = await fetch(`${world.url}/oauth/authorize?${query}`, { redirect: 'manual' });
  expect(started.status).toBe(303);
  const consentPath = new URL(started.headers.get('location')!, world.url);
  const cookie = started.headers.get('set-cookie')!.split(';')[0]!;
  await world.gw.gateway.db.close();
  for (const path of [`/oauth/authorize?${query}`, `${consentPath.pathname}${consentPath.search}`]) {
    const res = await fetch(`${world.url}${path}`, { headers: { accept: 'text/html', cookie }, redirect: 'manual' });
    expect(res.status, path).toBe(503);
    expect(res.headers.get('content-type'), path).toMatch(/^text\/html/);
    expect(res.headers.get('retry-after'), path).toBe('1');
    const page = await res.text();
    expect(page, path).toContain('data-error="temporarily_unavailable"');
    expect(page, path).toContain('try again shortly');
  }
});
