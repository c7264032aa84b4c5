// Webhook endpoints and their deliveries, as merchants see them: configure the endpoint (a fresh signing
// secret each time, sealed at rest), read its configuration, list recent deliveries, re-send one.
// Callers have already checked that the caller may act for the merchant.
import type { Queryable } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { sealSecret, type SecretBoxKey } from '../platform/secret-box.ts';
import * as store from './store.ts';
import { newWebhookSecret } from './webhook-sender.ts';

export interface WebhookConfiguration {
  configured: boolean;
  enabled: boolean;
  /** Deliveries go through the database outbox that every instance's worker drains: always true here. */
  queueConfigured: boolean;
  merchantId: string;
  /** The canonical URL; "" while no webhook is configured. */
  url: string;
  createdAt: number | null;
  updatedAt: number | null;
}

export interface Delivery {
  id: string;
  /** The event delivered; also the `webhook-id` header, the same on every attempt. */
  eventId: string;
  eventType: string;
  state: store.DeliveryState;
  attempts: number;
  /** When the next attempt is due (pending only). */
  nextAttemptAt: number | null;
  lastAttemptAt: number | null;
  lastStatus: number | null;
  lastError: string | null;
  lastDurationMs: number | null;
  deliveredAt: number | null;
  createdAt: number;
}

const seconds = (value: bigint | null): number | null => (value === null ? null : Number(value));

function toConfiguration(merchantId: string, row: store.EndpointRow | undefined): WebhookConfiguration {
  if (!row) return { configured: false, enabled: false, queueConfigured: true, merchantId, url: '', createdAt: null, updatedAt: null };
  return {
    configured: true,
    enabled: row.enabled,
    queueConfigured: true,
    merchantId,
    url: row.url,
    createdAt: Number(row.created_at_s),
    updatedAt: Number(row.updated_at_s),
  };
}

function toDelivery(row: store.DeliveryRow): Delivery {
  return {
    id: row.id,
    eventId: row.event_id,
    eventType: row.event_type,
    state: row.state,
    attempts: row.attempts,
    nextAttemptAt: row.state === 'pending' ? Math.ceil(Number(row.next_attempt_at_ms) / 1000) : null,
    lastAttemptAt: seconds(row.last_attempt_at_s),
    lastStatus: row.last_status,
    lastError: row.last_error,
    lastDurationMs: row.last_duration_ms,
    deliveredAt: seconds(row.delivered_at_s),
    createdAt: Number(row.created_at_s),
  };
}

export class WebhookService {
  constructor(
    private readonly gateway: Gateway,
    private readonly secretBoxKey: SecretBoxKey | undefined,
  ) {}

  /**
   * Creates or replaces the merchant's endpoint with a new signing secret, returned here once. The URL must
   * already have passed the merchant's rules (verified domain, https, port 443).
   */
  async configure(tx: Queryable, merchantId: string, url: string, enabled: boolean): Promise<{ configuration: WebhookConfiguration; webhookSecret: string }> {
    if (!this.secretBoxKey) {
      throw new ApiError('runtime_configuration_required', { detail: 'webhook secrets cannot be stored: ACG_SECRET_BOX_KEY is not configured' });
    }
    const webhookSecret = newWebhookSecret();
    const nowS = BigInt(this.gateway.clock.nowS());
    const row = await store.upsertEndpoint(tx, {
      merchant_id: merchantId,
      url,
      enabled,
      // Sealed with the merchant id as associated data: a sealed secret copied to another merchant's row fails to open.
      secret_sealed: sealSecret(this.secretBoxKey, webhookSecret, merchantId),
      created_at_s: nowS,
      updated_at_s: nowS,
    });
    return { configuration: toConfiguration(merchantId, row), webhookSecret };
  }

  async configuration(db: Queryable, merchantId: string): Promise<WebhookConfiguration> {
    return toConfiguration(merchantId, await store.findEndpoint(db, merchantId));
  }

  /** The configured webhook URL of each merchant that has one. */
  async urlsFor(db: Queryable, merchantIds: readonly string[]): Promise<Map<string, string>> {
    const rows = await store.endpointUrls(db, merchantIds);
    return new Map(rows.map((row) => [row.merchant_id, row.url]));
  }

  async listDeliveries(merchantId: string, limit: number, startingAfter?: string): Promise<{ deliveries: Delivery[]; hasMore: boolean }> {
    const rows = await store.listDeliveries(this.gateway.db, merchantId, limit + 1, startingAfter);
    return { deliveries: rows.slice(0, limit).map(toDelivery), hasMore: rows.length > limit };
  }

  /**
   * Makes a delivery due now, whatever its state: the next worker run sends it again with the same
   * webhook-id, to the endpoint as configured now. A failure then continues the retry schedule from the
   * attempts already made (so a dead delivery that fails again is dead again).
   */
  async resend(tx: Queryable, merchantId: string, deliveryId: string): Promise<Delivery> {
    const row = await store.findDelivery(tx, merchantId, deliveryId, true);
    if (!row) throw new ApiError('not_found', { detail: `no delivery ${deliveryId} for this merchant` });
    const endpoint = await store.findEndpoint(tx, merchantId);
    if (!endpoint?.enabled) throw new ApiError('conflict', { detail: 'the webhook is disabled; enable it (PUT …/webhook) before re-sending' });
    const nowMs = this.gateway.clock.nowMs();
    if (Number(row.locked_until_ms) > nowMs) {
      throw new ApiError('conflict', { detail: 'an attempt of this delivery is in progress; look again in a few seconds', headers: { 'retry-after': '10' } });
    }
    await store.scheduleNow(tx, deliveryId, nowMs);
    return toDelivery((await store.findDelivery(tx, merchantId, deliveryId))!);
  }
}
