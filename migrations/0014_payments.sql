-- Top-ups: a request to credit an agent, approved by its owner through a payment-approval provider
-- (local approval, or Stripe Checkout). Status transitions (docs/decisions.md, "Top-up statuses"):
--   pending_approval → settled | declined | expired | failed; every other state is final.
-- Settlement credits exactly one lot (source 'topup', source_ref = the top-up id) in the transaction that
-- marks the top-up settled. Amounts: 1 US cent = 1 credit = 1,000,000 µc. Times in Unix seconds.
CREATE TABLE topups (
  id                TEXT    PRIMARY KEY,
  agent_id          TEXT    NOT NULL REFERENCES agents (id),
  owner_id          TEXT    NOT NULL REFERENCES owners (id),
  amount_usd_cents  INTEGER NOT NULL CHECK (amount_usd_cents BETWEEN 50 AND 100000),
  reason            TEXT    NOT NULL,
  -- The retained intent this top-up pays for; the intent sweeper may delete it after its lifetime.
  intent_id         TEXT    REFERENCES service_intents (id) ON DELETE SET NULL,
  provider          TEXT    NOT NULL CHECK (provider IN ('local', 'stripe')),
  provider_ref      TEXT,                                  -- the Checkout Session id (stripe)
  approval_url      TEXT    NOT NULL,
  checkout_url      TEXT    NOT NULL,
  livemode          BOOLEAN NOT NULL,                      -- false: a test-mode payment (dev mode, Stripe test keys)
  status            TEXT    NOT NULL CHECK (status IN ('pending_approval', 'settled', 'declined', 'expired', 'failed')),
  requested_by      TEXT    NOT NULL,                      -- the caller's principal scope
  lot_id            TEXT    UNIQUE REFERENCES credit_lots (id),
  settlement_ref    TEXT,                                  -- what proved payment: the approving owner, or the Stripe event
  created_at_s      BIGINT  NOT NULL,
  updated_at_s      BIGINT  NOT NULL,
  expires_at_s      BIGINT  NOT NULL,                      -- a pending top-up past this is expired
  finished_at_s     BIGINT,
  -- Resuming the bound intent after settlement: due until the intent is no longer pending.
  resume_due        BOOLEAN NOT NULL DEFAULT false,
  resume_attempts   INTEGER NOT NULL DEFAULT 0,
  next_resume_at_s  BIGINT,
  CHECK ((status = 'settled') = (lot_id IS NOT NULL)),
  CHECK ((status = 'pending_approval') = (finished_at_s IS NULL))
);
CREATE INDEX topups_agent ON topups (agent_id, created_at_s, id);
CREATE INDEX topups_pending_expiry ON topups (expires_at_s) WHERE status = 'pending_approval';
CREATE INDEX topups_resume ON topups (next_resume_at_s) WHERE resume_due;
-- One open approval per intent: a retry of the execute request answers the same top-up.
CREATE UNIQUE INDEX topups_intent_pending ON topups (intent_id) WHERE status = 'pending_approval';
CREATE UNIQUE INDEX topups_provider_ref ON topups (provider, provider_ref);
-- The ledger-side guard of "credited once": at most one lot per top-up.
CREATE UNIQUE INDEX credit_lots_topup_once ON credit_lots (source_ref) WHERE source = 'topup';

-- Retained intents now end in one of: executed (ran and was charged), failed (ran, failed definitively,
-- not charged), cancelled (its top-up was declined, expired or failed; not charged).
ALTER TABLE service_intents DROP CONSTRAINT service_intents_state_check;
ALTER TABLE service_intents DROP CONSTRAINT service_intents_check;
ALTER TABLE service_intents ADD CONSTRAINT service_intents_state_check CHECK (state IN ('pending', 'executed', 'failed', 'cancelled'));
ALTER TABLE service_intents ADD CONSTRAINT service_intents_execution_check CHECK ((state IN ('executed', 'failed')) = (execution_id IS NOT NULL));
-- The fingerprint of the original execute request: resuming claims its Idempotency-Key with it, so a retry
-- of that request replays the resumed outcome.
ALTER TABLE service_intents ADD COLUMN request_fingerprint TEXT;
ALTER TABLE service_intents ADD COLUMN cancellation_reason TEXT;
