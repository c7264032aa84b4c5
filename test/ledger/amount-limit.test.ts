// One limit on amounts, running totals included (migration 0032): an agent's lifetime credit and a merchant's
// earnings stay within 10^18 − 1 µc, the largest amount the wire carries. An operation that would pass it is 409
// conflict (reason amount_limit) with nothing written, whichever path adds to the total: a grant, a refund (its
// credit goes back to the agent as a new lot) or a capture (the merchant's earnings). Before, totals grew past 18
// digits and, at BIGINT's end, a refund answered 500.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../../src/platform/errors.ts';
import { UC_MAX } from '../../src/platform/money.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { expectLedgerInvariants } from '../support/ledger-invariants.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let counter = 0;
beforeAll(async () => {
  world = await startWorld();
});
afterAll(() => world.close());

const key = (label: string) => `${label}-${++counter}`;
const balance = (agentId: string) => world.gw.services.ledger.balance(world.gw.gateway.db, agentId);

async function agentWith(amountUc: bigint) {
  const agent = await world.createAgent(`limit${++counter}@example.com`, `limit-agent-${counter}`);
  await grant(world, agent.id, amountUc);
  return agent;
}

async function captured(shop: Shop, token: string, priceUc: bigint): Promise<string> {
  const offer = await shop.offer({ priceUc: priceUc.toString() });
  const minted = await mint(world, token, offer.id);
  expect(minted.status, JSON.stringify(minted.body)).toBe(200);
  const capture = await world.api('POST', `/v1/redemptions/${minted.body.redemption.id}/capture`, { token: shop.key, key: key('capture'), body: {} });
  expect(capture.status, JSON.stringify(capture.body)).toBe(200);
  return minted.body.redemption.id as string;
}

describe('running totals stay within the largest amount', () => {
  it("refuses a grant that would carry an agent's lifetime credit past it, writing nothing", async () => {
    const agent = await agentWith(UC_MAX);
    const refusal = await grant(world, agent.id, 1n).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(ApiError);
    expect(refusal).toMatchObject({ code: 'conflict', status: 409, options: { extra: { reason: 'amount_limit' } } });
    expect(await balance(agent.id)).toMatchObject({ grantedUc: UC_MAX.toString(), availableUc: UC_MAX.toString() });
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it("refuses a refund whose credit would carry the agent's lifetime credit past it (409 amount_limit, nothing written)", async () => {
    const shop = await openShop(world);
    const agent = await agentWith(UC_MAX);
    const holdId = await captured(shop, agent.token, 5n);
    const before = await balance(agent.id);
    const refused = await world.api('POST', `/v1/redemptions/${holdId}/refunds`, { token: shop.key, key: key('refund'), body: {} });
    expect([refused.status, refused.body.code, refused.body.reason], JSON.stringify(refused.body)).toEqual([409, 'conflict', 'amount_limit']);
    expect(await balance(agent.id)).toEqual(before);
    expect((await world.api('GET', `/v1/redemptions/${holdId}`, { token: shop.key })).body).toMatchObject({ state: 'captured', refundedUc: '0' });
    await expectLedgerInvariants(world.gw.gateway.db);
  });

  it("refuses a capture that would carry a merchant's earnings past it; the hold stays held, another merchant's capture in the same moment passes", async () => {
    const [full, other] = [await openShop(world), await openShop(world)];
    const half = UC_MAX / 2n + 1n;
    await captured(full, (await agentWith(half)).token, half);
    const payer = await agentWith(UC_MAX);
    const offer = await full.offer({ priceUc: half.toString() });
    const minted = await mint(world, payer.token, offer.id);
    expect(minted.status).toBe(200);
    const otherOffer = await other.offer({ priceUc: '1000000' });
    const otherHold = await mint(world, payer.token, otherOffer.id);
    const [refused, passed] = await Promise.all([
      world.api('POST', `/v1/redemptions/${minted.body.redemption.id}/capture`, { token: full.key, key: key('capture'), body: {} }),
      world.api('POST', `/v1/redemptions/${otherHold.body.redemption.id}/capture`, { token: other.key, key: key('capture'), body: {} }),
    ]);
    expect([refused.status, refused.body.code, refused.body.reason], JSON.stringify(refused.body)).toEqual([409, 'conflict', 'amount_limit']);
    expect(passed.status, JSON.stringify(passed.body)).toBe(200);
    expect((await world.api('GET', `/v1/redemptions/${minted.body.redemption.id}`, { token: full.key })).body.state).toBe('held');
    await expectLedgerInvariants(world.gw.gateway.db);
  });
});
