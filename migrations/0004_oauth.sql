-- The OAuth 2.0 authorization server: registered public clients, pending authorization requests,
-- authorization codes and revoked access tokens; plus the publication window of rotated signing keys.
-- Times are Unix seconds. Codes and browser secrets are stored only as SHA-256 hashes.

CREATE TABLE oauth_clients (
  id              TEXT   PRIMARY KEY,           -- client_id (128 random bits)
  client_name     TEXT,
  redirect_uris   JSONB  NOT NULL,              -- string[], exactly as registered
  scope           TEXT,                         -- registered scope limit; NULL = both scopes
  created_at_s    BIGINT NOT NULL,
  last_used_at_s  BIGINT                        -- last access token issued; NULL = never used
);
-- Never-used clients are purged first when the registration cap is reached.
CREATE INDEX oauth_clients_unused ON oauth_clients (created_at_s) WHERE last_used_at_s IS NULL;

CREATE TABLE oauth_authorization_requests (
  id              TEXT   PRIMARY KEY,           -- requestId (128 random bits)
  client_id       TEXT   NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
  redirect_uri    TEXT   NOT NULL,              -- exactly as sent (a loopback port included)
  state           TEXT,
  code_challenge  TEXT   NOT NULL,              -- S256 only
  resource        TEXT   NOT NULL,              -- RFC 8707 resource; becomes the token's aud
  scope           TEXT,                         -- as requested; NULL = the chosen provider decides
  browser_hash    TEXT   NOT NULL,              -- SHA-256 of the browser-binding cookie
  created_at_s    BIGINT NOT NULL,
  expires_at_s    BIGINT NOT NULL,
  consumed_at_s   BIGINT                        -- consent given (single use)
);
CREATE INDEX oauth_authorization_requests_expiry ON oauth_authorization_requests (expires_at_s);

CREATE TABLE oauth_codes (
  code_hash                  TEXT   PRIMARY KEY,  -- SHA-256 of the code
  client_id                  TEXT   NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
  redirect_uri               TEXT   NOT NULL,
  resource                   TEXT   NOT NULL,
  code_challenge             TEXT   NOT NULL,
  scope                      TEXT   NOT NULL CHECK (scope IN ('svc:agent', 'svc:owner')),
  actor_type                 TEXT   NOT NULL CHECK (actor_type IN ('agent', 'owner')),
  subject                    TEXT   NOT NULL,     -- agent id or owner id
  email                      TEXT,                -- owner tokens: the verified email at consent
  created_at_s               BIGINT NOT NULL,
  expires_at_s               BIGINT NOT NULL,
  consumed_at_s              BIGINT,
  access_token_jti           TEXT,                -- the token this code issued, revoked on replay
  access_token_expires_at_s  BIGINT,
  purge_after_s              BIGINT NOT NULL      -- kept until the token it issued has expired
);
CREATE INDEX oauth_codes_purge ON oauth_codes (purge_after_s);

-- Access tokens revoked before their expiry (a replayed code); the credential verifier checks it.
CREATE TABLE oauth_revoked_tokens (
  jti           TEXT   PRIMARY KEY,
  expires_at_s  BIGINT NOT NULL                   -- the token's exp; the row is useless afterwards
);
CREATE INDEX oauth_revoked_tokens_expiry ON oauth_revoked_tokens (expires_at_s);

-- Key rotation: a retired key stays in the JWKS (and verifies) until this moment; NULL = no end yet.
ALTER TABLE signing_keys ADD COLUMN published_until_s BIGINT;
