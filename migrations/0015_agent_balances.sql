-- Per-agent running totals, owned by the ledger (issue 16), as TigerBeetle keeps an account's pending and
-- posted balances: what the agent's open holds reserve (held), what its holds captured (captured), and what
-- was ever credited to it (granted, of which refunded came back as refunds). Each is changed in the same
-- statement as the change it counts (a new lot, a hold, a settlement), so a balance read no longer sums the
-- agent's whole history. Available and lapsed depend on the clock (a lot lapses at its expiry); they are
-- read from the agent's lots that still hold credit. Per agent, at every commit:
--   granted_uc = Σ lot remaining + held_uc + captured_uc
-- A row appears with the agent's first lot (or hold); an agent without one reads as all zeros.
CREATE TABLE agent_balances (
  agent_id     TEXT   PRIMARY KEY REFERENCES agents (id),
  held_uc      BIGINT NOT NULL DEFAULT 0 CHECK (held_uc >= 0),
  captured_uc  BIGINT NOT NULL DEFAULT 0 CHECK (captured_uc >= 0),
  granted_uc   BIGINT NOT NULL DEFAULT 0 CHECK (granted_uc >= 0),
  refunded_uc  BIGINT NOT NULL DEFAULT 0 CHECK (refunded_uc >= 0 AND refunded_uc <= granted_uc)
);

-- Backfill from the rows that exist: an open hold reserves its amount, a captured one counts what it captured.
INSERT INTO agent_balances (agent_id, held_uc, captured_uc, granted_uc, refunded_uc)
SELECT a.id,
       COALESCE(h.held_uc, 0), COALESCE(h.captured_uc, 0),
       COALESCE(l.granted_uc, 0), COALESCE(l.refunded_uc, 0)
  FROM agents a
  LEFT JOIN (
    SELECT agent_id,
           SUM(amount_uc) FILTER (WHERE state = 'held') AS held_uc,
           SUM(captured_uc) FILTER (WHERE state = 'captured') AS captured_uc
      FROM holds GROUP BY agent_id
  ) h ON h.agent_id = a.id
  LEFT JOIN (
    SELECT agent_id, SUM(granted_uc) AS granted_uc, SUM(granted_uc) FILTER (WHERE source = 'refund') AS refunded_uc
      FROM credit_lots GROUP BY agent_id
  ) l ON l.agent_id = a.id
 WHERE h.agent_id IS NOT NULL OR l.agent_id IS NOT NULL;
