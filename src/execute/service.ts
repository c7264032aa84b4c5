// The execute feature, in parts: the pipeline (clearance, the hold batch, the action within its timeout,
// the capture batch, failure), recovery of executions whose process died, retained intents and their events,
// the human approval asked for when credit falls short or the price is above the approval threshold, and the
// payer that holds and captures the price.
// This object only puts them together; each part's file says what it does.
import type { AgentService } from '../agents/service.ts';
import type { LedgerService } from '../ledger/service.ts';
import type { HumanApprover, PurchaseApprover } from '../platform/approvals.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { Catalogue } from '../connectors/catalogue.ts';
import { CreditApprovals } from './approvals.ts';
import { Intents, type IntentFunding } from './intents.ts';
import { prepaidCredit } from './payer.ts';
import { ExecutionPipeline, type ConnectionStore } from './pipeline.ts';
import { ExecutionRecovery } from './recovery.ts';

export interface ExecuteDependencies {
  identity: AgentService;
  ledger: LedgerService;
  /** The services execute runs, built from the module list given at composition. */
  catalogue: Catalogue;
  /** The stores of agents' connections, one per service that keeps them (the mail connectors). */
  connections: readonly ConnectionStore[];
  executeTimeoutMs: number;
  /** Asked when credit falls short; absent → insufficient credit answers 503 link_configuration_required. */
  approver?: HumanApprover;
  /** Asked when a price is above the agent's approval threshold, and read where the hold is taken. */
  purchases: PurchaseApprover;
  /** The top-ups of retained intents, closed with the intents a freeze or retirement cancels. */
  funding?: IntentFunding;
}

export class ExecuteService {
  readonly catalogue: Catalogue;
  readonly pipeline: ExecutionPipeline;
  readonly recovery: ExecutionRecovery;
  readonly intents: Intents;
  readonly approvals: CreditApprovals;

  constructor(gateway: Gateway, deps: ExecuteDependencies) {
    const payer = prepaidCredit(deps.ledger);
    this.catalogue = deps.catalogue;
    this.recovery = new ExecutionRecovery(gateway, payer);
    this.approvals = new CreditApprovals(gateway.log, deps.approver, deps.purchases);
    // A resumed intent runs through the pipeline as its caller's retry would (and waits, not asks again, when still short).
    this.intents = new Intents(gateway, deps, (key, request) => this.pipeline.execute(key, request, true));
    this.pipeline = new ExecutionPipeline(gateway, {
      identity: deps.identity,
      ledger: deps.ledger,
      payer,
      // Each connector's context factory sees the configuration, the clock and the log; never the database.
      connectors: deps.catalogue.open({ config: gateway.config, clock: gateway.clock, log: gateway.log }),
      connections: deps.connections,
      intents: this.intents,
      approvals: this.approvals,
      purchases: deps.purchases,
      recovery: this.recovery,
      executeTimeoutMs: deps.executeTimeoutMs,
    });
  }

  /** The pipeline's batchers of tx1 (holds) and tx2 (captures); tests pause them to form a batch deterministically. */
  get batchers(): ExecutionPipeline['batchers'] {
    return this.pipeline.batchers;
  }

  /** One pass of the recovery job (see recovery.ts). */
  recoverOrphans(): Promise<number> {
    return this.recovery.recoverOrphans();
  }
}
