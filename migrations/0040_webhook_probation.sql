-- Which endpoints share the failing half of a worker's slots. Until now only those whose last attempt failed did,
-- so a receiver that hangs took healthy slots on its first burst (no failure recorded yet: each attempt holds its
-- slot for the whole timeout) and again after each success between hangs (found from outside: others' events waited
-- 11 to 51 s). `proven`: the receiver at this URL has answered 2xx at least once. `last_failed_at_ms`: its latest
-- failed attempt. An endpoint is held to the failing share until it is proven and has not failed for ten minutes.
-- Endpoints that exist now and are not failing keep the healthy share they had.
ALTER TABLE webhook_endpoints ADD COLUMN proven BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE webhook_endpoints ADD COLUMN last_failed_at_ms BIGINT NOT NULL DEFAULT 0;
UPDATE webhook_endpoints SET proven = true WHERE consecutive_failures = 0;
