// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
//
// Where the SDK's clock tolerance applies, against a small local JWKS: a voucher is refused from its `exp`
// on, by the verifier's clock, whatever `clockToleranceS` says (the gateway expires the hold then: its credit
// goes back to the agent and a capture answers 409 hold_resolved, so a merchant that delivers first would give
// the goods away); the tolerance only absorbs a gateway clock ahead of the merchant's (`nbf`, `iat` in the
// future). A receipt, a record of a past capture, still verifies however old it is.
import { errors, exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MerchantClient, RevocationSet, type VerificationError, type MerchantClientOptions } from '@agent-credit-gateway/merchant';
import { refusal, serveKeySet, type LocalGateway } from './support.ts';

const MERCHANT_ID = 'mer_expiry';
const OFFER_ID = 'off_expiry';
const KID = 'expiry-key';

let gateway: LocalGateway | undefined;
let gatewayUrl: string;
let privateKey: CryptoKey;

const client = (options: Partial<MerchantClientOptions> = {}) => new MerchantClient({ gatewayUrl, merchantId: MERCHANT_ID, ...options });
const nowS = () => Math.floor(Date.now() / 1000);

/** A voucher as the gateway signs one (ES256, typ voucher+jwt), with the given times. */
function voucher(times: { iat: number; exp: number; nbf?: number }, holdId = 'hold_expiry'): Promise<string> {
  return new SignJWT({ offer_id: OFFER_ID, category: 'books', amount_uc: '2500000', ...times })
    .setProtectedHeader({ alg: 'ES256', typ: 'voucher+jwt', kid: KID })
    .setIssuer(gatewayUrl)
    .setAudience(MERCHANT_ID)
    .setSubject('agt_expiry')
    .setJti(holdId)
    .sign(privateKey);
}

/** A capture receipt as the gateway signs one (typ receipt+jwt: no `aud`, no `exp`). */
function receipt(claims: JWTPayload): Promise<string> {
  return new SignJWT({
    kind: 'capture',
    redemption_id: 'hold_expiry',
    offer_id: OFFER_ID,
    agent_id: 'agt_expiry',
    merchant_id: MERCHANT_ID,
    amount_uc: '2500000',
    captured_uc: '2500000',
    released_uc: '0',
    refunded_uc: '0',
    ...claims,
  })
    .setProtectedHeader({ alg: 'ES256', typ: 'receipt+jwt', kid: KID })
    .setIssuer(gatewayUrl)
    .setJti('rct_expiry')
    .sign(privateKey);
}

/** The refusal of an expired token: invalid_token, jose's JWTExpired (ERR_JWT_EXPIRED, claim exp) as its cause. */
function expectExpired(error: VerificationError): void {
  expect(error.code).toBe('invalid_token');
  // When, by which clock (found from outside: jose's words said neither).
  expect(error.message).toMatch(/^the voucher\+jwt does not verify: it expired at \d{4}-\d\d-\d\dT[\d:.]+Z \(now \d{4}-\d\d-\d\dT[\d:.]+Z by this machine's clock\)$/);
  expect(error.cause).toBeInstanceOf(errors.JWTExpired);
  expect((error.cause as errors.JWTExpired).code).toBe('ERR_JWT_EXPIRED');
  expect((error.cause as errors.JWTExpired).claim).toBe('exp');
}

beforeAll(async () => {
  const keys = await generateKeyPair('ES256');
  privateKey = keys.privateKey;
  const jwk = { ...(await exportJWK(keys.publicKey)), kid: KID, alg: 'ES256', use: 'sig' };
  gateway = await serveKeySet(() => [jwk]);
  gatewayUrl = gateway.url;
});
afterAll(() => gateway?.close());

describe('verifyVoucher and the clock tolerance', () => {
  it('refuses a voucher whose exp passed 1 to 29 s ago (within the default 30 s tolerance) as expired', async () => {
    const sdk = client();
    const now = nowS();
    for (const pastS of [1, 2, 12, 15, 29]) {
      const token = await voucher({ iat: now - 60, exp: now - pastS }, `hold_past_${pastS}`);
      expectExpired(await refusal(sdk.verifyVoucher(token)));
    }
    // At its exp second exactly, it has expired (the gateway's hold is past its deadline).
    expectExpired(await refusal(sdk.verifyVoucher(await voucher({ iat: now - 60, exp: now }))));
  });

  it('refuses an expired voucher whatever clockToleranceS says, 0 or 120 s', async () => {
    const now = nowS();
    const token = await voucher({ iat: now - 160, exp: now - 100 });
    expectExpired(await refusal(client({ clockToleranceS: 120 }).verifyVoucher(token)));
    expectExpired(await refusal(client({ clockToleranceS: 0 }).verifyVoucher(token)));
    expectExpired(await refusal(client({ clockToleranceS: 120 }).verifyVoucher(await voucher({ iat: now - 60, exp: now - 1 }))));
  });

  it('accepts a voucher before its exp, and its claims carry that exp', async () => {
    const now = nowS();
    const claims = await client().verifyVoucher(await voucher({ iat: now - 50, exp: now + 10 }), { offerId: OFFER_ID });
    expect(claims).toMatchObject({ redemptionId: 'hold_expiry', issuedAt: now - 50, expiresAt: now + 10 });
    expect((await client({ clockToleranceS: 0 }).verifyVoucher(await voucher({ iat: now, exp: now + 60 }))).expiresAt).toBe(now + 60);
  });

  it('still absorbs a gateway clock ahead of the merchant: iat and nbf a few seconds in the future pass, nbf past the tolerance does not', async () => {
    const now = nowS();
    expect((await client().verifyVoucher(await voucher({ iat: now + 5, exp: now + 65 }))).issuedAt).toBe(now + 5);
    expect((await client().verifyVoucher(await voucher({ iat: now + 20, nbf: now + 20, exp: now + 80 }))).issuedAt).toBe(now + 20);
    expect((await client({ clockToleranceS: 120 }).verifyVoucher(await voucher({ iat: now + 100, nbf: now + 100, exp: now + 160 }))).expiresAt).toBe(now + 160);
    const early = await refusal(client().verifyVoucher(await voucher({ iat: now + 100, nbf: now + 100, exp: now + 160 })));
    expect(early.code).toBe('invalid_token');
    expect(early.message).toMatch(/"nbf" claim timestamp check failed/);
  });

  it('keeps accepting a RevocationSet whose tolerance is below the client\'s: an entry kept until exp outlives the voucher', async () => {
    const now = nowS();
    const revocations = new RevocationSet({ clockToleranceS: 0 });
    const sdk = client({ clockToleranceS: 120, revocations });
    const token = await voucher({ iat: now - 10, exp: now + 60 }, 'hold_revoked');
    revocations.add('hold_revoked');
    expect((await refusal(sdk.verifyVoucher(token))).code).toBe('voucher_revoked');
  });
});

describe('verifyReceipt and the clock tolerance', () => {
  it('verifies a receipt however long ago it was issued (it records a past capture and has no exp)', async () => {
    const claims = await client().verifyReceipt(await receipt({ iat: nowS() - 400 * 86_400 }));
    expect(claims).toMatchObject({ kind: 'capture', redemptionId: 'hold_expiry', merchantId: MERCHANT_ID, capturedUc: '2500000' });
    expect((await client({ clockToleranceS: 0 }).verifyReceipt(await receipt({ iat: nowS() - 60 }))).receiptId).toBe('rct_expiry');
  });
});
