-- What proves which ACG_SECRET_BOX_KEY the instances run with. Each serving instance that has a box key keeps one row
-- here whose `sealed` value opens with its key (a fixed text sealed under the context `secret_box_check:<check_id>`),
-- and marks it seen every minute; instances that share a box key share its row. `acg keys rotate` seals a new signing
-- key only with a box key that opens the rows instances saw lately. Before, it checked the box key against the sealed
-- keys already in the database, and the usual live database has none (the instances sign with ACG_SIGNING_KEY): a
-- mistyped box key was accepted, and no instance could open the key it sealed (found from outside, 2026-12-07).
CREATE TABLE secret_box_checks (
  check_id         TEXT   PRIMARY KEY,
  sealed           TEXT   NOT NULL,
  first_seen_at_s  BIGINT NOT NULL,
  last_seen_at_s   BIGINT NOT NULL  -- the database's clock: instances' clocks may disagree
);
