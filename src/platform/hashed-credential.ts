// A credential the gateway keeps only the SHA-256 of (the operator's, the metrics scraper's): presented as
// `Authorization: Bearer <credential>`, hashed and compared in constant time.
import { createHash, timingSafeEqual } from 'node:crypto';
import { ApiError } from './errors.ts';

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/**
 * What a presented credential is compared with when none is configured: a SHA-256 no known text has, so
 * the comparison fails as it does for a wrong credential, in the same time.
 */
const NOTHING_CONFIGURED = Buffer.alloc(32);

/**
 * Throws 401 (with a Bearer challenge of `realm`) unless `authorization` carries the credential whose SHA-256 is
 * `acceptedHash`. Without a configured hash every call is refused the same way, whether it carries none, a
 * malformed one or a guess: a caller that cannot prove it holds the credential learns nothing about the
 * configuration (the operator reads it in the start-up log).
 */
export function checkHashedBearer(authorization: string | undefined, acceptedHash: string | undefined, credential: { realm: string; name: string }): void {
  const headers = { 'www-authenticate': `Bearer realm="${credential.realm}"` };
  // The scheme is case-insensitive (RFC 9110 §11.1), as on every other route.
  const match = /^Bearer ([\x21-\x7e]{1,200})$/i.exec(authorization ?? '');
  if (!match) throw new ApiError('unauthorized', { detail: `this route takes "Authorization: Bearer <${credential.name}>"`, headers });
  const presented = Buffer.from(sha256Hex(match[1]!), 'hex');
  const accepted = acceptedHash === undefined ? NOTHING_CONFIGURED : Buffer.from(acceptedHash, 'hex');
  if (!timingSafeEqual(presented, accepted) || acceptedHash === undefined) {
    throw new ApiError('unauthorized', { detail: `not the ${credential.name}`, headers });
  }
}
