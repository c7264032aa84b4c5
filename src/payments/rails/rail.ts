// A payment rail: how credit arrives for an agent. A top-up goes through the configured rail, which opens
// the approval (the page or checkout the owner is sent to), can cancel it, and reports settlement through
// its own channel: the owner's approval on our page (local), a signed webhook (Stripe). The payments service
// owns everything a rail shares: the top-up record, settlement exactly once under the row lock, the lot, the
// events, resuming the intent it pays for. A new rail is one module beside these and one entry in the
// registry (index.ts).
import type { Config } from '../../platform/config.ts';

/** The gateway page where the owner sees a top-up and approves or declines it (a checkout's return page too). */
export function approvalPageUrl(baseUrl: string, topupId: string): string {
  return `${baseUrl}/payments/topups/${topupId}`;
}

/** The top-up a rail opens an approval for, before it is recorded. */
export interface TopupDraft {
  id: string;
  agentId: string;
  amountUsdCents: number;
  intentId: string | null;
}

/** What the rail opened: the page the owner goes to and how long the top-up may wait. */
export interface OpenedApproval {
  approvalUrl: string;
  checkoutUrl: string;
  /** The rail's own reference (a Checkout Session id), or null. */
  providerRef: string | null;
  /** False for a test-mode payment: no money moves. */
  livemode: boolean;
  expiresAtS: number;
}

/** A recorded top-up, as a rail's notification checks that it is about this one. */
export interface TopupFacts {
  id: string;
  provider: string;
  providerRef: string | null;
  amountUsdCents: number;
  /** Whether the rail took it in live mode (a real payment) or test mode (no money moves). */
  livemode: boolean;
}

/** A rail's own check of a notification against the top-up: why it does not match, or undefined. */
export type NotificationCheck = (topup: TopupFacts) => string | undefined;

/**
 * What a paid notification did: `settled` (credited now), `unchanged` (credited before: a replay), or why a payment the
 * provider collected was not credited, each logged at error level for reconciliation: `mismatch` (another session,
 * amount, currency or mode than the top-up's), `not_pending` (the top-up was declined or failed), `unknown_topup` (no
 * such top-up here: another gateway's, or one lost to a restore from backup).
 */
export type SettleOutcome = 'settled' | 'unchanged' | 'mismatch' | 'not_pending' | 'unknown_topup';

/** What a rail's notifications may do to a top-up: the payments service settles or closes it, exactly once. */
export interface TopupSettlement {
  settle(topupId: string, settlementRef: string, check?: NotificationCheck): Promise<SettleOutcome>;
  close(topupId: string, status: 'expired' | 'failed', reference: string | null, check?: NotificationCheck): Promise<'closed' | 'unchanged'>;
}

/**
 * A rail's endpoint for its provider's notifications (Stripe's webhook), which the payments face serves
 * with the raw body: the signature covers the exact bytes.
 */
export interface RailNotifications {
  path: string;
  operationId: string;
  summary: string;
  description: string;
  /** The request header carrying the delivery's signature. */
  signatureHeader: string;
  /** Verifies and applies one delivery; 400 invalid_input when the signature does not hold. */
  receive(rawBody: Buffer, signature: string | string[] | undefined, topups: TopupSettlement): Promise<{ received: true; outcome: string }>;
}

/** The configured rail: what top-ups made now go through. */
export interface CreditRail {
  /** Opens the approval; throws ApiError payment_unavailable when the rail cannot be reached. */
  open(draft: TopupDraft, nowS: number): Promise<OpenedApproval>;
  /** Makes the approval unusable before the top-up is declined (Stripe: expires the Checkout Session). */
  cancel(providerRef: string | null): Promise<void>;
  notifications?: RailNotifications;
}

/**
 * A rail as the registry lists it. What it says of itself holds whatever the configuration, so a top-up
 * recorded under an earlier configuration still reads right; `create` makes it from the configuration
 * (undefined when the configuration lacks what it needs).
 */
export interface RailModule {
  /** Its value of ACG_PAYMENT_PROVIDER, and the top-up's `provider`. */
  kind: string;
  /** Where the owner acts, for messages: "the gateway's approval page", "Stripe Checkout". */
  title: string;
  /** What must happen to a pending top-up (its `nextAction.resolution`): `owner_approval` on our page, `checkout`. */
  resolution: string;
  /** How execute's 402 names this way of paying in `paymentMethods`. */
  paymentMethod: string;
  /** What the agent tells its owner to do at the approval URL, e.g. "approve it". */
  ownerAction: string;
  create(config: Config): CreditRail | undefined;
}
