-- A merchant's Idempotency-Keys are the merchant's, whichever of its API keys sends them: the scope of their
-- records becomes `merchant:<merchant id>` (it was `merchant:<api key id>`), so a refund or a capture retried
-- through another key of the same merchant replays instead of running a second time (Stripe scopes keys per
-- account). The records already stored move with it, so a retry sent across this deploy still finds its
-- record: where two keys of one merchant used the same key for the same operation, the newest record stays.
DELETE FROM idempotency_keys i
 USING merchant_api_keys ki, idempotency_keys j, merchant_api_keys kj
 WHERE i.scope = 'merchant:' || ki.id
   AND j.scope = 'merchant:' || kj.id
   AND ki.merchant_id = kj.merchant_id
   AND ki.id <> kj.id
   AND i.route = j.route
   AND i.key = j.key
   AND (i.created_at_ms < j.created_at_ms OR (i.created_at_ms = j.created_at_ms AND i.scope < j.scope));

UPDATE idempotency_keys i
   SET scope = 'merchant:' || k.merchant_id
  FROM merchant_api_keys k
 WHERE i.scope = 'merchant:' || k.id;
