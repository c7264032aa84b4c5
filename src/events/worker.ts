// The webhook delivery worker. Every instance runs it (`gateway.schedule`), and any number may run at
// once on one PostgreSQL database: a run claims due outbox rows with FOR UPDATE SKIP LOCKED and a lease,
// commits the claim, and only then talks to the network, so no row lock or transaction waits on a
// merchant's server. Each attempt is recorded against the claim; a worker that crashed mid-attempt left a
// lease that simply runs out, and the row is attempted again (at-least-once; receivers dedupe on webhook-id).
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock } from '../platform/clock.ts';
import type { Database } from '../platform/db/database.ts';
import type { OutboundTestHooks } from '../platform/outbound.ts';
import { openSecret, SecretBoxError, type SecretBoxKey } from '../platform/secret-box.ts';
import * as store from './store.ts';
import { nextAttemptDelayS, sendWebhookAttempt, WEBHOOK_TIMEOUT_MS, type WebhookErrorCode, type WebhookOutcome } from './webhook-sender.ts';

/** An attempt's outcome; `secret_unavailable` means nothing was sent because the signing secret could not be opened. */
type AttemptOutcome = Omit<WebhookOutcome, 'error'> & { error?: WebhookErrorCode | 'secret_unavailable' };

/** Rows one run claims; they are sent concurrently, so this also bounds the sockets one instance opens. */
export const DELIVERY_BATCH_MAX = 20;
/** A claim outlives the slowest attempt (WEBHOOK_TIMEOUT_MS) several times over, so only a crash lets it lapse. */
export const DELIVERY_LEASE_MS = 60_000;

export interface WebhookWorkerOptions {
  db: Database;
  clock: Clock;
  log: Logger;
  /** Opens the sealed signing secrets; without it nothing can be signed (and no endpoint can exist). */
  secretBoxKey: SecretBoxKey | undefined;
  allowPrivateNetworkTargets: boolean;
  /** Extra trusted CA certificate (PEM), from ACG_OUTBOUND_CA_FILE. */
  ca?: string;
  testHooks?: OutboundTestHooks;
  batchMax?: number;
  leaseMs?: number;
}

export interface WorkerRunReport {
  claimed: number;
  succeeded: number;
  retrying: number;
  dead: number;
  /** Attempts whose result could not be recorded because the claim was lost. */
  lost: number;
}

export class WebhookWorker {
  private readonly batchMax: number;
  private readonly leaseMs: number;

  constructor(private readonly options: WebhookWorkerOptions) {
    this.batchMax = options.batchMax ?? DELIVERY_BATCH_MAX;
    this.leaseMs = options.leaseMs ?? DELIVERY_LEASE_MS;
    if (this.leaseMs <= WEBHOOK_TIMEOUT_MS) throw new RangeError('the delivery lease must outlast one attempt');
  }

  /** One pass: claim what is due, attempt each, record each outcome. */
  async runOnce(): Promise<WorkerRunReport> {
    const { db, clock } = this.options;
    const nowMs = clock.nowMs();
    const token = randomUUID();
    const claimed = await store.claimDueDeliveries(db, { nowMs, limit: this.batchMax, lockedUntilMs: nowMs + this.leaseMs, token });
    const report: WorkerRunReport = { claimed: claimed.length, succeeded: 0, retrying: 0, dead: 0, lost: 0 };
    await Promise.all(
      claimed.map(async (row) => {
        const state = await this.attempt(row, token);
        if (state === 'lost') report.lost += 1;
        else if (state === 'succeeded') report.succeeded += 1;
        else if (state === 'dead') report.dead += 1;
        else report.retrying += 1;
      }),
    );
    return report;
  }

  private async send(row: store.ClaimedDeliveryRow): Promise<AttemptOutcome> {
    const { secretBoxKey, clock } = this.options;
    let secret: string;
    try {
      if (!secretBoxKey) throw new SecretBoxError('no secret box key');
      secret = openSecret(secretBoxKey, row.secret_sealed, row.merchant_id);
    } catch (error) {
      if (!(error instanceof SecretBoxError)) throw error;
      // The key changed or is missing: an operator problem. The delivery waits on its schedule meanwhile.
      this.options.log.error({ deliveryId: row.id, merchantId: row.merchant_id }, 'webhook secret cannot be opened; check ACG_SECRET_BOX_KEY');
      return { ok: false, error: 'secret_unavailable', durationMs: 0 };
    }
    return sendWebhookAttempt(
      // The stored event JSON is the payload; the event id is the webhook-id on every attempt.
      { url: row.url, secret, messageId: row.event_id, payload: JSON.parse(row.payload) as unknown },
      { clock, allowPrivateNetworkTargets: this.options.allowPrivateNetworkTargets, ca: this.options.ca, testHooks: this.options.testHooks },
    );
  }

  private async attempt(row: store.ClaimedDeliveryRow, token: string): Promise<store.DeliveryState | 'lost'> {
    const { db, clock, log } = this.options;
    const outcome = await this.send(row);
    const attempts = row.attempts + 1;
    const nowMs = clock.nowMs();
    const delayS = outcome.ok ? null : nextAttemptDelayS(attempts);
    const state: store.DeliveryState = outcome.ok ? 'succeeded' : delayS === null ? 'dead' : 'pending';
    const recorded = await store.recordAttempt(db, {
      id: row.id,
      token,
      state,
      attempts,
      nextAttemptAtMs: delayS === null ? nowMs : nowMs + delayS * 1000,
      status: outcome.status ?? null,
      error: outcome.error ?? null,
      attemptAtS: Math.floor(nowMs / 1000),
      durationMs: outcome.durationMs,
      deliveredAtS: outcome.ok ? Math.floor(nowMs / 1000) : null,
    });
    const fields = { deliveryId: row.id, eventId: row.event_id, merchantId: row.merchant_id, attempts, status: outcome.status, error: outcome.error };
    if (!recorded) {
      log.warn(fields, 'webhook attempt made after its claim was lost; the new owner of the delivery records its own');
      return 'lost';
    }
    if (state === 'dead') log.warn(fields, 'webhook delivery dead-lettered after the last scheduled attempt');
    else log.info({ ...fields, state }, 'webhook attempt');
    return state;
  }
}
