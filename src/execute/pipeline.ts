// Metered execution (POST /v1/services/execute), in the spec's order:
//   clearance (agent active, service and category allowed, the action's own checks such as the mail
//   inbox allowlist) → a hold of the action's price → run the action → capture.
//
// Transactions. The action talks to the network, so it never runs inside a transaction (on PGlite a
// transaction blocks the whole database):
//   tx1  hold + the execution row (state running);
//   run  outside any transaction, bounded by the execution timeout;
//   tx2  capture + execution succeeded + the stored idempotent answer, all or nothing;
//        or, when the action failed: release + execution failed (+ the stored answer when replayable).
// So a charge exists only together with the answer that reports it, and a failed action is never charged.
// tx1 and tx2 are group-committed: the holds of concurrent executions are taken in one transaction, the
// captures of those that succeeded in another (see `batchers`). A process that dies between tx1 and tx2
// leaves its hold to recovery (recovery.ts); credit that falls short retains the request (intents.ts) and
// asks a human for more (approvals.ts). A price above the agent's mandate approval threshold retains the
// request too and asks the owner to approve this purchase (approvals.ts); the caller's retry with the same key
// then finds the approval in tx1, where the hold takes it and uses the approval, once.
import type { Actor } from '../agents/acting.ts';
import { clearAgent } from '../policy/spending.ts';
import type { AgentService } from '../agents/service.ts';
import type { AgentRow } from '../agents/service.ts';
import type { LedgerService, Redemption } from '../ledger/service.ts';
import { approvalUsedBy, refusalOfAnswered, type PurchaseAnswer, type PurchaseApprover, type RequestBinding, type ServiceIntent } from '../platform/approvals.ts';
import { Batcher, togetherOrAlone, type Settled } from '../platform/batcher.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { Claim } from '../platform/idempotency.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, formatUsd, type Microcredits } from '../platform/money.ts';
import { groupCommitLimits, type ClaimedKey } from '../platform/operations.ts';
import { activeSpan, type SpanRef } from '../platform/telemetry.ts';
import { ConnectorError, type Connectors, type PreparedAction } from '../connectors/catalogue.ts';
import type { ExecutionFacts } from '../connectors/types.ts';
import type { CreditApprovals } from './approvals.ts';
import { EXECUTE_STATE_SUCCEEDED, uncharged, type ExecuteResult, type ExecutionRequest } from './execution.ts';
import type { Intents } from './intents.ts';
import type { ExecutionPayer } from './payer.ts';
import { EXECUTION_DEADLINE_GRACE_MS, type ExecutionRecovery } from './recovery.ts';
import * as store from './store.ts';

/** The hold outlives the execution deadline by this much, so only a lost execution ever lets it expire. */
const HOLD_LIFETIME_MARGIN_S = 60;

/** Where the agents' stored connections of one service are kept (the mail connector store today). */
export interface ConnectionStore {
  /** The service whose connections it keeps. */
  readonly serviceId: string;
  /** The agent's connection with its secrets opened, or null; throws the refusal when a stored one cannot be used. */
  forExecution(db: Queryable, agentId: string): Promise<unknown>;
}

export interface PipelineDependencies {
  identity: AgentService;
  ledger: Pick<LedgerService, 'expireDue'>;
  payer: ExecutionPayer;
  connectors: Connectors;
  connections: readonly ConnectionStore[];
  intents: Intents;
  approvals: CreditApprovals;
  /** The owner's answers for executions above the approval threshold, read and used in tx1. */
  purchases: PurchaseApprover;
  recovery: ExecutionRecovery;
  executeTimeoutMs: number;
}

interface Cleared {
  agent: AgentRow;
  action: PreparedAction;
}

interface Started {
  executionId: string;
  holdId: string;
  priceUc: Microcredits;
}

/** tx1 of one execution, as its batch sees it. */
export interface BeginCall {
  claim: Claim;
  request: ExecutionRequest;
  cleared: Cleared;
  /** The execution's span, when tracing: its hold's mandate decision is recorded there. */
  trace?: SpanRef;
}

/** tx2 (success) of one execution, as its batch sees it. */
export interface SucceedCall {
  key: ClaimedKey<ExecuteResult>;
  started: Started;
  result: object;
}

/** The action finished, but recovery had already given its hold back. */
class ExecutionLost extends Error {}

/** The owner's answer closed this request for good (declined, expired, used, another request's): its stored refusal. */
class PurchaseClosed extends Error {
  constructor(readonly refusal: ApiError) {
    super(refusal.message);
  }
}

/** The execute request a purchase approval belongs to: its claimed Idempotency-Key and fingerprint. */
function bindingOf(claim: Claim): RequestBinding {
  if (claim.fingerprint === undefined) throw new Error(`the claim of key ${claim.key} has no request fingerprint`);
  return { scope: claim.scope, operation: claim.route, key: claim.key, fingerprint: claim.fingerprint };
}

/** The approvals the holds of a pass took their purchases under. */
function usedApprovals(answers: readonly PurchaseAnswer[], holds: ReadonlyArray<Settled<Redemption>>): Array<{ approvalId: string; holdId: string }> {
  return answers.flatMap((answer, index) => {
    const hold = holds[index]!;
    const approvalId = approvalUsedBy(answer);
    return approvalId !== undefined && hold.ok ? [{ approvalId, holdId: hold.value.id }] : [];
  });
}

/** After a hold: failures worth retrying (rate limits, 5xx) give the Idempotency-Key back; definitive ones are stored. */
function replayable(status: number): boolean {
  return status < 500 && status !== 429;
}

export class ExecutionPipeline {
  /**
   * Group commit of execute's two ledger transactions (as of mint and capture, docs/decisions.md): the holds
   * of concurrent executions are taken in one transaction, one agent's in arrival order; the captures of
   * those that succeeded are made in one. Each call keeps its own answer; a fault reruns each call alone.
   */
  private readonly begins: Batcher<BeginCall, Started>;
  private readonly successes: Batcher<SucceedCall, ExecuteResult>;
  private readonly connections: ReadonlyMap<string, ConnectionStore>;

  constructor(
    private readonly gateway: Gateway,
    private readonly deps: PipelineDependencies,
  ) {
    this.connections = new Map(deps.connections.map((connections) => [connections.serviceId, connections]));
    const limits = groupCommitLimits(gateway.db);
    this.begins = new Batcher((calls) => this.inBatch(calls, (tx, some) => this.beginIn(tx, some)), (call) => call.cleared.agent.id, limits, {
      name: 'executeHold',
      metrics: gateway.metrics,
    });
    // Every call here already holds credit and ran its action: none is refused for a full queue (the calls
    // waiting are bounded by the executions running, each admitted through the bounded queue of holds).
    this.successes = new Batcher(
      (calls) => this.inBatch(calls, (tx, some) => this.succeedIn(tx, some)),
      (call) => call.started.executionId,
      { ...limits, queueLengthMax: Number.POSITIVE_INFINITY },
      { name: 'executeCapture', metrics: gateway.metrics },
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

  private get holdLifetimeS(): number {
    return Math.ceil(this.deps.executeTimeoutMs / 1000) + HOLD_LIFETIME_MARGIN_S;
  }

  /** Which agent executes: the acting-for rule (agents/acting.ts); an agent executes as itself, an owner names one of its agents. */
  async actingAgentId(caller: Actor, requestedAgentId: string | undefined): Promise<string> {
    return (await this.deps.identity.actingAgent(this.gateway.db, caller, requestedAgentId)).id;
  }

  /** Refuses, before the Idempotency-Key is claimed, a service or action the catalogue does not have. */
  checkRequest(serviceId: string, action: string): void {
    const service = this.deps.connectors.catalogue.find(serviceId);
    if (!service) throw memberRefusal('serviceId', `"${serviceId}" is not a built-in service; known: ${this.deps.connectors.catalogue.ids.join(', ')}`);
    if (!Object.hasOwn(service.actions, action)) {
      throw memberRefusal('action', `"${action}" is not an action of service "${serviceId}"; it has ${Object.keys(service.actions).join(', ')}`);
    }
  }

  /**
   * Runs one execution under a claimed Idempotency-Key and returns its result, or throws the ApiError that
   * answers it. The key ends stored (result, or a definitive failure) or given back (the same request may
   * be retried). A resumed intent that meets insufficient credit again waits; it never asks for a second approval.
   */
  async execute(key: ClaimedKey<ExecuteResult>, request: ExecutionRequest, resuming = false): Promise<ExecuteResult> {
    // A resume claimed the key with its intent's own fingerprint: nothing to check.
    if (!resuming) {
      try {
        await this.deps.intents.refuseAnotherRequest(key.claim);
      } catch (error) {
        // Given back untouched: the key stays the retained request's, which a retry or the resume still runs.
        return this.refuse(key, uncharged(error));
      }
    }
    // Holds past their deadline give their credit back first, so it can pay for this one.
    await this.deps.ledger.expireDue({ agentId: request.agentId });
    let cleared: Cleared;
    try {
      cleared = await this.clear(request);
    } catch (error) {
      // A request whose approval stands (approved, or waiting for the owner), refused by what the owner can lift (a
      // freeze, a mandate): refused for now, and its refusal says so, as the hold's own refusal does (found from
      // outside: a freeze's said only "frozen", and one while the approval waited was stored under the key).
      const answer = await this.deps.purchases.standingApprovalFor(this.gateway.db, bindingOf(key.claim), request.agentId);
      return this.refuse(key, uncharged(refusalOfAnswered(answer, error)));
    }
    let started: Started;
    try {
      started = await this.begins.submit({ claim: key.claim, request, cleared, trace: activeSpan() });
    } catch (error) {
      if (error instanceof PurchaseClosed) return this.closeForGood(key, uncharged(error.refusal));
      if (error instanceof ApiError && error.code === 'INSUFFICIENT_CREDITS' && !resuming) return this.shortOfCredit(key, request, cleared);
      if (error instanceof ApiError && error.code === 'approval_required') return this.aboveThreshold(key, request, cleared, error);
      return this.refuse(key, uncharged(error));
    }
    return this.deps.recovery.heartbeating(started.executionId, async () => {
      let result: object;
      try {
        result = await this.withinTimeout(cleared.action.run());
      } catch (error) {
        return await this.fail(key, started, error);
      }
      return await this.succeed(key, started, result);
    });
  }

  /** The clearance checks, all before any hold: each refusal names its code. */
  private async clear(request: ExecutionRequest): Promise<Cleared> {
    const { db } = this.gateway;
    const agent = await this.deps.identity.agentRow(db, request.agentId);
    if (!agent) throw new ApiError('not_found', { detail: `no agent ${request.agentId}` });
    const service = this.deps.connectors.catalogue.find(request.serviceId);
    if (!service) throw new ApiError('invalid_input', { detail: `unknown service "${request.serviceId}"` });
    // A delegate is cleared under its ancestors' mandates and status too (a frozen ancestor freezes it).
    clearAgent(await this.deps.identity.withAncestors(db, agent), { category: service.category, serviceId: service.id }, this.gateway.clock.nowS());
    const connections = this.connections.get(service.id);
    const facts: ExecutionFacts<unknown> = {
      agentId: agent.id,
      allowlists: { services: agent.allowed_services, categories: agent.allowed_categories, inboxes: agent.inbox_allowlist },
      connection: async () => (connections ? connections.forExecution(db, agent.id) : null),
    };
    return { agent, action: await this.deps.connectors.prepare(request.serviceId, request.action, request.input, facts) };
  }

  /**
   * tx1 of a batch: the owner's answers for the calls' purchases (their approvals locked first, before any
   * agent), each call's hold (a refusal is that call's answer; an approved purchase passes the approval
   * threshold), the approvals used by the holds taken, and the execution row that lets recovery find it.
   */
  private async beginIn(tx: Tx, calls: readonly BeginCall[]): Promise<Array<Settled<Started>>> {
    // The approvals' lock and the holders' locks sent together (one round trip on PostgreSQL), in that order.
    const [answering, holders] = await Promise.all([
      this.deps.purchases.lockApprovals(tx, calls.map(({ claim }) => bindingOf(claim))),
      this.deps.payer.lockHolders(tx, calls.map(({ cleared }) => cleared.agent.id)),
    ]);
    const answers = await answering(calls.map(({ claim, cleared }) => ({ ...bindingOf(claim), agentId: cleared.agent.id, amountUc: cleared.action.priceUc })));
    const holding = calls.flatMap((call, index) => (answers[index]!.state === 'closed' ? [] : [index]));
    const held = await this.deps.payer.holdMany(
      tx,
      holding.map((index) => {
        const { agent, action } = calls[index]!.cleared;
        return {
          agentId: agent.id,
          offerId: `${action.service.id}:${action.actionName}`,
          category: action.service.category,
          serviceId: action.service.id,
          amountUc: action.priceUc,
          lifetimeS: this.holdLifetimeS,
          offerSnapshot: { serviceId: action.service.id, action: action.actionName, title: action.service.title, priceUc: formatUc(action.priceUc) },
          approved: answers[index]!.state === 'approved',
          trace: calls[index]!.trace,
        };
      }),
      holders,
    );
    let position = 0;
    const holds = answers.map((answer): Settled<Redemption> => {
      if (answer.state === 'closed') return { ok: false, error: new PurchaseClosed(answer.error) };
      const outcome = held[position++]!;
      return outcome.ok ? outcome : { ok: false, error: refusalOfAnswered(answer, outcome.error) };
    });
    await this.deps.purchases.use(tx, usedApprovals(answers, holds));
    const nowMs = this.gateway.clock.nowMs();
    const rows: store.ExecutionRow[] = [];
    const outcomes = holds.map((held, index): Settled<Started> => {
      if (!held.ok) return held;
      const { claim, request, cleared } = calls[index]!;
      const row: store.ExecutionRow = {
        id: newId('exe'),
        agent_id: cleared.agent.id,
        service_id: cleared.action.service.id,
        action: request.action,
        hold_id: held.value.id,
        state: 'running',
        error_code: null,
        instance_id: this.deps.recovery.instanceId,
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
    // The transaction's last statement, sent with its COMMIT.
    await store.insertExecutions(tx.lastStatement(), rows);
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
      // A freeze or a retirement that released the hold revoked it (409 voucher_revoked): nothing is charged, the
      // result is not handed out, and the answer is final: stored, so a retry replays it rather than running the
      // action again once the owner unfreezes.
      if (error instanceof ApiError && error.code === 'voucher_revoked') {
        return this.closeFailed(key, started, uncharged(error, { executionId: started.executionId, redemptionId: started.holdId }), error.code, true);
      }
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
    const { payer, intents } = this.deps;
    const running = await store.lockRunningExecutions(tx, calls.map(({ started }) => started.executionId));
    const live = calls.filter(({ started }) => running.has(started.executionId));
    const receipts = await payer.captureMany(tx, live.map(({ started }) => started.holdId));
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
      const body: ExecuteResult = {
        state: EXECUTE_STATE_SUCCEEDED,
        executionId: started.executionId,
        result,
        receipt,
        priceUc: formatUc(started.priceUc),
        priceUsd: formatUsd(started.priceUc),
        paymentMethod: payer.paymentMethod,
      };
      await key.storeResult(tx, body);
      await intents.finishExecuted(tx, key.claim, started.executionId, result, receipt);
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
    return this.closeFailed(key, started, failure, error.code, replayable(failure.status));
  }

  /**
   * Ends a failed execution after its hold: released (or already released), recorded failed with `errorCode`,
   * and its answer stored under the key when it is definitive (`storeAnswer`), all in one transaction; else the
   * key is given back. Throws the answer.
   */
  private async closeFailed(key: ClaimedKey<ExecuteResult>, started: Started, failure: ApiError, errorCode: string, storeAnswer: boolean): Promise<never> {
    const stored = await this.gateway.db.transaction(async (tx) => {
      const owned = await this.deps.recovery.releaseExecution(tx, started.executionId, 'failed', errorCode);
      if (owned && storeAnswer) {
        await key.storeError(tx, failure);
        await this.deps.intents.finishFailed(tx, key.claim, started.executionId, failure);
      }
      // The key is given back for a retry, which the owner's approval is for: it is open again (found from outside:
      // an upstream's 502 left it used by the released hold, and every retry answered approval_used).
      if (owned && !storeAnswer) await this.deps.purchases.reopenUsedBy(tx, started.holdId);
      return owned && storeAnswer;
    });
    if (!stored) await key.release();
    throw failure;
  }

  /**
   * Credit did not cover the hold: retain the intent, then answer 402 or 503 (approvals.ts). Nothing was charged.
   * When the approver refuses for a reason no wait cures (a delegate: 409 delegate_has_no_lots), nothing will
   * resume the intent, so it is closed now (`intent.cancelled`), as a declined purchase closes its intent.
   */
  private async shortOfCredit(key: ClaimedKey<ExecuteResult>, request: ExecutionRequest, cleared: Cleared): Promise<never> {
    const { agent, action } = cleared;
    // Not stored: once credit arrives (a grant, or the approved top-up), a retry with the same key runs
    // the execution; until then each retry answers the same intent (reopened if it was closed).
    const { intentId, intent } = await this.retainForRetry(key, request, cleared);
    const { refusal, closes } = await this.deps.approvals.refusal({ intentId, intent, ownerId: agent.owner_id, priceUc: action.priceUc });
    if (closes !== null) await this.gateway.db.transaction((tx) => this.deps.intents.cancel(tx, intentId, closes));
    throw refusal;
  }

  /**
   * Retains the request as an intent and gives its key back, so that the retry with the same key runs again
   * (nothing was charged, and the refusal that follows is not stored). A failure to retain is the answer.
   */
  private async retainForRetry(key: ClaimedKey<ExecuteResult>, request: ExecutionRequest, cleared: Cleared): Promise<{ intentId: string; intent: ServiceIntent }> {
    const intent: ServiceIntent = { serviceId: request.serviceId, action: request.action, input: request.input, agentId: cleared.agent.id };
    let intentId: string;
    try {
      intentId = await this.deps.intents.retain(key.claim, intent, cleared.action.priceUc);
    } catch (error) {
      return this.refuse(key, uncharged(error));
    }
    await key.release();
    return { intentId, intent };
  }

  /**
   * The price is above the agent's approval threshold and the owner has not approved this request: retain the
   * intent, then answer 402 with its purchase approval (approvals.ts). Nothing was charged; not stored, so the
   * retry with the same key runs again, and takes the hold once the owner approved.
   */
  private async aboveThreshold(key: ClaimedKey<ExecuteResult>, request: ExecutionRequest, cleared: Cleared, refusal: ApiError): Promise<never> {
    const { agent, action } = cleared;
    const { intentId, intent } = await this.retainForRetry(key, request, cleared);
    throw await this.deps.approvals.purchaseRefusal({
      intentId,
      intent,
      ownerId: agent.owner_id,
      priceUc: action.priceUc,
      binding: bindingOf(key.claim),
      offer: { id: `${action.service.id}:${action.actionName}`, name: `${action.service.title}: ${action.actionName}` },
      refusal,
    });
  }

  /**
   * The owner declined this request's purchase, or its approval expired or was used: a final answer, stored
   * under the key (a retry replays it). Its retained intent was closed with the approval.
   */
  private async closeForGood(key: ClaimedKey<ExecuteResult>, refusal: ApiError): Promise<never> {
    await key.storeError(this.gateway.db, refusal);
    throw refusal;
  }

  /**
   * A refusal before any hold (clearance, caps, credit) changed nothing, so nothing is stored: the key is
   * given back and the same request may be retried once the owner changes the agent's settings.
   */
  private async refuse(key: ClaimedKey<ExecuteResult>, error: ApiError): Promise<never> {
    await key.release();
    throw error;
  }

  private async releaseQuietly(started: Started, errorCode: string): Promise<void> {
    try {
      await this.gateway.db.transaction(async (tx) => {
        // The caller may retry with the key: the approval the hold used is open again for it.
        if (await this.deps.recovery.releaseExecution(tx, started.executionId, 'failed', errorCode)) await this.deps.purchases.reopenUsedBy(tx, started.holdId);
      });
    } catch (error) {
      // Recovery or the hold's deadline will release it; say so loudly.
      this.gateway.log.error({ err: error, executionId: started.executionId, holdId: started.holdId }, 'could not release the hold of a failed execution');
    }
  }
}
