// Instances sharing a database whose host clocks disagree (bb140 §1): each takes the database server's clock as the
// one time, so a hold lives its full life whichever instance minted it and whichever one captures it.
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { databaseNowMs, SystemClock } from '../../src/platform/clock.ts';
import type { TestGateway } from '../support/gateway.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
/** An instance whose host clock is 300 s ahead, and one 40 s behind, on the world's database. */
let ahead: TestGateway;
let behind: TestGateway;
const aheadLines: Array<{ level: number; msg: string; err?: unknown; stack?: unknown; databaseClockOffsetMs?: number }> = [];

const capturedLog = () =>
  pino(
    { level: 'info' },
    new Writable({
      write(chunk, _encoding, done) {
        aheadLines.push(JSON.parse(String(chunk)));
        done();
      },
    }),
  );

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
  ahead = await world.anotherInstance({ clock: new SystemClock(() => Date.now() + 300_000), log: capturedLog() });
  behind = await world.anotherInstance({ clock: new SystemClock(() => Date.now() - 40_000) });
});
afterAll(async () => {
  await ahead?.close();
  await behind?.close();
  await world?.close();
});

async function call(instance: TestGateway, method: string, path: string, options: { token: string; key?: string; body?: unknown }) {
  const headers: Record<string, string> = { authorization: `Bearer ${options.token}` };
  if (options.key) headers['idempotency-key'] = options.key;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${instance.url}${path}`, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  return { status: res.status, body: (await res.json()) as any };
}

describe('instances whose clocks disagree', () => {
  it("an instance 300 s ahead captures another instance's fresh 60 s hold, and expires it only at its deadline by the database's clock", async () => {
    const agent = await world.createAgent('skew-ahead@example.com', 'skew-ahead-agent');
    await grant(world, agent.id, 5_000_000n);
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    const captured = (await mint(world, agent.token, offer.id)).body.redemption;
    const capture = await call(ahead, 'POST', `/v1/redemptions/${captured.id}/capture`, { token: shop.key, key: 'skew-cap-1', body: {} });
    expect([capture.status, capture.body.state]).toEqual([200, 'captured']);

    const late = (await mint(world, agent.token, offer.id)).body.redemption;
    ahead.clock.advance(55_000); // 5 s of the hold's life left, by the database's clock
    try {
      const read = await call(ahead, 'GET', `/v1/redemptions/${late.id}`, { token: shop.key });
      expect(read.body.state).toBe('held');
      const lateCapture = await call(ahead, 'POST', `/v1/redemptions/${late.id}/capture`, { token: shop.key, key: 'skew-cap-2', body: {} });
      expect([lateCapture.status, lateCapture.body.state]).toEqual([200, 'captured']);
      const due = (await mint(world, agent.token, offer.id)).body.redemption;
      ahead.clock.advance(5_000); // its deadline, by the database's clock
      expect((await call(ahead, 'GET', `/v1/redemptions/${due.id}`, { token: shop.key })).body.state).toBe('expired');
    } finally {
      ahead.clock.advance(-60_000);
    }
  });

  it("a hold minted on an instance ahead or behind runs its full life by the database's clock, read alike by the others", async () => {
    const agent = await world.createAgent('skew-mint@example.com', 'skew-mint-agent');
    await grant(world, agent.id, 5_000_000n);
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 60 });
    for (const [name, instance] of [['ahead', ahead], ['behind', behind]] as const) {
      const minted = await call(instance, 'POST', '/v1/vouchers', { token: agent.token, key: `skew-mint-${name}`, body: { offerId: offer.id } });
      expect(minted.status, JSON.stringify(minted.body)).toBe(200);
      const databaseS = (await databaseNowMs(world.gw.gateway.db)) / 1000;
      const { expiresAt } = minted.body.redemption;
      expect(Math.abs(expiresAt - (databaseS + 60))).toBeLessThanOrEqual(2);
      for (const reader of [world.gw, ahead, behind]) {
        expect((await call(reader, 'GET', `/v1/redemptions/${minted.body.redemption.id}`, { token: shop.key })).body).toMatchObject({ state: 'held', expiresAt });
      }
    }
  });

  it("the instance says once, without a stack, how far its clock is off and that it uses the database's time", () => {
    const clockLines = aheadLines.filter((line) => line.databaseClockOffsetMs !== undefined);
    expect(clockLines).toHaveLength(1);
    const [line] = clockLines;
    expect(line!.level).toBe(40);
    expect(line!.msg).toMatch(/^this instance's clock is 300\.0 s ahead of the database server's; the gateway uses the database's time/);
    expect(line!.err ?? line!.stack).toBeUndefined();
    expect(Math.abs(ahead.clock.databaseOffsetMs + 300_000)).toBeLessThan(200);
    expect(world.gw.clock.databaseOffsetMs).toBe(0);
  });
});
