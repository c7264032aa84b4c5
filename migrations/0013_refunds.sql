-- Refunds of captured credit, signed receipts, and the settled shape of a redemption (issue 18).

-- How long after capture a redemption of the offer can be refunded (0: never). A hold keeps the window its
-- offer had at mint, so changing an offer never changes the terms of what was already bought.
ALTER TABLE offers ADD COLUMN refund_window_s INTEGER NOT NULL DEFAULT 2592000 CHECK (refund_window_s >= 0);
ALTER TABLE holds ADD COLUMN refund_window_s INTEGER NOT NULL DEFAULT 2592000 CHECK (refund_window_s >= 0);
-- Refunded so far: never more than was captured.
ALTER TABLE holds ADD COLUMN refunded_uc BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD CONSTRAINT holds_refunded_within_captured CHECK (refunded_uc >= 0 AND refunded_uc <= captured_uc);
-- The signed capture receipt (compact JWS), kept so it reads the same later.
ALTER TABLE holds ADD COLUMN capture_receipt TEXT;

-- A refund credits the agent as a new lot (source 'refund', source_ref = the refund id), journaled as 'refund'.
ALTER TABLE credit_lots DROP CONSTRAINT credit_lots_source_check;
ALTER TABLE credit_lots ADD CONSTRAINT credit_lots_source_check CHECK (source IN ('grant', 'topup', 'refund'));
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_kind_check;
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_kind_check CHECK (kind IN ('grant', 'hold', 'capture', 'release', 'expire', 'refund'));

CREATE TABLE refunds (
  id            TEXT    PRIMARY KEY,
  seq           BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  hold_id       TEXT    NOT NULL REFERENCES holds (id),
  merchant_id   TEXT    NOT NULL REFERENCES merchants (id),
  lot_id        TEXT    NOT NULL UNIQUE REFERENCES credit_lots (id),  -- the agent's new lot
  amount_uc     BIGINT  NOT NULL CHECK (amount_uc > 0),
  reason        TEXT,
  receipt       TEXT,                                                 -- signed refund receipt (compact JWS)
  created_at_s  BIGINT  NOT NULL
);
CREATE INDEX refunds_hold ON refunds (hold_id, seq);
