-- A statement that writes budget running totals finds each row by the address it read (ctid), so no plan of it
-- scans the table. A settlement's statement takes its payer's balance row lock inside itself, after it began: a
-- writer that held that lock and committed meanwhile has moved the row, and the update by the old address finds
-- nothing. That is not a broken ledger but a race: `budget_rows_unchanged(ok, detail)` raises SQLSTATE 40001
-- (serialization_failure) when `ok` is false, so the whole transaction is retried with a fresh snapshot, as a
-- deadlock is.
CREATE FUNCTION budget_rows_unchanged(ok boolean, detail text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF ok IS NOT TRUE THEN
    RAISE EXCEPTION USING MESSAGE = 'budget rows changed concurrently: ' || detail, ERRCODE = '40001';
  END IF;
  RETURN true;
END
$$;
