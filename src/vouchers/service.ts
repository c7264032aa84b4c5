// Minting a voucher: one transaction takes the hold for an offer and signs an ES256 voucher JWT bound to
// the offer and the hold (`jti` = hold id, `aud` = the merchant, `exp` = the hold's deadline). Merchants
// verify it offline against the gateway's JWKS.
import type { LedgerService, Redemption } from '../ledger/service.ts';
import type { OfferService } from '../offers/service.ts';
import type { Settled } from '../platform/batcher.ts';
import type { Tx } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { formatUc, parseUc, type Microcredits } from '../platform/money.ts';

export const VOUCHER_TYP = 'voucher+jwt';

export interface MintResult {
  voucher: string;
  redemption: Redemption;
}

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

  /**
   * Mints many vouchers in one pass (group commit), each answered as if minted one by one in this order:
   * one statement reads the offers, LedgerService.holdMany takes every hold, then each voucher is signed.
   */
  async mintMany(tx: Tx, requests: readonly MintRequest[]): Promise<Array<Settled<MintResult>>> {
    const offers = await this.offers.sellableMany(tx, requests.map((request) => request.offerId));
    const outcomes: Array<Settled<MintResult> | undefined> = requests.map((request) => {
      const offer = offers.get(request.offerId);
      if (!offer) return { ok: false, error: new ApiError('invalid_input', { detail: `no active offer ${request.offerId} of a verified merchant` }) };
      if (request.maxUc !== undefined && offer.price_uc > request.maxUc) {
        return { ok: false, error: new ApiError('CAP_EXCEEDED', { detail: `the offer costs ${offer.price_uc} µc, more than your maxUc of ${request.maxUc} µc` }) };
      }
      return undefined;
    });
    const holding = requests.flatMap((request, index) => (outcomes[index] ? [] : [{ index, request, offer: offers.get(request.offerId)! }]));
    const holds = await this.ledger.holdMany(
      tx,
      holding.map(({ request, offer }) => ({
        agentId: request.agentId,
        acceptorId: offer.merchant_id,
        merchantId: offer.merchant_id,
        offerId: offer.id,
        category: offer.category,
        amountUc: offer.price_uc,
        lifetimeS: offer.hold_lifetime_s,
        refundWindowS: offer.refund_window_s,
      })),
    );
    for (const [position, { index, request, offer }] of holding.entries()) {
      const held = holds[position]!;
      if (!held.ok) {
        outcomes[index] = held;
        continue;
      }
      const redemption = held.value;
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
      outcomes[index] = { ok: true, value: { voucher, redemption } };
    }
    return outcomes as Array<Settled<MintResult>>;
  }
}
