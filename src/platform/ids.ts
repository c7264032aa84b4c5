// The one id generator: a short type prefix and 128 random bits in base32 (lower case, no padding),
// so ids are unguessable, URL-safe and tell a reader what they name.
import { randomBytes, randomFillSync } from 'node:crypto';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

/**
 * Random bytes for ids, drawn from the CSPRNG 4 KiB at a time and each byte used once (as Node's randomUUID
 * does with its own cache): a mint makes several ids, and one draw per id cost 3% of the gateway's CPU.
 */
const ID_POOL_BYTES = 4096;
const idPool = Buffer.alloc(ID_POOL_BYTES);
let idPoolOffset = ID_POOL_BYTES;

function idBytes(count: number): Buffer {
  if (count > ID_POOL_BYTES) return randomBytes(count);
  if (idPoolOffset + count > ID_POOL_BYTES) {
    randomFillSync(idPool);
    idPoolOffset = 0;
  }
  const bytes = idPool.subarray(idPoolOffset, idPoolOffset + count);
  idPoolOffset += count;
  return bytes;
}

export function randomBase32(byteCount: number): string {
  const bytes = idBytes(byteCount);
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31];
  return out;
}

export function newId(prefix: string): string {
  return `${prefix}_${randomBase32(16)}`;
}

/** How many random bytes a secret has unless it says otherwise: 256 bits. */
const SECRET_BYTES_DEFAULT = 32;

/**
 * The only generator of secrets (API keys, webhook secrets, operator credentials, browser bindings, CSP
 * nonces, challenges, peppers): `prefix` then `bytes` random bytes, base64url unless a format needs base64
 * (Standard Webhooks' `whsec_`). A test holds that nothing else in src/ draws random bytes.
 */
export function newSecret(prefix = '', options: { bytes?: number; encoding?: 'base64url' | 'base64' } = {}): string {
  return `${prefix}${randomBytes(options.bytes ?? SECRET_BYTES_DEFAULT).toString(options.encoding ?? 'base64url')}`;
}

/** Raw random bytes for keys and nonces of our own cryptography (the secret box). */
export function newSecretBytes(count: number): Buffer {
  return randomBytes(count);
}
