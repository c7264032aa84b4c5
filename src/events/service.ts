// Webhook endpoints, events and deliveries, as merchants see them: configure the endpoint on the verified
// domain (the signing secret, sealed at rest, is issued on first configuration and on rotation only), pause
// and resume it, rotate its secret with an overlap, list events and deliveries with their attempts, re-send
// any past event.
// Owners' endpoints (their agents' top-up and intent events) live in the same table and outbox and are
// delivered by the same worker; an owner configures, reads and deletes its one endpoint.
// Callers have already checked that the caller may act for the merchant (MerchantDirectory) or owner.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import type { Page } from '../platform/schemas.ts';
import { sealSecret, type SecretBoxKey } from '../platform/secret-box.ts';
import type { WebhookMerchant } from './merchant-directory.ts';
import { isDeliverable, OWNER_EVENT_TYPES, type OwnerEventType } from './outbox.ts';
import * as store from './store.ts';
import { newWebhookSecret } from './webhook-sender.ts';
import { validateWebhookUrl } from './webhook-url.ts';

/** Events (with their deliveries and attempts) are kept this long, whether or not a webhook is enabled. */
export const EVENT_RETENTION_DAYS = 30;
/** How long the replaced secret keeps signing after POST …/rotate-secret, unless the request says otherwise. */
export const ROTATION_OVERLAP_DEFAULT_S = 86_400;
export const ROTATION_OVERLAP_MAX_S = 7 * 86_400;

export const WEBHOOK_SECRET_NOTICE =
  'Store this signing secret now: it is shown only in this response (a replay omits it). It stays until you rotate it ' +
  '(POST /v1/merchants/{id}/webhook/rotate-secret keeps the old one signing during an overlap; PUT with rotateSecret ' +
  'replaces it at once). Verify deliveries with a Standard Webhooks library (webhook-id, webhook-timestamp, webhook-signature).';
/** A replay's notice: the secret it leaves out was shown once (SecretMembers). */
export const WEBHOOK_SECRET_REPLAY_NOTICE =
  'The signing secret was shown once, in the first answer to this request, and is not repeated. If it was lost, rotate it ' +
  '(POST /v1/merchants/{id}/webhook/rotate-secret, or PUT with rotateSecret: true).';
export const WEBHOOK_SECRET_KEPT_NOTICE =
  'The signing secret is unchanged (no webhookSecret in this response). Rotate it with POST /v1/merchants/{id}/webhook/rotate-secret.';

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
  /** Since when deliveries are paused (null while enabled or not configured). */
  pausedAt: number | null;
  /** Who disabled it: the merchant, or the gateway after failing attempts (`failing`); null while enabled. */
  disabledReason: 'merchant' | 'failing' | null;
  /** Until when the secret replaced by the last rotation still signs deliveries; null when none does. */
  previousSecretExpiresAt: number | null;
  /** The endpoint's open circuit: why its deliveries wait, and until when; null while attempts go out. */
  circuit: WebhookCircuit | null;
}

/**
 * An open circuit (CIRCUIT_FAILURES_THRESHOLD failures in a row): no attempt to the endpoint before
 * `openUntil`, so deliveries due meanwhile stay pending. A success, a re-send, a resume or a new URL closes it.
 */
export interface WebhookCircuit {
  /** Unix seconds (rounded up): the first attempt after it is the next one the worker makes. */
  openUntil: number;
  /** Failed attempts in a row that opened it. */
  consecutiveFailures: number;
}

/** An owner's webhook: the events of its agents' top-ups and retained intents (OWNER_EVENT_TYPES). */
export interface OwnerWebhookConfiguration {
  configured: boolean;
  enabled: boolean;
  ownerId: string;
  /** The canonical URL; "" while no webhook is configured. */
  url: string;
  /** The event types this webhook receives. */
  eventTypes: OwnerEventType[];
  createdAt: number | null;
  updatedAt: number | null;
  /** Who disabled it: the owner (`enabled: false`), or the gateway after failing attempts (`failing`); null while enabled. */
  disabledReason: 'owner' | 'failing' | null;
  /** Until when the secret replaced by the last rotation still signs beside the new one; null when none does. */
  previousSecretExpiresAt: number | null;
  /** The endpoint's open circuit, as for merchants; null while attempts go out. */
  circuit: WebhookCircuit | null;
}

export interface StoredEvent {
  id: string;
  type: string;
  createdAt: number;
  /** The envelope exactly as delivered (the webhook body). */
  payload: Record<string, unknown>;
}

export interface Attempt {
  id: string;
  /** 1 for the first attempt of the delivery. */
  attempt: number;
  /** `interrupted`: the instance making it stopped (a crash) before it finished; the delivery was taken over. */
  outcome: store.AttemptOutcome;
  status: number | null;
  error: string | null;
  /** What happened, in words, with the system's code when there is one; null unless it failed or was interrupted. */
  message: string | null;
  durationMs: number | null;
  startedAtMs: number;
  finishedAtMs: number | null;
}

export interface Delivery {
  id: string;
  /** The event delivered; also the `webhook-id` header, the same on every attempt. */
  eventId: string;
  eventType: string;
  state: store.DeliveryState;
  attempts: number;
  /**
   * When the next attempt is due (pending only): its schedule's time, or the end of its endpoint's open circuit
   * when that is later (no attempt is made to the endpoint before it).
   */
  nextAttemptAt: number | null;
  lastAttemptAt: number | null;
  lastStatus: number | null;
  lastError: string | null;
  lastDurationMs: number | null;
  deliveredAt: number | null;
  createdAt: number;
}

/**
 * Where one event stands with its merchant's webhook: `delivered` (a 2xx came back), `pending` (queued, not yet
 * attempted), `failing` (attempted without a 2xx: retrying, or dead-lettered after the last retry), `disabled`
 * (the gateway gave up on the endpoint), `paused` (the merchant paused it before the event; resuming with
 * deliverMissed sends it), `none` (no webhook took it: none configured then, or none now).
 */
export type EventReach = 'none' | 'paused' | 'disabled' | 'pending' | 'delivered' | 'failing';
export const EVENT_REACHES: readonly EventReach[] = ['none', 'paused', 'disabled', 'pending', 'delivered', 'failing'];

/** Where one event stands with its merchant's webhook, and its delivery's attempts as a Delivery shows them. */
export interface EventDelivery {
  webhook: EventReach;
  lastAttemptAt: number | null;
  /** As Delivery's: when the next attempt is due (a pending delivery only), an open circuit's end included. */
  nextAttemptAt: number | null;
}

function reachOf(row: store.EventReachRow): EventReach {
  if (row.delivery_state === 'succeeded') return 'delivered';
  if (row.endpoint_enabled === null) return 'none';
  if (!row.endpoint_enabled && row.disabled_reason === 'failing') return 'disabled';
  // A delivery waits through a pause (no attempt goes to a paused endpoint) and goes on when it is resumed
  // (found from outside: a report said `pending` with a next attempt that would not come while paused).
  if (!row.endpoint_enabled) return 'paused';
  return row.delivery_state === null ? 'none' : row.attempts === 0 ? 'pending' : 'failing';
}

const seconds = (value: bigint | null): number | null => (value === null ? null : Number(value));

/**
 * When a delivery's next attempt is due, in Unix seconds rounded up (as a circuit's `openUntil`: it is due by then):
 * its schedule's time, or the end of its endpoint's open circuit when that is later, since no attempt goes to the
 * endpoint before it. Null unless it is pending on an enabled endpoint: a paused or disabled one is sent nothing
 * until it is enabled again, so no time can be given (found from outside). Every face that shows a delivery's next
 * attempt reads it here (a delivery's own `nextAttemptAt`, a freeze report's).
 */
function nextAttemptAtOf(row: { state: store.DeliveryState | null; next_attempt_at_ms: bigint | null; circuit_open_until_ms: bigint; endpoint_enabled: boolean | null }): number | null {
  if (row.state !== 'pending' || row.next_attempt_at_ms === null || row.endpoint_enabled !== true) return null;
  return Math.ceil(Math.max(Number(row.next_attempt_at_ms), Number(row.circuit_open_until_ms)) / 1000);
}

/** The circuit while it holds deliveries back: open now, on an enabled endpoint (a disabled one sends nothing anyway, and its resume closes it). */
function circuitOf(row: store.EndpointRow, nowMs: number): WebhookCircuit | null {
  const openUntilMs = Number(row.circuit_open_until_ms);
  if (!row.enabled || openUntilMs <= nowMs) return null;
  return { openUntil: Math.ceil(openUntilMs / 1000), consecutiveFailures: row.consecutive_failures };
}

function toConfiguration(merchantId: string, row: store.EndpointRow | undefined, nowMs: number): WebhookConfiguration {
  if (!row) {
    return {
      configured: false,
      enabled: false,
      queueConfigured: true,
      merchantId,
      url: '',
      createdAt: null,
      updatedAt: null,
      pausedAt: null,
      disabledReason: null,
      previousSecretExpiresAt: null,
      circuit: null,
    };
  }
  return {
    configured: true,
    enabled: row.enabled,
    queueConfigured: true,
    merchantId,
    url: row.url,
    createdAt: Number(row.created_at_s),
    updatedAt: Number(row.updated_at_s),
    pausedAt: row.enabled ? null : seconds(row.paused_at_s),
    disabledReason: row.enabled ? null : row.disabled_reason,
    previousSecretExpiresAt: previousSecretExpiresAt(row, nowMs),
    circuit: circuitOf(row, nowMs),
  };
}

function toOwnerConfiguration(ownerId: string, row: store.EndpointRow | undefined, nowMs: number): OwnerWebhookConfiguration {
  return {
    configured: row !== undefined,
    enabled: row?.enabled ?? false,
    ownerId,
    url: row?.url ?? '',
    eventTypes: [...OWNER_EVENT_TYPES],
    createdAt: row ? Number(row.created_at_s) : null,
    updatedAt: row ? Number(row.updated_at_s) : null,
    disabledReason: !row || row.enabled ? null : row.disabled_reason === 'failing' ? 'failing' : 'owner',
    previousSecretExpiresAt: row ? previousSecretExpiresAt(row, nowMs) : null,
    circuit: row ? circuitOf(row, nowMs) : null,
  };
}

/** Until when the secret a rotation replaced still signs beside the new one; null when none does. */
function previousSecretExpiresAt(row: store.EndpointRow, nowMs: number): number | null {
  const at = seconds(row.previous_secret_expires_at_s);
  return at !== null && at > Math.floor(nowMs / 1000) ? at : null;
}

function toEvent(row: store.EventRow): StoredEvent {
  return { id: row.id, type: row.type, createdAt: Number(row.created_at_s), payload: JSON.parse(row.payload) as Record<string, unknown> };
}

function toAttempt(row: store.AttemptRow): Attempt {
  return {
    id: row.id,
    attempt: row.attempt,
    outcome: row.outcome,
    status: row.status,
    error: row.error,
    message: row.message,
    durationMs: row.duration_ms,
    startedAtMs: Number(row.started_at_ms),
    finishedAtMs: row.finished_at_ms === null ? null : Number(row.finished_at_ms),
  };
}

function toDelivery(row: store.DeliveryRow): Delivery {
  return {
    id: row.id,
    eventId: row.event_id,
    eventType: row.event_type,
    state: row.state,
    attempts: row.attempts,
    nextAttemptAt: nextAttemptAtOf(row),
    lastAttemptAt: seconds(row.last_attempt_at_s),
    lastStatus: row.last_status,
    lastError: row.last_error,
    lastDurationMs: row.last_duration_ms,
    deliveredAt: seconds(row.delivered_at_s),
    createdAt: Number(row.created_at_s),
  };
}

/** Whose a delivery or an event is not, in a 404's detail. */
function ofAccount(account: store.EventAccount): string {
  return account.kind === 'merchant' ? 'for this merchant' : 'of yours';
}

/** A re-send of an event of an undelivered type (`webhook.disabled`) is refused: such events are listed, never delivered. */
function refuseUndeliverable(eventType: string): void {
  if (!isDeliverable(eventType)) throw new ApiError('conflict', { detail: `${eventType} events are listed by the events API, never delivered` });
}

export class WebhookService {
  constructor(
    private readonly gateway: Gateway,
    private readonly secretBoxKey: SecretBoxKey | undefined,
  ) {}

  private seal(merchantId: string): { secret: string; sealed: string } {
    if (!this.secretBoxKey) {
      throw new ApiError('runtime_configuration_required', { detail: 'webhook secrets cannot be stored: ACG_SECRET_BOX_KEY is not configured' });
    }
    const secret = newWebhookSecret();
    // Sealed with the merchant id as associated data: a sealed secret copied to another merchant's row fails to open.
    return { secret, sealed: sealSecret(this.secretBoxKey, secret, merchantId) };
  }

  private toConfiguration(merchantId: string, row: store.EndpointRow | undefined): WebhookConfiguration {
    return toConfiguration(merchantId, row, this.gateway.clock.nowMs());
  }

  /**
   * Configures a merchant's webhook: only on its verified domain (409 before the proof; 400 for a URL off it).
   * Creates the endpoint (with a new signing secret, returned here once) or changes its URL and `enabled`
   * keeping the secret; `rotateSecret` replaces it at once (no overlap: see rotateSecret for one). The
   * caller holds the merchant's row locked, so concurrent first configurations create one endpoint.
   */
  async configure(
    tx: Tx,
    merchant: WebhookMerchant,
    input: { url: string; enabled: boolean; rotateSecret: boolean; deliverMissed: boolean },
  ): Promise<{ configuration: WebhookConfiguration; webhookSecret?: string; notice: string }> {
    if (!merchant.verified) {
      throw new ApiError('conflict', {
        detail: 'verify the domain first (POST /v1/merchants/{id}/verify-domain): webhooks go only to the verified domain',
      });
    }
    const url = validateWebhookUrl(input.url, merchant.domain);
    if (!url.ok) throw memberRefusal('url', url.reason);
    const configured = await this.configureEndpoint(tx, merchant.id, { ...input, url: url.url });
    return { ...configured, notice: configured.webhookSecret === undefined ? WEBHOOK_SECRET_KEPT_NOTICE : WEBHOOK_SECRET_NOTICE };
  }

  private async configureEndpoint(
    tx: Tx,
    merchantId: string,
    input: { url: string; enabled: boolean; rotateSecret: boolean; deliverMissed: boolean },
  ): Promise<{ configuration: WebhookConfiguration; webhookSecret?: string }> {
    const nowS = BigInt(this.gateway.clock.nowS());
    const existing = await store.lockEndpoint(tx, merchantId);
    if (!existing) {
      const { secret, sealed } = this.seal(merchantId);
      const row = await store.insertEndpoint(tx, { merchant_id: merchantId, url: input.url, enabled: input.enabled, secret_sealed: sealed, now_s: nowS });
      return { configuration: this.toConfiguration(merchantId, row), webhookSecret: secret };
    }
    const fresh = input.rotateSecret ? this.seal(merchantId) : undefined;
    await this.queueMissed(tx, existing, input.enabled, input.deliverMissed);
    const row = await store.updateEndpoint(tx, merchantId, {
      url: input.url,
      enabled: input.enabled,
      secret: fresh && { sealed: fresh.sealed, previousSealed: null, previousExpiresAtS: null },
      nowS,
    });
    return fresh ? { configuration: this.toConfiguration(merchantId, row), webhookSecret: fresh.secret } : { configuration: this.toConfiguration(merchantId, row) };
  }

  /** Pauses or resumes deliveries; the secret is untouched. See `queueMissed` for what a resume delivers. */
  async setEnabled(tx: Tx, merchantId: string, enabled: boolean, deliverMissed: boolean): Promise<{ configuration: WebhookConfiguration }> {
    const existing = await store.lockEndpoint(tx, merchantId);
    if (!existing) throw new ApiError('not_found', { detail: 'no webhook is configured for this merchant; PUT …/webhook first' });
    await this.queueMissed(tx, existing, enabled, deliverMissed);
    const row = await store.updateEndpoint(tx, merchantId, { enabled, nowS: BigInt(this.gateway.clock.nowS()) });
    return { configuration: this.toConfiguration(merchantId, row) };
  }

  /**
   * On a resume with `deliverMissed`, every event of the pause (since `paused_at_s`) gets a delivery, due
   * now. Without it they are only listed (and can be re-sent one by one). Deliveries pending when the pause
   * began continue either way.
   */
  private async queueMissed(tx: Queryable, endpoint: store.EndpointRow, enabled: boolean, deliverMissed: boolean): Promise<void> {
    if (!enabled || endpoint.enabled || !deliverMissed || endpoint.paused_at_s === null || endpoint.merchant_id === null) return;
    await store.queueEventsSince(tx, endpoint.merchant_id, endpoint.paused_at_s, this.gateway.clock.nowMs(), BigInt(this.gateway.clock.nowS()));
  }

  /**
   * A new signing secret, returned once. The replaced one keeps signing next to it for `overlapS` seconds
   * (each delivery then carries both signatures), so the receiver can switch without missing an event.
   */
  async rotateSecret(tx: Tx, merchantId: string, overlapS: number): Promise<{ configuration: WebhookConfiguration; webhookSecret: string }> {
    const { row, webhookSecret } = await this.rotateAccountSecret(tx, merchantId, overlapS, 'no webhook is configured for this merchant; PUT …/webhook first');
    return { configuration: this.toConfiguration(merchantId, row), webhookSecret };
  }

  /** The owner's twin of rotateSecret: the same overlap, on the owner's endpoint. */
  async rotateOwnerSecret(tx: Tx, ownerId: string, overlapS: number): Promise<{ configuration: OwnerWebhookConfiguration; webhookSecret: string }> {
    const { row, webhookSecret } = await this.rotateAccountSecret(tx, ownerId, overlapS, 'no webhook is configured for this owner; PUT /v1/owner/webhook first');
    return { configuration: toOwnerConfiguration(ownerId, row, this.gateway.clock.nowMs()), webhookSecret };
  }

  private async rotateAccountSecret(tx: Tx, accountId: string, overlapS: number, missing: string): Promise<{ row: store.EndpointRow; webhookSecret: string }> {
    const existing = await store.lockEndpoint(tx, accountId);
    if (!existing) throw new ApiError('not_found', { detail: missing });
    const { secret, sealed } = this.seal(accountId);
    const nowS = BigInt(this.gateway.clock.nowS());
    const row = await store.updateEndpoint(tx, accountId, {
      secret: { sealed, previousSealed: overlapS > 0 ? existing.secret_sealed : null, previousExpiresAtS: overlapS > 0 ? nowS + BigInt(overlapS) : null },
      nowS,
    });
    return { row, webhookSecret: secret };
  }

  /**
   * An owner's webhook, through the same endpoints table, outbox and worker as merchants' (keyed by the
   * owner id). Created with a new secret (returned once); later calls change the URL and `enabled` and keep
   * the secret unless `rotateSecret`. The URL must already have passed the public URL rules.
   */
  async configureOwner(
    tx: Tx,
    ownerId: string,
    input: { url: string; enabled: boolean; rotateSecret: boolean },
  ): Promise<{ configuration: OwnerWebhookConfiguration; webhookSecret?: string }> {
    const nowS = BigInt(this.gateway.clock.nowS());
    const existing = await store.lockEndpoint(tx, ownerId);
    if (!existing) {
      const { secret, sealed } = this.seal(ownerId);
      const row = await store.insertEndpoint(tx, { owner_id: ownerId, url: input.url, enabled: input.enabled, secret_sealed: sealed, now_s: nowS });
      return { configuration: toOwnerConfiguration(ownerId, row, this.gateway.clock.nowMs()), webhookSecret: secret };
    }
    const fresh = input.rotateSecret ? this.seal(ownerId) : undefined;
    const row = await store.updateEndpoint(tx, ownerId, {
      url: input.url,
      enabled: input.enabled,
      secret: fresh && { sealed: fresh.sealed, previousSealed: null, previousExpiresAtS: null },
      nowS,
    });
    const configuration = toOwnerConfiguration(ownerId, row, this.gateway.clock.nowMs());
    return fresh ? { configuration, webhookSecret: fresh.secret } : { configuration };
  }

  async ownerConfiguration(db: Queryable, ownerId: string): Promise<OwnerWebhookConfiguration> {
    return toOwnerConfiguration(ownerId, await store.findEndpoint(db, ownerId), this.gateway.clock.nowMs());
  }

  /** Removes the owner's webhook; events still pending delivery are dropped (`endpoint_deleted`). */
  async deleteOwner(tx: Queryable, ownerId: string): Promise<{ configuration: OwnerWebhookConfiguration; deleted: boolean }> {
    const deleted = await store.deleteOwnerEndpoint(tx, ownerId, this.gateway.clock.nowS());
    return { configuration: toOwnerConfiguration(ownerId, undefined, this.gateway.clock.nowMs()), deleted };
  }

  async configuration(db: Queryable, merchantId: string): Promise<WebhookConfiguration> {
    return this.toConfiguration(merchantId, await store.findEndpoint(db, merchantId));
  }

  /** The configured webhook URL of each merchant that has one. */
  async urlsFor(db: Queryable, merchantIds: readonly string[]): Promise<Map<string, string>> {
    const rows = await store.endpointUrls(db, merchantIds);
    return new Map(rows.map((row) => [row.merchant_id, row.url]));
  }

  /** How far each of these merchant events got (see EventReach), with its last delivery attempt and its next, by event id. */
  async reachOf(db: Queryable, events: ReadonlyArray<{ merchantId: string; eventId: string }>): Promise<Map<string, EventDelivery>> {
    const rows = await store.eventReach(db, events);
    return new Map(
      rows.map((row) => [
        row.event_id,
        { webhook: reachOf(row), lastAttemptAt: seconds(row.last_attempt_at_s), nextAttemptAt: nextAttemptAtOf({ ...row, state: row.delivery_state }) },
      ]),
    );
  }

  /** A merchant's or an owner's deliveries, newest first. */
  async listDeliveries(db: Queryable, account: store.EventAccount, page: Page): Promise<{ deliveries: Delivery[]; hasMore: boolean }> {
    const rows = await store.listDeliveries(db, account, page.limit + 1, page.startingAfter);
    return { deliveries: rows.slice(0, page.limit).map(toDelivery), hasMore: rows.length > page.limit };
  }

  /**
   * Makes a delivery of the account's due now, whatever its state: the next worker run sends it again with the
   * same webhook-id, to the endpoint as configured now. A failure then continues the retry schedule from the
   * attempts already made (so a dead delivery that fails again is dead again).
   */
  async resend(tx: Tx, account: store.EventAccount, deliveryId: string): Promise<Delivery> {
    const row = await store.lockDelivery(tx, account, deliveryId);
    if (!row) throw new ApiError('not_found', { detail: `no delivery ${deliveryId} ${ofAccount(account)}` });
    await this.resendDelivery(tx, account, row);
    return toDelivery((await store.findDelivery(tx, account, deliveryId))!);
  }

  private async resendDelivery(tx: Queryable, account: store.EventAccount, row: store.DeliveryRow): Promise<void> {
    refuseUndeliverable(row.event_type);
    await this.refuseWithoutEndpoint(tx, account);
    const nowMs = this.gateway.clock.nowMs();
    const lockedForMs = Number(row.locked_until_ms) - nowMs;
    if (lockedForMs > 0) {
      // Retry-After is when the attempt's claim ends (its timeout and a margin), not a guess: an attempt may run 10 s,
      // and a fixed 5 s was answered 409 again (found from outside).
      const retryAfterS = Math.ceil(lockedForMs / 1000);
      throw new ApiError('conflict', { detail: `an attempt of this delivery is in progress; look again in ${retryAfterS} s, once it has ended`, retryAfterS });
    }
    await store.scheduleNow(tx, row.id, nowMs);
    await store.closeCircuit(tx, account.id);
  }

  /** A re-send needs an enabled webhook to go to (an owner's may have been deleted, or never configured). */
  private async refuseWithoutEndpoint(db: Queryable, account: store.EventAccount): Promise<void> {
    const endpoint = await store.findEndpoint(db, account.id);
    if (endpoint?.enabled) return;
    const how = account.kind === 'merchant' ? 'PUT or PATCH /v1/merchants/{id}/webhook' : 'PUT /v1/owner/webhook';
    throw new ApiError('conflict', { detail: `the webhook is ${endpoint ? 'disabled' : 'not configured'}; ${endpoint ? 'enable' : 'configure'} it (${how}) before re-sending` });
  }

  /**
   * Re-sends any kept event of the account with its original webhook-id: its delivery is made due now, or created
   * when the event never had one (it happened while the webhook was paused or not yet configured).
   */
  async resendEvent(tx: Tx, account: store.EventAccount, eventId: string): Promise<Delivery> {
    const event = await store.findEvent(tx, account, eventId);
    if (!event) throw new ApiError('not_found', { detail: `no event ${eventId} ${ofAccount(account)} (events are kept ${EVENT_RETENTION_DAYS} days)` });
    refuseUndeliverable(event.type);
    const existing = await store.lockDeliveryOfEvent(tx, account, eventId);
    if (existing) {
      await this.resendDelivery(tx, account, existing);
    } else {
      await this.refuseWithoutEndpoint(tx, account);
      const clock = this.gateway.clock;
      await store.insertDelivery(tx, { id: newId('whd'), eventId, eventType: event.type, account, nowMs: clock.nowMs(), nowS: clock.nowS() });
      await store.closeCircuit(tx, account.id);
    }
    return toDelivery((await store.lockDeliveryOfEvent(tx, account, eventId))!);
  }

  /** A merchant's or an owner's events, newest first, of the given types (all when none) and within [from, to] (Unix seconds). */
  async listEvents(
    db: Queryable,
    account: store.EventAccount,
    filter: { types: readonly string[]; from?: number; to?: number } & Page,
  ): Promise<{ events: StoredEvent[]; hasMore: boolean }> {
    // A window that ends before it begins holds nothing: a client that swapped the two would read "no events".
    if (filter.from !== undefined && filter.to !== undefined && filter.from > filter.to) {
      throw memberRefusal('to', `(${filter.to}) is earlier than from (${filter.from}); both are Unix seconds, and the window includes both`);
    }
    const rows = await store.listEvents(db, account, {
      types: filter.types,
      fromS: filter.from,
      toS: filter.to,
      limit: filter.limit + 1,
      startingAfter: filter.startingAfter,
    });
    return { events: rows.slice(0, filter.limit).map(toEvent), hasMore: rows.length > filter.limit };
  }

  /**
   * Every attempt of one delivery of the account, oldest first, including one cut off by a crash
   * (`interrupted`); another account's delivery is not found.
   */
  async listAttempts(db: Queryable, account: store.EventAccount, deliveryId: string): Promise<{ delivery: Delivery; attempts: Attempt[] }> {
    const row = await store.findDelivery(db, account, deliveryId);
    if (!row) throw new ApiError('not_found', { detail: `no delivery ${deliveryId} ${account.kind === 'merchant' ? 'for this merchant' : 'of your webhook'}` });
    return { delivery: toDelivery(row), attempts: (await store.listAttempts(db, [deliveryId])).map(toAttempt) };
  }

  /** Deletes what is older than the retention; run periodically by every instance (idempotent). */
  async purgeExpired(): Promise<number> {
    const beforeS = this.gateway.clock.nowS() - EVENT_RETENTION_DAYS * 86_400;
    const purged = await this.gateway.db.transaction((tx) => store.purgeEventsBefore(tx, beforeS));
    if (purged > 0) this.gateway.log.info({ purged, retentionDays: EVENT_RETENTION_DAYS }, 'events past their retention deleted');
    return purged;
  }
}
