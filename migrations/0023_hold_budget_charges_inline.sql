-- The budgets (and periods) each hold counted in move onto the hold row itself: written once, with the hold, in
-- the statement that inserts it, and never changed. As a table they cost every hold of an agent with a mandate of
-- three budgets three more inserts, three more index entries and six foreign-key checks inside the batch's
-- transaction (issue 25: mint over 200 agents was about 20% slower with three budgets than with none); as a
-- column they cost a few bytes of the row being written anyway.
--
-- `budget_charges` is a JSON array of {"agent_id", "budget_id", "period_start_s"} (null: the hold counted in no
-- budget). The view of the same name as the table keeps every reader (the give-back parts of capture, release
-- and refund, the invariant checks) reading the rows they read before.
ALTER TABLE holds ADD COLUMN budget_charges JSONB;

UPDATE holds h
   SET budget_charges = c.charges
  FROM (SELECT hold_id,
               jsonb_agg(jsonb_build_object('agent_id', agent_id, 'budget_id', budget_id, 'period_start_s', period_start_s)
                         ORDER BY agent_id, budget_id) AS charges
          FROM hold_budget_charges GROUP BY hold_id) c
 WHERE h.id = c.hold_id;

DROP TABLE hold_budget_charges;

CREATE VIEW hold_budget_charges AS
  SELECT h.id AS hold_id, c.agent_id, c.budget_id, c.period_start_s
    FROM holds h
   CROSS JOIN LATERAL jsonb_to_recordset(h.budget_charges) AS c(agent_id TEXT, budget_id TEXT, period_start_s BIGINT)
   WHERE h.budget_charges IS NOT NULL;
