-- Spending mandates: the owner's rules for one agent, versioned, hashed, enforced at every hold.
--
-- The agent row carries its current mandate: the rules the hold pass reads under the agent's lock (today's
-- allowances and caps columns, plus `mandate_rules` for budgets, merchants, the approval threshold, the
-- validity window, the time zone and the alert thresholds), its version and its hash. Every version ever in
-- force is kept as the canonical JSON (RFC 8785) its hash is taken over, so evidence can show the rules a
-- purchase was made under. Version 0 means "not written yet": the gateway writes version 1 of every such
-- agent from its columns when it starts (canonical JSON is made in code, not SQL).
ALTER TABLE agents ADD COLUMN mandate_version INTEGER NOT NULL DEFAULT 0 CHECK (mandate_version >= 0);
ALTER TABLE agents ADD COLUMN mandate_hash TEXT;
ALTER TABLE agents ADD COLUMN mandate_rules JSONB NOT NULL DEFAULT '{}';

CREATE TABLE mandate_versions (
  agent_id      TEXT    NOT NULL REFERENCES agents (id),
  version       INTEGER NOT NULL CHECK (version >= 1),
  hash          TEXT    NOT NULL,             -- base64url SHA-256 of `document`
  document      TEXT    NOT NULL,             -- the canonical JSON (RFC 8785) of the version
  created_at_s  BIGINT  NOT NULL,
  created_by    TEXT    NOT NULL,             -- who wrote it: a principal scope, or "gateway" (version 1 at start)
  PRIMARY KEY (agent_id, version)
);

-- Per-budget running totals, owned by the spending policy and changed in the same statement as the hold,
-- settlement or refund they count: what the holds made in one budget period reserve or captured, less what
-- was released, expired or refunded (given back to the period the hold was made in). A check reads one row
-- per budget; it never sums history. `alerted_pct` is the highest alert threshold already announced for the
-- period (budget.threshold fires once per threshold and period).
CREATE TABLE budget_usage (
  agent_id        TEXT    NOT NULL REFERENCES agents (id),
  budget_id       TEXT    NOT NULL,
  period_start_s  BIGINT  NOT NULL,             -- 0 for a budget over all time (`total`)
  spent_uc        BIGINT  NOT NULL DEFAULT 0 CHECK (spent_uc >= 0),
  alerted_pct     INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (agent_id, budget_id, period_start_s)
);

-- The budgets (and periods) each hold counted in, so that whatever later happens to the hold gives back to
-- exactly those, whatever the mandate says by then.
CREATE TABLE hold_budget_charges (
  hold_id         TEXT    NOT NULL REFERENCES holds (id),
  agent_id        TEXT    NOT NULL REFERENCES agents (id),
  budget_id       TEXT    NOT NULL,
  period_start_s  BIGINT  NOT NULL,
  PRIMARY KEY (hold_id, agent_id, budget_id)
);

-- What a purchase was made under and with, for its evidence: the mandate version in force at the hold, the
-- voucher as issued, and the offer as it was sold.
ALTER TABLE holds ADD COLUMN mandate_version INTEGER;
ALTER TABLE holds ADD COLUMN mandate_hash TEXT;
ALTER TABLE holds ADD COLUMN voucher TEXT;
ALTER TABLE holds ADD COLUMN offer_snapshot JSONB;
