// The merchant SDK against a real gateway: vouchers minted by real agents, verified offline against the
// served JWKS; capture/release through the real routes (one of them behind a proxy that loses answers);
// webhook deliveries made by the real worker; and the README's example server taking a payment.
import http from 'node:http';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConnectionError, GatewayError, MerchantClient, VerificationError, verifyWebhook, type VoucherClaims } from '@agent-credit-gateway/merchant';
import { shopServer } from '../examples/server.ts';
import { rotateSigningKeys } from '../../../src/platform/signing.ts';
import { grant } from '../../../test/support/ledger-fixture.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../../../test/support/merchants.ts';
import { waitFor } from '../../../test/support/wait.ts';
import { startWorld, type World } from '../../../test/support/world.ts';

let world: World;
let target: HookTarget;
let ownerToken: string;
let merchantId: string;
let apiKey: string;
let webhookSecret: string;
let offerId: string;
let agent: { id: string; token: string };

const client = (options: Partial<ConstructorParameters<typeof MerchantClient>[0]> = {}) =>
  new MerchantClient({ gatewayUrl: world.url, merchantId, apiKey, backoffMs: () => 10, ...options });

async function mint(offer = offerId): Promise<{ voucher: string; redemption: { id: string } }> {
  const res = await world.api('POST', '/v1/vouchers', { token: agent.token, key: uniqueKey('mint'), body: { offerId: offer } });
  if (res.status !== 200) throw new Error(`mint failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

async function createOffer(priceUc: string): Promise<string> {
  const res = await world.api('POST', `/v1/merchants/${merchantId}/offers`, {
    token: ownerToken,
    key: uniqueKey('offer'),
    body: { name: 'Report', category: 'books', priceUc, holdLifetimeS: 900 },
  });
  if (res.status !== 201) throw new Error(`offer failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.id;
}

async function failure(promise: Promise<unknown>): Promise<VerificationError | GatewayError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof VerificationError || error instanceof GatewayError) return error;
    throw error;
  }
  throw new Error('expected a failure');
}

beforeAll(async () => {
  target = await startHookTarget({ nowS: () => world.gw.clock.nowS() });
  world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
  ownerToken = await world.humanToken('sdk-shop@example.com');
  merchantId = (await registerMerchant(world, ownerToken)).merchant.id;
  await markVerified(world, merchantId);
  webhookSecret = (await configureWebhook(world, ownerToken, merchantId)).body.webhookSecret;
  const key = await world.api('POST', `/v1/merchants/${merchantId}/api-keys`, {
    token: ownerToken,
    key: uniqueKey('api-key'),
    body: { name: 'sdk', scopes: ['offers:read', 'redemptions:capture', 'redemptions:release', 'redemptions:refund', 'evidence:read'] },
  });
  if (key.status !== 201) throw new Error(`api key failed: ${key.status} ${JSON.stringify(key.body)}`);
  apiKey = key.body.secretKey;
  offerId = await createOffer('2500000');
  agent = await world.createAgent('sdk-agent-owner@example.com', 'sdk-agent');
  await grant(world, agent.id, 100_000_000n);
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

describe('verifyVoucher', () => {
  it('returns the typed claims of a voucher a real agent minted, verified offline against the JWKS', async () => {
    const { voucher, redemption } = await mint();
    const claims = await client().verifyVoucher(voucher, { offerId, minAmountUc: 2_500_000n, maxAmountUc: '2500000' });
    expect(claims).toEqual<VoucherClaims>({
      redemptionId: redemption.id,
      agentId: agent.id,
      merchantId,
      offerId,
      category: 'books',
      amountUc: '2500000',
      issuedAt: expect.any(Number),
      expiresAt: expect.any(Number),
      mandateHash: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
    });
    expect(claims.expiresAt - claims.issuedAt).toBe(900);
  });

  it('refuses a tampered, foreign, expired or mistyped token, and vouchers outside the offer and amount bounds', async () => {
    const { voucher } = await mint();
    const [header, payload, signature] = voucher.split('.');
    const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString());
    const tampered = [header, Buffer.from(JSON.stringify({ ...claims, amount_uc: '1' })).toString('base64url'), signature].join('.');
    expect((await failure(client().verifyVoucher(tampered))).code).toBe('invalid_token');
    // The same voucher spelled another way (its signature's last character moved within the bits base64url ignores)
    // is not taken for a second voucher (found from outside: it verified).
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const respelled = voucher.slice(0, -1) + alphabet[alphabet.indexOf(voucher.at(-1)!) ^ 1];
    const twice = await failure(client().verifyVoucher(respelled));
    expect([twice.code, twice.message]).toEqual(['invalid_token', 'the voucher+jwt does not verify: it is not a compact JWS of three base64url segments, each in its one spelling']);
    // Each refusal names what was expected and what the token holds (found from outside: jose's words named neither).
    const foreign = await failure(client({ merchantId: 'mer_someoneelse' }).verifyVoucher(voucher));
    // A genuine voucher of another merchant is a misrouted agent, not a forgery: wrong_merchant, as for a receipt (found from outside).
    expect([foreign.code, foreign.message]).toEqual(['wrong_merchant', `the voucher+jwt does not verify: it is for ${JSON.stringify(claims.aud)}, not merchantId "mer_someoneelse"`]);
    // An audience list that names this merchant among others is not a voucher for it: the gateway signs one merchant
    // (found from outside: jose's audience check passed it).
    const shared = await world.gw.gateway.signing.sign({ ...claims, aud: ['mer_someoneelse', merchantId] }, 'voucher+jwt');
    const many = await failure(client().verifyVoucher(shared));
    expect([many.code, many.message]).toEqual(['invalid_token', `the voucher+jwt does not verify: its aud ["mer_someoneelse","${merchantId}"] is not this merchant alone ("${merchantId}")`]);
    const alone = await world.gw.gateway.signing.sign({ ...claims, aud: [merchantId] }, 'voucher+jwt');
    expect((await failure(client().verifyVoucher(alone))).code).toBe('invalid_token');
    const elsewhere = await failure(client({ issuer: 'https://evil.example' }).verifyVoucher(voucher));
    expect(elsewhere.code).toBe('invalid_token');
    expect(elsewhere.message).toContain(`its issuer is ${JSON.stringify(claims.iss)}, not "https://evil.example": set gatewayUrl`);
    const nowS = Math.floor(Date.now() / 1000);
    const expired = await world.gw.gateway.signing.sign({ ...claims, iat: nowS - 1000, exp: nowS - 100 }, 'voucher+jwt');
    const late = await failure(client().verifyVoucher(expired));
    expect(late.code).toBe('invalid_token');
    expect(late.message).toContain(`it expired at ${new Date((nowS - 100) * 1000).toISOString()} (now `);
    const accessToken = await world.gw.gateway.signing.sign({ ...claims }, 'at+jwt');
    expect((await failure(client().verifyVoucher(accessToken))).code).toBe('invalid_token');
    expect((await failure(client().verifyVoucher(voucher, { offerId: ['off_other', 'off_another'] }))).code).toBe('wrong_offer');
    expect((await failure(client().verifyVoucher(voucher, { maxAmountUc: 2_499_999n }))).code).toBe('amount_out_of_bounds');
    expect((await failure(client().verifyVoucher(voucher, { minAmountUc: '2500001' }))).code).toBe('amount_out_of_bounds');
  });

  it("refuses an amount of more than the gateway's 18 digits before it asks the gateway anything", async () => {
    const { voucher, redemption } = await mint();
    const tooLarge = 10n ** 18n;
    await expect(client().verifyVoucher(voucher, { maxAmountUc: tooLarge })).rejects.toThrow(TypeError);
    expect(() => client().capture(redemption.id, { amountUc: tooLarge.toString() })).toThrow(TypeError);
    // A client without a merchant id (an unset variable in plain JavaScript) is refused: its vouchers' audience would
    // go unchecked (found from outside).
    for (const merchantId of [undefined, '']) {
      expect(() => client({ merchantId: merchantId as unknown as string })).toThrow(/MerchantClient needs merchantId, a non-empty string/);
    }
    // A number from plain JavaScript is refused too, not sent (found from outside: the gateway answered 400).
    expect(() => client().capture(redemption.id, { amountUc: 1_500_000 as unknown as string })).toThrow(/amountUc must be a string of digits or a bigint .*got number 1500000/);
    expect(() => client().refund(redemption.id, { amountUc: 1 as unknown as string })).toThrow(TypeError);
    expect((await client().verifyVoucher(voucher, { maxAmountUc: tooLarge - 1n })).redemptionId).toBe(redemption.id);
    const claims = JSON.parse(Buffer.from(voucher.split('.')[1]!, 'base64url').toString());
    const nineteenDigits = await world.gw.gateway.signing.sign({ ...claims, amount_uc: tooLarge.toString() }, 'voucher+jwt');
    expect((await failure(client().verifyVoucher(nineteenDigits))).code).toBe('invalid_token');
  });

  // With the default cooldown: jose's counts from any fetch, so a key signing right after the first verification
  // was refused for 30 s (found from outside, after `acg keys rotate --expire-now`).
  it('refetches the JWKS when a voucher names a key it has not seen (after a rotation), at once after its first fetch', async () => {
    const sdk = client();
    await sdk.verifyVoucher((await mint()).voucher);
    await rotateSigningKeys(world.gw.gateway.db, { nowS: world.gw.clock.nowS(), leadS: 0, retentionS: 3600 });
    await world.gw.gateway.signing.reload();
    const { voucher, redemption } = await mint();
    const kid = JSON.parse(Buffer.from(voucher.split('.')[0]!, 'base64url').toString()).kid;
    expect(world.gw.gateway.signing.jwks().keys.map((k) => k.kid)).toContain(kid);
    expect((await sdk.verifyVoucher(voucher)).redemptionId).toBe(redemption.id);
  });

  // One fetch a cooldown, not two: jose fetched on its own as well once its cooldown had passed (found from outside).
  it('fetches the JWKS again for unknown kids at most once a cooldown: a token meets a fetch begun since it was signed, or waits for the next', async () => {
    const sdk = client({ jwksRefetchCooldownMs: 300 });
    const { voucher } = await mint();
    await sdk.verifyVoucher(voucher);
    const [header, payload, signature] = voucher.split('.') as [string, string, string];
    const forge = (kid: string, iat?: number) =>
      [
        Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(header, 'base64url').toString()), kid })).toString('base64url'),
        iat === undefined ? payload : Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload, 'base64url').toString()), iat })).toString('base64url'),
        signature,
      ].join('.');
    const fetches: number[] = [];
    const realFetch = globalThis.fetch;
    globalThis.fetch = (async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
      if (String(input instanceof Request ? input.url : input).endsWith('/.well-known/jwks.json')) fetches.push(Date.now());
      return realFetch(input, init);
    }) as typeof fetch;
    try {
      // Signed before the first fetch began, by more than the clock tolerance (a minute ago): they share it, however they arrive.
      const old = Math.floor(Date.now() / 1000) - 60;
      const forged = await Promise.all(Array.from({ length: 5 }, (_, n) => failure(sdk.verifyVoucher(forge(`forged-${n}`, old)))));
      expect(forged.map((error) => error.code)).toEqual(Array(5).fill('invalid_token'));
      expect(fetches).toHaveLength(1);
      expect((await failure(sdk.verifyVoucher(forge('forged-old', old)))).code).toBe('invalid_token');
      expect(fetches).toHaveLength(1);
      // Signed after it: it waits for the next fetch, a cooldown after the last, and is refused only then.
      const later = await failure(sdk.verifyVoucher(forge('forged-later', Math.floor(Date.now() / 1000) + 1)));
      expect(later.code).toBe('invalid_token');
      // It says which key it looked for, and that a receipt outliving its key is read through its evidence (found from outside).
      expect(later.message).toMatch(new RegExp(`no key of the gateway's JWKS \\(${world.url}/\\.well-known/jwks\\.json, fetched at [\\d:.TZ-]+\\) has its kid "forged-later", and that key set was fetched after the token arrived`));
      expect(later.message).toContain('a forgery, a key the gateway stopped publishing');
      expect(later.message).toContain('getEvidence(redemptionId)');
      expect(fetches).toHaveLength(2);
      expect(fetches[1]! - fetches[0]!).toBeGreaterThanOrEqual(290);
      // Tokens arriving together while the next fetch waits share it.
      const fresh = Math.floor(Date.now() / 1000) + 1;
      await Promise.all(['forged-a', 'forged-b', 'forged-c'].map((kid) => failure(sdk.verifyVoucher(forge(kid, fresh)))));
      expect(fetches).toHaveLength(3);
    } finally {
      globalThis.fetch = realFetch;
    }
  });

  /** A forged kid makes `sdk` fetch the key set; then a rotation with no lead, and a voucher of the new key. */
  async function forgedKidThenRotation(sdk: MerchantClient): Promise<Awaited<ReturnType<typeof mint>>> {
    const { voucher } = await mint();
    await sdk.verifyVoucher(voucher);
    const [header, payload, signature] = voucher.split('.') as [string, string, string];
    const forged = `${Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(header, 'base64url').toString()), kid: 'forged-first' })).toString('base64url')}.${payload}.${signature}`;
    expect((await failure(sdk.verifyVoucher(forged))).code).toBe('invalid_token');
    await rotateSigningKeys(world.gw.gateway.db, { nowS: world.gw.clock.nowS(), leadS: 0, retentionS: 3600 });
    await world.gw.gateway.signing.reload();
    return mint();
  }

  // A forged kid just before a rotation with no lead made the new key's vouchers refused as forgeries for the whole
  // cooldown, 30 s, and a forged kid every 30 s kept it so (found from outside).
  it('finds a key that began signing right after a forged kid made it fetch the key set: a token is checked against keys fetched after it arrived', async () => {
    const sdk = client({ jwksRefetchCooldownMs: 5_000 });
    const fresh = await forgedKidThenRotation(sdk);
    const startedMs = Date.now();
    expect((await sdk.verifyVoucher(fresh.voucher)).redemptionId).toBe(fresh.redemption.id);
    expect(Date.now() - startedMs).toBeLessThan(6_000);
  });

  // The iat of a token is read on the gateway's clock: one a few seconds behind this process's made a fetch begun before
  // a new key's publication count as after it, and the new key's vouchers were refused as forgeries (CI, 2026-12-07).
  it("finds a new key though the gateway's clock is seconds behind this process's: a token's iat is read with the clock tolerance", async () => {
    const sdk = client({ jwksRefetchCooldownMs: 2_000 });
    const fresh = await forgedKidThenRotation(sdk);
    const claims = decodeJwt(fresh.voucher);
    const behind = await world.gw.gateway.signing.sign({ ...claims, iat: claims.iat! - 5 }, decodeProtectedHeader(fresh.voucher).typ!);
    expect((await sdk.verifyVoucher(behind)).redemptionId).toBe(fresh.redemption.id);
  });
});

describe('redemption calls', () => {
  it('captures, releases and reads holds with the merchant key, and throws the gateway problem as GatewayError', async () => {
    const sdk = client();
    const first = await mint();
    const captured = await sdk.capture(first.redemption.id, { amountUc: 1_000_000n });
    expect(captured).toMatchObject({ state: 'captured', capturedUc: '1000000' });
    expect((await sdk.getRedemption(first.redemption.id)).state).toBe('captured');
    const second = await mint();
    expect((await sdk.release(second.redemption.id)).state).toBe('released');
    const again = await failure(sdk.capture(second.redemption.id));
    expect(again).toBeInstanceOf(GatewayError);
    expect(again).toMatchObject({ status: 409, code: 'hold_resolved' });
    expect(await failure(sdk.getRedemption('hold_doesnotexist'))).toMatchObject({ status: 404, code: 'not_found' });
  });

  it('refunds captured credit and verifies the signed capture and refund receipts', async () => {
    const sdk = client();
    const { redemption } = await mint();
    const captured = await sdk.capture(redemption.id);
    expect(await sdk.verifyReceipt(captured.captureReceipt!)).toMatchObject({ kind: 'capture', redemptionId: redemption.id, merchantId, agentId: agent.id, offerId, capturedUc: '2500000', refundId: null });
    const { refund, redemption: after } = await sdk.refund(redemption.id, { amountUc: 1_000_000n, reason: 'partly late' });
    expect(after).toMatchObject({ refundedUc: '1000000', refunds: [refund] });
    expect(await sdk.verifyReceipt(refund.receipt!)).toMatchObject({ kind: 'refund', refundId: refund.id, refundUc: '1000000', refundedUc: '1000000', capturedUc: '2500000' });
    expect(await failure(sdk.refund(redemption.id, { amountUc: '1500001' }))).toMatchObject({ status: 400, code: 'refund_exceeds_captured' });
    expect((await sdk.refund(redemption.id)).refund.amountUc).toBe('1500000');
    // The evidence for a dispute: verified, tied to the voucher's mandate and carrying both receipts (found from outside: the SDK had no way to it).
    const { evidence, claims } = await sdk.getEvidence(redemption.id);
    expect(evidence.split('.')).toHaveLength(3);
    const voucherClaims = await sdk.verifyReceipt(captured.captureReceipt!);
    expect(claims).toMatchObject({ redemptionId: redemption.id, evidenceId: expect.stringMatching(/^evd_/), ancestorMandates: [], approval: null, redemption: { id: redemption.id, refundedUc: '2500000' } });
    expect(claims.mandate!.hash).toBe(voucherClaims.mandateHash);
    expect(claims.receipts).toHaveLength(3);
    expect(claims.history.map((entry) => entry.event)).toEqual(['held', 'captured', 'refunded', 'refunded']);
    expect(await failure(sdk.getEvidence('hold_doesnotexist'))).toMatchObject({ status: 404, code: 'not_found' });
    expect((await failure(client({ merchantId: 'mer_someoneelse' }).verifyReceipt(refund.receipt!))).code).toBe('wrong_merchant');
    const [header, , signature] = refund.receipt!.split('.');
    const forged = [header, Buffer.from(JSON.stringify({ kind: 'refund', refund_uc: '9' })).toString('base64url'), signature].join('.');
    expect((await failure(sdk.verifyReceipt(forged))).code).toBe('invalid_token');
    expect((await failure(sdk.verifyReceipt((await mint()).voucher))).code).toBe('invalid_token');
  });

  it('retries with the same Idempotency-Key when an answer is lost, so the capture happens once', async () => {
    let lost = 0;
    const keys: string[] = [];
    // A proxy that forwards every request but loses the first answer of each POST, as a network would.
    const proxy = http.createServer(async (request, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const headers = Object.fromEntries(Object.entries(request.headers).filter(([name]) => !['host', 'content-length', 'connection'].includes(name))) as Record<string, string>;
      const upstream = await fetch(`${world.url}${request.url}`, { method: request.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
      const text = await upstream.text();
      if (request.method === 'POST') keys.push(headers['idempotency-key']!);
      if (request.method === 'POST' && lost++ === 0) return void response.writeHead(502).end('bad gateway');
      response.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' }).end(text);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const sdk = client({ gatewayUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, issuer: world.url });
      const { redemption } = await mint();
      const captured = await sdk.capture(redemption.id, { amountUc: '1500000' });
      expect(captured).toMatchObject({ state: 'captured', capturedUc: '1500000' });
      expect(keys).toHaveLength(2);
      expect(keys[0]).toBe(keys[1]);
      const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(
        `SELECT count(*) AS n FROM journal_entries WHERE operation_id = $1 AND kind = 'capture' AND account LIKE 'merchant:%'`,
        [`${redemption.id}:capture`],
      );
      expect(rows[0]!.n).toBe(1n);
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });
});

describe('a call no attempt got an answer to', () => {
  it('throws ConnectionError with the Idempotency-Key it sent, and the same call with that key later runs once', async () => {
    // A proxy that forwards every request, then drops the connection instead of answering: the capture ran.
    const keys: string[] = [];
    const proxy = http.createServer(async (request, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const headers = Object.fromEntries(Object.entries(request.headers).filter(([name]) => !['host', 'content-length', 'connection'].includes(name))) as Record<string, string>;
      keys.push(headers['idempotency-key']!);
      await fetch(`${world.url}${request.url}`, { method: request.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
      response.socket?.destroy();
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const { redemption } = await mint();
      const sdk = client({ gatewayUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, issuer: world.url, attemptsMax: 3 });
      const failure = await sdk.capture(redemption.id, { amountUc: '1500000' }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(ConnectionError);
      const { code, attempts, idempotencyKey, cause } = failure as ConnectionError;
      expect({ code, attempts }).toEqual({ code: 'connection_failed', attempts: 3 });
      expect(keys).toEqual([idempotencyKey, idempotencyKey, idempotencyKey]);
      expect(cause).toBeInstanceOf(Error);
      // Later, straight to the gateway, with the key it named: the stored outcome of the one capture.
      expect(await client().capture(redemption.id, { amountUc: '1500000', idempotencyKey })).toMatchObject({ state: 'captured', capturedUc: '1500000' });
      const { rows } = await world.gw.gateway.db.query<{ n: bigint }>(
        `SELECT count(*) AS n FROM journal_entries WHERE operation_id = $1 AND kind = 'capture' AND account LIKE 'merchant:%'`,
        [`${redemption.id}:capture`],
      );
      expect(rows[0]!.n).toBe(1n);
      // A read names no key.
      const read = await client({ gatewayUrl: 'http://127.0.0.1:1', attemptsMax: 2 }).getRedemption(redemption.id).catch((error: unknown) => error);
      expect(read).toBeInstanceOf(ConnectionError);
      expect((read as ConnectionError).idempotencyKey).toBeUndefined();
      // A voucher checked while the gateway's keys cannot be read is not refused as forged: nothing is known of it
      // (found from outside: invalid_token, "fetch failed", so valid vouchers were refused during an outage).
      const { voucher } = await mint();
      const unreadable = await client({ gatewayUrl: 'http://127.0.0.1:1', issuer: world.url }).verifyVoucher(voucher).catch((error: unknown) => error);
      expect(unreadable).toBeInstanceOf(ConnectionError);
      expect((unreadable as ConnectionError).message).toBe("the gateway's keys (http://127.0.0.1:1/.well-known/jwks.json) could not be read, so the voucher+jwt could not be checked: fetch failed; retry later");
      // An answer that is not a key set (the proxy above answers none) is the same: no verdict on the token.
      const answerless = await client({ gatewayUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, issuer: world.url }).verifyVoucher(voucher).catch((error: unknown) => error);
      expect(answerless).toBeInstanceOf(ConnectionError);
      // The same voucher straight from the gateway verifies.
      expect((await client().verifyVoucher(voucher)).offerId).toBe(offerId);
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });
});

describe('a call the gateway kept refusing for now', () => {
  it("throws GatewayError with the last answer, its Retry-After, the attempts and the Idempotency-Key to call again with (found from outside: neither was there)", async () => {
    // Something in front of the gateway answers every POST 503 with Retry-After, never forwarding it.
    const keys: string[] = [];
    const proxy = http.createServer((request, response) => {
      keys.push(String(request.headers['idempotency-key']));
      request.resume();
      response.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '1' }).end(JSON.stringify({ status: 503, code: 'storage_unavailable', title: 'The database is unavailable' }));
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const { redemption } = await mint();
      const sdk = client({ gatewayUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, issuer: world.url, attemptsMax: 2 });
      const failure = await sdk.capture(redemption.id, { amountUc: '1500000' }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(GatewayError);
      const { status, code, attempts, retryAfterS, idempotencyKey, message } = failure as GatewayError;
      expect({ status, code, attempts, retryAfterS }).toEqual({ status: 503, code: 'storage_unavailable', attempts: 2, retryAfterS: 1 });
      expect(keys).toEqual([idempotencyKey, idempotencyKey]);
      expect(message).toBe(`503 storage_unavailable: The database is unavailable (after 2 attempts; call again with idempotencyKey ${idempotencyKey} to run it at most once)`);
      // Later, straight to the gateway, with the key it named: it runs once.
      expect(await client().capture(redemption.id, { amountUc: '1500000', idempotencyKey })).toMatchObject({ state: 'captured', capturedUc: '1500000' });
      // A refusal on the first answer says nothing of attempts.
      const again = (await client().capture(redemption.id, { amountUc: '1' }).catch((error: unknown) => error)) as GatewayError;
      expect(again).toMatchObject({ status: 409, attempts: 1 });
      expect(again.message).not.toMatch(/attempts/);
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });
});

describe('a gateway URL that redirects', () => {
  it('is refused at once with unexpected_redirect, never followed: the other host gets nothing and its answer is not taken for the capture (found from outside: a 307 resolved a capture with the other host\'s body)', async () => {
    const elsewhere: string[] = [];
    const other = http.createServer((request, response) => {
      elsewhere.push(`${request.method} ${request.url}`);
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'hold_evil', state: 'captured', capturedUc: '1' }));
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const redirecting = http.createServer((request, response) => {
      request.resume();
      response.writeHead(307, { location: `http://127.0.0.1:${(other.address() as AddressInfo).port}${request.url}` }).end();
    });
    await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve));
    try {
      const { redemption } = await mint();
      const sdk = client({ gatewayUrl: `http://127.0.0.1:${(redirecting.address() as AddressInfo).port}`, issuer: world.url });
      const failure = (await sdk.capture(redemption.id, { amountUc: '1500000' }).catch((error: unknown) => error)) as GatewayError;
      expect(failure).toBeInstanceOf(GatewayError);
      expect(failure).toMatchObject({ status: 307, code: 'unexpected_redirect', attempts: 1 });
      expect(failure.message).toMatch(/307 to http:\/\/127\.0\.0\.1:\d+\/v1\/redemptions\//);
      expect(elsewhere).toEqual([]);
      expect(await client().getRedemption(redemption.id)).toMatchObject({ state: 'held' });
    } finally {
      await new Promise<void>((resolve) => redirecting.close(() => resolve()));
      await new Promise<void>((resolve) => other.close(() => resolve()));
    }
  });
});

describe('verifyWebhook', () => {
  it("accepts the gateway's own deliveries and refuses a changed body, a wrong secret and a stale timestamp", async () => {
    const before = target.receiver.received.length;
    const { redemption } = await mint();
    await client().capture(redemption.id);
    // The scheduled worker may be delivering it already; run a pass and wait for the delivery to arrive.
    const arrived = async () => {
      await world.gw.services.webhookWorker.runOnce();
      return target.receiver.received.slice(before).find((r) => r.body.includes('redemption.captured') && r.body.includes(redemption.id));
    };
    const delivery = await waitFor(arrived, { what: `the redemption.captured delivery of ${redemption.id}`, intervalMs: 50 });
    const event = verifyWebhook(webhookSecret, delivery.headers, delivery.body);
    expect(event).toMatchObject({ type: 'redemption.captured', merchantId, data: { redemption: { id: redemption.id, state: 'captured' } } });
    expect(event.id).toBe(delivery.headers['webhook-id']);
    expect(() => verifyWebhook(webhookSecret, delivery.headers, delivery.body.replace('captured', 'released'))).toThrow(VerificationError);
    expect(() => verifyWebhook(`whsec_${Buffer.alloc(32, 1).toString('base64')}`, delivery.headers, delivery.body)).toThrow(/no webhook-signature matches/);
    const lateS = Number(delivery.headers['webhook-timestamp']) + 301;
    expect(() => verifyWebhook(webhookSecret, delivery.headers, delivery.body, { nowS: lateS })).toThrow(/tolerance/);
    expect(() => verifyWebhook(webhookSecret, { ...delivery.headers, 'webhook-id': undefined }, delivery.body)).toThrow(/webhook-id/);
    // What a JSON body parser made of the body (express.json()'s req.body), from JavaScript: the SDK's own refusal, saying
    // what to pass, not crypto's TypeError (found from outside).
    const parsed = (): unknown => verifyWebhook(webhookSecret, delivery.headers, JSON.parse(delivery.body) as string);
    expect(parsed).toThrow(VerificationError);
    expect(parsed).toThrow(/must be the raw bytes or text as received .*not object.*express\.raw/);
  });
});

describe('the README example server', () => {
  it('accepts a voucher minted by a real agent and captures it', async () => {
    const otherOffer = await createOffer('700000');
    const shop = shopServer(client(), otherOffer);
    await new Promise<void>((resolve) => shop.listen(0, '127.0.0.1', resolve));
    try {
      const shopUrl = `http://127.0.0.1:${(shop.address() as AddressInfo).port}/report`;
      const { voucher, redemption } = await mint(otherOffer);
      const paid = await fetch(shopUrl, { headers: { authorization: `Bearer ${voucher}` } });
      expect(paid.status).toBe(200);
      const answer = await paid.json();
      expect(answer.paidUc).toBe('700000');
      expect(await client().verifyReceipt(answer.receipt)).toMatchObject({ kind: 'capture', redemptionId: redemption.id, capturedUc: '700000' });
      expect((await client().getRedemption(redemption.id)).state).toBe('captured');
      const wrongOffer = await fetch(shopUrl, { headers: { authorization: `Bearer ${(await mint()).voucher}` } });
      expect(wrongOffer.status).toBe(402);
      const replayed = await fetch(shopUrl, { headers: { authorization: `Bearer ${voucher}` } });
      expect(replayed.status).toBe(402);
    } finally {
      shop.closeAllConnections();
      await new Promise<void>((resolve) => shop.close(() => resolve()));
    }
  });
});
