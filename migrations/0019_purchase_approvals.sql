-- Purchase approvals: a purchase above the agent's mandate threshold (`approvalAboveUc`) waits for its owner's
-- yes on the gateway's approval page (docs/decisions.md, "Purchase approvals"). Each approval is bound to the
-- request that asked for it: the Idempotency-Key as claimed (principal scope, operation, key) and the request's
-- fingerprint, the agent and the amount; only a retry of that request can use it, once, in the transaction
-- that takes its hold. Statuses:
--   pending_approval → approved → used | expired;   pending_approval → declined | expired;   approved → declined.
-- Times in Unix seconds; amounts in µc.
CREATE TABLE purchase_approvals (
  id                   TEXT    PRIMARY KEY,
  agent_id             TEXT    NOT NULL REFERENCES agents (id),
  owner_id             TEXT    NOT NULL REFERENCES owners (id),
  -- The request: its operation (mintVoucher, executeService), its key's scope and key, its fingerprint.
  operation            TEXT    NOT NULL,
  idem_scope           TEXT    NOT NULL,
  idem_key             TEXT    NOT NULL,
  request_fingerprint  TEXT    NOT NULL,
  -- The retained purchase: a voucher mint {offerId, agentId, maxUc?} (`voucher`, retained here only), or
  -- execute's service intent (`intent`, also kept as its retained intent, which the intent sweeper may delete).
  subject              TEXT    NOT NULL CHECK (subject IN ('voucher', 'intent')),
  intent               JSONB   NOT NULL,
  intent_id            TEXT    REFERENCES service_intents (id) ON DELETE SET NULL,
  amount_uc            BIGINT  NOT NULL CHECK (amount_uc > 0),
  -- What the owner is shown, as it was when asked: the merchant (NULL for a built-in service) and the offer.
  merchant_id          TEXT,
  merchant_name        TEXT,
  merchant_domain      TEXT,
  offer_id             TEXT    NOT NULL,
  offer_name           TEXT    NOT NULL,
  approval_url         TEXT    NOT NULL,
  status               TEXT    NOT NULL CHECK (status IN ('pending_approval', 'approved', 'declined', 'expired', 'used')),
  decided_by           TEXT,                          -- the owner who approved or declined
  hold_id              TEXT    UNIQUE REFERENCES holds (id),
  created_at_s         BIGINT  NOT NULL,
  updated_at_s         BIGINT  NOT NULL,
  -- A pending approval waits for the owner until then; an approved one for its request's retry.
  expires_at_s         BIGINT  NOT NULL,
  decided_at_s         BIGINT,
  used_at_s            BIGINT,
  CHECK ((status = 'used') = (hold_id IS NOT NULL)),
  CHECK ((merchant_id IS NULL) = (merchant_domain IS NULL))
);
-- One approval per request: a retry finds it by its key.
CREATE UNIQUE INDEX purchase_approvals_request ON purchase_approvals (idem_scope, operation, idem_key);
CREATE INDEX purchase_approvals_owner ON purchase_approvals (owner_id, created_at_s, id);
CREATE INDEX purchase_approvals_open_expiry ON purchase_approvals (expires_at_s) WHERE status IN ('pending_approval', 'approved');

-- The owner's list of what waits (GET /v1/owner/approvals) reads top-ups by owner too.
CREATE INDEX topups_owner ON topups (owner_id, created_at_s, id);
