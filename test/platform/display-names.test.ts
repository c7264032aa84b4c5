// A name people read where they decide (an agent's, a merchant's on an approval page, an offer's, an API key's)
// must hold a character other than white space: a name of spaces alone is 400 invalid_input naming the member,
// and writes nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
let owner: string;
let agent: { id: string; token: string; ownerToken: string };
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world, 'names-shop@example.com');
  owner = await world.humanToken('names-shop@example.com');
  agent = await world.createAgent('names@example.com', 'names-agent');
});
afterAll(() => world.close());

// White space, and characters that render as nothing: zero-width space and joiner, Hangul fillers, the Braille
// blank, a variation selector, the byte order mark, a bidi mark.
const BLANKS = [' ', '   ', '\t', '\u00a0', '\u3000 ', '\u200b', '\u200d\u200c', '\u3164\u3164', '\u2800\u2800', '\ufe0f', '\ufeff', ' \u200e', '\uffa0\u115f'];

describe('display names', () => {
  it('refuses a name of white space alone on every write that takes one, and accepts one with a visible character', async () => {
    const writes: Array<{ what: string; method: 'POST' | 'PATCH'; path: string; token: string; body: (name: string) => Record<string, unknown> }> = [
      { what: 'agent', method: 'POST', path: '/v1/owner/agents', token: owner, body: (name) => ({ name, identity: { issuer: world.agentIssuer.issuer, subject: `names-${++counter}` } }) },
      { what: 'agent rename', method: 'PATCH', path: `/v1/owner/agents/${agent.id}`, token: agent.ownerToken, body: (name) => ({ name }) },
      { what: 'merchant', method: 'POST', path: '/v1/merchants', token: owner, body: (name) => ({ name, domain: `names-${++counter}.example.com`, categories: ['books'] }) },
      { what: 'merchant rename', method: 'PATCH', path: `/v1/merchants/${shop.merchantId}`, token: owner, body: (name) => ({ name }) },
      { what: 'offer', method: 'POST', path: `/v1/merchants/${shop.merchantId}/offers`, token: shop.key, body: (name) => ({ name, category: 'books', priceUc: '1000000' }) },
      { what: 'API key', method: 'POST', path: `/v1/merchants/${shop.merchantId}/api-keys`, token: owner, body: (name) => ({ name, scopes: ['offers:read'] }) },
    ];
    for (const write of writes) {
      for (const blank of BLANKS) {
        const res = await world.api(write.method, write.path, { token: write.token, key: `names-${++counter}`, body: write.body(blank) });
        expect([write.what, JSON.stringify(blank), res.status, res.body.code, res.body.detail]).toEqual([
          write.what,
          JSON.stringify(blank),
          400,
          'invalid_input',
          'body/name must hold a visible character, not only white space or invisible characters',
        ]);
      }
      const fine = await world.api(write.method, write.path, { token: write.token, key: `names-${++counter}`, body: write.body(' Ada ') });
      expect([write.what, fine.status < 300]).toEqual([write.what, true]);
    }
  });

  it('refuses a delegate named with white space alone', async () => {
    await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `names-${++counter}`, body: { delegation: { allowed: true, maxDepth: 1 } } });
    const res = await world.api('POST', `/v1/agents/${agent.id}/delegates`, {
      token: agent.token,
      key: `names-${++counter}`,
      body: { name: '  ', identity: { issuer: world.agentIssuer.issuer, subject: `names-${++counter}` } },
    });
    expect([res.status, res.body.code, res.body.detail]).toEqual([400, 'invalid_input', 'body/name must hold a visible character, not only white space or invisible characters']);
  });
});
