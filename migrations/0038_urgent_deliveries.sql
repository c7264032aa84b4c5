-- A delivery that must not wait behind others of its endpoint: `voucher.revoked`, which a merchant verifying vouchers
-- offline needs before anything else (a freeze that releases many holds writes a `redemption.released` per hold first,
-- and the revocation reached the merchant after all of them: seconds to tens of seconds). Claimed first among an
-- endpoint's due deliveries; webhooks promise no order (Stripe, Svix), so nothing else changes.
ALTER TABLE webhook_deliveries ADD COLUMN urgent BOOLEAN NOT NULL DEFAULT false;
