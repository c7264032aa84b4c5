-- The kill switch with reach: a freeze that releases its subtree's outstanding holds revokes their vouchers,
-- tells each merchant holding one (`voucher.revoked`), lists them in the merchant's revocations feed, and keeps
-- a report of how far it reached.

-- A revoked hold is a released one whose voucher the gateway withdrew: its capture answers 409
-- voucher_revoked (a plain released one answers hold_resolved), its release replays as released.
ALTER TABLE holds ADD COLUMN revoked_at_s BIGINT;
ALTER TABLE holds ADD COLUMN revocation_reason TEXT;
ALTER TABLE holds ADD CONSTRAINT holds_revocation CHECK (
  (revoked_at_s IS NULL AND revocation_reason IS NULL) OR (revoked_at_s IS NOT NULL AND revocation_reason IS NOT NULL AND state = 'released')
);

-- One row per freeze: what the owner asked and what it released. The latest of an agent is its report.
CREATE TABLE agent_freezes (
  id              TEXT    PRIMARY KEY,
  seq             BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
  agent_id        TEXT    NOT NULL REFERENCES agents (id),
  release_holds   BOOLEAN NOT NULL,
  released_holds  INTEGER NOT NULL CHECK (released_holds >= 0),
  released_uc     BIGINT  NOT NULL CHECK (released_uc >= 0),
  frozen_at_s     BIGINT  NOT NULL,
  frozen_by       TEXT    NOT NULL            -- the principal scope that froze it
);
CREATE INDEX agent_freezes_agent ON agent_freezes (agent_id, seq);

-- The revocations feed: one row per revoked merchant hold, in the order they were revoked (`seq` is the
-- cursor). `event_id` is the merchant's `voucher.revoked` event that named the hold (no foreign key: events
-- are purged after their retention, the feed is kept as long as the holds).
CREATE TABLE hold_revocations (
  seq           BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  hold_id       TEXT    NOT NULL UNIQUE REFERENCES holds (id),
  merchant_id   TEXT    NOT NULL REFERENCES merchants (id),
  agent_id      TEXT    NOT NULL REFERENCES agents (id),   -- the agent frozen (the cause), as the event names it
  freeze_id     TEXT    NOT NULL REFERENCES agent_freezes (id),
  event_id      TEXT    NOT NULL,
  reason        TEXT    NOT NULL,
  revoked_at_s  BIGINT  NOT NULL
);
CREATE INDEX hold_revocations_merchant ON hold_revocations (merchant_id, seq);
CREATE INDEX hold_revocations_freeze ON hold_revocations (freeze_id, seq);

-- One row per merchant with a feed, locked by every append to it until the append commits: a merchant's feed
-- rows then take their `seq` in commit order, so a reader that has passed a cursor never finds a row appear
-- behind it later (two freezes of different agents would otherwise interleave their numbers and commits).
CREATE TABLE revocation_feeds (
  merchant_id    TEXT    PRIMARY KEY REFERENCES merchants (id),
  revoked_holds  BIGINT  NOT NULL CHECK (revoked_holds >= 0)
);
