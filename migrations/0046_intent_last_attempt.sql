-- A pending intent shows the gateway's last run of it on its own (after its top-up settled) that did not finish it:
-- when, the problem it was refused with, and whether the gateway tries again (the back-off) or only the agent's
-- retry with its key can run it now (an owner's rule refused it). Before, such an intent read `pending` with no
-- reason, whether it was waiting for the back-off or would never be resumed (found from outside, 2026-12-06).
-- The three are set together and cleared together (an agent's retry that retains the intent anew clears them).
ALTER TABLE service_intents ADD COLUMN last_attempt_at_s BIGINT;
ALTER TABLE service_intents ADD COLUMN last_attempt_error TEXT;
ALTER TABLE service_intents ADD COLUMN last_attempt_retried BOOLEAN;
ALTER TABLE service_intents ADD CONSTRAINT service_intents_last_attempt CHECK (
  (last_attempt_at_s IS NULL) = (last_attempt_error IS NULL) AND (last_attempt_at_s IS NULL) = (last_attempt_retried IS NULL)
);
