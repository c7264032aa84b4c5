// The composition root: builds each feature's service once, then serves the features in order.
import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { consoleRoutes } from './console/routes.ts';
import { docsRoutes } from './docs/routes.ts';
import { eventOperations, ownerWebhookOperations } from './events/operations.ts';
import { OwnerWebhookService } from './events/owner-webhooks.ts';
import { eventQueries } from './events/queries.ts';
import { eventRoutes, ownerWebhookRoutes } from './events/routes.ts';
import { EVENT_SCHEMAS } from './events/schemas.ts';
import { WebhookService } from './events/service.ts';
import { WebhookWorker } from './events/worker.ts';
import { BUILT_IN_SERVICES, Catalogue } from './connectors/catalogue.ts';
import type { AnyServiceModule } from './connectors/types.ts';
import { executeOperations } from './execute/operations.ts';
import { executeQueries } from './execute/queries.ts';
import { actionInputSchemas, EXECUTE_SCHEMAS } from './execute/schemas.ts';
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
import { delegationOperations } from './delegation/operations.ts';
import { delegationQueries } from './delegation/queries.ts';
import { delegationRoutes } from './delegation/routes.ts';
import { DELEGATION_SCHEMAS } from './delegation/schemas.ts';
import { identityProviders } from './identity/issuers.ts';
import { identityQueries, MeSchema } from './identity/queries.ts';
import { identityRoutes } from './identity/routes.ts';
import { ensureRuntimeSecret } from './identity/store.ts';
import { CredentialVerifier } from './identity/verifier.ts';
import { INTEGRATION_SCHEMAS, integrationQueries } from './integrations/queries.ts';
import { integrationRoutes } from './integrations/routes.ts';
import { keysRoutes } from './keys/routes.ts';
import { mcpRoutes } from './mcp/http.ts';
import type { DohOptions } from './merchants/doh.ts';
import { merchantOperations } from './merchants/operations.ts';
import { merchantQueries } from './merchants/queries.ts';
import { merchantRoutes } from './merchants/routes.ts';
import { MERCHANT_SCHEMAS } from './merchants/schemas.ts';
import { MerchantService } from './merchants/service.ts';
import { revokedAccessTokenIds } from './oauth/access-tokens.ts';
import { declareConsoleClient } from './oauth/console-client.ts';
import { oauthGrantRoutes } from './oauth/grant-routes.ts';
import { oauthOperations } from './oauth/operations.ts';
import { oauthQueries } from './oauth/queries.ts';
import { oauthRoutes } from './oauth/routes.ts';
import { OAUTH_SCHEMAS } from './oauth/schemas.ts';
import { acceptedOperatorHash } from './operator/credential.ts';
import { operatorRoutes } from './operator/routes.ts';
import { sandboxRoutes } from './sandbox/routes.ts';
import { accessQueries } from './access/queries.ts';
import { accessRoutes } from './access/routes.ts';
import { EvidenceService } from './ledger/evidence.ts';
import { ledgerOperations } from './ledger/operations.ts';
import { ledgerQueries } from './ledger/queries.ts';
import { LEDGER_SCHEMAS } from './ledger/schemas.ts';
import { ledgerRoutes } from './ledger/routes.ts';
import { LedgerService } from './ledger/service.ts';
import { offerOperations } from './offers/operations.ts';
import { offerQueries } from './offers/queries.ts';
import { OFFER_SCHEMAS } from './offers/schemas.ts';
import { offerRoutes } from './offers/routes.ts';
import { paymentOperations } from './payments/operations.ts';
import { paymentQueries } from './payments/queries.ts';
import { configuredRail } from './payments/rails/index.ts';
import { paymentRoutes } from './payments/routes.ts';
import { PAYMENT_SCHEMAS } from './payments/schemas.ts';
import { PaymentsService, TOPUP_JOB_INTERVAL_MS } from './payments/service.ts';
import { OfferService } from './offers/service.ts';
import { revocationOperations } from './revocations/operations.ts';
import { revocationQueries } from './revocations/queries.ts';
import { revocationRoutes } from './revocations/routes.ts';
import { REVOCATION_SCHEMAS } from './revocations/schemas.ts';
import { RevocationService } from './revocations/service.ts';
import { voucherOperations } from './vouchers/operations.ts';
import { voucherRoutes } from './vouchers/routes.ts';
import { VoucherService } from './vouchers/service.ts';
import { x402Operations } from './x402/operations.ts';
import { x402Queries } from './x402/queries.ts';
import { x402Routes } from './x402/routes.ts';
import { X402_SCHEMAS } from './x402/schemas.ts';
import { X402Service } from './x402/service.ts';
import type { HumanApprover } from './platform/approvals.ts';
import { databaseHostWithoutTls } from './platform/config.ts';
import type { Gateway } from './platform/gateway.ts';
import { buildApp } from './platform/http/app.ts';
import { newSecret } from './platform/ids.ts';
import { generateSecretBoxKey, secretBoxKeyOf, type SecretBoxKey } from './platform/secret-box.ts';

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
  return text === undefined ? undefined : secretBoxKeyOf(text);
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
  /** Always present: top-ups are readable without a rail (ACG_PAYMENT_PROVIDER=none); only creating needs one. */
  payments: PaymentsService;
  /** The kill switch: freezes that release and revoke holds, their reports, merchants' revocations feeds. */
  revocations: RevocationService;
  /** The x402 facilitator for agent credit: authorize (a mint), verify, settle (a capture or a release). */
  x402: X402Service;
}

/** Optional collaborators the composition root can be given (tests inject fakes here). */
export interface AppDependencies {
  /**
   * The human approver execute asks for a top-up when credit falls short, instead of the payments feature's
   * (which needs a rail). Purchases above a mandate's approval threshold are always the payments feature's.
   */
  approver?: HumanApprover;
  /** Services added to the built-in catalogue (each one module: src/connectors/types.ts). */
  services?: readonly AnyServiceModule[];
}

/** How often each instance deletes events past their retention. */
const EVENT_PURGE_INTERVAL_MS = 60 * 60 * 1000;
/** How often each instance reclaims holds past their deadline (reads and writes treat them as expired at once). */
const HOLD_SWEEP_INTERVAL_MS = 5000;
/** How often each instance deletes avatar uploads that expired before they were finalized. */
const AVATAR_UPLOAD_SWEEP_INTERVAL_MS = 60 * 60 * 1000;

export async function buildServices(gateway: Gateway, dependencies: AppDependencies = {}): Promise<Services> {
  const providers = await identityProviders(gateway.config);
  const pepper = await apiKeyPepper(gateway);
  const catalogue = new Catalogue([...BUILT_IN_SERVICES, ...(dependencies.services ?? [])]);
  const identity = new AgentService(gateway, () => providers.agent?.issuer, catalogue.ids);
  // Agents registered before mandates existed get version 1 of theirs now, so every hold names one.
  await identity.writeMissingMandates();
  // The owner console's OAuth client is the gateway's own declaration (its redirect URI follows the base URL).
  await declareConsoleClient(gateway);
  gateway.schedule('avatar-upload-sweep', AVATAR_UPLOAD_SWEEP_INTERVAL_MS, () => identity.sweepAvatarUploads());
  const ledger = new LedgerService(gateway, identity);
  gateway.schedule('hold-expiry-sweep', HOLD_SWEEP_INTERVAL_MS, () => ledger.sweepDue());
  const { config } = gateway;
  const boxKey = await secretBoxKey(gateway);
  const webhooks = new WebhookService(gateway, boxKey);
  const doh: DohOptions = {
    resolverUrl: config.doh.resolverUrl,
    timeoutMs: config.doh.timeoutMs,
    ca: config.doh.caFile ? readFileSync(config.doh.caFile, 'utf8') : undefined,
    devZoneCleartext: config.mode === 'dev' && config.doh.devZone,
    cleartext: config.doh.cleartext,
  };
  const merchants = new MerchantService(gateway, { webhooks, apiKeyPepper: pepper, doh });
  const verifier = new CredentialVerifier(gateway, providers, pepper, merchants, identity, { revokedAccessTokenIds });
  const offers = new OfferService(gateway, merchants);
  // Payments and execute need each other: execute asks payments for approvals, payments resumes execute's intents.
  let executeService: ExecuteService | undefined;
  const rail = configuredRail(config);
  const payments = new PaymentsService(gateway, { identity, ledger, rail, intents: () => executeService!.intents });
  if (rail) gateway.schedule('topups', TOPUP_JOB_INTERVAL_MS, () => payments.runJobs());
  // Purchases above a mandate's approval threshold are approved on the gateway's page, whatever the rail.
  gateway.schedule('purchase-approvals', TOPUP_JOB_INTERVAL_MS, () => payments.expirePurchases());
  const vouchers = new VoucherService(gateway, { ledger, offers, identity, purchases: payments });
  const webhookWorker = new WebhookWorker({
    db: gateway.db,
    clock: gateway.clock,
    log: gateway.log,
    secretBoxKey: boxKey,
    allowPrivateNetworkTargets: config.allowPrivateNetworkTargets,
    ca: config.outboundCaFile ? readFileSync(config.outboundCaFile, 'utf8') : undefined,
    testHooks: gateway.outbound,
    metrics: gateway.metrics,
  });
  gateway.schedule('webhook-delivery', config.webhookPollIntervalMs, () => webhookWorker.pass(), { stop: () => webhookWorker.stop() });
  gateway.schedule('event-retention-purge', EVENT_PURGE_INTERVAL_MS, () => webhooks.purgeExpired());
  const approver = dependencies.approver ?? (rail ? payments : undefined);
  const { execute, mailConnectors } = buildExecuteFeature(gateway, { identity, ledger, catalogue, secretBoxKey: boxKey, approver, purchases: payments });
  executeService = execute;
  const operatorHash = acceptedOperatorHash(config);
  const revocations = new RevocationService(gateway, { agents: identity, ledger, webhooks, retained: () => execute.intents });
  const x402 = new X402Service(gateway, { ledger, vouchers });
  return {
    verifier, identity, apiKeyPepper: pepper, secretBoxKey: boxKey, merchants, webhooks, webhookWorker, ledger, offers, vouchers, execute, mailConnectors, doh, operatorHash,
    payments, revocations, x402,
  };
}

/** Every resource's schema (`$id` each): registered once at the root of the HTTP face, inlined by MCP. */
export const RESOURCE_SCHEMAS = [...LEDGER_SCHEMAS, ...AGENT_SCHEMAS, ...DELEGATION_SCHEMAS, ...OFFER_SCHEMAS, ...EXECUTE_SCHEMAS, ...PAYMENT_SCHEMAS, MeSchema, ...MERCHANT_SCHEMAS, ...EVENT_SCHEMAS, ...OAUTH_SCHEMAS, ...INTEGRATION_SCHEMAS, ...REVOCATION_SCHEMAS, ...X402_SCHEMAS];

/**
 * What live mode runs without, each with what it costs: live mode generates nothing, so a setting left out makes
 * whole families of routes answer 503 (or 401). Said once at start-up, one warning each, so the operator learns it
 * from the log rather than from the first refused caller (found from outside: only the operator credential was said).
 */
export function missingLivePieces(gateway: Gateway, services: Pick<Services, 'verifier' | 'apiKeyPepper' | 'secretBoxKey' | 'operatorHash'>): Array<{ setting: string; consequence: string; problem?: string }> {
  if (gateway.config.mode !== 'live') return [];
  const missing: Array<{ setting: string; consequence: string; problem?: string }> = [];
  if (!gateway.signing.configured) {
    missing.push({
      setting: 'ACG_SIGNING_KEY',
      // Set, and refused (a key the database keeps unsealed), is not "without" (found from outside: the line said so).
      ...(gateway.config.signingKey === undefined ? {} : { problem: 'live mode with an unusable ACG_SIGNING_KEY' }),
      consequence:
        `no signing key (nor a key rotated with ACG_SECRET_BOX_KEY) signs (${gateway.signing.whyUnconfigured}): access tokens, vouchers, x402, evidence and ` +
        '/.well-known/jwks.json answer 503 signing_configuration_required, and captures and refunds carry no signed receipt (captureReceipt and receipt are null)',
    });
  }
  if (!services.verifier.provider('human')) missing.push({ setting: 'ACG_HUMAN_ISSUER', consequence: 'no human identity provider: no owner can sign in, so owner routes refuse every call' });
  if (!services.verifier.provider('agent')) missing.push({ setting: 'ACG_AGENT_ISSUER', consequence: "no agent identity provider: agents' identity tokens are refused" });
  if (services.apiKeyPepper === undefined) missing.push({ setting: 'ACG_API_KEY_PEPPER', consequence: 'no merchant API key can be issued (503 runtime_configuration_required), so nothing a merchant key does (offers, captures, refunds, x402 verify and settle) can be done' });
  if (services.secretBoxKey === undefined) missing.push({ setting: 'ACG_SECRET_BOX_KEY', consequence: 'no secret can be sealed: configuring a webhook or a mail connector answers 503 runtime_configuration_required' });
  if (gateway.config.metricsTokenSha256 === undefined) missing.push({ setting: 'ACG_METRICS_TOKEN_SHA256', consequence: '/metrics refuses every scrape with 401' });
  if (services.operatorHash === undefined) missing.push({ setting: 'ACG_OPERATOR_TOKEN_SHA256', consequence: 'no operator credential: operator routes (credit grants) refuse every call with 401' });
  // Where the money is kept, and how it comes in, are said too (found from outside: neither was).
  if (gateway.db.kind === 'pglite') {
    missing.push({
      setting: 'DATABASE_URL',
      consequence: `the ledger is kept in the embedded database in ${gateway.config.dataDir}: one process may open it, with no replica, failover or online backup; set DATABASE_URL to run on PostgreSQL`,
    });
  }
  // The URL, not the database kind: only a URL names a host, and a network between the gateway and its ledger.
  const cleartextHost = gateway.config.databaseUrl === undefined ? undefined : databaseHostWithoutTls(gateway.config.databaseUrl);
  if (cleartextHost !== undefined) {
    missing.push({
      setting: 'DATABASE_URL',
      problem: `live mode with DATABASE_URL to ${cleartextHost} not requiring TLS`,
      consequence:
        'the ledger\'s statements and answers, and the database password, may cross the network in cleartext (no sslmode connects without TLS; disable, allow and prefer do not require it): ' +
        'add sslmode=verify-full&sslrootcert=<the file of the CA that issued the server\'s certificate> (docs/operations.md, "PostgreSQL over TLS"), ' +
        'or accept it on a network only the gateways and the database share (as deploy/ha does)',
    });
  }
  const { provider } = gateway.config.payments;
  if (provider === 'none') {
    missing.push({
      setting: 'ACG_PAYMENT_PROVIDER',
      problem: 'live mode with no payment provider (ACG_PAYMENT_PROVIDER none or not set)',
      consequence: 'top-ups answer 503 payment_unavailable, so credit comes in only by operator grants (set ACG_PAYMENT_PROVIDER=stripe)',
    });
  }
  else if (provider === 'local') {
    missing.push({
      setting: 'ACG_PAYMENT_PROVIDER',
      problem: 'live mode with ACG_PAYMENT_PROVIDER=local',
      consequence: "an owner's own approval of a top-up credits the agent with no payment taken, and that credit is spent at other owners' merchants: only for a gateway whose every owner is trusted to vouch for it",
    });
  }
  return missing;
}

export async function buildGatewayApp(
  gateway: Gateway,
  extraFeatures: FastifyPluginAsync[] = [],
  dependencies: AppDependencies = {},
): Promise<{ app: FastifyInstance; services: Services; missingPieces: string[] }> {
  const services = await buildServices(gateway, dependencies);
  const missing = missingLivePieces(gateway, services);
  for (const { setting, consequence, problem } of missing) gateway.log.warn({ setting }, `${problem ?? `live mode without ${setting}`}: ${consequence}`);
  if (gateway.config.mode === 'live') {
    // A dev-zone verification proves nothing (the operator publishes any record there): live mode takes it back.
    const unverified = await services.merchants.unverifyDevZoneProofs();
    if (unverified.length > 0) {
      gateway.log.warn(
        { merchants: unverified.map((merchant) => merchant.id) },
        `live mode: ${unverified.length} merchant domain(s) verified in dev mode's DNS zone are unverified until proven through real DNS (POST /v1/merchants/{id}/verify-domain): ${unverified.map((merchant) => merchant.domain).join(', ')}`,
      );
    }
  }
  const { catalogue } = services.execute;
  // The catalogue is given at composition, so its actions' input schemas join the resources here.
  const schemas = [...RESOURCE_SCHEMAS, ...actionInputSchemas(catalogue)];
  const providers = { human: services.verifier.provider('human'), agent: services.verifier.provider('agent') };
  const ownerWebhooks = new OwnerWebhookService(services.webhooks);
  // x402 needs a signing key (attestations, receipts) and merchant API keys (verify and settle authenticate with one).
  const x402Configured = () => services.x402.configured(services.apiKeyPepper !== undefined);
  const operations = {
    agents: agentOperations(services.identity),
    delegation: delegationOperations(services.identity, services.revocations, () => services.webhookWorker.soon()),
    ledger: ledgerOperations(services.ledger),
    vouchers: voucherOperations(services.vouchers),
    execute: executeOperations(services.execute, services.mailConnectors),
    // Events read merchants only through the MerchantDirectory they declare, which MerchantService implements.
    events: eventOperations(services.merchants, services.webhooks),
    ownerWebhooks: ownerWebhookOperations(ownerWebhooks),
    revocations: revocationOperations(services.revocations, () => services.webhookWorker.soon()),
    x402: x402Operations(services.x402),
    payments: paymentOperations(services.payments),
  };
  const queries = {
    access: accessQueries(),
    agents: agentQueries(services.identity, (agentId) => services.ledger.expireDue({ agentId })),
    delegation: delegationQueries(services.identity, (agentId) => services.ledger.expireDue({ agentId })),
    identity: identityQueries(services.identity, services.ledger),
    ledger: ledgerQueries(services.ledger, services.identity, services.merchants, new EvidenceService(gateway, services.ledger, services.identity, services.payments.purchases)),
    offers: offerQueries(services.offers, services.identity),
    execute: executeQueries(services.execute, services.mailConnectors),
    merchants: merchantQueries(services.merchants),
    events: eventQueries(services.merchants, services.webhooks, ownerWebhooks),
    payments: paymentQueries(services.payments),
    revocations: revocationQueries(services.revocations, services.identity, services.merchants),
    integrations: integrationQueries({
      providers,
      apiKeysAvailable: services.apiKeyPepper !== undefined,
      paymentApprovalConfigured: () => services.execute.approvals.configured,
      paymentProvider: dependencies.approver ? undefined : services.payments.railKind,
      x402Configured,
      serviceIds: catalogue.ids,
      config: gateway.config,
      db: gateway.db,
    }),
  };
  const features: FastifyPluginAsync[] = [
    healthRoutes,
    docsRoutes,
    keysRoutes,
    oauthRoutes({ verifier: services.verifier }),
    oauthGrantRoutes({ operations: oauthOperations(gateway.clock), queries: oauthQueries() }),
    agentRoutes({ operations: operations.agents, queries: queries.agents }),
    revocationRoutes(operations.revocations, queries.revocations),
    delegationRoutes({ operations: operations.delegation, queries: queries.delegation }),
    identityRoutes(queries.identity),
    integrationRoutes(queries.integrations),
    ledgerRoutes({ operations: operations.ledger, queries: queries.ledger }),
    offerRoutes(offerOperations(services.offers), queries.offers),
    voucherRoutes(operations.vouchers),
    x402Routes({ x402: services.x402, operations: operations.x402, queries: x402Queries(services.x402), configured: x402Configured }),
    accessRoutes(queries.access),
    executeRoutes({ operations: operations.execute, queries: queries.execute, catalogue }),
    paymentRoutes({
      payments: services.payments,
      operations: operations.payments,
      queries: queries.payments,
      devLoginUrl: gateway.config.mode === 'dev' && providers.human?.source === 'built_in' ? '/dev/issuers/human/login' : undefined,
      humanIssuer: providers.human?.issuer,
      serviceTitles: Object.fromEntries(catalogue.services.map((service) => [service.id, service.title])),
    }),
    merchantRoutes(merchantOperations(services.merchants), queries.merchants),
    mcpRoutes({
      gateway,
      operations: { ...operations.vouchers, ...operations.execute, ...operations.agents, ...operations.revocations, ...operations.delegation, ...operations.payments },
      queries: { ...queries.identity, ...queries.offers, ...queries.ledger, ...queries.execute, ...queries.agents, ...queries.delegation, ...queries.payments },
      // get_intent's other kind of id, a purchase approval (pur_…): the REST route's own query.
      purchaseApprovals: queries.payments.getPurchaseApproval,
      schemas,
      mayDelegate: (agentId) => services.identity.mayDelegate(gateway.db, agentId),
    }),
    eventRoutes(operations.events, queries.events),
    ownerWebhookRoutes(operations.ownerWebhooks, queries.events),
    operatorRoutes({ grantCredit: operations.ledger.grantCredit, acceptedHash: services.operatorHash }),
    sandboxRoutes({ merchants: services.merchants, operatorHash: services.operatorHash, doh: services.doh }),
    consoleRoutes({
      humanSignIn:
        gateway.config.mode === 'dev' && providers.human?.source === 'built_in'
          ? { kind: 'dev', url: '/dev/issuers/human/login' }
          : providers.human
            ? { kind: 'token', issuer: providers.human.issuer }
            : { kind: 'none' },
      agentIssuer: () => providers.agent?.issuer,
    }),
    ...extraFeatures,
  ];
  return { app: await buildApp(gateway, { features, authenticator: services.verifier, schemas }), services, missingPieces: missing.map((piece) => piece.setting) };
}
