-- One limit on amounts, for running totals too: an amount on the wire is at most 18 digits (10^18 - 1 µc), and
-- so is every total the gateway shows. An agent's lifetime credit (`granted_uc`: grants, top-ups and refunds;
-- held, captured and refunded are parts of it) and an account's balance (a merchant's earnings) are kept within
-- it. An operation that would carry one past it fails on these checks, which the transaction layer answers as
-- 409 conflict (reason amount_limit), nothing written; before, a total grew past 18 digits and, at BIGINT's end,
-- a refund answered 500.
ALTER TABLE agent_balances ADD CONSTRAINT agent_balances_granted_limit CHECK (granted_uc <= 999999999999999999);
ALTER TABLE ledger_accounts ADD CONSTRAINT ledger_accounts_balance_limit CHECK (balance_uc <= 999999999999999999);
