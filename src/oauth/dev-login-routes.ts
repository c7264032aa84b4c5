// Dev mode only: `POST /dev/issuers/{human|agent}/login` mints an identity token of a built-in issuer
// for whoever asks, so the consent page can "sign in" without an external identity provider. It is
// the browser twin of `acg dev token`; it is never registered in live mode or for a configured issuer.
import type { FastifyInstance } from 'fastify';
import type { Static } from '@sinclair/typebox';
import { Type } from '@sinclair/typebox';
import { loadDevIssuerKeys, mintDevToken } from '../identity/dev-issuers.ts';
import type { CredentialVerifier } from '../identity/verifier.ts';
import { ApiError } from '../platform/errors.ts';
import { problems } from '../platform/http/openapi.ts';
import { DevLoginBody, DevLoginResponse } from './schemas.ts';

/** Long enough to finish a consent, short enough that a forgotten tab holds nothing useful. */
export const DEV_LOGIN_TOKEN_LIFETIME_S = 300;
const KindParams = Type.Object({ kind: Type.String({ enum: ['human', 'agent'], description: 'which built-in issuer' }) });

export function devLoginRoutes(verifier: CredentialVerifier) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const { config, clock } = app.gateway;
    if (config.mode !== 'dev') return;
    const builtIn = (kind: 'human' | 'agent') => verifier.provider(kind)?.source === 'built_in';
    if (!builtIn('human') && !builtIn('agent')) return;
    const keys = await loadDevIssuerKeys(config.dataDir);
    app.post('/dev/issuers/:kind/login', {
      config: { notAnOperation: 'dev mode: mints an identity token of the built-in issuer; changes no state' },
      schema: { operationId: 'devIssuerLogin',
        tags: ['dev'],
        summary: 'Dev mode: sign in at a built-in identity issuer (no password)',
        description:
          'Mints an identity JWT of the built-in issuer: `human` takes `{email}` (a verified email), `agent` takes `{subject, ownerEmail}`. ' +
          'Used by the consent page in dev mode. Never available in live mode or when the issuer is configured.',
        params: KindParams,
        body: DevLoginBody,
        response: { 200: DevLoginResponse, ...problems(400, 404) },
      },
      handler: async (request, reply) => {
        // A token in the answer: kept by no cache (the platform's rule looks at the request, which carries none).
        reply.headers({ 'cache-control': 'no-store', pragma: 'no-cache' });
        const { kind } = request.params as { kind: 'human' | 'agent' };
        const body = request.body as Static<typeof DevLoginBody>;
        if (!builtIn(kind)) throw new ApiError('not_found', { detail: `the ${kind} identity issuer is configured; sign in there` });
        if (kind === 'human' && !body.email) throw new ApiError('invalid_input', { detail: 'email is required' });
        if (kind === 'agent' && (!body.subject || !body.ownerEmail)) throw new ApiError('invalid_input', { detail: 'subject and ownerEmail are required' });
        const email = body.email?.toLowerCase();
        const token = await mintDevToken(keys, {
          baseUrl: config.baseUrl,
          audience: 'agent-credit-gateway',
          kind,
          subject: kind === 'human' ? `human:${email}` : body.subject!,
          email,
          ownerEmail: body.ownerEmail?.toLowerCase(),
          ownerEmailClaim: config.agentOwnerEmailClaim,
          lifetimeS: DEV_LOGIN_TOKEN_LIFETIME_S,
          nowS: clock.nowS(),
        });
        return { token, expiresIn: DEV_LOGIN_TOKEN_LIFETIME_S };
      },
    });
  };
}
