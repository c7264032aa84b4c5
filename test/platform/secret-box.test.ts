// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { SecretBoxError, generateSecretBoxKey, openSecret, parseSecretBoxKey, sealSecret, type SecretBoxKey } from '../../src/platform/secret-box.ts';

function key(): SecretBoxKey {
  return generateSecretBoxKey().key;
}

describe('secret box', () => {
  it('round-trips a secret, bound to its associated data', () => {
    const k = key();
    const sealed = sealSecret(k, 'imap-pässword ✓', 'agt_123');
    expect(sealed).toMatch(/^v1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]+$/);
    expect(sealed).not.toContain('pässword');
    expect(openSecret(k, sealed, 'agt_123')).toBe('imap-pässword ✓');
  });

  it('uses a fresh nonce each time', () => {
    const k = key();
    expect(sealSecret(k, 'same')).not.toBe(sealSecret(k, 'same'));
  });

  it('round-trips without associated data and with an empty secret', () => {
    const k = key();
    expect(openSecret(k, sealSecret(k, ''))).toBe('');
  });

  it('detects tampering with any part', () => {
    const k = key();
    const sealed = sealSecret(k, 'secret', 'agt_1');
    const [version, nonce, body] = sealed.split('.') as [string, string, string];
    const flip = (text: string, at: number) => {
      const bytes = Buffer.from(text, 'base64url');
      bytes[at] = bytes[at]! ^ 1;
      return bytes.toString('base64url');
    };
    for (const forged of [
      `${version}.${flip(nonce, 0)}.${body}`,
      `${version}.${nonce}.${flip(body, 0)}`,
      `${version}.${nonce}.${flip(body, Buffer.from(body, 'base64url').length - 1)}`,
      `${version}.${nonce}.${body.slice(0, -4)}`,
      `v2.${nonce}.${body}`,
      `${version}.${nonce}`,
      'garbage',
      `${version}.${nonce}.${body}!`,
    ]) {
      expect(() => openSecret(k, forged, 'agt_1')).toThrow(SecretBoxError);
    }
  });

  it('refuses a different key', () => {
    const sealed = sealSecret(key(), 'secret');
    expect(() => openSecret(key(), sealed)).toThrow(SecretBoxError);
  });

  it('refuses different or missing associated data', () => {
    const k = key();
    const sealed = sealSecret(k, 'secret', 'agt_1');
    expect(() => openSecret(k, sealed, 'agt_2')).toThrow(SecretBoxError);
    expect(() => openSecret(k, sealed)).toThrow(SecretBoxError);
  });

  it('parses a 32-byte base64 or base64url key and explains anything else', () => {
    const bytes = randomBytes(32);
    for (const text of [bytes.toString('base64'), bytes.toString('base64url'), ` ${bytes.toString('base64')}\n`]) {
      const parsed = parseSecretBoxKey(text);
      if (!('key' in parsed)) throw new Error(parsed.error);
      expect(openSecret(parsed.key, sealSecret(parsed.key, 'x'))).toBe('x');
    }
    const other = parseSecretBoxKey(bytes.toString('base64url'));
    const same = parseSecretBoxKey(bytes.toString('base64'));
    if (!('key' in other) || !('key' in same)) throw new Error('expected keys');
    expect(openSecret(same.key, sealSecret(other.key, 'y'))).toBe('y');
    expect(parseSecretBoxKey(randomBytes(16).toString('base64'))).toEqual({ error: 'must decode to 32 bytes, got 16' });
    expect(parseSecretBoxKey('')).toHaveProperty('error');
    expect(parseSecretBoxKey('not base64 at all!')).toHaveProperty('error');
  });

  it('never shows key material when printed', () => {
    const { key: k, text } = generateSecretBoxKey();
    expect(JSON.stringify(k)).not.toContain(text);
    expect(String(k.keyObject)).not.toContain(text);
  });
});
