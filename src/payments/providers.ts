// The payment-approval providers a top-up goes through. A provider opens the approval (the page or checkout
// the owner is sent to) and, for Stripe, cancels it; settlement reaches the payments service from the
// provider's own channel (the owner's approval on our page, or Stripe's signed webhook).
//   local   the owner approves on a gateway page; approval settles at once. In dev mode it is a test-mode
//           payment (livemode false); a self-hoster may run it live, where the approving owner vouches
//           for the credit (no card is charged).
//   stripe  one Stripe Checkout Session per top-up, through the official library; settled by the signed
//           `checkout.session.completed` (or `async_payment_succeeded`) webhook.
import { createRequire } from 'node:module';
import type Stripe from 'stripe';
import type { Config } from '../platform/config.ts';
import { ApiError } from '../platform/errors.ts';
import type { TopupProviderKind } from './store.ts';

export interface TopupDraft {
  id: string;
  agentId: string;
  amountUsdCents: number;
  intentId: string | null;
}

export interface OpenedApproval {
  approvalUrl: string;
  checkoutUrl: string;
  providerRef: string | null;
  livemode: boolean;
  expiresAtS: number;
}

export interface TopupProvider {
  readonly kind: TopupProviderKind;
  /** How the 402 of execute names this way of paying in `paymentMethods`. */
  readonly paymentMethod: string;
  /** Opens the approval; throws ApiError payment_unavailable when the provider cannot be reached. */
  open(draft: TopupDraft, nowS: number): Promise<OpenedApproval>;
  /** Makes the approval unusable before the top-up is declined (Stripe: expires the Checkout Session). */
  cancel(providerRef: string | null): Promise<void>;
}

/** How long an owner has to approve a top-up on the local page. */
export const LOCAL_APPROVAL_LIFETIME_S = 86_400;

/** The gateway page where the owner sees and approves or declines a top-up. */
export function approvalPageUrl(baseUrl: string, topupId: string): string {
  return `${baseUrl}/payments/topups/${topupId}`;
}

export class LocalApprovalProvider implements TopupProvider {
  readonly kind = 'local';
  readonly paymentMethod = 'owner_approval';

  constructor(
    private readonly config: Pick<Config, 'baseUrl' | 'mode'>,
  ) {}

  async open(draft: TopupDraft, nowS: number): Promise<OpenedApproval> {
    const url = approvalPageUrl(this.config.baseUrl, draft.id);
    const livemode = this.config.mode === 'live';
    return { approvalUrl: url, checkoutUrl: url, providerRef: null, livemode, expiresAtS: nowS + LOCAL_APPROVAL_LIFETIME_S };
  }

  async cancel(): Promise<void> {}
}

/** Stripe allows Checkout Sessions to live 30 minutes to 24 hours; we take just under the most. */
const CHECKOUT_LIFETIME_S = 23 * 3600;
/** A paid session's webhook may arrive after the session's expiry; the top-up waits this much longer. */
const CHECKOUT_SETTLEMENT_GRACE_S = 3600;


/** The Stripe library, loaded when a Stripe client is made: a gateway configured for another provider never loads it. */
function stripeLibrary(): typeof Stripe {
  return createRequire(import.meta.url)('stripe') as typeof Stripe;
}

/** The Stripe client for an API base URL (tests run a local server that speaks Stripe's wire format). */
export function stripeClient(secretKey: string, apiUrl: string): Stripe {
  const api = new URL(apiUrl);
  const protocol = api.protocol === 'http:' ? 'http' : 'https';
  const Stripe = stripeLibrary();
  return new Stripe(secretKey, {
    host: api.hostname,
    port: api.port || (protocol === 'http' ? 80 : 443),
    protocol,
    maxNetworkRetries: 2,
    timeout: 10_000,
    appInfo: { name: 'agent-credit-gateway' },
  });
}

export class StripeCheckoutProvider implements TopupProvider {
  readonly kind = 'stripe';
  readonly paymentMethod = 'checkout';
  private readonly stripe: Stripe;

  constructor(
    private readonly config: Pick<Config, 'baseUrl'>,
    settings: { secretKey: string; apiUrl: string },
  ) {
    this.stripe = stripeClient(settings.secretKey, settings.apiUrl);
  }

  async open(draft: TopupDraft, nowS: number): Promise<OpenedApproval> {
    const page = approvalPageUrl(this.config.baseUrl, draft.id);
    const metadata: Record<string, string> = { topupId: draft.id, agentId: draft.agentId };
    if (draft.intentId) metadata.intentId = draft.intentId;
    let session: Stripe.Checkout.Session;
    try {
      session = await this.stripe.checkout.sessions.create(
        {
          mode: 'payment',
          client_reference_id: draft.id,
          metadata,
          payment_intent_data: { metadata },
          line_items: [
            {
              quantity: 1,
              price_data: {
                currency: 'usd',
                unit_amount: draft.amountUsdCents,
                product_data: { name: 'Agent credit', description: `${draft.amountUsdCents} credits for agent ${draft.agentId}` },
              },
            },
          ],
          success_url: `${page}?checkout=success`,
          cancel_url: `${page}?checkout=cancel`,
          expires_at: nowS + CHECKOUT_LIFETIME_S,
        },
        // Our top-up id makes the call safe to retry: Stripe answers the same session.
        { idempotencyKey: `acg-topup-${draft.id}` },
      );
    } catch (error) {
      throw new ApiError('payment_unavailable', { detail: `Stripe did not open a Checkout Session: ${(error as Error).message}` });
    }
    if (!session.url) throw new ApiError('payment_unavailable', { detail: 'Stripe opened a Checkout Session without a URL' });
    return {
      approvalUrl: session.url,
      checkoutUrl: session.url,
      providerRef: session.id,
      livemode: session.livemode,
      expiresAtS: (session.expires_at ?? nowS + CHECKOUT_LIFETIME_S) + CHECKOUT_SETTLEMENT_GRACE_S,
    };
  }

  async cancel(providerRef: string | null): Promise<void> {
    if (!providerRef) return;
    try {
      await this.stripe.checkout.sessions.expire(providerRef);
    } catch (error) {
      // A session that is already complete cannot be expired: the owner paid, so the top-up must settle.
      if (error instanceof stripeLibrary().errors.StripeInvalidRequestError) {
        throw new ApiError('conflict', { detail: `the Checkout Session can no longer be cancelled: ${error.message}` });
      }
      throw new ApiError('payment_unavailable', { detail: `Stripe did not expire the Checkout Session: ${(error as Error).message}` });
    }
  }
}
