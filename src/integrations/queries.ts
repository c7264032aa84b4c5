// What this gateway is wired to (GET /v1/integrations), in the spec's two documented shapes, reported from the
// real configuration and never including a credential: one query, whoever asks.
import { Type } from '@sinclair/typebox';
import type { IdentityProvider, IdentityProviderKind } from '../identity/issuers.ts';
import { RAIL_KINDS } from '../payments/schemas.ts';
import type { Config } from '../platform/config.ts';
import { describeStorage } from '../platform/db/open.ts';
import type { Database } from '../platform/db/database.ts';
import type { Query } from '../platform/queries.ts';

export const StatusShape = Type.Object(
  {
    mode: Type.String({ enum: ['dev', 'live'] }),
    storage: Type.String({ enum: ['postgresql', 'pglite'] }),
    identity: Type.Object({
      human: Type.String({ enum: ['configured', 'built_in', 'unconfigured'] }),
      agent: Type.String({ enum: ['configured', 'built_in', 'unconfigured'] }),
    }),
    payments: Type.Object({
      link: Type.String({ enum: ['configured', 'unconfigured'], description: 'the payment-approval provider that top-ups go through' }),
      provider: Type.String({ enum: [...RAIL_KINDS, 'custom', 'none'], description: 'which one: a payment rail (local owner approval, Stripe Checkout), one given in code, or none' }),
      x402: Type.String({
        enum: ['configured', 'unconfigured'],
        description: 'the x402 facilitator (/x402/…, the credit scheme): configured when the gateway can sign attestations and receipts and merchants can hold API keys',
      }),
    }),
    apiKeys: Type.Object({ available: Type.Boolean(), status: Type.String({ enum: ['available', 'configuration_required'] }) }),
    services: Type.Array(Type.String(), { description: 'enabled service ids' }),
  },
  { $id: 'IntegrationStatus', description: 'Live status shape (the default view)' },
);

export const SurfaceShape = Type.Object(
  {
    identity: Type.Object({
      agent: Type.String({ description: 'issuer URL of the agent identity provider, or "unconfigured"' }),
      human: Type.String({ description: 'issuer URL of the human identity provider, or "unconfigured"' }),
    }),
    accessCheck: Type.Object({ endpoint: Type.String(), enabled: Type.Boolean() }),
    merchantRegistry: Type.Object({ endpoint: Type.String(), enabled: Type.Boolean() }),
    payments: Type.Object({
      directMerchantLink: Type.Object({ enabled: Type.Boolean() }),
      optionalCreditPurchases: Type.Object({ enabled: Type.Boolean() }),
      x402: Type.Object({ enabled: Type.Boolean() }),
    }),
  },
  { $id: 'IntegrationSurface', description: 'Surface shape (`?view=surface`)' },
);

export const INTEGRATION_SCHEMAS = [StatusShape, SurfaceShape];

const ViewInput = Type.Object(
  { view: Type.Optional(Type.String({ enum: ['status', 'surface'], default: 'status' })) },
  { additionalProperties: false },
);

export interface IntegrationDeps {
  providers: Partial<Record<IdentityProviderKind, IdentityProvider>>;
  apiKeysAvailable: boolean;
  paymentApprovalConfigured: () => boolean;
  /** The configured payment rail, if the payments feature has one. */
  paymentProvider?: string;
  /** Whether the x402 facilitator can serve: a signing key, and merchant API keys (verify and settle take one). */
  x402Configured: () => boolean;
  /** The ids of the catalogue's services. */
  serviceIds: readonly string[];
  config: Pick<Config, 'mode'>;
  db: Pick<Database, 'kind'>;
}

export interface IntegrationQueries {
  getIntegrations: Query<{ view: 'status' | 'surface' }, object>;
}

export function integrationQueries(deps: IntegrationDeps): IntegrationQueries {
  const identityState = (kind: IdentityProviderKind) => {
    const provider = deps.providers[kind];
    return provider ? (provider.source === 'built_in' ? 'built_in' : 'configured') : 'unconfigured';
  };
  return {
    getIntegrations: {
      name: 'getIntegrations',
      input: ViewInput,
      output: Type.Union([Type.Ref('IntegrationStatus'), Type.Ref('IntegrationSurface')]),
      read: async (_db, { input }) => {
        const linkConfigured = deps.paymentApprovalConfigured();
        const x402Configured = deps.x402Configured();
        if (input.view === 'surface') {
          return {
            identity: {
              agent: deps.providers.agent?.issuer ?? 'unconfigured',
              human: deps.providers.human?.issuer ?? 'unconfigured',
            },
            accessCheck: { endpoint: '/v1/access/merchant-check', enabled: deps.apiKeysAvailable },
            merchantRegistry: { endpoint: '/v1/merchants', enabled: Boolean(deps.providers.human) },
            payments: {
              directMerchantLink: { enabled: false },
              optionalCreditPurchases: { enabled: linkConfigured },
              x402: { enabled: x402Configured },
            },
          };
        }
        return {
          mode: deps.config.mode,
          storage: describeStorage(deps.db),
          identity: { human: identityState('human'), agent: identityState('agent') },
          payments: {
            link: linkConfigured ? 'configured' : 'unconfigured',
            provider: linkConfigured ? (deps.paymentProvider ?? 'custom') : 'none',
            x402: x402Configured ? 'configured' : 'unconfigured',
          },
          apiKeys: deps.apiKeysAvailable ? { available: true, status: 'available' } : { available: false, status: 'configuration_required' },
          // Every catalogue service is enabled: each needs only per-agent settings (mail) or none (github-public).
          services: [...deps.serviceIds],
        };
      },
    },
  };
}

