-- Owner webhooks: an owner's endpoint receives the events of its agents' top-ups and retained intents
-- through the same outbox, delivery worker, circuit and attempt records as a merchant's endpoint.
-- An endpoint, an event, a delivery and an attempt belong to exactly one account: a merchant or an owner.
-- `account_id` is whichever of the two is set (ids carry their kind's prefix, so they never collide); the
-- delivery worker works by it, the merchant and owner APIs by their own column.

ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_pkey;
ALTER TABLE webhook_endpoints ALTER COLUMN merchant_id DROP NOT NULL;
ALTER TABLE webhook_endpoints ADD COLUMN owner_id TEXT REFERENCES owners (id);
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_one_account CHECK (num_nonnulls(merchant_id, owner_id) = 1);
ALTER TABLE webhook_endpoints ADD COLUMN account_id TEXT GENERATED ALWAYS AS (COALESCE(merchant_id, owner_id)) STORED;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (account_id);
CREATE UNIQUE INDEX webhook_endpoints_merchant ON webhook_endpoints (merchant_id);
CREATE UNIQUE INDEX webhook_endpoints_owner ON webhook_endpoints (owner_id);

ALTER TABLE events ALTER COLUMN merchant_id DROP NOT NULL;
ALTER TABLE events ADD COLUMN owner_id TEXT REFERENCES owners (id);
ALTER TABLE events ADD CONSTRAINT events_one_account CHECK (num_nonnulls(merchant_id, owner_id) = 1);

ALTER TABLE webhook_deliveries ALTER COLUMN merchant_id DROP NOT NULL;
ALTER TABLE webhook_deliveries ADD COLUMN owner_id TEXT REFERENCES owners (id);
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_one_account CHECK (num_nonnulls(merchant_id, owner_id) = 1);
ALTER TABLE webhook_deliveries ADD COLUMN account_id TEXT GENERATED ALWAYS AS (COALESCE(merchant_id, owner_id)) STORED;

ALTER TABLE webhook_attempts ALTER COLUMN merchant_id DROP NOT NULL;
ALTER TABLE webhook_attempts ADD COLUMN owner_id TEXT REFERENCES owners (id);
ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_one_account CHECK (num_nonnulls(merchant_id, owner_id) = 1);
