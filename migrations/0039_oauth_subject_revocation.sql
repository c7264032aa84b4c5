-- Token revocation (POST /oauth/revoke, RFC 7009) takes back a client's hold on one owner or agent: its remembered
-- consents, its codes not yet exchanged and its live tokens, found by client and subject.
CREATE INDEX oauth_codes_client_subject ON oauth_codes (client_id, subject);
CREATE INDEX oauth_grants_client_subject ON oauth_grants (client_id, subject);
