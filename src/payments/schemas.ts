// Payments' resources as every face shows them, registered once by the composition root: the Top-up
// request record.
import { Type, type TSchema } from '@sinclair/typebox';
import { Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import { RAIL_KINDS, RAILS } from './rails/index.ts';

/** The rails' names: a top-up's `provider`, and what /v1/integrations can report as configured. */
export { RAIL_KINDS };

const RESOLUTIONS = [...new Set(Object.values(RAILS).map((rail) => rail.resolution)), 'none'];

export const TopupSchema = Type.Object(
  {
    id: Type.String(),
    agentId: Type.String(),
    amountUsdCents: Type.Integer(),
    amountUc: Microcredits('the credit the top-up adds'),
    reason: Type.String(),
    status: Type.String({ enum: ['pending_approval', 'settled', 'declined', 'expired', 'failed'] }),
    kind: Type.Literal('checkout'),
    provider: Type.String({ enum: RAIL_KINDS }),
    approvalUrl: Type.String({ format: 'uri' }),
    checkoutUrl: Type.String({ format: 'uri' }),
    nextAction: Type.Object({
      resolution: Type.String({ enum: RESOLUTIONS, description: 'what must happen next: the owner approves on our page, pays at Checkout, or nothing (final)' }),
      actionUrl: Type.String({ format: 'uri' }),
    }),
    intentId: Nullable(Type.String()),
    livemode: Type.Boolean({ description: 'false: a test-mode payment (dev mode, or Stripe test keys)' }),
    lotId: Nullable(Type.String({ description: 'the credit lot of a settled top-up' })),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
    expiresAt: UnixSeconds('a pending top-up expires at'),
    finishedAt: Nullable(UnixSeconds('settled, declined, expired or failed at')),
  },
  { $id: 'Topup', description: 'Top-up request record' },
);

export const PAYMENT_SCHEMAS: TSchema[] = [TopupSchema];
