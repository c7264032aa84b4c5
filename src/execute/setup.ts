// Builds the execute feature for the composition root: the catalogue from the module list it is given, the
// mail connector store, the pipeline and its parts, and their background jobs. No connector is named here:
// each builds its own context (src/connectors/types.ts).
import type { AgentService } from '../agents/service.ts';
import type { LedgerService } from '../ledger/service.ts';
import type { HumanApprover, PurchaseApprover } from '../platform/approvals.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { SecretBoxKey } from '../platform/secret-box.ts';
import type { Catalogue } from '../connectors/catalogue.ts';
import { INTENT_SWEEP_INTERVAL_MS, type IntentFunding } from './intents.ts';
import { MailConnectorService } from './mail-connectors.ts';
import { EXECUTION_RECOVERY_INTERVAL_MS } from './recovery.ts';
import { ExecuteService } from './service.ts';

export interface ExecuteFeature {
  execute: ExecuteService;
  mailConnectors: MailConnectorService;
}

export function buildExecuteFeature(
  gateway: Gateway,
  deps: { identity: AgentService; ledger: LedgerService; catalogue: Catalogue; secretBoxKey: SecretBoxKey | undefined; approver?: HumanApprover; purchases: PurchaseApprover & IntentFunding },
): ExecuteFeature {
  const mailConnectors = new MailConnectorService(gateway, deps.identity, deps.secretBoxKey);
  const execute = new ExecuteService(gateway, {
    identity: deps.identity,
    ledger: deps.ledger,
    catalogue: deps.catalogue,
    connections: [mailConnectors],
    executeTimeoutMs: gateway.config.services.executeTimeoutMs,
    approver: deps.approver,
    purchases: deps.purchases,
    // The payments service, which asks the owner about purchases, also holds the top-ups opened for retained
    // intents: a freeze that cancels an intent closes its top-up (src/payments/service.ts closeFundingOf).
    funding: deps.purchases,
  });
  gateway.schedule('execution-recovery', EXECUTION_RECOVERY_INTERVAL_MS, () => execute.recoverOrphans());
  gateway.schedule('intent-sweep', INTENT_SWEEP_INTERVAL_MS, () => execute.intents.sweep());
  return { execute, mailConnectors };
}
