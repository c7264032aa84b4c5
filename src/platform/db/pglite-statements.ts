// Named (prepared) statements on PGlite, as the PostgreSQL driver sends them (docs/decisions.md "Statements go
// prepared, named by their text", and "PGlite runs in a worker thread: measured again and not kept; its statements
// go named instead"). PGlite's own `query()` parses, describes
// and plans every statement anew, in six calls into its engine; a statement named here is parsed and described
// once per session, and each run is then one call (bind, describe, execute, sync) on the plan the session keeps,
// through PGlite's public protocol API (`execProtocol`, `protocol.serialize`, `parse.parseResults`) and under the
// same two locks its `query()` takes, so results, type parsers and errors are PGlite's own.
import { parse, type PGlite, protocol, type Results, type Transaction } from '@electric-sql/pglite';
import { isStalePlan } from './database.ts';

/**
 * A session names at most this many statements and runs any beyond through `query()`: the texts are the code's
 * own templates, never data, so neither this map nor the engine's statement cache can grow without bound.
 */
export const STATEMENTS_NAMED_MAX = 1000;

/**
 * How long a named statement's plan is kept (docs/decisions.md "Plans are renewed, so none outlives the tables it
 * was made for"). The engine keeps a prepared statement's generic plan until its tables' statistics change,
 * and the embedded engine has no autovacuum to change them: a plan made while a table was nearly empty (a
 * sequential scan is then the cheapest) would run for the life of the process as the table grows. A statement
 * older than this is closed and prepared again at its next use, planned for the tables as they are then.
 */
export const PLAN_LIFETIME_MS = 60_000;

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((length, part) => length + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

interface Named {
  name: string;
  paramOids: number[];
  /** When it was prepared; -Infinity once a schema change made it stale. */
  preparedAtMs: number;
}

export class NamedStatements {
  private readonly statements = new Map<string, Named>();
  private namesIssued = 0;

  constructor(
    private readonly db: PGlite,
    private readonly nowMs: () => number = Date.now,
  ) {}

  /**
   * Runs `sql` on `target` (the database, or a transaction open on it): named when it has parameters and a name
   * is left, else through PGlite's `query()`. A statement alone that met a schema change altering its result
   * columns runs once more, prepared anew; in a transaction the statement failed it, and the transaction's retry
   * (`isStalePlan` is retryable) runs it again.
   */
  async query(target: PGlite | Transaction, sql: string, params: readonly unknown[] | undefined): Promise<Results> {
    if (params === undefined || !this.accepts(sql)) return target.query(sql, params as unknown[] | undefined);
    const { db } = this;
    const run = () => this.run(sql, params);
    if (target !== db) return db._runExclusiveQuery(run);
    await db._checkReady();
    const alone = () => db._runExclusiveTransaction(() => db._runExclusiveQuery(run));
    const result = await alone().catch((error: unknown) => (isStalePlan(error) ? alone() : Promise.reject(error)));
    await db.syncToFs();
    return result;
  }

  private accepts(sql: string): boolean {
    return this.statements.has(sql) || this.statements.size < STATEMENTS_NAMED_MAX;
  }

  /** The caller holds PGlite's query lock (and, outside a transaction, its transaction lock), as `query()` would. */
  private async run(sql: string, params: readonly unknown[]): Promise<Results> {
    const { serialize } = protocol;
    let statement = this.statements.get(sql);
    const nowMs = this.nowMs();
    if (!statement || nowMs - statement.preparedAtMs >= PLAN_LIFETIME_MS) {
      // A new name each time: one that a schema change made stale is never reused; the one it replaces is
      // closed in the same call, so the engine holds one plan per statement.
      const name = `acg_${++this.namesIssued}`;
      const closed = statement ? [serialize.close({ type: 'S', name: statement.name })] : [];
      const described = await this.db.execProtocol(concat([...closed, serialize.parse({ name, text: sql }), serialize.describe({ type: 'S', name }), serialize.sync()]), { syncToFs: false });
      statement = { name, paramOids: parse.parseDescribeStatementResults(described.messages), preparedAtMs: nowMs };
      this.statements.set(sql, statement);
    }
    const { serializers } = this.db;
    const values = params.map((value, index) => {
      if (value === null || value === undefined) return null;
      const serializer = serializers[statement.paramOids[index]!];
      return serializer ? serializer(value) : String(value);
    });
    try {
      const ran = await this.db.execProtocol(concat([serialize.bind({ statement: statement.name, values }), serialize.describe({ type: 'P' }), serialize.execute({}), serialize.sync()]), { syncToFs: false });
      return parse.parseResults(ran.messages, this.db.parsers)[0]!;
    } catch (error) {
      if (isStalePlan(error)) statement.preparedAtMs = -Infinity;
      throw error;
    }
  }
}
