// What a database failure means for the caller. A failure of the connection (the server crashed, was
// shut down, is recovering, refuses us, stalls past our timeouts, or has become a read-only replica) is
// not a bug in the request: it becomes ONE error, StorageUnavailableError, which the HTTP edge answers
// as 503 storage_unavailable with Retry-After, and whose connection the pool never hands out again.
// Everything else (constraint violations, bad SQL) stays what it is.

/**
 * `unreachable`: we got no answer (connection refused, lost or stalled past our client-side timeouts), or
 * the server we reached cannot take writes (a standby, e.g. a former primary during a failover): either
 * way the primary is not reachable through this connection.
 * `timeout`: the server answered that our statement or lock wait ran past its bound (statement_timeout,
 * lock_timeout): the database is alive but could not serve this request in time.
 * `saturated`: no connection of this instance's pool came free within the connect timeout: every one was busy
 * (a burst waiting on locks, say). The database answers; this instance asked more of it than its pool holds.
 */
export type StorageFailureKind = 'unreachable' | 'timeout' | 'saturated';

export class StorageUnavailableError extends Error {
  constructor(
    readonly kind: StorageFailureKind,
    cause: unknown,
  ) {
    super(`the database is unavailable (${describeFailure(cause)})`, { cause });
    this.name = 'StorageUnavailableError';
  }
}

/**
 * Server answers meaning "not now": shutting down, crashed, starting or recovering, full; and
 * read_only_sql_transaction (25006), what a hot standby answers every write with ("cannot execute INSERT
 * in a read-only transaction", "cannot execute … during recovery"). Behind HAProxy a connection reaches a
 * standby only in the seconds around a failover, before the health check moves it (deploy/ha/); the
 * gateway itself never opens a read-only transaction that writes.
 */
const UNREACHABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '25006']);
/** query_canceled (statement_timeout) and lock_not_available (lock_timeout). */
const TIMEOUT_SQLSTATES = new Set(['57014', '55P03']);
/** What pg-pool says when no client of a full pool came free in time (`connectionTimeoutMillis`). */
const POOL_WAIT_TIMEOUT = 'timeout exceeded when trying to connect';
/** Socket-level failures reaching the server. */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
/**
 * Failures `pg` and PGlite report without a code: a lost or timed-out connection, a client already
 * broken, a pool or embedded database already closed (shutdown); and a standby's
 * refusal of a write when something on the way dropped its SQLSTATE.
 */
const DRIVER_MESSAGES = [
  /^Connection terminated/,
  // A plain client's (not the pool's) connect timeout: the migrations' own session at start-up.
  /^timeout expired$/,
  /^cannot execute .+ (in a read-only transaction|during recovery)$/,
  /^Query read timeout$/,
  /is not queryable$/,
  /^Cannot use a pool after calling end on the pool$/,
  /^PGlite is closed$/,
];

function codeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}

/**
 * Node's codes for a server certificate its TLS client does not trust (OpenSSL's X509_V_ERR_… without the prefix):
 * no chain to a trusted CA (sslrootcert names another CA, or none), expired or not yet valid, or not a CA where one
 * must be.
 */
const UNTRUSTED_CERTIFICATE_CODES = new Set([
  'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY', 'CERT_SIGNATURE_FAILURE', 'CERT_NOT_YET_VALID', 'CERT_HAS_EXPIRED', 'ERROR_IN_CERT_NOT_BEFORE_FIELD',
  'ERROR_IN_CERT_NOT_AFTER_FIELD', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'CERT_CHAIN_TOO_LONG', 'CERT_REVOKED', 'INVALID_CA',
  'PATH_LENGTH_EXCEEDED', 'INVALID_PURPOSE', 'CERT_UNTRUSTED', 'CERT_REJECTED',
]);
/** Node's code for a trusted certificate that is not for the host connected to (sslmode=verify-full checks it). */
const CERTIFICATE_NAME_MISMATCH = 'ERR_TLS_CERT_ALTNAME_INVALID';

/**
 * What is wrong with the connection settings, when `error` is a refusal of them; the driver's messages name no
 * password (a TLS error names the certificate's names and the host).
 */
function refusalOfSettings(error: Error): string | undefined {
  const code = codeOf(error);
  if (code === '3D000' || code.startsWith('28')) return `${error.message} (SQLSTATE ${code}; check DATABASE_URL)`;
  // sslmode=require (or verify-*) against a server without TLS: the driver's words, no code (found from outside: a stack, exit 1).
  if (error.message === 'The server does not support SSL connections') return 'the server does not support SSL connections (check sslmode in DATABASE_URL)';
  if (UNTRUSTED_CERTIFICATE_CODES.has(code)) return `the server's TLS certificate is not trusted: ${error.message} (${code}; check sslrootcert in DATABASE_URL: it names the file of the CA that issued the server's certificate)`;
  if (code === CERTIFICATE_NAME_MISMATCH) return `the server's TLS certificate is not for the host DATABASE_URL names: ${error.message} (${code}; connect by a name or address the certificate lists)`;
  return undefined;
}

function describeFailure(error: unknown): string {
  const code = codeOf(error);
  const message = error instanceof Error ? error.message : String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}

/** The StorageUnavailableError `error` is, or carries as its cause. */
export function storageFailureOf(error: unknown): StorageUnavailableError | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    if (current instanceof StorageUnavailableError) return current;
  }
  return undefined;
}

/** True for a StorageUnavailableError, also when another error carries one as its cause. */
export function isStorageUnavailable(error: unknown): boolean {
  return storageFailureOf(error) !== undefined;
}

/**
 * The kind of storage failure `error` is (classified already, or a raw driver error), or undefined when
 * it is an ordinary database error, or no database error at all.
 */
export function storageFailureKind(error: unknown): StorageFailureKind | undefined {
  const classified = storageFailureOf(error);
  if (classified) return classified.kind;
  const code = codeOf(error);
  if (TIMEOUT_SQLSTATES.has(code)) return 'timeout';
  if (UNREACHABLE_SQLSTATES.has(code) || code.startsWith('08') || NETWORK_CODES.has(code)) return 'unreachable';
  // The database or the role gone, the password changed, or the server's certificate no longer trusted, while the
  // gateway runs: no request is at fault, and what cures it (recreating it, a new DATABASE_URL or certificate) is the
  // operator's, as for a server that went away. At start-up the same refusal is not retried
  // (connectionSettingsRefusal): it is said in one line, exit 2.
  if (error instanceof Error && refusalOfSettings(error) !== undefined) return 'unreachable';
  // An aborted embedded engine (PGlite's WebAssembly) answers nothing until the process restarts.
  if (error instanceof WebAssembly.RuntimeError) return 'unreachable';
  const message = error instanceof Error ? error.message : '';
  // pg-pool's wait for a free client of a full pool; a new connection that times out is "Connection terminated
  // due to connection timeout" (unreachable). Told apart, a full pool is no longer logged as the database down.
  if (message === POOL_WAIT_TIMEOUT) return 'saturated';
  if (DRIVER_MESSAGES.some((pattern) => pattern.test(message))) return 'unreachable';
  return undefined;
}

/** PostgreSQL's undefined_table: a relation the statement names does not exist (a database without the gateway's schema). */
export const UNDEFINED_TABLE = '42P01';

/** The error a driver rethrows: a storage failure as StorageUnavailableError, anything else unchanged. */
export function asStorageError(error: unknown): unknown {
  if (error instanceof StorageUnavailableError) return error;
  const kind = storageFailureKind(error);
  return kind === undefined ? error : new StorageUnavailableError(kind, error);
}

export interface OutageLog {
  warn(fields: object, message: string): void;
  info(fields: object, message: string): void;
}

/**
 * A background run (a job, a webhook pass or attempt) that failed: an unreachable database at `debug`, since the
 * outage is announced once (OutageTracker) and the run comes again; a pool with no free connection at `warn`
 * without a stack; anything else at `warn` with the error (found from outside: webhook work interrupted by an
 * outage logged `warn` with a stack, five lines in half a second, where the other jobs skip at debug).
 */
export function logBackgroundFailure(log: OutageLog & { debug(fields: object, message: string): void }, error: unknown, fields: object, what: string): void {
  const storage = storageFailureOf(error)?.kind;
  if (storage === 'unreachable') log.debug({ ...fields, reason: (error as Error).message }, `${what} skipped: database unavailable`);
  else if (storage === 'saturated') log.warn(fields, `${what} skipped: no database connection of this instance came free in time`);
  // A database without the gateway's tables (replaced or restored empty): said without a stack, each run (found from
  // outside: a stack a second from the webhook worker); /readyz and every request name `acg migrate`.
  else if (codeOf(error) === UNDEFINED_TABLE) log.warn({ ...fields, reason: (error as Error).message }, `${what} skipped: the database lacks the gateway's tables (run acg migrate)`);
  else log.warn({ err: error, ...fields }, `${what} failed`);
}

/**
 * Knows whether the database is reachable, from the outcome of every call, and says so in the logs
 * once per change: one `warn` when an outage starts and one `info` when it ends, however many
 * requests fail in between (each of those is the request's own `info` line).
 *
 * Calls overlap, so an outcome can settle after a later call's has changed the state, and a late outcome
 * says nothing of now. Only a call sent after the outage began can end it: a statement the server
 * answered just before it went away can settle after another call's failure has started the outage. And
 * only a call sent after the outage ended can start the next one: a call sent during the outage (waiting
 * on a connection the pool could not open) can fail after another call's success has ended it. Taking
 * either late outcome for news logged one outage as two (a warn, an info, a warn).
 */
export class OutageTracker {
  private downSinceMs: number | undefined;
  private failures = 0;
  /** Calls sent so far, numbered from 1. */
  private sent = 0;
  /** The number of the last call sent before the outage began: its answer, or an earlier one's, says nothing of now. */
  private sentBeforeOutage = 0;
  /** The number of the last call sent before the last outage ended: its failure, or an earlier one's, is that outage's. */
  private sentBeforeRecovery = 0;

  constructor(private readonly log: OutageLog | undefined) {}

  /** Call `n` (see `observe`) was answered (successfully or with an ordinary SQL error). */
  answered(n: number): void {
    if (this.downSinceMs === undefined || n <= this.sentBeforeOutage) return;
    const outageMs = Date.now() - this.downSinceMs;
    this.log?.info({ outageMs, failedCalls: this.failures }, `database available again after ${outageMs} ms`);
    this.downSinceMs = undefined;
    this.failures = 0;
    this.sentBeforeRecovery = this.sent;
  }

  /**
   * Call `n` (see `observe`) failed; an unreachable database starts (or continues) an outage, a
   * server-side timeout does not.
   */
  failed(n: number, error: StorageUnavailableError): void {
    if (error.kind !== 'unreachable') return;
    if (this.downSinceMs === undefined && n <= this.sentBeforeRecovery) return;
    this.failures += 1;
    if (this.downSinceMs !== undefined) return;
    this.downSinceMs = Date.now();
    this.sentBeforeOutage = this.sent;
    this.log?.warn({ reason: error.message }, 'database unavailable: requests that need it answer 503 storage_unavailable until it is back');
  }

  /** Runs one database call and records its outcome; storage failures come out as StorageUnavailableError. */
  async observe<T>(call: () => Promise<T>): Promise<T> {
    const n = ++this.sent;
    try {
      const result = await call();
      this.answered(n);
      return result;
    } catch (error) {
      const classified = asStorageError(error);
      if (classified instanceof StorageUnavailableError) this.failed(n, classified);
      else this.answered(n);
      throw classified;
    }
  }
}

/**
 * A server's refusal of the connection settings themselves, which no retry cures: no such database (3D000), the
 * role or its password refused (class 28), TLS asked of a server without it, or a server certificate the driver
 * does not trust (another CA, expired, or for another host). At start-up `acg serve` says it in one line and exits
 * 2, as every other `acg` command and a bad setting do, rather than as a crash with the driver's stack.
 */
export function connectionSettingsRefusal(error: unknown): string | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    const refusal = refusalOfSettings(current);
    if (refusal !== undefined) return `cannot open the database: ${refusal}`;
  }
  return undefined;
}

/**
 * The one line every command says when it cannot open the database: the settings' refusal named as `acg serve`
 * names it (a certificate, a role, a database), or the failure's own words (found from outside: `acg credit check`
 * said only "the database is unavailable (UNABLE_TO_VERIFY_LEAF_SIGNATURE)" where `acg serve` named the CA).
 */
export function cannotOpenDatabase(error: unknown): string {
  return connectionSettingsRefusal(error) ?? `cannot open the database: ${error instanceof Error ? error.message : String(error)}`;
}
