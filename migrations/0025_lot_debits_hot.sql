-- Lot debits stay HOT. The burn-order index was partial on `remaining_uc > 0`, and a column named in an index's
-- predicate counts as indexed: every debit (a hold, a settlement's return) then wrote a new entry in each of the
-- table's three indexes instead of a heap-only tuple. Without the predicate, measured with pgbench on a copy of
-- the table: 3,665 of 3,677 debits HOT, against 0 of 3,677 with it. The burn-order read still asks for
-- `remaining_uc > 0`; it now also passes over an agent's spent lots, one index entry per grant or top-up it had.
DROP INDEX credit_lots_burn_order;
CREATE INDEX credit_lots_burn_order ON credit_lots (agent_id, priority, expires_at_s, seq);
