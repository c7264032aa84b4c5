-- A retirement is a kill switch too: the holds it releases have their vouchers revoked as a freeze's are, so the
-- merchant holding one is told (`voucher.revoked`, the revocations feed) and its capture answers 409
-- voucher_revoked rather than hold_resolved. A retirement keeps no report row, so a feed row names its freeze
-- only when a freeze caused it: `freeze_id` is set exactly for `agent_frozen`.
ALTER TABLE hold_revocations ALTER COLUMN freeze_id DROP NOT NULL;
ALTER TABLE hold_revocations ADD CONSTRAINT hold_revocations_cause CHECK ((freeze_id IS NOT NULL) = (reason = 'agent_frozen'));
