// The operator credential: what operator routes (credit grants, dev DNS records) require, so an operator
// can act on a running gateway, which on the embedded database is the only process that may open it.
// The gateway keeps only its SHA-256. Dev mode generates one credential into ACG_DATA_DIR/operator-token
// (mode 0600), which CLI commands on the same machine read; live mode accepts only a configured hash
// (ACG_OPERATOR_TOKEN_SHA256) and, without one, refuses every operator call with 401.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../platform/config.ts';
import { checkHashedBearer, sha256Hex } from '../platform/hashed-credential.ts';
import { newSecret } from '../platform/ids.ts';
import { makePrivateDirectory } from '../platform/data-dir.ts';

const TOKEN_PREFIX = 'acg_op_';
const TOKEN_FILE = 'operator-token';

export function operatorTokenFile(dataDir: string): string {
  return path.join(dataDir, TOKEN_FILE);
}

export { sha256Hex };

function readTokenFile(dataDir: string): string | undefined {
  try {
    return readFileSync(operatorTokenFile(dataDir), 'utf8').trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** Dev mode: the credential in ACG_DATA_DIR, created on first use (exclusive create: two starters agree on one). */
function ensureDevToken(dataDir: string): string {
  const existing = readTokenFile(dataDir);
  if (existing) return existing;
  makePrivateDirectory(dataDir);
  const token = newSecret(TOKEN_PREFIX);
  try {
    writeFileSync(operatorTokenFile(dataDir), `${token}\n`, { flag: 'wx', mode: 0o600 });
    return token;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return readTokenFile(dataDir)!;
  }
}

/** The hash the gateway accepts: configured, or in dev mode that of the generated credential; undefined: none. */
export function acceptedOperatorHash(config: Pick<Config, 'mode' | 'dataDir' | 'operatorTokenSha256'>): string | undefined {
  if (config.operatorTokenSha256) return config.operatorTokenSha256;
  return config.mode === 'dev' ? sha256Hex(ensureDevToken(config.dataDir)) : undefined;
}

/**
 * The credential a dev gateway wrote into `dataDir`, if one did. A dev credential of this machine: the CLI presents it
 * only through `operatorCredentialFor` (src/operator/client.ts), which sends it to no gateway but a dev one.
 */
export function devOperatorToken(dataDir: string): string | undefined {
  return readTokenFile(dataDir);
}

/**
 * Throws 401 unless `authorization` carries the operator credential (`checkHashedBearer`: constant time, and
 * without a configured credential every call refused alike).
 */
export function checkOperator(authorization: string | undefined, acceptedHash: string | undefined): void {
  checkHashedBearer(authorization, acceptedHash, { realm: 'operator', name: 'operator credential' });
}
