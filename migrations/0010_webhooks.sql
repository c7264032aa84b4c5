-- Webhooks that one receiver cannot slow, pauses that lose nothing, and secret rotation with overlap.

-- Rotation: the secret replaced by POST …/rotate-secret keeps signing (next to the new one) until then.
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_sealed TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_expires_at_s BIGINT;
-- Pause: when deliveries stopped (enabled went false), so a resume can deliver what happened since.
ALTER TABLE webhook_endpoints ADD COLUMN paused_at_s BIGINT;
-- Why the endpoint is disabled: 'merchant' (PUT/PATCH) or 'failing' (the gateway gave up on it).
ALTER TABLE webhook_endpoints ADD COLUMN disabled_reason TEXT;
-- Per-endpoint circuit: failures in a row, when the current run of failures began, and until when no
-- attempt is made at all (the circuit is open).
ALTER TABLE webhook_endpoints ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN failing_since_s BIGINT;
ALTER TABLE webhook_endpoints ADD COLUMN circuit_open_until_ms BIGINT NOT NULL DEFAULT 0;
UPDATE webhook_endpoints SET paused_at_s = updated_at_s, disabled_reason = 'merchant' WHERE NOT enabled;

-- One delivery per event: a re-send of a past event reuses it (same webhook-id) or creates it.
CREATE UNIQUE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);

-- Events are listed by merchant, type and time, and purged after the retention (ACG_EVENT_RETENTION_DAYS).
CREATE INDEX events_merchant_created ON events (merchant_id, created_at_s, seq);
CREATE INDEX events_created ON events (created_at_s);

-- Every attempt, written when it starts: one cut off by a crash stays 'in_progress' until the instance
-- taking the delivery over marks it 'interrupted'.
CREATE TABLE webhook_attempts (
  id              TEXT    PRIMARY KEY,
  seq             BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  delivery_id     TEXT    NOT NULL REFERENCES webhook_deliveries (id),
  merchant_id     TEXT    NOT NULL REFERENCES merchants (id),
  attempt         INTEGER NOT NULL,
  claim_token     TEXT    NOT NULL,
  outcome         TEXT    NOT NULL CHECK (outcome IN ('in_progress', 'succeeded', 'failed', 'interrupted')),
  status          INTEGER,
  error           TEXT,
  duration_ms     INTEGER,
  started_at_ms   BIGINT  NOT NULL,
  finished_at_ms  BIGINT
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, seq);
CREATE INDEX webhook_attempts_in_progress ON webhook_attempts (delivery_id) WHERE outcome = 'in_progress';
