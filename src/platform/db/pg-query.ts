// The query the PostgreSQL driver runs for us: node-postgres's own Query, with a named statement's row shape kept
// once its connection has described it (docs/decisions.md "A named statement is described once per connection").
//
// node-postgres sends Describe with every execution of a prepared statement, so the server answers each one with
// its RowDescription, and the driver parses it and builds the same column parsers again. The shape of a named
// statement's rows cannot change while a session keeps it prepared: a schema change that would change it makes
// the server refuse the statement at Bind ("cached plan must not change result type"), and the driver then
// renames every statement (postgres.ts), so each is parsed and described again. So a connection runs a statement
// it has parsed and described as Bind, Execute and Sync, with the shape its own session described; its first run
// there (or one while its Parse is still in flight) is described, as before.
//
// This reaches into the driver's Query (its `prepare` and `_result`), the same extension point pg-cursor and
// pg-query-stream use; test/platform/db/prepared-statements.test.ts counts the messages on the wire, so a driver
// release that changes it fails there, not in production.
import pg from 'pg';

interface RowShape {
  fields: unknown[];
  parsers: unknown[] | undefined;
  emptyRow: Record<string, null> | null;
}

/** The driver's internals this module uses (node-postgres 8: lib/query.js, lib/result.js, lib/connection.js). */
interface DriverQuery {
  name?: string;
  portal?: string;
  values?: unknown[];
  binary?: boolean;
  rows?: number;
  _accumulateRows: boolean;
  _result: { fields: unknown[]; _parsers: unknown[] | undefined; _prebuiltEmptyResultObject: Record<string, null> | null };
  _getRows(connection: DriverConnection, rows: number | undefined): void;
  handleError(error: unknown, connection: DriverConnection): void;
}
interface DriverConnection {
  parsedStatements: Record<string, string>;
  bind(config: { portal?: string; statement?: string; values?: unknown[]; binary?: boolean; valueMapper: (value: unknown) => unknown }): void;
  close(config: { type: 'S'; name?: string }): void;
  sync(): void;
}

// Each connection's own: a shape is what that server session said of the statement it keeps prepared, which
// its session cannot change (a shape from another session could be older or newer than this one's plan).
const shapesOf = new WeakMap<DriverConnection, Map<string, RowShape>>();
// The driver's own mapping of a JavaScript value to its text on the wire (what its Query passes to bind).
const driverValue = (pg as unknown as { utils?: { prepareValue?: (value: unknown) => unknown } }).utils?.prepareValue;

/** A query whose named statement, once described, runs without Describe on a connection that parsed it. */
export class ShapeKeepingQuery extends pg.Query {
  #described = true;

  prepare(this: ShapeKeepingQuery & DriverQuery, connection: DriverConnection): void {
    const shape = this.name !== undefined && this.rows === undefined && connection.parsedStatements[this.name] !== undefined ? shapesOf.get(connection)?.get(this.name) : undefined;
    if (shape === undefined || driverValue === undefined) {
      (pg.Query.prototype as unknown as { prepare(connection: DriverConnection): void }).prepare.call(this, connection);
      return;
    }
    try {
      connection.bind({ portal: this.portal, statement: this.name, values: this.values, binary: this.binary, valueMapper: driverValue });
    } catch (error) {
      // As the driver's own prepare does when a value cannot be sent.
      connection.close({ type: 'S', name: this.name });
      connection.sync();
      this.handleError(error, connection);
      return;
    }
    this.#described = false;
    this._result.fields = shape.fields;
    this._result._parsers = shape.parsers;
    this._result._prebuiltEmptyResultObject = shape.emptyRow;
    this._accumulateRows = true;
    this._getRows(connection, this.rows);
  }

  // The shape is kept once a described execution completed: its RowDescription's columns, or none for a
  // statement the server answered NoData (an UPDATE without RETURNING).
  handleCommandComplete(this: ShapeKeepingQuery & DriverQuery, message: unknown, connection: DriverConnection): void {
    if (this.#described && this.name !== undefined) {
      let shapes = shapesOf.get(connection);
      if (shapes === undefined) shapesOf.set(connection, (shapes = new Map()));
      shapes.set(this.name, { fields: this._result.fields, parsers: this._result._parsers, emptyRow: this._result._prebuiltEmptyResultObject });
    }
    (pg.Query.prototype as unknown as { handleCommandComplete(message: unknown, connection: DriverConnection): void }).handleCommandComplete.call(this, message, connection);
  }
}

/**
 * Runs a statement on `client` (a pool or one of its connections) as a ShapeKeepingQuery, prepared under `name`
 * when it has one. Both take a query object with its callback as their second argument (a pool's callback
 * releases its connection first). The query is made from its text and values, then named: the driver copies a
 * config object property by property (`Object.defineProperties`), 1.3 % of the gateway's CPU at the open loop.
 */
export function queryKeepingShapes(client: pg.Pool | pg.PoolClient | pg.Client, sql: string, values: readonly unknown[] | undefined, name: string | undefined): Promise<pg.QueryResult> {
  const query = new ShapeKeepingQuery(sql, values as unknown[] | undefined);
  if (name !== undefined) (query as unknown as DriverQuery).name = name;
  const submit = client as unknown as { query(query: pg.Query, callback: (error: Error | undefined, result: pg.QueryResult) => void): unknown };
  return new Promise((resolve, reject) => {
    submit.query(query, (error, result) => (error ? reject(error) : resolve(result)));
  });
}
