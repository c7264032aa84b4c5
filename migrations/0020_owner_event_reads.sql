-- The owner's events and webhook deliveries are listed newest first by sequence (GET /v1/owner/events,
-- GET /v1/owner/webhook/deliveries), as a merchant's are: the same index shape, for the owner's rows only.
CREATE INDEX events_owner ON events (owner_id, seq) WHERE owner_id IS NOT NULL;
CREATE INDEX webhook_deliveries_owner ON webhook_deliveries (owner_id, seq) WHERE owner_id IS NOT NULL;
