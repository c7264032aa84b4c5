// The operation layer under every face (HTTP now, MCP next). An operation is an object: a stable camelCase
// name, its input schema, its idempotency rule and the steps it runs. `runOperation` runs one for a
// principal, the same way whichever face asked:
//   check    rules that need no key (input consistency, configuration); a refusal here is not stored;
//   claim    the Idempotency-Key, scoped to the principal and the operation, fingerprinted by the operation
//            name and its canonical input (never by an HTTP path), so HTTP and MCP share one key space;
//   prepare  optional slow work outside the database (a DNS query); the claim commits first;
//   run      the effect, in one transaction that also stores the outcome;
//   replay   a stored result, or a stored business error re-thrown as the same ApiError.
// Services return results or throw ApiError; faces render them. Nothing here knows about HTTP.
import { Type, type TObject, type TProperties, type TSchema } from '@sinclair/typebox';
import type { Database, Queryable, Tx } from './db/database.ts';
import { ApiError, type ErrorCode } from './errors.ts';
import { fingerprint, REPLAY_HEADER, validateIdempotencyKey, type Claim, type IdempotencyStore, type KeyRule, type StoredResponse } from './idempotency.ts';
import { principalScope, type Principal } from './principal.ts';

/**
 * An operation's whole input from what HTTP splits in two: the path parameters and the body members, one
 * strict object (a face that has no path, like MCP, takes it whole).
 */
export function inputOf<P extends TProperties, B extends TProperties = {}>(params: TObject<P>, body?: TObject<B>) {
  return Type.Object({ ...params.properties, ...(body?.properties ?? ({} as B)) }, { additionalProperties: false });
}

export type KeyRequirement = 'required' | 'optional' | 'none';

export interface IdempotencyRule {
  /** required: refused without a key; optional: honoured when sent; none: never looked at. */
  key: KeyRequirement;
  /** The key's syntax (default `^[A-Za-z0-9._:-]{1,200}$`; release takes 1–255 visible characters). */
  rule?: KeyRule;
  /** The code of a missing required key (default idempotency_required; execute answers invalid_input, as the spec says). */
  missingCode?: Extract<ErrorCode, 'idempotency_required' | 'invalid_input'>;
}

/** What a face hands to an operation. */
export interface OperationCall<I> {
  principal: Principal;
  input: I;
}

/** What documentation needs to know of an operation, whatever its types. */
export interface OperationDescription {
  /** Stable camelCase name: the OpenAPI operationId, the key scope, and the base of the MCP tool name. */
  name: string;
  /** The whole input (path parameters and body members together) as the faces validate it. */
  input: TSchema;
  idempotency: IdempotencyRule;
}

interface OperationBase<I, C> extends OperationDescription {
  /** Result members holding a secret: returned once, never stored, so replays omit them. */
  secretFields?: readonly string[];
  /** Runs before the key is claimed; its refusals are not stored (the request counts as never made). */
  check?: (call: OperationCall<I>) => Promise<C> | C;
}

export interface SingleStepOperation<I, R, C = undefined, P = undefined> extends OperationBase<I, C> {
  /**
   * Slow work outside the database that `run` needs. It runs after the key is claimed (its claim
   * committed, so a concurrent retry gets 409 idempotency_key_in_use) and before the transaction opens.
   */
  prepare?: (call: OperationCall<I>, checked: C) => Promise<P>;
  /** The effect, in the transaction that also stores the outcome. */
  run: (tx: Tx, call: OperationCall<I>, checked: C, prepared: P) => Promise<R>;
}

/**
 * For operations that talk to the network between transactions (execute): the claim commits first and
 * the operation itself stores its outcome (in the transaction that carries its effect) or gives the key
 * back. Whatever it leaves unsettled, the runner gives back.
 */
export interface MultiStepOperation<I, R, C = undefined> extends OperationBase<I, C> {
  runClaimed: (key: ClaimedKey<R>, call: OperationCall<I>, checked: C) => Promise<R>;
}

/** What a service's async method resolves to: the result type of the operation that calls it. */
export type ResolvedBy<S, M extends keyof S> = S[M] extends (...args: never[]) => Promise<infer R> ? R : never;

export type Operation<I = never, R = unknown, C = never, P = never> = SingleStepOperation<I, R, C, P> | MultiStepOperation<I, R, C>;

/** The claimed key of a multi-step operation. */
export interface ClaimedKey<R> {
  readonly claim: Claim;
  /** Stores the result in the transaction that carries the effect. */
  storeResult(tx: Tx, result: R): Promise<void>;
  /** Stores a business error, to be replayed as the same ApiError. */
  storeError(executor: Queryable, error: ApiError): Promise<void>;
  /** Gives the key back: the same request may run again. */
  release(): Promise<void>;
}

export interface OperationRuntime {
  db: Database;
  idempotency: IdempotencyStore;
}

export interface RunRequest<I> extends OperationCall<I> {
  /** The Idempotency-Key as sent (a face unwraps its own transport form first). */
  idempotencyKey?: string;
}

export interface RunOutcome<R> {
  result: R;
  /** True when the result is a stored one, replayed for a repeated key. */
  replayed: boolean;
}

/** Members of a stored problem that the ApiError rebuilds itself. */
const PROBLEM_OWN_MEMBERS = new Set(['code', 'detail']);

function storedResult(result: unknown): StoredResponse {
  return { status: 200, body: result, headers: {} };
}

function storedError(error: ApiError): StoredResponse {
  return {
    status: error.status,
    body: { code: error.code, detail: error.options.detail, ...error.options.extra },
    headers: error.options.headers ?? {},
  };
}

/** A stored outcome: the result, or the stored business error re-thrown, marked as a replay. */
function replay<R>(stored: StoredResponse): RunOutcome<R> {
  if (stored.status < 400) return { result: stored.body as R, replayed: true };
  const body = (stored.body ?? {}) as Record<string, unknown>;
  const extra = Object.fromEntries(Object.entries(body).filter(([member]) => !PROBLEM_OWN_MEMBERS.has(member)));
  throw new ApiError(body.code as ErrorCode, {
    detail: typeof body.detail === 'string' ? body.detail : undefined,
    status: stored.status,
    extra: Object.keys(extra).length > 0 ? extra : undefined,
    headers: { ...stored.headers, [REPLAY_HEADER]: 'true' },
  });
}

function isBusinessError(error: unknown): error is ApiError {
  return error instanceof ApiError && error.status < 500;
}

/** Runs `operation` once per (principal, operation, key); see the file header for the steps. */
export async function runOperation<I, R, C, P>(runtime: OperationRuntime, operation: Operation<I, R, C, P>, request: RunRequest<I>): Promise<RunOutcome<R>> {
  const call: OperationCall<I> = { principal: request.principal, input: request.input };
  const checked = (operation.check ? await operation.check(call) : undefined) as C;
  const { idempotency } = operation;
  const key = idempotency.key === 'none' ? undefined : validateIdempotencyKey(request.idempotencyKey, idempotency.rule);
  if (key === undefined && idempotency.key === 'required') {
    throw new ApiError(idempotency.missingCode ?? 'idempotency_required', { detail: 'send an Idempotency-Key header (a UUID is a good key)' });
  }
  if ('runClaimed' in operation) {
    if (key === undefined) throw new Error(`multi-step operation ${operation.name} must require an Idempotency-Key`);
    return runClaimed(runtime, operation, call, checked, { scope: principalScope(call.principal), key });
  }
  if (key === undefined) {
    const prepared = (operation.prepare ? await operation.prepare(call, checked) : undefined) as P;
    return { result: await runtime.db.transaction((tx) => operation.run(tx, call, checked, prepared)), replayed: false };
  }
  const target = { scope: principalScope(call.principal), key };
  if (operation.prepare) return runPrepared(runtime, operation, call, checked, target);
  return runInOneTransaction(runtime, operation, call, checked, target);
}

interface KeyTarget {
  scope: string;
  key: string;
}

function fingerprintOf(operation: { name: string }, call: OperationCall<unknown>): string {
  return fingerprint(operation.name, call.input);
}

/**
 * One transaction claims the key, runs the operation and stores its outcome: one commit per request. A
 * concurrent retry with the same key waits on the key's row, then replays. A business failure rolls back to
 * the savepoint (undoing the operation's writes, keeping the claim) and is stored; anything else rolls
 * everything back, the claim included, so the key can be retried.
 */
async function runInOneTransaction<I, R, C, P>(
  runtime: OperationRuntime,
  operation: SingleStepOperation<I, R, C, P>,
  call: OperationCall<I>,
  checked: C,
  target: KeyTarget,
): Promise<RunOutcome<R>> {
  const outcome = await runtime.db.transaction(async (tx): Promise<{ replayed: StoredResponse } | { result: R } | { failure: ApiError }> => {
    const claimed = await runtime.idempotency.claim(target.scope, operation.name, target.key, fingerprintOf(operation, call), tx);
    if (claimed.kind === 'replay') return { replayed: claimed.response };
    await tx.query('SAVEPOINT operation');
    try {
      const result = await operation.run(tx, call, checked, undefined as P);
      await runtime.idempotency.complete(tx, claimed.claim, storedResult(result), operation.secretFields);
      return { result };
    } catch (error) {
      if (!isBusinessError(error)) throw error;
      await tx.query('ROLLBACK TO SAVEPOINT operation');
      await runtime.idempotency.complete(tx, claimed.claim, storedError(error));
      return { failure: error };
    }
  });
  if ('replayed' in outcome) return replay<R>(outcome.replayed);
  if ('failure' in outcome) throw outcome.failure;
  return { result: outcome.result, replayed: false };
}

/** With slow outside work first, the claim commits on its own, so a retry meanwhile sees it running. */
async function runPrepared<I, R, C, P>(
  runtime: OperationRuntime,
  operation: SingleStepOperation<I, R, C, P>,
  call: OperationCall<I>,
  checked: C,
  target: KeyTarget,
): Promise<RunOutcome<R>> {
  const claimed = await runtime.idempotency.claim(target.scope, operation.name, target.key, fingerprintOf(operation, call));
  if (claimed.kind === 'replay') return replay<R>(claimed.response);
  const { claim } = claimed;
  try {
    const prepared = await operation.prepare!(call, checked);
    const result = await runtime.db.transaction(async (tx) => {
      const value = await operation.run(tx, call, checked, prepared);
      await runtime.idempotency.complete(tx, claim, storedResult(value), operation.secretFields);
      return value;
    });
    return { result, replayed: false };
  } catch (error) {
    if (isBusinessError(error)) {
      await runtime.idempotency.complete(runtime.db, claim, storedError(error));
      throw error;
    }
    await runtime.idempotency.abandon(claim).catch(() => {});
    throw error;
  }
}

async function runClaimed<I, R, C>(
  runtime: OperationRuntime,
  operation: MultiStepOperation<I, R, C>,
  call: OperationCall<I>,
  checked: C,
  target: KeyTarget,
): Promise<RunOutcome<R>> {
  const claimed = await runtime.idempotency.claim(target.scope, operation.name, target.key, fingerprintOf(operation, call));
  if (claimed.kind === 'replay') return replay<R>(claimed.response);
  const result = await underClaim<R>(runtime, claimed.claim, operation.secretFields, (handle) => operation.runClaimed(handle, call, checked));
  return { result, replayed: false };
}

/**
 * Runs multi-step work under a claim already taken: the work stores its outcome or gives the key back, and
 * whatever it leaves unsettled (or a fault) gives the key back. Also for a key claimed again later for the
 * same request (execute resuming a retained intent after its top-up settled).
 */
export async function underClaim<R>(runtime: OperationRuntime, claim: Claim, secretFields: readonly string[] | undefined, work: (key: ClaimedKey<R>) => Promise<R>): Promise<R> {
  let settled = false;
  const handle: ClaimedKey<R> = {
    claim,
    async storeResult(tx, result) {
      await runtime.idempotency.complete(tx, claim, storedResult(result), secretFields);
      settled = true;
    },
    async storeError(executor, error) {
      await runtime.idempotency.complete(executor, claim, storedError(error));
      settled = true;
    },
    async release() {
      await runtime.idempotency.abandon(claim);
      settled = true;
    },
  };
  try {
    const result = await work(handle);
    if (!settled) await handle.release();
    return result;
  } catch (error) {
    // A fault (not a business answer) gives the key back even if a store was attempted: its transaction
    // rolled back with the fault.
    if (!settled || !isBusinessError(error)) await runtime.idempotency.abandon(claim).catch(() => {});
    throw error;
  }
}
