// How a route says who may call it: `config: { auth: { kinds: ['human', 'owner'] } }`. One hook
// authenticates every such route through the credential verifier, enforces the kinds and merchant
// scopes and applies the per-principal rate limit; the OpenAPI transform documents the requirement.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { bearerChallenge, SCOPE_AGENT, SCOPE_OWNER, type Resource } from '../access-tokens.ts';
import type { Principal, PrincipalKind } from '../principal.ts';
import { accountScope } from '../principal.ts';


export interface AuthRequirement {
  kinds: readonly PrincipalKind[];
  /** Merchant API key scopes this route needs (all of them). */
  scopes?: readonly string[];
  resource?: Resource;
  /**
   * Who the route is for, in words, where its kinds alone would name the wrong reader in a refusal (evidence is the
   * hold's agent's owner's, or the holding merchant's key's, where a route taking a merchant key is otherwise the
   * merchant owner's).
   */
  for?: string;
}

export interface Authenticator {
  authenticate(authorization: string | undefined, resource: Resource): Promise<Principal>;
}

/** A credential in the query string, refused wherever it appears. */
const QUERY_CREDENTIAL = /[?&]access_token=/;

const KIND_LETTER: Record<PrincipalKind, string> = { human: 'H', agent: 'A', owner: 'O', merchant: 'M', operator: 'operator' };

export function describeAuth(requirement: AuthRequirement): string {
  const kinds = requirement.kinds.map((k) => KIND_LETTER[k]).join(', ');
  const scopes = requirement.scopes?.length ? `; API key scopes: ${requirement.scopes.join(', ')}` : '';
  return `Authentication: ${kinds}${scopes}.`;
}

/**
 * The RFC 6750 §3.1 challenge of an OAuth access token whose scope this route does not take, when the other scope
 * we issue would (an agent's token on an owner's route, an owner's on an agent's): `error="insufficient_scope"` and
 * the scope to ask for, so a client (an MCP client among them) knows to authorize again for it.
 */
function scopeChallenge(principal: Principal, requirement: AuthRequirement, baseUrl: string, detail: string): Record<string, string> | undefined {
  if (principal.credential !== 'oauth') return undefined;
  const needed = principal.kind === 'agent' && requirement.kinds.includes('owner') ? SCOPE_OWNER : principal.kind === 'owner' && requirement.kinds.includes('agent') ? SCOPE_AGENT : undefined;
  if (needed === undefined) return undefined;
  return { 'www-authenticate': bearerChallenge(baseUrl, requirement.resource ?? 'api', { error: 'insufficient_scope', description: detail }, needed) };
}

function denial(principal: Principal, requirement: AuthRequirement, baseUrl: string): ApiError {
  const refusal = refusalOf(principal, requirement);
  const headers = scopeChallenge(principal, requirement, baseUrl, refusal.detail);
  return headers ? new ApiError(refusal.code, { detail: refusal.detail, headers }) : new ApiError(refusal.code, { detail: refusal.detail });
}

function refusalOf(principal: Principal, requirement: AuthRequirement): { code: 'forbidden' | 'human_required' | 'owner_required'; detail: string } {
  const allowed = requirement.kinds;
  if (principal.kind === 'merchant') return { code: 'forbidden', detail: 'a merchant API key cannot use this route' };
  if (allowed.length === 1 && allowed[0] === 'merchant') return { code: 'forbidden', detail: 'this route takes a merchant API key' };
  if (principal.kind === 'owner' && allowed.includes('human')) {
    return { code: 'human_required', detail: 'this route needs a human owner session, not an OAuth token' };
  }
  if (principal.kind === 'agent' && (allowed.includes('human') || allowed.includes('owner'))) {
    // A route that also takes a merchant API key is a merchant's, whose owner is not the agent's.
    const detail = requirement.for
      ? `this route is for ${requirement.for}, not an agent`
      : allowed.includes('merchant')
        ? "this route is for a merchant's owner or its API key, not an agent"
        : "this route is for the agent's owner";
    return { code: 'owner_required', detail };
  }
  return { code: 'forbidden', detail: `this route does not accept ${/^[aeiou]/.test(principal.kind) ? 'an' : 'a'} ${principal.kind} credential` };
}

export function installAuth(app: FastifyInstance, authenticator: Authenticator): void {
  app.addHook('onRequest', async (request: FastifyRequest) => {
    const requirement = request.routeOptions.config?.auth as AuthRequirement | undefined;
    if (!requirement) return;
    if (QUERY_CREDENTIAL.test(request.url)) {
      throw new ApiError('invalid_input', { detail: 'credentials are never accepted in the query string; use the Authorization header' });
    }
    const principal = await authenticator.authenticate(request.headers.authorization, requirement.resource ?? 'api');
    if (!requirement.kinds.includes(principal.kind)) throw denial(principal, requirement, request.server.gateway.config.baseUrl);
    const missing = principal.kind === 'merchant' ? (requirement.scopes ?? []).filter((s) => !principal.scopes.includes(s)) : [];
    if (missing.length > 0) throw new ApiError('scope_required', { detail: `the API key needs scope ${missing.join(', ')}` });
    const { rateLimiter, config } = request.server.gateway;
    const account = accountScope(principal);
    const decision = rateLimiter.hit(account, config.rateLimit.perPrincipal);
    if (!decision.allowed) {
      // The account is named (an id, never a secret) for the request's log line too: behind a proxy the address says
      // nothing of who is over its limit (found from outside).
      throw new ApiError('rate_limited', {
        detail: `more than ${decision.limit} requests by this account's credentials (${account.replace(':', ' ')}) in ${config.rateLimit.windowS} s`,
        retryAfterS: decision.retryAfterS,
      });
    }
    request.principal = principal;
  });
}

/** The authenticated principal; only call on routes that declare `auth`. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new Error('route has no auth requirement but reads the principal');
  return request.principal;
}
