// Route schemas of the authorization server: the OpenAPI document is generated from these.
import { Type } from '@sinclair/typebox';
import { Nullable, UnixSeconds } from '../platform/schemas.ts';
import { CLIENT_NAME_LENGTH_MAX, REDIRECT_URIS_MAX, REDIRECT_URIS_MIN, REQUEST_ID_CHARS_MAX } from './limits.ts';
import { IDENTITY_PROVIDERS, SCOPES } from './scopes.ts';

export const ClientRegistrationRequest = Type.Object(
  {
    redirect_uris: Type.Array(Type.String({ format: 'uri' }), {
      minItems: REDIRECT_URIS_MIN,
      maxItems: REDIRECT_URIS_MAX,
      description: 'https URIs, or http on 127.0.0.1, [::1] or localhost; no fragment, no credentials, and no code, state, iss, error, error_description or error_uri in the query (the redirect appends them to the query as registered); at most 2000 characters each; a URI listed twice is registered once',
    }),
    client_name: Type.Optional(Type.String({ minLength: 1, maxLength: CLIENT_NAME_LENGTH_MAX, description: 'shown on the consent page' })),
    token_endpoint_auth_method: Type.Optional(Type.Literal('none', { description: 'public clients only' })),
    grant_types: Type.Optional(
      Type.Array(Type.Union([Type.Literal('authorization_code'), Type.Literal('refresh_token')]), {
        minItems: 1,
        maxItems: 2,
        uniqueItems: true,
        description:
          'must include authorization_code; refresh_token may be listed (as MCP clients do), but no refresh tokens are issued, so the client is registered with ["authorization_code"] alone',
      }),
    ),
    response_types: Type.Optional(Type.Array(Type.Literal('code'), { minItems: 1, maxItems: 1 })),
    scope: Type.Optional(Type.String({ description: 'limits the client to these scopes: svc:agent, svc:owner or both (space-separated)' })),
  },
  { additionalProperties: true, description: 'RFC 7591 client metadata. Other members are ignored and never echoed back.' },
);

export const ClientRegistration = Type.Object(
  {
    client_id: Type.String(),
    client_id_issued_at: Type.Integer({ description: 'Unix seconds' }),
    client_name: Type.Optional(Type.String()),
    redirect_uris: Type.Array(Type.String()),
    token_endpoint_auth_method: Type.Literal('none'),
    grant_types: Type.Array(Type.String()),
    response_types: Type.Array(Type.String()),
    scope: Type.Optional(Type.String()),
  },
  { $id: 'OAuthClientRegistration', description: 'OAuth client registration record' },
);

export const AuthorizeQuery = Type.Object(
  {
    response_type: Type.Optional(Type.Literal('code')),
    client_id: Type.Optional(Type.String()),
    redirect_uri: Type.Optional(Type.String({ description: 'required; a registered URI (a loopback IP literal may use any port)' })),
    state: Type.Optional(Type.String({ maxLength: 512, description: 'echoed back; recommended' })),
    code_challenge: Type.Optional(Type.String({ description: 'required; base64url SHA-256 of the code verifier (43 characters)' })),
    code_challenge_method: Type.Optional(Type.Literal('S256', { description: 'required' })),
    resource: Type.Optional(Type.String({ description: 'required (RFC 8707): {base_url} for the API or {base_url}/mcp' })),
    scope: Type.Optional(Type.String({ description: 'svc:agent, svc:owner, or both; absent = the identity provider chosen decides' })),
    prompt: Type.Optional(
      Type.String({
        description:
          'OpenID Connect prompt: `none` = answer only from a remembered consent (else consent_required); `login`, `consent` or ' +
          '`select_account` (space-separated) = show the consent page even when a consent is remembered; absent = a remembered consent answers',
      }),
    ),
  },
  { additionalProperties: true },
);

export const ConsentQuery = Type.Object({ request_id: Type.Optional(Type.String()) }, { additionalProperties: true });

export const SelectBody = Type.Object(
  {
    requestId: Type.String({ minLength: 1, maxLength: REQUEST_ID_CHARS_MAX, description: 'the pending authorization request, as the consent page names it (the request signed by the gateway: a compact JWS, up to some kilobytes with a long redirect URI and state)' }),
    identityProvider: Type.String({
      enum: [...IDENTITY_PROVIDERS],
      description: '`human`: the human owner identity provider, grants svc:owner (O token); `agent`: the agent identity provider, grants svc:agent (A token)',
    }),
  },
  { additionalProperties: false },
);

export const DenyBody = Type.Object(
  { requestId: Type.String({ minLength: 1, maxLength: REQUEST_ID_CHARS_MAX, description: 'the pending authorization request, as the consent page names it' }) },
  { additionalProperties: false },
);

export const DenyResponse = Type.Object({
  redirectUrl: Type.String({ format: 'uri', description: 'the registered callback with error=access_denied, error_description, state and iss' }),
});

export const SelectResponse = Type.Object({
  redirectUrl: Type.String({ format: 'uri', description: 'the registered callback with code, state and iss' }),
});

export const TokenRequest = Type.Object(
  {
    grant_type: Type.Literal('authorization_code'),
    code: Type.String(),
    client_id: Type.String(),
    redirect_uri: Type.String({ format: 'uri' }),
    code_verifier: Type.String({ minLength: 43, maxLength: 128, pattern: '^[A-Za-z0-9._~-]+$' }),
    resource: Type.String({ format: 'uri' }),
  },
  { additionalProperties: true },
);

export const RevokeRequest = Type.Object(
  {
    token: Type.String({ description: 'the access token to revoke' }),
    token_type_hint: Type.Optional(Type.String({ description: 'accepted and ignored: only access tokens are issued' })),
    client_id: Type.String({ description: 'the client the token was issued to' }),
  },
  { additionalProperties: true },
);

export const TokenResponse = Type.Object(
  {
    access_token: Type.String({ description: 'ES256 JWT, typ at+jwt (RFC 9068)' }),
    token_type: Type.Literal('Bearer'),
    expires_in: Type.Integer({ description: 'seconds; 600' }),
    scope: Type.String({ enum: [...SCOPES] }),
  },
  { $id: 'OAuthAccessTokenResponse', description: 'OAuth access token response' },
);

export const AuthorizationServerMetadata = Type.Object(
  {
    issuer: Type.String(),
    authorization_endpoint: Type.String(),
    token_endpoint: Type.String(),
    registration_endpoint: Type.String(),
    jwks_uri: Type.String(),
    scopes_supported: Type.Array(Type.String()),
    response_types_supported: Type.Array(Type.String()),
    response_modes_supported: Type.Array(Type.String()),
    grant_types_supported: Type.Array(Type.String()),
    token_endpoint_auth_methods_supported: Type.Array(Type.String()),
    revocation_endpoint: Type.String(),
    revocation_endpoint_auth_methods_supported: Type.Array(Type.String()),
    code_challenge_methods_supported: Type.Array(Type.String()),
    authorization_response_iss_parameter_supported: Type.Boolean(),
    request_parameter_supported: Type.Boolean(),
    request_uri_parameter_supported: Type.Boolean(),
    client_id_metadata_document_supported: Type.Boolean(),
    service_documentation: Type.String(),
  },
  { $id: 'OAuthAuthorizationServerMetadata', description: 'RFC 8414 authorization server metadata' },
);

export const ProtectedResourceMetadata = Type.Object(
  {
    resource: Type.String(),
    authorization_servers: Type.Array(Type.String()),
    scopes_supported: Type.Array(Type.String()),
    bearer_methods_supported: Type.Array(Type.String()),
    resource_name: Type.String(),
    resource_documentation: Type.String(),
  },
  { $id: 'OAuthProtectedResourceMetadata', description: 'RFC 9728 protected resource metadata' },
);

export const DevLoginBody = Type.Object(
  {
    email: Type.Optional(Type.String({ minLength: 3, maxLength: 254, pattern: '^[^@\\s]+@[^@\\s]+$', description: 'human: the verified email' })),
    subject: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: "agent: the agent's subject at the agent issuer" })),
    ownerEmail: Type.Optional(Type.String({ minLength: 3, maxLength: 254, pattern: '^[^@\\s]+@[^@\\s]+$', description: "agent: its owner's verified email" })),
  },
  { additionalProperties: false },
);

export const DevLoginResponse = Type.Object({
  token: Type.String({ description: 'an identity JWT of the built-in issuer' }),
  expiresIn: Type.Integer({ description: 'seconds' }),
});

export const SeeOther = (description: string) => ({ description, type: 'null' });

export const OAuthGrantSchema = Type.Object(
  {
    id: Type.String({ description: 'grt_…' }),
    clientId: Type.String({ description: 'the OAuth client this consent lets in without the consent page' }),
    clientName: Nullable(Type.String({ description: 'as the client registered it (not verified)' })),
    scope: Type.String({ enum: [...SCOPES], description: 'what the consent granted: the scope of every token it issues' }),
    resource: Type.String({ description: 'the resource (RFC 8707) it was given for: the API or the MCP endpoint' }),
    agentId: Nullable(Type.String({ description: 'the agent that consented (svc:agent), or null for your own consent (svc:owner)' })),
    identity: Type.Object({ issuer: Type.String(), subject: Type.String() }, { description: 'the identity that signed in on the consent page' }),
    createdAt: UnixSeconds('consent given'),
    expiresAt: UnixSeconds('the consent is forgotten'),
  },
  { $id: 'OAuthGrant', description: 'A remembered consent: one browser, one client, one identity, one scope and resource' },
);

export const OAUTH_SCHEMAS = [ClientRegistration, TokenResponse, AuthorizationServerMetadata, ProtectedResourceMetadata, OAuthGrantSchema];
