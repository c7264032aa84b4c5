-- Top-ups and purchase approvals are listed oldest first, and were ordered by (created_at_s, id): two made in one
-- second came in the order of their random ids, so a client that read to the end and then asked for what came
-- after its last id never saw a newer one whose id sorted lower (found from outside: 16 of 48 top-ups made while
-- a client polled, on PostgreSQL). A number taken from a sequence would not do either: numbers are taken in one
-- order and committed in another, so a poller's cursor can pass a number whose row is not yet committed (found from
-- outside on the first version of this change: 1–4 of 240 missed). Each owner's rows of both tables (the owner's
-- approvals list merges them) are numbered from one counter row per owner, incremented by the statement that inserts
-- the row: its lock is held until that transaction ends, so the next number is taken only once the row before it
-- is committed (or rolled back, and its number taken again). A row that is visible has every lower number visible.
CREATE TABLE approval_numbers (
  owner_id  TEXT    PRIMARY KEY REFERENCES owners (id),
  last_seq  BIGINT  NOT NULL
);
ALTER TABLE topups ADD COLUMN seq BIGINT;
ALTER TABLE purchase_approvals ADD COLUMN seq BIGINT;

-- The rows already there keep the order they were listed in.
WITH numbered AS (
  SELECT id, row_number() OVER (PARTITION BY owner_id ORDER BY created_at_s, id) AS n
    FROM (SELECT id, owner_id, created_at_s FROM topups UNION ALL SELECT id, owner_id, created_at_s FROM purchase_approvals) rows
)
UPDATE topups t SET seq = numbered.n FROM numbered WHERE numbered.id = t.id;
WITH numbered AS (
  SELECT id, row_number() OVER (PARTITION BY owner_id ORDER BY created_at_s, id) AS n
    FROM (SELECT id, owner_id, created_at_s FROM topups UNION ALL SELECT id, owner_id, created_at_s FROM purchase_approvals) rows
)
UPDATE purchase_approvals p SET seq = numbered.n FROM numbered WHERE numbered.id = p.id;
INSERT INTO approval_numbers (owner_id, last_seq)
  SELECT owner_id, count(*) FROM (SELECT owner_id FROM topups UNION ALL SELECT owner_id FROM purchase_approvals) rows GROUP BY owner_id;

ALTER TABLE topups ALTER COLUMN seq SET NOT NULL;
ALTER TABLE purchase_approvals ALTER COLUMN seq SET NOT NULL;
CREATE UNIQUE INDEX topups_owner_seq ON topups (owner_id, seq);
CREATE UNIQUE INDEX purchase_approvals_owner_seq ON purchase_approvals (owner_id, seq);

DROP INDEX topups_agent;
CREATE INDEX topups_agent ON topups (agent_id, seq);
DROP INDEX topups_owner;
DROP INDEX purchase_approvals_owner;
