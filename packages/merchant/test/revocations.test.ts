// The SDK's revocation set and both ways of feeding it, against a small local gateway stand-in: a JWKS for
// vouchers signed here, and the revocations feed as the gateway's contract states it (pages of at most
// `limit`, oldest first, `nextSince` = the last entry's cursor or the given `since`, `hasMore`). Webhook
// deliveries are signed with the Standard Webhooks reference library. The end-to-end test against the real
// gateway is revocation-end-to-end.test.ts.
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MerchantClient, RevocationSet, VerificationError, VOUCHER_LIFETIME_S_MAX_DEFAULT, type MerchantClientOptions, type RevocationFeedEntry } from '@agent-credit-gateway/merchant';
import { onPostgres } from '../../../test/support/database.ts';
import { waitFor } from '../../../test/support/wait.ts';
import { refusal } from './support.ts';

const MERCHANT_ID = 'mer_revocations';
const OFFER_ID = 'off_revocations';
const API_KEY = 'acg_test_revocations';
const KID = 'revocations-key';
const WEBHOOK_SECRET = `whsec_${randomBytes(32).toString('base64')}`;
const T0 = 1_800_000_000;

/** A clock for a RevocationSet that the test moves by hand. */
function manualClock(startS = T0) {
  const clock: { nowS: number; read: () => number } = { nowS: startS, read: () => clock.nowS };
  return clock;
}

// What is tested is the package, not a database: once is enough.
describe.skipIf(onPostgres())('revocations in the merchant SDK', () => {
  let server: http.Server;
  let gatewayUrl: string;
  let privateKey: CryptoKey;
  /** The feed's entries, oldest first; a test appends to it. */
  let feed: RevocationFeedEntry[];
  /** The feed's own page size (below the client's limit, so paging shows). */
  let pageMax: number;
  /** Requests to the feed, as received. */
  let feedRequests: Array<{ since: string | null; limit: string | null; authorization: string | undefined }>;
  /** Answers the next n feed requests with this status instead of a page. */
  let failNext: { count: number; status: number };
  /** Never answers feed requests while set (a stalled gateway). */
  let hang: boolean;
  /** Replaces the page with this body when set. */
  let bodyOverride: unknown;

  const client = (options: Partial<MerchantClientOptions> = {}) =>
    new MerchantClient({ gatewayUrl, merchantId: MERCHANT_ID, apiKey: API_KEY, backoffMs: () => 10, attemptsMax: 2, ...options });

  function revoke(...holdIds: string[]): void {
    for (const holdId of holdIds) {
      feed.push({ holdId, agentId: 'agt_frozen', reason: 'agent_frozen', revokedAt: Math.floor(Date.now() / 1000), cursor: `c${feed.length + 1}` });
    }
  }

  /** A voucher as the gateway signs one (ES256, typ voucher+jwt) for the hold `holdId`. */
  function voucher(holdId: string, lifetimeS = 900): Promise<string> {
    const nowS = Math.floor(Date.now() / 1000);
    return new SignJWT({ offer_id: OFFER_ID, category: 'books', amount_uc: '2500000' })
      .setProtectedHeader({ alg: 'ES256', typ: 'voucher+jwt', kid: KID })
      .setIssuer(gatewayUrl)
      .setAudience(MERCHANT_ID)
      .setSubject('agt_frozen')
      .setJti(holdId)
      .setIssuedAt(nowS)
      .setExpirationTime(nowS + lifetimeS)
      .sign(privateKey);
  }

  /** A delivery of `event` as the gateway sends one: the Standard Webhooks headers, signed with the reference library. */
  function delivery(event: Record<string, unknown>, secret = WEBHOOK_SECRET): { headers: Record<string, string>; body: string } {
    const body = JSON.stringify(event);
    const id = String(event.id);
    const at = new Date();
    return {
      headers: { 'webhook-id': id, 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': new Webhook(secret).sign(id, at, body) },
      body,
    };
  }

  const revokedEvent = (holdIds: unknown, id = `evt_${randomBytes(6).toString('hex')}`) => ({
    id,
    type: 'voucher.revoked',
    createdAt: Math.floor(Date.now() / 1000),
    merchantId: MERCHANT_ID,
    data: { revocation: { agentId: 'agt_frozen', reason: 'agent_frozen', holdIds, revokedAt: Math.floor(Date.now() / 1000) } },
  });

  beforeAll(async () => {
    const keys = await generateKeyPair('ES256');
    privateKey = keys.privateKey;
    const jwk = { ...(await exportJWK(keys.publicKey)), kid: KID, alg: 'ES256', use: 'sig' };
    server = http.createServer((request, response) => {
      const url = new URL(request.url ?? '/', 'http://localhost');
      if (url.pathname === '/.well-known/jwks.json') return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [jwk] }));
      if (url.pathname !== `/v1/merchants/${MERCHANT_ID}/revocations`) return void response.writeHead(404).end();
      feedRequests.push({ since: url.searchParams.get('since'), limit: url.searchParams.get('limit'), authorization: request.headers.authorization });
      if (hang) return;
      if (failNext.count > 0) {
        failNext.count--;
        return void response.writeHead(failNext.status, { 'content-type': 'application/problem+json' }).end(JSON.stringify({ status: failNext.status, code: 'internal' }));
      }
      const since = url.searchParams.get('since');
      const from = since === null ? 0 : feed.findIndex((entry) => entry.cursor === since) + 1;
      const page = feed.slice(from, from + Math.min(pageMax, Number(url.searchParams.get('limit') ?? 100)));
      const body = bodyOverride ?? { revocations: page, nextSince: page.at(-1)?.cursor ?? since ?? '', hasMore: from + page.length < feed.length };
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    gatewayUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });
  beforeEach(() => {
    feed = [];
    pageMax = 2;
    feedRequests = [];
    failNext = { count: 0, status: 500 };
    hang = false;
    bodyOverride = undefined;
  });

  describe('RevocationSet', () => {
    it("keeps a revoked hold id while its voucher could verify (its exp plus the tolerance), and drops it after", () => {
      const clock = manualClock();
      const set = new RevocationSet({ nowS: clock.read, clockToleranceS: 30 });
      set.add('hold_a', { expiresAt: T0 + 100 });
      expect(set.has('hold_a')).toBe(true);
      expect(set.has('hold_other')).toBe(false);
      clock.nowS = T0 + 130;
      expect(set.has('hold_a')).toBe(true);
      clock.nowS = T0 + 131;
      expect(set.has('hold_a')).toBe(false);
      expect(set.size).toBe(0);
    });

    it('without the exp, keeps an entry the longest voucher lifetime after the revocation, and ignores one whose voucher has expired already', () => {
      const clock = manualClock();
      const set = new RevocationSet({ nowS: clock.read, clockToleranceS: 30 });
      set.add('hold_revoked_now');
      set.add('hold_revoked_earlier', { revokedAt: T0 - 3600 });
      set.add('hold_revoked_long_ago', { revokedAt: T0 - VOUCHER_LIFETIME_S_MAX_DEFAULT - 31 });
      expect(set.size).toBe(2);
      expect(set.has('hold_revoked_long_ago')).toBe(false);
      clock.nowS = T0 - 3600 + VOUCHER_LIFETIME_S_MAX_DEFAULT + 30;
      expect(set.has('hold_revoked_earlier')).toBe(true);
      clock.nowS++;
      expect(set.has('hold_revoked_earlier')).toBe(false);
      expect(set.has('hold_revoked_now')).toBe(true);
      clock.nowS = T0 + VOUCHER_LIFETIME_S_MAX_DEFAULT + 31;
      expect(set.size).toBe(0);

      const shortLived = new RevocationSet({ nowS: clock.read, voucherLifetimeMaxS: 900, clockToleranceS: 0 });
      shortLived.add('hold_c');
      clock.nowS += 900;
      expect(shortLived.has('hold_c')).toBe(true);
      clock.nowS++;
      expect(shortLived.has('hold_c')).toBe(false);
    });

    it('keeps the earlier end when a hold is added again (both bound when its voucher expires)', () => {
      const clock = manualClock();
      const set = new RevocationSet({ nowS: clock.read, clockToleranceS: 0 });
      set.add('hold_a', { revokedAt: T0 });
      set.add('hold_a', { expiresAt: T0 + 60 });
      set.add('hold_a', { revokedAt: T0 + 10 });
      expect(set.size).toBe(1);
      clock.nowS = T0 + 61;
      expect(set.has('hold_a')).toBe(false);
    });

    it('at its cap, drops the entry whose voucher expires soonest, counts it, and keeps the ones that expire last', () => {
      const clock = manualClock();
      const set = new RevocationSet({ nowS: clock.read, entriesMax: 3 });
      set.add('hold_a', { expiresAt: T0 + 300 });
      set.add('hold_b', { expiresAt: T0 + 100 });
      set.add('hold_c', { expiresAt: T0 + 200 });
      set.add('hold_a', { expiresAt: T0 + 250 });
      expect(set.evictedCount).toBe(0);
      set.add('hold_d', { expiresAt: T0 + 400 });
      expect(set.evictedCount).toBe(1);
      expect(['hold_a', 'hold_b', 'hold_c', 'hold_d'].filter((id) => set.has(id))).toEqual(['hold_a', 'hold_c', 'hold_d']);

      // Many entries through a small cap, in no particular order: exactly the latest-expiring ones stay.
      const capped = new RevocationSet({ nowS: clock.read, entriesMax: 100, clockToleranceS: 0 });
      const ends = new Map(Array.from({ length: 2_000 }, (_, i) => [`hold_${i}`, T0 + 1 + ((i * 7919) % 2_000)] as const));
      for (const [holdId, expiresAt] of ends) capped.add(holdId, { expiresAt });
      expect(capped.size).toBe(100);
      expect(capped.evictedCount).toBe(1_900);
      const kept = [...ends.keys()].filter((holdId) => capped.has(holdId));
      expect(kept.map((holdId) => ends.get(holdId)!).sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, i) => T0 + 1_901 + i));
      // Bringing the kept entries' ends closer, round after round, leaves replaced heap entries behind: they never count.
      for (let round = 1; round <= 5; round++) for (const holdId of kept) capped.add(holdId, { expiresAt: ends.get(holdId)! - 100 * round });
      expect(capped.size).toBe(100);
      clock.nowS = T0 + 1_450;
      expect(capped.size).toBe(51);
      expect(capped.evictedCount).toBe(1_900);
    });

    it("refuses bounds that are not positive integers; takes a set whatever its tolerance (no voucher verifies past its exp)", () => {
      expect(() => new RevocationSet({ entriesMax: 0 })).toThrow(TypeError);
      expect(() => new RevocationSet({ voucherLifetimeMaxS: 1.5 })).toThrow(TypeError);
      expect(() => new RevocationSet({ clockToleranceS: -1 })).toThrow(TypeError);
      const shared = new RevocationSet({ clockToleranceS: 60 });
      expect(client({ clockToleranceS: 120, revocations: shared }).revocations).toBe(shared);
      expect(client({ clockToleranceS: 120 }).revocations.clockToleranceS).toBe(120);
    });
  });

  describe('verifyVoucher', () => {
    it('refuses a revoked voucher with voucher_revoked after its signature checks, and accepts the others', async () => {
      const revocations = new RevocationSet();
      const sdk = client({ revocations });
      const revoked = await voucher('hold_revoked');
      const other = await voucher('hold_other');
      expect((await sdk.verifyVoucher(revoked)).redemptionId).toBe('hold_revoked');
      revocations.add('hold_revoked');
      const refused = await refusal(sdk.verifyVoucher(revoked, { offerId: OFFER_ID }));
      expect(refused.code).toBe('voucher_revoked');
      expect(refused.message).toContain('hold_revoked');
      expect((await refusal(sdk.verifyVoucher(revoked, { offerId: 'off_other' }))).code).toBe('voucher_revoked');
      expect(await sdk.verifyVoucher(other, { offerId: OFFER_ID })).toMatchObject({ redemptionId: 'hold_other', offerId: OFFER_ID });
      // A forged token naming a revoked hold fails on its signature, before anything is looked up.
      const [header, payload] = revoked.split('.');
      expect((await refusal(sdk.verifyVoucher(`${header}.${payload}.${Buffer.alloc(64).toString('base64url')}`))).code).toBe('invalid_token');
    });

    it("after refusing a revoked voucher, keeps its entry only until the voucher's own exp", async () => {
      let shiftS = 0;
      const revocations = new RevocationSet({ nowS: () => Math.floor(Date.now() / 1000) + shiftS });
      const sdk = client({ revocations });
      const token = await voucher('hold_short', 60);
      revocations.add('hold_short');
      expect((await refusal(sdk.verifyVoucher(token))).code).toBe('voucher_revoked');
      shiftS = 60 + 30 + 2;
      expect(revocations.has('hold_short')).toBe(false);
    });
  });

  describe('handleWebhook', () => {
    it('adds the hold ids of a voucher.revoked delivery signed as Standard Webhooks signs, so verifyVoucher refuses them', async () => {
      const sdk = client();
      const token = await voucher('hold_webhook_1');
      const { headers, body } = delivery(revokedEvent(['hold_webhook_1', 'hold_webhook_2']));
      const event = sdk.handleWebhook(WEBHOOK_SECRET, headers, body);
      expect(event).toMatchObject({ type: 'voucher.revoked', merchantId: MERCHANT_ID, data: { revocation: { holdIds: ['hold_webhook_1', 'hold_webhook_2'], reason: 'agent_frozen' } } });
      expect(sdk.revocations.has('hold_webhook_2')).toBe(true);
      expect((await refusal(sdk.verifyVoucher(token))).code).toBe('voucher_revoked');
      // At least once: the same delivery again changes nothing.
      sdk.handleWebhook(WEBHOOK_SECRET, headers, Buffer.from(body));
      expect(sdk.revocations.size).toBe(2);
    });

    it('adds the hold of a redemption.released the kill switch made (its revocation set), so it is refused whichever event comes first; a release without one adds nothing', async () => {
      const sdk = client();
      const token = await voucher('hold_released_1');
      const nowS = Math.floor(Date.now() / 1000);
      const released = (id: string, revocation: unknown) => ({
        id: `evt_${id}`,
        type: 'redemption.released',
        createdAt: nowS,
        merchantId: MERCHANT_ID,
        data: { redemption: { id, state: 'released', expiresAt: nowS + 600, revocation } },
      });
      const byKillSwitch = delivery(released('hold_released_1', { revokedAt: nowS, reason: 'agent_frozen' }));
      expect(sdk.revocations.applyEvent(sdk.handleWebhook(WEBHOOK_SECRET, byKillSwitch.headers, byKillSwitch.body))).toEqual(['hold_released_1']);
      expect((await refusal(sdk.verifyVoucher(token))).code).toBe('voucher_revoked');
      const byMerchant = delivery(released('hold_released_2', null));
      expect(sdk.revocations.applyEvent(sdk.handleWebhook(WEBHOOK_SECRET, byMerchant.headers, byMerchant.body))).toEqual([]);
      expect(sdk.revocations.has('hold_released_2')).toBe(false);
    });

    it('returns other events without adding anything, and refuses a forged or malformed revocation without adding it', () => {
      const sdk = client();
      const captured = { id: 'evt_captured', type: 'redemption.captured', createdAt: Math.floor(Date.now() / 1000), merchantId: MERCHANT_ID, data: { redemption: { id: 'hold_x' } } };
      const ok = delivery(captured);
      const event = sdk.handleWebhook(WEBHOOK_SECRET, ok.headers, ok.body);
      expect(event.type).toBe('redemption.captured');
      expect(sdk.revocations.applyEvent(event)).toEqual([]);

      const forged = delivery(revokedEvent(['hold_forged']), `whsec_${randomBytes(32).toString('base64')}`);
      const error = (() => {
        try {
          sdk.handleWebhook(WEBHOOK_SECRET, forged.headers, forged.body);
        } catch (thrown) {
          return thrown;
        }
      })();
      expect(error).toBeInstanceOf(VerificationError);
      expect((error as VerificationError).code).toBe('invalid_webhook');

      const malformed = delivery(revokedEvent('hold_not_a_list'));
      expect(() => sdk.handleWebhook(WEBHOOK_SECRET, malformed.headers, malformed.body)).toThrow(/well-formed data.revocation/);
      expect(sdk.revocations.size).toBe(0);
    });
  });

  describe('syncRevocations', () => {
    it('reads every page of the feed with the API key, then only what came after, and adds each hold id', async () => {
      const sdk = client();
      revoke('hold_1', 'hold_2', 'hold_3', 'hold_4', 'hold_5');
      expect(await sdk.syncRevocations()).toEqual({ holdIds: ['hold_1', 'hold_2', 'hold_3', 'hold_4', 'hold_5'], nextSince: 'c5' });
      expect(feedRequests).toEqual([
        { since: null, limit: '500', authorization: `Bearer ${API_KEY}` },
        { since: 'c2', limit: '500', authorization: `Bearer ${API_KEY}` },
        { since: 'c4', limit: '500', authorization: `Bearer ${API_KEY}` },
      ]);
      expect(['hold_1', 'hold_3', 'hold_5', 'hold_6'].map((id) => sdk.revocations.has(id))).toEqual([true, true, true, false]);
      expect(await sdk.syncRevocations()).toEqual({ holdIds: [], nextSince: 'c5' });
      revoke('hold_6');
      expect(await sdk.syncRevocations()).toEqual({ holdIds: ['hold_6'], nextSince: 'c6' });
      expect(feedRequests.slice(3).map((request) => request.since)).toEqual(['c5', 'c5']);
      expect((await refusal(sdk.verifyVoucher(await voucher('hold_6')))).code).toBe('voucher_revoked');
    });

    it('runs concurrent syncs one after the other, each from where the previous ended', async () => {
      const sdk = client();
      revoke('hold_1', 'hold_2', 'hold_3');
      const [first, second] = await Promise.all([sdk.syncRevocations(), sdk.syncRevocations()]);
      expect(first.holdIds).toEqual(['hold_1', 'hold_2', 'hold_3']);
      expect(second).toEqual({ holdIds: [], nextSince: 'c3' });
      expect(feedRequests.map((request) => request.since)).toEqual([null, 'c2', 'c3']);
    });

    it('throws the gateway problem after its retries, and refuses a body that is not a page or a cursor that does not move', async () => {
      const sdk = client();
      failNext = { count: 2, status: 503 };
      await expect(sdk.syncRevocations()).rejects.toMatchObject({ name: 'GatewayError', status: 503 });
      expect(feedRequests).toHaveLength(2);
      bodyOverride = { revocations: 'none', nextSince: 'c1', hasMore: false };
      await expect(sdk.syncRevocations()).rejects.toThrow(/not a page of revocations/);
      bodyOverride = { revocations: [], nextSince: '', hasMore: true };
      await expect(sdk.syncRevocations()).rejects.toThrow(/did not move its cursor/);
      await expect(client({ apiKey: undefined }).syncRevocations()).rejects.toThrow(/API key/);
    });
  });

  describe('pollRevocations', () => {
    it('polls at its interval, following nextSince, goes on through failures with backoff, and stops', async () => {
      const sdk = client();
      const errors: unknown[] = [];
      revoke('hold_1', 'hold_2', 'hold_3');
      // The first sync fails on both its attempts (a 500 each), and so does the next: the poller reports each and goes on.
      failNext = { count: 4, status: 500 };
      const polling = sdk.pollRevocations({ intervalMs: 40, onError: (error) => errors.push(error) });
      try {
        await waitFor(() => sdk.revocations.has('hold_3'), { what: 'the poller to recover and read the feed' });
        expect(errors).toHaveLength(2);
        expect(errors[0]).toMatchObject({ name: 'GatewayError', status: 500 });
        revoke('hold_4');
        await waitFor(() => sdk.revocations.has('hold_4'), { what: 'the poller to read a revocation made while it runs' });
        const sinces = feedRequests.slice(4).map((request) => request.since);
        expect(sinces.slice(0, 2)).toEqual([null, 'c2']);
        expect(sinces).toContain('c3');
      } finally {
        await polling.stop();
      }
      const requestsAtStop = feedRequests.length;
      await new Promise((resolve) => setTimeout(resolve, 150));
      expect(feedRequests).toHaveLength(requestsAtStop);
      expect(errors).toHaveLength(2);
    });

    it('stops when its signal aborts, also with a request in flight that the gateway never answers', async () => {
      const controller = new AbortController();
      hang = true;
      const sdk = client({ timeoutMs: 60_000 });
      const polling = sdk.pollRevocations({ intervalMs: 20, signal: controller.signal, onError: () => {} });
      await waitFor(() => feedRequests.length === 1, { what: 'the first feed request' });
      const startedMs = performance.now();
      controller.abort();
      await polling.stop();
      expect(performance.now() - startedMs).toBeLessThan(5_000);
      expect(feedRequests).toHaveLength(1);

      const stopped = new AbortController();
      stopped.abort();
      await client().pollRevocations({ intervalMs: 20, signal: stopped.signal }).stop();
      expect(feedRequests).toHaveLength(1);
      expect(() => sdk.pollRevocations({ intervalMs: 0 })).toThrow(TypeError);
    });
  });
});
