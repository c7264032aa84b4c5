// Verifying a signed receipt in the browser: its ES256 signature against the gateway's published keys
// (/.well-known/jwks.json, read once per page load), its `typ` (receipt+jwt) and its issuer (this gateway).
// A receipt is a statement for anyone (no `aud`, no `exp`), so nothing here needs a credential.
import { createLocalJWKSet, decodeJwt, jwtVerify, type JSONWebKeySet, type JWTPayload } from 'jose';
import type { Settings } from './settings.ts';

export type Verification = { valid: true; kid: string | undefined; claims: JWTPayload } | { valid: false; reason: string; claims?: JWTPayload };

let keys: Promise<JSONWebKeySet> | undefined;

async function publishedKeys(settings: Settings): Promise<JSONWebKeySet> {
  keys ??= fetch(settings.jwksUri, { cache: 'no-store' }).then(async (response) => {
    if (!response.ok) throw new Error(`the key set answered ${response.status}`);
    return (await response.json()) as JSONWebKeySet;
  });
  return keys.catch((error: unknown) => {
    keys = undefined;
    throw error;
  });
}

export async function verifyReceipt(receipt: string, settings: Settings): Promise<Verification> {
  let claims: JWTPayload | undefined;
  try {
    claims = decodeJwt(receipt);
  } catch {
    return { valid: false, reason: 'This is not a signed receipt (not a compact JWS).' };
  }
  try {
    const { payload, protectedHeader } = await jwtVerify(receipt, createLocalJWKSet(await publishedKeys(settings)), {
      algorithms: ['ES256'],
      typ: 'receipt+jwt',
      issuer: settings.issuer,
    });
    return { valid: true, kid: protectedHeader.kid, claims: payload };
  } catch (error) {
    return { valid: false, reason: `The signature does not verify: ${error instanceof Error ? error.message : String(error)}`, claims };
  }
}
