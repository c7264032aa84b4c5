// What a credential's check reads that can be revoked: the agent of an identity (with its owner's verified
// email, which binds the identity's tokens), a merchant API key's row, the access-token deny-list. Each kind
// is read in coalesced statements (read-coalescer.ts) and what a read found is kept for at most `lifetimeMs`
// after that read was asked; every revocation (a key revoked, an owner's email changed, access tokens denied)
// answers only once `lifetimeMs` has passed since it committed. So when a revocation answers, no instance holds
// anything read before it: it holds everywhere from the next request, as when every request read the database,
// and a busy gateway reads an agent's or a key's row once per lifetime instead of once per request
// (docs/decisions.md "Credential facts are kept two seconds; a revocation answers once it holds everywhere").
//
// Kept by the monotonic clock (`performance.now()`), never the gateway's clock, which tests move: the lifetime
// and the revocation's wait are both real time. A revocation empties at once the facts of every gateway of this
// process on the same database; on PGlite, whose database no other process opens, it need not wait.
//
// Instances may keep facts for different lifetimes (ACG_CREDENTIAL_FACTS_MS is each one's own setting, and a
// rolling change of it runs old and new side by side): each instance on PostgreSQL announces its lifetime in the
// database (`AnnouncedLifetimes`), and a revocation waits out the longest one announced by an instance still
// there, so it holds on all of them when it answers (docs/decisions.md "A revocation waits out the longest
// lifetime any instance announced").
import { performance } from 'node:perf_hooks';
import type { Queryable } from './db/database.ts';
import { newId } from './ids.ts';
import type { Metrics } from './metrics.ts';
import { ReadCoalescer, type CoalescerLimits } from './read-coalescer.ts';

/** How long a credential fact is kept by default, and how long a revocation waits before it answers. */
export const CREDENTIAL_FACTS_MS_DEFAULT = 2_000;
/** The longest lifetime an instance may keep facts for (ACG_CREDENTIAL_FACTS_MS's bound). */
export const CREDENTIAL_FACTS_MS_MAX = 10_000;
/** How often an instance announces its lifetime again, and how long an announcement counts without one. */
export const LIFETIME_ANNOUNCE_INTERVAL_MS = 30_000;
export const LIFETIME_ANNOUNCEMENT_COUNTS_S = 90;
/**
 * How long after its last announcement went out an instance still keeps facts: well inside the 90 s the others
 * count it, so a fact it keeps (10 s at most) expires before they stop waiting for it, whatever the two clocks.
 */
export const LIFETIME_ANNOUNCEMENT_KEEPS_MS = 60_000;
/** Entries one kind keeps at most; the oldest go first. */
export const CREDENTIAL_FACTS_ENTRIES_MAX = 10_000;

interface Entry<V> {
  value: V | undefined;
  untilMs: number;
}

export interface FactReadOptions {
  /** The kind, as metrics name it (`agent_identity`, `api_key`, …). */
  kind: string;
  /** Keep "not found" too: for a deny-list, where absence is the fact (an id found nowhere else is read again). */
  keepMisses?: boolean;
  limits: CoalescerLimits;
}

/** One kind of fact: a coalesced read whose answers are kept for the lifetime. */
export class FactReads<K, V> {
  private readonly entries = new Map<string, Entry<V>>();
  private readonly reads: ReadCoalescer<K, V>;
  private readonly outcomes;

  constructor(
    private readonly facts: CredentialFacts,
    readMany: (keys: readonly K[]) => Promise<Map<string, V>>,
    private readonly idOf: (key: K) => string,
    private readonly options: FactReadOptions,
  ) {
    this.reads = new ReadCoalescer(readMany, idOf, options.limits);
    const counter = facts.metrics?.credentialFactReads;
    this.outcomes = counter && { kept: counter.labels({ kind: options.kind, outcome: 'kept' }), read: counter.labels({ kind: options.kind, outcome: 'read' }) };
  }

  /** The fact for `key`: kept, or read (in a statement sent after this call, so it sees what committed before it). */
  async read(key: K): Promise<V | undefined> {
    const id = this.idOf(key);
    const { lifetimeMs } = this.facts;
    const entry = this.entries.get(id);
    if (entry !== undefined) {
      if (performance.now() < entry.untilMs) {
        this.outcomes?.kept.inc();
        return entry.value;
      }
      this.entries.delete(id);
    }
    this.outcomes?.read.inc();
    const askedMs = performance.now();
    const generation = this.facts.generation;
    const value = await this.reads.read(key);
    // Kept from when it was asked (the read went out after it), and not at all when a revocation on this
    // instance came in the meantime (the read may have seen what was revoked), nor while the other instances may
    // no longer count this one's lifetime (its announcements failing).
    if (lifetimeMs > 0 && (value !== undefined || this.options.keepMisses) && generation === this.facts.generation && this.facts.keeps()) {
      this.entries.delete(id);
      this.entries.set(id, { value, untilMs: askedMs + lifetimeMs });
      if (this.entries.size > CREDENTIAL_FACTS_ENTRIES_MAX) this.entries.delete(this.entries.keys().next().value!);
    }
    return value;
  }

  /** Forgets every fact kept (a revocation). */
  forget(): void {
    this.entries.clear();
  }

  /** Facts kept now, expired or not (tests). */
  get size(): number {
    return this.entries.size;
  }
}

/**
 * The lifetimes the instances sharing a database keep credential facts for, one row each in
 * `credential_fact_lifetimes` (migration 0029), dated by the database's clock: every instance sees the same time,
 * whatever its own clock says. An instance announces its lifetime before it serves (`announce`), again every
 * 30 s, and withdraws it when it stops cleanly; one that stopped otherwise counts for 90 s after its last
 * announcement, longer than any fact it could still keep. An instance whose announcements fail (its database
 * unreachable) stops keeping facts 60 s after the last one that went through (`counted`), so the others never stop
 * waiting for an instance that still keeps something.
 */
export class AnnouncedLifetimes {
  readonly instanceId = newId('ins');
  private timer: NodeJS.Timeout | undefined;
  /** When the last announcement that went through was sent (monotonic clock); undefined before the first. */
  private announcedAtMs: number | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly lifetimeMs: number,
  ) {}

  /** Announces this instance's lifetime now, and every 30 s after (a failed announcement is retried then). */
  async announce(): Promise<void> {
    await this.write();
    this.timer ??= setInterval(() => void this.write().catch(() => {}), LIFETIME_ANNOUNCE_INTERVAL_MS).unref();
  }

  private async write(): Promise<void> {
    const sentMs = performance.now();
    await this.db.query(
      `INSERT INTO credential_fact_lifetimes (instance_id, lifetime_ms, seen_at_s) VALUES ($1, $2, floor(extract(epoch FROM now()))::bigint)
       ON CONFLICT (instance_id) DO UPDATE SET lifetime_ms = EXCLUDED.lifetime_ms, seen_at_s = EXCLUDED.seen_at_s`,
      [this.instanceId, this.lifetimeMs],
    );
    this.announcedAtMs = sentMs;
  }

  /** Whether the other instances count this one now, so it may keep what it reads. */
  counted(): boolean {
    return this.announcedAtMs !== undefined && performance.now() - this.announcedAtMs < LIFETIME_ANNOUNCEMENT_KEEPS_MS;
  }

  /**
   * The longest lifetime announced by an instance still counted, this one's included. When the database cannot
   * say, the longest any instance may keep: the revocation has committed, and waiting longer loses nothing.
   */
  async longestMs(): Promise<number> {
    try {
      const { rows } = await this.db.query<{ longest_ms: number | null }>(
        `SELECT max(lifetime_ms) AS longest_ms FROM credential_fact_lifetimes
          WHERE seen_at_s >= floor(extract(epoch FROM now()))::bigint - $1`,
        [LIFETIME_ANNOUNCEMENT_COUNTS_S],
      );
      return Math.max(this.lifetimeMs, rows[0]?.longest_ms ?? 0);
    } catch {
      return CREDENTIAL_FACTS_MS_MAX;
    }
  }

  /** This instance stops: it keeps no more facts, so revocations no longer wait for it (best effort). */
  async withdraw(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    this.announcedAtMs = undefined;
    await this.db.query('DELETE FROM credential_fact_lifetimes WHERE instance_id = $1', [this.instanceId]).catch(() => {});
  }
}

export interface CredentialFactsOptions {
  /** How long a fact is kept, and a revocation waits (0: nothing is kept, and a revocation does not wait). */
  lifetimeMs: number;
  /** The database the facts are read from: gateways of this process on the same one forget together. */
  database: object;
  /** Whether other processes may share the database (PostgreSQL): a revocation then waits out their facts. */
  shared: boolean;
  /** Where the instances sharing the database announce their lifetimes: a revocation waits out the longest. */
  announced?: AnnouncedLifetimes;
  metrics?: Metrics;
}

/** The credential facts of each database's gateways in this process. */
const onDatabase = new WeakMap<object, Set<CredentialFacts>>();

export class CredentialFacts {
  readonly lifetimeMs: number;
  readonly metrics: Metrics | undefined;
  /** Counts this instance's revocations: a read asked before one is not kept. */
  generation = 0;
  private readonly kinds: Array<FactReads<never, unknown>> = [];
  private readonly shared: boolean;
  private readonly announced: AnnouncedLifetimes | undefined;
  private readonly peers: Set<CredentialFacts>;

  constructor(options: CredentialFactsOptions) {
    this.lifetimeMs = options.lifetimeMs;
    this.shared = options.shared;
    this.announced = options.announced;
    this.metrics = options.metrics;
    let peers = onDatabase.get(options.database);
    if (!peers) onDatabase.set(options.database, (peers = new Set()));
    this.peers = peers.add(this);
  }

  /** Whether a fact read now may be kept: always, but where other instances count this one, only while they do. */
  keeps(): boolean {
    return this.announced?.counted() ?? true;
  }

  /** This gateway is closing: a revocation no longer has its facts to forget. */
  close(): void {
    this.peers.delete(this);
  }

  /** A kind of fact, read with `readMany` (what it found, by `idOf`). */
  reads<K, V>(readMany: (keys: readonly K[]) => Promise<Map<string, V>>, idOf: (key: K) => string, options: FactReadOptions): FactReads<K, V> {
    const reads = new FactReads(this, readMany, idOf, options);
    this.kinds.push(reads as unknown as FactReads<never, unknown>);
    return reads;
  }

  /**
   * A revocation has committed: this process's gateways forget every fact at once, and, where other processes may have
   * read before the commit, the caller's answer waits until what they read has expired: the longest lifetime an
   * instance announced (this one's own when none is known). Call it after the commit, before answering (and on a
   * replay of that answer, which may come before the first one's wait ended).
   */
  async revoked(): Promise<void> {
    const startedMs = performance.now();
    for (const facts of this.peers) {
      facts.generation += 1;
      for (const kind of facts.kinds) kind.forget();
    }
    if (!this.shared) return;
    const untilMs = startedMs + (this.announced ? await this.announced.longestMs() : this.lifetimeMs);
    // A timer may fire up to a millisecond early by the monotonic clock (the event loop's time is whole
    // milliseconds, taken at the start of its turn): wait again until the whole lifetime has passed.
    for (let leftMs = untilMs - performance.now(); leftMs > 0; leftMs = untilMs - performance.now()) {
      await new Promise((resolve) => setTimeout(resolve, Math.ceil(leftMs)));
    }
  }
}
