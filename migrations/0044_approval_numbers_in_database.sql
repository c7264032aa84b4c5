-- An owner's approval numbers (migration 0043) are taken by the database, in a trigger on every insert of a top-up or
-- a purchase approval, instead of by the gateway's insert statements. The statements stay as the release before
-- 0043 wrote them, so an instance of that release still running when this migration commits (it stops within
-- SCHEMA_WATCH_INTERVAL_MS, five seconds) inserts rows the database numbers like any other, where it answered 500 on
-- 0043's NOT NULL (found from outside: 9 and 20 approvals refused in the seconds between the migration and the older
-- instance's stop). The counter row is locked by the insert exactly as before, until its transaction ends. A BEFORE
-- trigger runs before ON CONFLICT's check, so a conflicting insert takes a number it does not use, as the CTE did:
-- numbers may skip, never repeat, and a visible row still has every lower number visible.
CREATE FUNCTION next_approval_number() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO approval_numbers AS n (owner_id, last_seq) VALUES (NEW.owner_id, 1)
  ON CONFLICT (owner_id) DO UPDATE SET last_seq = n.last_seq + 1
  RETURNING n.last_seq INTO NEW.seq;
  RETURN NEW;
END
$$;
CREATE TRIGGER topups_number BEFORE INSERT ON topups FOR EACH ROW EXECUTE FUNCTION next_approval_number();
CREATE TRIGGER purchase_approvals_number BEFORE INSERT ON purchase_approvals FOR EACH ROW EXECUTE FUNCTION next_approval_number();
