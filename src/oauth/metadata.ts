// Discovery documents: RFC 8414 authorization server metadata (also served at the OpenID
// configuration path MCP clients probe) and RFC 9728 protected resource metadata for the API and /mcp.
// The issuer is the base URL exactly, with no trailing slash: strict clients compare it by string.
// Under a base URL with a path, each document is also served where RFC 8414 §3.1 and RFC 9728 §3.1 put it: the
// well-known segment first, then the issuer's or resource's path.
import { ourResources, type Resource } from '../platform/access-tokens.ts';
import { SCOPES } from './scopes.ts';

export function authorizationServerMetadata(baseUrl: string) {
  return {
    issuer: baseUrl,
    authorization_endpoint: `${baseUrl}/oauth/authorize`,
    token_endpoint: `${baseUrl}/oauth/token`,
    registration_endpoint: `${baseUrl}/oauth/register`,
    jwks_uri: `${baseUrl}/.well-known/jwks.json`,
    scopes_supported: [...SCOPES],
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code'],
    // RFC 8414's default is client_secret_basic; say "none" explicitly (the MCP SDK assumes the default).
    token_endpoint_auth_methods_supported: ['none'],
    revocation_endpoint: `${baseUrl}/oauth/revoke`,
    revocation_endpoint_auth_methods_supported: ['none'],
    code_challenge_methods_supported: ['S256'],
    authorization_response_iss_parameter_supported: true,
    // Said, because OpenID Connect Discovery's default for request_uri is true and this document is also served at its path.
    request_parameter_supported: false,
    request_uri_parameter_supported: false,
    client_id_metadata_document_supported: false,
    service_documentation: `${baseUrl}/docs`,
  };
}

export function protectedResourceMetadata(baseUrl: string, resource: Resource) {
  return {
    resource: ourResources(baseUrl)[resource],
    authorization_servers: [baseUrl],
    scopes_supported: [...SCOPES],
    bearer_methods_supported: ['header'],
    resource_name: resource === 'mcp' ? 'Agent Credit Gateway MCP endpoint' : 'Agent Credit Gateway API',
    resource_documentation: `${baseUrl}/docs`,
  };
}

/** A URL's path as RFC 8414 §3.1 and RFC 9728 §3.1 insert it after the well-known segment: '' at the host's root. */
function insertedPath(url: string): string {
  const { pathname } = new URL(url);
  return pathname === '/' ? '' : pathname;
}

/** Whether `path` (as sent, after the well-known segment) is the issuer's path: the base URL's, never empty here. */
export function isIssuerPath(baseUrl: string, path: string): boolean {
  return path !== '' && path === insertedPath(baseUrl);
}

/** The resource whose path `path` is (as sent, after the well-known segment), if any: `{base path}` or `{base path}/mcp`. */
export function resourceAtPath(baseUrl: string, path: string): Resource | undefined {
  const resources = Object.entries(ourResources(baseUrl)) as Array<[Resource, string]>;
  return path === '' ? undefined : resources.find(([, uri]) => insertedPath(uri) === path)?.[0];
}
