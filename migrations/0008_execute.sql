-- Metered execution of built-in services: agents' mail connectors, executions (one per hold taken by
-- POST /v1/services/execute) and retained intents (requests that credit did not cover). Times in Unix
-- seconds, except the execution bookkeeping that needs milliseconds (`_ms`).

-- An agent's IMAP account. The password is sealed with the secret box (AES-256-GCM, associated data =
-- the agent id), so a copy of the database alone does not reveal it. The inbox allowlist is the agent's
-- own `inbox_allowlist`.
CREATE TABLE mail_connectors (
  agent_id         TEXT    PRIMARY KEY REFERENCES agents (id),
  host             TEXT    NOT NULL,
  port             INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
  tls              TEXT    NOT NULL CHECK (tls IN ('implicit', 'starttls', 'none')),
  username         TEXT    NOT NULL,
  password_sealed  TEXT    NOT NULL,
  ca_pem           TEXT,                                   -- CA to trust instead of the public roots
  created_at_s     BIGINT  NOT NULL,
  updated_at_s     BIGINT  NOT NULL
);

-- One row per hold that execute took. `running` rows belong to the instance named in instance_id, which
-- refreshes heartbeat_at_ms while the action is in flight; a running row whose heartbeat stopped (the
-- process died) or whose deadline passed is recovered: its hold is released and its state `abandoned`.
-- Results are not kept here (they may hold mail contents); the idempotency record keeps the answer.
CREATE TABLE service_executions (
  id                TEXT    PRIMARY KEY,
  agent_id          TEXT    NOT NULL REFERENCES agents (id),
  service_id        TEXT    NOT NULL,
  action            TEXT    NOT NULL,
  hold_id           TEXT    NOT NULL UNIQUE REFERENCES holds (id),
  state             TEXT    NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'abandoned')),
  error_code        TEXT,                                  -- why it failed or was abandoned
  instance_id       TEXT    NOT NULL,
  -- The idempotency claim, so recovery can give the key back at once.
  idem_scope        TEXT    NOT NULL,
  idem_route        TEXT    NOT NULL,
  idem_key          TEXT    NOT NULL,
  idem_token        TEXT    NOT NULL,
  started_at_ms     BIGINT  NOT NULL,
  heartbeat_at_ms   BIGINT  NOT NULL,
  deadline_at_ms    BIGINT  NOT NULL,
  finished_at_ms    BIGINT,
  CHECK ((state = 'running') = (finished_at_ms IS NULL))
);
CREATE INDEX service_executions_running ON service_executions (heartbeat_at_ms) WHERE state = 'running';
CREATE INDEX service_executions_agent ON service_executions (agent_id, started_at_ms);

-- The spec's Service intent: an execute request that credit did not cover, kept so a top-up can resume
-- it. One per (caller, Idempotency-Key): a retry with the same key answers the same intent.
CREATE TABLE service_intents (
  id               TEXT    PRIMARY KEY,
  agent_id         TEXT    NOT NULL REFERENCES agents (id),
  service_id       TEXT    NOT NULL,
  action           TEXT    NOT NULL,
  input            JSONB   NOT NULL,
  price_uc         BIGINT  NOT NULL CHECK (price_uc > 0),
  requested_by     TEXT    NOT NULL,                       -- the caller's idempotency scope
  idempotency_key  TEXT    NOT NULL,
  state            TEXT    NOT NULL CHECK (state IN ('pending', 'executed')),
  execution_id     TEXT    REFERENCES service_executions (id),
  created_at_s     BIGINT  NOT NULL,
  updated_at_s     BIGINT  NOT NULL,
  expires_at_s     BIGINT  NOT NULL,
  UNIQUE (requested_by, idempotency_key),
  CHECK ((state = 'executed') = (execution_id IS NOT NULL))
);
CREATE INDEX service_intents_agent_pending ON service_intents (agent_id, expires_at_s) WHERE state = 'pending';
