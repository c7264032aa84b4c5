// Standard Webhooks v1 verification (https://www.standardwebhooks.com): the signature is
// base64(HMAC-SHA256(secret, `${webhook-id}.${webhook-timestamp}.${body}`)), sent as space-separated
// `v1,<signature>` entries, and the timestamp must be near the receiver's clock (replay window).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { VerificationError } from './errors.js';
import type { WebhookEvent } from './types.js';

const SECRET_PREFIX = 'whsec_';
/** The reference libraries' tolerance. */
export const WEBHOOK_TOLERANCE_S_DEFAULT = 5 * 60;

export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

function header(headers: HeaderSource, name: string): string {
  const value = headers instanceof Headers ? headers.get(name) : headers[name] ?? headers[name.toLowerCase()];
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) throw new VerificationError('invalid_webhook', `the ${name} header is missing`);
  return text;
}

function secretKey(secret: string): Buffer {
  const key = Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64');
  if (key.length === 0) throw new TypeError('the webhook secret is empty; pass the whsec_… value the gateway showed once');
  return key;
}

/**
 * Verifies a delivery and returns its event. Pass the raw body exactly as received (before any JSON
 * parsing). Refuses a bad signature or a timestamp more than `toleranceS` from now. Deduplicate on the
 * returned event's `id`: delivery is at least once.
 */
export function verifyWebhook(
  secret: string,
  headers: HeaderSource,
  body: string | Uint8Array,
  options: { toleranceS?: number; nowS?: number } = {},
): WebhookEvent {
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  const timestampS = /^[0-9]{1,12}$/.test(timestamp) ? Number(timestamp) : Number.NaN;
  const nowS = options.nowS ?? Math.floor(Date.now() / 1000);
  if (!Number.isFinite(timestampS) || Math.abs(nowS - timestampS) > (options.toleranceS ?? WEBHOOK_TOLERANCE_S_DEFAULT)) {
    throw new VerificationError('invalid_webhook', 'the webhook-timestamp is outside the tolerance (a replay, or a clock far off)');
  }
  // A JavaScript caller may pass what a JSON body parser made of the body (express.json()'s req.body): its text as
  // sent is gone, and no re-serialisation is sure to match the signature, so say what to pass instead.
  if (typeof body !== 'string' && !(body instanceof Uint8Array)) {
    throw new VerificationError('invalid_webhook', `the body must be the raw bytes or text as received (a string, Buffer or Uint8Array), not ${body === null ? 'null' : typeof body}: read it before any JSON parser, e.g. express.raw({ type: 'application/json' })`);
  }
  const text = typeof body === 'string' ? body : Buffer.from(body).toString('utf8');
  const expected = createHmac('sha256', secretKey(secret)).update(`${id}.${timestamp}.${text}`).digest();
  const matches = signatures.split(' ').some((entry) => {
    const [version, signature] = entry.split(',', 2);
    if (version !== 'v1' || !signature) return false;
    const given = Buffer.from(signature, 'base64');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!matches) throw new VerificationError('invalid_webhook', 'no webhook-signature matches this body under the secret');
  try {
    return JSON.parse(text) as WebhookEvent;
  } catch (error) {
    throw new VerificationError('invalid_webhook', 'the signed body is not JSON', { cause: error });
  }
}
