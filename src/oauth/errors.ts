// One constructor per OAuth error code, so the code that rejects reads like the RFC
// (node-oidc-provider's lib/helpers/errors.js). Statuses follow RFC 6749 §5.2 and our spec.
import { OAuthError } from '../platform/errors.ts';

export const invalidRequest = (description: string) => new OAuthError(400, 'invalid_request', description);
export const invalidClient = (description: string) => new OAuthError(400, 'invalid_client', description);
/**
 * Client authentication sent by a public client (every client here is: token_endpoint_auth_method none). Through
 * the Authorization header it is 401 with a challenge of the scheme the client used (RFC 6749 §5.2); in the body,
 * 400.
 */
export const clientAuthenticationRefused = (description: string, headerScheme?: string) =>
  headerScheme === undefined
    ? new OAuthError(400, 'invalid_client', description)
    : new OAuthError(401, 'invalid_client', description, undefined, { 'www-authenticate': `${headerScheme} realm="oauth"` });
export const invalidGrant = (description: string) => new OAuthError(400, 'invalid_grant', description);
export const invalidTarget = (description: string) => new OAuthError(400, 'invalid_target', description);
export const invalidRedirectUri = (description: string) => new OAuthError(400, 'invalid_redirect_uri', description);
export const invalidClientMetadata = (description: string) => new OAuthError(400, 'invalid_client_metadata', description);
export const unsupportedGrantType = (description: string) => new OAuthError(400, 'unsupported_grant_type', description);
export const accessDenied = (description: string) => new OAuthError(403, 'access_denied', description);
/** A body this endpoint does not read: another media type, or one it would have to decode (the spec's 415). */
export const unsupportedMediaType = (description: string) => new OAuthError(415, 'invalid_request', description);
export const temporarilyUnavailable = (status: 429 | 503, description: string, retryAfterS?: number) =>
  new OAuthError(status, 'temporarily_unavailable', description, retryAfterS);
