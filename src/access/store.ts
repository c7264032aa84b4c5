// SQL of the merchant check: one statement reads the offer, its merchant, the agent registered for an
// identity (with the settings the spending policy reads) and the agent's owner together (one snapshot), and
// writes nothing.
import type { Queryable } from '../platform/db/database.ts';
import type { ExtendedRules } from '../policy/mandate.ts';

/** The registered agent, as the merchant check needs it: the policy's settings and whether its owner is verified. */
export interface MerchantCheckAgent {
  id: string;
  status: string;
  retired_at_s: bigint | null;
  /** Root first; a delegate is answered for under each ancestor's status and mandate too. */
  ancestor_ids: string[];
  allowed_services: string[];
  allowed_categories: string[];
  cap_per_hold_uc: bigint | null;
  cap_per_period_uc: bigint | null;
  cap_period_s: number;
  mandate_rules: Partial<ExtendedRules>;
  owner_verified: boolean;
}

export interface MerchantCheckRow {
  offer_id: string;
  merchant_id: string;
  price_uc: bigint;
  category: string;
  merchant_verified: boolean;
  /** The merchant's domain (the mandate's merchant rules name merchants by id or verified domain). */
  merchant_domain: string;
  /** Undefined when no agent is registered for the identity, or more than one owner registered it (`registrations`). */
  agent?: MerchantCheckAgent;
  /** How many owners registered the identity (not counting retired registrations when any other is not retired). */
  registrations: number;
}

interface Row extends Omit<MerchantCheckRow, 'agent' | 'registrations'> {
  registrations: number | string;
  agent_id: string | null;
  agent_status: string | null;
  retired_at_s: bigint | null;
  ancestor_ids: string[] | null;
  allowed_services: string[] | null;
  allowed_categories: string[] | null;
  cap_per_hold_uc: bigint | null;
  cap_per_period_uc: bigint | null;
  cap_period_s: number | null;
  mandate_rules: Partial<ExtendedRules> | null;
  owner_verified: boolean | null;
}

/**
 * The active offer of `merchantId`, with the registration of the identity if exactly one owner registered it (each
 * owner registers an identity once, and the merchant's question names no owner); registrations retired for good do
 * not count while another is not. Undefined without the offer.
 */
export async function findMerchantCheck(
  db: Queryable,
  merchantId: string,
  offerId: string,
  identity: { issuer: string; subject: string },
): Promise<MerchantCheckRow | undefined> {
  const { rows } = await db.query<Row>(
    `SELECT o.id AS offer_id, o.merchant_id, o.price_uc, o.category, m.verified AS merchant_verified, m.domain AS merchant_domain,
            a.id AS agent_id, a.status AS agent_status, a.retired_at_s, a.ancestor_ids, a.allowed_services, a.allowed_categories,
            a.cap_per_hold_uc, a.cap_per_period_uc, a.cap_period_s, a.mandate_rules, ow.email_verified AS owner_verified, r.registrations
       FROM offers o
       JOIN merchants m ON m.id = o.merchant_id
       CROSS JOIN (SELECT count(*) FILTER (WHERE retired_at_s IS NULL)::int AS live, count(*)::int AS every
                     FROM agents WHERE identity_issuer = $3 AND identity_subject = $4) c
       CROSS JOIN LATERAL (SELECT CASE WHEN c.live > 0 THEN c.live ELSE c.every END AS registrations) r
       LEFT JOIN agents a ON a.identity_issuer = $3 AND a.identity_subject = $4 AND r.registrations = 1 AND (c.live = 0 OR a.retired_at_s IS NULL)
       LEFT JOIN owners ow ON ow.id = a.owner_id
      WHERE o.id = $1 AND o.merchant_id = $2 AND o.active`,
    [offerId, merchantId, identity.issuer, identity.subject],
  );
  const row = rows[0];
  if (!row) return undefined;
  const { agent_id, agent_status, retired_at_s, ancestor_ids, allowed_services, allowed_categories, cap_per_hold_uc, cap_per_period_uc, cap_period_s, mandate_rules, owner_verified, registrations, ...offer } = row;
  if (agent_id === null) return { ...offer, registrations: Number(registrations) };
  return {
    ...offer,
    registrations: Number(registrations),
    agent: {
      id: agent_id,
      status: agent_status!,
      retired_at_s,
      ancestor_ids: ancestor_ids!,
      allowed_services: allowed_services!,
      allowed_categories: allowed_categories!,
      cap_per_hold_uc,
      cap_per_period_uc,
      cap_period_s: cap_period_s!,
      mandate_rules: mandate_rules ?? {},
      owner_verified: owner_verified === true,
    },
  };
}

/** A delegate's ancestors, as the spending policy reads them (root first; none for a root). */
export async function findSpendingAncestors(db: Queryable, ancestorIds: readonly string[]): Promise<Array<Omit<MerchantCheckAgent, 'owner_verified' | 'ancestor_ids'>>> {
  if (ancestorIds.length === 0) return [];
  const { rows } = await db.query<Omit<MerchantCheckAgent, 'owner_verified' | 'ancestor_ids'>>(
    `SELECT id, status, retired_at_s, allowed_services, allowed_categories, cap_per_hold_uc, cap_per_period_uc, cap_period_s, mandate_rules
       FROM agents WHERE id = ANY($1::text[])`,
    [[...ancestorIds]],
  );
  const byId = new Map(rows.map((row) => [row.id, row]));
  return ancestorIds.map((id) => byId.get(id)!);
}
