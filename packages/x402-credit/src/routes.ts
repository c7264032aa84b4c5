// A merchant's routes, checked where the merchant states them, by the rules each request is held to. x402's
// middlewares build a route's requirements only at its first request (@x402/express and @x402/hono 2.27), and no
// hook of x402's shows the scheme a route before that: a route that cannot be sold failed there (found from outside),
// with a bare 500 (a price this scheme refuses: finer than one microcredit, zero, unreadable; no offer; a payTo that is
// not this merchant), or with a 402 the agent could not pay (an offer the gateway does not sell: another merchant's,
// none of that id, inactive, or priced below the route; the gateway refused the agent's authorize). So the routes
// pass through `checkCreditRoutes` (the prices, synchronously) or `verifyCreditRoutes` (everything, asking the
// gateway for each offer) at start-up, and `paidTool` checks its price when the tool is wrapped; what still reaches
// x402 unchecked is refused at its request with the same words, by the same functions (server.ts).
import type { PaymentOption, RouteConfig, RoutesConfig } from '@x402/core/http';
import type { Price } from '@x402/core/types';
import { CREDIT_NETWORK, CREDIT_SCHEME } from './constants.js';
import { CreditError, refusalWords, type CreditErrorCode } from './errors.js';
import { CreditFacilitatorClient, type CreditFacilitatorOptions, type CreditOffer } from './facilitator.js';
import { parseCreditPrice } from './money.js';

/** How long a reading of an offer stands at request time: a change to the offer (deactivated, repriced) shows within it. */
const OFFER_READING_TTL_MS = 60_000;
/** The most offers whose readings are kept (a route names its offer in the merchant's configuration: a few). */
const OFFER_READINGS_MAX = 1_000;

/** Throws `invalid_price` naming `where` the price was stated (`route "GET /report"`, `tool "analyse"`) when this scheme cannot charge it. */
export function checkCreditPrice(where: string, price: Price): void {
  try {
    parseCreditPrice(price);
  } catch (error) {
    if (!(error instanceof CreditError)) throw error;
    throw new CreditError('invalid_price', `${where}: ${refusalWords(error)}`);
  }
}

/** The offer a payment option sells: its own (`extra: { offerId }`), else the merchant's; none is `invalid_offer`. */
export function offerIdOf(extra: Record<string, unknown> | undefined, merchantOfferId: string | undefined): string {
  const offerId = typeof extra?.offerId === 'string' && extra.offerId ? extra.offerId : merchantOfferId;
  if (!offerId) throw new CreditError('invalid_offer', 'no offer: pass offerId to the scheme, or extra: { offerId } in the payment option');
  return offerId;
}

/** The payee a payment option states (an empty one is the merchant): another merchant is `invalid_pay_to`, since only the payee's key settles. */
export function payToOf(payTo: string, merchantId: string): string {
  const payee = payTo.trim() === '' ? merchantId : payTo;
  if (payee !== merchantId) throw new CreditError('invalid_pay_to', `payTo ${payee} is not this merchant (${merchantId}): the gateway settles a payment only with its payee's key`);
  return payee;
}

/** What the gateway said of an offer: the offer, none of that id for this merchant, or nothing to go by (why). */
type OfferReading = { offer: CreditOffer } | { missing: true } | { unread: CreditError };

/**
 * The merchant's offers as the gateway reads them (`GET /v1/merchants/{id}/offers/{offerId}`, with the key's
 * `offers:read`), each reading kept {@link OFFER_READING_TTL_MS} and shared by the requests meanwhile, so a route's
 * offer costs the gateway one read a minute, not one a request.
 */
export class MerchantOffers {
  private readonly readings = new Map<string, { readAtMs: number; reading: Promise<OfferReading> }>();

  constructor(
    private readonly facilitator: CreditFacilitatorClient,
    private readonly merchantId: string,
  ) {}

  /**
   * Throws `invalid_offer` when the gateway sells no payment of `amountUc` µc (undefined: a price computed per request,
   * not compared) of `offerId` for this merchant: none of that id for it, an inactive one, one priced below. An offer
   * the gateway did not read (a key without `offers:read`, no answer) throws that refusal when `unread` is `'refuse'`
   * (start-up: nothing was checked), and passes when `'pass'` (a request: the gateway judges it when the agent pays).
   */
  async check(offerId: string, amountUc: string | undefined, unread: 'refuse' | 'pass'): Promise<void> {
    const reading = await this.read(offerId);
    if ('unread' in reading) {
      if (unread === 'pass') return;
      const { code, status, problem } = reading.unread;
      throw new CreditError(code, `offer ${offerId} could not be read to check it: ${refusalWords(reading.unread)}`, { status, problem, cause: reading.unread });
    }
    if ('missing' in reading) throw new CreditError('invalid_offer', `offer ${offerId} is not one of merchant ${this.merchantId}'s offers (the gateway has none of that id for it)`);
    const { offer } = reading;
    if (!offer.active) throw new CreditError('invalid_offer', `offer ${offerId} is not active: the gateway sells nothing of it`);
    if (amountUc !== undefined && BigInt(amountUc) > BigInt(offer.priceUc)) {
      throw new CreditError('invalid_offer', `the price, ${amountUc} µc, is more than offer ${offerId}'s price, ${offer.priceUc} µc, the most one payment of it may hold`);
    }
  }

  private read(offerId: string): Promise<OfferReading> {
    const nowMs = Date.now();
    const kept = this.readings.get(offerId);
    if (kept && nowMs - kept.readAtMs < OFFER_READING_TTL_MS) return kept.reading;
    this.readings.delete(offerId);
    const reading = this.facilitator.offer(this.merchantId, offerId).then(
      (offer): OfferReading => ({ offer }),
      (error: unknown): OfferReading => {
        // 404: none of that id for this merchant (another merchant's reads the same); 400: no offer id at all.
        if (error instanceof CreditError && (error.status === 404 || error.status === 400)) return { missing: true };
        return { unread: error instanceof CreditError ? error : new CreditError('gateway_unavailable', (error as Error).message, { cause: error }) };
      },
    );
    this.readings.set(offerId, { readAtMs: nowMs, reading });
    if (this.readings.size > OFFER_READINGS_MAX) this.readings.delete(this.readings.keys().next().value!);
    return reading;
  }
}

/** Each payment option of this scheme in the routes, with its route's pattern, as x402 reads a routes config. */
function creditOptionsOf(routes: RoutesConfig): Array<{ pattern: string; option: PaymentOption }> {
  // x402's own reading of a routes config: one route config (it has `accepts`) protects every path.
  const entries: Array<[string, RouteConfig]> = 'accepts' in routes ? [['*', routes as RouteConfig]] : Object.entries(routes as Record<string, RouteConfig>);
  return entries.flatMap(([pattern, route]) =>
    ([] as PaymentOption[])
      .concat(route.accepts)
      .filter((option) => option.scheme === CREDIT_SCHEME && option.network === CREDIT_NETWORK)
      .map((option) => ({ pattern, option })),
  );
}

/** A refusal's words, naming the route; anything but a refusal is thrown on. */
function routeRefusal(pattern: string, error: unknown): string {
  if (!(error instanceof CreditError)) throw error;
  return `route "${pattern}": ${refusalWords(error)}`;
}

/** Throws one `code` naming every refused route, if any. */
function refuseRoutes(code: CreditErrorCode, refusals: ReadonlyArray<string | undefined>): void {
  const named = refusals.filter((refusal): refusal is string => refusal !== undefined);
  if (named.length > 0) throw new CreditError(code, named.join('; '));
}

/**
 * Checks the credit prices of x402 routes as the merchant states them, and returns the routes unchanged: a price
 * this scheme refuses throws `CreditError('invalid_price')` naming each such route and its price, where the app
 * starts, instead of failing the route's first request. A price x402 computes per request (a function) is checked
 * when x402 asks for it. Use it where the routes go to x402:
 * `paymentMiddleware(checkCreditRoutes({ 'GET /report': { accepts } }), creditResourceServer(merchant))`.
 * {@link verifyCreditRoutes} checks the rest, asking the gateway.
 */
export function checkCreditRoutes<Routes extends RoutesConfig>(routes: Routes): Routes {
  refuseRoutes(
    'invalid_price',
    creditOptionsOf(routes).map(({ pattern, option }) => {
      if (typeof option.price === 'function') return undefined;
      try {
        parseCreditPrice(option.price);
        return undefined;
      } catch (error) {
        return routeRefusal(pattern, error);
      }
    }),
  );
  return routes;
}

/** What {@link verifyCreditRoutes} needs: the merchant's settings, as {@link creditResourceServer} takes them. */
export interface VerifyRoutesOptions extends CreditFacilitatorOptions {
  /** Your merchant id: every route's `payTo`, and whose offers the routes sell. */
  merchantId: string;
  /** The offer a route sells when its payment option names none (`extra: { offerId }`). */
  offerId?: string;
}

/**
 * Checks x402 routes as each request will hold them, at start-up, and returns them unchanged: their prices (as
 * {@link checkCreditRoutes}, `invalid_price`), then their `payTo` (this merchant, `invalid_pay_to`), then their offers
 * as the gateway has them (`invalid_offer`: none named, not one of this merchant's, inactive, or priced below the
 * route). Each step throws one `CreditError` naming every route it refused. The offers are read with the merchant
 * key, which needs `offers:read` for it: an offer the gateway did not read throws that refusal (`scope_required`,
 * `gateway_unavailable`), since nothing was checked. A price or `payTo` x402 computes per request (a function) is
 * checked when x402 asks for it. Use it where the routes go to x402, with the settings of `creditResourceServer`:
 * `paymentMiddleware(await verifyCreditRoutes(routes, merchant), creditResourceServer(merchant))`.
 */
export async function verifyCreditRoutes<Routes extends RoutesConfig>(routes: Routes, merchant: VerifyRoutesOptions): Promise<Routes> {
  checkCreditRoutes(routes);
  const options = creditOptionsOf(routes);
  refuseRoutes(
    'invalid_pay_to',
    options.map(({ pattern, option }) => {
      if (typeof option.payTo !== 'string') return undefined;
      try {
        payToOf(option.payTo, merchant.merchantId);
        return undefined;
      } catch (error) {
        return routeRefusal(pattern, error);
      }
    }),
  );
  const offers = new MerchantOffers(new CreditFacilitatorClient(merchant), merchant.merchantId);
  const refusals = await Promise.all(
    options.map(async ({ pattern, option }) => {
      try {
        const amountUc = typeof option.price === 'function' ? undefined : parseCreditPrice(option.price).amount;
        await offers.check(offerIdOf(option.extra, merchant.offerId), amountUc, 'refuse');
        return undefined;
      } catch (error) {
        if (error instanceof CreditError && error.code !== 'invalid_offer') throw error;
        return routeRefusal(pattern, error);
      }
    }),
  );
  refuseRoutes('invalid_offer', refusals);
  return routes;
}
