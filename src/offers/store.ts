// SQL of offers.
import type { Queryable, Tx } from '../platform/db/database.ts';

export interface OfferRow {
  id: string;
  merchant_id: string;
  name: string;
  category: string;
  price_uc: bigint;
  active: boolean;
  hold_lifetime_s: number;
  created_at_s: bigint;
  updated_at_s: bigint;
}

export async function insertOffer(db: Queryable, offer: OfferRow): Promise<OfferRow> {
  const { rows } = await db.query<OfferRow>(
    `INSERT INTO offers (id, merchant_id, name, category, price_uc, active, hold_lifetime_s, created_at_s, updated_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING *`,
    [offer.id, offer.merchant_id, offer.name, offer.category, offer.price_uc, offer.active, offer.hold_lifetime_s, offer.created_at_s],
  );
  return rows[0]!;
}

export async function findOffer(db: Queryable, offerId: string): Promise<OfferRow | undefined> {
  const { rows } = await db.query<OfferRow>('SELECT * FROM offers WHERE id = $1', [offerId]);
  return rows[0];
}

export async function lockOffer(tx: Tx, offerId: string): Promise<OfferRow | undefined> {
  const { rows } = await tx.query<OfferRow>('SELECT * FROM offers WHERE id = $1 FOR UPDATE', [offerId]);
  return rows[0];
}

export async function updateOffer(db: Queryable, offer: OfferRow): Promise<OfferRow> {
  const { rows } = await db.query<OfferRow>(
    `UPDATE offers SET name = $2, price_uc = $3, active = $4, hold_lifetime_s = $5, updated_at_s = $6 WHERE id = $1 RETURNING *`,
    [offer.id, offer.name, offer.price_uc, offer.active, offer.hold_lifetime_s, offer.updated_at_s],
  );
  return rows[0]!;
}

/** An active offer of a verified merchant, as voucher minting needs it. */
export async function findSellableOffer(db: Queryable, offerId: string): Promise<OfferRow | undefined> {
  const { rows } = await db.query<OfferRow>(
    `SELECT o.* FROM offers o JOIN merchants m ON m.id = o.merchant_id WHERE o.id = $1 AND o.active AND m.verified`,
    [offerId],
  );
  return rows[0];
}
