// One database interface, two drivers: PostgreSQL (`pg`) in production and PGlite (embedded
// Postgres) as the zero-setup default. Both speak the same SQL; BIGINT always arrives as `bigint`.
import { ApiError } from '../errors.ts';
import { storageFailureOf } from './faults.ts';
import { UC_MAX } from '../money.ts';
import { activeSpan, endSpan, setSpanAttributes, startSpan, tracing, type SpanRef } from '../telemetry.ts';
export interface QueryResult<R> {
  rows: R[];
  rowCount: number;
}

export interface Queryable {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>>;
  /** Runs a script of several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
}

/**
 * A connection inside an open transaction. The pool (`Database`) is not one, so a function that locks rows
 * (`SELECT … FOR UPDATE`) takes a `Tx` and cannot be called where its lock would end with the statement.
 */
export interface Tx extends Queryable {
  readonly inTransaction: true;
  /**
   * Where the transaction's last statement goes: on PostgreSQL it is sent with the COMMIT, in one write, and
   * answers once both have (one round trip fewer); the transaction takes no statement after it. If it fails,
   * the transaction is rolled back and its error thrown. Nothing may be decided after its answer that would
   * undo it: the transaction has committed. PGlite commits when the transaction's function returns.
   */
  lastStatement(): Queryable;
  /**
   * Sends a statement whose answer nobody awaits: on PostgreSQL it goes out at once, and the transaction's next
   * statements (its last one and COMMIT, say) follow it without waiting for it, so it costs no round trip of its
   * own. For a write that checks itself in SQL (`ledger_invariant`) and whose rows nothing reads. The
   * transaction waits for it before it ends; if it fails, the transaction is rolled back and its error is the
   * one every later statement, and the transaction, throws (in place of PostgreSQL's "current transaction is
   * aborted").
   */
  send(sql: string, params?: readonly unknown[]): void;
}

/** SQLSTATE in_failed_sql_transaction: what every statement after a failed one in its transaction answers. */
const ABORTED_TRANSACTION = '25P02';

/**
 * A transaction's first failed statement, which is the transaction's failure. After it, PostgreSQL answers every
 * statement of the transaction with 25P02 "current transaction is aborted". Statements sent together (a batch's
 * claims and reads, pipelined) reach their callers through call chains of different depths, so a 25P02 could
 * reach the transaction's code before the failure that caused it and hide it: a lock timeout then read as a 500
 * where it is a 503, and a deadlock went unretried (found from outside, 2026-12-03). Each driver passes every
 * answer of a transaction's connection through `observe` at its lowest level, where answers settle in the order
 * the statements were sent: the first failure is kept, and a later 25P02 is replaced by it.
 */
export class FirstFailure {
  private failure: { error: unknown } | undefined;

  observe<R>(answer: Promise<R>): Promise<R> {
    return answer.catch((error: unknown) => {
      if (this.failure && (error as { code?: unknown } | null)?.code === ABORTED_TRANSACTION) throw this.failure.error;
      this.failure ??= { error };
      throw error;
    });
  }
}

/**
 * What a transaction's sent statements (`Tx.send`) left to wait for: each is awaited before the transaction
 * ends, and the first one to fail, in the order sent, fails the transaction (whatever a savepoint undid since).
 */
export class SentStatements {
  private readonly outcomes: Array<Promise<{ error: unknown } | undefined>> = [];

  add(statement: Promise<unknown>): void {
    this.outcomes.push(
      statement.then(
        () => undefined,
        (error: unknown) => ({ error }),
      ),
    );
  }

  /** How many statements were sent so far: what a statement sent now comes after. */
  get count(): number {
    return this.outcomes.length;
  }

  /** Waits for every statement sent so far; throws the first failure among them. */
  async settled(): Promise<void> {
    const failure = await this.firstFailure(this.outcomes.length);
    if (failure) throw failure.error;
  }

  /**
   * The answer of a statement sent after the first `before` sent ones: if one of those failed, that failure
   * (it aborted the transaction, so this statement failed for it, or ran after a savepoint undid it: either way
   * the transaction must not go on), else this statement's own answer. Its own failure after theirs is theirs
   * already: the transaction's `FirstFailure` turned its 25P02 into it.
   */
  async follow<R>(answer: Promise<R>, before: number): Promise<R> {
    const result = await answer;
    const failure = await this.firstFailure(before);
    if (failure) throw failure.error;
    return result;
  }

  private async firstFailure(count: number): Promise<{ error: unknown } | undefined> {
    if (count === 0) return undefined;
    return (await Promise.all(this.outcomes.slice(0, count))).find((outcome) => outcome !== undefined);
  }
}

export type DatabaseKind = 'postgres' | 'pglite';

export interface Database extends Queryable {
  readonly kind: DatabaseKind;
  /** One transaction; serialization failures and deadlocks are retried a bounded number of times. */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** Runs `fn` on one connection that holds a session-level advisory lock for its whole duration. */
  withAdvisoryLock<T>(lockKey: number, fn: (conn: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** SQLSTATEs worth retrying as a whole transaction: serialization_failure, deadlock_detected (and a stale plan, below). */
const RETRYABLE_SQLSTATES = new Set(['40001', '40P01']);
export const TRANSACTION_ATTEMPTS_MAX = 5;

export function isRetryable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return (typeof code === 'string' && RETRYABLE_SQLSTATES.has(code)) || isStalePlan(error);
}

/**
 * A prepared statement whose result columns a schema change altered (feature_not_supported, "cached plan must
 * not change result type"): the driver prepares it again under a new name, so the transaction is worth a retry.
 */
export function isStalePlan(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return code === '0A000' && typeof message === 'string' && message.includes('cached plan must not change result type');
}

/** The checks that keep running totals within the largest amount (migration 0032): a violation is the caller's 409. */
const AMOUNT_LIMIT_CONSTRAINTS = ['agent_balances_granted_limit', 'ledger_accounts_balance_limit'];

/**
 * A transaction that would carry a running total past 10^18 − 1 µc (an agent's lifetime credit, a merchant's
 * earnings) as the answer its caller gets: 409 conflict, reason amount_limit, nothing written. Undefined for
 * any other failure.
 */
export function amountLimitError(error: unknown): ApiError | undefined {
  const { code, constraint, message } = (error ?? {}) as { code?: unknown; constraint?: unknown; message?: unknown };
  if (code !== '23514') return undefined;
  const named = AMOUNT_LIMIT_CONSTRAINTS.find((name) => constraint === name || (typeof message === 'string' && message.includes(`"${name}"`)));
  if (!named) return undefined;
  const what = named === 'agent_balances_granted_limit' ? "the agent's lifetime credit (grants, top-ups and refunds)" : "an account's balance (a merchant's earnings)";
  return new ApiError('conflict', {
    detail: `this would carry ${what} past ${UC_MAX} µc, the largest amount the ledger keeps; nothing was written`,
    extra: { reason: 'amount_limit' },
  });
}

/** Retries `attempt` on a retryable failure, with a short jittered back-off between tries. */
export async function retryTransaction<T>(attempt: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await attempt();
    } catch (error) {
      const refused = amountLimitError(error);
      if (refused) throw refused;
      if (!isRetryable(error) || tries >= TRANSACTION_ATTEMPTS_MAX) throw error;
      const backoffMs = Math.floor(Math.random() * 5 * 2 ** tries);
      await new Promise((resolve) => setTimeout(resolve, backoffMs));
    }
  }
}

/** Bounds on every wait for the database (PostgreSQL; the embedded PGlite has no connection to wait on). */
export interface DatabaseTimeouts {
  /** Longest a statement may run (server-side statement_timeout); the client gives up on a silent server a little later. */
  statementTimeoutMs: number;
  /** Longest a statement may wait for a row or table lock (lock_timeout). */
  lockTimeoutMs: number;
  /** Longest wait for a connection: opening one, or a free one from the pool. */
  connectTimeoutMs: number;
}

export const DEFAULT_DATABASE_TIMEOUTS: DatabaseTimeouts = { statementTimeoutMs: 5000, lockTimeoutMs: 2000, connectTimeoutMs: 2000 };

/** Connections one instance opens to PostgreSQL at most (the pool's size). */
export const DEFAULT_POOL_SIZE_MAX = 20;

/** The embedded database's directory is held by another live process (PGlite admits one). */
export class DatabaseInUseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DatabaseInUseError';
  }
}

/**
 * A client span for one statement, when tracing (each driver's one query function starts it): the SQL as the
 * code wrote it, which is parameterised, so no value (a secret, an amount) is ever part of it. Only inside
 * traced work (a request, a batch, a webhook attempt): the polls of background jobs and the migrations would
 * otherwise be a trace per statement, every second.
 */
export function statementSpan(driver: 'pg' | 'pglite', sql: string, server?: StatementServer): SpanRef | undefined {
  if (!tracing() || !activeSpan()) return undefined;
  const operation = operationOf(sql);
  return startSpan(operation ?? 'SQL', {
    kind: 'client',
    attributes: {
      'db.system.name': 'postgresql',
      'db.operation.name': operation,
      'db.query.text': sql,
      'acg.db.driver': driver,
      'db.namespace': server?.namespace,
      'server.address': server?.address,
      'server.port': server?.port,
    },
  });
}

/** The database a driver's statements go to, as the database conventions name it (none for the embedded engine). */
export interface StatementServer {
  namespace?: string;
  address?: string;
  port?: number;
}

const STATEMENT_OPERATION = /^\s*([A-Za-z]+)/;
const OPERATION_AFTER_WITH = /\b(SELECT|INSERT|UPDATE|DELETE|MERGE)\b/i;

/**
 * A statement's operation, as the database conventions ask when it is read from the text: its first command word,
 * and for a `WITH` (a clause, not an operation) the first operation named after it (found from outside: spans said
 * WITH). Undefined when there is none, so the attribute is left out rather than guessed.
 */
export function operationOf(sql: string): string | undefined {
  const first = STATEMENT_OPERATION.exec(sql)?.[1]?.toUpperCase();
  if (first !== 'WITH') return first;
  return OPERATION_AFTER_WITH.exec(sql)?.[1]?.toUpperCase();
}

/** Ends a statement's span: the rows it returned, or its failure. */
export function endStatementSpan(span: SpanRef, outcome: { rows: number } | { failure: unknown }): void {
  if ('rows' in outcome) setSpanAttributes(span, { 'db.response.returned_rows': outcome.rows });
  else {
    // The server's SQLSTATE, where it answered one (the database conventions' db.response.status_code).
    const code = (storageFailureOf(outcome.failure)?.cause ?? outcome.failure) as { code?: unknown } | null;
    if (typeof code?.code === 'string' && /^[0-9A-Z]{5}$/.test(code.code)) setSpanAttributes(span, { 'db.response.status_code': code.code });
  }
  endSpan(span, 'failure' in outcome ? outcome.failure : undefined);
}
