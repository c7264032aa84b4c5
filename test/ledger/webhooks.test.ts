// The redemption events reach a merchant's endpoint for real: held on mint, expired when the deadline
// passes and the credit is reclaimed — signed, verified by the standardwebhooks library at the receiver.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';
import { grant, mint } from '../support/ledger-fixture.ts';

let target: HookTarget;
let world: World;

beforeAll(async () => {
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

describe('redemption events over webhooks', () => {
  it('delivers redemption.held and, after the deadline, redemption.expired', async () => {
    const owner = await world.humanToken('hooks@example.com');
    const { merchant } = await registerMerchant(world, owner, { categories: ['books'] });
    await markVerified(world, merchant.id);
    const hook = await configureWebhook(world, owner, merchant.id);
    target.receiver.useSecret(hook.body.webhookSecret);
    const key = await world.api('POST', `/v1/merchants/${merchant.id}/api-keys`, {
      token: owner,
      key: uniqueKey('key'),
      body: { name: 'server', scopes: ['offers:write', 'offers:read', 'redemptions:capture'] },
    });
    const offer = await world.api('POST', `/v1/merchants/${merchant.id}/offers`, {
      token: key.body.secretKey,
      key: uniqueKey('offer'),
      body: { name: 'Book', category: 'books', priceUc: '2000000', holdLifetimeS: 60 },
    });
    const agent = await world.createAgent('hooks-agent-owner@example.com', 'hooks-agent');
    await grant(world, agent.id, 2_000_000n);
    const minted = await mint(world, agent.token, offer.body.id);
    expect(minted.status).toBe(200);
    const holdId = minted.body.redemption.id;

    await world.gw.services.webhookWorker.runOnce();
    world.gw.clock.advance(60_000);
    try {
      expect(await world.gw.services.ledger.expireDue()).toBeGreaterThanOrEqual(1);
      await world.gw.services.webhookWorker.runOnce();
      const events = target.receiver.received.map((r) => ({ verified: r.verified, ...(JSON.parse(r.body) as { type: string; data: { redemption: { id: string; state: string } } }) }));
      const mine = events.filter((e) => e.data.redemption?.id === holdId);
      expect(mine.map((e) => [e.type, e.data.redemption.state, e.verified])).toEqual([
        ['redemption.held', 'held', true],
        ['redemption.expired', 'expired', true],
      ]);
      const balance = await world.gw.services.ledger.balance(world.gw.gateway.db, agent.id);
      expect(balance.availableUc).toBe('2000000');
    } finally {
      world.gw.clock.advance(-60_000);
    }
  });
});
