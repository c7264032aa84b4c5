// The merchant check: may this independently verified agent identity use one of my offers? The answer
// comes from the one agent clearance function plus the two facts only this check needs (a verified owner,
// a verified merchant). Nothing is written.
import { clearanceRefusal } from '../agents/clearance.ts';
import type { Queryable } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import { formatUc } from '../platform/money.ts';
import { findMerchantCheck } from './store.ts';

export interface AgentIdentity {
  issuer: string;
  subject: string;
}

export interface MerchantCheckDecision {
  agentId: string;
  agentIdentity: AgentIdentity;
  merchantId: string;
  offerId: string;
  allowed: boolean;
  paymentRequired: boolean;
  priceUc: string;
  voucherEndpoint: string;
}

export async function checkMerchantAccess(db: Queryable, merchantId: string, offerId: string, agentIdentity: AgentIdentity): Promise<MerchantCheckDecision> {
  const row = await findMerchantCheck(db, merchantId, offerId, agentIdentity);
  if (!row) throw new ApiError('not_found', { detail: `no active offer ${offerId} of your merchant` });
  if (!row.agent_id) throw new ApiError('not_found', { detail: 'no agent is registered for this identity' });
  const agent = { status: row.agent_status!, allowed_services: row.allowed_services!, allowed_categories: row.allowed_categories! };
  const cleared = clearanceRefusal(agent, { category: row.category }) === undefined;
  return {
    agentId: row.agent_id,
    agentIdentity,
    merchantId: row.merchant_id,
    offerId: row.offer_id,
    allowed: cleared && row.owner_verified === true && row.merchant_verified,
    paymentRequired: row.price_uc > 0n,
    priceUc: formatUc(row.price_uc),
    voucherEndpoint: '/v1/vouchers',
  };
}
