// The operation layer under every face (HTTP now, MCP next). An operation is an object: a stable camelCase
// name, its input schema, its idempotency rule and the steps it runs. `runOperation` runs one for a
// principal, the same way whichever face asked:
//   check    rules that need no key (input consistency, configuration); a refusal here is not stored;
//   claim    the Idempotency-Key, scoped to the principal and the operation, fingerprinted by the operation
//            name and its canonical input (never by an HTTP path), so HTTP and MCP share one key space;
//   prepare  optional slow work outside the database (a DNS query); the claim commits first;
//   run      the effect, in one transaction that also stores the outcome;
//   replay   a stored result, or a stored business error re-thrown as the same ApiError.
// An operation with a `batch` policy runs in group commit: concurrent calls are gathered (batcher.ts) and
// applied together in one transaction, set-based: one statement claims every key, the policy's executor
// applies every effect in a few statements, one statement stores every answer (see runBatch).
// Services return results or throw ApiError; faces render them. Nothing here knows about HTTP.
import { performance } from 'node:perf_hooks';
import { Type, type TObject, type TProperties, type TSchema } from '@sinclair/typebox';
import { Batcher, togetherOrAlone, unwrap, type BatchLimits, type Settled } from './batcher.ts';
import type { CredentialFacts } from './credential-facts.ts';
import type { Database, Queryable, Tx } from './db/database.ts';
import { ApiError, type ErrorCode, type HumanApproval, type MemberViolation } from './errors.ts';
import { fingerprint, REPLAY_HEADER, validateIdempotencyKey, type Claim, type IdempotencyStore, type KeyRule, type SecretMembers, type StoredResponse } from './idempotency.ts';
import type { IdempotencyOutcome, Metrics } from './metrics.ts';
import { accountScope, type Principal } from './principal.ts';
import { activeSpan, inSpan, setSpanAttributes, type SpanRef } from './telemetry.ts';

/**
 * An operation's whole input from what HTTP splits in two: the path parameters and the body members, one
 * strict object (a face that has no path, like MCP, takes it whole).
 */
export function inputOf<P extends TProperties, B extends TProperties = {}>(params: TObject<P>, body?: TObject<B>) {
  return Type.Object({ ...params.properties, ...(body?.properties ?? ({} as B)) }, { additionalProperties: false });
}

export type KeyRequirement = 'required' | 'optional' | 'none' | 'derived';

export interface IdempotencyRule {
  /**
   * required: refused without a key; optional: honoured when sent; none: never looked at; derived: the
   * operation's `deriveKey` names it from the input (a protocol that carries its own idempotency key, such as
   * x402's `jti`), and a key the caller sends is not looked at.
   */
  key: KeyRequirement;
  /** The key's syntax (default `^[A-Za-z0-9._:-]{1,200}$`; release takes 1–255 visible characters). */
  rule?: KeyRule;
  /** The code of a missing required key (default idempotency_required; execute answers invalid_input, as the spec says). */
  missingCode?: Extract<ErrorCode, 'idempotency_required' | 'invalid_input'>;
  /**
   * A body member that may carry the key instead of the header (x402's authorize: `idempotencyKey`, as its
   * draft sends it); the face hands it over as the key. Documented, so the header is then not required.
   */
  member?: string;
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
  /** Result members holding a secret: returned once, never stored, so replays omit them (and say so in `notice`). */
  secrets?: SecretMembers;
  /** Runs before the key is claimed; its refusals are not stored (the request counts as never made). */
  check?: (call: OperationCall<I>) => Promise<C> | C;
  /** With `idempotency.key` `derived`: the key of this input (it must match the default key rule). */
  deriveKey?: (input: I) => string;
  /**
   * The input as the operation reads it, for the request's fingerprint: spellings it stores as one (a time zone's
   * case, a list's repeats) made one, so a retry that writes the same request otherwise replays rather than conflicts
   * (the fingerprint reads an amount's leading zeros alike for every operation). It must not throw: an input it cannot
   * read is returned as it is, and the operation refuses it.
   */
  readAs?: (input: I) => unknown;
  /**
   * It revokes what a credential's check reads (a merchant key, access tokens): its answer (a replay's too) waits
   * until no instance still keeps a credential fact read before it committed (credential-facts.ts), so the
   * revocation holds everywhere from the caller's next request.
   */
  revokesCredentials?: boolean;
}

/** One call of a batch, as the batch's executor sees it. */
export interface BatchedCall<I, C> {
  call: OperationCall<I>;
  checked: C;
  /** The call's Idempotency-Key (its scope and key): what names the request across its retries. */
  key?: KeyTarget;
  /**
   * The call's own span when tracing (the batch runs in a span of its own): where what the effect decides
   * for this call is recorded (a mandate decision), and the trace its webhook deliveries continue.
   */
  trace?: SpanRef;
}

/**
 * Group commit for an operation: its concurrent calls are gathered and applied in one
 * transaction by `runMany`, so the commit, the round trips and a hot row's lock are paid once per batch.
 */
export interface BatchPolicy<I, R, C, A = undefined> {
  /** Calls with the same order key (one agent) apply in arrival order; batches running at once never share one. */
  orderKey(call: OperationCall<I>, checked: C): string;
  /**
   * Optional: what the effect reads and locks before it decides anything, for every call of the batch, sent with
   * the claims (one write, one round trip) and handed to `runMany`. It reads for calls the claims then find
   * answered too (a replay): wasted reads, and locks held until the batch ends. Its locks follow the claims'.
   */
  readAhead?(tx: Tx, calls: ReadonlyArray<BatchedCall<I, C>>): Promise<A>;
  /**
   * The effect of every call, in arrival order, in the batch's transaction: one outcome per call, its result
   * or its business refusal (an ApiError below 500), each exactly what the call would get alone after the
   * calls before it. It writes only what succeeded, so a refusal needs no savepoint. It takes its locks in
   * one fixed order (sorted ids), so batches on any number of instances cannot deadlock one another. Any
   * other failure it throws: the batch rolls back and each call runs again alone.
   */
  runMany(tx: Tx, calls: ReadonlyArray<BatchedCall<I, C>>, read: A | undefined): Promise<Array<Settled<R>>>;
}

/** A batch policy whose read-ahead's type its operation does not show. */
type AnyReadAhead = any;

/** The policy applied to `calls` alone in `tx`, its read-ahead first (a batch of one, or calls no claim preceded). */
async function runPolicy<I, R, C>(policy: BatchPolicy<I, R, C, AnyReadAhead>, tx: Tx, calls: ReadonlyArray<BatchedCall<I, C>>): Promise<Array<Settled<R>>> {
  return policy.runMany(tx, calls, policy.readAhead ? await policy.readAhead(tx, calls) : undefined);
}

/**
 * An operation whose effect is one transaction: `run` (after `prepare`, when it has slow outside work), or,
 * in group commit, its `batch` policy, which applies a lone call as a batch of one.
 */
export type SingleStepOperation<I, R, C = undefined, P = undefined> = OperationBase<I, C> & {
  /**
   * Runs once the effect has committed (never on a replay or a refusal): for work that should start at once
   * rather than at its next poll, such as delivering the webhooks the effect queued. It must not throw.
   */
  committed?: (result: R) => void;
} & (
    | {
        /**
         * Slow work outside the database that `run` needs. It runs after the key is claimed (its claim
         * committed, so a concurrent retry gets 409 idempotency_key_in_use) and before the transaction opens.
         */
        prepare?: (call: OperationCall<I>, checked: C) => Promise<P>;
        /** The effect, in the transaction that also stores the outcome. */
        run: (tx: Tx, call: OperationCall<I>, checked: C, prepared: P) => Promise<R>;
        batch?: undefined;
      }
    | {
        /** Calls may share a transaction (never with `prepare`, whose claim commits on its own). */
        batch: BatchPolicy<I, R, C, AnyReadAhead>;
        prepare?: undefined;
        run?: undefined;
      }
  );

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
  /** Stores a business error, to be replayed as the same ApiError; one that is not the key's answer (`leavesKeyFree`) gives the key back instead. */
  storeError(executor: Queryable, error: ApiError): Promise<void>;
  /** Gives the key back: the same request may run again. */
  release(): Promise<void>;
}

export interface OperationRuntime {
  db: Database;
  idempotency: IdempotencyStore;
  /** Where each operation's rate, errors and duration are counted (the gateway's; absent in some unit tests). */
  metrics?: Metrics;
  /** The credential facts a revoking operation waits out before it answers (the gateway's; absent in some unit tests). */
  credentials?: Pick<CredentialFacts, 'revoked'>;
}

export interface RunRequest<I> extends OperationCall<I> {
  /** The Idempotency-Key as sent (a face unwraps its own transport form first). */
  idempotencyKey?: string;
  /** Where this face takes the key, for the refusal of a missing one (HTTP: the header; MCP: the tool argument). */
  idempotencyKeyFrom?: string;
}

export interface RunOutcome<R> {
  result: R;
  /** True when the result is a stored one, replayed for a repeated key. */
  replayed: boolean;
}

/** Members of a stored problem that the ApiError rebuilds itself. */
const PROBLEM_OWN_MEMBERS = new Set(['code', 'detail', 'retryAfterS', 'approval', 'member']);

function storedResult(result: unknown): StoredResponse {
  return { status: 200, body: result, headers: {} };
}

/**
 * A refusal of a member is stored by the member's path from the input's root, which each face names from its own when
 * it replays (the key is one for HTTP and MCP); its `detail` as that path says it is kept for a reader that predates
 * `member`.
 */
function storedError(error: ApiError): StoredResponse {
  const member = error.options.member;
  const body: Record<string, unknown> = { code: error.code, detail: member ? error.message : error.options.detail, ...error.options.extra };
  if (error.retryAfterS !== undefined) body.retryAfterS = error.retryAfterS;
  if (error.options.approval) body.approval = error.options.approval;
  if (member) body.member = member;
  return { status: error.status, body, headers: error.options.headers ?? {} };
}

/**
 * The ApiError a stored business error was (for a replay, or a record that shows an outcome, such as a
 * failed intent). Answers stored before `retryAfterS` was a field kept it as a `retry-after` header.
 */
export function storedApiError(stored: StoredResponse): ApiError {
  const body = (stored.body ?? {}) as Record<string, unknown>;
  const { 'retry-after': legacyRetryAfter, ...headers } = stored.headers ?? {};
  const extra = Object.fromEntries(Object.entries(body).filter(([member]) => !PROBLEM_OWN_MEMBERS.has(member)));
  const retryAfterS = typeof body.retryAfterS === 'number' ? body.retryAfterS : legacyRetryAfter === undefined ? undefined : Number(legacyRetryAfter);
  return new ApiError(body.code as ErrorCode, {
    detail: typeof body.detail === 'string' ? body.detail : undefined,
    status: stored.status,
    extra: Object.keys(extra).length > 0 ? extra : undefined,
    retryAfterS,
    approval: body.approval as HumanApproval | undefined,
    member: body.member as MemberViolation | undefined,
    headers,
  });
}

/** A stored outcome: the result, or the stored business error re-thrown, marked as a replay. */
function replay<R>(stored: StoredResponse): RunOutcome<R> {
  if (stored.status < 400) return { result: stored.body as R, replayed: true };
  const error = storedApiError(stored);
  throw new ApiError(error.code, { ...error.options, headers: { ...error.options.headers, [REPLAY_HEADER]: 'true' } });
}

function isBusinessError(error: unknown): error is ApiError {
  return error instanceof ApiError && error.status < 500;
}

/**
 * Refusals that are not the key's answer are never stored: the key is given back. One that waits for a human
 * (it carries an `approval` page, or it is `provisional`: a refusal of a request its owner approved, which the
 * owner can lift while the approval stands), so the caller's retry with the same key runs again once the human
 * has acted (and then it is stored, once); and one over the key itself (409 idempotency_key_reused, `idempotency_key_in_use`),
 * which an operation answers when the key belongs to another request it keeps apart from the store (a purchase
 * approval's, a retained intent's): stored, it would take the key from that request, whose retry could then never
 * run (found from outside: an approved purchase became unusable after one mistaken request under its key).
 */
function leavesKeyFree(error: unknown): error is ApiError {
  return (
    isBusinessError(error) &&
    (error.options.approval !== undefined || error.options.provisional === true || error.code === 'idempotency_key_reused' || error.code === 'idempotency_key_in_use')
  );
}

/**
 * Runs `operation` once per (principal, operation, key); see the file header for the steps. Whichever face
 * asked, it is one span (`operation <name>`: the idempotency outcome, the refusal code) and one count in the
 * operation metrics (rate, errors by code, duration).
 */
export function runOperation<I, R, C, P>(runtime: OperationRuntime, operation: Operation<I, R, C, P>, request: RunRequest<I>): Promise<RunOutcome<R>> {
  const startedMs = performance.now();
  const attributes = () => ({ attributes: { 'acg.operation.name': operation.name, 'acg.principal.kind': request.principal.kind } });
  return inSpan(`operation ${operation.name}`, attributes, async (span) => {
    let admitted: Admitted<I, C>;
    try {
      // Without checks of its own a call is admitted at once, in the same turn, so calls made together reach their
      // batcher together (an await here split them across batches).
      admitted = operation.check ? await admitChecked(operation, request) : admit(operation, request, undefined as C);
    } catch (error) {
      // Refused by its checks or for want of a key, before any key was claimed: nothing was stored for a retry.
      answered(runtime, operation.name, span, startedMs, 'unclaimed', error);
      throw error;
    }
    let outcome: RunOutcome<R>;
    try {
      outcome = await runAdmitted(runtime, operation, admitted);
    } catch (error) {
      answered(runtime, operation.name, span, startedMs, idempotencyOutcomeOf(error), error);
      throw error;
    }
    if (operation.revokesCredentials) await runtime.credentials?.revoked();
    answered(runtime, operation.name, span, startedMs, outcome.replayed ? 'replay' : 'new');
    if (!outcome.replayed && 'committed' in operation && operation.committed) operation.committed(outcome.result);
    return outcome;
  });
}

/** A refusal over the key itself is a conflict; a stored refusal answered again is a replay. */
function idempotencyOutcomeOf(error: unknown): IdempotencyOutcome {
  if (!(error instanceof ApiError)) return 'new';
  if (error.code === 'idempotency_key_in_use' || error.code === 'idempotency_key_reused') return 'conflict';
  return replayedRefusal(error) ? 'replay' : 'new';
}

/** Whether an operation's refusal is the stored answer of an earlier request with its key, answered again. */
export function replayedRefusal(error: ApiError): boolean {
  return error.options.headers?.[REPLAY_HEADER] === 'true';
}

/** The errors an operation answered with, counted by `runOperation`: a face's error handler counts any other. */
const countedRefusals = new WeakSet<object>();

/** Whether `runOperation` answered with this error, so its metrics already count it. */
export function countedByOperation(error: unknown): boolean {
  return error !== null && typeof error === 'object' && countedRefusals.has(error);
}

function answered(runtime: OperationRuntime, name: string, span: SpanRef | undefined, startedMs: number, idempotency: IdempotencyOutcome, error?: unknown): void {
  if (error !== null && typeof error === 'object') countedRefusals.add(error);
  if (span) setSpanAttributes(span, { 'acg.idempotency.outcome': idempotency });
  runtime.metrics?.operationAnswered(name, idempotency, error, (performance.now() - startedMs) / 1000);
}

/** A call its operation's checks let through, with the key it will claim (undefined: none was sent, and none is needed). */
interface Admitted<I, C> {
  call: OperationCall<I>;
  checked: C;
  key: string | undefined;
}

/** The steps before any key is claimed: the operation's own checks (`admitChecked`), and a key where one is required. */
async function admitChecked<I, R, C, P>(operation: Operation<I, R, C, P>, request: RunRequest<I>): Promise<Admitted<I, C>> {
  const call: OperationCall<I> = { principal: request.principal, input: request.input };
  return admit(operation, request, (await operation.check!(call)) as C, call);
}

function admit<I, R, C, P>(operation: Operation<I, R, C, P>, request: RunRequest<I>, checked: C, call: OperationCall<I> = { principal: request.principal, input: request.input }): Admitted<I, C> {
  const { idempotency } = operation;
  const key = keyOf(operation, call, request.idempotencyKey);
  if (key === undefined && idempotency.key === 'required') {
    const where = request.idempotencyKeyFrom ?? (idempotency.member ? `an Idempotency-Key header, or the body member \`${idempotency.member}\`` : 'an Idempotency-Key header');
    throw new ApiError(idempotency.missingCode ?? 'idempotency_required', { detail: `send ${where} (a UUID is a good key)` });
  }
  if ('runClaimed' in operation && key === undefined) throw new Error(`multi-step operation ${operation.name} must require an Idempotency-Key`);
  return { call, checked, key };
}

async function runAdmitted<I, R, C, P>(runtime: OperationRuntime, operation: Operation<I, R, C, P>, { call, checked, key }: Admitted<I, C>): Promise<RunOutcome<R>> {
  if ('runClaimed' in operation) return runClaimed(runtime, operation, call, checked, { scope: accountScope(call.principal), key: key! });
  if (key === undefined) {
    const prepared = (operation.prepare ? await operation.prepare(call, checked) : undefined) as P;
    return { result: await runtime.db.transaction((tx) => runOne(operation, tx, call, checked, prepared)), replayed: false };
  }
  const target = { scope: accountScope(call.principal), key };
  if (operation.prepare) return runPrepared(runtime, operation, call, checked, target);
  if (operation.batch) return batcherOf(runtime, operation).submit({ call, checked, target, trace: activeSpan() }) as Promise<RunOutcome<R>>;
  return runInOneTransaction(runtime, operation, call, checked, target);
}

/** The request's Idempotency-Key: as sent (checked against its rule), derived from the input, or none. */
function keyOf<I, C>(operation: OperationBase<I, C>, call: OperationCall<I>, sent: string | undefined): string | undefined {
  const { idempotency } = operation;
  if (idempotency.key === 'none') return undefined;
  if (idempotency.key !== 'derived') return validateIdempotencyKey(sent, idempotency.rule);
  if (!operation.deriveKey) throw new Error(`operation ${operation.name} derives its key but has no deriveKey`);
  return validateIdempotencyKey(operation.deriveKey(call.input));
}

export interface KeyTarget {
  scope: string;
  key: string;
}

function fingerprintOf(operation: { name: string; readAs?: (input: never) => unknown }, call: OperationCall<unknown>): string {
  return fingerprint(operation.name, operation.readAs ? operation.readAs(call.input as never) : call.input);
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
      const result = await runOne(operation, tx, call, checked, undefined as P);
      await runtime.idempotency.complete(tx, claimed.claim, storedResult(result), operation.secrets);
      return { result };
    } catch (error) {
      if (!isBusinessError(error)) throw error;
      await tx.query('ROLLBACK TO SAVEPOINT operation');
      if (leavesKeyFree(error)) await runtime.idempotency.abandonMany(tx, [claimed.claim]);
      else await runtime.idempotency.complete(tx, claimed.claim, storedError(error));
      return { failure: error };
    }
  });
  if ('replayed' in outcome) return replay<R>(outcome.replayed);
  if ('failure' in outcome) throw outcome.failure;
  return { result: outcome.result, replayed: false };
}

/** The effect of one call in `tx`: `run`, or a batched operation's policy applied to a batch of one. */
async function runOne<I, R, C, P>(operation: SingleStepOperation<I, R, C, P>, tx: Tx, call: OperationCall<I>, checked: C, prepared: P): Promise<R> {
  if (operation.batch) return unwrap((await runPolicy(operation.batch, tx, [{ call, checked, trace: activeSpan() }]))[0]!);
  return operation.run(tx, call, checked, prepared);
}

interface BatchItem<I, C> extends BatchedCall<I, C> {
  target: KeyTarget;
}

/**
 * Bounds of group commit. A batch holds at most 64 calls; up to 2 batches run side by side on PostgreSQL
 * (while one waits for its commit to reach the disk, the next applies), never two with the same order key
 * (more at once only made the batches smaller, each paying its statements for fewer calls: docs/decisions.md
 * "Two batches at once, not four");
 * at most 1,024 calls wait, beyond which a call is refused at once with 503 `overloaded` and Retry-After.
 * PGlite is one session that runs one transaction at a time, on this thread: one batch at a time there, each
 * started after a turn of the event loop so the requests already received join it.
 */
export const BATCH_LIMITS: BatchLimits = { batchSizeMax: 64, batchesInFlightMax: 2, queueLengthMax: 1024, retryAfterS: 1 };

/** The group-commit bounds on this database (also for the batches a service forms itself: execute's). */
export function groupCommitLimits(db: Pick<Database, 'kind'>): BatchLimits {
  return db.kind === 'pglite' ? { ...BATCH_LIMITS, batchesInFlightMax: 1, gatherOneTurn: true } : { ...BATCH_LIMITS };
}

type AnyBatcher = Batcher<BatchItem<unknown, unknown>, RunOutcome<unknown>>;
const batchers = new WeakMap<OperationRuntime, Map<string, AnyBatcher>>();

/** The batcher of a batched operation on this runtime (one per operation and runtime; tests pause it). */
export function batcherOf<I, R, C, P>(runtime: OperationRuntime, operation: SingleStepOperation<I, R, C, P>): AnyBatcher {
  const policy = operation.batch as BatchPolicy<unknown, unknown, unknown, AnyReadAhead> | undefined;
  if (!policy) throw new Error(`operation ${operation.name} is not batched`);
  let byName = batchers.get(runtime);
  if (!byName) batchers.set(runtime, (byName = new Map()));
  let batcher = byName.get(operation.name);
  if (!batcher) {
    const typed = operation as unknown as SingleStepOperation<unknown, unknown, unknown, unknown>;
    batcher = new Batcher((items) => runBatch(runtime, typed, policy, items), (item) => policy.orderKey(item.call, item.checked), groupCommitLimits(runtime.db), {
      name: operation.name,
      metrics: runtime.metrics,
    });
    byName.set(operation.name, batcher);
  }
  return batcher;
}

/**
 * Group commit: the calls of a batch in one transaction, in arrival order. A key sent twice in one batch:
 * the later call runs after the batch, alone, and replays what the first stored. If the transaction fails
 * for any reason but a business answer (a fault, a deadlock past its retries, a lost commit), every call runs
 * again alone, in order: one bad call fails only itself, and a batch that did commit is replayed by the keys
 * it stored.
 */
async function runBatch<I, R, C>(
  runtime: OperationRuntime,
  operation: SingleStepOperation<I, R, C, unknown>,
  policy: BatchPolicy<I, R, C, AnyReadAhead>,
  items: ReadonlyArray<BatchItem<I, C>>,
): Promise<Array<Settled<RunOutcome<R>>>> {
  const seen = new Set<string>();
  const first: number[] = [];
  const repeated: number[] = [];
  for (const [index, item] of items.entries()) {
    const id = `${item.target.scope}\n${item.target.key}`;
    (seen.has(id) ? repeated : first).push(index);
    seen.add(id);
  }
  const outcomes = new Array<Settled<RunOutcome<R>>>(items.length);
  const apply = async (indices: readonly number[]) => {
    const applied = await togetherOrAlone(indices.map((index) => items[index]!), (some) => applyBatch(runtime, operation, policy, some));
    for (const [position, index] of indices.entries()) outcomes[index] = applied[position]!;
  };
  await apply(first);
  for (const index of repeated) await apply([index]);
  return outcomes;
}

/**
 * Plans for the rest of the transaction: each statement's generic plan, whatever its parameters, and one that
 * probes the tables' indexes rather than scanning a table it can probe (docs/decisions.md "A batch's statements
 * probe, never scan"). A script without parameters, the transaction's first: on PostgreSQL it goes out in BEGIN's
 * own message (one simple query, no row back), in the batch's first write.
 */
export const BATCH_PLANS = 'SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off';

/** One transaction: claim every key, apply the owned calls, store every answer (sent with the COMMIT). Throws only a fault. */
async function applyBatch<I, R, C>(
  runtime: OperationRuntime,
  operation: SingleStepOperation<I, R, C, unknown>,
  policy: BatchPolicy<I, R, C, AnyReadAhead>,
  items: ReadonlyArray<BatchItem<I, C>>,
): Promise<Array<Settled<RunOutcome<R>>>> {
  const batched = (item: BatchItem<I, C>): BatchedCall<I, C> => ({ call: item.call, checked: item.checked, key: item.target, trace: item.trace });
  const decided = await runtime.db.transaction(async (tx) => {
    // The claims, and the policy's reads beside them: sent together, answered in one round trip; before them,
    // in the same write, the batch's plans (docs/decisions.md "A batch's statements run on generic plans"):
    // they select by ids and arrays, whose generic plan is the plan, and PostgreSQL would otherwise plan four of
    // them again at every call; and they probe by those ids, never scan.
    const [, claims, read] = await Promise.all([
      tx.exec(BATCH_PLANS),
      runtime.idempotency.claimMany(
        tx,
        items.map((item) => ({ scope: item.target.scope, route: operation.name, key: item.target.key, fingerprint: fingerprintOf(operation, item.call) })),
      ),
      policy.readAhead?.(tx, items.map(batched)),
    ]);
    const owned = items.flatMap((item, index) => (claims[index]!.kind === 'owned' ? [index] : []));
    const results = owned.length === 0 ? [] : await policy.runMany(tx, owned.map((index) => batched(items[index]!)), read);
    if (results.length !== owned.length) throw new Error(`batch invariant: ${results.length} outcomes for ${owned.length} calls`);
    for (const result of results) if (!result.ok && !isBusinessError(result.error)) throw result.error;
    const claimOf = (index: number) => (claims[index] as { claim: Claim }).claim;
    const kept = owned.flatMap((index, position) => (results[position]!.ok || !leavesKeyFree(results[position]!.error) ? [{ index, result: results[position]! }] : []));
    await runtime.idempotency.abandonMany(tx, owned.filter((index, position) => !results[position]!.ok && leavesKeyFree(results[position]!.error)).map(claimOf));
    // The answers are the transaction's last statement, sent with its COMMIT: the claims were taken in this
    // transaction, whose row locks keep every other request off these keys, so no check after it can fail.
    await runtime.idempotency.completeMany(
      tx.lastStatement(),
      kept.map(({ index, result }) =>
        result.ok
          ? { claim: claimOf(index), response: storedResult(result.value), secrets: operation.secrets }
          : { claim: claimOf(index), response: storedError(result.error as ApiError) },
      ),
    );
    return { claims, owned, results };
  });
  const byIndex = new Map(decided.owned.map((index, position) => [index, decided.results[position]!]));
  return Promise.all(
    decided.claims.map((claim, index) =>
      settle(async (): Promise<RunOutcome<R>> => {
        if (claim.kind === 'refused') throw claim.error;
        if (claim.kind === 'replay') return replay<R>(claim.response);
        const result = byIndex.get(index)!;
        if (!result.ok) throw result.error;
        return { result: result.value, replayed: false };
      }),
    ),
  );
}

async function settle<R>(work: () => Promise<R>): Promise<Settled<R>> {
  try {
    return { ok: true, value: await work() };
  } catch (error) {
    return { ok: false, error };
  }
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
      const value = await runOne(operation, tx, call, checked, prepared);
      await runtime.idempotency.complete(tx, claim, storedResult(value), operation.secrets);
      return value;
    });
    return { result, replayed: false };
  } catch (error) {
    if (isBusinessError(error) && !leavesKeyFree(error)) {
      await runtime.idempotency.complete(runtime.db, claim, storedError(error));
      throw error;
    }
    await runtime.idempotency.giveBack(claim);
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
  const result = await underClaim<R>(runtime, claimed.claim, operation.secrets, (handle) => operation.runClaimed(handle, call, checked));
  return { result, replayed: false };
}

/**
 * Runs multi-step work under a claim already taken: the work stores its outcome or gives the key back, and
 * whatever it leaves unsettled (or a fault) gives the key back. Also for a key claimed again later for the
 * same request (execute resuming a retained intent after its top-up settled).
 */
export async function underClaim<R>(runtime: OperationRuntime, claim: Claim, secrets: SecretMembers | undefined, work: (key: ClaimedKey<R>) => Promise<R>): Promise<R> {
  let settled = false;
  const handle: ClaimedKey<R> = {
    claim,
    async storeResult(tx, result) {
      await runtime.idempotency.complete(tx, claim, storedResult(result), secrets);
      settled = true;
    },
    async storeError(executor, error) {
      if (leavesKeyFree(error)) await runtime.idempotency.abandon(claim);
      else await runtime.idempotency.complete(executor, claim, storedError(error));
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
    if (!settled || !isBusinessError(error)) await runtime.idempotency.giveBack(claim);
    throw error;
  }
}
