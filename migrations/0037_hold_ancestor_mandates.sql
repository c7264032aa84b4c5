-- The mandate versions of a delegate's ancestors in force when its hold was taken: each bound the purchase (a hold
-- passes every ancestor's mandate), so a dispute's evidence carries them beside the delegate's own. A JSON array of
-- `[agent_id, version, hash]`, root first; NULL for a root's hold (it has no ancestors) and for a delegate's hold
-- taken before this column (not recorded then: its evidence says so).
ALTER TABLE holds ADD COLUMN ancestor_mandates JSONB;
