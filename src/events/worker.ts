// The webhook delivery worker. Every instance runs it, and any number may run at once on one PostgreSQL
// database: a pass claims due outbox rows with FOR UPDATE SKIP LOCKED and a short lease, commits the
// claim, starts the attempts and returns at once, so the next pass never waits on a slow receiver. Bounds:
// DELIVERY_CONCURRENCY_MAX attempts in flight per instance, ENDPOINT_CONCURRENCY_MAX per endpoint
// (UNPROVEN_ENDPOINT_CONCURRENCY_MAX until its receiver first answers 2xx), and
// FAILING_CONCURRENCY_MAX of an instance's to suspect endpoints (failing, not yet proven, or failed in the last ten
// minutes: receivers that may hang), and
// URGENT_RESERVE_MAX more for urgent deliveries alone (the kill switch's voucher.revoked) when the rest are taken. While
// attempts run, a heartbeat extends their leases; an instance that dies stops it, and another takes the
// rows over once the lease lapses (seconds), marking the cut-off attempt 'interrupted'. Delivery is
// at-least-once; receivers dedupe on webhook-id.
// Each attempt is counted (acg_webhook_attempts_total by outcome, acg_webhook_delivery_lag_seconds from due
// to started) and, when tracing, is a span continuing the trace of the request whose change the event reports
// (the delivery's stored `traceparent` and `tracestate`; a new trace when there is none), whose context the request
// carries on.
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock } from '../platform/clock.ts';
import type { Database, Queryable } from '../platform/db/database.ts';
import { logBackgroundFailure } from '../platform/db/faults.ts';
import type { Metrics } from '../platform/metrics.ts';
import type { OutboundTestHooks } from '../platform/outbound.ts';
import { openSecret, SecretBoxError, type SecretBoxKey } from '../platform/secret-box.ts';
import { detached, failSpan, inSpan, remoteParent, setSpanAttributes, type SpanOptions, type SpanRef } from '../platform/telemetry.ts';
import { deliveryTraceCarrier, emitEvent } from './outbox.ts';
import * as store from './store.ts';
import { nextAttemptDelayS, sendWebhookAttempt, type WebhookErrorCode, type WebhookOutcome } from './webhook-sender.ts';

/** An attempt's outcome; `secret_unavailable` means nothing was sent because the signing secret could not be opened. */
type AttemptOutcome = Omit<WebhookOutcome, 'error'> & { error?: WebhookErrorCode | 'secret_unavailable' };

/** Rows one pass claims at most. */
export const DELIVERY_BATCH_MAX = 20;
/** Attempts one instance runs at once (sockets it opens). */
export const DELIVERY_CONCURRENCY_MAX = 32;
/** Attempts in flight to one endpoint, across instances (each instance counts the others' live claims). */
export const ENDPOINT_CONCURRENCY_MAX = 4;
/**
 * Attempts in flight to an endpoint whose receiver has never answered 2xx (urgent ones aside): a new receiver is
 * tried once at a time until it answers. With four, a new receiver that hangs held four suspect slots for a whole
 * timeout, four of them took the share, and a new receiver that answers waited one timeout per four (found from
 * outside: 29 s behind 12, 49 s behind 20).
 */
export const UNPROVEN_ENDPOINT_CONCURRENCY_MAX = 1;
/**
 * Attempts one instance runs at once to suspect endpoints (store.ts, SUSPECT_ENDPOINT: the last attempt failed, the
 * receiver has never answered 2xx, or it failed in the last ten minutes): half of its slots, so that receivers that
 * hang (each attempt holding a slot for the whole timeout) can never take every slot and make every other merchant's
 * events wait, round after round, until their circuits open (found from outside: 17 hanging receivers on two
 * instances delayed a healthy merchant's event by 9 s; new ones on their first burst, and ones that hang between
 * successes, by 11 to 51 s).
 */
export const FAILING_CONCURRENCY_MAX = DELIVERY_CONCURRENCY_MAX / 2;
/**
 * Slots beyond DELIVERY_CONCURRENCY_MAX that only urgent deliveries (`voucher.revoked`, the kill switch's word to a
 * merchant) may take: with every slot held by receivers that hang, a revocation was claimed first but still waited
 * for one to free, 6 s after a freeze (found from outside). A worker at its limit claims urgent deliveries alone.
 */
export const URGENT_RESERVE_MAX = 4;
/** A claim lapses this long after its owner's last heartbeat; the heartbeat runs every third of it. */
export const DELIVERY_LEASE_MS = 5_000;
/** Failures in a row after which an endpoint's circuit opens: no attempt to it until the circuit closes. */
export const CIRCUIT_FAILURES_THRESHOLD = 5;
/**
 * The circuit stays open 30 s after the threshold, doubling with each further failure, up to 10 min. A failure
 * counts only when its attempt started with the circuit closed: the attempts in flight when it opens (a pass
 * runs up to ENDPOINT_CONCURRENCY_MAX at once) are the same burst, so one burst opens it once, for 30 s, and
 * the next opening (an attempt after it closed failed too) is the next step.
 */
export const CIRCUIT_OPEN_BASE_MS = 30_000;
export const CIRCUIT_OPEN_MAX_MS = 10 * 60_000;
/** An endpoint that has failed every attempt for this long is disabled, with a `webhook.disabled` event (Svix: 5 days). */
export const AUTO_DISABLE_AFTER_S = 5 * 86_400;

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
  /** The gateway's metrics: attempts, delivery lag, and the outbox backlog read at each scrape. */
  metrics?: Metrics;
}

export interface WorkerRunReport {
  claimed: number;
  succeeded: number;
  retrying: number;
  dead: number;
  /** Attempts whose result could not be recorded because the claim was lost. */
  lost: number;
}

type AttemptState = store.DeliveryState | 'lost';

/** Pass times a worker keeps owed at most (a retry due later than all of them waits for the poll). */
const WAKES_MAX = 1_000;

/** An attempt's outcome as the metrics name it. */
const ATTEMPT_OUTCOMES: Record<AttemptState, string> = { succeeded: 'succeeded', pending: 'retrying', dead: 'dead', lost: 'lost' };

/** The attempt's span: a child of the request the event reports; the URL's host only (a path may hold a token). */
function attemptSpan(row: store.ClaimedDeliveryRow): SpanOptions {
  return {
    parent: remoteParent(deliveryTraceCarrier(row.traceparent)) ?? null,
    attributes: {
      'acg.webhook.delivery_id': row.id,
      'acg.webhook.attempt': row.attempts,
      'acg.event.id': row.event_id,
      'acg.webhook.account_id': row.account_id,
      'server.address': URL.canParse(row.url) ? new URL(row.url).hostname : undefined,
    },
  };
}

export class WebhookWorker {
  private readonly batchMax: number;
  private readonly leaseMs: number;
  /** Claim tokens of this instance's attempts in flight, with how many attempts each still has running. */
  private readonly claims = new Map<string, number>();
  private inFlight = 0;
  /** Of those, the attempts to suspect endpoints (FAILING_CONCURRENCY_MAX at most). */
  private failingInFlight = 0;
  /** Of those, the attempts claimed into the urgent reserve (URGENT_RESERVE_MAX at most). */
  private reservedInFlight = 0;
  private heartbeat: NodeJS.Timeout | undefined;
  /** Claims that took all they could: when the last of their attempts ends, the worker claims again at once. */
  private readonly full = new Set<string>();
  private wake: { timer: NodeJS.Timeout; atMs: number } | undefined;
  /**
   * Every time a pass is owed (a retry's due time, a full claim's follow-up), earliest first: when the timer fires
   * for the first, it is set again for the next. With the earliest alone, a retry due after another's waited for
   * the next poll (found from outside: retries after a timeout came 5.9–6 s late, where a 500's came at 5 s).
   */
  private readonly wakes: number[] = [];
  /** Set by the scheduled pass: only then does the worker set its own timer for a retry due before the next poll. */
  private background = false;
  /** Attempts, woken passes and heartbeats in flight: `stop` waits for them. */
  private readonly running = new Set<Promise<unknown>>();

  constructor(private readonly options: WebhookWorkerOptions) {
    this.batchMax = options.batchMax ?? DELIVERY_BATCH_MAX;
    this.leaseMs = options.leaseMs ?? DELIVERY_LEASE_MS;
    options.metrics?.readOutboxWith(() => store.outboxBacklog(options.db, options.clock.nowMs()));
  }

  /** The scheduled pass (every ACG_WEBHOOK_POLL_INTERVAL_MS): claims and starts attempts, never waits for them. */
  async pass(): Promise<number> {
    this.background = true;
    return (await this.dispatch()).length;
  }

  /**
   * A pass as soon as possible, for events that should not wait for the next poll (a revoked voucher: the
   * kill switch's reach is measured in how soon merchants hear of it). Called after their transaction
   * committed; only a worker that runs in the background (the scheduled one) makes the pass.
   */
  soon(): void {
    this.wakeAt(this.options.clock.nowMs());
  }

  /**
   * Starts no more passes and waits for the work in flight, each attempt within its WEBHOOK_TIMEOUT_MS, so that its
   * outcome is recorded: the gateway closes the database next. Before, an attempt (or a heartbeat) that ended after
   * the close met a closed pool, was lost to a retry by another instance, and was logged as a database outage.
   */
  async stop(): Promise<void> {
    this.background = false;
    if (this.wake) clearTimeout(this.wake.timer);
    this.wake = undefined;
    this.wakes.length = 0;
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  /** Keeps `work` in `running` until it settles. */
  private track<T>(work: Promise<T>): Promise<T> {
    this.running.add(work);
    void work.finally(() => this.running.delete(work)).catch(() => {});
    return work;
  }

  /** One pass that also waits for its attempts: for tests and tools that want the outcome. */
  async runOnce(): Promise<WorkerRunReport> {
    const started = await this.dispatch();
    const states = await Promise.all(started);
    return {
      claimed: states.length,
      succeeded: states.filter((s) => s === 'succeeded').length,
      retrying: states.filter((s) => s === 'pending').length,
      dead: states.filter((s) => s === 'dead').length,
      lost: states.filter((s) => s === 'lost').length,
    };
  }

  private async dispatch(): Promise<Array<Promise<AttemptState>>> {
    const { db, clock } = this.options;
    const regular = Math.min(this.batchMax, DELIVERY_CONCURRENCY_MAX - this.inFlight);
    const urgentOnly = regular <= 0;
    const limit = urgentOnly ? Math.min(this.batchMax, URGENT_RESERVE_MAX - this.reservedInFlight) : regular;
    if (limit <= 0) return [];
    const nowMs = clock.nowMs();
    const token = randomUUID();
    const claimed = await db.transaction((tx) =>
      store.claimDueDeliveries(tx, {
        nowMs,
        limit,
        perEndpoint: ENDPOINT_CONCURRENCY_MAX,
        perUnprovenEndpoint: UNPROVEN_ENDPOINT_CONCURRENCY_MAX,
        failingLimit: Math.max(0, FAILING_CONCURRENCY_MAX - this.failingInFlight),
        lockedUntilMs: nowMs + this.leaseMs,
        token,
        urgentOnly,
      }),
    );
    if (claimed.length === 0) return [];
    // A claim that took all it could (its limit, or an endpoint's share) may have left due deliveries behind: the
    // worker claims again once its attempts end, not at the next poll. Each endpoint took at most four a second per
    // instance, so a merchant with more events than that fell behind for good (found from outside).
    // So does one that took a new receiver's one attempt: its next events wait for its first answer.
    const perAccount = new Map<string, number>();
    for (const row of claimed) perAccount.set(row.account_id, (perAccount.get(row.account_id) ?? 0) + 1);
    const endpointMax = (row: store.ClaimedDeliveryRow) => (row.proven ? ENDPOINT_CONCURRENCY_MAX : UNPROVEN_ENDPOINT_CONCURRENCY_MAX);
    const endpointFull = claimed.some((row) => perAccount.get(row.account_id)! >= endpointMax(row));
    if (claimed.length >= limit || endpointFull) this.full.add(token);
    this.claims.set(token, claimed.length);
    this.inFlight += claimed.length;
    this.failingInFlight += claimed.filter((row) => row.failing).length;
    if (urgentOnly) this.reservedInFlight += claimed.length;
    this.startHeartbeat();
    return claimed.map((row) => this.track(this.attempt(row, token).finally(() => this.finished(token, row.failing, urgentOnly))));
  }

  private finished(token: string, failing: boolean, reserved: boolean): void {
    this.inFlight -= 1;
    if (failing) this.failingInFlight -= 1;
    if (reserved) this.reservedInFlight -= 1;
    const left = (this.claims.get(token) ?? 1) - 1;
    if (left > 0) {
      this.claims.set(token, left);
    } else {
      this.claims.delete(token);
      if (this.full.delete(token)) this.wakeAt(this.options.clock.nowMs());
    }
    if (this.claims.size === 0) {
      clearInterval(this.heartbeat);
      this.heartbeat = undefined;
    }
  }

  private startHeartbeat(): void {
    if (this.heartbeat) return;
    this.heartbeat = setInterval(() => {
      void this.track(
        store
          .extendClaims(this.options.db, [...this.claims.keys()], this.options.clock.nowMs() + this.leaseMs)
          .catch((error: unknown) => this.options.log.warn({ err: error }, 'webhook claim heartbeat failed; another instance may take the deliveries over')),
      );
    }, Math.max(100, Math.floor(this.leaseMs / 3)));
    this.heartbeat.unref();
  }

  /** A retry gets its own pass at its due time, so "5 s" means 5 s, whatever other retries are due before it. */
  private wakeAt(atMs: number): void {
    if (!this.background) return;
    const wakes = this.wakes;
    let at = wakes.length;
    while (at > 0 && wakes[at - 1]! > atMs) at -= 1;
    if (wakes[at - 1] !== atMs) wakes.splice(at, 0, atMs);
    // Bounded: the latest are dropped first, and the poll still takes them.
    if (wakes.length > WAKES_MAX) wakes.length = WAKES_MAX;
    this.armWake();
  }

  /** The timer, set for the earliest time owed. */
  private armWake(): void {
    const next = this.wakes[0];
    if (next === undefined || (this.wake && this.wake.atMs <= next)) return;
    if (this.wake) clearTimeout(this.wake.timer);
    // A pass woken by an operation (soon) is background work, not part of that request's trace.
    const timer = detached(() =>
      setTimeout(() => {
        this.wake = undefined;
        // A timer may fire before the clock reads its time (Node's timers run on a monotonic clock, a millisecond or so
        // ahead of the wall clock, and the clock may be set back): a pass now would find the retry not yet due, and
        // nothing would wake for it before the poll (a flaky CI run: a retry owed at 5 s not made in 10). So it waits
        // for the rest.
        if (this.options.clock.nowMs() < next) {
          this.armWake();
          return;
        }
        // What was owed by now is served by this pass.
        const servedMs = this.options.clock.nowMs();
        while (this.wakes.length > 0 && this.wakes[0]! <= servedMs) this.wakes.shift();
        void this.track(this.dispatch().catch((error: unknown) => logBackgroundFailure(this.options.log, error, {}, 'webhook retry pass')));
        this.armWake();
      }, Math.max(0, next - this.options.clock.nowMs())),
    );
    timer.unref();
    this.wake = { timer, atMs: next };
  }

  /** A secret is sealed with its account's id (merchant or owner) as associated data. */
  private open(sealed: string, accountId: string): string {
    const { secretBoxKey } = this.options;
    if (!secretBoxKey) throw new SecretBoxError('no secret box key');
    return openSecret(secretBoxKey, sealed, accountId);
  }

  private async send(row: store.ClaimedDeliveryRow): Promise<AttemptOutcome> {
    let secret: string;
    let previousSecret: string | undefined;
    try {
      secret = this.open(row.secret_sealed, row.account_id);
      previousSecret = row.previous_secret_sealed === null ? undefined : this.open(row.previous_secret_sealed, row.account_id);
    } catch (error) {
      if (!(error instanceof SecretBoxError)) throw error;
      // The key changed or is missing: an operator problem. The delivery waits on its schedule meanwhile.
      this.options.log.error({ deliveryId: row.id, accountId: row.account_id }, 'webhook secret cannot be opened; check ACG_SECRET_BOX_KEY');
      return { ok: false, error: 'secret_unavailable', message: 'the signing secret cannot be opened; nothing was sent', durationMs: 0 };
    }
    return sendWebhookAttempt(
      // The stored event JSON is the payload; the event id is the webhook-id on every attempt.
      { url: row.url, secret, previousSecret, messageId: row.event_id, payload: JSON.parse(row.payload) as unknown },
      {
        clock: this.options.clock,
        allowPrivateNetworkTargets: this.options.allowPrivateNetworkTargets,
        ca: this.options.ca,
        testHooks: this.options.testHooks,
      },
    );
  }

  private attempt(row: store.ClaimedDeliveryRow, token: string): Promise<AttemptState> {
    const { log, metrics, clock } = this.options;
    metrics?.webhookDeliveryLag.observe(Math.max(0, clock.nowMs() - Number(row.due_at_ms)) / 1000);
    return inSpan('webhook attempt', () => attemptSpan(row), async (span) => {
      let state: AttemptState;
      try {
        state = await this.attemptAndRecord(row, token, span);
      } catch (error) {
        // The database went away mid-attempt (an outage, a failover): the claim lapses and another pass retries.
        logBackgroundFailure(log, error, { deliveryId: row.id, accountId: row.account_id }, 'recording a webhook attempt');
        state = 'lost';
      }
      metrics?.webhookAttempts.inc({ outcome: ATTEMPT_OUTCOMES[state] });
      if (span) setSpanAttributes(span, { 'acg.webhook.outcome': ATTEMPT_OUTCOMES[state] });
      return state;
    });
  }

  private async attemptAndRecord(row: store.ClaimedDeliveryRow, token: string, span: SpanRef | undefined): Promise<AttemptState> {
    const { db, clock, log } = this.options;
    const outcome = await this.send(row);
    if (span) setSpanAttributes(span, { 'http.response.status_code': outcome.status, 'error.type': outcome.error });
    // A refused attempt returns its outcome rather than throwing it: the span is failed here, named by the status or the code.
    if (!outcome.ok) failSpan(span, outcome.status === undefined ? (outcome.error ?? 'failed') : `HTTP ${outcome.status}`);
    const nowMs = clock.nowMs();
    const delayS = outcome.ok ? null : nextAttemptDelayS(row.attempts);
    const state: store.DeliveryState = outcome.ok ? 'succeeded' : delayS === null ? 'dead' : 'pending';
    const nextAttemptAtMs = delayS === null ? nowMs : nowMs + delayS * 1000;
    const fields = {
      deliveryId: row.id,
      eventId: row.event_id,
      accountId: row.account_id,
      attempts: row.attempts,
      status: outcome.status,
      error: outcome.error,
      message: outcome.message,
    };
    const { recorded, disabled } = await db.transaction(async (tx) => {
      const recorded = await store.recordAttempt(tx, {
        id: row.id,
        token,
        state,
        nextAttemptAtMs,
        status: outcome.status ?? null,
        error: outcome.error ?? null,
        message: outcome.message ?? null,
        finishedAtMs: nowMs,
        durationMs: outcome.durationMs,
        deliveredAtS: outcome.ok ? Math.floor(nowMs / 1000) : null,
      });
      // A lost claim's attempt is not the endpoint's to count: the delivery is another worker's, or its endpoint
      // was deleted, and a new endpoint of the same account must not inherit the old receiver's failures.
      if (!recorded) return { recorded, disabled: false };
      if (outcome.ok) {
        await store.endpointSucceeded(tx, row.account_id);
        return { recorded, disabled: false };
      }
      return { recorded, disabled: await this.endpointFailed(tx, row, nowMs) };
    });
    if (disabled) log.warn({ accountId: row.account_id }, 'webhook endpoint disabled: every attempt failed for the auto-disable period');
    if (!recorded) {
      log.warn(fields, 'webhook attempt made after its claim was lost; the new owner of the delivery records its own');
      return 'lost';
    }
    if (state === 'dead') log.warn(fields, 'webhook delivery dead-lettered after the last scheduled attempt');
    else log.info({ ...fields, state }, 'webhook attempt');
    if (state === 'pending') this.wakeAt(nextAttemptAtMs);
    return state;
  }

  /**
   * Counts a failure against the endpoint: opens its circuit past the threshold, disables it past the
   * period. A merchant gets a `webhook.disabled` event (listed by its events API); an owner, who has no
   * events API, reads `disabledReason: failing` on GET /v1/owner/webhook.
   */
  private async endpointFailed(tx: Queryable, row: store.ClaimedDeliveryRow, nowMs: number): Promise<boolean> {
    const nowS = Math.floor(nowMs / 1000);
    const accountId = row.account_id;
    const run = await store.endpointFailed(tx, accountId, { nowS, startedAtMs: Number(row.started_at_ms) });
    if (!run) return false;
    if (nowS - Number(run.failing_since_s) >= AUTO_DISABLE_AFTER_S) {
      if (!(await store.disableFailingEndpoint(tx, accountId, nowS))) return false;
      if (row.merchant_id !== null) {
        await emitEvent(tx, {
          merchantId: row.merchant_id,
          type: 'webhook.disabled',
          data: { webhook: { reason: 'failing', failingSince: Number(run.failing_since_s), consecutiveFailures: run.consecutive_failures } },
          nowMs,
        });
      }
      return true;
    }
    // An attempt that started before the circuit opened, or while it was open, neither lengthens it nor steps it up.
    const beyond = run.consecutive_failures - CIRCUIT_FAILURES_THRESHOLD;
    if (run.counted && beyond >= 0) await store.openCircuit(tx, accountId, nowMs + Math.min(CIRCUIT_OPEN_MAX_MS, CIRCUIT_OPEN_BASE_MS * 2 ** Math.min(beyond, 20)));
    return false;
  }
}
