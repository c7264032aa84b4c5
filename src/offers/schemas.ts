// Offers as every face shows them, registered once by the composition root.
import { Type } from '@sinclair/typebox';
import { Microcredits, UnixSeconds } from '../platform/schemas.ts';

export const OfferSchema = Type.Object(
  {
    id: Type.String(),
    merchantId: Type.String(),
    name: Type.String(),
    category: Type.String(),
    priceUc: Microcredits('the hold a voucher for this offer takes'),
    active: Type.Boolean(),
    holdLifetimeS: Type.Integer({ description: 'seconds from minting until an uncaptured hold expires' }),
    refundWindowS: Type.Integer({ description: 'seconds after capture during which the merchant may refund; 0 = no refunds. A hold keeps the window of its mint.' }),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'Offer' },
);

export const OFFER_SCHEMAS = [OfferSchema];
