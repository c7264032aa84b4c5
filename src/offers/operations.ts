// The offer operations, for every face: create and change a merchant's offers.
import { Type, type Static } from '@sinclair/typebox';
import { Category, DisplayName, idOf, MerchantIdParams, Microcredits } from '../platform/schemas.ts';
import { parseUc, UC_DIGITS_MAX } from '../platform/money.ts';
import { inputOf, type SingleStepOperation } from '../platform/operations.ts';
import { REFUND_WINDOW_S_DEFAULT } from '../ledger/service.ts';
import { HOLD_LIFETIME_S_DEFAULT, HOLD_LIFETIME_S_MAX, HOLD_LIFETIME_S_MIN, REFUND_WINDOW_S_MAX, type Offer, type OfferService } from './service.ts';

const HoldLifetime = Type.Integer({ minimum: HOLD_LIFETIME_S_MIN, maximum: HOLD_LIFETIME_S_MAX, description: `seconds, ${HOLD_LIFETIME_S_MIN}–${HOLD_LIFETIME_S_MAX}; default ${HOLD_LIFETIME_S_DEFAULT}` });
/** The price: more than 0, which the offer's service checks (0 is 400 invalid_input naming the member: "body/priceUc must be positive"). */
const Price = () => Microcredits(`the price, more than 0: microcredits as a decimal string of at most ${UC_DIGITS_MAX} digits (0 is refused 400 invalid_input)`);
const RefundWindow = Type.Integer({ minimum: 0, maximum: REFUND_WINDOW_S_MAX, description: `seconds after capture, 0–${REFUND_WINDOW_S_MAX} (0: no refunds); default ${REFUND_WINDOW_S_DEFAULT} (30 days)` });
export const OfferCreate = Type.Object(
  {
    name: DisplayName(),
    category: Category,
    priceUc: Price(),
    active: Type.Optional(Type.Boolean({ default: true })),
    holdLifetimeS: Type.Optional(HoldLifetime),
    refundWindowS: Type.Optional(RefundWindow),
  },
  { additionalProperties: false, examples: [{ name: 'One e-book', category: 'books', priceUc: '2000000', holdLifetimeS: 900 }] },
);
export const OfferPatch = Type.Object(
  {
    name: Type.Optional(DisplayName()),
    priceUc: Type.Optional(Price()),
    active: Type.Optional(Type.Boolean()),
    holdLifetimeS: Type.Optional(HoldLifetime),
    refundWindowS: Type.Optional(RefundWindow),
  },
  { additionalProperties: false, minProperties: 1, examples: [{ priceUc: '2500000', active: false }] },
);
export const MerchantParams = MerchantIdParams;
export const OfferParams = Type.Object({ id: idOf('merchant (mer_…)'), offerId: idOf('offer (off_…)') });

const CreateOfferInput = inputOf(MerchantParams, OfferCreate);
const UpdateOfferInput = inputOf(OfferParams, OfferPatch);

export interface OfferOperations {
  createOffer: SingleStepOperation<Static<typeof CreateOfferInput>, Offer>;
  updateOffer: SingleStepOperation<Static<typeof UpdateOfferInput>, Offer>;
}

export function offerOperations(offers: OfferService): OfferOperations {
  return {
    createOffer: {
      name: 'createOffer',
      input: CreateOfferInput,
      idempotency: { key: 'required' },
      run: (tx, { principal, input: { id, ...offer } }) => offers.create(tx, principal, id, { ...offer, priceUc: parseUc(offer.priceUc) }),
    },
    updateOffer: {
      name: 'updateOffer',
      input: UpdateOfferInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input: { id, offerId, ...patch } }) =>
        offers.update(tx, principal, id, offerId, { ...patch, priceUc: patch.priceUc === undefined ? undefined : parseUc(patch.priceUc) }),
    },
  };
}
