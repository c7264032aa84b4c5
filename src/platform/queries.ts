// The read side of the operation layer. A query is an object, as an operation is: a stable camelCase name,
// its input schema, the shape of its answer, and the steps `runQuery` runs in order, the same for every face:
//   defaults  the input schema's defaults are applied (a page's `limit`), so no face or service writes one;
//   access    who may read it: throws the refusal (what the principal may not see is not_found), else
//             returns what the read needs (the agent row it checked, the merchant it reached);
//   settle    expiry-on-read: what a deadline has already decided (holds past their deadline) is settled
//             before the read, so every face reads the same balances;
//   read      the answer, in the query's `output` shape: the HTTP route's 200 schema and the MCP tool's
//             outputSchema are that one schema.
// A query writes nothing of its own (settle reclaims what the sweeper would). Nothing here knows about HTTP.
import { Value } from '@sinclair/typebox/value';
import type { TSchema } from '@sinclair/typebox';
import type { Database, Queryable } from './db/database.ts';
import type { Clock } from './clock.ts';
import type { Principal } from './principal.ts';
import { inSpan } from './telemetry.ts';

export interface QueryCall<I> {
  principal: Principal;
  input: I;
  /** The time of the read (Unix seconds, the gateway's clock), taken once: settle and read see the same now. */
  atS: number;
}

/** What documentation needs to know of a query, whatever its types. */
export interface QueryDescription {
  /** Stable camelCase name: the OpenAPI operationId and the base of the MCP tool name. */
  name: string;
  /** The whole input (path parameters and query string members together), as the faces validate it. */
  input: TSchema;
  /** The answer's schema: the HTTP 200 response and the MCP tool's output schema. */
  output: TSchema;
}

export interface Query<I = never, R = unknown, A = undefined> extends QueryDescription {
  /** Who may read: the refusal is thrown; the value returned is handed to `settle` and `read`. */
  access?: (db: Queryable, call: QueryCall<I>) => Promise<A> | A;
  /** Expiry-on-read: settles what a deadline has decided before the read (its own transactions). */
  settle?: (call: QueryCall<I>, access: A) => Promise<unknown>;
  read: (db: Queryable, call: QueryCall<I>, access: A) => Promise<R>;
}

export interface QueryRuntime {
  db: Database;
  clock: Clock;
}

/** The input with its schema's defaults applied (a copy; the face's object is left as it was). */
function withDefaults<I>(schema: TSchema, input: unknown): I {
  const copy = input === undefined ? {} : structuredClone(input);
  return Value.Default(schema, copy) as I;
}

/**
 * Runs `query` for a principal: defaults, access, settle, read (see the file header). `input` is what the
 * face validated against `query.input`. Traced as one span named after the query, whichever face asked.
 */
export function runQuery<I, R, A>(runtime: QueryRuntime, query: Query<I, R, A>, request: { principal: Principal; input: unknown }): Promise<R> {
  return inSpan(`query ${query.name}`, () => ({ attributes: { 'acg.query.name': query.name, 'acg.principal.kind': request.principal.kind } }), () => read(runtime, query, request));
}

async function read<I, R, A>(runtime: QueryRuntime, query: Query<I, R, A>, request: { principal: Principal; input: unknown }): Promise<R> {
  const call: QueryCall<I> = { principal: request.principal, input: withDefaults<I>(query.input, request.input), atS: runtime.clock.nowS() };
  const access = (query.access ? await query.access(runtime.db, call) : undefined) as A;
  if (query.settle) await query.settle(call, access);
  return query.read(runtime.db, call, access);
}
