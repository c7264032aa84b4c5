// The merchant check (POST /v1/access/merchant-check), a query: may this independently verified agent
// identity use one of my offers? One statement reads the offer, its merchant, the identity's registration
// and its owner (./store.ts); the spending policy (src/policy) answers for the agent as the mint would, with
// the offer's price against its caps and its budgets' usage (status, category, merchant rules, validity, caps,
// budgets), though nothing is taken. The check adds the two facts only it needs (a verified owner, a verified merchant). Nothing is
// written, and the answer holds no budget figure: a refusal of any rule is `allowed: false`. A purchase that
// would wait for the owner's approval is allowed (the mint asks for it).
import { Type } from '@sinclair/typebox';
import { ApiError } from '../platform/errors.ts';
import { formatUc } from '../platform/money.ts';
import type { Query } from '../platform/queries.ts';
import { Microcredits } from '../platform/schemas.ts';
import { hasSpendingFigures, spendingRefusal, usageOf } from '../policy/spending.ts';
import { PriceProbes } from './price-probes.ts';
import { findMerchantCheck, findSpendingAncestors } from './store.ts';

export interface AgentIdentity {
  issuer: string;
  subject: string;
}

export interface MerchantCheckInput {
  offerId: string;
  agentIdentity: AgentIdentity;
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

export const MerchantCheckInput = Type.Object(
  {
    offerId: Type.String({ minLength: 1, maxLength: 200 }),
    agentIdentity: Type.Object(
      { issuer: Type.String({ minLength: 1, maxLength: 500 }), subject: Type.String({ minLength: 1, maxLength: 200 }) },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, examples: [{ offerId: 'off_yqkspmwv2yjtmylogwrpqif3ho', agentIdentity: { issuer: 'https://agents.example', subject: 'agent-42' } }] },
);

const MerchantCheckDecision = Type.Object({
  agentId: Type.String(),
  agentIdentity: Type.Object({ issuer: Type.String(), subject: Type.String() }),
  merchantId: Type.String(),
  offerId: Type.String(),
  allowed: Type.Boolean({
    description:
      "the agent is active, its owner is a verified human, and its mandate allows this purchase now: the offer's category and merchant, its validity window, its per-hold and per-period caps and its budgets (the offer's price against what each has left, with nothing taken; no figure is shown). A purchase above its approval threshold is allowed (the mint asks the owner).",
  }),
  paymentRequired: Type.Boolean({ description: 'using the offer takes a voucher (a hold of priceUc); always true for priced offers' }),
  priceUc: Microcredits(),
  voucherEndpoint: Type.Optional(Type.String()),
});

export interface AccessQueries {
  /** `access` answers the caller's merchant id. */
  checkMerchantAccess: Query<MerchantCheckInput, MerchantCheckDecision, string>;
}

export function accessQueries(probes = new PriceProbes()): AccessQueries {
  return {
    checkMerchantAccess: {
      name: 'checkMerchantAccess',
      input: MerchantCheckInput,
      output: MerchantCheckDecision,
      access: (_db, { principal }) => {
        if (principal.kind !== 'merchant') throw new ApiError('forbidden', { detail: 'only a merchant API key checks access to its offers' });
        return principal.merchantId!;
      },
      read: async (db, { input: { offerId, agentIdentity }, atS }, merchantId) => {
        const row = await findMerchantCheck(db, merchantId, offerId, agentIdentity);
        if (!row) throw new ApiError('not_found', { detail: `no active offer ${offerId} of your merchant` });
        // An offer is for sale once its merchant proved its domain, as a mint requires; before that the question
        // answers nothing of the agent (found from outside: any owner could register any domain unproven and learn
        // which identities are registered, and their agent ids).
        if (!row.merchant_verified) {
          throw new ApiError('not_found', { detail: `offer ${offerId} is not for sale until your merchant proves its domain (POST /v1/merchants/${merchantId}/verify-domain)` });
        }
        if (!row.agent && row.registrations > 1) {
          // Each owner may register an identity; the agent's own credential names its owner, this question does not.
          throw new ApiError('not_found', { detail: "more than one owner registered this identity, so it names no one agent; the agent's own credential names its owner" });
        }
        if (!row.agent) throw new ApiError('not_found', { detail: 'no agent is registered for this identity' });
        // Every rule a mint would apply, the ancestors' too: the caps as well, or a purchase its per-hold cap
        // refuses read as allowed (found from outside).
        const ancestors = await findSpendingAncestors(db, row.agent.ancestor_ids);
        const agent = { ...row.agent, ancestors };
        // Yes or no at prices the merchant sets would add up to a cap's or budget's figure: few prices an hour.
        const probe = hasSpendingFigures(agent) ? probes.admit(row.merchant_id, row.agent.id, row.price_uc, atS) : { allowed: true as const };
        if (!probe.allowed) {
          throw new ApiError('rate_limited', {
            detail: `more than ${probes.maxDistinct} different prices asked about this agent in ${probes.windowS} s: a price asked before is answered, a new one after the wait, so that yes or no at prices you set cannot add up to the owner's figures`,
            retryAfterS: probe.retryAfterS,
          });
        }
        const usage = await usageOf(db, [agent, ...ancestors], atS);
        const refusal = spendingRefusal(agent, {
          category: row.category,
          merchant: { id: row.merchant_id, domain: row.merchant_domain },
          atS,
          take: { amountUc: row.price_uc, usage: usage.get(agent.id)!, ancestorUsage: usage },
        });
        const cleared = refusal === undefined || refusal.rule === 'approval';
        return {
          agentId: row.agent.id,
          agentIdentity,
          merchantId: row.merchant_id,
          offerId: row.offer_id,
          allowed: cleared && row.agent.owner_verified,
          paymentRequired: row.price_uc > 0n,
          priceUc: formatUc(row.price_uc),
          voucherEndpoint: '/v1/vouchers',
        };
      },
    },
  };
}
