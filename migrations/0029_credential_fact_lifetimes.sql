-- The lifetime for which each gateway instance on this database keeps credential facts (ACG_CREDENTIAL_FACTS_MS),
-- announced before it serves and every 30 s after, withdrawn when it stops cleanly. A revocation waits out the
-- longest lifetime announced in the last 90 s (by the database's clock), so instances need not be configured
-- alike (src/platform/credential-facts.ts, docs/decisions.md "A revocation waits out the longest lifetime any
-- instance announced"). PGlite, which one process opens, leaves it empty.
CREATE TABLE credential_fact_lifetimes (
  instance_id TEXT PRIMARY KEY,
  lifetime_ms INTEGER NOT NULL CHECK (lifetime_ms BETWEEN 0 AND 10000),
  seen_at_s BIGINT NOT NULL
);
