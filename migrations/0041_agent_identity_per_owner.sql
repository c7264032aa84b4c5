-- An agent identity (issuer + subject) is registered once per owner, not once in the whole gateway. Unique over all
-- owners, the first registration won: any owner could register another owner's agent's subject before it, and that
-- owner's real agent was then refused everywhere, with nothing to undo it (found from outside). An identity token
-- names its owner (its owner email claim), and now picks that owner's registration; another owner's registration of
-- the same subject is never reached by it.
ALTER TABLE agents DROP CONSTRAINT agents_identity_issuer_identity_subject_key;
ALTER TABLE agents ADD CONSTRAINT agents_owner_identity UNIQUE (owner_id, identity_issuer, identity_subject);
CREATE INDEX agents_identity ON agents (identity_issuer, identity_subject);
