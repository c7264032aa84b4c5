// Builds the execute feature from configuration, for the composition root: the connectors' operator
// settings, the mail connector store, the pipeline, and its background jobs.
import type { AgentService } from '../agents/service.ts';
import type { LedgerService } from '../ledger/service.ts';
import type { Gateway } from '../platform/gateway.ts';
import type { SecretBoxKey } from '../platform/secret-box.ts';
import { createGitHubContext } from '../connectors/github-public.ts';
import { MAIL_DEFAULTS, type MailSettings } from '../connectors/mail.ts';
import { MailConnectorService } from './mail-connectors.ts';
import type { PaymentApprovalProvider } from './payment-approval.ts';
import { EXECUTION_RECOVERY_INTERVAL_MS, ExecuteService } from './service.ts';

const INTENT_SWEEP_INTERVAL_MS = 10 * 60 * 1000;

export interface ExecuteFeature {
  execute: ExecuteService;
  mailConnectors: MailConnectorService;
}

export function buildExecuteFeature(
  gateway: Gateway,
  deps: { identity: AgentService; ledger: LedgerService; secretBoxKey: SecretBoxKey | undefined; paymentApproval?: PaymentApprovalProvider },
): ExecuteFeature {
  const { services, allowPrivateNetworkTargets } = gateway.config;
  const mail: MailSettings = {
    ...MAIL_DEFAULTS,
    connectTimeoutMs: services.mail.connectTimeoutMs,
    greetingTimeoutMs: services.mail.connectTimeoutMs,
    socketTimeoutMs: services.mail.socketTimeoutMs,
    operationTimeoutMs: services.mail.operationTimeoutMs,
    messageBytesMax: services.mail.messageBytesMax,
    bodyCharsMax: services.mail.bodyCharsMax,
    allowPrivateNetworkTargets,
  };
  const github = createGitHubContext({
    baseUrl: services.github.baseUrl,
    token: services.github.token,
    timeoutMs: services.github.timeoutMs,
    etagCacheEntries: services.github.etagCacheEntries,
    clock: gateway.clock,
  });
  const mailConnectors = new MailConnectorService(gateway, deps.identity, deps.secretBoxKey);
  const execute = new ExecuteService(gateway, {
    identity: deps.identity,
    ledger: deps.ledger,
    mailConnectors,
    github,
    mail,
    executeTimeoutMs: services.executeTimeoutMs,
    paymentApproval: deps.paymentApproval,
  });
  gateway.schedule('execution-recovery', EXECUTION_RECOVERY_INTERVAL_MS, () => execute.recoverOrphans());
  gateway.schedule('intent-sweep', INTENT_SWEEP_INTERVAL_MS, () => execute.sweepIntents());
  return { execute, mailConnectors };
}
