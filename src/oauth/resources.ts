// The two protected resources a token can be for (RFC 8707): the API itself and the MCP endpoint.
// Their canonical URIs come from one function, so `resource`, the metadata and `aud` always agree.
import { resourceUri, type Resource } from '../identity/verifier.ts';

export function ourResources(baseUrl: string): Record<Resource, string> {
  return { api: resourceUri(baseUrl, 'api'), mcp: resourceUri(baseUrl, 'mcp') };
}

/** True when `resource` is exactly one of our canonical resource URIs. */
export function isOurResource(baseUrl: string, resource: string): boolean {
  return Object.values(ourResources(baseUrl)).includes(resource);
}
