// Retained intents: an execute request whose hold the agent's credit did not cover, or whose price is above
// the agent's approval threshold, kept once per (caller, Idempotency-Key) until credit arrives or the owner
// approves, then run once (by the caller's retry, or resumed by the gateway after its top-up settled), failed,
// cancelled (its top-up ended without credit, its purchase approval was declined or expired, no top-up can be
// asked for it (a delegate's), or a freeze or retirement stopped its agent) or swept (7 days). Each ending emits
// `intent.completed`, `intent.failed` or `intent.cancelled` in the transaction that made it.
import { emitEvent, emitEvents } from '../events/outbox.ts';
import { actsFor, type Actor } from '../agents/acting.ts';
import type { AgentService } from '../agents/service.ts';
import type { LedgerService, Redemption } from '../ledger/service.ts';
import type { ServiceIntent } from '../platform/approvals.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, problemBody } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { NEW_KEY, type Claim, type ClaimOutcome } from '../platform/idempotency.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, type Microcredits } from '../platform/money.ts';
import { storedApiError, underClaim, type ClaimedKey } from '../platform/operations.ts';
import { EXECUTE_OPERATION, type ExecuteResult, type ExecutionRequest } from './execution.ts';
import * as store from './store.ts';

/** A retained intent waits this long for a top-up before it is swept. */
export const INTENT_LIFETIME_S = 7 * 86_400;
/** Bounds what an agent without credit can make us store. */
export const PENDING_INTENTS_PER_AGENT_MAX = 100;

/**
 * Refusals by the owner's own rules and settings (a mandate that forbids the service or a budget or cap that no longer
 * covers it, a freeze, an approval now asked, an inbox taken off the mail allowlist, a mail connector removed or
 * pointed at a host the gateway may not reach): the gateway does not resume an intent they refused. What the owner
 * did not decide (credit spent elsewhere meanwhile, an upstream or storage fault) leaves it to the resume job's back-off.
 */
const OWNER_STOPS: ReadonlySet<string> = new Set(['SCOPE_FORBIDDEN', 'CAP_EXCEEDED', 'FROZEN', 'approval_required', 'inbox_not_allowed', 'connector_not_configured']);

/**
 * Whether a resume's refusal is the owner's to lift: one of `OWNER_STOPS`, or a mail server refusing the owner's
 * username or password (retried with the back-off, the gateway would log in and fail about 170 times in an intent's
 * life, which a mail provider counts toward locking the account; found from outside). GitHub refusing the gateway's
 * own token is the operator's to fix, and waits for the back-off.
 */
function stoppedByOwner(code: string, serviceId: string): boolean {
  return OWNER_STOPS.has(code) || (code === 'upstream_auth_failed' && serviceId === 'mail');
}
/** How often each instance deletes intents past their lifetime. */
export const INTENT_SWEEP_INTERVAL_MS = 10 * 60 * 1000;
const INTENT_SWEEP_BATCH_MAX = 1000;

/** What resuming a retained intent came to: it ended, another instance is running it, or it must wait. */
export type ResumeOutcome = 'finished' | 'busy' | 'waiting';

/** A retained intent as its agent and owner read it (GET /v1/intents/{id}), and as its events carry it. */
export interface IntentView {
  id: string;
  state: store.IntentState;
  agentId: string;
  intent: ServiceIntent;
  priceUc: string;
  executionId: string | null;
  /**
   * Why a cancelled intent was closed: `topup_declined`, `topup_expired`, `topup_failed`, `purchase_declined`,
   * `purchase_expired`, `delegate_has_no_lots` (no top-up is asked for a delegate), `agent_frozen` or `agent_retired`.
   */
  cancellationReason: string | null;
  /** The action's result, while the execute answer is retained (24 h by default). */
  result: object | null;
  /** The captured hold of an executed intent. */
  receipt: Redemption | null;
  /** A failed intent's problem body: the one its execute request was answered with (while retained). */
  error: Record<string, unknown> | null;
  /**
   * A pending intent's last run by the gateway on its own (after its top-up settled) that left it pending: when, the
   * problem it was refused with, and whether the gateway runs it again (`retried`: its back-off) or only the agent's
   * retry with its key can now (an owner's rule refused it). Null when there was none, or once it is not pending.
   */
  lastAttempt: { at: number; error: Record<string, unknown>; retried: boolean } | null;
  createdAt: number;
  updatedAt: number;
  expiresAt: number;
}

/** What an intent's outcome adds to its record: the result and receipt of an executed one, the error of a failed one. */
type IntentOutcome = Pick<IntentView, 'result' | 'receipt' | 'error'>;

const NO_OUTCOME: IntentOutcome = { result: null, receipt: null, error: null };

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
    lastAttempt:
      intent.state === 'pending' && intent.last_attempt_at_s !== null && intent.last_attempt_error !== null
        ? { at: Number(intent.last_attempt_at_s), error: JSON.parse(intent.last_attempt_error) as Record<string, unknown>, retried: intent.last_attempt_retried === true }
        : null,
    createdAt: Number(intent.created_at_s),
    updatedAt: Number(intent.updated_at_s),
    expiresAt: Number(intent.expires_at_s),
  };
}

/** Runs a resumed intent's request under its claimed key, as the pipeline runs a caller's retry. */
export type ResumeRun = (key: ClaimedKey<ExecuteResult>, request: ExecutionRequest) => Promise<ExecuteResult>;

/**
 * What pays for retained intents and ends with them when the kill switch stops them: the top-ups opened for them
 * (the payments feature's). In the freeze's or retirement's transaction.
 */
export interface IntentFunding {
  /** Locks the open top-ups bound to retained intents of these agents, before the kill switch locks any hold. */
  lockFundingOf(tx: Tx, agentIds: readonly string[]): Promise<void>;
  /**
   * Closes the top-ups still waiting for the owner's approval of these intents, which the kill switch just cancelled
   * or which ran (or failed for good) without them: no approval of theirs could run the intent any more. A top-up
   * row another transaction holds is left alone (an approval settling it: its credit stays), so a closing
   * transaction that already holds ledger locks never waits on one.
   */
  closeFundingOf(tx: Tx, intentIds: readonly string[], reason: IntentFundingEnd, atS?: number): Promise<number>;
}

/** Why a retained intent's funding ends: the kill switch cancelled it, or it ran (or failed for good) without it. */
export type IntentFundingEnd = 'agent_frozen' | 'agent_retired' | 'intent_executed' | 'intent_failed';

export interface IntentDependencies {
  identity: AgentService;
  ledger: Pick<LedgerService, 'getHold'>;
  /** Absent when nothing but a caller's retry funds an intent (no top-ups to close). */
  funding?: IntentFunding;
}

/** Whether a retained intent is another request's than this claim's (its fingerprint differs). */
function isAnotherRequests(intent: store.IntentRow, claim: Claim): boolean {
  return intent.request_fingerprint !== (claim.fingerprint ?? null);
}

/** The answer to a request under an Idempotency-Key whose retained intent is another request's. */
function keyOfAnotherIntent(intentId: string): ApiError {
  return new ApiError('idempotency_key_reused', {
    detail: `this idempotency key was first used with a different request, retained as intent ${intentId}; use ${NEW_KEY} for a new request`,
  });
}

export class Intents {
  constructor(
    private readonly gateway: Gateway,
    private readonly deps: IntentDependencies,
    private readonly run: ResumeRun,
  ) {}

  /**
   * Refuses a request whose Idempotency-Key names another request's retained intent, as the idempotency store
   * refuses a changed request (409 idempotency_key_reused): a 402 that retained an intent gave its key back so
   * that the same request may run once credit arrives, so the claim alone cannot tell that the key is taken.
   * Without this, another request under the key renewed the intent (which still held the first one's input) or
   * was recorded as its execution.
   */
  async refuseAnotherRequest(claim: Claim): Promise<void> {
    const retained = await store.findIntentByKey(this.gateway.db, claim.scope, claim.key);
    if (retained && isAnotherRequests(retained, claim)) throw keyOfAnotherIntent(retained.id);
  }

  /**
   * Retains the request of this claim (or renews the same one, for a retry with the same key) and answers
   * the intent's id. 403 FROZEN when the agent was frozen or retired meanwhile; 429 rate_limited when the agent
   * already has too many waiting; 409 idempotency_key_reused when the key's intent is another request's.
   */
  async retain(claim: Claim, intent: ServiceIntent, priceUc: Microcredits): Promise<string> {
    const { db, clock } = this.gateway;
    return db.transaction(async (tx) => {
      // The agent's row lock makes the count and the insert one step for this agent; with its ancestors' it orders
      // this retain with a freeze or retirement of any of them: one that committed since the request's hold pass is
      // refused here rather than leaving an intent it did not cancel.
      await this.deps.identity.lockUnstopped(tx, intent.agentId);
      const nowS = clock.nowS();
      const existing = await store.findIntentByKey(tx, claim.scope, claim.key);
      const renewing = existing !== undefined && existing.state === 'pending' && Number(existing.expires_at_s) > nowS;
      if (!renewing && (await store.countPendingIntents(tx, intent.agentId, nowS)) >= PENDING_INTENTS_PER_AGENT_MAX) {
        throw new ApiError('rate_limited', {
          detail: `the agent already has ${PENDING_INTENTS_PER_AGENT_MAX} intents waiting for credit; fund it or retry one of them`,
          retryAfterS: 3600,
        });
      }
      if (existing && isAnotherRequests(existing, claim)) throw keyOfAnotherIntent(existing.id);
      const row = await store.upsertIntent(tx, {
        id: newId('int'),
        agent_id: intent.agentId,
        service_id: intent.serviceId,
        action: intent.action,
        input: intent.input,
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
  }

  /**
   * Records, with the stored answer, that the intent of this claim (if it has one still open) ran and was charged,
   * and closes the top-up still waiting for its owner's approval, if any: the request ran on credit that came
   * another way (a grant, another top-up), and approving it could no longer run anything.
   */
  async finishExecuted(tx: Tx, claim: Claim, executionId: string, result: object, receipt: Redemption): Promise<void> {
    const intent = await store.finishIntent(tx, claim, 'executed', executionId, this.gateway.clock.nowS());
    if (!intent) return;
    await this.emit(tx, intent, { result, receipt, error: null });
    await this.deps.funding?.closeFundingOf(tx, [intent.id], 'intent_executed');
  }

  /**
   * Records, with the stored answer `failure`, that the intent of this claim (if it has one still open) failed
   * definitively, and closes its top-up still waiting for approval, as `finishExecuted` does.
   */
  async finishFailed(tx: Tx, claim: Claim, executionId: string, failure: ApiError): Promise<void> {
    const intent = await store.finishIntent(tx, claim, 'failed', executionId, this.gateway.clock.nowS());
    if (!intent) return;
    await this.emit(tx, intent, { result: null, receipt: null, error: this.errorOf(failure) });
    await this.deps.funding?.closeFundingOf(tx, [intent.id], 'intent_failed');
  }

  /**
   * Runs a retained intent once credit has arrived (after its top-up settled), as if its caller had retried
   * the original request: it claims the request's Idempotency-Key with the request's fingerprint, so at most
   * one run holds it at a time on any instance, the answer is stored under that key (a retry of the original
   * request replays it), and a key already answered is never run again.
   */
  async resume(intentId: string): Promise<ResumeOutcome> {
    const { db, idempotency, log } = this.gateway;
    const intent = await store.findIntent(db, intentId);
    if (!intent || intent.state !== 'pending') return 'finished';
    // An owner's rule refused an earlier run (below): the gateway no longer runs it, whichever pass comes (a job's pass
    // that read the top-up as due before that run ended ran it again: a second mail login, found by CI). The agent's
    // retry with its key retains the intent anew, which clears the mark.
    if (intent.last_attempt_retried === false) return 'finished';
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
    let refusal: ApiError | undefined;
    try {
      await underClaim<ExecuteResult>(this.gateway, outcome.claim, undefined, (key) => this.run(key, request));
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      code = error.code;
      refusal = error;
    }
    const after = await store.findIntent(db, intentId);
    if (!after || after.state !== 'pending') {
      log.info({ intentId, state: after?.state, code }, 'resumed a retained intent');
      return 'finished';
    }
    const stopped = stoppedByOwner(code, intent.service_id);
    if (refusal) await store.recordIntentAttempt(db, intentId, { atS: this.gateway.clock.nowS(), error: this.errorOf(refusal), retried: !stopped });
    if (stopped) {
      // The owner's rules refused what the owner's approval of the top-up let run: the gateway stops acting on its
      // own, as after a freeze; the agent's retry with its key is the agent asking again (docs/decisions.md).
      log.info({ intentId, code }, "a resumed intent was refused by its owner's rules; the gateway no longer resumes it (the agent's retry with its key may)");
      return 'finished';
    }
    log.warn({ intentId, code }, 'a resumed intent could not run yet; it will be retried');
    return 'waiting';
  }

  /**
   * Closes a pending intent whose top-up ended without credit, whose purchase approval was declined or expired,
   * or for which no top-up can be asked (a delegate's); nothing was charged. False when it was not pending.
   */
  async cancel(tx: Queryable, intentId: string, reason: string): Promise<boolean> {
    if (!(await store.cancelIntent(tx, intentId, reason, this.gateway.clock.nowS()))) return false;
    await this.emit(tx, (await store.findIntent(tx, intentId))!, NO_OUTCOME);
    return true;
  }

  /**
   * The kill switch's first lock on retained work, right after the stopped agents' rows: the top-ups waiting for the
   * owner on their intents, so that an approval settling one (top-up, then lot and balance rows) and a freeze
   * releasing holds (holds, lots, balances) take their common rows in one order.
   */
  async lockFundingOf(tx: Tx, agentIds: readonly string[]): Promise<void> {
    await this.deps.funding?.lockFundingOf(tx, agentIds);
  }

  /**
   * The kill switch's reach into retained work: every pending intent of these agents (the subtree a freeze or a
   * retirement stops, in its transaction) is cancelled with `reason`, so none runs by itself later (after its top-up
   * settles, or once the agent is unfrozen); one `intent.cancelled` each. The top-up still waiting for the owner's
   * approval of each is closed with it (`expired`, `topup.expired`), as a top-up's end cancels its intent: the
   * owner is no longer asked to pay for a run that will not happen. Set-based. A retry of the original request
   * with its key may still reopen one, as after a declined top-up, and asks its owner again.
   */
  async cancelPendingOf(tx: Tx, agentIds: readonly string[], reason: 'agent_frozen' | 'agent_retired', atS: number = this.gateway.clock.nowS()): Promise<number> {
    const cancelled = await store.cancelPendingIntentsOf(tx, agentIds, reason, atS);
    if (cancelled.length === 0) return 0;
    const owners = new Map<string, string>();
    for (const { agent_id: agentId } of cancelled) {
      if (owners.has(agentId)) continue;
      const agent = await this.deps.identity.agentRow(tx, agentId);
      if (!agent) throw new Error(`intent of agent ${agentId}: the agent does not exist`);
      owners.set(agentId, agent.owner_id);
    }
    await emitEvents(
      tx,
      cancelled.map((intent) => ({ ownerId: owners.get(intent.agent_id)!, type: 'intent.cancelled' as const, data: { intent: toIntentView(intent, NO_OUTCOME) } })),
      this.gateway.clock.nowMs(),
    );
    // At the freeze's time, as the intents: read again, the clock could be a second later (a flaky CI run).
    await this.deps.funding?.closeFundingOf(tx, cancelled.map((intent) => intent.id), reason, atS);
    return cancelled.length;
  }

  /** A pending intent of this agent, or undefined. */
  async pending(db: Queryable, intentId: string, agentId: string): Promise<store.IntentRow | undefined> {
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
  async read(db: Queryable, intent: store.IntentRow): Promise<IntentView> {
    const { idempotency } = this.gateway;
    const execution = intent.execution_id ? await store.findExecution(db, intent.execution_id) : undefined;
    const answer = execution ? await idempotency.storedResponse(intent.requested_by, EXECUTE_OPERATION, intent.idempotency_key) : undefined;
    const body = (answer?.body ?? null) as (Partial<ExecuteResult> & Record<string, unknown>) | null;
    return toIntentView(intent, {
      result: intent.state === 'executed' ? (body?.result ?? null) : null,
      receipt: intent.state === 'executed' && execution ? await this.deps.ledger.getHold(db, execution.hold_id) : null,
      error: intent.state === 'failed' && answer && answer.status >= 400 ? this.errorOf(storedApiError(answer)) : null,
    });
  }

  /** Deletes intents that waited longer than their lifetime. */
  async sweep(): Promise<number> {
    return store.deleteExpiredIntents(this.gateway.db, this.gateway.clock.nowS(), INTENT_SWEEP_BATCH_MAX);
  }

  /**
   * A failed intent's `error`, one shape in its event and in its reads: the problem body its execute request
   * was answered with (read back from the stored answer, it renders the same).
   */
  private errorOf(failure: ApiError): Record<string, unknown> {
    return problemBody(this.gateway.config.baseUrl, failure);
  }

  /**
   * `intent.completed` (executed), `intent.failed` or `intent.cancelled` to the owner's webhook, in the
   * transaction that closed the intent. The payload is the intent as GET /v1/intents/{id} shows it.
   */
  private async emit(tx: Queryable, intent: store.IntentRow, outcome: IntentOutcome): Promise<void> {
    const agent = await this.deps.identity.agentRow(tx, intent.agent_id);
    if (!agent) throw new Error(`intent ${intent.id}: its agent ${intent.agent_id} does not exist`);
    const type = intent.state === 'executed' ? 'intent.completed' : intent.state === 'failed' ? 'intent.failed' : 'intent.cancelled';
    await emitEvent(tx, { ownerId: agent.owner_id, type, data: { intent: toIntentView(intent, outcome) }, nowMs: this.gateway.clock.nowMs() });
  }
}
