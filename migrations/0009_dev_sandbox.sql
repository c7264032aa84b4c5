-- The dev sandbox: TXT records of the dev DNS zone, which dev mode serves over DNS-over-HTTPS
-- (RFC 8484) at /dev/dns-query and uses as its default resolver, so a merchant domain can be verified
-- on one machine. Live mode never reads or serves this table.
CREATE TABLE dev_dns_records (
  name          TEXT    NOT NULL,   -- canonical: lower case, no trailing dot
  value         TEXT    NOT NULL,   -- the TXT value, exactly as published
  created_at_s  BIGINT  NOT NULL,
  PRIMARY KEY (name, value)
);
