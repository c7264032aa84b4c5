// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
//
// What the SDK says when no key of the gateway's key set verifies a token, against a small local JWKS whose keys
// the test changes: the kid it looked for, the key set's URL, when that key set was fetched, the token's iat, and
// the causes that fit them. A key set fetched more than clockToleranceS after a token's iat is not fetched again
// for it, so a gateway clock behind by more than that refuses its new key's tokens until a later token's iat
// catches up; the refusal called such a genuine token "a forgery, or a key the gateway stopped publishing" and never
// named the clock (found from outside: a gateway 40 s behind, a rotation with no lead, 9 s of refusals).
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MerchantClient } from '@agent-credit-gateway/merchant';
import { refusal, serveKeySet, type LocalGateway } from './support.ts';

const MERCHANT_ID = 'mer_keys';
const ISO = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';

let gateway: LocalGateway | undefined;
let gatewayUrl: string;
/** The keys the local gateway publishes now. */
let published: JWK[] = [];
const signers = new Map<string, CryptoKey>();

const nowS = () => Math.floor(Date.now() / 1000);

async function addKey(kid: string): Promise<void> {
  const keys = await generateKeyPair('ES256');
  signers.set(kid, keys.privateKey);
  published.push({ ...(await exportJWK(keys.publicKey)), kid, alg: 'ES256', use: 'sig' });
}

/** A voucher as the gateway signs one, by the key `kid`, issued at `iatS` by the gateway's clock. */
function voucher(kid: string, iatS: number): Promise<string> {
  return new SignJWT({ offer_id: 'off_keys', category: 'books', amount_uc: '2500000', iat: iatS, exp: nowS() + 600 })
    .setProtectedHeader({ alg: 'ES256', typ: 'voucher+jwt', kid })
    .setIssuer(gatewayUrl)
    .setAudience(MERCHANT_ID)
    .setSubject('agt_keys')
    .setJti(`hold_${kid}_${iatS}`)
    .sign(signers.get(kid)!);
}

/** The token with its header's kid replaced: a forgery. */
function forgedKid(token: string, kid: string): string {
  return token.replace(/^[^.]+/, Buffer.from(JSON.stringify({ alg: 'ES256', typ: 'voucher+jwt', kid })).toString('base64url'));
}

beforeAll(async () => {
  gateway = await serveKeySet(() => published);
  gatewayUrl = gateway.url;
});
afterAll(() => gateway?.close());

describe('a token no key of the key set verifies', () => {
  it("names the kid, the key set's URL, when it was fetched and the token's iat, and a gateway clock behind by more than clockToleranceS as a cause", async () => {
    published = [];
    await addKey('clock-old');
    const sdk = new MerchantClient({ gatewayUrl, merchantId: MERCHANT_ID, jwksRefetchCooldownMs: 50 });
    await sdk.verifyVoucher(await voucher('clock-old', nowS()));
    // A forged kid makes the client fetch the key set for an unknown kid (the first such token always does).
    expect((await refusal(sdk.verifyVoucher(forgedKid(await voucher('clock-old', nowS()), 'clock-forged')))).code).toBe('invalid_token');
    // A rotation with no lead on a gateway whose clock is 60 s behind this one's: its new key's vouchers say an iat
    // 60 s ago, more than clockToleranceS before that fetch, so the key set is not fetched again for them.
    await addKey('clock-new');
    const iatS = nowS() - 60;
    const refused = await refusal(sdk.verifyVoucher(await voucher('clock-new', iatS)));
    expect(refused.code).toBe('invalid_token');
    const iso = new Date(iatS * 1000).toISOString();
    expect(refused.message).toMatch(
      new RegExp(
        `^the voucher\\+jwt does not verify: no key of the gateway's JWKS \\(${gatewayUrl}/\\.well-known/jwks\\.json, fetched at ${ISO}\\) has its kid "clock-new"; ` +
          `that key set was fetched before the token arrived, 6\\d s after its iat \\(${iso.replace(/\./g, '\\.')}\\), more than clockToleranceS \\(30 s\\), so it was not fetched again: ` +
          `a forgery, a key the gateway stopped publishing \\(.*getEvidence\\(redemptionId\\)\\), or a gateway clock more than clockToleranceS behind this one's, .*check the gateway's clock, or raise clockToleranceS\\)$`,
      ),
    );
    // It was genuine: with clockToleranceS above the skew, it is looked for in a key set fetched again, and verifies.
    const tolerant = new MerchantClient({ gatewayUrl, merchantId: MERCHANT_ID, clockToleranceS: 120, jwksRefetchCooldownMs: 50 });
    await tolerant.verifyVoucher(await voucher('clock-old', nowS()));
    await refusal(tolerant.verifyVoucher(forgedKid(await voucher('clock-old', nowS()), 'clock-forged')));
    expect((await tolerant.verifyVoucher(await voucher('clock-new', iatS))).issuedAt).toBe(iatS);
  });

  it('says a key set fetched after the token arrived rules the clock out: a forgery, a key no longer published, or an instance that had not loaded a new key yet', async () => {
    published = [];
    await addKey('after-real');
    const sdk = new MerchantClient({ gatewayUrl, merchantId: MERCHANT_ID, jwksRefetchCooldownMs: 50 });
    await sdk.verifyVoucher(await voucher('after-real', nowS()));
    const iatS = nowS();
    const refused = await refusal(sdk.verifyVoucher(forgedKid(await voucher('after-real', iatS), 'after-forged')));
    expect(refused.code).toBe('invalid_token');
    expect(refused.message).toContain(`no key of the gateway's JWKS (${gatewayUrl}/.well-known/jwks.json, fetched at `);
    expect(refused.message).toContain(`has its kid "after-forged", and that key set was fetched after the token arrived (its iat is ${new Date(iatS * 1000).toISOString()}): a forgery, a key the gateway stopped publishing`);
    expect(refused.message).toContain('getEvidence(redemptionId)');
    expect(refused.message).toContain('a gateway instance that had not loaded the new key yet (for up to 5 s)');
    expect(refused.message).not.toContain('clock');
  });
});
