// Encrypts small secrets at rest (connector passwords) with AES-256-GCM, so a copy of the database alone
// does not reveal them. Text format: `v1.<nonce b64url>.<ciphertext||tag b64url>`. The version prefix lets a
// later format (e.g. one naming a key id for rotation) coexist with stored v1 values.
//
// Associated data (e.g. the agent id) is authenticated but not stored: a ciphertext copied onto another
// row fails to open there. Absent associated data is the same as empty associated data.
import { createCipheriv, createDecipheriv, createSecretKey, type KeyObject } from 'node:crypto';
import { databaseNowMs } from './clock.ts';
import { ConfigError, type Config } from './config.ts';
import type { Queryable } from './db/database.ts';
import { newId, newSecretBytes } from './ids.ts';

const VERSION = 'v1';
const KEY_BYTES = 32;
/** 96-bit nonces are GCM's native size; random ones are safe for far more than 2^32 encryptions per key. */
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** Connector secrets are short; the bound keeps a hostile row from making us allocate without limit. */
export const SECRET_BOX_PLAINTEXT_BYTES_MAX = 64 * 1024;

/** A key ready for use. A KeyObject never prints its material in logs or `JSON.stringify`. */
export interface SecretBoxKey {
  readonly keyObject: KeyObject;
}

export class SecretBoxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SecretBoxError';
  }
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * Parses the configured key: 32 random bytes in base64 (standard with padding, or base64url without).
 * Returns the key, or a one-line reason suitable for a configuration problem list.
 */
export function parseSecretBoxKey(text: string): { key: SecretBoxKey } | { error: string } {
  const trimmed = text.trim();
  let bytes: Buffer;
  if (BASE64.test(trimmed)) bytes = Buffer.from(trimmed, 'base64');
  else if (BASE64URL.test(trimmed)) bytes = Buffer.from(trimmed, 'base64url');
  else return { error: 'must be base64 (e.g. the output of `openssl rand -base64 32`)' };
  if (bytes.length !== KEY_BYTES) return { error: `must decode to ${KEY_BYTES} bytes, got ${bytes.length}` };
  return { key: { keyObject: createSecretKey(bytes) } };
}

/** The key a setting's text names (ACG_SECRET_BOX_KEY, or dev mode's stored one); a malformed one is a configuration error. */
export function secretBoxKeyOf(text: string): SecretBoxKey {
  const parsed = parseSecretBoxKey(text);
  if ('error' in parsed) throw new ConfigError([`ACG_SECRET_BOX_KEY ${parsed.error}`]);
  return parsed.key;
}

/** The configured ACG_SECRET_BOX_KEY (undefined when unset): what seals rotated signing keys. */
export function configuredSecretBoxKey(config: Pick<Config, 'secretBoxKey'>): SecretBoxKey | undefined {
  return config.secretBoxKey ? secretBoxKeyOf(config.secretBoxKey) : undefined;
}

/** A fresh random key, for dev mode and tests. */
export function generateSecretBoxKey(): { key: SecretBoxKey; text: string } {
  const bytes = newSecretBytes(KEY_BYTES);
  return { key: { keyObject: createSecretKey(bytes) }, text: bytes.toString('base64') };
}

function associatedData(context: string | undefined): Buffer {
  // The version is authenticated too, so a v1 body can never be reinterpreted under another format.
  return Buffer.from(`${VERSION}\0${context ?? ''}`, 'utf8');
}

export function sealSecret(key: SecretBoxKey, plaintext: string, context?: string): string {
  const data = Buffer.from(plaintext, 'utf8');
  if (data.length > SECRET_BOX_PLAINTEXT_BYTES_MAX) throw new SecretBoxError('secret too large to seal');
  const nonce = newSecretBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key.keyObject, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(associatedData(context));
  const body = Buffer.concat([cipher.update(data), cipher.final(), cipher.getAuthTag()]);
  return `${VERSION}.${nonce.toString('base64url')}.${body.toString('base64url')}`;
}

/** Opens a sealed secret; throws SecretBoxError on any malformation, tampering, wrong key or wrong context. */
export function openSecret(key: SecretBoxKey, sealed: string, context?: string): string {
  const parts = sealed.split('.');
  if (parts.length !== 3 || parts[0] !== VERSION) throw new SecretBoxError('not a v1 sealed secret');
  const [, nonceText = '', bodyText = ''] = parts;
  if (!BASE64URL.test(nonceText) || !BASE64URL.test(bodyText)) throw new SecretBoxError('sealed secret is not base64url');
  const nonce = Buffer.from(nonceText, 'base64url');
  const body = Buffer.from(bodyText, 'base64url');
  if (nonce.length !== NONCE_BYTES) throw new SecretBoxError('sealed secret has a bad nonce');
  if (body.length < TAG_BYTES || body.length > SECRET_BOX_PLAINTEXT_BYTES_MAX + TAG_BYTES) {
    throw new SecretBoxError('sealed secret has a bad length');
  }
  const decipher = createDecipheriv('aes-256-gcm', key.keyObject, nonce, { authTagLength: TAG_BYTES });
  decipher.setAAD(associatedData(context));
  decipher.setAuthTag(body.subarray(body.length - TAG_BYTES));
  try {
    const plaintext = Buffer.concat([decipher.update(body.subarray(0, body.length - TAG_BYTES)), decipher.final()]);
    return plaintext.toString('utf8');
  } catch {
    // GCM does not say which of key, nonce, ciphertext, tag or associated data was wrong, by design.
    throw new SecretBoxError('sealed secret failed authentication (tampered, wrong key or wrong context)');
  }
}

// Which box key the instances run with. A sealed value proves nothing about a box key until something opens it, and a
// command run from an operator's shell (`acg keys rotate`) seals with whatever ACG_SECRET_BOX_KEY that shell has. So
// each serving instance with a box key keeps a check value in the database (`secret_box_checks`, migration 0048) that
// opens with its key, and marks it seen every BOX_KEY_CHECK_INTERVAL_S; a command that seals what instances must open
// first proves its key opens the checks instances saw lately (found from outside: a rotation with a mistyped box key
// was accepted on a database that held no sealed key yet, and no instance could open the key it sealed).

/** How often a serving instance marks its box key's check seen. */
export const BOX_KEY_CHECK_INTERVAL_S = 60;
/** A check seen within this long belongs to an instance that may still run (five intervals: a missed one or two is no stop). */
export const BOX_KEY_CHECK_RECENT_S = 5 * BOX_KEY_CHECK_INTERVAL_S;
/** A check no instance has seen for this long is deleted when an instance adds one: its box key is gone from the fleet. */
const BOX_KEY_CHECK_KEPT_S = 30 * 86_400;
/** At most this many checks are read (each is one box key the instances ran with in the last 30 days; one, normally). */
const BOX_KEY_CHECKS_READ_MAX = 100;
const BOX_KEY_CHECK_TEXT = 'agent credit gateway: secret box check';
const boxKeyCheckContext = (checkId: string): string => `secret_box_check:${checkId}`;

interface BoxKeyCheckRow {
  check_id: string;
  sealed: string;
  last_seen_at_s: bigint;
}

function opensCheck(key: SecretBoxKey, row: BoxKeyCheckRow): boolean {
  try {
    return openSecret(key, row.sealed, boxKeyCheckContext(row.check_id)) === BOX_KEY_CHECK_TEXT;
  } catch (error) {
    if (error instanceof SecretBoxError) return false;
    throw error;
  }
}

async function readChecks(db: Queryable): Promise<BoxKeyCheckRow[]> {
  const { rows } = await db.query<BoxKeyCheckRow>(
    'SELECT check_id, sealed, last_seen_at_s FROM secret_box_checks ORDER BY last_seen_at_s DESC, check_id LIMIT $1',
    [BOX_KEY_CHECKS_READ_MAX],
  );
  return rows;
}

const databaseNowS = async (db: Queryable): Promise<number> => Math.floor((await databaseNowMs(db)) / 1000);

/**
 * Marks `key` as a box key a serving instance runs with, by the database's clock: the check it opens is seen now, or a
 * new one is added (and checks no instance saw for 30 days are deleted). `anotherSeenAtS`: when a check of another box
 * key was last seen, if within BOX_KEY_CHECK_RECENT_S: instances that may still run with another box key.
 */
export async function recordBoxKeyCheck(db: Queryable, key: SecretBoxKey): Promise<{ anotherSeenAtS: number | undefined }> {
  const nowS = await databaseNowS(db);
  const checks = await readChecks(db);
  const own = checks.find((row) => opensCheck(key, row));
  const another = checks.find((row) => row !== own && Number(row.last_seen_at_s) >= nowS - BOX_KEY_CHECK_RECENT_S && !opensCheck(key, row));
  if (own) {
    await db.query('UPDATE secret_box_checks SET last_seen_at_s = GREATEST(last_seen_at_s, $2) WHERE check_id = $1', [own.check_id, nowS]);
  } else {
    const checkId = newId('sbc');
    await db.query('DELETE FROM secret_box_checks WHERE last_seen_at_s < $1', [nowS - BOX_KEY_CHECK_KEPT_S]);
    await db.query('INSERT INTO secret_box_checks (check_id, sealed, first_seen_at_s, last_seen_at_s) VALUES ($1, $2, $3, $3)', [
      checkId,
      sealSecret(key, BOX_KEY_CHECK_TEXT, boxKeyCheckContext(checkId)),
      nowS,
    ]);
  }
  return { anotherSeenAtS: another === undefined ? undefined : Number(another.last_seen_at_s) };
}

/**
 * Whether `key` is the box key the instances run with, as their checks show (times by the database's clock, `nowS`):
 * - `opens`: it opens every check seen within BOX_KEY_CHECK_RECENT_S, or, none being that recent (the gateway stopped),
 *   the check seen last;
 * - `another`: it does not; `seenAtS` is when the latest check it does not open was seen, `alsoOpens` whether it
 *   opens another recent one (instances run with two box keys);
 * - `none`: no instance with a box key has served on this database yet.
 */
export type BoxKeyVerdict = { kind: 'opens' } | { kind: 'another'; seenAtS: number; alsoOpens: boolean } | { kind: 'none' };

export async function boxKeyVerdict(db: Queryable, key: SecretBoxKey, nowS: number): Promise<BoxKeyVerdict> {
  const checks = await readChecks(db);
  if (checks.length === 0) return { kind: 'none' };
  const recent = checks.filter((row) => Number(row.last_seen_at_s) >= nowS - BOX_KEY_CHECK_RECENT_S);
  const witnesses = recent.length > 0 ? recent : [checks[0]!];
  const unopened = witnesses.find((row) => !opensCheck(key, row));
  if (unopened === undefined) return { kind: 'opens' };
  return { kind: 'another', seenAtS: Number(unopened.last_seen_at_s), alsoOpens: witnesses.some((row) => opensCheck(key, row)) };
}
