// The rate limits' counts: shared through the database, counted while they are being sent, and one bucket per
// account whichever of its credentials calls.
import pino from 'pino';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SystemClock } from '../../src/platform/clock.ts';
import { RateLimiter } from '../../src/platform/rate-limit.ts';
import { openTestDatabase, type TestDatabase } from '../support/database.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { startWorld, type World } from '../support/world.ts';

describe('RateLimiter', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await openTestDatabase(undefined, { migrated: true });
  });
  afterAll(async () => {
    await database?.drop();
    await database?.db.close().catch(() => {});
  });

  it('counts the hits it is sending to the shared table until the total read back holds them (found from outside: 46 admitted of 40)', async () => {
    const limiter = new RateLimiter(database.db, new SystemClock(), 60);
    const hit = () => limiter.hit('address:in-flight', 5).allowed;
    expect([hit(), hit(), hit()]).toEqual([true, true, true]);
    // The flush is under way (its statement not answered yet) while three more arrive.
    const flushing = limiter.sync();
    expect([hit(), hit(), hit()]).toEqual([true, true, false]);
    await flushing;
    expect(hit()).toBe(false);
    const { rows } = await database.db.query<{ hits: number }>("SELECT hits FROM rate_limit_counters WHERE bucket = 'address:in-flight'");
    expect(rows.map((row) => row.hits)).toEqual([3]);
  });
});

describe('the per-principal limit', () => {
  let world: World;
  const lines: Array<Record<string, unknown>> = [];
  beforeAll(async () => {
    const sink = new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
        done();
      },
    });
    world = await startWorld({ env: { ACG_RATE_LIMIT_PER_PRINCIPAL: '4', ACG_RATE_LIMIT_PER_ADDRESS: '1000' }, log: pino({ level: 'info' }, sink) });
  });
  afterAll(async () => {
    await world?.close();
  });

  it("is the account's: a merchant's API keys share one, and the refusal names the account (found from outside: each new key had a limit of its own)", async () => {
    const first = await seedMerchantKey(world, { ownerEmail: 'limits-merchant@example.com' });
    // A second key of the same merchant, made by its owner.
    const ownerToken = await world.humanToken('limits-merchant@example.com');
    const made = await world.api('POST', `/v1/merchants/${first.merchantId}/api-keys`, { token: ownerToken, key: 'limits-second-key', body: { name: 'second', scopes: ['offers:read'] } });
    expect(made.status).toBe(201);
    const second = { key: made.body.secretKey as string };
    const statuses: number[] = [];
    for (const key of [first.key, second.key, first.key, second.key, first.key, second.key]) {
      statuses.push((await world.api('GET', `/v1/merchants/${first.merchantId}/offers`, { token: key })).status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429]);
    const refused = await world.api('GET', `/v1/merchants/${first.merchantId}/offers`, { token: second.key });
    expect(refused.body).toMatchObject({ code: 'rate_limited', detail: expect.stringContaining(`merchant ${first.merchantId}`) });
    const logged = lines.filter((line) => line.code === 'rate_limited');
    expect(logged.length).toBeGreaterThan(0);
    expect(String(logged.at(-1)!.msg)).toContain(`merchant ${first.merchantId}`);
    expect(JSON.stringify(logged)).not.toContain(second.key);
  });
});
