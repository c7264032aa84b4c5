// HTTP edge of identity: /v1/me (who the credential belongs to) and, in dev mode only, the discovery
// documents of the built-in identity issuers.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import { queryRoute } from '../platform/http/query.ts';
import { devIssuerUrl, loadDevIssuerKeys, publicJwks } from './dev-issuers.ts';
import type { IdentityQueries } from './queries.ts';

export function identityRoutes(queries: IdentityQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.route(
      queryRoute('GET', '/v1/me', queries.getMe, {
        auth: { kinds: ['human', 'agent', 'owner', 'merchant'] },
        tags: ['identity'],
        summary: 'Who the credential belongs to',
        description:
          "For an agent: its settings, its balance and its credit lots (its holds past their deadline reclaimed first); for a human or owner token: the owner; for a merchant key: the merchant, the key and its scopes. MCP's `whoami` answers the same.",
      }),
    );

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
