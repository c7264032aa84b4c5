-- Foundation: idempotency records, shared rate-limit counters, signing keys.
-- Internal bookkeeping times are Unix milliseconds (BIGINT, suffix _ms); API resources use Unix seconds (_s).

CREATE TABLE idempotency_keys (
  scope            TEXT    NOT NULL,  -- the caller (principal) the key belongs to
  route            TEXT    NOT NULL,  -- method + route pattern
  key              TEXT    NOT NULL,
  fingerprint      TEXT    NOT NULL,  -- sha256 of the request that first used the key
  state            TEXT    NOT NULL CHECK (state IN ('running', 'done')),
  claim_token      TEXT    NOT NULL,  -- changes on every takeover; a finalize must present it
  status_code      INTEGER,
  response_body    TEXT,              -- exact JSON sent, secrets removed
  response_headers TEXT,              -- JSON object of headers worth replaying
  created_at_ms    BIGINT  NOT NULL,
  locked_until_ms  BIGINT  NOT NULL,
  expires_at_ms    BIGINT  NOT NULL,
  PRIMARY KEY (scope, route, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at_ms);

CREATE TABLE rate_limit_counters (
  bucket          TEXT    NOT NULL,
  window_start_ms BIGINT  NOT NULL,
  hits            INTEGER NOT NULL,
  PRIMARY KEY (bucket, window_start_ms)
);

CREATE TABLE signing_keys (
  kid            TEXT   PRIMARY KEY,
  alg            TEXT   NOT NULL CHECK (alg = 'ES256'),
  public_jwk     TEXT   NOT NULL,
  private_jwk    TEXT   NOT NULL,
  created_at_s   BIGINT NOT NULL,
  active_from_s  BIGINT NOT NULL,  -- published before this moment, used for signing from it on
  retired_at_s   BIGINT             -- no longer signs; still published until its tokens expire
);
