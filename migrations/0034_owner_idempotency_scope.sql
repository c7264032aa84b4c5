-- An owner's Idempotency-Keys are the owner's, whichever credential sends them: the owner's session (a human
-- identity token, scope `human:<owner id>` until now) and an OAuth access token the owner granted (`owner:<owner
-- id>`) now claim keys in one scope, `owner:<owner id>`, so a request retried through the other credential
-- replays instead of running a second time (migration 0033 did the same for a merchant's API keys). Everything
-- stored under a session's scope moves with it, so a retry sent across this deploy still finds what its first
-- try left: the idempotency records (where both credentials used one key for one operation, the newest record
-- stays), the claims of executions in flight (recovery gives their keys back by them), and the retained execute
-- intents and purchase approvals found by their request's key (where the owner's scope already has one for the
-- same key, the session's stays where it is: it was never the one a retry found there).
DELETE FROM idempotency_keys h
 USING idempotency_keys o
 WHERE h.scope LIKE 'human:%'
   AND o.scope = 'owner:' || substr(h.scope, 7)
   AND o.route = h.route
   AND o.key = h.key
   AND h.created_at_ms < o.created_at_ms;

DELETE FROM idempotency_keys o
 USING idempotency_keys h
 WHERE h.scope LIKE 'human:%'
   AND o.scope = 'owner:' || substr(h.scope, 7)
   AND o.route = h.route
   AND o.key = h.key;

UPDATE idempotency_keys SET scope = 'owner:' || substr(scope, 7) WHERE scope LIKE 'human:%';

UPDATE service_executions SET idem_scope = 'owner:' || substr(idem_scope, 7) WHERE idem_scope LIKE 'human:%';

UPDATE service_intents i
   SET requested_by = 'owner:' || substr(i.requested_by, 7)
 WHERE i.requested_by LIKE 'human:%'
   AND NOT EXISTS (SELECT 1 FROM service_intents o
                    WHERE o.requested_by = 'owner:' || substr(i.requested_by, 7) AND o.idempotency_key = i.idempotency_key);

UPDATE purchase_approvals p
   SET idem_scope = 'owner:' || substr(p.idem_scope, 7)
 WHERE p.idem_scope LIKE 'human:%'
   AND NOT EXISTS (SELECT 1 FROM purchase_approvals o
                    WHERE o.idem_scope = 'owner:' || substr(p.idem_scope, 7) AND o.operation = p.operation AND o.idem_key = p.idem_key);
