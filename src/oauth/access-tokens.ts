// Our access tokens, owned by the authorization server in one place: their `typ`, the scopes they carry,
// the protected resources (RFC 8707) they are issued for, and their revocation. The token endpoint issues
// them; the credential verifier (identity) reads them through this module, never the other way round.
import type { Queryable } from '../platform/db/database.ts';
import { revokedTokenIds } from './store.ts';

/** RFC 9068 §2.1: our access tokens are `at+jwt`, so no other JWT of ours passes as one. */
export const ACCESS_TOKEN_TYP = 'at+jwt';
export const SCOPE_AGENT = 'svc:agent';
export const SCOPE_OWNER = 'svc:owner';

/** The two protected resources a token can be for: the API itself and the MCP endpoint. */
export type Resource = 'api' | 'mcp';

/** The canonical URI of a resource: the `resource` parameter, the metadata and `aud` always agree. */
export function resourceUri(baseUrl: string, resource: Resource): string {
  return resource === 'mcp' ? `${baseUrl}/mcp` : baseUrl;
}

export function resourceMetadataUrl(baseUrl: string, resource: Resource): string {
  return resource === 'mcp' ? `${baseUrl}/.well-known/oauth-protected-resource/mcp` : `${baseUrl}/.well-known/oauth-protected-resource`;
}

export function ourResources(baseUrl: string): Record<Resource, string> {
  return { api: resourceUri(baseUrl, 'api'), mcp: resourceUri(baseUrl, 'mcp') };
}

/** True when `resource` is exactly one of our canonical resource URIs. */
export function isOurResource(baseUrl: string, resource: string): boolean {
  return Object.values(ourResources(baseUrl)).includes(resource);
}

/**
 * Which of these access tokens have been revoked (their code was replayed, RFC 6749 §4.1.2)? Our tokens are stateless
 * JWTs, so revocation is a short deny-list of `jti`s, each kept until the token would have expired anyway.
 */
export async function revokedAccessTokenIds(db: Queryable, jtis: readonly string[]): Promise<string[]> {
  return revokedTokenIds(db, jtis);
}
