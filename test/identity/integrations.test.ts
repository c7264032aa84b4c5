import { exportPKCS8, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';

let world: World;
beforeAll(async () => {
  world = await startWorld();
});
afterAll(() => world.close());

describe('GET /v1/integrations', () => {
  it('answers H, A, O and M principals with the real configuration and no secrets', async () => {
    const agent = await world.createAgent('rita@example.com', 'ritas');
    const ownerId = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id;
    const merchant = await seedMerchantKey(world);
    const credentials = [
      agent.ownerToken,
      agent.token,
      await world.accessToken({ sub: ownerId, scope: 'svc:owner', email: 'rita@example.com' }),
      merchant.key,
    ];
    for (const token of credentials) {
      const res = await world.api('GET', '/v1/integrations', { token });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        mode: 'dev',
        storage: world.gw.database.db.kind === 'postgres' ? 'postgresql' : 'pglite',
        identity: { human: 'configured', agent: 'configured' },
        payments: { link: 'unconfigured', provider: 'none', x402: 'configured' },
        apiKeys: { available: true, status: 'available' },
        services: ['mail', 'github-public'],
      });
      const text = JSON.stringify(res.body) + JSON.stringify((await world.api('GET', '/v1/integrations?view=surface', { token })).body);
      expect(text).not.toContain(world.gw.config.apiKeyPepper!);
    }
  });

  it('answers the surface shape on request', async () => {
    const token = await world.humanToken('rita@example.com');
    const res = await world.api('GET', '/v1/integrations?view=surface', { token });
    expect(res.body).toEqual({
      identity: { agent: world.agentIssuer.issuer, human: world.human.issuer },
      accessCheck: { endpoint: '/v1/access/merchant-check', enabled: true },
      merchantRegistry: { endpoint: '/v1/merchants', enabled: true },
      payments: { directMerchantLink: { enabled: false }, optionalCreditPurchases: { enabled: false }, x402: { enabled: true } },
    });
  });

  it('in live mode reports API keys unavailable without a pepper, and x402 unconfigured without a signing key', async () => {
    const live = await startWorld({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1', ACG_API_KEY_PEPPER: '' } });
    try {
      const token = await live.humanToken('sam@example.com');
      const res = await live.api('GET', '/v1/integrations', { token });
      expect(res.body).toMatchObject({
        mode: 'live',
        identity: { human: 'configured', agent: 'configured' },
        payments: { x402: 'unconfigured' },
        apiKeys: { available: false, status: 'configuration_required' },
      });
      expect((await live.api('GET', '/v1/integrations?view=surface', { token })).body.payments.x402).toEqual({ enabled: false });
      expect((await live.api('GET', '/x402/supported')).body).toEqual({ kinds: [], extensions: [], signers: {} });
    } finally {
      await live.close();
    }
  });

  it('in live mode reports x402 configured once the gateway has a signing key and merchant API keys', async () => {
    const { privateKey } = await generateKeyPair('ES256', { extractable: true });
    const signingKey = await exportPKCS8(privateKey);
    const live = await startWorld({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1', ACG_SIGNING_KEY: signingKey } });
    try {
      const token = await live.humanToken('sam@example.com');
      expect((await live.api('GET', '/v1/integrations', { token })).body).toMatchObject({ mode: 'live', payments: { x402: 'configured' }, apiKeys: { available: true } });
      expect((await live.api('GET', '/v1/integrations?view=surface', { token })).body.payments.x402).toEqual({ enabled: true });
      expect((await live.api('GET', '/x402/supported')).body.kinds).toEqual([
        { x402Version: 2, scheme: 'batch-settlement', network: 'acg:credit', extra: { authority: 'http://127.0.0.1:1', asset: 'microcredit', version: '1.0.0' } },
      ]);
    } finally {
      await live.close();
    }
  });
});
