// Stripe's notifications about Checkout Sessions, verified with the official library (Stripe-Signature:
// HMAC-SHA256 of `{t}.{raw body}` under the endpoint secret, 300 s tolerance). Which event does what:
//   checkout.session.completed              settle when payment_status is `paid` (a delayed method stays pending)
//   checkout.session.async_payment_succeeded settle
//   checkout.session.async_payment_failed    failed
//   checkout.session.expired                 expired
// Every other event is acknowledged and ignored. The session must be the top-up's own (id, amount and
// currency), or nothing is credited. Duplicates and any order are harmless: see PaymentsService.settle.
import type Stripe from 'stripe';
import { ApiError } from '../platform/errors.ts';
import { stripeClient } from './providers.ts';
import type { PaymentsService } from './service.ts';
import type { TopupRow } from './store.ts';

export const STRIPE_SIGNATURE_HEADER = 'stripe-signature';

export class StripeWebhook {
  private readonly stripe: Stripe;

  constructor(
    private readonly payments: PaymentsService,
    private readonly settings: { secretKey: string; webhookSecret: string; apiUrl: string },
  ) {
    this.stripe = stripeClient(settings.secretKey, settings.apiUrl);
  }

  /** Verifies and applies one delivery; 400 invalid_input when the signature does not hold. */
  async receive(rawBody: Buffer, signature: string | string[] | undefined): Promise<{ received: true; outcome: string }> {
    let event: Stripe.Event;
    try {
      if (typeof signature !== 'string') throw new Error('no Stripe-Signature header');
      event = await this.stripe.webhooks.constructEventAsync(rawBody, signature, this.settings.webhookSecret);
    } catch (error) {
      throw new ApiError('invalid_input', { detail: `the Stripe signature does not verify: ${(error as Error).message}` });
    }
    return { received: true, outcome: await this.apply(event) };
  }

  private async apply(event: Stripe.Event): Promise<string> {
    switch (event.type) {
      case 'checkout.session.completed':
        if (event.data.object.payment_status !== 'paid') return 'awaiting_payment';
        return this.settle(event.data.object, event.id);
      case 'checkout.session.async_payment_succeeded':
        return this.settle(event.data.object, event.id);
      case 'checkout.session.async_payment_failed':
        return this.closeFor(event.data.object, 'failed', event.id);
      case 'checkout.session.expired':
        return this.closeFor(event.data.object, 'expired', event.id);
      default:
        return 'ignored';
    }
  }

  private async settle(session: Stripe.Checkout.Session, eventId: string): Promise<string> {
    const topupId = session.client_reference_id ?? session.metadata?.topupId;
    if (!topupId) return 'ignored';
    return this.payments.settle(topupId, `stripe:${eventId}`, (row) => {
      const other = otherSession(row, session);
      if (other) return other;
      if (session.amount_total !== row.amount_usd_cents || session.currency !== 'usd') {
        return `session amount ${session.amount_total} ${session.currency} differs from the top-up's ${row.amount_usd_cents} usd`;
      }
      return undefined;
    });
  }

  private async closeFor(session: Stripe.Checkout.Session, status: 'failed' | 'expired', eventId: string): Promise<string> {
    const topupId = session.client_reference_id ?? session.metadata?.topupId;
    if (!topupId) return 'ignored';
    return this.payments.close(topupId, status, `stripe:${eventId}`, (row) => otherSession(row, session));
  }
}

function otherSession(row: TopupRow, session: Stripe.Checkout.Session): string | undefined {
  return row.provider === 'stripe' && row.provider_ref === session.id ? undefined : `session ${session.id} is not the top-up's (${row.provider_ref})`;
}
