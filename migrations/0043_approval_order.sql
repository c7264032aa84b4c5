-- Top-ups and purchase approvals are listed oldest first, and were ordered by (created_at_s, id): two made in one
-- second came in the order of their random ids, so a client that read to the end and then asked for what came
-- after its last id never saw a newer one whose id sorted lower (found from outside: 16 of 48 top-ups made while
-- a client polled, on PostgreSQL). One sequence now numbers the rows of both tables as they are written, so the
-- owner's approvals list, which merges the two, has one order, as every other list's `seq` gives it.
CREATE SEQUENCE approval_seq;
ALTER TABLE topups ADD COLUMN seq BIGINT;
ALTER TABLE purchase_approvals ADD COLUMN seq BIGINT;

-- The rows already there keep the order they were listed in.
WITH numbered AS (
  SELECT id, row_number() OVER (ORDER BY created_at_s, id) AS n
    FROM (SELECT id, created_at_s FROM topups UNION ALL SELECT id, created_at_s FROM purchase_approvals) rows
)
UPDATE topups t SET seq = numbered.n FROM numbered WHERE numbered.id = t.id;
WITH numbered AS (
  SELECT id, row_number() OVER (ORDER BY created_at_s, id) AS n
    FROM (SELECT id, created_at_s FROM topups UNION ALL SELECT id, created_at_s FROM purchase_approvals) rows
)
UPDATE purchase_approvals p SET seq = numbered.n FROM numbered WHERE numbered.id = p.id;
SELECT setval('approval_seq', (SELECT count(*) FROM topups) + (SELECT count(*) FROM purchase_approvals) + 1, false);

ALTER TABLE topups ALTER COLUMN seq SET DEFAULT nextval('approval_seq'), ALTER COLUMN seq SET NOT NULL;
ALTER TABLE purchase_approvals ALTER COLUMN seq SET DEFAULT nextval('approval_seq'), ALTER COLUMN seq SET NOT NULL;
ALTER SEQUENCE approval_seq OWNED BY topups.seq;
CREATE UNIQUE INDEX topups_seq ON topups (seq);
CREATE UNIQUE INDEX purchase_approvals_seq ON purchase_approvals (seq);

DROP INDEX topups_agent;
CREATE INDEX topups_agent ON topups (agent_id, seq);
DROP INDEX topups_owner;
CREATE INDEX topups_owner ON topups (owner_id, seq);
DROP INDEX purchase_approvals_owner;
CREATE INDEX purchase_approvals_owner ON purchase_approvals (owner_id, seq);
