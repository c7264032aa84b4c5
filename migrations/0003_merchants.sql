-- Merchants, their DNS proof and their API keys. Times are Unix seconds.

CREATE TABLE merchants (
  id                       TEXT    PRIMARY KEY,
  seq                      BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  owner_id                 TEXT    NOT NULL REFERENCES owners (id),
  name                     TEXT    NOT NULL,
  domain                   TEXT    NOT NULL,
  categories               JSONB   NOT NULL,   -- string[]
  verification_challenge   TEXT    NOT NULL,
  verified                 BOOLEAN NOT NULL DEFAULT false,
  verified_at_s            BIGINT,
  accepted_payment_methods JSONB   NOT NULL,   -- string[]
  created_at_s             BIGINT  NOT NULL,
  updated_at_s             BIGINT  NOT NULL
);
CREATE INDEX merchants_owner ON merchants (owner_id, seq);

CREATE TABLE merchant_api_keys (
  id            TEXT    PRIMARY KEY,           -- the public part of the key, also its keyId
  seq           BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  merchant_id   TEXT    NOT NULL REFERENCES merchants (id),
  owner_id      TEXT    NOT NULL REFERENCES owners (id),
  name          TEXT    NOT NULL,
  scopes        JSONB   NOT NULL,              -- string[]
  secret_hash   TEXT    NOT NULL,              -- HMAC-SHA-256 of the secret part under the key pepper
  created_at_s  BIGINT  NOT NULL,
  revoked_at_s  BIGINT
);
CREATE INDEX merchant_api_keys_merchant ON merchant_api_keys (merchant_id, seq);
