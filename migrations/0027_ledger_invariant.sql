-- A statement that checks itself: `ledger_invariant(ok, detail)` is true when `ok` is, and otherwise raises
-- 'ledger invariant: <detail>' (SQLSTATE XX000, internal_error), which aborts the transaction. The hold
-- statement compares what it wrote with what it was given (holds, allocations, debits, journal lines, balance
-- rows, budget charges, events) in its own SELECT, so the gateway sends it without waiting for its answer, and
-- the transaction's answers and COMMIT follow it in the same round trip: a wrong count can no longer be found
-- after the commit, since it rolls the transaction back itself.
CREATE FUNCTION ledger_invariant(ok boolean, detail text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF ok IS NOT TRUE THEN
    RAISE EXCEPTION USING MESSAGE = 'ledger invariant: ' || detail, ERRCODE = 'XX000';
  END IF;
  RETURN true;
END
$$;
