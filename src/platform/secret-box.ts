// Encrypts small secrets at rest (connector passwords) with AES-256-GCM, so a copy of the database alone
// does not reveal them. Text format: `v1.<nonce b64url>.<ciphertext||tag b64url>`. The version prefix lets a
// later format (e.g. one naming a key id for rotation) coexist with stored v1 values.
//
// Associated data (e.g. the agent id) is authenticated but not stored: a ciphertext copied onto another
// row fails to open there. Absent associated data is the same as empty associated data.
import { createCipheriv, createDecipheriv, createSecretKey, type KeyObject } from 'node:crypto';
import { ConfigError, type Config } from './config.ts';
import { newSecretBytes } from './ids.ts';

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
