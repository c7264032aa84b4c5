// Races on real PostgreSQL (PGlite runs one session at a time, so it cannot race): many mints against
// one balance, from one and from two gateway instances, and capture against release.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import type { TestGateway } from '../support/gateway.ts';
import { onPostgres } from '../support/database.ts';
import { grant, openShop, type Shop } from '../support/ledger-fixture.ts';

let world: World;
let second: TestGateway;
let shop: Shop;

describe.runIf(onPostgres())('the ledger under concurrency (PostgreSQL)', () => {
  beforeAll(async () => {
    world = await startWorld();
    shop = await openShop(world);
    // A second instance on the same database, trusting the same identity providers.
    second = await world.anotherInstance();
  });
  afterAll(async () => {
    await second?.close();
    await world?.close();
  });

  async function invariantsHold(agentId: string) {
    const b = await world.gw.services.ledger.balance(world.gw.gateway.db, agentId);
    expect(BigInt(b.grantedUc)).toBe(BigInt(b.availableUc) + BigInt(b.heldUc) + BigInt(b.capturedUc) + BigInt(b.lapsedUc));
    const { rows } = await world.gw.gateway.db.query<{ bad: bigint; journal: bigint }>(
      `SELECT (SELECT count(*) FROM credit_lots WHERE remaining_uc < 0)::bigint AS bad,
              (SELECT COALESCE(SUM(amount_uc), 0) FROM journal_entries)::bigint AS journal`,
    );
    expect(rows[0]).toEqual({ bad: 0n, journal: 0n });
    return b;
  }

  async function race(urls: string[], subject: string) {
    const agent = await world.createAgent('race@example.com', subject);
    await grant(world, agent.id, 50_000_000n);
    const offer = await shop.offer({ priceUc: '1000000' });
    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        fetch(`${urls[i % urls.length]}/v1/vouchers`, {
          method: 'POST',
          headers: { authorization: `Bearer ${agent.token}`, 'content-type': 'application/json', 'idempotency-key': `${subject}-${i}` },
          body: JSON.stringify({ offerId: offer.id }),
        }).then(async (res) => ({ status: res.status, body: (await res.json()) as { code?: string } })),
      ),
    );
    const ok = responses.filter((r) => r.status === 200);
    const refused = responses.filter((r) => r.status === 402);
    expect(ok).toHaveLength(50);
    expect(refused).toHaveLength(150);
    expect(refused.every((r) => r.body.code === 'INSUFFICIENT_CREDITS')).toBe(true);
    const b = await invariantsHold(agent.id);
    expect(b).toMatchObject({ availableUc: '0', heldUc: '50000000' });
  }

  it('200 concurrent mints against credit for exactly 50: 50 holds and 150 × 402 INSUFFICIENT_CREDITS', async () => {
    await race([world.url], 'race-one');
  }, 60_000);

  it('the same across two gateway instances sharing one database', async () => {
    await race([world.url, second.url], 'race-two');
  }, 60_000);

  it('concurrent capture and release of one hold: exactly one wins', async () => {
    const agent = await world.createAgent('race@example.com', 'race-resolve');
    await grant(world, agent.id, 20_000_000n);
    const offer = await shop.offer({ priceUc: '1000000' });
    for (let i = 0; i < 20; i++) {
      const minted = await world.api('POST', '/v1/vouchers', { token: agent.token, key: `resolve-${i}`, body: { offerId: offer.id } });
      const holdId = minted.body.redemption.id as string;
      const [capture, release] = await Promise.all([
        fetch(`${world.url}/v1/redemptions/${holdId}/capture`, {
          method: 'POST',
          headers: { authorization: `Bearer ${shop.key}`, 'content-type': 'application/json', 'idempotency-key': `c-${i}` },
          body: '{}',
        }),
        fetch(`${second.url}/v1/redemptions/${holdId}/release`, {
          method: 'POST',
          headers: { authorization: `Bearer ${shop.key}`, 'content-type': 'application/json', 'idempotency-key': `r-${i}` },
          body: '{}',
        }),
      ]);
      const statuses = [capture.status, release.status].sort();
      expect(statuses).toEqual([200, 409]);
      const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(`SELECT count(DISTINCT operation_id) AS n FROM journal_entries WHERE operation_id LIKE $1`, [`${holdId}:%`]);
      expect(rows[0]!.n).toBe(1n);
    }
    const b = await invariantsHold(agent.id);
    expect(BigInt(b.capturedUc) + BigInt(b.availableUc)).toBe(20_000_000n);
  }, 60_000);
});
