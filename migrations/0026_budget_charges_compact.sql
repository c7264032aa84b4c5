-- A hold's budget charges in a compact form: a JSON array of `[agent_id, budget_id, period_start_s]` triples,
-- `agent_id` null where the budget is the holding agent's own (an ancestor's budget names its agent). The form
-- of 0023 repeated three key names and the agent's id in every charge: 338 bytes a hold for a mandate of three
-- budgets, against 122 now, written to the WAL with every hold and carried by the row through its settlement.
-- The view keeps its name, columns and rows, so its readers (the give-back parts, the invariant checks) are
-- unchanged.
UPDATE holds h
   SET budget_charges = (
         SELECT jsonb_agg(jsonb_build_array(CASE WHEN c->>'agent_id' = h.agent_id THEN NULL ELSE c->>'agent_id' END,
                                            c->>'budget_id', (c->>'period_start_s')::bigint))
           FROM jsonb_array_elements(h.budget_charges) AS c)
 WHERE h.budget_charges IS NOT NULL;

CREATE OR REPLACE VIEW hold_budget_charges AS
  SELECT h.id AS hold_id, COALESCE(c.charge->>0, h.agent_id) AS agent_id, c.charge->>1 AS budget_id,
         (c.charge->>2)::bigint AS period_start_s
    FROM holds h
   CROSS JOIN LATERAL jsonb_array_elements(h.budget_charges) AS c(charge)
   WHERE h.budget_charges IS NOT NULL;
