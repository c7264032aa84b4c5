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

async function me(issuerPath: string, configured: (issuer: string) => string): Promise<{ status: number; detail?: string }> {
  const [human, agent] = await Promise.all([startIssuer('agent-credit-gateway', { path: issuerPath }), startIssuer()]);
  world = await startWorld({ issuers: { human, agent }, env: { ACG_HUMAN_ISSUER: configured(human.issuer) } });
  const token = await world.humanToken('slash@example.com');
  const res = await world.api('GET', '/v1/me', { token });
  return { status: res.status, detail: res.body?.detail };
}

describe('an identity provider whose issuer ends in a slash', () => {
  it('signs people in when the setting is written as the provider writes it', async () => {
    expect((await me('/tenant/', (issuer) => issuer)).status).toBe(200);
  });

  it('trusts none of its tokens when the setting drops the slash, nor one without a slash when the setting adds it, and says the slash is the difference', async () => {
    const dropped = await me('/tenant/', (issuer) => issuer.replace(/\/$/, ''));
    expect(dropped.status).toBe(401);
    expect(dropped.detail).toMatch(/^the token's issuer http:\/\/127\.0\.0\.1:\d+\/tenant\/ differs from ACG_HUMAN_ISSUER \(http:\/\/127\.0\.0\.1:\d+\/tenant\) only by a terminating slash: issuers are compared exactly, so ACG_HUMAN_ISSUER must be written as the provider writes it$/);
    await world?.close();
    world = undefined;
    const added = await me('/tenant', (issuer) => `${issuer}/`);
    expect([added.status, added.detail]).toEqual([401, expect.stringContaining('only by a terminating slash')]);
  });
});
