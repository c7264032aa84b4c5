-- When a purchase approval closed (declined, expired or used), NULL while it is open (pending or approved), so
-- a statement that finds approvals by key can say "still open" without naming the open approvals' partial index
-- predicate (`purchase_approvals_open_expiry`, `WHERE status IN ('pending_approval', 'approved')`): a plan may
-- read a partial index whole when a statement's guard is that index's own predicate (docs/decisions.md "A
-- batch's statements probe, never scan"). The checks tie the column to the state, and the open states to
-- whether the owner has decided: an open approval with a decision is an approved one.
ALTER TABLE purchase_approvals ADD COLUMN closed_at_s BIGINT;
UPDATE purchase_approvals SET closed_at_s = updated_at_s WHERE status NOT IN ('pending_approval', 'approved');
ALTER TABLE purchase_approvals ADD CONSTRAINT purchase_approvals_closed CHECK ((status IN ('pending_approval', 'approved')) = (closed_at_s IS NULL));
ALTER TABLE purchase_approvals ADD CONSTRAINT purchase_approvals_pending_undecided CHECK (status <> 'pending_approval' OR decided_at_s IS NULL);
ALTER TABLE purchase_approvals ADD CONSTRAINT purchase_approvals_approved_decided CHECK (status <> 'approved' OR decided_at_s IS NOT NULL);
