// What the gateway signs (vouchers, receipts, access tokens) is signed with node:crypto, and must stay the
// compact JWS jose would produce: the same header and claims segments, byte for byte, and a signature
// jose verifies with our published keys (docs/decisions.md "Signing on the hot path").
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocalJWKSet, decodeProtectedHeader, importJWK, jwtVerify, SignJWT, type JWK } from 'jose';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw?.close());

const segment = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

const claims = {
  iss: 'https://gateway.example',
  aud: 'mer_01JD0S4W6Q6Z7T0YJ2V7C8M9KX',
  sub: 'agt_01JD0S4W6Q6Z7T0YJ2V7C8M9KX',
  jti: 'hold_01JD0S4W6Q6Z7T0YJ2V7C8M9KX',
  iat: 1_900_000_000,
  exp: 1_900_000_600,
  offer_id: 'off_01JD0S4W6Q6Z7T0YJ2V7C8M9KX',
  category: 'books',
  amount_uc: '5000000',
};

async function signingKid(): Promise<string> {
  return decodeProtectedHeader(await gw.gateway.signing.sign({}, 'voucher+jwt')).kid!;
}

describe('signing with node:crypto', () => {
  it('writes the header {alg, typ, kid} and the claims exactly as given (golden)', async () => {
    const kid = await signingKid();
    const jws = await gw.gateway.signing.sign(claims, 'voucher+jwt');
    const [header, payload, signature] = jws.split('.');
    expect(Buffer.from(header!, 'base64url').toString()).toBe(`{"alg":"ES256","typ":"voucher+jwt","kid":"${kid}"}`);
    expect(Buffer.from(payload!, 'base64url').toString()).toBe(
      '{"iss":"https://gateway.example","aud":"mer_01JD0S4W6Q6Z7T0YJ2V7C8M9KX","sub":"agt_01JD0S4W6Q6Z7T0YJ2V7C8M9KX",' +
        '"jti":"hold_01JD0S4W6Q6Z7T0YJ2V7C8M9KX","iat":1900000000,"exp":1900000600,"offer_id":"off_01JD0S4W6Q6Z7T0YJ2V7C8M9KX",' +
        '"category":"books","amount_uc":"5000000"}',
    );
    expect(Buffer.from(signature!, 'base64url')).toHaveLength(64); // R‖S of P-256 (RFC 7518 §3.4)
    expect(signature).toMatch(/^[A-Za-z0-9_-]+$/);
  });

  it('produces the header and claims segments jose SignJWT produces with the same key', async () => {
    const { rows } = await gw.gateway.db.query<{ kid: string; private_jwk: string }>('SELECT kid, private_jwk FROM signing_keys');
    expect(rows).toHaveLength(1);
    const kid = rows[0]!.kid;
    expect(await signingKid()).toBe(kid);
    const privateKey = await importJWK(JSON.parse(rows[0]!.private_jwk) as JWK, 'ES256');
    for (const typ of ['voucher+jwt', 'receipt+jwt', 'at+jwt']) {
      const ours = await gw.gateway.signing.sign(claims, typ);
      const jose = await new SignJWT(claims).setProtectedHeader({ alg: 'ES256', typ, kid }).sign(privateKey);
      expect(ours.split('.').slice(0, 2)).toEqual(jose.split('.').slice(0, 2));
      expect(ours.split('.')[0]).toBe(segment({ alg: 'ES256', typ, kid }));
    }
  });

  it('signs what jose.jwtVerify accepts with the published JWKS, and refuses once a byte changes', async () => {
    const jwks = createLocalJWKSet(gw.gateway.signing.jwks());
    const jws = await gw.gateway.signing.sign(claims, 'voucher+jwt');
    const options = { issuer: claims.iss, audience: claims.aud, typ: 'voucher+jwt', algorithms: ['ES256'], currentDate: new Date(1_900_000_100_000) };
    const { payload, protectedHeader } = await jwtVerify(jws, jwks, options);
    expect(payload).toEqual(claims);
    expect(protectedHeader).toEqual({ alg: 'ES256', typ: 'voucher+jwt', kid: await signingKid() });

    const [header, body, signature] = jws.split('.');
    const tamperedClaims = `${header}.${segment({ ...claims, amount_uc: '5000001' })}.${signature}`;
    await expect(jwtVerify(tamperedClaims, jwks, options)).rejects.toThrow(/signature/);
    const flipped = Buffer.from(signature!, 'base64url');
    flipped[10] = flipped[10]! ^ 1;
    await expect(jwtVerify(`${header}.${body}.${flipped.toString('base64url')}`, jwks, options)).rejects.toThrow(/signature/);
  });

  it('verifies its own tokens with the key imported once, and the gateway accepts an access token it signed', async () => {
    const nowS = gw.clock.nowS();
    const accessToken = await gw.gateway.signing.sign(
      { iss: gw.config.baseUrl, aud: gw.config.baseUrl, sub: 'own_x', scope: 'svc:owner', jti: 'at_x', iat: nowS, exp: nowS + 600 },
      'at+jwt',
    );
    const { payload, kid } = await gw.gateway.signing.verify(accessToken, { typ: 'at+jwt', issuer: gw.config.baseUrl, audience: gw.config.baseUrl });
    expect(payload.sub).toBe('own_x');
    expect(kid).toBe(await signingKid());
    expect(gw.gateway.signing.trusts(kid)).toBe(true);
    expect(gw.gateway.signing.trusts('no-such-kid')).toBe(false);
    expect(gw.gateway.signing.trusts(undefined)).toBe(false);
  });
});
