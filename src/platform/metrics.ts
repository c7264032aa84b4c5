// The Prometheus metrics of one gateway (`/metrics`), each documented in docs/operations.md. Labels are
// bounded sets: route patterns (never raw paths), operation and batcher names, error codes of the catalogue.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { ApiError, unexpectedAsApiError } from './errors.ts';

/** What an operation's Idempotency-Key did: a new request, a stored answer replayed, or a refusal over the key. */
export type IdempotencyOutcome = 'new' | 'replay' | 'conflict' | 'unclaimed';

/** How long a scrape waits for the outbox's read, as /readyz waits for the database. */
const OUTBOX_READ_WAIT_MS = 1_000;

/** The outbox as a scrape sees it: deliveries waiting, and how long the longest-due one has been due. */
export interface OutboxBacklog {
  pending: number;
  /** Seconds since the earliest pending delivery became due; 0 when none is due. */
  oldestDueAgeS: number;
}

const LATENCY_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/**
 * How often the event loop's delay is sampled (`acg_nodejs_eventloop_lag_*`). prom-client's default, 10 ms, is a
 * timer that wakes an idle gateway 100 times a second (measured on an idle gateway on PostgreSQL, its pollers
 * running: 210 `epoll_pwait` calls a second and 31–41 ticks of CPU in 30 s, against 47 calls and 23–25 ticks at
 * 100 ms). At 100 ms the lag figures keep their meaning (a stall delays the next sample by its length); a stall
 * shorter than the interval is seen when it covers a sample's due time.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests = new Counter({
    name: 'acg_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: 'acg_http_request_duration_seconds',
    help: 'Time from request to response, by method and route pattern',
    labelNames: ['method', 'route'] as const,
    buckets: LATENCY_BUCKETS_S,
    registers: [this.registry],
  });
  readonly tokenVerifications = new Counter({
    name: 'acg_bearer_token_verifications_total',
    help: 'Bearer JWTs presented, by outcome: verified (signature and claims checked) or reused (an earlier verification of the same token)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly credentialFactReads = new Counter({
    name: 'acg_credential_fact_reads_total',
    help: 'Revocable credential facts a request needed (an agent of an identity, a merchant key, the access-token deny-list), by kind and outcome: kept (read within the last lifetime) or read',
    labelNames: ['kind', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly operations = new Counter({
    name: 'acg_operations_total',
    help: 'Operations asked (HTTP and MCP alike), by operation, idempotency outcome (new, replay, conflict; unclaimed: refused before any key was claimed, while its credential, its input or its key was checked) and result (ok, refused: an answer below 500, failed: 500 and above)',
    labelNames: ['operation', 'idempotency', 'result'] as const,
    registers: [this.registry],
  });
  readonly operationErrors = new Counter({
    name: 'acg_operation_errors_total',
    help: 'Operations answered with an error, by operation and error code (refusals and failures)',
    labelNames: ['operation', 'code'] as const,
    registers: [this.registry],
  });
  readonly operationDuration = new Histogram({
    name: 'acg_operation_duration_seconds',
    help: 'Time an operation took, from its first step to its answer (a group-commit wait included), by operation',
    labelNames: ['operation'] as const,
    buckets: LATENCY_BUCKETS_S,
    registers: [this.registry],
  });
  readonly batchSize = new Histogram({
    name: 'acg_batch_size',
    help: 'Calls per group-commit batch, by batcher (an operation name, or execute\'s executeHold and executeCapture)',
    labelNames: ['batcher'] as const,
    buckets: [1, 2, 4, 8, 16, 32, 64],
    registers: [this.registry],
  });
  private readonly batchQueues = new Map<string, () => number>();
  readonly batchQueueDepth = new Gauge({
    name: 'acg_batch_queue_depth',
    help: 'Calls waiting for a group-commit batch, by batcher, at the scrape (503 overloaded past 1024)',
    labelNames: ['batcher'] as const,
    registers: [this.registry],
    collect: () => {
      for (const [batcher, depth] of this.batchQueues) this.batchQueueDepth.set({ batcher }, depth());
    },
  });
  readonly webhookAttempts = new Counter({
    name: 'acg_webhook_attempts_total',
    help: 'Webhook delivery attempts, by outcome: succeeded, retrying (failed, another attempt scheduled), dead (failed, the last attempt), lost (its claim lapsed meanwhile)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly webhookDeliveryLag = new Histogram({
    name: 'acg_webhook_delivery_lag_seconds',
    help: 'Time from when a webhook attempt was due (its event, or the time of its retry) to when it started; every attempt, whatever its outcome',
    buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 36000, 86400],
    registers: [this.registry],
  });
  private outboxReader: (() => Promise<OutboxBacklog>) | undefined;
  /** The scrape's one read of the outbox: both gauges collect at once (prom-client collects every metric together). */
  private outboxRead: Promise<void> | undefined;
  readonly outboxPending = new Gauge({
    name: 'acg_webhook_outbox_pending',
    help: 'Webhook deliveries waiting in the outbox (pending: due now or scheduled for a retry), at the scrape',
    registers: [this.registry],
    collect: () => this.readOutbox(),
  });
  readonly outboxOldestDueAge = new Gauge({
    name: 'acg_webhook_outbox_oldest_due_age_seconds',
    help: 'How long the earliest-due pending webhook delivery has been due, at the scrape (0 when none is due)',
    registers: [this.registry],
    collect: () => this.readOutbox(),
  });
  readonly outboxReadOk = new Gauge({
    name: 'acg_webhook_outbox_read_ok',
    help: 'Whether the scrape read the outbox (1), or the database did not answer within 1 s and the two outbox gauges keep their last values (0)',
    registers: [this.registry],
    collect: () => this.readOutbox(),
  });

  constructor(options: { processMetrics: boolean }) {
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'acg_', eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  }

  /** One answered operation: its rate (by result and idempotency outcome), its error code if any, its duration. */
  operationAnswered(operation: string, idempotency: IdempotencyOutcome, error: unknown, durationS: number): void {
    const result = error === undefined ? 'ok' : error instanceof ApiError && error.status < 500 ? 'refused' : 'failed';
    this.operations.inc({ operation, idempotency, result });
    if (error !== undefined) this.operationErrors.inc({ operation, code: unexpectedAsApiError(error).code });
    this.operationDuration.observe({ operation }, durationS);
  }

  /**
   * An operation's request refused while its credential was checked, before it ran (an outage while the credential
   * was read, a token refused, a rate limit): counted under its operation, with no key claimed and no duration, so a
   * database outage shows in the operations' errors, not only in the HTTP requests' (found from outside: 62 of 101
   * mint 503s were missing there).
   */
  operationRefusedBeforeRun(operation: string, error: unknown): void {
    const refusal = unexpectedAsApiError(error);
    this.operations.inc({ operation, idempotency: 'unclaimed', result: refusal.status < 500 ? 'refused' : 'failed' });
    this.operationErrors.inc({ operation, code: refusal.code });
  }

  /** A batcher whose queue the scrape reports (the last one registered under a name counts). */
  watchBatchQueue(batcher: string, depth: () => number): void {
    this.batchQueues.set(batcher, depth);
  }

  /** Where the outbox gauges read from at each scrape (the events feature's SQL). */
  readOutboxWith(reader: () => Promise<OutboxBacklog>): void {
    this.outboxReader = reader;
  }

  /**
   * Both outbox gauges from one read, waited for at most OUTBOX_READ_WAIT_MS: a database that does not answer leaves
   * them as they were, and says so (`acg_webhook_outbox_read_ok` 0), so the scrape answers in time and stale values are
   * told apart (found from outside: a stalled database held /metrics 6 s, and the gauges kept their last values
   * silently). A read still running is shared by the next scrapes rather than started again.
   */
  private readOutbox(): Promise<void> {
    const reader = this.outboxReader;
    if (!reader) return Promise.resolve();
    this.outboxRead ??= (async () => {
      try {
        const backlog = await reader();
        this.outboxPending.set(backlog.pending);
        this.outboxOldestDueAge.set(backlog.oldestDueAgeS);
        this.outboxReadOk.set(1);
      } catch {
        // /metrics answers while the database is away; /readyz is what reports the database.
        this.outboxReadOk.set(0);
      } finally {
        this.outboxRead = undefined;
      }
    })();
    const read = this.outboxRead;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.outboxReadOk.set(0);
        resolve();
      }, OUTBOX_READ_WAIT_MS);
    });
    return Promise.race([read, late]).finally(() => clearTimeout(timer));
  }
}
