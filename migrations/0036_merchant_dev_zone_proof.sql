-- Whether a merchant's domain was verified through dev mode's own DNS zone, where the operator publishes any record
-- (`acg dev dns publish`): no proof of the domain at all. Live mode takes such a verification back at start, so a
-- live gateway on a database dev mode used sells nothing on the strength of the dev zone. Merchants verified before
-- this column: those whose proof record the dev zone holds are counted as verified there.
ALTER TABLE merchants ADD COLUMN verified_in_dev_zone BOOLEAN NOT NULL DEFAULT false;

UPDATE merchants m SET verified_in_dev_zone = true
 WHERE m.verified
   AND EXISTS (SELECT 1 FROM dev_dns_records r WHERE r.name = '_acceptor-verify.' || m.domain AND r.value = m.verification_challenge);
