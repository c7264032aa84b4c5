// Offers: what a merchant sells for credit. Owned by a merchant; managed by the merchant's owner or by a
// merchant API key of that merchant; the category must be one of the merchant's categories.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { pageBySeq } from '../platform/db/paging.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { REFUND_WINDOW_S_DEFAULT } from '../ledger/service.ts';
import { formatUc } from '../platform/money.ts';
import type { Principal } from '../platform/principal.ts';
import type { Page } from '../platform/schemas.ts';
import { merchantActor, type MerchantFacts, type MerchantService } from '../merchants/service.ts';
import * as store from './store.ts';

export type { SellableOfferRow } from './store.ts';

export const HOLD_LIFETIME_S_DEFAULT = 900;
export const HOLD_LIFETIME_S_MIN = 60;
/** Seven days: Stripe's default authorization window, and the signing-key retention covers it. */
export const HOLD_LIFETIME_S_MAX = 7 * 86_400;
/** A year: long refund windows are a merchant's choice, unbounded ones are a mistake. */
export const REFUND_WINDOW_S_MAX = 365 * 86_400;

export interface Offer {
  id: string;
  merchantId: string;
  name: string;
  category: string;
  priceUc: string;
  active: boolean;
  holdLifetimeS: number;
  refundWindowS: number;
  createdAt: number;
  updatedAt: number;
}

export function toOffer(row: store.OfferRow): Offer {
  return {
    id: row.id,
    merchantId: row.merchant_id,
    name: row.name,
    category: row.category,
    priceUc: formatUc(row.price_uc),
    active: row.active,
    holdLifetimeS: row.hold_lifetime_s,
    refundWindowS: row.refund_window_s,
    createdAt: Number(row.created_at_s),
    updatedAt: Number(row.updated_at_s),
  };
}

export class OfferService {
  constructor(
    private readonly gateway: Gateway,
    private readonly merchants: MerchantService,
  ) {}

  /** The longest hold an active offer takes (seconds), or null with none: how long a voucher signed now may have to verify. */
  static async longestHoldLifetimeS(db: Queryable): Promise<number | null> {
    const { rows } = await db.query<{ longest: number | null }>('SELECT max(hold_lifetime_s) AS longest FROM offers WHERE active');
    return rows[0]?.longest ?? null;
  }

  async create(
    tx: Tx,
    principal: Principal,
    merchantId: string,
    input: { name: string; category: string; priceUc: bigint; active?: boolean; holdLifetimeS?: number; refundWindowS?: number },
  ): Promise<Offer> {
    // FOR SHARE: a concurrent PATCH removing this category waits for us, then sees the offer (409).
    const merchant = await this.merchants.shareFacts(tx, merchantActor(principal), merchantId);
    if (!merchant.categories.includes(input.category)) {
      throw memberRefusal('category', `must be one of the merchant's categories: ${merchant.categories.join(', ')}`);
    }
    if (input.priceUc <= 0n) throw memberRefusal('priceUc', 'must be positive');
    const nowS = BigInt(this.gateway.clock.nowS());
    return toOffer(
      await store.insertOffer(tx, {
        id: newId('off'),
        merchant_id: merchant.id,
        name: input.name,
        category: input.category,
        price_uc: input.priceUc,
        active: input.active ?? true,
        hold_lifetime_s: input.holdLifetimeS ?? HOLD_LIFETIME_S_DEFAULT,
        refund_window_s: input.refundWindowS ?? REFUND_WINDOW_S_DEFAULT,
        created_at_s: nowS,
        updated_at_s: nowS,
      }),
    );
  }

  /** The merchant, if the principal may act for it (its owner, or one of its API keys); else 404. */
  reach(db: Queryable, principal: Principal, merchantId: string): Promise<MerchantFacts> {
    return this.merchants.reach(db, principal, merchantId);
  }

  /** A merchant's offers, oldest first (the caller has reached the merchant). */
  async list(db: Queryable, merchantId: string, page: Page): Promise<{ offers: Offer[]; hasMore: boolean }> {
    const found = await pageBySeq<store.OfferRow>(db, 'offers', 'merchant_id', merchantId, page);
    return { offers: found.items.map(toOffer), hasMore: found.hasMore };
  }

  /** One of a merchant's offers (the caller has reached the merchant); another merchant's is not found. */
  async get(db: Queryable, merchantId: string, offerId: string): Promise<Offer> {
    const row = await store.findOffer(db, offerId);
    if (!row || row.merchant_id !== merchantId) throw new ApiError('not_found', { detail: `no offer ${offerId}` });
    return toOffer(row);
  }

  async update(
    tx: Tx,
    principal: Principal,
    merchantId: string,
    offerId: string,
    patch: { name?: string; priceUc?: bigint; active?: boolean; holdLifetimeS?: number; refundWindowS?: number },
  ): Promise<Offer> {
    const merchant = await this.merchants.shareFacts(tx, merchantActor(principal), merchantId);
    const row = await store.lockOffer(tx, offerId);
    if (!row || row.merchant_id !== merchantId) throw new ApiError('not_found', { detail: `no offer ${offerId}` });
    if (patch.active === true && !merchant.categories.includes(row.category)) {
      // The offer's category is not the request's, but `active: true` is what it refuses.
      throw memberRefusal('active', `cannot be true: the offer's category "${row.category}" is no longer one of the merchant's categories`);
    }
    if (patch.priceUc !== undefined && patch.priceUc <= 0n) throw memberRefusal('priceUc', 'must be positive');
    return toOffer(
      await store.updateOffer(tx, {
        ...row,
        name: patch.name ?? row.name,
        price_uc: patch.priceUc ?? row.price_uc,
        active: patch.active ?? row.active,
        hold_lifetime_s: patch.holdLifetimeS ?? row.hold_lifetime_s,
        refund_window_s: patch.refundWindowS ?? row.refund_window_s,
        updated_at_s: BigInt(this.gateway.clock.nowS()),
      }),
    );
  }

  /**
   * The offers an agent may buy: active offers of verified merchants in one of `allowedCategories`
   * (`*` = every category), oldest first.
   */
  async listSellable(db: Queryable, allowedCategories: readonly string[], page: Page): Promise<{ offers: Offer[]; hasMore: boolean }> {
    const categories = allowedCategories.includes('*') ? null : allowedCategories;
    const rows = await store.listSellableOffers(db, { categories, limit: page.limit + 1, startingAfter: page.startingAfter });
    return { offers: rows.slice(0, page.limit).map(toOffer), hasMore: rows.length > page.limit };
  }

  /** The sellable offers (active, of a verified merchant) among `offerIds`, by id (one statement). */
  async sellableMany(db: Queryable, offerIds: readonly string[]): Promise<Map<string, store.SellableOfferRow>> {
    return store.findSellableOffers(db, offerIds);
  }
}
