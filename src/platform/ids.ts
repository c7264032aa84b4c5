// The one id generator: a short type prefix and 128 random bits in base32 (lower case, no padding),
// so ids are unguessable, URL-safe and tell a reader what they name.
import { randomBytes } from 'node:crypto';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

export function randomBase32(byteCount: number): string {
  const bytes = randomBytes(byteCount);
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

/** A secret token: 256 random bits, base64url. */
export function newSecret(prefix: string): string {
  return `${prefix}${randomBytes(32).toString('base64url')}`;
}
