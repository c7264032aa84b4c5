// An identity provider's issuer is compared as the provider writes it (OIDC Core §3.1.3.7: exactly): one that ends in
// `/`, as Auth0's do, signs people in; the same issuer configured without its slash, or with one it does not have,
// trusts nothing (found from outside, 2026-12-07: every URL setting lost its trailing slash, so every token of an
// Auth0 tenant was refused as "an issuer this gateway does not trust").
import { afterEach, describe, expect, it } from 'vitest';
import { startIssuer } from '../support/issuer.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

async function meStatus(issuerPath: string, configured: (issuer: string) => string): Promise<number> {
  const [human, agent] = await Promise.all([startIssuer('agent-credit-gateway', { path: issuerPath }), startIssuer()]);
  world = await startWorld({ issuers: { human, agent }, env: { ACG_HUMAN_ISSUER: configured(human.issuer) } });
  const token = await world.humanToken('slash@example.com');
  return (await world.api('GET', '/v1/me', { token })).status;
}

describe('an identity provider whose issuer ends in a slash', () => {
  it('signs people in when the setting is written as the provider writes it', async () => {
    expect(await meStatus('/tenant/', (issuer) => issuer)).toBe(200);
  });

  it('trusts none of its tokens when the setting drops the slash, nor one without a slash when the setting adds it', async () => {
    expect(await meStatus('/tenant/', (issuer) => issuer.replace(/\/$/, ''))).toBe(401);
    await world?.close();
    world = undefined;
    expect(await meStatus('/tenant', (issuer) => `${issuer}/`)).toBe(401);
  });
});
