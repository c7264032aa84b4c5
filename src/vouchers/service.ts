// Minting a voucher: one transaction takes the hold for an offer and signs an ES256 voucher JWT bound to
// the offer and the hold (`jti` = hold id, `aud` = the merchant, `exp` = the hold's deadline). Merchants
// verify it offline against the gateway's JWKS.
import type { LedgerService, Redemption } from '../ledger/service.ts';
import type { OfferService } from '../offers/service.ts';
import type { Tx } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { formatUc, parseUc, type Microcredits } from '../platform/money.ts';

export const VOUCHER_TYP = 'voucher+jwt';

export interface MintRequest {
  agentId: string;
  offerId: string;
  maxUc?: Microcredits;
}

/** The agent's ceiling as sent: `maxUc`, or `maxAmount`, its older name. */
export interface MintLimits {
  maxUc?: string;
  maxAmount?: string;
}

export class VoucherService {
  constructor(
    private readonly gateway: Gateway,
    private readonly ledger: LedgerService,
    private readonly offers: OfferService,
  ) {}

  /**
   * The rules a mint checks before its Idempotency-Key is claimed (a refusal here is as if never sent):
   * `maxUc` and `maxAmount` are one limit, and a voucher needs a signing key. Returns the ceiling.
   */
  checkMint(limits: MintLimits): Microcredits | undefined {
    if (limits.maxUc !== undefined && limits.maxAmount !== undefined && limits.maxUc !== limits.maxAmount) {
      throw new ApiError('invalid_input', { detail: 'maxUc and maxAmount are the same limit; send one, or equal values' });
    }
    if (!this.gateway.signing.configured) throw new ApiError('signing_configuration_required', { detail: 'set ACG_SIGNING_KEY' });
    const max = limits.maxUc ?? limits.maxAmount;
    return max === undefined ? undefined : parseUc(max);
  }

  /** Takes, for a batch of mints, the locks their holds take first (see LedgerService.lockAgents). */
  lockAgents(tx: Tx, agentIds: readonly string[]): Promise<void> {
    return this.ledger.lockAgents(tx, agentIds);
  }

  async mint(tx: Tx, request: MintRequest): Promise<{ voucher: string; redemption: Redemption }> {
    const offer = await this.offers.sellable(tx, request.offerId);
    if (!offer) throw new ApiError('invalid_input', { detail: `no active offer ${request.offerId} of a verified merchant` });
    if (request.maxUc !== undefined && offer.price_uc > request.maxUc) {
      throw new ApiError('CAP_EXCEEDED', { detail: `the offer costs ${offer.price_uc} µc, more than your maxUc of ${request.maxUc} µc` });
    }
    const redemption = await this.ledger.hold(tx, {
      agentId: request.agentId,
      acceptorId: offer.merchant_id,
      merchantId: offer.merchant_id,
      offerId: offer.id,
      category: offer.category,
      amountUc: offer.price_uc,
      lifetimeS: offer.hold_lifetime_s,
      refundWindowS: offer.refund_window_s,
    });
    const voucher = await this.gateway.signing.sign(
      {
        iss: this.gateway.config.baseUrl,
        aud: offer.merchant_id,
        sub: request.agentId,
        jti: redemption.id,
        iat: redemption.createdAt,
        exp: redemption.expiresAt,
        offer_id: offer.id,
        category: offer.category,
        amount_uc: formatUc(offer.price_uc),
      },
      VOUCHER_TYP,
    );
    return { voucher, redemption };
  }
}
