// The composition root: builds each feature's service once, then serves the features in order.
import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { docsRoutes } from './docs/routes.ts';
import { eventOperations } from './events/operations.ts';
import { eventRoutes } from './events/routes.ts';
import { WebhookService } from './events/service.ts';
import { WebhookWorker } from './events/worker.ts';
import type { PaymentApprovalProvider } from './execute/payment-approval.ts';
import { executeOperations } from './execute/operations.ts';
import { executeQueries } from './execute/queries.ts';
import { EXECUTE_SCHEMAS } from './execute/schemas.ts';
import { executeRoutes } from './execute/routes.ts';
import { buildExecuteFeature } from './execute/setup.ts';
import type { ExecuteService } from './execute/service.ts';
import type { MailConnectorService } from './execute/mail-connectors.ts';
import { healthRoutes } from './health/routes.ts';
import { agentOperations } from './agents/operations.ts';
import { agentQueries } from './agents/queries.ts';
import { AGENT_SCHEMAS } from './agents/schemas.ts';
import { agentRoutes } from './agents/routes.ts';
import { AgentService } from './agents/service.ts';
import { identityProviders } from './identity/issuers.ts';
import { identityQueries, MeSchema } from './identity/queries.ts';
import { identityRoutes } from './identity/routes.ts';
import { ensureRuntimeSecret } from './identity/store.ts';
import { CredentialVerifier } from './identity/verifier.ts';
import { integrationRoutes } from './integrations/routes.ts';
import { keysRoutes } from './keys/routes.ts';
import { mcpRoutes } from './mcp/http.ts';
import type { DohOptions } from './merchants/doh.ts';
import { merchantOperations } from './merchants/operations.ts';
import { merchantRoutes } from './merchants/routes.ts';
import { MerchantService } from './merchants/service.ts';
import { revokedAccessTokenIds } from './oauth/access-tokens.ts';
import { oauthRoutes } from './oauth/routes.ts';
import { acceptedOperatorHash } from './operator/credential.ts';
import { operatorRoutes } from './operator/routes.ts';
import { sandboxRoutes } from './sandbox/routes.ts';
import { accessQueries } from './access/queries.ts';
import { accessRoutes } from './access/routes.ts';
import { ledgerOperations } from './ledger/operations.ts';
import { ledgerQueries } from './ledger/queries.ts';
import { LEDGER_SCHEMAS } from './ledger/schemas.ts';
import { ledgerRoutes } from './ledger/routes.ts';
import { LedgerService } from './ledger/service.ts';
import { offerOperations } from './offers/operations.ts';
import { offerQueries } from './offers/queries.ts';
import { OFFER_SCHEMAS } from './offers/schemas.ts';
import { offerRoutes } from './offers/routes.ts';
import { LocalApprovalProvider, StripeCheckoutProvider, type TopupProvider } from './payments/providers.ts';
import { ownerWebhookOperations } from './owner-webhooks/operations.ts';
import { ownerWebhookRoutes } from './owner-webhooks/routes.ts';
import { OwnerWebhookService } from './owner-webhooks/service.ts';
import { paymentRoutes } from './payments/routes.ts';
import { PaymentsService, TOPUP_JOB_INTERVAL_MS } from './payments/service.ts';
import { StripeWebhook } from './payments/stripe-webhook.ts';
import { OfferService } from './offers/service.ts';
import { voucherOperations } from './vouchers/operations.ts';
import { voucherRoutes } from './vouchers/routes.ts';
import { VoucherService } from './vouchers/service.ts';
import { ConfigError } from './platform/config.ts';
import type { Gateway } from './platform/gateway.ts';
import { buildApp } from './platform/http/app.ts';
import { newSecret } from './platform/ids.ts';
import { generateSecretBoxKey, parseSecretBoxKey, type SecretBoxKey } from './platform/secret-box.ts';

/** The merchant API key pepper: configured, or in dev mode generated once and shared through the database. */
async function apiKeyPepper(gateway: Gateway): Promise<string | undefined> {
  if (gateway.config.apiKeyPepper) return gateway.config.apiKeyPepper;
  if (gateway.config.mode !== 'dev') return undefined;
  return ensureRuntimeSecret(gateway.db, 'api_key_pepper', newSecret(), gateway.clock.nowS());
}

/**
 * The key sealing stored secrets: configured, or in dev mode generated once and shared through the
 * database (like the pepper). Live mode without it stores no secrets (webhook PUT answers 503).
 */
async function secretBoxKey(gateway: Gateway): Promise<SecretBoxKey | undefined> {
  const text =
    gateway.config.secretBoxKey ??
    (gateway.config.mode === 'dev' ? await ensureRuntimeSecret(gateway.db, 'secret_box_key', generateSecretBoxKey().text, gateway.clock.nowS()) : undefined);
  if (text === undefined) return undefined;
  const parsed = parseSecretBoxKey(text);
  if ('error' in parsed) throw new ConfigError([`ACG_SECRET_BOX_KEY ${parsed.error}`]);
  return parsed.key;
}

export interface Services {
  verifier: CredentialVerifier;
  /** Agent management; the features and tests that take it call it `identity`. */
  identity: AgentService;
  apiKeyPepper: string | undefined;
  secretBoxKey: SecretBoxKey | undefined;
  merchants: MerchantService;
  webhooks: WebhookService;
  webhookWorker: WebhookWorker;
  ledger: LedgerService;
  offers: OfferService;
  vouchers: VoucherService;
  execute: ExecuteService;
  mailConnectors: MailConnectorService;
  /** The DoH resolver merchants verify with (in dev mode by default the dev zone; see sandbox/routes.ts). */
  doh: DohOptions;
  /** SHA-256 of the operator credential the operator routes accept; undefined: none configured. */
  operatorHash: string | undefined;
  /** Always present: top-ups are readable without a provider (ACG_PAYMENT_PROVIDER=none); only creating needs one. */
  payments: PaymentsService;
  stripeWebhook?: StripeWebhook;
}

/** Optional collaborators the composition root can be given (tests inject fakes here). */
export interface AppDependencies {
  /** The payments feature's approval provider; without one, insufficient credit answers 503 link_configuration_required. */
  paymentApproval?: PaymentApprovalProvider;
}

/** How often each instance deletes events past their retention. */
const EVENT_PURGE_INTERVAL_MS = 60 * 60 * 1000;
/** How often each instance reclaims holds past their deadline (reads and writes treat them as expired at once). */
const HOLD_SWEEP_INTERVAL_MS = 5000;
/** How often each instance deletes avatar uploads that expired before they were finalized. */
const AVATAR_UPLOAD_SWEEP_INTERVAL_MS = 60 * 60 * 1000;

function topupProvider(config: Gateway['config']): TopupProvider | undefined {
  const { payments } = config;
  if (payments.provider === 'local') return new LocalApprovalProvider(config);
  if (payments.provider === 'stripe' && payments.stripe) return new StripeCheckoutProvider(config, payments.stripe);
  return undefined;
}

export async function buildServices(gateway: Gateway, dependencies: AppDependencies = {}): Promise<Services> {
  const providers = await identityProviders(gateway.config);
  const pepper = await apiKeyPepper(gateway);
  const identity = new AgentService(gateway, () => providers.agent?.issuer);
  gateway.schedule('avatar-upload-sweep', AVATAR_UPLOAD_SWEEP_INTERVAL_MS, () => identity.sweepAvatarUploads());
  const ledger = new LedgerService(gateway, identity);
  gateway.schedule('hold-expiry-sweep', HOLD_SWEEP_INTERVAL_MS, () => ledger.expireDue());
  const { config } = gateway;
  const boxKey = await secretBoxKey(gateway);
  const webhooks = new WebhookService(gateway, boxKey);
  const doh: DohOptions = {
    resolverUrl: config.doh.resolverUrl,
    timeoutMs: config.doh.timeoutMs,
    ca: config.doh.caFile ? readFileSync(config.doh.caFile, 'utf8') : undefined,
    devZoneCleartext: config.mode === 'dev' && config.doh.devZone,
  };
  const merchants = new MerchantService(gateway, { webhooks, apiKeyPepper: pepper, doh });
  const verifier = new CredentialVerifier(gateway, providers, pepper, merchants, identity, { revokedAccessTokenIds });
  const offers = new OfferService(gateway, merchants);
  const vouchers = new VoucherService(gateway, ledger, offers);
  const webhookWorker = new WebhookWorker({
    db: gateway.db,
    clock: gateway.clock,
    log: gateway.log,
    secretBoxKey: boxKey,
    allowPrivateNetworkTargets: config.allowPrivateNetworkTargets,
    ca: config.outboundCaFile ? readFileSync(config.outboundCaFile, 'utf8') : undefined,
    testHooks: gateway.outbound,
  });
  gateway.schedule('webhook-delivery', config.webhookPollIntervalMs, () => webhookWorker.pass());
  gateway.schedule('event-retention-purge', EVENT_PURGE_INTERVAL_MS, () => webhooks.purgeExpired());
  // Payments and execute need each other: execute asks payments for approvals, payments resumes execute's intents.
  let executeService: ExecuteService | undefined;
  const provider = topupProvider(config);
  const payments = new PaymentsService(gateway, { identity, ledger, provider, intents: () => executeService! });
  const stripeWebhook = provider && config.payments.stripe ? new StripeWebhook(payments, config.payments.stripe) : undefined;
  if (provider) gateway.schedule('topups', TOPUP_JOB_INTERVAL_MS, () => payments.runJobs());
  const paymentApproval = dependencies.paymentApproval ?? (provider ? payments : undefined);
  const { execute, mailConnectors } = buildExecuteFeature(gateway, { identity, ledger, secretBoxKey: boxKey, paymentApproval });
  executeService = execute;
  const operatorHash = acceptedOperatorHash(config);
  return {
    verifier, identity, apiKeyPepper: pepper, secretBoxKey: boxKey, merchants, webhooks, webhookWorker, ledger, offers, vouchers, execute, mailConnectors, doh, operatorHash,
    payments, stripeWebhook,
  };
}

/** Every resource's schema (`$id` each): registered once at the root of the HTTP face, inlined by MCP. */
export const RESOURCE_SCHEMAS = [...LEDGER_SCHEMAS, ...AGENT_SCHEMAS, ...OFFER_SCHEMAS, ...EXECUTE_SCHEMAS, MeSchema];

export async function buildGatewayApp(
  gateway: Gateway,
  extraFeatures: FastifyPluginAsync[] = [],
  dependencies: AppDependencies = {},
): Promise<{ app: FastifyInstance; services: Services }> {
  const services = await buildServices(gateway, dependencies);
  const providers = { human: services.verifier.provider('human'), agent: services.verifier.provider('agent') };
  const ownerWebhooks = new OwnerWebhookService(services.webhooks);
  const operations = {
    agents: agentOperations(services.identity),
    ledger: ledgerOperations(services.ledger),
    vouchers: voucherOperations(services.vouchers),
    execute: executeOperations(services.execute, services.mailConnectors),
  };
  const queries = {
    access: accessQueries(),
    agents: agentQueries(services.identity),
    identity: identityQueries(services.identity, services.ledger),
    ledger: ledgerQueries(services.ledger, services.identity, services.merchants),
    offers: offerQueries(services.offers, services.identity),
    execute: executeQueries(services.execute, services.mailConnectors),
  };
  const features: FastifyPluginAsync[] = [
    healthRoutes,
    docsRoutes,
    keysRoutes,
    oauthRoutes({ verifier: services.verifier }),
    agentRoutes({ operations: operations.agents, queries: queries.agents }),
    identityRoutes(queries.identity),
    integrationRoutes({ providers, apiKeysAvailable: services.apiKeyPepper !== undefined, paymentApprovalConfigured: () => services.execute.paymentApprovalConfigured, paymentProvider: dependencies.paymentApproval ? undefined : services.payments.providerKind }),
    ledgerRoutes({ operations: operations.ledger, queries: queries.ledger }),
    offerRoutes(offerOperations(services.offers), queries.offers),
    voucherRoutes(operations.vouchers),
    accessRoutes(queries.access),
    executeRoutes({ operations: operations.execute, queries: queries.execute }),
    paymentRoutes({
      payments: services.payments,
      stripeWebhook: services.stripeWebhook,
      devLoginUrl: gateway.config.mode === 'dev' && providers.human?.source === 'built_in' ? '/dev/issuers/human/login' : undefined,
      humanIssuer: providers.human?.issuer,
    }),
    merchantRoutes(services.merchants, merchantOperations(services.merchants)),
    mcpRoutes({
      gateway,
      operations: { ...operations.vouchers, ...operations.execute, ...operations.agents },
      queries: { ...queries.identity, ...queries.offers, ...queries.ledger, ...queries.execute, ...queries.agents },
      schemas: RESOURCE_SCHEMAS,
    }),
    eventRoutes(services.merchants, services.webhooks, eventOperations(services.merchants, services.webhooks)),
    ownerWebhookRoutes(ownerWebhooks, ownerWebhookOperations(ownerWebhooks)),
    operatorRoutes({ grantCredit: operations.ledger.grantCredit, acceptedHash: services.operatorHash }),
    sandboxRoutes({ merchants: services.merchants, operatorHash: services.operatorHash, doh: services.doh }),
    ...extraFeatures,
  ];
  return { app: await buildApp(gateway, { features, authenticator: services.verifier, schemas: RESOURCE_SCHEMAS }), services };
}
