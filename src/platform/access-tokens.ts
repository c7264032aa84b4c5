// What our access tokens are, for the authorization server that issues them (oauth), the credential
// verifier that checks them (identity) and the HTTP face that challenges for them: their `typ`, the scopes
// they carry and the protected resources (RFC 8707) they are issued for. Their revocation list is the
// authorization server's (src/oauth/access-tokens.ts), handed to the verifier by the composition root.

/** RFC 9068 §2.1: our access tokens are `at+jwt`, so no other JWT of ours passes as one. */
export const ACCESS_TOKEN_TYP = 'at+jwt';
/** Spec: access tokens live ten minutes (`expires_in` 600); the verifier refuses one that claims a longer life. */
export const ACCESS_TOKEN_LIFETIME_S = 600;
export const SCOPE_AGENT = 'svc:agent';
export const SCOPE_OWNER = 'svc:owner';

/** The two protected resources a token can be for: the API itself and the MCP endpoint. */
export type Resource = 'api' | 'mcp';

/** The canonical URI of a resource: the `resource` parameter, the metadata and `aud` always agree. */
export function resourceUri(baseUrl: string, resource: Resource): string {
  return resource === 'mcp' ? `${baseUrl}/mcp` : baseUrl;
}

function resourceMetadataUrl(baseUrl: string, resource: Resource): string {
  return resource === 'mcp' ? `${baseUrl}/.well-known/oauth-protected-resource/mcp` : `${baseUrl}/.well-known/oauth-protected-resource`;
}

/**
 * The Bearer challenge of a resource (`WWW-Authenticate`, RFC 6750 §3 and RFC 9728 §5.1): its metadata, then the
 * error and its description when a token was refused, then the scope to ask for when one is named. A description's
 * double quotes and backslashes become single quotes (a quoted-string cannot hold them unescaped).
 */
export function bearerChallenge(baseUrl: string, resource: Resource, refusal?: { error: 'invalid_token' | 'insufficient_scope'; description: string }, scope?: string): string {
  const parts = [`resource_metadata="${resourceMetadataUrl(baseUrl, resource)}"`];
  if (refusal) parts.push(`error="${refusal.error}"`, `error_description="${refusal.description.replace(/["\\]/g, "'")}"`);
  if (scope !== undefined) parts.push(`scope="${scope}"`);
  return `Bearer ${parts.join(', ')}`;
}

export function ourResources(baseUrl: string): Record<Resource, string> {
  return { api: resourceUri(baseUrl, 'api'), mcp: resourceUri(baseUrl, 'mcp') };
}

/** True when `resource` is exactly one of our canonical resource URIs. */
export function isOurResource(baseUrl: string, resource: string): boolean {
  return Object.values(ourResources(baseUrl)).includes(resource);
}
