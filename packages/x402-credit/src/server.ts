// The merchant's side: a SchemeNetworkServer for x402's resource server (@x402/express, @x402/hono, the
// MCP wrapper), the gateway as its facilitator. It turns a price into this scheme's requirements for the
// merchant's offer, states the resource each request protects (`extra.resource`, from the request's URL,
// automatically), coalesces repeats of one payment (single flight), and releases the hold (`amount: "0"`) of a
// payment that serves nothing (the handler failed, the tool refused its arguments, the presentation came past its
// window), so the agent's credit comes back at once instead of at the hold's expiry. A settlement
// override x402 would not settle exactly is refused before the settle, and a route that cannot be sold (its price,
// its payTo, its offer: routes.ts) is refused with words the request's answer carries.
import { FacilitatorResponseError, SETTLEMENT_OVERRIDES_HEADER, x402ResourceServer, type FacilitatorClient } from '@x402/core/server';
import type {
  AssetAmount,
  Network,
  PaymentFlowConfig,
  PaymentRequirements,
  Price,
  ResourceInfo,
  SchemeNetworkServer,
  SchemePaymentRequiredContext,
  SchemeServerHooks,
  SupportedKind,
  SettleContext,
  SettleFailureContext,
  VerifiedPaymentCanceledContext,
} from '@x402/core/types';
import { SettleError } from '@x402/core/types';
import { CREDIT_ASSET, CREDIT_BINDING_VERSION, CREDIT_NETWORK, CREDIT_SCHEME, USD_DECIMALS } from './constants.js';
import { CreditError, refusalWords } from './errors.js';
import { CreditFacilitatorClient, creditFacilitator, type CreditFacilitatorOptions } from './facilitator.js';
import { amountUcText, parseCreditPrice, settlementOverrideUc } from './money.js';
import { authorityOf, isCreditRequirements } from './requirements.js';
import { MerchantOffers, offerIdOf, payToOf } from './routes.js';
import { headerOf, SingleFlight, type SingleFlightOptions } from './single-flight.js';

export interface CreditSchemeServerOptions {
  /** The gateway's base URL: `extra.authority`, the attestations' `iss`, the facilitator at `{gatewayUrl}/x402`. */
  gatewayUrl: string;
  /** Your merchant id: `payTo`, and the attestations' `aud`. */
  merchantId: string;
  /** The offer a route sells when its payment option names none (`extra: { offerId }` names one per route). */
  offerId?: string;
  /**
   * The facilitator to release holds through when a handler fails (default: none, and a failed request's hold
   * lapses at its expiry). {@link creditResourceServer} passes the gateway's. A {@link CreditFacilitatorClient} also
   * reads each route's offer, so that a route naming one the gateway does not sell answers 502, not a 402 no agent can pay.
   */
  facilitator?: FacilitatorClient;
  /**
   * Release the hold (settle `amount: "0"`) of a payment that serves nothing: the handler throws or answers ≥ 400 (a
   * tool's `isError`, or its arguments refused), the attestation came past its presentation window, or the gateway
   * refused the settle for good (default true with a facilitator).
   */
  releaseOnFailure?: boolean;
  /**
   * The origin the resource URLs are stated with (e.g. https://api.example.com), instead of the one the request
   * names in its Host header. Set it behind a proxy, or whenever the Host header is not yours to trust.
   */
  resourceOrigin?: string;
  /** Single flight per attestation (default on, with its defaults); `false` turns it off. */
  singleFlight?: SingleFlightOptions | SingleFlight | false;
  /**
   * Told of a settlement override refused (a `CreditError` `invalid_price`: the agent was answered 402, nothing
   * charged), of a route that cannot be sold (`invalid_price`, `invalid_pay_to`, `invalid_offer`: the request was
   * answered 502, nothing charged) and of a release that failed (the hold then lapses at its expiry). Default: a
   * process warning.
   */
  onError?: (error: unknown) => void;
}

/** The gateway's verify reason for an attestation past its presentation window (its hold still held, or `hold_expired`). */
const ATTESTATION_EXPIRED = 'attestation_expired';

/** The one payment flow: verify before the handler, settle (capture) after it, as x402's `authorization` flow. */
const PAYMENT_FLOWS: Readonly<Record<string, PaymentFlowConfig>> = { default: { supported: ['authorization'], default: 'authorization' } };

/**
 * A settlement override this scheme refused before the settle: x402's `onSettleFailure` hooks get it (the gateway was
 * never asked, so the hold is released even when x402 read the override as "0"), and the agent a 402 with its reason.
 */
class SettlementOverrideRefused extends SettleError {
  constructor(readonly refusal: CreditError, network: Network) {
    super(400, { success: false, errorReason: refusal.code, errorMessage: refusalWords(refusal), transaction: '', network });
  }
}

/**
 * A route this scheme cannot sell, found when x402 built the route's requirements (with @x402/express and
 * @x402/hono 2.27, at each request): its price, its payTo or its offer, the merchant's configuration to fix, which
 * `checkCreditRoutes` and `verifyCreditRoutes` find at start-up. x402's middlewares answer any other error 500
 * "Internal Server Error", which says nothing; this one, as x402's FacilitatorResponseError (the payment side of the
 * server failed), 502 with its message, so the answer names the misconfiguration. Never a 402: there is nothing the
 * agent could pay.
 */
class RouteMisconfigured extends FacilitatorResponseError {
  readonly code: string;

  constructor(readonly refusal: CreditError) {
    super(`this route is misconfigured: ${refusal.message}`);
    this.code = refusal.code;
  }
}

/** A settlement override's amount as x402's HTTP transports hand it to the settle: the `Settlement-Overrides` response header's JSON. */
function overrideAmountOf(transportContext: unknown): string | undefined {
  const header = headerOf((transportContext as { responseHeaders?: Record<string, string> } | undefined)?.responseHeaders, SETTLEMENT_OVERRIDES_HEADER.toLowerCase());
  if (header === undefined) return undefined;
  try {
    const amount = (JSON.parse(header) as { amount?: unknown } | null)?.amount;
    return typeof amount === 'string' ? amount : undefined;
  } catch {
    return undefined;
  }
}

/** A URL's path and query on another origin. */
function onOrigin(url: string, origin: string): string {
  const parsed = new URL(url);
  return `${origin}${parsed.pathname}${parsed.search}`;
}

/**
 * Agent credit as an x402 server scheme. Register it with the gateway as facilitator, or let
 * {@link creditResourceServer} do both.
 */
export class CreditSchemeServer implements SchemeNetworkServer {
  readonly scheme = CREDIT_SCHEME;
  readonly defaultAssetTransferMethod = 'default';
  readonly paymentFlows = PAYMENT_FLOWS;
  readonly schemeHooks: SchemeServerHooks;
  readonly authority: string;
  /** The coalescer of repeats (undefined when turned off). */
  readonly singleFlight: SingleFlight | undefined;
  private readonly resourceOrigin: string | undefined;
  /** The merchant's offers as the gateway reads them, when the facilitator is the gateway's client. */
  private readonly offers: MerchantOffers | undefined;

  constructor(private readonly options: CreditSchemeServerOptions) {
    this.authority = authorityOf(options.gatewayUrl);
    if (!options.merchantId) throw new TypeError('merchantId is required');
    this.resourceOrigin = options.resourceOrigin === undefined ? undefined : new URL(options.resourceOrigin).origin;
    this.offers = options.facilitator instanceof CreditFacilitatorClient ? new MerchantOffers(options.facilitator, options.merchantId) : undefined;
    const singleFlight = options.singleFlight;
    this.singleFlight = singleFlight === false ? undefined : singleFlight instanceof SingleFlight ? singleFlight : new SingleFlight(singleFlight);
    const hooks = this.singleFlight?.hooks;
    this.schemeHooks = {
      ...hooks,
      onAfterVerify: async (context) => {
        const directive = await hooks?.onAfterVerify(context);
        // Its presentation window passed: the attestation can never be presented again, so its hold would only wait
        // for its deadline. Released, unless the gateway already expired the hold (it then answers hold_expired).
        if (!context.result.isValid && context.result.invalidReason === ATTESTATION_EXPIRED) await this.release(context);
        return directive;
      },
      onVerifiedPaymentCanceled: async (context) => {
        await hooks?.onVerifiedPaymentCanceled(context);
        await this.release(context);
      },
    };
  }

  /**
   * A route's price in microcredits, as x402 asks for it when it builds the route's requirements. One this scheme
   * cannot charge is refused ({@link misconfigured}: 502 naming it).
   */
  async parsePrice(price: Price, network: Network): Promise<AssetAmount> {
    try {
      if (network !== CREDIT_NETWORK) throw new CreditError('invalid_price', `this scheme prices on ${CREDIT_NETWORK}, not ${network}`);
      return parseCreditPrice(price);
    } catch (error) {
      throw this.misconfigured(error);
    }
  }

  /** A microcredit is 10⁻⁸ dollar: a `$0.003` settlement override charges 300000 µc. */
  getAssetDecimals(asset: string): number | undefined {
    return asset === CREDIT_ASSET ? USD_DECIMALS : undefined;
  }

  /**
   * payTo is the merchant id; `extra` carries the binding version, the authority and the offer. A route that cannot
   * be sold is refused ({@link misconfigured}: 502 naming it), by the rules `verifyCreditRoutes` checks at start-up:
   * no offer, a payTo that is not this merchant, an offer the gateway does not sell at the price (read through a
   * {@link CreditFacilitatorClient}; one it did not read is left to the gateway, when the agent pays).
   */
  async enhancePaymentRequirements(requirements: PaymentRequirements, supportedKind: SupportedKind): Promise<PaymentRequirements> {
    try {
      const extra = requirements.extra ?? {};
      const offerId = offerIdOf(extra, this.options.offerId);
      const payTo = payToOf(requirements.payTo, this.options.merchantId);
      const advertised = supportedKind.extra?.authority;
      if (typeof advertised === 'string' && authorityOf(advertised) !== this.authority) {
        throw new CreditError('authority_not_trusted', `the facilitator speaks for ${advertised}, not ${this.authority}`);
      }
      await this.offers?.check(offerId, requirements.amount, 'pass');
      return {
        ...requirements,
        payTo,
        extra: { ...extra, version: CREDIT_BINDING_VERSION, authority: this.authority, offerId },
      };
    } catch (error) {
      throw this.misconfigured(error);
    }
  }

  /**
   * The one answer to a route this scheme cannot sell, found as x402 builds its requirements: the refusal is told to
   * `onError` (x402 logs nothing of it) and answered as {@link RouteMisconfigured}, 502 naming it. Anything but a
   * refusal is returned as it is.
   */
  private misconfigured(error: unknown): unknown {
    if (!(error instanceof CreditError)) return error;
    this.report(error, 'a route cannot be sold');
    return new RouteMisconfigured(error);
  }

  /** Refuses, at initialize(), a facilitator that is another gateway than the one configured. */
  validateFacilitatorSupport(_network: Network, supportedKind: SupportedKind): string | void {
    const advertised = supportedKind.extra?.authority;
    if (typeof advertised !== 'string') return `the facilitator does not name its authority; expected ${this.authority}`;
    if (authorityOf(advertised) !== this.authority) return `the facilitator speaks for ${advertised}, not ${this.authority}`;
  }

  /**
   * States the resource each 402 is for (`extra.resource`): the URL x402's transport reports for the request
   * (the route's `resource` when the route config sets one), on `resourceOrigin` when configured. The paid
   * request's requirements are built the same way, so an attestation bought for one URL matches only there.
   */
  async enrichPaymentRequiredResponse(context: SchemePaymentRequiredContext): Promise<PaymentRequirements[]> {
    const resource = this.resourceUrl(context.resourceInfo);
    return context.requirements.map((requirements) =>
      isCreditRequirements(requirements) && requirements.extra?.resource === undefined ? { ...requirements, extra: { ...requirements.extra, resource } } : requirements,
    );
  }

  /** The resource URL stated for a request. */
  resourceUrl(resourceInfo: ResourceInfo): string {
    return this.resourceOrigin === undefined || !/^https?:/i.test(resourceInfo.url) ? resourceInfo.url : onOrigin(resourceInfo.url, this.resourceOrigin);
  }

  /**
   * The settle's last step before x402 sends it: an amount a settlement override set (`setSettlementOverrides` of
   * @x402/express or @x402/hono) must be what the merchant wrote, exactly. x402 converts it before any hook sees
   * it, dropping a dollar amount's digits past the eighth, rounding a share down, and passing other text on as µc:
   * `$0.0000000001` settled "0", a release that served the request free, and `0.005` was read as µc (found from
   * outside, bb118). An override {@link settlementOverrideUc} refuses, or one x402 converted to another amount, is
   * refused here with its `invalid_price` (parseCreditPrice's wording): the gateway is not asked, the agent gets a
   * 402, x402's `onSettleFailure` hooks get the refusal (creditResourceServer's releases the hold) and `onError` the
   * CreditError. It adds nothing to the payload. A property: x402 calls it unbound.
   */
  readonly enrichSettlementPayload = async (context: SettleContext): Promise<undefined> => {
    const override = overrideAmountOf(context.transportContext);
    if (override === undefined) return undefined;
    try {
      const amountUc = settlementOverrideUc(override, context.paymentPayload.accepted.amount);
      const settlingUc = amountUcText(context.requirements.amount, `the amount x402 made of the settlement override ${override}`);
      if (settlingUc !== amountUc) throw new CreditError('invalid_price', `x402 made ${settlingUc} µc of the settlement override ${override}, not ${amountUc} µc`);
    } catch (error) {
      if (!(error instanceof CreditError)) throw error;
      this.report(error, 'a settlement override was refused');
      throw new SettlementOverrideRefused(error, context.requirements.network);
    }
    return undefined;
  };

  /**
   * After a settle the gateway refused for good (an override above what was authorized, one it cannot read), the
   * agent is told 402 and is not charged: its hold goes back at once rather than at its expiry (found from outside:
   * it stayed held for the offer's hold lifetime), and so does one refused before it was sent (a settlement override
   * not settled exactly, whatever x402 made of it). A release the gateway refused is not sent again. A settle the
   * gateway never answered (`gateway_unavailable`) keeps the hold: the agent presents the same payment again, and it
   * is served once the gateway answers.
   */
  async releaseAfterFailedSettle(context: SettleFailureContext): Promise<void> {
    if (context.requirements.network !== CREDIT_NETWORK) return;
    if (context.requirements.amount === '0' && !(context.error instanceof SettlementOverrideRefused)) return;
    if (context.error instanceof CreditError && context.error.code === 'gateway_unavailable') return;
    await this.release(context);
  }

  /**
   * Settles `amount: "0"`: the hold goes back to the agent, who is not charged. The one way every outcome that serves
   * nothing gives the credit back: a verified payment the handler or the tool's arguments did not serve (x402's
   * cancel), a settle refused for good, a presentation past its window.
   */
  private async release(context: Pick<SettleContext, 'paymentPayload' | 'requirements'>): Promise<void> {
    const facilitator = this.options.facilitator;
    if (!facilitator || this.options.releaseOnFailure === false) return;
    // A repeat answered from a kept response ran nothing; a rerun's payment may be captured, and stays open.
    if (this.singleFlight?.isRepeat(context.paymentPayload) || this.singleFlight?.isRerun(context.paymentPayload)) return;
    try {
      const payload = context.paymentPayload as Parameters<FacilitatorClient['settle']>[0];
      const released = await facilitator.settle(payload, { ...(context.requirements as PaymentRequirements), amount: '0' });
      if (!released.success) throw new Error(`the gateway refused the release: ${released.errorReason ?? 'unknown'} ${released.errorMessage ?? ''}`.trim());
    } catch (error) {
      this.report(error, 'a hold could not be released');
    }
  }

  /** Tells `onError`, or else warns. */
  private report(error: unknown, what: string): void {
    if (this.options.onError) return this.options.onError(error);
    process.emitWarning(`x402-credit: ${what}: ${(error as Error).message}`);
  }
}

export interface CreditResourceServerOptions extends Omit<CreditSchemeServerOptions, 'facilitator'>, Omit<CreditFacilitatorOptions, 'gatewayUrl' | 'merchantId'> {}

/**
 * An x402ResourceServer that takes agent credit: the gateway as facilitator (with the merchant key), this
 * scheme registered on {@link CREDIT_NETWORK}, single flight and release on failure on. Hand it to
 * `paymentMiddleware` of @x402/express or @x402/hono.
 */
export function creditResourceServer(options: CreditResourceServerOptions): x402ResourceServer {
  const facilitator = creditFacilitator(options);
  const scheme = new CreditSchemeServer({ ...options, facilitator });
  return new x402ResourceServer(facilitator).register(CREDIT_NETWORK, scheme).onSettleFailure((context) => scheme.releaseAfterFailedSettle(context));
}
