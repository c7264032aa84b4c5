// SQL for what credential verification keeps: owners (created from human sessions) and the gateway's
// runtime secrets (the API key pepper, the secret box key). Nothing but queries.
import type { Queryable } from '../platform/db/database.ts';

export interface OwnerRow {
  id: string;
  human_issuer: string;
  human_subject: string;
  email: string;
  email_verified: boolean;
  /** The `iat` of the newest session that wrote `email` (null: not known). */
  email_issued_at_s: bigint | null;
  created_at_s: bigint;
  updated_at_s: bigint;
}

export async function findOwnerByIdentity(db: Queryable, issuer: string, subject: string): Promise<OwnerRow | undefined> {
  const { rows } = await db.query<OwnerRow>('SELECT * FROM owners WHERE human_issuer = $1 AND human_subject = $2', [issuer, subject]);
  return rows[0];
}

export async function findOwner(db: Queryable, ownerId: string): Promise<OwnerRow | undefined> {
  const { rows } = await db.query<OwnerRow>('SELECT * FROM owners WHERE id = $1', [ownerId]);
  return rows[0];
}

/**
 * Creates the owner, or refreshes its email from a session issued at `issuedAtS` (its `iat`, null when it has none);
 * returns the row as stored. A session issued before the one that wrote the email changes nothing: the row returned
 * is then the one in force, whose email is not the session's.
 */
export async function upsertOwner(
  db: Queryable,
  owner: { id: string; issuer: string; subject: string; email: string; emailVerified: boolean; issuedAtS: number | null; nowS: number },
): Promise<OwnerRow> {
  const { rows } = await db.query<OwnerRow>(
    `INSERT INTO owners (id, human_issuer, human_subject, email, email_verified, email_issued_at_s, created_at_s, updated_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
     ON CONFLICT (human_issuer, human_subject) DO UPDATE
       SET email = EXCLUDED.email, email_verified = EXCLUDED.email_verified, email_issued_at_s = EXCLUDED.email_issued_at_s,
           updated_at_s = EXCLUDED.updated_at_s
     WHERE owners.email_issued_at_s IS NULL OR EXCLUDED.email_issued_at_s IS NULL OR EXCLUDED.email_issued_at_s >= owners.email_issued_at_s
     RETURNING *`,
    [owner.id, owner.issuer, owner.subject, owner.email, owner.emailVerified, owner.issuedAtS, owner.nowS],
  );
  return rows[0] ?? (await findOwnerByIdentity(db, owner.issuer, owner.subject))!;
}

export async function readRuntimeSecret(db: Queryable, name: string): Promise<string | undefined> {
  const { rows } = await db.query<{ value: string }>('SELECT value FROM runtime_secrets WHERE name = $1', [name]);
  return rows[0]?.value;
}

/** Inserts the secret unless one exists; returns whichever is stored (two starters agree). */
export async function ensureRuntimeSecret(db: Queryable, name: string, candidate: string, nowS: number): Promise<string> {
  await db.query('INSERT INTO runtime_secrets (name, value, created_at_s) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING', [
    name,
    candidate,
    nowS,
  ]);
  return (await readRuntimeSecret(db, name))!;
}
