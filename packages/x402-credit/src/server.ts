// The merchant's side: a SchemeNetworkServer for x402's resource server (@x402/express, @x402/hono, the
// MCP wrapper), the gateway as its facilitator. It turns a price into this scheme's requirements for the
// merchant's offer, states the resource each request protects (`extra.resource`, from the request's URL,
// automatically), coalesces repeats of one payment (single flight), and releases the hold (`amount: "0"`)
// when the handler fails, so the agent's credit comes back at once instead of at the hold's expiry.
import { x402ResourceServer, type FacilitatorClient } from '@x402/core/server';
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
import { CREDIT_ASSET, CREDIT_BINDING_VERSION, CREDIT_NETWORK, CREDIT_SCHEME, USD_DECIMALS } from './constants.js';
import { CreditError } from './errors.js';
import { creditFacilitator, type CreditFacilitatorOptions } from './facilitator.js';
import { parseCreditPrice } from './money.js';
import { authorityOf, isCreditRequirements } from './requirements.js';
import { SingleFlight, type SingleFlightOptions } from './single-flight.js';

export interface CreditSchemeServerOptions {
  /** The gateway's base URL: `extra.authority`, the attestations' `iss`, the facilitator at `{gatewayUrl}/x402`. */
  gatewayUrl: string;
  /** Your merchant id: `payTo`, and the attestations' `aud`. */
  merchantId: string;
  /** The offer a route sells when its payment option names none (`extra: { offerId }` names one per route). */
  offerId?: string;
  /**
   * The facilitator to release holds through when a handler fails (default: none, and a failed request's hold
   * lapses at its expiry). {@link creditResourceServer} passes the gateway's.
   */
  facilitator?: FacilitatorClient;
  /** Release the hold (settle `amount: "0"`) when the handler throws or answers ≥ 400 (default true with a facilitator). */
  releaseOnFailure?: boolean;
  /**
   * The origin the resource URLs are stated with (e.g. https://api.example.com), instead of the one the request
   * names in its Host header. Set it behind a proxy, or whenever the Host header is not yours to trust.
   */
  resourceOrigin?: string;
  /** Single flight per attestation (default on, with its defaults); `false` turns it off. */
  singleFlight?: SingleFlightOptions | SingleFlight | false;
  /** Told of a release that failed (default: a process warning); the hold then lapses at its expiry. */
  onError?: (error: unknown) => void;
}

/** The one payment flow: verify before the handler, settle (capture) after it, as x402's `authorization` flow. */
const PAYMENT_FLOWS: Readonly<Record<string, PaymentFlowConfig>> = { default: { supported: ['authorization'], default: 'authorization' } };

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

  constructor(private readonly options: CreditSchemeServerOptions) {
    this.authority = authorityOf(options.gatewayUrl);
    if (!options.merchantId) throw new TypeError('merchantId is required');
    this.resourceOrigin = options.resourceOrigin === undefined ? undefined : new URL(options.resourceOrigin).origin;
    const singleFlight = options.singleFlight;
    this.singleFlight = singleFlight === false ? undefined : singleFlight instanceof SingleFlight ? singleFlight : new SingleFlight(singleFlight);
    const hooks = this.singleFlight?.hooks;
    this.schemeHooks = {
      ...hooks,
      onVerifiedPaymentCanceled: async (context) => {
        await hooks?.onVerifiedPaymentCanceled(context);
        await this.release(context);
      },
    };
  }

  async parsePrice(price: Price, network: Network): Promise<AssetAmount> {
    if (network !== CREDIT_NETWORK) throw new CreditError('invalid_price', `this scheme prices on ${CREDIT_NETWORK}, not ${network}`);
    return parseCreditPrice(price);
  }

  /** A microcredit is 10⁻⁸ dollar: a `$0.003` settlement override charges 300000 µc. */
  getAssetDecimals(asset: string): number | undefined {
    return asset === CREDIT_ASSET ? USD_DECIMALS : undefined;
  }

  /** payTo is the merchant id; `extra` carries the binding version, the authority and the offer. */
  async enhancePaymentRequirements(requirements: PaymentRequirements, supportedKind: SupportedKind): Promise<PaymentRequirements> {
    const extra = requirements.extra ?? {};
    const offerId = typeof extra.offerId === 'string' && extra.offerId ? extra.offerId : this.options.offerId;
    if (!offerId) throw new CreditError('invalid_price', 'no offer: pass offerId to the scheme, or extra: { offerId } in the payment option');
    const payTo = requirements.payTo.trim() === '' ? this.options.merchantId : requirements.payTo;
    if (payTo !== this.options.merchantId) throw new CreditError('invalid_price', `payTo ${payTo} is not this merchant (${this.options.merchantId})`);
    const advertised = supportedKind.extra?.authority;
    if (typeof advertised === 'string' && authorityOf(advertised) !== this.authority) {
      throw new CreditError('authority_not_trusted', `the facilitator speaks for ${advertised}, not ${this.authority}`);
    }
    return {
      ...requirements,
      payTo,
      extra: { ...extra, version: CREDIT_BINDING_VERSION, authority: this.authority, offerId },
    };
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
   * After a settle the gateway refused for good (an override above what was authorized, one it cannot read), the
   * agent is told 402 and is not charged: its hold goes back at once rather than at its expiry (found from outside:
   * it stayed held for the offer's hold lifetime). A settle the gateway never answered (`gateway_unavailable`) keeps
   * the hold: the agent presents the same payment again, and it is served once the gateway answers.
   */
  async releaseAfterFailedSettle(context: SettleFailureContext): Promise<void> {
    if (context.requirements.network !== CREDIT_NETWORK || context.requirements.amount === '0') return;
    if (context.error instanceof CreditError && context.error.code === 'gateway_unavailable') return;
    await this.release(context);
  }

  /** Settles `amount: "0"`: the hold goes back to the agent (the handler failed; nothing was served). */
  private async release(context: SettleContext): Promise<void> {
    const facilitator = this.options.facilitator;
    if (!facilitator || this.options.releaseOnFailure === false) return;
    // A repeat answered from a kept response ran nothing; a rerun's payment may be captured, and stays open.
    if (this.singleFlight?.isRepeat(context.paymentPayload) || this.singleFlight?.isRerun(context.paymentPayload)) return;
    try {
      const payload = context.paymentPayload as Parameters<FacilitatorClient['settle']>[0];
      const released = await facilitator.settle(payload, { ...(context.requirements as PaymentRequirements), amount: '0' });
      if (!released.success) throw new Error(`the gateway refused the release: ${released.errorReason ?? 'unknown'} ${released.errorMessage ?? ''}`.trim());
    } catch (error) {
      (this.options.onError ?? ((failure) => process.emitWarning(`x402-credit: a hold could not be released: ${(failure as Error).message}`)))(error);
    }
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
