-- The credit ledger. Money is BIGINT microcredits; times are Unix seconds. Invariants, per lot:
--   granted_uc = remaining_uc + Σ open allocations + Σ captured allocations
-- and every change is also an append-only journal entry whose amounts sum to zero per operation.

CREATE TABLE credit_lots (
  id             TEXT    PRIMARY KEY,
  seq            BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  agent_id       TEXT    NOT NULL REFERENCES agents (id),
  source         TEXT    NOT NULL CHECK (source IN ('grant', 'topup')),
  source_ref     TEXT,                                  -- top-up id, or the operator's note
  priority       INTEGER NOT NULL,                      -- lower burns first
  granted_uc     BIGINT  NOT NULL CHECK (granted_uc > 0),
  remaining_uc   BIGINT  NOT NULL CHECK (remaining_uc >= 0 AND remaining_uc <= granted_uc),
  expires_at_s   BIGINT,                                -- NULL: never; at or after it the remainder has lapsed
  created_at_s   BIGINT  NOT NULL
);
CREATE INDEX credit_lots_burn_order ON credit_lots (agent_id, priority, expires_at_s, seq) WHERE remaining_uc > 0;

-- A hold (the spec's Redemption). acceptor_id is a merchant id, or 'gateway' for built-in services.
CREATE TABLE holds (
  id             TEXT    PRIMARY KEY,
  seq            BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  agent_id       TEXT    NOT NULL REFERENCES agents (id),
  acceptor_id    TEXT    NOT NULL,
  merchant_id    TEXT    REFERENCES merchants (id),     -- NULL for built-in services
  offer_id       TEXT    NOT NULL,
  category       TEXT    NOT NULL,
  amount_uc      BIGINT  NOT NULL CHECK (amount_uc > 0),
  captured_uc    BIGINT  NOT NULL DEFAULT 0 CHECK (captured_uc >= 0 AND captured_uc <= amount_uc),
  state          TEXT    NOT NULL CHECK (state IN ('held', 'captured', 'released', 'expired')),
  expires_at_s   BIGINT  NOT NULL,
  created_at_s   BIGINT  NOT NULL,
  resolved_at_s  BIGINT,
  CHECK ((state = 'held') = (resolved_at_s IS NULL)),
  CHECK (state = 'captured' OR captured_uc = 0)
);
CREATE INDEX holds_due ON holds (expires_at_s) WHERE state = 'held';
CREATE INDEX holds_agent_window ON holds (agent_id, created_at_s);
CREATE INDEX holds_merchant ON holds (merchant_id, seq);

CREATE TABLE hold_allocations (
  hold_id      TEXT   NOT NULL REFERENCES holds (id),
  lot_id       TEXT   NOT NULL REFERENCES credit_lots (id),
  position     INTEGER NOT NULL,                         -- burn order within the hold
  amount_uc    BIGINT NOT NULL CHECK (amount_uc > 0),
  captured_uc  BIGINT NOT NULL DEFAULT 0 CHECK (captured_uc >= 0 AND captured_uc <= amount_uc),
  PRIMARY KEY (hold_id, lot_id)
);
CREATE INDEX hold_allocations_lot ON hold_allocations (lot_id);

-- Balances of accounts that are not lots or holds: merchant earnings, the gateway's revenue.
CREATE TABLE ledger_accounts (
  id          TEXT   PRIMARY KEY,                        -- 'merchant:<id>', 'revenue:gateway'
  balance_uc  BIGINT NOT NULL CHECK (balance_uc >= 0)
);

-- Append-only. Accounts: 'source:grant', 'source:topup', 'lot:<id>', 'hold:<id>', 'merchant:<id>',
-- 'revenue:gateway'. Each operation's entries share operation_id and sum to zero.
CREATE TABLE journal_entries (
  id            BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  operation_id  TEXT    NOT NULL,
  kind          TEXT    NOT NULL CHECK (kind IN ('grant', 'hold', 'capture', 'release', 'expire')),
  account       TEXT    NOT NULL,
  amount_uc     BIGINT  NOT NULL CHECK (amount_uc <> 0),
  created_at_s  BIGINT  NOT NULL
);
CREATE INDEX journal_entries_account ON journal_entries (account);
CREATE INDEX journal_entries_operation ON journal_entries (operation_id);
