-- A remembered consent is kept per owner too. Its key named the identity that consented (issuer + subject), which
-- was one agent while an identity could be registered once; since 0041 two owners' agents may share a subject, and
-- the second's consent in a browser replaced the first's (its owner lost it from their list, and the browser's next
-- request was answered as the second's agent without the page; found from outside). With the owner in the key each
-- keeps its consent, and a browser where both consented gets the page, as for any two identities.
DROP INDEX oauth_grants_match;
CREATE UNIQUE INDEX oauth_grants_match
  ON oauth_grants (client_id, browser_hash, resource, requested_scope, identity_issuer, identity_subject, owner_id);
