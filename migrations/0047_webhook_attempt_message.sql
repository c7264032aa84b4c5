-- A failed webhook attempt says what happened in words, with the system's code (`ECONNREFUSED`,
-- `UND_ERR_HEADERS_OVERFLOW`, `CERT_HAS_EXPIRED` …), beside its stable `error` code. Before, the words stayed in the
-- gateway's log and span: a receiver that answered 200 with 80 KB of headers read `request_failed` and nothing more
-- (found from outside, 2026-12-07). NULL for attempts that succeeded, are in progress, or were made before.
ALTER TABLE webhook_attempts ADD COLUMN message TEXT;
