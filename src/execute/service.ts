// Metered execution (POST /v1/services/execute), in the spec's order:
//   clearance (agent active, service and category allowed, the action's own checks such as the mail
//   inbox allowlist) → a hold of the action's price (1 credit) → run the action → capture.
//
// Transactions. The action talks to the network, so it never runs inside a transaction (on PGlite a
// transaction blocks the whole database):
//   tx1  hold + the execution row (state running);
//   run  outside any transaction, bounded by the execution timeout;
//   tx2  capture + execution succeeded + the stored idempotent answer, all or nothing;
//        or, when the action failed: release + execution failed (+ the stored answer when replayable).
// So a charge exists only together with the answer that reports it, and a failed action is never charged.
//
// Process death between tx1 and tx2 leaves a running execution with a held hold. The instance that runs an
// action refreshes the execution's heartbeat; any instance's recovery job releases the hold of a running
// execution whose heartbeat stopped (its process died) or whose deadline passed, and gives its
// Idempotency-Key back. The hold's own deadline (the execution timeout plus a margin) is the backstop:
// the ledger's sweeper expires it even if no recovery job ever runs. Capture and recovery both lock the
// execution row first, so at most one of them resolves the hold.
import { emitEvent } from '../events/outbox.ts';
import { actsFor, type Actor } from '../agents/acting.ts';
import { clearAgent } from '../agents/clearance.ts';
import type { AgentService } from '../agents/service.ts';
import type { AgentRow } from '../agents/service.ts';
import { GATEWAY_ACCEPTOR_ID, type LedgerService, type Redemption } from '../ledger/service.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, problemBody } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { Claim, ClaimOutcome } from '../platform/idempotency.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, formatUsd, type Microcredits } from '../platform/money.ts';
import { Batcher, togetherOrAlone, type Settled } from '../platform/batcher.ts';
import { groupCommitLimits, storedApiError, underClaim, type ClaimedKey } from '../platform/operations.ts';
import { ConnectorError, findService, prepareAction, type PreparedAction, type ServiceContext } from '../connectors/catalogue.ts';
import type { ServiceModule } from '../connectors/types.ts';
import type { GitHubContext } from '../connectors/github-public.ts';
import type { MailSettings } from '../connectors/mail.ts';
import type { MailConnectorService } from './mail-connectors.ts';
import type { PaymentApprovalProvider, ServiceIntent } from './payment-approval.ts';
import * as store from './store.ts';

/** The execute operation's name: its Idempotency-Keys are scoped to it (resuming an intent claims one again). */
export const EXECUTE_OPERATION = 'executeService';
/** How often an instance refreshes the heartbeat of its in-flight executions and looks for orphans. */
export const EXECUTION_RECOVERY_INTERVAL_MS = 2_000;
/** A running execution whose heartbeat is older than this belongs to a dead process. */
export const EXECUTION_ORPHANED_AFTER_MS = 10_000;
/** Past the execution timeout, how long before recovery treats a running execution as lost. */
const EXECUTION_DEADLINE_GRACE_MS = 5_000;
/** The hold outlives the execution deadline by this much, so only a lost execution ever lets it expire. */
const HOLD_LIFETIME_MARGIN_S = 60;
const RECOVERY_BATCH_MAX = 100;
/** A retained intent waits this long for a top-up before it is swept. */
export const INTENT_LIFETIME_S = 7 * 86_400;
/** Bounds what an agent without credit can make us store. */
export const PENDING_INTENTS_PER_AGENT_MAX = 100;
const INTENT_SWEEP_BATCH_MAX = 1000;

export const EXECUTE_STATE_SUCCEEDED = 'succeeded';
export const APPROVAL_STATE_PENDING = 'approval_pending';
/** Every execution is paid from the agent's prepaid credit. */
export const PAYMENT_METHOD_CREDITS = 'credits';

export interface ExecutionRequest {
  agentId: string;
  serviceId: string;
  action: string;
  input: unknown;
}

export interface ExecuteResult {
  state: typeof EXECUTE_STATE_SUCCEEDED;
  executionId: string;
  result: object;
  /** The captured hold. */
  receipt: Redemption;
  priceUc: string;
  priceUsd: string;
  paymentMethod: typeof PAYMENT_METHOD_CREDITS;
}

/** What resuming a retained intent came to: it ended, another instance is running it, or it must wait. */
export type ResumeOutcome = 'finished' | 'busy' | 'waiting';

/** A retained intent as its agent and owner read it (GET /v1/intents/{id}). */
export interface IntentView {
  id: string;
  state: store.IntentState;
  agentId: string;
  intent: ServiceIntent;
  priceUc: string;
  executionId: string | null;
  /** Why a cancelled intent was closed: `topup_declined`, `topup_expired` or `topup_failed`. */
  cancellationReason: string | null;
  /** The action's result, while the execute answer is retained (24 h by default). */
  result: object | null;
  /** The captured hold of an executed intent. */
  receipt: Redemption | null;
  /** The stored failure of a failed intent (`code`, `detail` and the problem's members), while retained. */
  error: Record<string, unknown> | null;
  createdAt: number;
  updatedAt: number;
  expiresAt: number;
}

/** What an intent's outcome adds to its record: the result and receipt of an executed one, the error of a failed one. */
type IntentOutcome = Pick<IntentView, 'result' | 'receipt' | 'error'>;

function toIntentView(intent: store.IntentRow, outcome: IntentOutcome): IntentView {
  return {
    id: intent.id,
    state: intent.state,
    agentId: intent.agent_id,
    intent: { serviceId: intent.service_id, action: intent.action, input: intent.input, agentId: intent.agent_id },
    priceUc: formatUc(intent.price_uc),
    executionId: intent.execution_id,
    cancellationReason: intent.cancellation_reason,
    ...outcome,
    createdAt: Number(intent.created_at_s),
    updatedAt: Number(intent.updated_at_s),
    expiresAt: Number(intent.expires_at_s),
  };
}

export interface ExecuteDependencies {
  identity: AgentService;
  ledger: LedgerService;
  mailConnectors: MailConnectorService;
  github: GitHubContext;
  mail: MailSettings;
  executeTimeoutMs: number;
  /** The payments feature's provider; absent → insufficient credit answers 503 link_configuration_required. */
  paymentApproval?: PaymentApprovalProvider;
}

interface Cleared {
  agent: AgentRow;
  service: ServiceModule<ServiceContext>;
  action: PreparedAction;
}

interface Started {
  executionId: string;
  holdId: string;
  priceUc: Microcredits;
}

/** tx1 of one execution, as its batch sees it. */
interface BeginCall {
  claim: Claim;
  request: ExecutionRequest;
  cleared: Cleared;
}

/** tx2 (success) of one execution, as its batch sees it. */
interface SucceedCall {
  key: ClaimedKey<ExecuteResult>;
  started: Started;
  result: object;
}

/** The action finished, but recovery had already given its hold back. */
class ExecutionLost extends Error {}

/** After a hold: failures worth retrying (rate limits, 5xx) give the Idempotency-Key back; definitive ones are stored. */
function replayable(status: number): boolean {
  return status < 500 && status !== 429;
}

/** Every answer after the key is claimed says whether credit moved: on this path it never did. */
function uncharged(error: unknown, extra: Record<string, unknown> = {}): ApiError {
  if (error instanceof ConnectorError) {
    return new ApiError(error.code, {
      detail: error.detail,
      extra: { ...extra, charged: false },
      retryAfterS: error.retryAfterS,
    });
  }
  if (error instanceof ApiError) {
    return new ApiError(error.code, { ...error.options, extra: { ...error.options.extra, ...extra, charged: false } });
  }
  throw error;
}

export class ExecuteService {
  /** Names this process on the executions it runs, for the logs of recovery. */
  readonly instanceId = newId('ins');
  private readonly inFlight = new Set<string>();

  /**
   * Group commit of execute's two ledger transactions (as of mint and capture, docs/decisions.md): the holds
   * of concurrent executions are taken in one transaction (LedgerService.holdMany), one agent's in arrival
   * order; the captures of those that succeeded are made in one (resolveMany). Each call keeps its own
   * answer; a fault reruns each call alone.
   */
  private readonly begins: Batcher<BeginCall, Started>;
  private readonly successes: Batcher<SucceedCall, ExecuteResult>;

  constructor(
    private readonly gateway: Gateway,
    private readonly deps: ExecuteDependencies,
  ) {
    const limits = groupCommitLimits(gateway.db);
    this.begins = new Batcher((calls) => this.inBatch(calls, (tx, some) => this.beginIn(tx, some)), (call) => call.cleared.agent.id, limits);
    // Every call here already holds credit and ran its action: none is refused for a full queue (the calls
    // waiting are bounded by the executions running, each admitted through the bounded queue of holds).
    this.successes = new Batcher(
      (calls) => this.inBatch(calls, (tx, some) => this.succeedIn(tx, some)),
      (call) => call.started.executionId,
      { ...limits, queueLengthMax: Number.POSITIVE_INFINITY },
    );
  }

  /** The batchers of tx1 (holds) and tx2 (captures); tests pause them to form a batch deterministically. */
  get batchers(): { begins: Batcher<BeginCall, Started>; successes: Batcher<SucceedCall, ExecuteResult> } {
    return { begins: this.begins, successes: this.successes };
  }

  /** Runs `apply` for a batch in one transaction; on a fault, each call alone (so one bad call fails only itself). */
  private inBatch<T, R>(calls: readonly T[], apply: (tx: Tx, calls: readonly T[]) => Promise<Array<Settled<R>>>): Promise<Array<Settled<R>>> {
    return togetherOrAlone(calls, (some) => this.gateway.db.transaction((tx) => apply(tx, some)));
  }

  get paymentApprovalConfigured(): boolean {
    return this.deps.paymentApproval !== undefined;
  }

  private get holdLifetimeS(): number {
    return Math.ceil(this.deps.executeTimeoutMs / 1000) + HOLD_LIFETIME_MARGIN_S;
  }

  /** Which agent executes: the acting-for rule (agents/acting.ts); an agent executes as itself, an owner names one of its agents. */
  async actingAgentId(caller: Actor, requestedAgentId: string | undefined): Promise<string> {
    return (await this.deps.identity.actingAgent(this.gateway.db, caller, requestedAgentId)).id;
  }

  /** Refuses, before the Idempotency-Key is claimed, a service or action the catalogue does not have. */
  checkRequest(serviceId: string, action: string): void {
    const service = findService(serviceId);
    if (!service) throw new ApiError('invalid_input', { detail: `unknown service "${serviceId}"` });
    if (!Object.hasOwn(service.actions, action)) {
      throw new ApiError('invalid_input', { detail: `service "${serviceId}" has no action "${action}"; it has ${Object.keys(service.actions).join(', ')}` });
    }
  }

  /**
   * Runs one execution under a claimed Idempotency-Key and returns its result, or throws the ApiError that
   * answers it. The key ends stored (result, or a definitive failure) or given back (the same request may
   * be retried).
   */
  async execute(key: ClaimedKey<ExecuteResult>, request: ExecutionRequest, resuming = false): Promise<ExecuteResult> {
    // Holds past their deadline give their credit back first, so it can pay for this one.
    await this.deps.ledger.expireDue({ agentId: request.agentId });
    let cleared: Cleared;
    try {
      cleared = await this.clear(request);
    } catch (error) {
      return this.refuse(key, uncharged(error));
    }
    let started: Started;
    try {
      started = await this.begins.submit({ claim: key.claim, request, cleared });
    } catch (error) {
      // A resumed intent that meets insufficient credit again waits; it never asks for a second approval.
      if (error instanceof ApiError && error.code === 'INSUFFICIENT_CREDITS' && !resuming) return this.retainIntent(key, request, cleared);
      return this.refuse(key, uncharged(error));
    }
    this.inFlight.add(started.executionId);
    try {
      let result: object;
      try {
        result = await this.withinTimeout(cleared.action.run());
      } catch (error) {
        return await this.fail(key, started, error);
      }
      return await this.succeed(key, started, result);
    } finally {
      this.inFlight.delete(started.executionId);
    }
  }

  /** The clearance checks, all before any hold: each refusal names its code. */
  private async clear(request: ExecutionRequest): Promise<Cleared> {
    const { db } = this.gateway;
    const agent = await this.deps.identity.agentRow(db, request.agentId);
    if (!agent) throw new ApiError('not_found', { detail: `no agent ${request.agentId}` });
    const service = findService(request.serviceId);
    if (!service) throw new ApiError('invalid_input', { detail: `unknown service "${request.serviceId}"` });
    clearAgent(agent, { category: service.category, serviceId: service.id });
    const mail = await this.deps.mailConnectors.forExecution(db, agent);
    const context: ServiceContext = { github: this.deps.github, mail: this.deps.mail, mailConnector: mail.connector };
    try {
      return { agent, service, action: prepareAction(context, request.serviceId, request.action, request.input) };
    } catch (error) {
      // A stored connector that cannot be opened says why, instead of "no connector".
      if (error instanceof ConnectorError && error.code === 'connector_not_configured' && mail.problem) throw mail.problem;
      throw error;
    }
  }

  /** tx1 of a batch: each call's hold (a refusal is that call's answer) and the execution row that lets recovery find it. */
  private async beginIn(tx: Tx, calls: readonly BeginCall[]): Promise<Array<Settled<Started>>> {
    const holds = await this.deps.ledger.holdMany(
      tx,
      calls.map(({ cleared }) => ({
        agentId: cleared.agent.id,
        acceptorId: GATEWAY_ACCEPTOR_ID,
        merchantId: null,
        offerId: `${cleared.service.id}:${cleared.action.actionName}`,
        category: cleared.service.category,
        serviceId: cleared.service.id,
        amountUc: cleared.action.priceUc,
        lifetimeS: this.holdLifetimeS,
      })),
    );
    const nowMs = this.gateway.clock.nowMs();
    const rows: store.ExecutionRow[] = [];
    const outcomes = holds.map((held, index): Settled<Started> => {
      if (!held.ok) return held;
      const { claim, request, cleared } = calls[index]!;
      const row: store.ExecutionRow = {
        id: newId('exe'),
        agent_id: cleared.agent.id,
        service_id: cleared.service.id,
        action: request.action,
        hold_id: held.value.id,
        state: 'running',
        error_code: null,
        instance_id: this.instanceId,
        idem_scope: claim.scope,
        idem_route: claim.route,
        idem_key: claim.key,
        idem_token: claim.token,
        started_at_ms: BigInt(nowMs),
        heartbeat_at_ms: BigInt(nowMs),
        deadline_at_ms: BigInt(nowMs + this.deps.executeTimeoutMs + EXECUTION_DEADLINE_GRACE_MS),
        finished_at_ms: null,
      };
      rows.push(row);
      return { ok: true, value: { executionId: row.id, holdId: held.value.id, priceUc: cleared.action.priceUc } };
    });
    await store.insertExecutions(tx, rows);
    return outcomes;
  }

  private async withinTimeout(action: Promise<object>): Promise<object> {
    const timeoutMs = this.deps.executeTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new ConnectorError('upstream_timeout', `the action did not finish within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([action, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** tx2 on success: capture, finish the execution and store the answer, together (in a batch, see succeedIn). */
  private async succeed(key: ClaimedKey<ExecuteResult>, started: Started, result: object): Promise<ExecuteResult> {
    try {
      return await this.successes.submit({ key, started, result });
    } catch (error) {
      const late = error instanceof ExecutionLost || (error instanceof ApiError && error.code === 'hold_resolved');
      await this.releaseQuietly(started, late ? 'deadline_passed' : 'internal_error');
      if (!late) throw error;
      // The result came after the execution's deadline, when its hold was no longer ours to capture: it is
      // not handed out unpaid; the caller retries.
      await key.release();
      throw uncharged(new ConnectorError('upstream_timeout', 'the action finished after the execution deadline; nothing was charged, retry the request'), {
        executionId: started.executionId,
        redemptionId: started.holdId,
      });
    }
  }

  /**
   * tx2 of a batch: the still-running executions locked, their holds captured in one pass, the executions
   * finished, each answer stored. A call whose execution recovery already ended (ExecutionLost) or whose
   * hold is no longer held (its deadline passed) writes nothing of its own and answers that.
   */
  private async succeedIn(tx: Tx, calls: readonly SucceedCall[]): Promise<Array<Settled<ExecuteResult>>> {
    const { clock } = this.gateway;
    const running = await store.lockRunningExecutions(tx, calls.map(({ started }) => started.executionId));
    const live = calls.filter(({ started }) => running.has(started.executionId));
    const receipts = await this.deps.ledger.resolveMany(tx, live.map(({ started }) => ({ action: 'capture' as const, holdId: started.holdId })));
    const outcomes = new Map<SucceedCall, Settled<ExecuteResult>>();
    const captured: Array<{ call: SucceedCall; receipt: Redemption }> = [];
    for (const [index, call] of live.entries()) {
      const receipt = receipts[index]!;
      if (!receipt.ok) {
        outcomes.set(call, receipt);
        continue;
      }
      if (receipt.value.state !== 'captured' || receipt.value.capturedUc !== formatUc(call.started.priceUc)) {
        throw new Error(`ledger invariant: execution ${call.started.executionId} captured ${receipt.value.capturedUc} µc of ${call.started.priceUc} µc`);
      }
      captured.push({ call, receipt: receipt.value });
    }
    await store.finishExecutions(tx, captured.map(({ call }) => call.started.executionId), 'succeeded', null, clock.nowMs());
    for (const { call, receipt } of captured) {
      const { key, started, result } = call;
      const intent = await store.finishIntent(tx, key.claim.scope, key.claim.key, 'executed', started.executionId, clock.nowS());
      const body: ExecuteResult = {
        state: EXECUTE_STATE_SUCCEEDED,
        executionId: started.executionId,
        result,
        receipt,
        priceUc: formatUc(started.priceUc),
        priceUsd: formatUsd(started.priceUc),
        paymentMethod: PAYMENT_METHOD_CREDITS,
      };
      await key.storeResult(tx, body);
      if (intent) await this.emitIntentEvent(tx, intent, { result, receipt, error: null });
      outcomes.set(call, { ok: true, value: body });
    }
    return calls.map((call) => outcomes.get(call) ?? { ok: false, error: new ExecutionLost() });
  }

  /** The action failed: release the hold; store the answer when it is definitive. */
  private async fail(key: ClaimedKey<ExecuteResult>, started: Started, error: unknown): Promise<never> {
    if (!(error instanceof ConnectorError)) {
      // A fault of ours, not the upstream's: no charge, and a 500 whose key the caller may retry.
      await this.releaseQuietly(started, 'internal_error');
      throw error;
    }
    const failure = uncharged(error, { executionId: started.executionId, redemptionId: started.holdId });
    const storeAnswer = replayable(failure.status);
    const stored = await this.gateway.db.transaction(async (tx) => {
      const owned = await this.releaseExecution(tx, started.executionId, 'failed', error.code);
      if (owned && storeAnswer) {
        await key.storeError(tx, failure);
        const intent = await store.finishIntent(tx, key.claim.scope, key.claim.key, 'failed', started.executionId, this.gateway.clock.nowS());
        if (intent) await this.emitIntentEvent(tx, intent, { result: null, receipt: null, error: problemBody(this.gateway.config.baseUrl, failure) });
      }
      return owned && storeAnswer;
    });
    if (!stored) await key.release();
    throw failure;
  }

  /** Credit did not cover the hold: retain the intent, then answer 402 or 503. Nothing was charged. */
  private async retainIntent(key: ClaimedKey<ExecuteResult>, request: ExecutionRequest, cleared: Cleared): Promise<never> {
    const { db, clock, log } = this.gateway;
    const { claim } = key;
    const priceUc = cleared.action.priceUc;
    const intent: ServiceIntent = { serviceId: request.serviceId, action: request.action, input: request.input, agentId: cleared.agent.id };
    let intentId: string;
    try {
      intentId = await db.transaction(async (tx) => {
        // The agent row lock makes the count and the insert one step for this agent.
        await this.deps.identity.lockAgent(tx, cleared.agent.id);
        const nowS = clock.nowS();
        const existing = await store.findIntentByKey(tx, claim.scope, claim.key);
        const renewing = existing !== undefined && existing.state === 'pending' && Number(existing.expires_at_s) > nowS;
        if (!renewing && (await store.countPendingIntents(tx, cleared.agent.id, nowS)) >= PENDING_INTENTS_PER_AGENT_MAX) {
          throw new ApiError('rate_limited', {
            detail: `the agent already has ${PENDING_INTENTS_PER_AGENT_MAX} intents waiting for credit; fund it or retry one of them`,
            retryAfterS: 3600,
          });
        }
        const row = await store.upsertIntent(tx, {
          id: newId('int'),
          agent_id: cleared.agent.id,
          service_id: request.serviceId,
          action: request.action,
          input: request.input,
          price_uc: priceUc,
          requested_by: claim.scope,
          idempotency_key: claim.key,
          state: 'pending',
          execution_id: null,
          request_fingerprint: claim.fingerprint ?? null,
          cancellation_reason: null,
          created_at_s: BigInt(nowS),
          updated_at_s: BigInt(nowS),
          expires_at_s: BigInt(nowS + INTENT_LIFETIME_S),
        });
        return row.id;
      });
    } catch (error) {
      return this.refuse(key, uncharged(error));
    }
    // Not stored: once credit arrives (a grant, or the approved top-up), a retry with the same key runs
    // the execution; until then each retry answers the same intent.
    await key.release();
    const extra = { intentId, intent, priceUc: formatUc(priceUc) };
    const retry = 'Nothing was charged. Once credit is added, retry with the same Idempotency-Key to run it.';
    const provider = this.deps.paymentApproval;
    if (!provider) {
      throw uncharged(
        new ApiError('link_configuration_required', {
          detail: `the agent's credit does not cover this execution (${formatUc(priceUc)} µc) and no payment-approval provider is configured. ${retry}`,
        }),
        extra,
      );
    }
    let approval: Awaited<ReturnType<PaymentApprovalProvider['requestApproval']>>;
    try {
      approval = await provider.requestApproval({ intentId, intent, ownerId: cleared.agent.owner_id, priceUc });
    } catch (error) {
      log.warn({ err: error, intentId }, 'payment-approval provider failed');
      throw uncharged(new ApiError('payment_unavailable', { detail: `the payment-approval provider could not be reached. ${retry}` }), extra);
    }
    throw uncharged(
      new ApiError('approval_required', {
        detail: `the agent's credit does not cover this execution (${formatUc(priceUc)} µc); its owner must approve a top-up. ${retry}`,
        approval: { url: approval.approvalUrl, id: intentId, message: approval.instructions },
      }),
      { state: APPROVAL_STATE_PENDING, ...extra, payment: approval.payment, paymentMethods: approval.paymentMethods, instructions: approval.instructions },
    );
  }

  /**
   * A refusal before any hold (clearance, caps, credit) changed nothing, so nothing is stored: the key is
   * given back and the same request may be retried once the owner changes the agent's settings.
   */
  private async refuse(key: ClaimedKey<ExecuteResult>, error: ApiError): Promise<never> {
    await key.release();
    throw error;
  }

  /**
   * Releases the hold of a still-running execution and finishes it. False when it was no longer running
   * (recovery, or a concurrent path, resolved it first).
   */
  private async releaseExecution(tx: Tx, executionId: string, state: 'failed' | 'abandoned', errorCode: string): Promise<boolean> {
    const execution = await store.lockRunningExecution(tx, executionId);
    if (!execution) return false;
    try {
      await this.deps.ledger.release(tx, execution.hold_id);
    } catch (error) {
      // Past its deadline the hold is expired already: its credit is (or will be, by the sweeper) back.
      if (!(error instanceof ApiError && error.code === 'hold_resolved')) throw error;
    }
    await store.finishExecution(tx, executionId, state, errorCode, this.gateway.clock.nowMs());
    return true;
  }

  private async releaseQuietly(started: Started, errorCode: string): Promise<void> {
    try {
      await this.gateway.db.transaction((tx) => this.releaseExecution(tx, started.executionId, 'failed', errorCode));
    } catch (error) {
      // Recovery or the hold's deadline will release it; say so loudly.
      this.gateway.log.error({ err: error, executionId: started.executionId, holdId: started.holdId }, 'could not release the hold of a failed execution');
    }
  }

  /**
   * The recovery job: refreshes the heartbeat of this instance's in-flight executions, then releases the
   * holds of running executions whose process died (heartbeat stale) or whose deadline passed, and gives
   * their Idempotency-Keys back. Safe on any number of instances at once.
   */
  async recoverOrphans(): Promise<number> {
    const { db, clock, idempotency, log } = this.gateway;
    if (this.inFlight.size > 0) await store.heartbeat(db, [...this.inFlight], clock.nowMs());
    const nowMs = clock.nowMs();
    const staleBeforeMs = nowMs - EXECUTION_ORPHANED_AFTER_MS;
    let recovered = 0;
    for (const id of await store.orphanedExecutionIds(db, staleBeforeMs, nowMs, RECOVERY_BATCH_MAX)) {
      const claim = await db.transaction(async (tx): Promise<Claim | null> => {
        const execution = await store.lockRunningExecution(tx, id);
        // Re-checked under the lock: the owner may have finished it or beaten its heartbeat meanwhile.
        if (!execution) return null;
        const lost = Number(execution.heartbeat_at_ms) < staleBeforeMs;
        if (!lost && Number(execution.deadline_at_ms) > nowMs) return null;
        await this.releaseExecution(tx, id, 'abandoned', lost ? 'instance_lost' : 'deadline_passed');
        log.warn({ executionId: id, holdId: execution.hold_id, instanceId: execution.instance_id, reason: lost ? 'instance_lost' : 'deadline_passed' }, 'released the hold of an abandoned execution');
        return { scope: execution.idem_scope, route: execution.idem_route, key: execution.idem_key, token: execution.idem_token };
      });
      if (!claim) continue;
      await idempotency.abandon(claim);
      recovered += 1;
    }
    return recovered;
  }

  /**
   * Runs a retained intent once credit has arrived (after its top-up settled), as if its caller had retried
   * the original request: it claims the request's Idempotency-Key with the request's fingerprint, so at most
   * one run holds it at a time on any instance, the answer is stored under that key (a retry of the original
   * request replays it), and a key already answered is never run again.
   */
  async resumeIntent(intentId: string): Promise<ResumeOutcome> {
    const { db, idempotency, log } = this.gateway;
    const intent = await store.findIntent(db, intentId);
    if (!intent || intent.state !== 'pending') return 'finished';
    if (intent.request_fingerprint === null) {
      log.warn({ intentId }, 'a retained intent without its request fingerprint cannot be resumed; its caller must retry');
      return 'finished';
    }
    let outcome: ClaimOutcome;
    try {
      outcome = await idempotency.claim(intent.requested_by, EXECUTE_OPERATION, intent.idempotency_key, intent.request_fingerprint);
    } catch (error) {
      if (error instanceof ApiError && error.code === 'idempotency_key_in_use') return 'busy';
      if (error instanceof ApiError && error.code === 'idempotency_key_reused') {
        log.warn({ intentId }, 'the Idempotency-Key of a retained intent now names another request; the intent is not resumed');
        return 'finished';
      }
      throw error;
    }
    if (outcome.kind === 'replay') return 'finished';
    const request: ExecutionRequest = { agentId: intent.agent_id, serviceId: intent.service_id, action: intent.action, input: intent.input };
    let code = 'succeeded';
    try {
      await underClaim<ExecuteResult>(this.gateway, outcome.claim, undefined, (key) => this.execute(key, request, true));
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      code = error.code;
    }
    const after = await store.findIntent(db, intentId);
    if (!after || after.state !== 'pending') {
      log.info({ intentId, state: after?.state, code }, 'resumed a retained intent');
      return 'finished';
    }
    log.warn({ intentId, code }, 'a resumed intent could not run yet; it will be retried');
    return 'waiting';
  }

  /** Closes a pending intent whose top-up ended without credit; nothing was charged. False when it was not pending. */
  async cancelIntent(tx: Queryable, intentId: string, reason: string): Promise<boolean> {
    if (!(await store.cancelIntent(tx, intentId, reason, this.gateway.clock.nowS()))) return false;
    await this.emitIntentEvent(tx, (await store.findIntent(tx, intentId))!, { result: null, receipt: null, error: null });
    return true;
  }

  /**
   * `intent.completed` (executed), `intent.failed` or `intent.cancelled` to the owner's webhook, in the
   * transaction that closed the intent. The payload is the intent as GET /v1/intents/{id} shows it.
   */
  private async emitIntentEvent(tx: Queryable, intent: store.IntentRow, outcome: IntentOutcome): Promise<void> {
    const agent = await this.deps.identity.agentRow(tx, intent.agent_id);
    if (!agent) throw new Error(`intent ${intent.id}: its agent ${intent.agent_id} does not exist`);
    const type = intent.state === 'executed' ? 'intent.completed' : intent.state === 'failed' ? 'intent.failed' : 'intent.cancelled';
    await emitEvent(tx, { ownerId: agent.owner_id, type, data: { intent: toIntentView(intent, outcome) }, nowMs: this.gateway.clock.nowMs() });
  }

  /** A pending intent of this agent, or undefined. */
  async pendingIntent(db: Queryable, intentId: string, agentId: string): Promise<store.IntentRow | undefined> {
    const intent = await store.findIntent(db, intentId);
    return intent && intent.agent_id === agentId && intent.state === 'pending' ? intent : undefined;
  }

  /** An intent for its agent, or for that agent's owner (the acting-for rule); anyone else gets 404 (ids cannot be probed). */
  async intentFor(db: Queryable, principal: Actor, intentId: string): Promise<store.IntentRow> {
    const intent = await store.findIntent(db, intentId);
    const agent = intent ? await this.deps.identity.agentRow(db, intent.agent_id) : undefined;
    if (!intent || !agent || !actsFor(principal, agent)) throw new ApiError('not_found', { detail: `no intent ${intentId}` });
    return intent;
  }

  /** An intent as its readers see it, with its outcome while the execute answer is retained. */
  async readIntent(db: Queryable, intent: store.IntentRow): Promise<IntentView> {
    const { idempotency } = this.gateway;
    const execution = intent.execution_id ? await store.findExecution(db, intent.execution_id) : undefined;
    const answer = execution ? await idempotency.storedResponse(intent.requested_by, EXECUTE_OPERATION, intent.idempotency_key) : undefined;
    const body = (answer?.body ?? null) as (Partial<ExecuteResult> & Record<string, unknown>) | null;
    return toIntentView(intent, {
      result: intent.state === 'executed' ? (body?.result ?? null) : null,
      receipt: intent.state === 'executed' && execution ? await this.deps.ledger.getHold(db, execution.hold_id) : null,
      // One shape for an intent's error everywhere: the problem body its execute request was answered with.
      error: intent.state === 'failed' && answer && answer.status >= 400 ? problemBody(this.gateway.config.baseUrl, storedApiError(answer)) : null,
    });
  }

  /** Deletes intents that waited longer than their lifetime. */
  async sweepIntents(): Promise<number> {
    return store.deleteExpiredIntents(this.gateway.db, this.gateway.clock.nowS(), INTENT_SWEEP_BATCH_MAX);
  }
}
