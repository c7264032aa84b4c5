// A real local identity provider for tests: an HTTP server publishing OIDC discovery and a JWKS, and
// a minter for good and deliberately bad tokens.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHmac } from 'node:crypto';
import { exportJWK, generateKeyPair, SignJWT, calculateJwkThumbprint, type JWK, type JWTPayload } from 'jose';

export interface MintOptions {
  expiresInS?: number;
  issuer?: string;
  audience?: string;
  typ?: string;
  /** Sign with a key the JWKS does not publish (bad signature). */
  foreignKey?: boolean;
  notBeforeS?: number;
  /** The token's `iat` (default: now). */
  issuedAtS?: number;
}

export interface TestIssuer {
  issuer: string;
  audience: string;
  jwksRequests: number;
  mint(claims: JWTPayload, options?: MintOptions): Promise<string>;
  /** `alg: none`, unsigned. */
  mintUnsigned(claims: JWTPayload): string;
  /** HS256 with the public key's JSON as the HMAC secret (the classic key-confusion attack). */
  mintHmacWithPublicKey(claims: JWTPayload): string;
  /** Replaces the signing key; the JWKS publishes the new one (tests refetch on unknown kid). */
  rotate(): Promise<void>;
  close(): Promise<void>;
}

async function keyPair() {
  const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(publicJwk);
  return { privateKey, publicJwk: { ...publicJwk, kid, alg: 'ES256', use: 'sig' } as JWK, kid };
}

function b64(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

/**
 * `path`: the issuer's path, as the provider writes it (Auth0's issuers end in `/`: `https://tenant.auth0.com/`); its
 * discovery document is at the path without its terminating slash, plus `/.well-known/openid-configuration`.
 */
export async function startIssuer(audience = 'agent-credit-gateway', options: { path?: string } = {}): Promise<TestIssuer> {
  const path = options.path ?? '';
  const root = path.replace(/\/$/, '');
  let current = await keyPair();
  const foreign = await keyPair();
  let jwksRequests = 0;
  let issuer = '';
  const server: Server = createServer((request, response) => {
    response.setHeader('content-type', 'application/json');
    if (request.url === `${root}/.well-known/openid-configuration`) {
      response.end(JSON.stringify({ issuer, jwks_uri: `${issuer.replace(/\/$/, '')}/jwks.json`, id_token_signing_alg_values_supported: ['ES256'] }));
    } else if (request.url === `${root}/jwks.json`) {
      jwksRequests += 1;
      response.end(JSON.stringify({ keys: [current.publicJwk] }));
    } else {
      response.statusCode = 404;
      response.end('{}');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`;
  const nowS = () => Math.floor(Date.now() / 1000);
  return {
    issuer,
    audience,
    get jwksRequests() {
      return jwksRequests;
    },
    async mint(claims, options = {}) {
      const key = options.foreignKey ? foreign : current;
      const jwt = new SignJWT(claims)
        .setProtectedHeader({ alg: 'ES256', kid: key.kid, ...(options.typ ? { typ: options.typ } : { typ: 'JWT' }) })
        .setIssuer(options.issuer ?? issuer)
        .setAudience(options.audience ?? audience)
        .setIssuedAt(options.issuedAtS)
        .setExpirationTime(nowS() + (options.expiresInS ?? 600));
      if (options.notBeforeS !== undefined) jwt.setNotBefore(options.notBeforeS);
      return jwt.sign(key.privateKey);
    },
    mintUnsigned(claims) {
      const payload = { iss: issuer, aud: audience, iat: nowS(), exp: nowS() + 600, ...claims };
      return `${b64({ alg: 'none', typ: 'JWT' })}.${b64(payload)}.`;
    },
    mintHmacWithPublicKey(claims) {
      const payload = { iss: issuer, aud: audience, iat: nowS(), exp: nowS() + 600, ...claims };
      const signingInput = `${b64({ alg: 'HS256', typ: 'JWT', kid: current.kid })}.${b64(payload)}`;
      const signature = createHmac('sha256', JSON.stringify(current.publicJwk)).update(signingInput).digest('base64url');
      return `${signingInput}.${signature}`;
    },
    async rotate() {
      current = await keyPair();
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
