-- Webhook delivery bookkeeping the worker needs beyond 0005.

-- A worker's claim: set with locked_until_ms when it takes a row, and required when it records the
-- attempt, so a worker whose lease ran out (and whose row another worker took over) records nothing.
ALTER TABLE webhook_deliveries ADD COLUMN claim_token TEXT;
-- How long the last attempt took, for the merchant's delivery list.
ALTER TABLE webhook_deliveries ADD COLUMN last_duration_ms INTEGER;

-- Removing a merchant category asks whether an active offer still uses it.
CREATE INDEX offers_merchant_category ON offers (merchant_id, category) WHERE active;
