// HTTP edge of remembered consents: the owner lists them and revokes a client's. API routes (problem
// bodies, JSON only), apart from the authorization server's own plugin and its form bodies.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { queryRoute } from '../platform/http/query.ts';
import { REMEMBERED_CONSENT_LIFETIME_S, REMEMBERED_CONSENTS_PER_OWNER_MAX } from './limits.ts';
import { RevokeOAuthGrantsInput, type OAuthOperations } from './operations.ts';
import type { OAuthQueries } from './queries.ts';

/** A human session only: an OAuth owner token is held by an application. */
const HUMAN = { kinds: ['human'] } as const;

const RevocationSchema = Type.Object({
  clientId: Type.String(),
  revokedGrants: Type.Integer({ minimum: 0, description: 'remembered consents forgotten (any browser, scope, resource, you or your agents)' }),
  revokedAccessTokens: Type.Integer({ minimum: 0, description: 'access tokens the client still held for you or your agents, now refused' }),
});

export function oauthGrantRoutes(deps: { operations: OAuthOperations; queries: OAuthQueries }) {
  const { operations: ops, queries } = deps;
  return async function routes(app: FastifyInstance): Promise<void> {
    const tags = ['oauth'];

    app.route(
      queryRoute('GET', '/v1/owner/oauth-grants', queries.listOAuthGrants, {
        auth: HUMAN,
        tags,
        summary: 'List the consents remembered for you and your agents',
        description:
          'A consent given on the consent page is remembered for the browser that gave it: for ' +
          `${REMEMBERED_CONSENT_LIFETIME_S / 3600} h the same client, asking for exactly the same scope and resource, is ` +
          're-authorized without the page. Newest first; at most ' +
          `${REMEMBERED_CONSENTS_PER_OWNER_MAX} (a new consent beyond forgets the oldest). Only a human session (H) may read them.`,
      }),
    );

    app.delete('/v1/owner/oauth-grants/:clientId', {
      config: { auth: HUMAN, operation: ops.revokeOAuthGrants },
      schema: {
        tags,
        summary: "Revoke a client's remembered consent",
        description:
          'Forgets every consent you or your agents gave this client, in every browser, for every scope and resource: its next ' +
          'authorization request shows the consent page again. Also takes back what it holds: codes not yet exchanged stop working ' +
          'and its live access tokens are refused (401 invalid_token), on every gateway instance from the next request once this ' +
          'answers (it answers up to the longest `ACG_CREDENTIAL_FACTS_MS` of the instances, 2 s by default, after the revocation commits). Answers the counts; 0 and 0 when there was nothing ' +
          '(also for a client id that does not exist). Only a human session (H) may revoke. Idempotency-Key is honoured when sent.',
        params: RevokeOAuthGrantsInput,
        response: { 200: RevocationSchema },
      },
      handler: (request, reply) => serve(request, reply, ops.revokeOAuthGrants, request.params as Static<typeof RevokeOAuthGrantsInput>),
    });
  };
}
