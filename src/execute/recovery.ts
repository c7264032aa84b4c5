// Crash recovery of executions. Process death between tx1 (the hold) and tx2 (the capture) leaves a running
// execution with a held hold. The instance that runs an action refreshes the execution's heartbeat; any
// instance's recovery job releases the hold of a running execution whose heartbeat stopped (its process
// died) or whose deadline passed, and gives its Idempotency-Key back. The hold's own deadline (the execution
// timeout plus a margin) is the backstop: the ledger's sweeper expires it even if no recovery job ever runs.
// Capture and recovery both lock the execution row first, so at most one of them resolves the hold.
import type { Tx } from '../platform/db/database.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { Claim } from '../platform/idempotency.ts';
import { newId } from '../platform/ids.ts';
import type { ExecutionPayer } from './payer.ts';
import * as store from './store.ts';

/** How often an instance refreshes the heartbeat of its in-flight executions and looks for orphans. */
export const EXECUTION_RECOVERY_INTERVAL_MS = 2_000;
/** A running execution whose heartbeat is older than this belongs to a dead process. */
export const EXECUTION_ORPHANED_AFTER_MS = 10_000;
/** Past the execution timeout, how long before recovery treats a running execution as lost. */
export const EXECUTION_DEADLINE_GRACE_MS = 5_000;
const RECOVERY_BATCH_MAX = 100;

export class ExecutionRecovery {
  /** Names this process on the executions it runs, for the logs of recovery. */
  readonly instanceId = newId('ins');
  private readonly inFlight = new Set<string>();

  constructor(
    private readonly gateway: Gateway,
    private readonly payer: ExecutionPayer,
  ) {}

  /** Runs an execution's action and capture while this instance keeps its heartbeat fresh. */
  async heartbeating<T>(executionId: string, work: () => Promise<T>): Promise<T> {
    this.inFlight.add(executionId);
    try {
      return await work();
    } finally {
      this.inFlight.delete(executionId);
    }
  }

  /**
   * Releases the hold of a still-running execution and finishes it. False when it was no longer running
   * (recovery, or a concurrent path, resolved it first).
   */
  async releaseExecution(tx: Tx, executionId: string, state: 'failed' | 'abandoned', errorCode: string): Promise<boolean> {
    const execution = await store.lockRunningExecution(tx, executionId);
    if (!execution) return false;
    // Past its deadline the hold is expired already: its credit is (or will be, by the sweeper) back.
    await this.payer.release(tx, execution.hold_id);
    await store.finishExecution(tx, executionId, state, errorCode, this.gateway.clock.nowMs());
    return true;
  }

  /**
   * The recovery job: refreshes the heartbeat of this instance's in-flight executions, then releases the
   * holds of running executions whose process died (heartbeat stale) or whose deadline passed, and ends the
   * leases of their Idempotency-Keys, so that each request's retry takes its key over at once (and no other
   * request does). Safe on any number of instances at once.
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
      await idempotency.endLease(claim);
      recovered += 1;
    }
    return recovered;
  }
}
