-- Merchant webhooks, the event log with its transactional outbox, and merchant offers.

CREATE TABLE webhook_endpoints (
  merchant_id        TEXT    PRIMARY KEY REFERENCES merchants (id),
  url                TEXT    NOT NULL,
  enabled            BOOLEAN NOT NULL,
  secret_sealed      TEXT    NOT NULL,     -- the signing secret, sealed with the secret box key
  created_at_s       BIGINT  NOT NULL,
  updated_at_s       BIGINT  NOT NULL
);

-- Every event, whether or not a webhook was configured when it happened.
CREATE TABLE events (
  id             TEXT    PRIMARY KEY,
  seq            BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  merchant_id    TEXT    NOT NULL REFERENCES merchants (id),
  type           TEXT    NOT NULL,
  payload        TEXT    NOT NULL,         -- the exact JSON delivered
  created_at_s   BIGINT  NOT NULL
);
CREATE INDEX events_merchant ON events (merchant_id, seq);

-- The outbox: one row per delivery to send, written in the same transaction as the event's cause.
CREATE TABLE webhook_deliveries (
  id                 TEXT    PRIMARY KEY,
  seq                BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  event_id           TEXT    NOT NULL REFERENCES events (id),
  merchant_id        TEXT    NOT NULL REFERENCES merchants (id),
  state              TEXT    NOT NULL CHECK (state IN ('pending', 'succeeded', 'dead')),
  attempts           INTEGER NOT NULL DEFAULT 0,
  next_attempt_at_ms BIGINT  NOT NULL,
  locked_until_ms    BIGINT  NOT NULL DEFAULT 0,   -- a worker owns the row until then
  last_status        INTEGER,
  last_error         TEXT,
  last_attempt_at_s  BIGINT,
  created_at_s       BIGINT  NOT NULL,
  delivered_at_s     BIGINT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at_ms) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_merchant ON webhook_deliveries (merchant_id, seq);

CREATE TABLE offers (
  id               TEXT    PRIMARY KEY,
  seq              BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  merchant_id      TEXT    NOT NULL REFERENCES merchants (id),
  name             TEXT    NOT NULL,
  category         TEXT    NOT NULL,
  price_uc         BIGINT  NOT NULL CHECK (price_uc > 0),
  active           BOOLEAN NOT NULL,
  hold_lifetime_s  INTEGER NOT NULL CHECK (hold_lifetime_s > 0),
  created_at_s     BIGINT  NOT NULL,
  updated_at_s     BIGINT  NOT NULL
);
CREATE INDEX offers_merchant ON offers (merchant_id, seq);
