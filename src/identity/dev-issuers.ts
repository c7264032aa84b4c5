// Built-in local identity issuers for dev mode: one for human owners, one for agents. Their keys live
// in a file under ACG_DATA_DIR (not the database) so that `acg dev token …` can mint tokens while the
// gateway holds the embedded database open. Never used in live mode.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, calculateJwkThumbprint, type JWK } from 'jose';
import { makePrivateDirectory } from '../platform/data-dir.ts';

export type DevIssuerKind = 'human' | 'agent';
export const DEV_TOKEN_LIFETIME_S = 3600;

interface DevIssuerFile {
  human: JWK;
  agent: JWK;
}

export function devIssuerUrl(baseUrl: string, kind: DevIssuerKind): string {
  return `${baseUrl}/dev/issuers/${kind}`;
}

async function newPrivateJwk(): Promise<JWK> {
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const jwk = await exportJWK(privateKey);
  const { d: _d, ...publicPart } = jwk;
  return { ...jwk, kid: await calculateJwkThumbprint(publicPart), alg: 'ES256' };
}

/** The file of the issuers' keys in ACG_DATA_DIR (created by the dev gateway at start). */
export function devIssuerKeysFile(dataDir: string): string {
  return path.join(dataDir, 'dev-issuers.json');
}

/** Reads the issuers' keys, creating them on first use (exclusive create: two starters agree on one file). */
export async function loadDevIssuerKeys(dataDir: string): Promise<DevIssuerFile> {
  const file = devIssuerKeysFile(dataDir);
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as DevIssuerFile;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  makePrivateDirectory(dataDir);
  const created: DevIssuerFile = { human: await newPrivateJwk(), agent: await newPrivateJwk() };
  try {
    writeFileSync(file, JSON.stringify(created), { flag: 'wx', mode: 0o600 });
    return created;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return JSON.parse(readFileSync(file, 'utf8')) as DevIssuerFile;
  }
}

export function publicJwks(keys: DevIssuerFile, kind: DevIssuerKind): { keys: JWK[] } {
  const { d: _d, ...publicPart } = keys[kind];
  return { keys: [{ ...publicPart, use: 'sig' }] };
}

export interface DevTokenRequest {
  baseUrl: string;
  audience: string;
  kind: DevIssuerKind;
  subject: string;
  email?: string;
  ownerEmail?: string;
  ownerEmailClaim: string;
  lifetimeS?: number;
  nowS: number;
}

export async function mintDevToken(keys: DevIssuerFile, request: DevTokenRequest): Promise<string> {
  const jwk = keys[request.kind];
  const claims: Record<string, unknown> =
    request.kind === 'human'
      ? { email: request.email, email_verified: true }
      : { [request.ownerEmailClaim]: request.ownerEmail, actor_type: 'agent' };
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', typ: 'JWT', kid: jwk.kid })
    .setIssuer(devIssuerUrl(request.baseUrl, request.kind))
    .setSubject(request.subject)
    .setAudience(request.audience)
    .setIssuedAt(request.nowS)
    .setExpirationTime(request.nowS + (request.lifetimeS ?? DEV_TOKEN_LIFETIME_S))
    .sign(await importJWK(jwk, 'ES256'));
}
