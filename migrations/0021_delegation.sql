-- Delegation: an agent may register delegates (children) under a mandate within its own, forming a tree.
--
-- `ancestor_ids` lists the agent's ancestors, root first and parent last. It is written once, when the
-- delegate is created, and never changed (a delegate is never re-parented), so the hold pass may read it
-- before it takes any lock, and `depth = cardinality(ancestor_ids)`. A subtree is
-- `WHERE id = $1 OR $1 = ANY(ancestor_ids)` (the GIN index). A retired delegate keeps its row (its holds,
-- mandate versions and evidence name it) and is refused like a frozen one.
ALTER TABLE agents ADD COLUMN parent_id TEXT REFERENCES agents (id);
ALTER TABLE agents ADD COLUMN ancestor_ids TEXT[] NOT NULL DEFAULT '{}';
ALTER TABLE agents ADD COLUMN retired_at_s BIGINT;
ALTER TABLE agents ADD CONSTRAINT agents_parent_is_last_ancestor
  CHECK ((parent_id IS NULL AND cardinality(ancestor_ids) = 0) OR (parent_id IS NOT NULL AND ancestor_ids[cardinality(ancestor_ids)] = parent_id));
CREATE INDEX agents_ancestors ON agents USING GIN (ancestor_ids);

-- The agent whose lots fund a hold: the root of the hold's agent's tree (the agent itself for a root). A
-- delegate owns no lots; its holds allocate from its root's, and settlement, expiry, refunds and the running
-- totals (agent_balances) follow `payer_id`.
ALTER TABLE holds ADD COLUMN payer_id TEXT REFERENCES agents (id);
UPDATE holds SET payer_id = agent_id;
ALTER TABLE holds ALTER COLUMN payer_id SET NOT NULL;
-- A retirement releases the open holds of a tree's agents; the hold pass reclaims a payer's overdue ones.
CREATE INDEX holds_payer_open ON holds (payer_id, expires_at_s) WHERE state = 'held';
