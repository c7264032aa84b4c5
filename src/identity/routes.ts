// HTTP edge of identity: /v1/me (who the credential belongs to) and, in dev mode only, the discovery
// documents of the built-in identity issuers. Served after the agents' routes, whose `Agent` schema /v1/me uses.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { AgentService } from '../agents/service.ts';
import { principalOf } from '../platform/http/auth.ts';
import { Microcredits } from '../platform/schemas.ts';
import { devIssuerUrl, loadDevIssuerKeys, publicJwks } from './dev-issuers.ts';

const Me = Type.Object({
  kind: Type.String({ enum: ['human', 'agent', 'owner', 'merchant'] }),
  credential: Type.String({ description: 'human_session, agent_identity, oauth or api_key' }),
  owner: Type.Optional(Type.Object({ id: Type.String(), email: Type.String() })),
  agent: Type.Optional(Type.Ref('Agent')),
  balance: Type.Optional(
    Type.Object({ availableUc: Microcredits(), heldUc: Microcredits() }, { description: "the agent's own balance" }),
  ),
  merchant: Type.Optional(Type.Object({ merchantId: Type.String(), keyId: Type.String(), scopes: Type.Array(Type.String()) })),
});

export interface IdentityRouteDeps {
  agents: AgentService;
  /** The agent's balance for /v1/me, once the ledger exists. */
  agentBalance?: (agentId: string) => Promise<{ availableUc: string; heldUc: string }>;
}

export function identityRoutes(deps: IdentityRouteDeps) {
  const { agents } = deps;
  return async function routes(app: FastifyInstance): Promise<void> {
    app.get('/v1/me', {
      config: { auth: { kinds: ['human', 'agent', 'owner', 'merchant'] } },
      schema: { operationId: 'getMe', tags: ['identity'], summary: 'Who the credential belongs to', response: { 200: Me } },
      handler: async (request) => {
        const principal = principalOf(request);
        const base = { kind: principal.kind, credential: principal.credential };
        if (principal.kind === 'merchant') {
          return { ...base, merchant: { merchantId: principal.merchantId!, keyId: principal.apiKeyId!, scopes: [...principal.scopes] } };
        }
        if (principal.kind === 'agent') {
          const agent = await agents.getAgent(principal.ownerId!, principal.agentId!);
          const balance = deps.agentBalance ? await deps.agentBalance(agent.id) : undefined;
          return { ...base, agent, balance };
        }
        return { ...base, owner: { id: principal.ownerId!, email: principal.email! } };
      },
    });

    if (app.gateway.config.mode === 'dev') await app.register(devIssuerRoutes);
  };
}

/** OIDC discovery and JWKS of the built-in dev issuers, so tools can verify dev tokens like real ones. */
async function devIssuerRoutes(app: FastifyInstance): Promise<void> {
  const { config } = app.gateway;
  const keys = await loadDevIssuerKeys(config.dataDir);
  const KindParams = Type.Object({ kind: Type.String({ enum: ['human', 'agent'], description: 'which built-in issuer' }) });
  app.get('/dev/issuers/:kind/.well-known/openid-configuration', {
    schema: { operationId: 'getDevIssuerConfiguration', tags: ['dev'], summary: 'Dev mode: discovery document of a built-in identity issuer', params: KindParams },
    handler: async (request) => {
      const { kind } = request.params as { kind: 'human' | 'agent' };
      const issuer = devIssuerUrl(config.baseUrl, kind);
      return { issuer, jwks_uri: `${issuer}/jwks.json`, id_token_signing_alg_values_supported: ['ES256'] };
    },
  });
  app.get('/dev/issuers/:kind/jwks.json', {
    schema: { operationId: 'getDevIssuerJwks', tags: ['dev'], summary: 'Dev mode: public keys of a built-in identity issuer', params: KindParams },
    handler: async (request) => publicJwks(keys, (request.params as { kind: 'human' | 'agent' }).kind),
  });
}
