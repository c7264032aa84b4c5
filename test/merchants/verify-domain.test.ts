// Domain verification against a real DNS-over-HTTPS resolver: Debian's unbound on 127.0.0.1 (HTTP/2, TLS
// with a throw-away certificate), serving the zone shop-test.com whose records each test replaces.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasUnbound, noteIfUnboundMissing, startDohServer, type DohServer } from '../support/doh-server.ts';
import { pemFile, registerMerchant, uniqueKey } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

noteIfUnboundMissing();

const ZONE = 'shop-test.com';

describe.skipIf(!hasUnbound)('POST /v1/merchants/{id}/verify-domain against unbound over DoH', () => {
  let doh: DohServer;
  let ca: { file: string; remove(): void };
  let world: World;
  let alice: string;

  beforeAll(async () => {
    doh = await startDohServer({ zone: ZONE });
    ca = pemFile(doh.ca);
    world = await startWorld({ env: { ACG_DOH_RESOLVER_URL: doh.url, ACG_DOH_CA_FILE: ca.file, ACG_DOH_TIMEOUT_MS: '3000' } });
    alice = await world.humanToken('alice@example.com');
  });
  afterAll(async () => {
    await world?.close();
    await doh?.stop();
    ca?.remove();
  });

  const verify = (id: string, token = alice, key = uniqueKey('verify')) => world.api('POST', `/v1/merchants/${id}/verify-domain`, { token, key });
  /** The TXT record's owner name relative to the zone, as a zone file line wants it. */
  const relative = (name: string) => name.slice(0, -(ZONE.length + 1));
  const events = async (merchantId: string) =>
    (await world.gw.gateway.db.query<{ type: string; payload: string }>('SELECT type, payload FROM events WHERE merchant_id = $1 ORDER BY seq', [merchantId])).rows;

  it('answers 409 pending with the record while it is absent, then 200 verified once published, emitting merchant.verified', async () => {
    const { merchant, dnsRecord } = await registerMerchant(world, alice, { domain: `first.${ZONE}` });
    await doh.setRecords([]);
    const pending = await verify(merchant.id);
    expect(pending.status).toBe(409);
    expect(pending.body).toMatchObject({ code: 'domain_verification_pending', verified: false, dnsRecord });
    expect(pending.body.detail).toContain('DNS changes can take a few minutes');
    expect(pending.headers.get('content-type')).toContain('application/problem+json');

    // Other TXT records at the name (and a wrong value) do not count.
    await doh.setRecords([`${relative(dnsRecord.name)} IN TXT "v=spf1 -all"`, `${relative(dnsRecord.name)} IN TXT "${dnsRecord.value}x"`]);
    expect((await verify(merchant.id)).status).toBe(409);
    expect(await events(merchant.id)).toEqual([]);

    await doh.setRecords([`${relative(dnsRecord.name)} IN TXT "v=spf1 -all"`, `${relative(dnsRecord.name)} IN TXT "${dnsRecord.value}"`]);
    const key = uniqueKey('verify');
    const ok = await verify(merchant.id, alice, key);
    expect(ok.status).toBe(200);
    expect(ok.body.verified).toBe(true);
    expect(ok.body.merchant).toMatchObject({ id: merchant.id, verified: true, domain: `first.${ZONE}` });

    const emitted = await events(merchant.id);
    expect(emitted.map((e) => e.type)).toEqual(['merchant.verified']);
    const payload = JSON.parse(emitted[0]!.payload);
    expect(payload).toMatchObject({ type: 'merchant.verified', merchantId: merchant.id, data: { merchant: ok.body.merchant } });
    expect(payload.id).toMatch(/^evt_/);

    // A replay answers the stored response; a new call on a verified merchant asks nothing and emits nothing.
    const replay = await verify(merchant.id, alice, key);
    expect(replay.body).toEqual(ok.body);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    await doh.setRecords([]);
    const again = await verify(merchant.id);
    expect([again.status, again.body.verified]).toEqual([200, true]);
    expect(await events(merchant.id)).toHaveLength(1);
  });

  it('verifies a record whose value is split into two strings', async () => {
    const { merchant, dnsRecord } = await registerMerchant(world, alice, { domain: `split.${ZONE}` });
    const half = Math.floor(dnsRecord.value.length / 2);
    await doh.setRecords([`${relative(dnsRecord.name)} IN TXT "${dnsRecord.value.slice(0, half)}" "${dnsRecord.value.slice(half)}"`]);
    const res = await verify(merchant.id);
    expect([res.status, res.body.verified]).toEqual([200, true]);
  });

  it('finds the record behind a CNAME inside the zone', async () => {
    const { merchant, dnsRecord } = await registerMerchant(world, alice, { domain: `aliased.${ZONE}` });
    await doh.setRecords([`${relative(dnsRecord.name)} IN CNAME proofs.${ZONE}.`, `proofs IN TXT "${dnsRecord.value}"`]);
    expect((await verify(merchant.id)).status).toBe(200);
  });

  it("answers 404 for another owner's merchant and asks nothing", async () => {
    const { merchant } = await registerMerchant(world, alice, { domain: `private.${ZONE}` });
    const bob = await world.humanToken('bob@example.com');
    const res = await verify(merchant.id, bob);
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
  });

  it('answers 503 runtime_unavailable when the resolver refuses, and the merchant stays unverified', async () => {
    // unbound answers REFUSED for every name outside its zone: "could not ask" is not "not there".
    const { merchant } = await registerMerchant(world, alice, { domain: 'elsewhere-shop.com' });
    const key = uniqueKey('verify');
    const res = await verify(merchant.id, alice, key);
    expect([res.status, res.body.code]).toEqual([503, 'runtime_unavailable']);
    expect(res.body.detail).toContain('rcode');
    expect((await world.api('GET', `/v1/merchants/${merchant.id}`, { token: alice })).body.merchant.verified).toBe(false);
    // A 5xx is not stored: the same key may be retried.
    expect((await verify(merchant.id, alice, key)).status).toBe(503);
  });

  it('answers 503 when the resolver is down, changing nothing; a verified merchant stays verified without a query', async () => {
    const verified = await registerMerchant(world, alice, { domain: `kept.${ZONE}` });
    await doh.setRecords([`${relative(verified.dnsRecord.name)} IN TXT "${verified.dnsRecord.value}"`]);
    expect((await verify(verified.merchant.id)).status).toBe(200);
    const pending = await registerMerchant(world, alice, { domain: `waiting.${ZONE}` });
    const before = (await world.api('GET', `/v1/merchants/${pending.merchant.id}`, { token: alice })).body.merchant;

    await doh.stop();
    const down = await verify(pending.merchant.id);
    expect([down.status, down.body.code]).toEqual([503, 'runtime_unavailable']);
    expect((await world.api('GET', `/v1/merchants/${pending.merchant.id}`, { token: alice })).body.merchant).toEqual(before);
    const stillVerified = await verify(verified.merchant.id);
    expect([stillVerified.status, stillVerified.body.merchant.verified]).toEqual([200, true]);
    expect((await world.api('GET', `/v1/merchants/${verified.merchant.id}`, { token: alice })).body.merchant.verified).toBe(true);
    expect(await events(pending.merchant.id)).toEqual([]);
  });
});
