// Who is calling. The identity feature fills `request.principal`; everything else reads it.
/** `operator`: the operator credential of /v1/operator routes (checked by the operator feature, not the verifier). */
export type PrincipalKind = 'human' | 'agent' | 'owner' | 'merchant' | 'operator';

export interface Principal {
  kind: PrincipalKind;
  /** Stable id of the caller: owner id (human/owner), agent id, or API key id (merchant). */
  id: string;
  ownerId?: string;
  agentId?: string;
  merchantId?: string;
  apiKeyId?: string;
  scopes: readonly string[];
  /** For agents: whether the agent may spend (routes that spend answer 403 FROZEN otherwise). */
  agentStatus?: 'active' | 'frozen';
  /** For human and owner principals: the owner's verified email. */
  email?: string;
  /**
   * For agent principals: the verified email of the agent's owner that the credential was checked against (an
   * agent identity's owner claim, or what an OAuth access token of the agent was issued under).
   */
  ownerEmail?: string;
  /** How the credential was presented, for logs and metrics: 'human_session', 'agent_identity', 'oauth', 'api_key'. */
  credential: string;
}

/** Whoever presents the operator credential: one principal, so its Idempotency-Keys share one scope. */
export const OPERATOR_PRINCIPAL: Principal = { kind: 'operator', id: 'operator', scopes: [], credential: 'operator_token' };

/** The bucket a principal's rate limit counts in, and who a record says acted (`frozen_by`, `requested_by`). */
export function principalScope(principal: Principal): string {
  return `${principal.kind}:${principal.id}`;
}

/**
 * The account a credential acts for: the namespace its Idempotency-Keys live in, whichever of the account's
 * credentials sends the key, as Stripe scopes keys per account, so a request retried through another credential of
 * the same account replays instead of running twice; and the bucket of its per-principal rate limit, as Stripe
 * limits per account, so a merchant that makes more API keys gets no more requests (found from outside: each key
 * had a limit of its own):
 * - a merchant's keys are the merchant's, whichever of its API keys sends them (`merchant:<merchant id>`;
 *   migration 0033 moved the records stored per API key, `merchant:<key id>`);
 * - an owner's keys are the owner's, from the owner's session or from an OAuth token the owner granted
 *   (`owner:<owner id>`; migration 0034 moved what was stored under a session's `human:<owner id>`);
 * - an agent's are the agent's (`agent:<agent id>`), whichever of its tokens sends them, and the operator's one.
 */
export function accountScope(principal: Principal): string {
  if (principal.kind === 'merchant' && principal.merchantId !== undefined) return `merchant:${principal.merchantId}`;
  if (principal.kind === 'human') return `owner:${principal.ownerId ?? principal.id}`;
  return principalScope(principal);
}
