// SQL of offers.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { refuseUnknownCursor } from '../platform/db/paging.ts';

export interface OfferRow {
  id: string;
  merchant_id: string;
  name: string;
  category: string;
  price_uc: bigint;
  active: boolean;
  hold_lifetime_s: number;
  refund_window_s: number;
  created_at_s: bigint;
  updated_at_s: bigint;
}

export async function insertOffer(db: Queryable, offer: OfferRow): Promise<OfferRow> {
  const { rows } = await db.query<OfferRow>(
    `INSERT INTO offers (id, merchant_id, name, category, price_uc, active, hold_lifetime_s, created_at_s, updated_at_s, refund_window_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9) RETURNING *`,
    [offer.id, offer.merchant_id, offer.name, offer.category, offer.price_uc, offer.active, offer.hold_lifetime_s, offer.created_at_s, offer.refund_window_s],
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
    `UPDATE offers SET name = $2, price_uc = $3, active = $4, hold_lifetime_s = $5, updated_at_s = $6, refund_window_s = $7 WHERE id = $1 RETURNING *`,
    [offer.id, offer.name, offer.price_uc, offer.active, offer.hold_lifetime_s, offer.updated_at_s, offer.refund_window_s],
  );
  return rows[0]!;
}

/** A sellable offer with its merchant's verified domain (what a mandate's merchant rules may name) and name (what its owner is shown). */
export interface SellableOfferRow extends OfferRow {
  merchant_domain: string;
  merchant_name: string;
}

/** The active offers of verified merchants among `offerIds`, by id, as voucher minting needs them (one statement). */
export async function findSellableOffers(db: Queryable, offerIds: readonly string[]): Promise<Map<string, SellableOfferRow>> {
  if (offerIds.length === 0) return new Map();
  const { rows } = await db.query<SellableOfferRow>(
    `SELECT o.*, m.domain AS merchant_domain, m.name AS merchant_name FROM offers o JOIN merchants m ON m.id = o.merchant_id WHERE o.id = ANY($1::text[]) AND o.active AND m.verified`,
    [[...new Set(offerIds)]],
  );
  return new Map(rows.map((row) => [row.id, row]));
}

/**
 * Active offers of verified merchants, oldest first after `startingAfter`, limited to `categories` when
 * given (null = every category): what an agent can buy.
 */
export async function listSellableOffers(
  db: Queryable,
  page: { categories: readonly string[] | null; limit: number; startingAfter?: string },
): Promise<OfferRow[]> {
  const { rows } = await db.query<OfferRow>(
    `SELECT o.* FROM offers o JOIN merchants m ON m.id = o.merchant_id
      WHERE o.active AND m.verified
        AND ($1::text[] IS NULL OR o.category = ANY($1::text[]))
        AND ($2::text IS NULL OR o.seq > (SELECT seq FROM offers WHERE id = $2))
      ORDER BY o.seq LIMIT $3`,
    [page.categories, page.startingAfter ?? null, page.limit],
  );
  await refuseUnknownCursor(db, rows, page.startingAfter, 'SELECT 1 FROM offers WHERE id = $1');
  return rows;
}
