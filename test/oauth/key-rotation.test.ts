import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeProtectedHeader } from 'jose';
import { startWorld, type World } from '../support/world.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import {
  AnotherBoxKeyError,
  checkConfiguredKey,
  generateSigningKey,
  KEY_RELOAD_INTERVAL_S,
  rotateSigningKeys,
  SigningKeyRefusal,
  SigningKeys,
  UnprovenBoxKeyError,
  UnusableSigningKeysError,
  withdrawSigningKey,
} from '../../src/platform/signing.ts';
import { OfferService } from '../../src/offers/service.ts';
import { LedgerService } from '../../src/ledger/service.ts';
import { grant, mint, openShop } from '../support/ledger-fixture.ts';
import { generateKeyPairSync } from 'node:crypto';
import { BOX_KEY_CHECK_RECENT_S, generateSecretBoxKey, openSecret, recordBoxKeyCheck, sealSecret, type SecretBoxKey } from '../../src/platform/secret-box.ts';
import { databaseNowMs, type Clock } from '../../src/platform/clock.ts';
import { openDatabase } from '../../src/platform/db/open.ts';

const run = promisify(execFile);
const ACG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/acg.js');

let world: World;
let ownerId: string;
const email = 'rotation@example.com';

beforeAll(async () => {
  world = await startWorld();
  const me = await world.api('GET', '/v1/me', { token: await world.humanToken(email) });
  ownerId = me.body.owner.id;
});
afterAll(() => world.close());

/** An owner access token as the token endpoint signs it, living `lifetimeS` on the gateway's clock. */
function ownerToken(lifetimeS: number): Promise<string> {
  const nowS = world.gw.clock.nowS();
  return world.gw.gateway.signing.sign(
    { iss: world.url, aud: world.url, sub: ownerId, scope: 'svc:owner', actor_type: 'owner', email, client_id: 'rotation', jti: `rot-${nowS}-${Math.random()}`, iat: nowS, exp: nowS + lifetimeS },
    'at+jwt',
  );
}

async function jwksKids(): Promise<string[]> {
  const jwks = await (await fetch(`${world.url}/.well-known/jwks.json`)).json();
  return jwks.keys.map((k: { kid: string }) => k.kid);
}

const meStatus = async (token: string) => (await world.api('GET', '/v1/me', { token })).status;

/** Now by the database's clock, as `acg keys` reads it. */
const databaseNowS = async () => Math.floor((await databaseNowMs(world.gw.gateway.db)) / 1000);

/** Writes a key sealed with `box` straight into the table, as a rotation with that box key (before it was checked) would. */
async function insertSealedKey(box: SecretBoxKey, activeFromS: number): Promise<string> {
  const key = await generateSigningKey();
  await world.gw.gateway.db.query(
    'INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at_s, active_from_s) VALUES ($1, $2, $3, $4, $5, $6)',
    [key.kid, 'ES256', JSON.stringify(key.publicJwk), sealSecret(box, JSON.stringify(key.privateJwk), `signing_key:${key.kid}`), activeFromS, activeFromS],
  );
  return key.kid;
}

/** Puts the key table back as the file's tests found it: the dev key alone signing, and no box key check. */
async function restoreKeys(kids: readonly string[]): Promise<void> {
  const { gateway, config } = world.gw;
  await gateway.db.query('DELETE FROM signing_keys WHERE kid = ANY($1::text[])', [kids]);
  await gateway.db.query("DELETE FROM signing_keys WHERE private_jwk NOT LIKE '{%'");
  await gateway.db.query('UPDATE signing_keys SET retired_at_s = NULL, published_until_s = NULL');
  await gateway.db.query('DELETE FROM secret_box_checks');
  // A rotation deletes keys past their window: the file's tests after this one need one of dev mode's kind to sign.
  if ((await gateway.db.query("SELECT kid FROM signing_keys WHERE private_jwk LIKE '{%'")).rows.length === 0) {
    const key = await generateSigningKey();
    await gateway.db.query('INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at_s, active_from_s) VALUES ($1, $2, $3, $4, 0, 0)', [
      key.kid, 'ES256', JSON.stringify(key.publicJwk), JSON.stringify(key.privateJwk),
    ]);
  }
  config.secretBoxKey = undefined;
  await gateway.signing.reload();
}

describe('the open holds a rotation must keep verifying', () => {
  it('are counted, with the latest deadline, past the moment the replaced key would leave the JWKS (acg keys rotate warns of them; found from outside)', async () => {
    const shop = await openShop(world);
    const agent = await world.createAgent('rotation-holds@example.com', 'rotation-holds');
    await grant(world, agent.id, 10_000_000n);
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: 3600 });
    const held = (await mint(world, agent.token, offer.id)).body.redemption;
    const nowS = world.gw.clock.nowS();
    const past = await LedgerService.heldPast(world.gw.gateway.db, nowS + 1200);
    expect(past.count).toBeGreaterThanOrEqual(1);
    expect(past.latestS).toBeGreaterThanOrEqual(held.expiresAt);
    expect(await LedgerService.heldPast(world.gw.gateway.db, held.expiresAt)).toMatchObject({ count: 0 });
  });

  it('include those the replaced key signs during the lead: as long as the longest hold of an active offer (acg keys rotate warns when the retention is shorter)', async () => {
    const shop = await openShop(world);
    const longest = async () => OfferService.longestHoldLifetimeS(world.gw.gateway.db);
    const before = (await longest()) ?? 0;
    const offer = await shop.offer({ priceUc: '1000000', holdLifetimeS: before + 100 });
    expect(await longest()).toBe(before + 100);
    // An inactive offer takes no hold.
    const off = await world.api('PATCH', `/v1/merchants/${shop.merchantId}/offers/${offer.id}`, { token: shop.key, key: `deactivate-${offer.id}`, body: { active: false } });
    expect(off.status, JSON.stringify(off.body)).toBe(200);
    expect(await longest()).toBe(before === 0 ? null : before);
  });
});

describe('signing key rotation', () => {
  it('publishes the next key before it signs, keeps the old one verifying until retention ends, then drops it', async () => {
    const { gateway, clock } = world.gw;
    const before = await ownerToken(600);
    const oldKid = decodeProtectedHeader(before).kid!;
    // A token that outlives the retention window, to show when the old key stops verifying. Longer than an access
    // token's 600 s, the credential verifier would refuse it for that: the keys' own verification is what is shown.
    const longLived = await ownerToken(10 * 86_400);
    const verifies = (token: string) =>
      gateway.signing.verify(token, { typ: 'at+jwt', issuer: world.url, audience: world.url }).then(
        () => true,
        () => false,
      );
    expect(await meStatus(longLived)).toBe(401);

    const leadS = 600;
    const retentionS = 86_400;
    const report = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS, retentionS });
    await gateway.signing.reload();
    const newKid = report.next.kid;
    expect(report.replaced.map((k) => k.kid)).toEqual([oldKid]);

    // Published at once, not used yet: verifiers learn the new key during the lead time.
    expect(await jwksKids()).toEqual(expect.arrayContaining([oldKid, newKid]));
    expect(decodeProtectedHeader(await ownerToken(600)).kid).toBe(oldKid);
    expect(await meStatus(before)).toBe(200);

    // After the lead time new tokens use the new key; tokens of the old key still verify.
    clock.advance(leadS * 1000);
    const after = await ownerToken(600);
    expect(decodeProtectedHeader(after).kid).toBe(newKid);
    expect(await meStatus(after)).toBe(200);
    expect(await verifies(longLived)).toBe(true);
    expect(await jwksKids()).toContain(oldKid);

    // Just before the retention ends the old key still verifies; after it, it is gone from the JWKS and from verification.
    clock.advance((retentionS - 10) * 1000);
    expect(await verifies(longLived)).toBe(true);
    clock.advance(10_000);
    expect(await jwksKids()).toEqual([newKid]);
    expect(await verifies(longLived)).toBe(false);
    expect(await meStatus(await ownerToken(600))).toBe(200);
  });

  it('a second rotation deletes keys past their publication window', async () => {
    const { gateway, clock } = world.gw;
    const first = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 600 });
    clock.advance(601_000);
    const second = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 600 });
    expect(second.replaced.map((k) => k.kid)).toEqual([first.next.kid]);
    const { rows } = await gateway.db.query<{ kid: string }>('SELECT kid FROM signing_keys');
    // The key replaced by the first rotation is past its window and was removed by the second.
    expect(rows.map((r) => r.kid).sort()).toEqual([first.next.kid, second.next.kid].sort());
  });

  // Found from outside: --expire-now expired only the key signing then, and a key retired by an earlier routine
  // rotation (the leaked one, when the leak is found later) verified for the rest of its retention.
  it('expiring now (a leak) stops every other key verifying, one an earlier rotation retired included', async () => {
    const { gateway, clock } = world.gw;
    await gateway.signing.reload();
    const leaked = await ownerToken(600);
    const leakedKid = decodeProtectedHeader(leaked).kid!;
    const routine = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 7 * 86_400 });
    await gateway.signing.reload();
    expect(await meStatus(leaked)).toBe(200);
    clock.advance(60_000);
    const expired = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 0 });
    await gateway.signing.reload();
    // Every key but the new one (earlier tests of this file left others published), the leaked one among them.
    expect(expired.replaced.map((k) => k.kid)).toEqual(expect.arrayContaining([routine.next.kid, leakedKid]));
    expect(new Set(expired.replaced.map((k) => k.state))).toEqual(new Set(['expired']));
    expect(await jwksKids()).toEqual([expired.next.kid]);
    expect(await meStatus(leaked)).toBe(401);
    expect(await meStatus(await ownerToken(600))).toBe(200);
  });
});

describe('a rotated key at rest', () => {
  it('is sealed with ACG_SECRET_BOX_KEY: the row holds no private JWK, the key signs once the box key is there, and loads with no other', async () => {
    const { gateway, clock, config } = world.gw;
    const box = generateSecretBoxKey();
    // A second after the rotation before it, so this key is the one that became active last (a tie is broken by kid).
    clock.advance(1000);
    const report = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 600, sealWith: box.key });
    const { rows } = await gateway.db.query<{ private_jwk: string }>('SELECT private_jwk FROM signing_keys WHERE kid = $1', [report.next.kid]);
    expect(rows[0]!.private_jwk).toMatch(/^v1\./);
    expect(rows[0]!.private_jwk).not.toContain('"d"');
    try {
      // Without a box key, or with another, the key is left out: it neither signs nor is published, and since it
      // replaced every other key, nothing signs, and the refusal names it and the box key (it used to throw at reload).
      await gateway.signing.reload();
      expect(gateway.signing.jwks().keys.map((key) => key.kid)).not.toContain(report.next.kid);
      await expect(ownerToken(600)).rejects.toMatchObject({
        code: 'signing_configuration_required',
        message: expect.stringContaining(`the signing key that would sign (${report.next.kid}) does not open here (this instance has no ACG_SECRET_BOX_KEY)`),
      });
      expect(gateway.signing.startRefusal()).toBeInstanceOf(UnusableSigningKeysError);
      config.secretBoxKey = generateSecretBoxKey().text;
      await gateway.signing.reload();
      expect(gateway.signing.jwks().keys.map((key) => key.kid)).not.toContain(report.next.kid);
      expect(gateway.signing.startRefusal()?.message).toContain(`the key ${report.next.kid}, which would sign, does not open with this instance's ACG_SECRET_BOX_KEY`);
      config.secretBoxKey = box.text;
      await gateway.signing.reload();
      const token = await ownerToken(600);
      expect(decodeProtectedHeader(token).kid).toBe(report.next.kid);
      expect(await meStatus(token)).toBe(200);
      expect(gateway.signing.startRefusal()).toBeUndefined();
    } finally {
      await restoreKeys([report.next.kid]);
    }
  });
});

describe('ACG_SIGNING_KEY', () => {
  it("takes PKCS#8 PEM, and names the conversion for the SEC1 key `openssl ecparam -genkey` writes (found from outside: jose's words alone)", async () => {
    const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    expect(await checkConfiguredKey(privateKey.export({ type: 'pkcs8', format: 'pem' }) as string)).toBeUndefined();
    expect(await checkConfiguredKey(privateKey.export({ type: 'sec1', format: 'pem' }) as string)).toContain(
      'this is a SEC1 EC key; convert it with `openssl pkcs8 -topk8 -nocrypt`, or make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`',
    );
  });
});

describe('the box key a rotation seals with', () => {
  // Found from outside: with no sealed key in the database yet (the usual live case, instances signing with
  // ACG_SIGNING_KEY), a rotation with a mistyped box key was accepted, and no instance could open the key it sealed.
  it("must open the check the instances keep of theirs, whether or not a key is sealed yet; none at all is refused in live mode unless told", async () => {
    const { gateway } = world.gw;
    const own = generateSecretBoxKey();
    const mistyped = generateSecretBoxKey();
    const made: string[] = [];
    const rotate = async (box: SecretBoxKey, extra: { mode?: 'dev' | 'live'; uncheckedBoxKey?: boolean } = {}) => {
      const report = await rotateSigningKeys(gateway.db, { nowS: await databaseNowS(), leadS: 600, retentionS: 600, sealWith: box, mode: 'live', ...extra });
      made.push(report.next.kid);
      return report;
    };
    try {
      // Nothing to check against: live mode refuses, and says how to go on; dev mode, and live mode told, seal.
      const unproven = await rotate(mistyped.key).catch((error: unknown) => error);
      expect(unproven).toBeInstanceOf(UnprovenBoxKeyError);
      expect((unproven as Error).message).toContain("nothing shows which ACG_SECRET_BOX_KEY the gateway's instances run with");
      expect((unproven as Error).message).toContain('pass --unchecked-box-key');
      await rotate(mistyped.key, { uncheckedBoxKey: true });
      await gateway.db.query('DELETE FROM signing_keys WHERE kid = ANY($1::text[])', [made]);
      await rotate(mistyped.key, { mode: 'dev' });
      await gateway.db.query('DELETE FROM signing_keys WHERE kid = ANY($1::text[])', [made]);

      // A serving instance recorded its box key: another is refused, told or not, in either mode; its own seals.
      expect(await recordBoxKeyCheck(gateway.db, own.key)).toEqual({ anotherSeenAtS: undefined });
      const rowsBefore = (await gateway.db.query('SELECT kid FROM signing_keys')).rows.length;
      for (const extra of [{}, { uncheckedBoxKey: true }, { mode: 'dev' as const }]) {
        const refused = await rotate(mistyped.key, extra).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(AnotherBoxKeyError);
        expect((refused as Error).message).toMatch(/^ACG_SECRET_BOX_KEY here is not the one the gateway's instances run with: it does not open the check they keep in the database \(last seen \S+ \(\d+ s ago\)\), so a key sealed with it would open on any of them/);
      }
      expect((await gateway.db.query('SELECT kid FROM signing_keys')).rows.length).toBe(rowsBefore);
      await rotate(own.key);
      // The same check again: seen, not added.
      await recordBoxKeyCheck(gateway.db, own.key);
      expect((await gateway.db.query('SELECT check_id FROM secret_box_checks')).rows).toHaveLength(1);

      // Instances lately running with two box keys: neither seals (a key would not open on the others), and the
      // instance that adds the second hears of the first.
      const other = await recordBoxKeyCheck(gateway.db, mistyped.key);
      expect(other.anotherSeenAtS).toBeGreaterThan(0);
      const mixed = await rotate(own.key).catch((error: unknown) => error);
      expect(mixed).toBeInstanceOf(AnotherBoxKeyError);
      expect((mixed as Error).message).toContain(`instances ran within the last ${BOX_KEY_CHECK_RECENT_S} s with another ACG_SECRET_BOX_KEY than this one`);
      // Once the checks are old (the gateway stopped), the one seen last shows the instances' box key.
      const nowS = await databaseNowS();
      const { rows: checks } = await gateway.db.query<{ check_id: string; sealed: string }>('SELECT check_id, sealed FROM secret_box_checks');
      for (const check of checks) {
        const ownCheck = (() => {
          try {
            return openSecret(own.key, check.sealed, `secret_box_check:${check.check_id}`) !== '';
          } catch {
            return false;
          }
        })();
        await gateway.db.query('UPDATE secret_box_checks SET last_seen_at_s = $2 WHERE check_id = $1', [check.check_id, nowS - 2 * BOX_KEY_CHECK_RECENT_S + (ownCheck ? 0 : 10)]);
      }
      expect(await rotate(own.key).catch((error: unknown) => error)).toMatchObject({ name: 'AnotherBoxKeyError', message: expect.stringMatching(/^ACG_SECRET_BOX_KEY here is not the one/) });
      await rotate(mistyped.key);
    } finally {
      await restoreKeys(made);
    }
  });
});

describe('a key this instance cannot open (sealed with another box key, or it has none)', () => {
  it('is left out, said once (not at each reload), and the instance goes on with the keys it opens; the start is refused only when none signs now or later', async () => {
    const { gateway, clock, config } = world.gw;
    const own = generateSecretBoxKey();
    const mistyped = generateSecretBoxKey();
    const pem = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const stray = await insertSealedKey(mistyped.key, clock.nowS());
    const kids = [stray];
    const reports: Array<{ message: string; kids: readonly string[] }> = [];
    const report = (message: string, kids: readonly string[]) => void reports.push({ message, kids });
    try {
      // ACG_SIGNING_KEY signs, the stray key is left out: no throw, one report naming it and the way out.
      const live = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: pem, secretBoxKey: own.text }, report);
      await live.reload();
      await live.reload();
      const strayReports = reports.filter((entry) => entry.kids.includes(stray));
      expect(strayReports).toHaveLength(1);
      expect(strayReports[0]!.kids).toEqual([stray]);
      expect(strayReports[0]!.message).toContain(`signing key ${stray} does not open with this instance's ACG_SECRET_BOX_KEY`);
      expect(strayReports[0]!.message).toContain(`\`acg keys withdraw ${stray}\` removes the key`);
      expect(live.jwks().keys.map((key) => key.kid)).not.toContain(stray);
      expect(decodeProtectedHeader(await live.sign({ iss: world.url }, 'at+jwt')).kid).not.toBe(stray);
      expect(live.startRefusal()).toBeUndefined();

      // Nothing else to sign with: the start is refused in one line naming the key; a running instance answers 503 saying why.
      const bare = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: undefined, secretBoxKey: own.text }, report);
      const refusal = bare.startRefusal();
      expect(refusal).toBeInstanceOf(UnusableSigningKeysError);
      expect(refusal!.message).not.toContain('\n');
      expect(refusal!.message).toMatch(new RegExp(`^acg serve: no signing key this instance can use: the key ${stray}, which would sign, does not open with this instance's ACG_SECRET_BOX_KEY`));
      await expect(bare.sign({ iss: world.url }, 'at+jwt')).rejects.toMatchObject({ code: 'signing_configuration_required', message: expect.stringContaining(`(${stray}) does not open here`) });
      // Without any box key: the same, naming the missing setting. Opening does not throw (credit grant's fallback opens the keys).
      const noBox = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: undefined, secretBoxKey: undefined }, report);
      expect(noBox.startRefusal()?.message).toContain(`the key ${stray}, which would sign, is sealed and this instance has no ACG_SECRET_BOX_KEY`);

      // A key it cannot open that would not sign (upcoming, another signing now) stops nothing.
      await recordBoxKeyCheck(gateway.db, own.key);
      const rotated = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 600, sealWith: own.key, mode: 'dev' });
      kids.push(rotated.next.kid, await insertSealedKey(mistyped.key, clock.nowS() + 3600));
      const withOwn = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: undefined, secretBoxKey: own.text }, report);
      expect(withOwn.startRefusal()).toBeUndefined();
      expect(decodeProtectedHeader(await withOwn.sign({ iss: world.url }, 'at+jwt')).kid).toBe(rotated.next.kid);
    } finally {
      await restoreKeys(kids);
    }
  });

  it("answers a signature with 503 naming the clock, not ACG_SIGNING_KEY, when keys exist but none is active yet by this instance's clock (found from outside)", async () => {
    const { gateway, clock, config } = world.gw;
    const box = generateSecretBoxKey();
    const rotated = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 600, sealWith: box.key, mode: 'dev' });
    try {
      const behind: Clock = { nowMs: () => clock.nowMs() - 300_000, nowS: () => clock.nowS() - 300 };
      const late = await SigningKeys.open(gateway.db, behind, { ...config, mode: 'live', signingKey: undefined, secretBoxKey: box.text });
      expect(late.jwks().keys.map((key) => key.kid)).toEqual([rotated.next.kid]);
      expect(late.startRefusal()).toBeUndefined();
      await expect(late.sign({ iss: world.url }, 'at+jwt')).rejects.toMatchObject({
        code: 'signing_configuration_required',
        message: expect.stringMatching(new RegExp(`^no signing key is active yet by this instance's clock \\(\\S+\\): the earliest, ${rotated.next.kid}, signs from \\S+, 300 s from now by this clock\\. Keys become active by the database's clock`)),
      });
    } finally {
      await restoreKeys([rotated.next.kid]);
    }
  });
});

describe('acg keys withdraw (withdrawSigningKey)', () => {
  it('removes a key still upcoming, and the key it was to replace goes on signing', async () => {
    const { gateway, clock } = world.gw;
    await gateway.signing.reload();
    const before = decodeProtectedHeader(await ownerToken(600)).kid!;
    const upcoming = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 600, retentionS: 3600 });
    try {
      const report = await withdrawSigningKey(gateway.db, upcoming.next.kid, { nowS: clock.nowS(), mode: 'dev' });
      expect(report).toMatchObject({ reason: 'upcoming', withdrawn: { kid: upcoming.next.kid, state: 'upcoming' } });
      expect(report.restored).toContainEqual(expect.objectContaining({ kid: before, state: 'signing', retiredAtS: null, publishedUntilS: null }));
      await gateway.signing.reload();
      expect(await jwksKids()).not.toContain(upcoming.next.kid);
      clock.advance(700_000);
      expect(decodeProtectedHeader(await ownerToken(600)).kid).toBe(before);
      const gone = await withdrawSigningKey(gateway.db, upcoming.next.kid, { nowS: clock.nowS(), mode: 'dev' }).catch((error: unknown) => error);
      expect(gone).toBeInstanceOf(SigningKeyRefusal);
      expect((gone as Error).message).toMatch(new RegExp(`^no signing key ${upcoming.next.kid} in the database \\(it holds .+: acg keys list shows them\\)$`));
      // One that signs (or may have) stays: a rotation replaces it.
      const signing = await withdrawSigningKey(gateway.db, before, { nowS: clock.nowS(), mode: 'dev' }).catch((error: unknown) => error);
      expect(signing).toBeInstanceOf(SigningKeyRefusal);
      expect((signing as Error).message).toContain(`${before} has been due to sign since`);
      expect((signing as Error).message).toContain('run `acg keys rotate`');
    } finally {
      await restoreKeys([upcoming.next.kid]);
    }
  });

  it("removes a key due to sign that the instances' box key does not open (a rotation with a mistaken box key), and only then", async () => {
    const { gateway, clock } = world.gw;
    const own = generateSecretBoxKey();
    const mistyped = generateSecretBoxKey();
    const nowS = await databaseNowS();
    const good = await rotateSigningKeys(gateway.db, { nowS, leadS: 0, retentionS: 600, sealWith: own.key, mode: 'dev' });
    const stray = await insertSealedKey(mistyped.key, nowS);
    const withdraw = (box: SecretBoxKey | undefined, extra: { uncheckedBoxKey?: boolean } = {}) =>
      withdrawSigningKey(gateway.db, stray, { nowS, box, mode: 'live', ...extra }).catch((error: unknown) => error);
    try {
      // The box key that sealed it opens it: instances with it may sign with it.
      expect(await withdraw(mistyped.key)).toBeInstanceOf(AnotherBoxKeyError);
      expect(await withdraw(undefined)).toMatchObject({ message: expect.stringContaining('Set ACG_SECRET_BOX_KEY to the one the gateway runs with') });
      // With no check recorded, the other sealed keys show which box key is the instances': the good key opens with `own`.
      const report = await withdraw(own.key);
      expect(report).toMatchObject({ reason: 'unopened', withdrawn: { kid: stray } });
      // Unproven: nothing else sealed, no check.
      const lone = await insertSealedKey(mistyped.key, nowS);
      await gateway.db.query('DELETE FROM signing_keys WHERE kid = $1', [good.next.kid]);
      const unproven = await withdrawSigningKey(gateway.db, lone, { nowS, box: own.key, mode: 'live' }).catch((error: unknown) => error);
      expect(unproven).toBeInstanceOf(UnprovenBoxKeyError);
      expect((unproven as Error).message).toContain('pass --unchecked-box-key');
      // A check the instances recorded proves it.
      await recordBoxKeyCheck(gateway.db, own.key);
      expect(await withdrawSigningKey(gateway.db, lone, { nowS, box: own.key, mode: 'live' })).toMatchObject({ reason: 'unopened' });
      // A key the instances' box key opens, due to sign, stays.
      const sealedOwn = await insertSealedKey(own.key, nowS);
      const opens = await withdrawSigningKey(gateway.db, sealedOwn, { nowS, box: own.key, mode: 'live' }).catch((error: unknown) => error);
      expect(opens).toBeInstanceOf(SigningKeyRefusal);
      expect((opens as Error).message).toContain('it opens with ACG_SECRET_BOX_KEY here, so instances with this box key sign with it');
      await gateway.db.query('DELETE FROM signing_keys WHERE kid = $1', [sealedOwn]);
    } finally {
      await restoreKeys([stray, good.next.kid]);
    }
    void clock;
  });
});

describe('two rotations in a row', () => {
  // Found from outside: `keys rotate` then `keys rotate --lead-s 0`: the second key signed at once, and ten minutes
  // later the first one, still upcoming, took over from it.
  it('the latest rotation signs: a key of an earlier rotation still upcoming is withdrawn, and the key signing now goes on until the new one takes over', async () => {
    const { gateway, clock } = world.gw;
    await gateway.signing.reload();
    const current = decodeProtectedHeader(await ownerToken(600)).kid!;
    const made: string[] = [];
    const rotate = async (leadS: number) => {
      const report = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS, retentionS: 3600 });
      made.push(report.next.kid);
      return report;
    };
    try {
      const routine = await rotate(600);
      clock.advance(100_000);
      const second = await rotate(600);
      expect(second.withdrawnKids).toEqual([routine.next.kid]);
      // The key signing now stops when the second key takes over, not when the withdrawn one would have.
      expect(second.replaced).toContainEqual(expect.objectContaining({ kid: current, retiredAtS: second.next.activeFromS }));
      expect(second.replaced.map((key) => key.kid)).not.toContain(routine.next.kid);
      await gateway.signing.reload();
      expect(await jwksKids()).not.toContain(routine.next.kid);
      clock.advance(550_000);
      expect(decodeProtectedHeader(await ownerToken(600)).kid).toBe(current);
      // 20 s before the second key signs, too close to be sure that no instance (its clock ahead) signed with it: the
      // next rotation retires it instead, so it never signs after the newer key either.
      clock.advance(30_000);
      const urgent = await rotate(0);
      expect(urgent.withdrawnKids).toEqual([]);
      expect(urgent.replaced).toContainEqual(expect.objectContaining({ kid: second.next.kid, state: 'retired' }));
      await gateway.signing.reload();
      expect(decodeProtectedHeader(await ownerToken(600)).kid).toBe(urgent.next.kid);
      clock.advance(100_000);
      await gateway.signing.reload();
      expect(decodeProtectedHeader(await ownerToken(600)).kid).toBe(urgent.next.kid);
    } finally {
      await restoreKeys(made);
    }
  });

  it('in one second: with a lead, the later withdraws the earlier; without, it replaces it at the same instant (found by CI)', async () => {
    const { gateway, clock } = world.gw;
    const nowS = clock.nowS() + 5000;
    const first = await rotateSigningKeys(gateway.db, { nowS, leadS: 600, retentionS: 3600 });
    const second = await rotateSigningKeys(gateway.db, { nowS, leadS: 600, retentionS: 3600 });
    const third = await rotateSigningKeys(gateway.db, { nowS, leadS: 0, retentionS: 3600 });
    const fourth = await rotateSigningKeys(gateway.db, { nowS, leadS: 0, retentionS: 3600 });
    try {
      expect(second.withdrawnKids).toEqual([first.next.kid]);
      expect(third.withdrawnKids).toEqual([second.next.kid]);
      expect(fourth.replaced.map((key) => key.kid)).toContain(third.next.kid);
      const { rows } = await gateway.db.query<{ retired_at_s: bigint | null }>('SELECT retired_at_s FROM signing_keys WHERE kid = $1', [third.next.kid]);
      expect(rows[0]!.retired_at_s).toBe(BigInt(nowS));
    } finally {
      await restoreKeys([first.next.kid, second.next.kid, third.next.kid, fourth.next.kid]);
    }
  });
});

describe('live mode on a database that holds unsealed keys', () => {
  it("neither signs, publishes nor verifies with them (dev mode's own key): ACG_SIGNING_KEY signs, a sealed rotated key too, and the operator is told once", async () => {
    const { gateway, clock, config } = world.gw;
    const { rows: unsealed } = await gateway.db.query<{ kid: string }>("SELECT kid FROM signing_keys WHERE private_jwk LIKE '{%'");
    expect(unsealed.length).toBeGreaterThan(0);
    const devKids = unsealed.map((row) => row.kid);
    const reports: string[][] = [];
    const report = (_message: string, kids: readonly string[]) => reports.push([...kids]);

    // Without a key of its own, live mode has none to sign or publish with, where before it took dev mode's.
    const bare = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: undefined }, report);
    expect(() => bare.jwks()).toThrow(expect.objectContaining({ code: 'signing_configuration_required' }));
    await expect(bare.sign({ iss: world.url }, 'at+jwt')).rejects.toMatchObject({ code: 'signing_configuration_required' });
    expect(reports).toEqual([devKids]);
    await bare.reload();
    expect(reports).toHaveLength(1);

    const pem = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const live = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: pem }, report);
    const [configuredKid] = live.jwks().keys.map((key) => key.kid);
    expect(live.jwks().keys.map((key) => key.kid)).toEqual([configuredKid]);
    const token = await live.sign({ iss: world.url, aud: world.url, exp: clock.nowS() + 60 }, 'at+jwt');
    expect(decodeProtectedHeader(token).kid).toBe(configuredKid);
    // What dev mode's key signed does not verify in live mode.
    const forged = await gateway.signing.sign({ iss: world.url, aud: world.url, exp: clock.nowS() + 60 }, 'at+jwt');
    expect(devKids).toContain(decodeProtectedHeader(forged).kid);
    await expect(live.verify(forged, { typ: 'at+jwt', audience: world.url, issuer: world.url })).rejects.toThrow();
    await expect(live.verify(token, { typ: 'at+jwt', audience: world.url, issuer: world.url })).resolves.toMatchObject({ kid: configuredKid });

    // ACG_SIGNING_KEY set to dev mode's own key, copied from the table: as readable as that row, so left out alike, and
    // named (found from outside: the live gateway signed with it, and the warning named every unsealed key but that one).
    const { rows: devRows } = await gateway.db.query<{ kid: string; private_jwk: string }>('SELECT kid, private_jwk FROM signing_keys WHERE kid = $1', [devKids[0]]);
    const messages: string[] = [];
    const copied = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: devRows[0]!.private_jwk }, (message, kids) => {
      messages.push(message);
      reports.push([...kids]);
    });
    expect(() => copied.jwks()).toThrow(expect.objectContaining({ code: 'signing_configuration_required' }));
    await expect(copied.sign({ iss: world.url }, 'at+jwt')).rejects.toMatchObject({ code: 'signing_configuration_required', message: expect.stringContaining(`unsealed (kid ${devKids[0]})`) });
    // Every refusal says why, the JWKS's included (found from outside: it said "no signing key is configured").
    expect(() => copied.jwks()).toThrow(expect.objectContaining({ message: expect.stringContaining(`unsealed (kid ${devKids[0]})`) }));
    await expect(copied.verify(forged, { typ: 'at+jwt', audience: world.url, issuer: world.url })).rejects.toThrow();
    expect(reports.at(-1)).toEqual(devKids);
    expect(messages).toEqual([expect.stringContaining(`ACG_SIGNING_KEY is one of them (kid ${devKids[0]})`)]);

    // A rotation sealed with the box key is live mode's too.
    const box = generateSecretBoxKey();
    clock.advance(1000);
    const rotated = await rotateSigningKeys(gateway.db, { nowS: clock.nowS(), leadS: 0, retentionS: 600, sealWith: box.key });
    try {
      const sealed = await SigningKeys.open(gateway.db, clock, { ...config, mode: 'live', signingKey: undefined, secretBoxKey: box.text }, report);
      expect(sealed.jwks().keys.map((key) => key.kid)).toEqual([rotated.next.kid]);
      expect(decodeProtectedHeader(await sealed.sign({ iss: world.url }, 'at+jwt')).kid).toBe(rotated.next.kid);
    } finally {
      await gateway.db.query('DELETE FROM signing_keys WHERE kid = $1', [rotated.next.kid]);
      await gateway.db.query('UPDATE signing_keys SET retired_at_s = NULL, published_until_s = NULL');
      await gateway.signing.reload();
    }
  });
});

describe('acg keys', () => {
  it("each command's --help ends with an example (found from outside: list and rotate had none)", async () => {
    for (const command of ['list', 'rotate', 'withdraw']) {
      expect((await run(process.execPath, [ACG, 'keys', command, '--help'])).stdout, command).toMatch(/\nExample: .*npx acg keys /);
    }
  });

  it('rotate and list report each step and each key state', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-keys-'));
    const database = onPostgres() ? await createPostgresDatabase() : undefined;
    const env = { ...process.env, ACG_DATA_DIR: dataDir, DATABASE_URL: database?.url ?? '', LOG_LEVEL: 'silent' };
    try {
      if (!database) {
        // A data directory without the gateway's database (another directory, a typo) is refused, and none is made in it.
        const nowhere = await run(process.execPath, [ACG, 'keys', 'rotate'], { env: { ...env, ACG_DATA_DIR: path.join(dataDir, 'typo') } }).catch(
          (error: { code: number; stderr: string }) => error,
        );
        expect(nowhere).toMatchObject({ code: 2, stderr: expect.stringContaining(`there is no database in ${path.join(dataDir, 'typo')}`) });
        expect(existsSync(path.join(dataDir, 'typo'))).toBe(false);
        await (await openDatabase({ dataDir, databaseUrl: undefined, db: world.gw.config.db })).close();
      }
      // A database without the gateway's schema is refused, and left as it was: a key command never migrates (found from
      // outside: keys list upgraded a schema under a running fleet, whose older instances then stop).
      const unmigrated = await run(process.execPath, [ACG, 'keys', 'list'], { env }).catch((error: { code: number; stderr: string }) => error);
      expect(unmigrated).toMatchObject({ code: 2, stderr: expect.stringContaining('this database holds no gateway schema: run acg migrate') });
      await run(process.execPath, [ACG, 'migrate'], { env });
      const first = await run(process.execPath, [ACG, 'keys', 'rotate', '--lead-s', '0', '--retention-s', '3600'], { env });
      expect(first.stdout).toMatch(/^generating a new ES256 key \(dev mode: kept unsealed, as the dev key is\)…\npublished (\S+); it signs from \S+ \(now\)\n/);
      expect(first.stderr).toContain('warning: --lead-s 0');
      const second = await run(process.execPath, [ACG, 'keys', 'rotate'], { env });
      expect(second.stdout).toMatch(/published \S+; it signs from \S+ \(in 600 s\)/);
      expect(second.stdout).toMatch(/stops signing \S+ \(in 600 s\) and verifies until \S+ \(in 605400 s\)/);
      // Receipts outlive the retention: it says where they are shown after it (found from outside: it spoke of vouchers only).
      expect(second.stdout).toContain("receipts a replaced key signed verify against the JWKS until then too; after that, a hold's evidence (GET /v1/redemptions/{id}/evidence, signed anew at each read) carries them\n");
      const list = await run(process.execPath, [ACG, 'keys', 'list'], { env });
      const states = list.stdout.trim().split('\n').map((line) => line.split(/\s+/)[1]);
      expect(states.sort()).toEqual(['signing', 'upcoming']);
      // A kid is base64url: one in 64 begins with '-', and is the argument, not an option (found in CI: "unknown option
      // '-1QMg…'"). A mistyped long option is still refused as one.
      const fail = (error: { code: number; stderr: string }) => error;
      const dashed = await run(process.execPath, [ACG, 'keys', 'withdraw', '-1QMgeY3VVxlwTxHy7uAN2Q-wBli5zXCptWj9Up7_9U'], { env }).catch(fail);
      expect(dashed).toMatchObject({ code: 2, stderr: expect.stringContaining('no signing key -1QMgeY3VVxlwTxHy7uAN2Q-wBli5zXCptWj9Up7_9U in the database (it holds ') });
      // One in 4,096 begins with '--': a word of a kid's shape is taken as one (found from outside).
      const doubled = await run(process.execPath, [ACG, 'keys', 'withdraw', '--QMgeY3VVxlwTxHy7uAN2Q-wBli5zXCptWj9Up7_9U'], { env }).catch(fail);
      expect(doubled).toMatchObject({ code: 2, stderr: expect.stringContaining('no signing key --QMgeY3VVxlwTxHy7uAN2Q-wBli5zXCptWj9Up7_9U in the database (it holds ') });
      const typo = await run(process.execPath, [ACG, 'keys', 'withdraw', '--unchecked-box'], { env }).catch(fail);
      expect(typo).toMatchObject({ code: 2, stderr: expect.stringContaining("error: unknown option '--unchecked-box'\n(Did you mean --unchecked-box-key?)") });
      const refused = await run(process.execPath, [ACG, 'keys', 'rotate', '--retention-s', '10'], { env }).catch((error: { code: number; stderr: string }) => error);
      expect(refused).toMatchObject({ code: 2, stderr: expect.stringContaining('--retention-s must be') });
      // Live mode keeps no private key in the database in clear: it seals with ACG_SECRET_BOX_KEY, or refuses.
      const live = { ...env, ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example' };
      const unsealed = await run(process.execPath, [ACG, 'keys', 'rotate'], { env: live }).catch((error: { code: number; stderr: string }) => error);
      expect(unsealed).toMatchObject({ code: 2, stderr: expect.stringContaining('live mode seals a rotated key with ACG_SECRET_BOX_KEY') });
      const boxKey = generateSecretBoxKey().text;
      // No instance has served here with a box key, and no key is sealed: nothing shows the box key is the instances'
      // own, so live mode refuses before it says it generates anything, unless told (found from outside: a mistyped box
      // key was accepted, and no instance could open the key).
      const unproven = await run(process.execPath, [ACG, 'keys', 'rotate'], { env: { ...live, ACG_SECRET_BOX_KEY: boxKey } }).catch((error: { code: number; stdout: string; stderr: string }) => error);
      expect(unproven).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining('pass --unchecked-box-key') });
      const sealed = await run(process.execPath, [ACG, 'keys', 'rotate', '--unchecked-box-key'], { env: { ...live, ACG_SECRET_BOX_KEY: boxKey } });
      expect(sealed.stdout).toMatch(/^generating a new ES256 key, sealed with ACG_SECRET_BOX_KEY…\n(withdrew .+\n)?published /);
      // The keys it replaced that live mode never used are said to be so, not "stops signing".
      expect(sealed.stdout).toMatch(/(\S+) is unsealed: live mode does not use it \(acg keys withdraw \1 removes it\)\n/);
      // The second rotation's key, still upcoming, signed nothing: this rotation's key is the one that signs next.
      const secondKid = /published (\S+);/.exec(second.stdout)![1]!;
      expect(sealed.stdout).toContain(`withdrew ${secondKid}: an earlier rotation's key, still upcoming, which signed nothing; this one replaces it\n`);
      expect(sealed.stdout).not.toMatch(/stops signing/);
      expect(sealed.stdout).not.toContain('receipts a replaced key signed');
      // Live mode's list names the keys it leaves out: the one rotated in dev mode left, kept unsealed.
      const liveList = await run(process.execPath, [ACG, 'keys', 'list'], { env: live });
      const ignored = liveList.stdout.split('\n').filter((line) => / {2}unsealed: live mode does not use it \(acg keys withdraw \S+ removes it\)$/.test(line));
      expect(ignored).toHaveLength(1);
      for (const line of ignored) expect(line.split(/\s+/)[1]).toBe('ignored');
      expect(liveList.stdout.split('\n').filter((line) => line.split(/\s+/)[1] === 'signing')).toHaveLength(0);
      // With another box key in the shell, the list says which sealed key does not open with it.
      const otherBox = generateSecretBoxKey().text;
      const listedOther = await run(process.execPath, [ACG, 'keys', 'list'], { env: { ...live, ACG_SECRET_BOX_KEY: otherBox } });
      expect(listedOther.stdout).toMatch(/ {2}sealed with another box key than ACG_SECRET_BOX_KEY here\n/);
      // The sealed key shows which box key the instances run with: another is refused, whatever the flag.
      const mistyped = await run(process.execPath, [ACG, 'keys', 'rotate', '--unchecked-box-key'], { env: { ...live, ACG_SECRET_BOX_KEY: otherBox } }).catch(
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
      expect(mistyped).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining('ACG_SECRET_BOX_KEY here does not open the signing keys already in the database') });
      // A key live mode never used (unsealed) is withdrawn; one that signs is refused.
      const ignoredKid = ignored[0]!.split(/\s+/)[0]!;
      const withdrawn = await run(process.execPath, [ACG, 'keys', 'withdraw', ignoredKid], { env: live });
      expect(withdrawn.stdout).toContain(`withdrew ${ignoredKid}: it was kept unsealed, which live mode never uses\n`);

      // A leaked key: the new key signs now, and the replaced one stops verifying now (found from outside: the shortest
      // retention was 600 s, and nothing said what to do).
      const sealedKid = /published (\S+);/.exec(sealed.stdout)![1]!;
      const mixed = await run(process.execPath, [ACG, 'keys', 'rotate', '--expire-now', '--retention-s', '600'], { env: { ...live, ACG_SECRET_BOX_KEY: boxKey } }).catch(
        (error: { code: number; stderr: string }) => error,
      );
      expect(mixed).toMatchObject({ code: 2, stderr: expect.stringContaining('--expire-now takes no --lead-s or --retention-s') });
      const leaked = await run(process.execPath, [ACG, 'keys', 'rotate', '--expire-now'], { env: { ...live, ACG_SECRET_BOX_KEY: boxKey } });
      expect(leaked.stderr).toContain(`warning: --expire-now: within ${KEY_RELOAD_INTERVAL_S} s`);
      expect(leaked.stdout).toMatch(/published \S+; it signs from \S+ \(now\)\n/);
      const afterLeak = await run(process.execPath, [ACG, 'keys', 'list'], { env: live });
      const stateOf = (kid: string) => afterLeak.stdout.split('\n').find((line) => line.startsWith(kid))?.split(/\s+/)[1];
      // The sealed key was still upcoming: withdrawn, not merely expired (the latest rotation's key is the one that signs).
      expect(leaked.stdout).toContain(`withdrew ${sealedKid}: an earlier rotation's key, still upcoming`);
      expect(stateOf(sealedKid)).toBeUndefined();
      expect(afterLeak.stdout.split('\n').filter((line) => line.split(/\s+/)[1] === 'signing')).toHaveLength(1);
      // A key that signs is not withdrawn: what it signed would stop verifying.
      const signingKid = /published (\S+);/.exec(leaked.stdout)![1]!;
      const kept = await run(process.execPath, [ACG, 'keys', 'withdraw', signingKid], { env: { ...live, ACG_SECRET_BOX_KEY: boxKey } }).catch((error: { code: number; stderr: string }) => error);
      expect(kept).toMatchObject({ code: 2, stderr: expect.stringContaining(`${signingKid} has been due to sign since`) });
    } finally {
      await database?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    }
    // Seventeen CLI processes, most opening the database: 12 s for nine of them on a quiet machine, past 30 s under the
    // whole suite's load once; 90 s with five test files beside it on two cores.
  }, 180_000);
});

// On PostgreSQL only: the embedded database runs in the command's own process, whose clock is the one moved here.
describe.runIf(onPostgres())("acg keys rotate's times", () => {
  it("are the database's clock, not the host's: instances compare the keys' times with the database's (found from outside)", async () => {
    const database = await createPostgresDatabase();
    // The command's host clock 300 s behind the database's.
    const env = { ...process.env, DATABASE_URL: database.url, LOG_LEVEL: 'silent', NODE_OPTIONS: '--import=data:text/javascript,const%20n=Date.now;Date.now=()=>n()-300000;' };
    try {
      await run(process.execPath, [ACG, 'migrate'], { env });
      const rotated = await run(process.execPath, [ACG, 'keys', 'rotate', '--lead-s', '0', '--retention-s', '600'], { env });
      const kid = /published (\S+); it signs from \S+ \(now\)/.exec(rotated.stdout)![1]!;
      const db = await openDatabase({ dataDir: tmpdir(), databaseUrl: database.url, db: world.gw.config.db });
      try {
        const { rows } = await db.query<{ active_from_s: string; now_s: string }>(
          'SELECT active_from_s::text, floor(extract(epoch FROM clock_timestamp()))::bigint::text AS now_s FROM signing_keys WHERE kid = $1',
          [kid],
        );
        expect(Number(rows[0]!.now_s) - Number(rows[0]!.active_from_s)).toBeLessThan(30);
      } finally {
        await db.close();
      }
    } finally {
      await database.drop();
    }
  }, 60_000);
});
