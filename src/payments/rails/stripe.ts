// The Stripe rail: one Stripe Checkout Session per top-up, through the official library, settled by Stripe's
// signed webhook. The webhook is verified with the library (Stripe-Signature: HMAC-SHA256 of `{t}.{raw body}`
// under the endpoint secret, 300 s tolerance). Which event does what:
//   checkout.session.completed              settle when payment_status is `paid` (a delayed method stays pending)
//   checkout.session.async_payment_succeeded settle
//   checkout.session.async_payment_failed    failed
//   checkout.session.expired                 expired
// Every other event is acknowledged and ignored. The session must be the top-up's own (id, amount, currency
// and mode: a test-mode payment never credits a live top-up), or nothing is credited. A paid session credits
// even a top-up the gateway's clock expired meanwhile (a delayed method clears days later; Stripe retries a
// webhook for 3 days). Duplicates and any order are harmless: see PaymentsService.settle. A correctly signed
// event of these types without a Checkout Session in `data.object` is 400 invalid_input.
import { createRequire } from 'node:module';
import type Stripe from 'stripe';
import type { Config } from '../../platform/config.ts';
import { ApiError } from '../../platform/errors.ts';
import { approvalPageUrl, type CreditRail, type OpenedApproval, type RailModule, type RailNotifications, type TopupDraft, type TopupFacts, type TopupSettlement } from './rail.ts';

export const STRIPE_SIGNATURE_HEADER = 'stripe-signature';
/** Stripe allows Checkout Sessions to live 30 minutes to 24 hours; we take just under the most. */
const CHECKOUT_LIFETIME_S = 23 * 3600;
/** A paid session's webhook may arrive after the session's expiry; the top-up waits this much longer. */
const CHECKOUT_SETTLEMENT_GRACE_S = 3600;

type StripeSettings = NonNullable<Config['payments']['stripe']>;

/** The Stripe library, loaded when a Stripe client is made: a gateway configured for another rail never loads it. */
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

class StripeCheckoutRail implements CreditRail {
  readonly notifications: RailNotifications;
  private readonly stripe: Stripe;

  constructor(
    private readonly config: Pick<Config, 'baseUrl'>,
    private readonly settings: StripeSettings,
  ) {
    this.stripe = stripeClient(settings.secretKey, settings.apiUrl);
    this.notifications = {
      path: '/v1/payments/stripe/webhook',
      operationId: 'receiveStripeWebhook',
      summary: "Stripe's webhook endpoint (Checkout Session events)",
      description:
        'Verified with the official library against ACG_STRIPE_WEBHOOK_SECRET (Stripe-Signature, 300 s tolerance); a wrong signature ' +
        'is 400 invalid_input and changes nothing. `checkout.session.completed` (paid) and `checkout.session.async_payment_succeeded` ' +
        'settle the top-up, `…async_payment_failed` fails it, `checkout.session.expired` expires it; others are acknowledged. ' +
        "A paid session credits its top-up even after the gateway's own expiry of it (a delayed payment method clears days later), never a " +
        "session of another mode, amount or top-up. An event of these types without a Checkout Session in data.object is 400 invalid_input. " +
        'Replays and any order are harmless: a top-up is credited once. The answer\'s `outcome`: `settled` (credited now), `unchanged` ' +
        '(credited before: a replay), `awaiting_payment`, `closed`, `ignored` (another event type, or a session naming no top-up), or, ' +
        'for a paid session not credited, `mismatch`, `not_pending` (the top-up was declined or failed) or `unknown_topup` (no such ' +
        'top-up here), each of those three logged at error level to be reconciled with Stripe.',
      signatureHeader: STRIPE_SIGNATURE_HEADER,
      receive: (rawBody, signature, topups) => this.receive(rawBody, signature, topups),
    };
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
        // What happens next, in the gateway's words first (found from outside: Stripe's sentence alone said neither).
        throw new ApiError('conflict', {
          detail:
            'this top-up can no longer be declined: its Stripe Checkout Session is not open. If it was paid, the credit arrives when Stripe ' +
            `confirms the payment; if it ended unpaid, the top-up expires by itself. Stripe said: ${error.message}`,
        });
      }
      throw new ApiError('payment_unavailable', { detail: `Stripe did not expire the Checkout Session: ${(error as Error).message}` });
    }
  }

  /** Verifies and applies one webhook delivery; 400 invalid_input when the signature does not hold. */
  private async receive(rawBody: Buffer, signature: string | string[] | undefined, topups: TopupSettlement): Promise<{ received: true; outcome: string }> {
    let event: Stripe.Event;
    try {
      if (typeof signature !== 'string') throw new Error('no Stripe-Signature header');
      event = await this.stripe.webhooks.constructEventAsync(rawBody, signature, this.settings.webhookSecret);
    } catch (error) {
      throw new ApiError('invalid_input', { detail: `the Stripe signature does not verify: ${(error as Error).message}` });
    }
    return { received: true, outcome: await apply(event, topups) };
  }
}

/** The Checkout Session an event of the four handled types carries; a signed body of another shape is bad input. */
function sessionOf(event: Stripe.Event): Stripe.Checkout.Session {
  const object: unknown = (event.data as { object?: unknown } | null | undefined)?.object;
  if (typeof object !== 'object' || object === null || typeof (object as { id?: unknown }).id !== 'string') {
    throw new ApiError('invalid_input', { detail: `the ${event.type} event carries no Checkout Session in data.object` });
  }
  return object as Stripe.Checkout.Session;
}

async function apply(event: Stripe.Event | null, topups: TopupSettlement): Promise<string> {
  if (typeof event !== 'object' || event === null || typeof event.type !== 'string') {
    throw new ApiError('invalid_input', { detail: 'the body is not a Stripe event (an object with a type)' });
  }
  switch (event.type) {
    case 'checkout.session.completed': {
      const session = sessionOf(event);
      if (session.payment_status !== 'paid') return 'awaiting_payment';
      return settle(session, event.id, topups);
    }
    case 'checkout.session.async_payment_succeeded':
      return settle(sessionOf(event), event.id, topups);
    case 'checkout.session.async_payment_failed':
      return closeFor(sessionOf(event), 'failed', event.id, topups);
    case 'checkout.session.expired':
      return closeFor(sessionOf(event), 'expired', event.id, topups);
    default:
      return 'ignored';
  }
}

async function settle(session: Stripe.Checkout.Session, eventId: string, topups: TopupSettlement): Promise<string> {
  const topupId = session.client_reference_id ?? session.metadata?.topupId;
  if (!topupId) return 'ignored';
  return topups.settle(topupId, `stripe:${eventId}`, (topup) => {
    const other = otherSession(topup, session);
    if (other) return other;
    if (session.amount_total !== topup.amountUsdCents || session.currency !== 'usd') {
      // Stripe's amount_total is in the currency's smallest unit: cents of usd, as the top-up's.
      return `session amount ${session.amount_total} (smallest unit of ${session.currency}) differs from the top-up's ${topup.amountUsdCents} usd cents`;
    }
    if (session.livemode !== topup.livemode) return `session livemode ${session.livemode} differs from the top-up's ${topup.livemode}`;
    return undefined;
  });
}

async function closeFor(session: Stripe.Checkout.Session, status: 'failed' | 'expired', eventId: string, topups: TopupSettlement): Promise<string> {
  const topupId = session.client_reference_id ?? session.metadata?.topupId;
  if (!topupId) return 'ignored';
  return topups.close(topupId, status, `stripe:${eventId}`, (topup) => otherSession(topup, session));
}

function otherSession(topup: TopupFacts, session: Stripe.Checkout.Session): string | undefined {
  return topup.provider === STRIPE_RAIL.kind && topup.providerRef === session.id ? undefined : `session ${session.id} is not the top-up's (${topup.providerRef})`;
}

export const STRIPE_RAIL = {
  kind: 'stripe',
  title: 'Stripe Checkout',
  resolution: 'checkout',
  paymentMethod: 'checkout',
  ownerAction: 'pay at Stripe Checkout',
  create: (config: Config) => (config.payments.stripe ? new StripeCheckoutRail(config, config.payments.stripe) : undefined),
} as const satisfies RailModule;
