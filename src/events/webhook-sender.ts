// One signed webhook delivery attempt (Standard Webhooks v1: webhook-id, webhook-timestamp,
// webhook-signature = v1,<base64 HMAC-SHA256 of "id.timestamp.body">). Retrying, persistence and
// dead-lettering belong to the caller; this file only says what the schedule is and how one attempt went.
import { newSecret } from '../platform/ids.ts';
import { performance } from 'node:perf_hooks';
import { Webhook } from 'standardwebhooks';
import type { Clock } from '../platform/clock.ts';
import { OutboundError, safeRequest, type OutboundTestHooks } from '../platform/outbound.ts';
import { traceHeaders } from '../platform/telemetry.ts';

/**
 * Seconds to wait before attempt n+1, counted from the end of attempt n (the first is immediate):
 * immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then dead-letter. Svix's schedule, ~27.6 h in all.
 */
export const RETRY_SCHEDULE_S: readonly number[] = Object.freeze([0, 5, 300, 1800, 7200, 18000, 36000, 36000]);

/** Budget of an attempt up to the answer's status line and headers; the body is never read (only the status counts). */
export const WEBHOOK_TIMEOUT_MS = 10_000;
const SECRET_PREFIX = 'whsec_';
const SECRET_BYTES = 32;

/** Delay before the next attempt, or null when `attemptsMade` attempts failed and the delivery is dead. */
export function nextAttemptDelayS(attemptsMade: number): number | null {
  if (!Number.isInteger(attemptsMade) || attemptsMade < 0) throw new RangeError(`attemptsMade must be a whole number, got ${attemptsMade}`);
  return RETRY_SCHEDULE_S[attemptsMade] ?? null;
}

/** A per-endpoint signing secret in the Standard Webhooks format: whsec_ + base64 of 32 random bytes. */
export function newWebhookSecret(): string {
  return newSecret(SECRET_PREFIX, { bytes: SECRET_BYTES, encoding: 'base64' });
}

export interface WebhookDelivery {
  url: string;
  secret: string;
  /** During a rotation's overlap, the replaced secret: the header then carries a signature under each. */
  previousSecret?: string;
  /** Stable across retries of one event: the receiver's idempotency key. No '.' (it is part of the signed text). */
  messageId: string;
  /** Serialised once here, so the bytes signed are the bytes sent. */
  payload: unknown;
}

export interface WebhookSendOptions {
  clock: Clock;
  /** TEST ONLY (ACG_ALLOW_PRIVATE_NETWORK_TARGETS). */
  allowPrivateNetworkTargets: boolean;
  timeoutMs?: number;
  /** Extra trusted CA certificate (PEM), for test receivers with self-signed certificates. */
  ca?: string;
  /** TEST ONLY: see OutboundTestHooks. */
  testHooks?: OutboundTestHooks;
}

export type WebhookErrorCode = OutboundError['reason'] | 'status_not_2xx';

export interface WebhookOutcome {
  /** Only a 2xx counts; a 3xx is a failure because redirects are never followed. */
  ok: boolean;
  status?: number;
  error?: WebhookErrorCode;
  /** What happened, in words, with the system's code when there is one (`ECONNREFUSED`, `UND_ERR_HEADERS_OVERFLOW`); failures only. */
  message?: string;
  durationMs: number;
}

/**
 * Standard Webhooks headers for one attempt; the timestamp is this attempt's, not the event's. With a
 * previous secret (a rotation's overlap) the signature header lists one `v1,` signature per secret,
 * space-separated, the current secret's first: a receiver knowing either verifies.
 */
export function signWebhook(secret: string, messageId: string, timestampS: number, body: string, previousSecret?: string): Record<string, string> {
  if (messageId.includes('.') || messageId.length === 0) throw new RangeError('a webhook message id must be non-empty and contain no "."');
  const secrets = previousSecret === undefined ? [secret] : [secret, previousSecret];
  return {
    'webhook-id': messageId,
    'webhook-timestamp': String(timestampS),
    'webhook-signature': secrets.map((key) => new Webhook(key).sign(messageId, new Date(timestampS * 1000), body)).join(' '),
  };
}

/**
 * One attempt. When the gateway traces, the request also carries `traceparent` (and `tracestate`) naming the
 * attempt's span, so the receiver can continue the trace of the request whose change the event reports; an
 * untraced gateway sends none (there is no trace to join). It is not part of the signed text.
 */
export async function sendWebhookAttempt(delivery: WebhookDelivery, options: WebhookSendOptions): Promise<WebhookOutcome> {
  const body = JSON.stringify(delivery.payload);
  if (body === undefined) throw new TypeError('a webhook payload must be JSON-serialisable');
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'agent-credit-gateway-webhooks',
    ...traceHeaders(),
    ...signWebhook(delivery.secret, delivery.messageId, options.clock.nowS(), body, delivery.previousSecret),
  };
  // A duration is measured on the monotonic clock: the wall clock may be stepped mid-attempt.
  const startedMs = performance.now();
  const durationMs = () => Math.round(performance.now() - startedMs);
  const hooks = options.testHooks ?? {};
  try {
    const response = await safeRequest(delivery.url, {
      method: 'POST',
      headers,
      body,
      timeoutMs: options.timeoutMs ?? WEBHOOK_TIMEOUT_MS,
      // The status decides: a receiver that answered 2xx accepted the event, however slowly its body follows.
      responseBody: 'status_only',
      allowPrivateNetworkTargets: options.allowPrivateNetworkTargets,
      ca: options.ca,
      lookupHost: hooks.lookupHost,
      connectPort: hooks.connectPort?.(new URL(delivery.url).hostname),
    });
    const ok = response.status >= 200 && response.status < 300;
    return ok
      ? { ok, status: response.status, durationMs: durationMs() }
      : { ok, status: response.status, error: 'status_not_2xx', message: `the receiver answered ${response.status}`, durationMs: durationMs() };
  } catch (error) {
    if (error instanceof OutboundError) return { ok: false, error: error.reason, message: error.message, durationMs: durationMs() };
    throw error;
  }
}
