// SQL for the authorization server: clients, pending authorization requests, codes, revoked tokens.
// Nothing but queries.
import type { Queryable, Tx } from '../platform/db/database.ts';

export interface ClientRow {
  id: string;
  client_name: string | null;
  redirect_uris: string[];
  scope: string | null;
  created_at_s: bigint;
  last_used_at_s: bigint | null;
}

export interface AuthorizationRequestRow {
  id: string;
  client_id: string;
  redirect_uri: string;
  state: string | null;
  code_challenge: string;
  resource: string;
  scope: string | null;
  browser_hash: string;
  created_at_s: bigint;
  expires_at_s: bigint;
  consumed_at_s: bigint | null;
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
}

/** Serialises registrations so the client cap cannot be overshot by concurrent requests. */
const REGISTRATION_LOCK_KEY = 0x6f617572; // "oaur"

export async function lockRegistrations(tx: Tx): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock($1)', [REGISTRATION_LOCK_KEY]);
}

export async function countClients(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>('SELECT count(*)::bigint AS n FROM oauth_clients');
  return Number(rows[0]!.n);
}

/** Deletes clients that never obtained a token and were registered before `createdBeforeS`. */
export async function purgeUnusedClients(db: Queryable, createdBeforeS: number): Promise<number> {
  const { rowCount } = await db.query('DELETE FROM oauth_clients WHERE last_used_at_s IS NULL AND created_at_s < $1', [createdBeforeS]);
  return rowCount;
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

export async function countPendingRequests(db: Queryable, nowS: number): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>(
    'SELECT count(*)::bigint AS n FROM oauth_authorization_requests WHERE expires_at_s > $1 AND consumed_at_s IS NULL',
    [nowS],
  );
  return Number(rows[0]!.n);
}

export async function purgeExpiredRequests(db: Queryable, nowS: number): Promise<void> {
  await db.query('DELETE FROM oauth_authorization_requests WHERE expires_at_s <= $1', [nowS]);
}

export async function insertAuthorizationRequest(
  db: Queryable,
  request: Omit<AuthorizationRequestRow, 'created_at_s' | 'expires_at_s' | 'consumed_at_s'> & { nowS: number; expiresAtS: number },
): Promise<void> {
  await db.query(
    `INSERT INTO oauth_authorization_requests
       (id, client_id, redirect_uri, state, code_challenge, resource, scope, browser_hash, created_at_s, expires_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [request.id, request.client_id, request.redirect_uri, request.state, request.code_challenge, request.resource, request.scope, request.browser_hash, request.nowS, request.expiresAtS],
  );
}

export async function findAuthorizationRequest(db: Queryable, requestId: string): Promise<AuthorizationRequestRow | undefined> {
  const { rows } = await db.query<AuthorizationRequestRow>('SELECT * FROM oauth_authorization_requests WHERE id = $1', [requestId]);
  return rows[0];
}

/** Marks the request consumed if it still is pending; false when another consent got there first. */
export async function consumeAuthorizationRequest(db: Queryable, requestId: string, nowS: number): Promise<boolean> {
  const { rowCount } = await db.query(
    'UPDATE oauth_authorization_requests SET consumed_at_s = $2 WHERE id = $1 AND consumed_at_s IS NULL AND expires_at_s > $2',
    [requestId, nowS],
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
  nowS: number;
  expiresAtS: number;
  purgeAfterS: number;
}

export async function insertCode(db: Queryable, code: NewCode): Promise<void> {
  await db.query(
    `INSERT INTO oauth_codes
       (code_hash, client_id, redirect_uri, resource, code_challenge, scope, actor_type, subject, email, created_at_s, expires_at_s, purge_after_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
    [
      code.codeHash, code.clientId, code.redirectUri, code.resource, code.codeChallenge, code.scope, code.actorType,
      code.subject, code.email, code.nowS, code.expiresAtS, code.purgeAfterS,
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
