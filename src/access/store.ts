// SQL of the merchant check: one statement reads the offer, its merchant, the agent registered for an
// identity and the agent's owner together (one snapshot), and writes nothing.
import type { Queryable } from '../platform/db/database.ts';

export interface MerchantCheckRow {
  offer_id: string;
  merchant_id: string;
  price_uc: bigint;
  category: string;
  merchant_verified: boolean;
  agent_id: string | null;
  agent_status: string | null;
  allowed_services: string[] | null;
  allowed_categories: string[] | null;
  owner_verified: boolean | null;
}

/** The active offer of `merchantId`, with the registration of the identity if there is one; undefined without the offer. */
export async function findMerchantCheck(
  db: Queryable,
  merchantId: string,
  offerId: string,
  identity: { issuer: string; subject: string },
): Promise<MerchantCheckRow | undefined> {
  const { rows } = await db.query<MerchantCheckRow>(
    `SELECT o.id AS offer_id, o.merchant_id, o.price_uc, o.category, m.verified AS merchant_verified,
            a.id AS agent_id, a.status AS agent_status, a.allowed_services, a.allowed_categories,
            ow.email_verified AS owner_verified
       FROM offers o
       JOIN merchants m ON m.id = o.merchant_id
       LEFT JOIN agents a ON a.identity_issuer = $3 AND a.identity_subject = $4
       LEFT JOIN owners ow ON ow.id = a.owner_id
      WHERE o.id = $1 AND o.merchant_id = $2 AND o.active`,
    [offerId, merchantId, identity.issuer, identity.subject],
  );
  return rows[0];
}
