-- Remembered consent (node-oidc-provider's Grant): a consent given on the consent page lets the same
-- client, for the same identity, requested scope and resource, in the same browser, be re-authorized
-- without the page until the grant expires or its owner revokes it. The browser is named only by the
-- SHA-256 of its binding secret, as pending requests name it.

CREATE TABLE oauth_grants (
  id                TEXT   PRIMARY KEY,           -- grt_… (a handle, not a secret)
  client_id         TEXT   NOT NULL REFERENCES oauth_clients (id) ON DELETE CASCADE,
  browser_hash      TEXT   NOT NULL,              -- SHA-256 of the browser-binding cookie
  identity_issuer   TEXT   NOT NULL,              -- the identity that consented, at its provider
  identity_subject  TEXT   NOT NULL,
  requested_scope   TEXT   NOT NULL,              -- the request's scope exactly; '' = none named
  resource          TEXT   NOT NULL,
  scope             TEXT   NOT NULL CHECK (scope IN ('svc:agent', 'svc:owner')),  -- what was granted
  actor_type        TEXT   NOT NULL CHECK (actor_type IN ('agent', 'owner')),
  subject           TEXT   NOT NULL,              -- agent id or owner id: the token's sub
  email             TEXT,                         -- owner grants: the verified email at consent
  owner_id          TEXT   NOT NULL,              -- the owner who may revoke it (the agent's owner for agent grants)
  created_at_s      BIGINT NOT NULL,
  expires_at_s      BIGINT NOT NULL
);
CREATE UNIQUE INDEX oauth_grants_match
  ON oauth_grants (client_id, browser_hash, resource, requested_scope, identity_issuer, identity_subject);
CREATE INDEX oauth_grants_owner ON oauth_grants (owner_id, client_id);
CREATE INDEX oauth_grants_expiry ON oauth_grants (expires_at_s);

-- Revoking a client's consent also revokes the codes and access tokens it still holds for that owner.
ALTER TABLE oauth_codes ADD COLUMN owner_id TEXT;
CREATE INDEX oauth_codes_owner ON oauth_codes (owner_id, client_id);
