// SQL for the authorization server: clients, the authorization requests consented to (each once), codes,
// remembered consents (grants), revoked tokens. Nothing but queries.
import type { Queryable, Tx } from '../platform/db/database.ts';

/** What /oauth/authorize checked, for the consent that answers it (signed into its request id: authorization-request.ts). */
export interface AuthorizationRequest {
  /** The request's own id (`areq_…`): its single use is recorded under it. */
  jti: string;
  clientId: string;
  redirectUri: string;
  state: string | undefined;
  codeChallenge: string;
  resource: string;
  /** As requested; null: the chosen provider decides. */
  scope: string | null;
  browserHash: string;
  expiresAtS: number;
}

export interface ClientRow {
  id: string;
  client_name: string | null;
  redirect_uris: string[];
  scope: string | null;
  created_at_s: bigint;
  last_used_at_s: bigint | null;
}

export interface CodeRow {
  code_hash: string;
  client_id: string;
  redirect_uri: string;
  resource: string;
  code_challenge: string;
  scope: 'svc:agent' | 'svc:owner';
  actor_type: 'agent' | 'owner';
  subject: string;
  email: string | null;
  created_at_s: bigint;
  expires_at_s: bigint;
  consumed_at_s: bigint | null;
  access_token_jti: string | null;
  access_token_expires_at_s: bigint | null;
  purge_after_s: bigint;
  owner_id: string | null;
}

export interface GrantRow {
  id: string;
  client_id: string;
  browser_hash: string;
  identity_issuer: string;
  identity_subject: string;
  /** The request's scope exactly; '' when it named none. */
  requested_scope: string;
  resource: string;
  scope: 'svc:agent' | 'svc:owner';
  actor_type: 'agent' | 'owner';
  subject: string;
  email: string | null;
  owner_id: string;
  created_at_s: bigint;
  expires_at_s: bigint;
}

/** Serialises registrations so the client cap cannot be overshot by concurrent requests. */
const REGISTRATION_LOCK_KEY = 0x6f617572; // "oaur"

export async function lockRegistrations(tx: Tx): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock($1)', [REGISTRATION_LOCK_KEY]);
}

/** The registered clients, which the cap counts: every row but `declared`, the gateway's own client, which nobody registered. */
export async function countClients(db: Queryable, declared: string): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>('SELECT count(*)::bigint AS n FROM oauth_clients WHERE id <> $1', [declared]);
  return Number(rows[0]!.n);
}

/** Deletes clients that never obtained a token and were registered before `createdBeforeS`, except `keep` (a built-in client). */
export async function purgeUnusedClients(db: Queryable, createdBeforeS: number, keep: string): Promise<number> {
  const { rowCount } = await db.query('DELETE FROM oauth_clients WHERE last_used_at_s IS NULL AND created_at_s < $1 AND id <> $2', [createdBeforeS, keep]);
  return rowCount;
}

/** A client the gateway declares itself: inserted once, its metadata refreshed at every start. */
export async function upsertBuiltInClient(
  db: Queryable,
  client: { id: string; clientName: string; redirectUris: string[]; scope: string; nowS: number },
): Promise<void> {
  await db.query(
    `INSERT INTO oauth_clients (id, client_name, redirect_uris, scope, created_at_s) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (id) DO UPDATE SET client_name = EXCLUDED.client_name, redirect_uris = EXCLUDED.redirect_uris, scope = EXCLUDED.scope`,
    [client.id, client.clientName, JSON.stringify(client.redirectUris), client.scope, client.nowS],
  );
}

export async function insertClient(
  db: Queryable,
  client: { id: string; clientName: string | null; redirectUris: string[]; scope: string | null; nowS: number },
): Promise<ClientRow> {
  const { rows } = await db.query<ClientRow>(
    `INSERT INTO oauth_clients (id, client_name, redirect_uris, scope, created_at_s) VALUES ($1, $2, $3, $4, $5) RETURNING *`,
    [client.id, client.clientName, JSON.stringify(client.redirectUris), client.scope, client.nowS],
  );
  return rows[0]!;
}

export async function findClient(db: Queryable, clientId: string): Promise<ClientRow | undefined> {
  const { rows } = await db.query<ClientRow>('SELECT * FROM oauth_clients WHERE id = $1', [clientId]);
  return rows[0];
}

export async function markClientUsed(db: Queryable, clientId: string, nowS: number): Promise<void> {
  await db.query('UPDATE oauth_clients SET last_used_at_s = $2 WHERE id = $1', [clientId, nowS]);
}

export async function purgeExpiredRequests(db: Queryable, nowS: number): Promise<void> {
  await db.query('DELETE FROM oauth_authorization_requests WHERE expires_at_s <= $1', [nowS]);
}

/** Whether a consent answered this authorization request already (the rows are the consents, see authorization-request.ts). */
export async function authorizationRequestUsed(db: Queryable, requestId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM oauth_authorization_requests WHERE id = $1', [requestId]);
  return rows.length > 0;
}

/** Records the consent to this request; false when one was recorded first (a request is single use). */
export async function recordAuthorizationRequestUsed(db: Queryable, request: AuthorizationRequest, nowS: number): Promise<boolean> {
  const { rowCount } = await db.query(
    `INSERT INTO oauth_authorization_requests
       (id, client_id, redirect_uri, state, code_challenge, resource, scope, browser_hash, created_at_s, expires_at_s, consumed_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $9)
     ON CONFLICT (id) DO NOTHING`,
    [request.jti, request.clientId, request.redirectUri, request.state ?? null, request.codeChallenge, request.resource, request.scope, request.browserHash, nowS, request.expiresAtS],
  );
  return rowCount === 1;
}

export async function purgeCodes(db: Queryable, nowS: number): Promise<void> {
  await db.query('DELETE FROM oauth_codes WHERE purge_after_s <= $1', [nowS]);
}

export interface NewCode {
  codeHash: string;
  clientId: string;
  redirectUri: string;
  resource: string;
  codeChallenge: string;
  scope: 'svc:agent' | 'svc:owner';
  actorType: 'agent' | 'owner';
  subject: string;
  email: string | null;
  /** The owner who may revoke what the code issues (the agent's owner for an agent code). */
  ownerId: string;
  nowS: number;
  expiresAtS: number;
  purgeAfterS: number;
}

export async function insertCode(db: Queryable, code: NewCode): Promise<void> {
  await db.query(
    `INSERT INTO oauth_codes
       (code_hash, client_id, redirect_uri, resource, code_challenge, scope, actor_type, subject, email, owner_id, created_at_s, expires_at_s, purge_after_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
    [
      code.codeHash, code.clientId, code.redirectUri, code.resource, code.codeChallenge, code.scope, code.actorType,
      code.subject, code.email, code.ownerId, code.nowS, code.expiresAtS, code.purgeAfterS,
    ],
  );
}

export async function findCode(db: Queryable, codeHash: string): Promise<CodeRow | undefined> {
  const { rows } = await db.query<CodeRow>('SELECT * FROM oauth_codes WHERE code_hash = $1', [codeHash]);
  return rows[0];
}

/** Consumes the code atomically and records the token it issues; false when it was already consumed. */
export async function consumeCode(db: Queryable, codeHash: string, token: { jti: string; expiresAtS: number; nowS: number }): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE oauth_codes SET consumed_at_s = $2, access_token_jti = $3, access_token_expires_at_s = $4
     WHERE code_hash = $1 AND consumed_at_s IS NULL`,
    [codeHash, token.nowS, token.jti, token.expiresAtS],
  );
  return rowCount === 1;
}

export async function revokeToken(db: Queryable, jti: string, expiresAtS: number, nowS: number): Promise<void> {
  await db.query('DELETE FROM oauth_revoked_tokens WHERE expires_at_s <= $1', [nowS]);
  await db.query('INSERT INTO oauth_revoked_tokens (jti, expires_at_s) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING', [jti, expiresAtS]);
}

/** Which of these token ids are revoked (one statement). */
export async function revokedTokenIds(db: Queryable, jtis: readonly string[]): Promise<string[]> {
  const { rows } = await db.query<{ jti: string }>('SELECT jti FROM oauth_revoked_tokens WHERE jti = ANY($1::text[])', [[...jtis]]);
  return rows.map((row) => row.jti);
}

export type NewGrant = Omit<GrantRow, 'created_at_s' | 'expires_at_s'> & { nowS: number; expiresAtS: number };

/** Remembers a consent; a consent for the same client, browser, resource, scope, identity and owner replaces it. */
export async function upsertGrant(db: Queryable, grant: NewGrant): Promise<void> {
  await db.query(
    `INSERT INTO oauth_grants
       (id, client_id, browser_hash, identity_issuer, identity_subject, requested_scope, resource, scope, actor_type, subject, email, owner_id, created_at_s, expires_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
     ON CONFLICT (client_id, browser_hash, resource, requested_scope, identity_issuer, identity_subject, owner_id) DO UPDATE
       SET scope = EXCLUDED.scope, actor_type = EXCLUDED.actor_type, subject = EXCLUDED.subject, email = EXCLUDED.email,
           created_at_s = EXCLUDED.created_at_s, expires_at_s = EXCLUDED.expires_at_s`,
    [
      grant.id, grant.client_id, grant.browser_hash, grant.identity_issuer, grant.identity_subject, grant.requested_scope, grant.resource,
      grant.scope, grant.actor_type, grant.subject, grant.email, grant.owner_id, grant.nowS, grant.expiresAtS,
    ],
  );
}

export async function purgeExpiredGrants(db: Queryable, nowS: number): Promise<void> {
  await db.query('DELETE FROM oauth_grants WHERE expires_at_s <= $1', [nowS]);
}

/** Keeps the owner's `keep` newest grants and forgets the rest. */
export async function forgetOldestGrants(db: Queryable, ownerId: string, keep: number): Promise<void> {
  await db.query(
    `DELETE FROM oauth_grants WHERE owner_id = $1
       AND id NOT IN (SELECT id FROM oauth_grants WHERE owner_id = $1 ORDER BY created_at_s DESC, id LIMIT $2)`,
    [ownerId, keep],
  );
}

/**
 * The live grants a request could be re-authorized by, locked until the transaction that mints its code
 * ends, so a revocation either happens before (nothing found) or waits and then finds the code.
 */
export async function lockMatchingGrants(
  tx: Tx,
  match: { clientId: string; browserHash: string; resource: string; requestedScope: string; nowS: number },
): Promise<GrantRow[]> {
  const { rows } = await tx.query<GrantRow>(
    // Only a consent given under the owner's verified email as it is now: after a change, the page asks again.
    `SELECT g.* FROM oauth_grants g JOIN owners o ON o.id = g.owner_id
      WHERE g.client_id = $1 AND g.browser_hash = $2 AND g.resource = $3 AND g.requested_scope = $4 AND g.expires_at_s > $5
        AND o.email_verified AND g.email = o.email
      ORDER BY g.id FOR SHARE OF g`,
    [match.clientId, match.browserHash, match.resource, match.requestedScope, match.nowS],
  );
  return rows;
}

export interface OwnerGrantRow extends GrantRow {
  client_name: string | null;
}

/** The owner's live grants, newest first (at most REMEMBERED_CONSENTS_PER_OWNER_MAX exist). */
export async function ownerGrants(db: Queryable, ownerId: string, nowS: number): Promise<OwnerGrantRow[]> {
  const { rows } = await db.query<OwnerGrantRow>(
    `SELECT g.*, c.client_name FROM oauth_grants g JOIN oauth_clients c ON c.id = g.client_id
      WHERE g.owner_id = $1 AND g.expires_at_s > $2 ORDER BY g.created_at_s DESC, g.id`,
    [ownerId, nowS],
  );
  return rows;
}


/**
 * What a client holds that a revocation takes back: for an owner, whatever it holds for the owner and each of its
 * agents (the owner's `DELETE /v1/owner/oauth-grants/{clientId}`); for a subject, what it holds for that one owner
 * or agent (a token given back, `POST /oauth/revoke`).
 */
export type ClientHold = { clientId: string; ownerId: string } | { clientId: string; actorType: string; subject: string };

/** The hold's rows of `oauth_grants` or `oauth_codes` (both have the columns), from `$1` on. */
function holdScope(hold: ClientHold): { where: string; params: string[] } {
  return 'ownerId' in hold
    ? { where: 'client_id = $1 AND owner_id = $2', params: [hold.clientId, hold.ownerId] }
    : { where: 'client_id = $1 AND actor_type = $2 AND subject = $3', params: [hold.clientId, hold.actorType, hold.subject] };
}

/** Forgets the hold's remembered consents, in every browser; how many. */
export async function deleteGrants(db: Queryable, hold: ClientHold): Promise<number> {
  const { where, params } = holdScope(hold);
  const { rowCount } = await db.query(`DELETE FROM oauth_grants WHERE ${where}`, params);
  return rowCount;
}

/** The hold's codes not yet exchanged: they can no longer be. */
export async function deleteUnusedCodes(db: Queryable, hold: ClientHold): Promise<void> {
  const { where, params } = holdScope(hold);
  await db.query(`DELETE FROM oauth_codes WHERE ${where} AND consumed_at_s IS NULL`, params);
}

/** Revokes every live access token of the hold (one statement); how many. */
export async function revokeLiveTokens(db: Queryable, hold: ClientHold, nowS: number): Promise<number> {
  const { where, params } = holdScope(hold);
  const { rowCount } = await db.query(
    `INSERT INTO oauth_revoked_tokens (jti, expires_at_s)
     SELECT access_token_jti, access_token_expires_at_s FROM oauth_codes
      WHERE ${where} AND access_token_jti IS NOT NULL AND access_token_expires_at_s > $${params.length + 1}
     ON CONFLICT (jti) DO NOTHING`,
    [...params, nowS],
  );
  return rowCount;
}
