// What the webhook rules need to know of a merchant, declared here and implemented by the merchants feature
// (wired in src/app.ts). Events never imports merchants: merchants imports events (the events it emits, the
// webhook URL its resource shows), so the arrow goes one way.
import type { Queryable, Tx } from '../platform/db/database.ts';
import type { Principal } from '../platform/principal.ts';

/** A merchant as the webhook rules see it. */
export interface WebhookMerchant {
  id: string;
  ownerId: string;
  /** The merchant's domain (canonical); a webhook URL must be on it, once it is verified. */
  domain: string;
  verified: boolean;
}

export interface MerchantDirectory {
  /**
   * The merchant the principal may act for (its owner, or one of its API keys); anyone else, a key of
   * another merchant included, gets the 404 `not_found` of a merchant that does not exist.
   */
  reach(db: Queryable, principal: Principal, merchantId: string): Promise<WebhookMerchant>;
  /** As `reach`, with the merchant's row locked FOR UPDATE until `tx` ends (configuring its webhook). */
  lockReached(tx: Tx, principal: Principal, merchantId: string): Promise<WebhookMerchant>;
}
