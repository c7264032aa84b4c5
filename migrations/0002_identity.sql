-- Owners (verified humans), their registered agents, and avatar uploads. Times are Unix seconds.

CREATE TABLE owners (
  id              TEXT    PRIMARY KEY,
  human_issuer    TEXT    NOT NULL,
  human_subject   TEXT    NOT NULL,
  email           TEXT    NOT NULL,          -- lower-cased; the verified email of the last session seen
  email_verified  BOOLEAN NOT NULL,
  created_at_s    BIGINT  NOT NULL,
  updated_at_s    BIGINT  NOT NULL,
  UNIQUE (human_issuer, human_subject)
);

CREATE TABLE agents (
  id                 TEXT    PRIMARY KEY,
  seq                BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,  -- creation order, for stable paging
  owner_id           TEXT    NOT NULL REFERENCES owners (id),
  name               TEXT    NOT NULL,
  identity_issuer    TEXT    NOT NULL,
  identity_subject   TEXT    NOT NULL,
  status             TEXT    NOT NULL CHECK (status IN ('active', 'frozen')),
  allowed_services   JSONB   NOT NULL,      -- string[]; "*" allows every service
  allowed_categories JSONB   NOT NULL,      -- string[]; "*" allows every category
  inbox_allowlist    JSONB   NOT NULL,      -- string[] of mailbox names
  cap_per_hold_uc    BIGINT  CHECK (cap_per_hold_uc >= 0),
  cap_per_period_uc  BIGINT  CHECK (cap_per_period_uc >= 0),
  cap_period_s       INTEGER NOT NULL CHECK (cap_period_s > 0),
  profile_name       TEXT    NOT NULL,
  profile_preset     TEXT    NOT NULL,
  profile_color      TEXT    NOT NULL,
  avatar_upload_id   TEXT,
  created_at_s       BIGINT  NOT NULL,
  updated_at_s       BIGINT  NOT NULL,
  UNIQUE (identity_issuer, identity_subject)
);
CREATE INDEX agents_owner ON agents (owner_id, seq);

CREATE TABLE avatar_uploads (
  id             TEXT    PRIMARY KEY,
  storage_id     TEXT    NOT NULL UNIQUE,
  agent_id       TEXT    NOT NULL REFERENCES agents (id),
  content_type   TEXT    NOT NULL,
  size_bytes     INTEGER NOT NULL CHECK (size_bytes > 0),
  bytes          BYTEA,                      -- NULL until the bytes arrive
  state          TEXT    NOT NULL CHECK (state IN ('pending', 'uploaded', 'finalized')),
  created_at_s   BIGINT  NOT NULL,
  expires_at_s   BIGINT  NOT NULL
);
CREATE INDEX avatar_uploads_agent ON avatar_uploads (agent_id);

-- Secrets the gateway generates for itself in dev mode (e.g. the API key pepper), shared by instances.
CREATE TABLE runtime_secrets (
  name          TEXT   PRIMARY KEY,
  value         TEXT   NOT NULL,
  created_at_s  BIGINT NOT NULL
);
