-- Each merchant's revocations feed numbers its own rows, 1, 2, 3, … (`feed_position`), and its cursors carry that
-- number. They carried the row's `seq`, one counter over every merchant, so the gaps between a merchant's own cursors
-- told it how many holds of other merchants were revoked meanwhile, and when (found from outside, 2026-12-06). A
-- merchant's positions are taken from its feed row (`revocation_feeds.revoked_holds`), which every append locks
-- until it commits, so they follow commit order as `seq` did. `seq` stays: it reads a cursor given before this
-- migration (the merchant's rows up to that seq).
ALTER TABLE hold_revocations ADD COLUMN feed_position BIGINT;
UPDATE hold_revocations r SET feed_position = numbered.feed_position
  FROM (SELECT seq, row_number() OVER (PARTITION BY merchant_id ORDER BY seq) AS feed_position FROM hold_revocations) numbered
 WHERE r.seq = numbered.seq;
ALTER TABLE hold_revocations ALTER COLUMN feed_position SET NOT NULL;
ALTER TABLE hold_revocations ADD CONSTRAINT hold_revocations_feed_position CHECK (feed_position >= 1);
CREATE UNIQUE INDEX hold_revocations_merchant_position ON hold_revocations (merchant_id, feed_position);
-- Each feed's count is its last position: appends number on from it.
UPDATE revocation_feeds f SET revoked_holds = counted.revoked
  FROM (SELECT merchant_id, count(*) AS revoked FROM hold_revocations GROUP BY merchant_id) counted
 WHERE f.merchant_id = counted.merchant_id AND f.revoked_holds <> counted.revoked;
