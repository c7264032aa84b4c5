// Group commit: concurrent requests are gathered and handed to one runner call (one database transaction),
// so the commit, its WAL flush and a hot row's lock are paid once per batch instead of once per request
// (TigerBeetle's lesson). The gathering window is the time the running batch takes: with nothing running,
// a request runs at once (idle latency is unchanged); under load, what arrives meanwhile forms the next batch.
// Bounded everywhere: a batch has at most `batchSizeMax` items, at most `batchesInFlightMax` run at once,
// and at most `queueLengthMax` wait; beyond that a request is refused at once with 503 `overloaded`.
// A batch gathers calls in arrival order; two batches running at once never share an order key (an agent),
// so a key's calls never overtake one another.
// Observed here, once for every group commit: each batch's size (a histogram) and the queue's depth (a gauge
// read at the scrape); when tracing, each batch is a span, a child of its first call's span (whose request
// started it waiting first) linking to every call's span, and every call's span links back to it with the
// batch size: a batch serves many traces, so a link, not a parent, joins each of them to it.
import { storageFailureOf } from './db/faults.ts';
import { ApiError } from './errors.ts';
import type { Metrics } from './metrics.ts';
import { starter } from './next-turn.ts';
import { activeSpan, endSpan, linkSpan, startSpan, tracing, withinSpan, type SpanRef } from './telemetry.ts';

export interface BatchLimits {
  batchSizeMax: number;
  batchesInFlightMax: number;
  queueLengthMax: number;
  /** Retry-After of the 503 when the queue is full. */
  retryAfterS: number;
  /**
   * Start a batch only after one turn of the event loop (setImmediate), so the requests already received
   * reach the queue first. For an embedded database (PGlite) whose statements run on this thread: there a
   * request's whole path runs without yielding, and without this every batch would hold one call.
   */
  gatherOneTurn?: boolean;
}

/** What a batch run answers for one item: its value, or the error that item alone throws. */
export type Settled<R> = { ok: true; value: R } | { ok: false; error: unknown };

/** The value of one settled item, or its error thrown (a call alone, answered through the batch path). */
export function unwrap<R>(settled: Settled<R>): R {
  if (!settled.ok) throw settled.error;
  return settled.value;
}

/**
 * Applies the items together; if that throws (a fault, not one item's answer), applies each alone, in
 * order, so one bad item fails only itself and the others still get their answers. An unreachable database
 * is every item's answer at once (503 storage_unavailable, retried by the caller with its key): applying each
 * alone would only wait for it again, a stalled server's timeout once per item; so is a full pool, where each
 * item alone would wait for a connection again.
 */
export async function togetherOrAlone<T, R>(items: readonly T[], apply: (some: readonly T[]) => Promise<Array<Settled<R>>>): Promise<Array<Settled<R>>> {
  try {
    return await apply(items);
  } catch (error) {
    const storage = storageFailureOf(error)?.kind;
    if (items.length === 1 || storage === 'unreachable' || storage === 'saturated') return items.map(() => ({ ok: false, error }));
    const alone: Array<Settled<R>> = [];
    for (const item of items) {
      try {
        alone.push((await apply([item]))[0]!);
      } catch (fault) {
        alone.push({ ok: false, error: fault });
      }
    }
    return alone;
  }
}

interface Entry<T, R> {
  item: T;
  orderKey: string;
  /** The submitting call's span, when tracing. */
  span: SpanRef | undefined;
  resolve: (value: R) => void;
  reject: (error: unknown) => void;
}

/** What names a batcher in metrics and traces, and where its metrics go. */
export interface BatcherIdentity {
  /** An operation name, or the name of a service's own batcher (execute's executeHold, executeCapture). */
  name: string;
  metrics?: Metrics;
}

export class Batcher<T, R> {
  private readonly queue: Array<Entry<T, R>> = [];
  private readonly busyKeys = new Map<string, number>();
  private inFlight = 0;
  private paused = false;
  /** Starts what can start, now or after one turn of the event loop (gatherOneTurn). */
  private readonly next = starter(() => this.pump(), () => this.limits.gatherOneTurn);

  constructor(
    /** Runs one batch; answers one Settled per item, in the items' order. It must not throw. */
    private readonly runBatch: (items: readonly T[]) => Promise<Array<Settled<R>>>,
    private readonly orderKeyOf: (item: T) => string,
    public limits: BatchLimits,
    private readonly identity: BatcherIdentity = { name: 'batch' },
  ) {
    identity.metrics?.watchBatchQueue(identity.name, () => this.queue.length);
  }

  /** Items waiting for a batch. */
  get queued(): number {
    return this.queue.length;
  }

  submit(item: T): Promise<R> {
    if (this.queue.length >= this.limits.queueLengthMax) {
      return Promise.reject(
        new ApiError('overloaded', {
          detail: `the gateway has ${this.queue.length} requests of this kind waiting; retry after the delay`,
          retryAfterS: this.limits.retryAfterS,
        }),
      );
    }
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, orderKey: this.orderKeyOf(item), span: activeSpan(), resolve, reject });
      this.next();
    });
  }

  /** Holds every item in the queue until resume() (tests use it to gather a batch deterministically). */
  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.pump();
  }

  private pump(): void {
    while (!this.paused && this.inFlight < this.limits.batchesInFlightMax && this.queue.length > 0) {
      const batch = this.take();
      if (batch.length === 0) return;
      this.inFlight += 1;
      for (const entry of batch) this.busyKeys.set(entry.orderKey, (this.busyKeys.get(entry.orderKey) ?? 0) + 1);
      void this.run(batch);
    }
  }

  /** The batch's span (see the file header); the calls' spans link to it before it runs. */
  private startSpan(batch: ReadonlyArray<Entry<T, R>>): SpanRef | undefined {
    const size = batch.length;
    const traced = batch.flatMap((entry) => (entry.span ? [entry.span] : []));
    const parent = batch[0]!.span;
    const span = startSpan(`batch ${this.identity.name}`, {
      parent: parent ?? null,
      attributes: { 'acg.batch.name': this.identity.name, 'acg.batch.size': size },
      links: traced.filter((call) => call !== parent).map((call) => ({ span: call })),
    });
    for (const call of traced) linkSpan(call, span, { 'acg.batch.size': size });
    return span;
  }

  /**
   * The next batch: queued calls in arrival order, up to the batch size, skipping every call whose order key
   * a running batch holds (those wait for it, so one key's calls never overtake one another). A batch may
   * hold many keys: its executor applies them set-based (one statement per step for the whole batch).
   */
  private take(): Array<Entry<T, R>> {
    const batch: Array<Entry<T, R>> = [];
    const kept: Array<Entry<T, R>> = [];
    for (const entry of this.queue) {
      if (batch.length < this.limits.batchSizeMax && !this.busyKeys.has(entry.orderKey)) batch.push(entry);
      else kept.push(entry);
    }
    this.queue.splice(0, this.queue.length, ...kept);
    return batch;
  }

  private async run(batch: Array<Entry<T, R>>): Promise<void> {
    this.identity.metrics?.batchSize.observe({ batcher: this.identity.name }, batch.length);
    const span = tracing() ? this.startSpan(batch) : undefined;
    let outcomes: Array<Settled<R>>;
    try {
      outcomes = await withinSpan(span, () => this.runBatch(batch.map((entry) => entry.item)));
      if (outcomes.length !== batch.length) throw new Error(`batch invariant: ${outcomes.length} outcomes for ${batch.length} items`);
      // A batch answers failures as outcomes, never by throwing: one that is not a refusal (its transaction failed,
      // the database went away) fails the batch's span too (found from outside: status unset during an outage).
      // Looked for only when traced: an untraced batch (the bench's, most production) pays nothing for it.
      const failed = span && outcomes.find((outcome) => !outcome.ok && !(outcome.error instanceof ApiError && outcome.error.status < 500));
      endSpan(span, failed && !failed.ok ? failed.error : undefined);
    } catch (error) {
      endSpan(span, error);
      outcomes = batch.map(() => ({ ok: false, error }));
    }
    for (const [index, entry] of batch.entries()) {
      const outcome = outcomes[index]!;
      if (outcome.ok) entry.resolve(outcome.value);
      else entry.reject(outcome.error);
      const count = this.busyKeys.get(entry.orderKey)! - 1;
      if (count === 0) this.busyKeys.delete(entry.orderKey);
      else this.busyKeys.set(entry.orderKey, count);
    }
    this.inFlight -= 1;
    this.next();
  }
}
