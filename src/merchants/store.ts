// SQL of merchants and their API keys (the one owner of `merchant_api_keys`). Nothing but queries.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { refuseUnknownCursor } from '../platform/db/paging.ts';

export interface MerchantRow {
  id: string;
  owner_id: string;
  name: string;
  domain: string;
  categories: string[];
  verification_challenge: string;
  verified: boolean;
  verified_at_s: bigint | null;
  /** Verified through dev mode's own DNS zone (no proof of the domain): live mode takes it back at start. */
  verified_in_dev_zone: boolean;
  accepted_payment_methods: string[];
  created_at_s: bigint;
  updated_at_s: bigint;
}

export interface ApiKeyRow {
  id: string;
  merchant_id: string;
  owner_id: string;
  name: string;
  scopes: string[];
  /** HMAC-SHA-256 of the secret under the pepper; only the credential verifier compares it. */
  secret_hash: string;
  created_at_s: bigint;
  revoked_at_s: bigint | null;
}

export async function insertMerchant(db: Queryable, merchant: Omit<MerchantRow, 'verified_at_s'>): Promise<MerchantRow> {
  const { rows } = await db.query<MerchantRow>(
    `INSERT INTO merchants (id, owner_id, name, domain, categories, verification_challenge, verified, accepted_payment_methods,
       created_at_s, updated_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *`,
    [
      merchant.id, merchant.owner_id, merchant.name, merchant.domain, JSON.stringify(merchant.categories),
      merchant.verification_challenge, merchant.verified, JSON.stringify(merchant.accepted_payment_methods),
      merchant.created_at_s, merchant.updated_at_s,
    ],
  );
  return rows[0]!;
}

export async function countOwnedMerchants(db: Queryable, ownerId: string): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>('SELECT count(*) AS n FROM merchants WHERE owner_id = $1', [ownerId]);
  return Number(rows[0]!.n);
}

export async function findOwnedMerchant(db: Queryable, ownerId: string, merchantId: string): Promise<MerchantRow | undefined> {
  const { rows } = await db.query<MerchantRow>('SELECT * FROM merchants WHERE id = $1 AND owner_id = $2', [merchantId, ownerId]);
  return rows[0];
}

export async function lockOwnedMerchant(tx: Tx, ownerId: string, merchantId: string): Promise<MerchantRow | undefined> {
  const { rows } = await tx.query<MerchantRow>('SELECT * FROM merchants WHERE id = $1 AND owner_id = $2 FOR UPDATE', [merchantId, ownerId]);
  return rows[0];
}

export async function findMerchant(db: Queryable, merchantId: string): Promise<MerchantRow | undefined> {
  const { rows } = await db.query<MerchantRow>('SELECT * FROM merchants WHERE id = $1', [merchantId]);
  return rows[0];
}

/** The merchant, held FOR SHARE until the transaction ends: a concurrent change of its row waits. */
export async function shareMerchant(tx: Tx, merchantId: string): Promise<MerchantRow | undefined> {
  const { rows } = await tx.query<MerchantRow>('SELECT * FROM merchants WHERE id = $1 FOR SHARE', [merchantId]);
  return rows[0];
}

/** The merchant, locked FOR UPDATE until the transaction ends. */
export async function lockMerchant(tx: Tx, merchantId: string): Promise<MerchantRow | undefined> {
  const { rows } = await tx.query<MerchantRow>('SELECT * FROM merchants WHERE id = $1 FOR UPDATE', [merchantId]);
  return rows[0];
}

export async function updateMerchantSettings(
  db: Queryable,
  merchant: { id: string; name: string; categories: string[]; updated_at_s: bigint },
): Promise<MerchantRow> {
  const { rows } = await db.query<MerchantRow>(
    'UPDATE merchants SET name = $2, categories = $3, updated_at_s = $4 WHERE id = $1 RETURNING *',
    [merchant.id, merchant.name, JSON.stringify(merchant.categories), merchant.updated_at_s],
  );
  return rows[0]!;
}

/**
 * Marks the merchant verified, saying whether the proof came from dev mode's own DNS zone; a verification is only
 * taken back by live mode, of one made in the dev zone (`unverifyDevZoneProofs`).
 */
export async function markVerified(db: Queryable, merchantId: string, nowS: bigint, inDevZone: boolean): Promise<MerchantRow> {
  const { rows } = await db.query<MerchantRow>(
    'UPDATE merchants SET verified = true, verified_at_s = $2, verified_in_dev_zone = $3, updated_at_s = $2 WHERE id = $1 RETURNING *',
    [merchantId, nowS, inDevZone],
  );
  return rows[0]!;
}

/** Takes back every verification made in the dev DNS zone; returns the merchants it applied to. */
export async function unverifyDevZoneProofs(db: Queryable, nowS: bigint): Promise<Array<{ id: string; domain: string }>> {
  const { rows } = await db.query<{ id: string; domain: string }>(
    `UPDATE merchants SET verified = false, verified_at_s = NULL, verified_in_dev_zone = false, updated_at_s = $1
      WHERE verified_in_dev_zone RETURNING id, domain`,
    [nowS],
  );
  return rows;
}

/** Which of `categories` an active offer of the merchant still uses. */
export async function categoriesOfActiveOffers(db: Queryable, merchantId: string, categories: readonly string[]): Promise<string[]> {
  if (categories.length === 0) return [];
  const { rows } = await db.query<{ category: string }>(
    `SELECT DISTINCT category FROM offers
      WHERE merchant_id = $1 AND active AND category IN (SELECT jsonb_array_elements_text($2::jsonb))
      ORDER BY category`,
    [merchantId, JSON.stringify(categories)],
  );
  return rows.map((row) => row.category);
}

export async function insertApiKey(db: Queryable, key: ApiKeyRow): Promise<ApiKeyRow> {
  const { rows } = await db.query<ApiKeyRow>(
    `INSERT INTO merchant_api_keys (id, merchant_id, owner_id, name, scopes, secret_hash, created_at_s, revoked_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, NULL) RETURNING *`,
    [key.id, key.merchant_id, key.owner_id, key.name, JSON.stringify(key.scopes), key.secret_hash, key.created_at_s],
  );
  return rows[0]!;
}

export async function countActiveApiKeys(db: Queryable, merchantId: string): Promise<number> {
  const { rows } = await db.query<{ n: bigint }>('SELECT count(*) AS n FROM merchant_api_keys WHERE merchant_id = $1 AND revoked_at_s IS NULL', [
    merchantId,
  ]);
  return Number(rows[0]!.n);
}

/** Newest first. */
export async function listApiKeys(db: Queryable, merchantId: string, limit: number, startingAfter?: string): Promise<ApiKeyRow[]> {
  const { rows } = await db.query<ApiKeyRow>(
    `SELECT * FROM merchant_api_keys WHERE merchant_id = $1
       AND ($2::text IS NULL OR seq < (SELECT seq FROM merchant_api_keys WHERE id = $2 AND merchant_id = $1))
     ORDER BY seq DESC LIMIT $3`,
    [merchantId, startingAfter ?? null, limit],
  );
  await refuseUnknownCursor(db, rows, startingAfter, 'SELECT 1 FROM merchant_api_keys WHERE id = $1 AND merchant_id = $2', [merchantId]);
  return rows;
}

/** Any merchants' keys by id: what the credential verifier looks up (one statement, for its coalesced reads). */
export async function findApiKeysById(db: Queryable, keyIds: readonly string[]): Promise<ApiKeyRow[]> {
  const { rows } = await db.query<ApiKeyRow>('SELECT * FROM merchant_api_keys WHERE id = ANY($1::text[])', [[...keyIds]]);
  return rows;
}

/** Locks one merchant's key (revocation). */
export async function lockApiKey(tx: Tx, merchantId: string, keyId: string): Promise<ApiKeyRow | undefined> {
  const { rows } = await tx.query<ApiKeyRow>('SELECT * FROM merchant_api_keys WHERE id = $1 AND merchant_id = $2 FOR UPDATE', [keyId, merchantId]);
  return rows[0];
}

export async function revokeApiKey(db: Queryable, keyId: string, nowS: bigint): Promise<ApiKeyRow> {
  const { rows } = await db.query<ApiKeyRow>(
    `UPDATE merchant_api_keys SET revoked_at_s = COALESCE(revoked_at_s, $2) WHERE id = $1 RETURNING *`,
    [keyId, nowS],
  );
  return rows[0]!;
}
