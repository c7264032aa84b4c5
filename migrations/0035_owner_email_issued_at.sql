-- The issue time (`iat`) of the newest human session that wrote the owner's email: a session issued before it, still
-- unexpired, carries the email as it was, and must not write it back (two live sessions made the binding of the
-- owner's agents flap between the old address and the new). NULL: not known (an owner written before this column,
-- or by a provider whose tokens carry no `iat`), and then the session that writes last wins, as before.
ALTER TABLE owners ADD COLUMN email_issued_at_s BIGINT;
