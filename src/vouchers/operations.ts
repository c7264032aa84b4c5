// The voucher operations, for every face: take a hold for an offer and sign its voucher.
import { Type, type Static } from '@sinclair/typebox';
import type { Redemption } from '../ledger/service.ts';
import type { Microcredits as Uc } from '../platform/money.ts';
import { fingerprint } from '../platform/idempotency.ts';
import type { BatchedCall, SingleStepOperation } from '../platform/operations.ts';
import { Microcredits, ResourceId } from '../platform/schemas.ts';
import type { MintRequest, MintResult, VoucherService } from './service.ts';

export const MintVoucherInput = Type.Object(
  {
    offerId: ResourceId,
    maxUc: Type.Optional(Microcredits('the most the agent lets this hold take; above it the mint is refused with 402 CAP_EXCEEDED')),
    maxAmount: Type.Optional(Microcredits('the same limit under its older name; when both are sent they must be equal')),
  },
  { additionalProperties: false, examples: [{ offerId: 'off_yqkspmwv2yjtmylogwrpqif3ho', maxUc: '2000000' }] },
);

export type MintVoucherInput = Static<typeof MintVoucherInput>;

export interface VoucherOperations {
  mintVoucher: SingleStepOperation<MintVoucherInput, MintResult, Uc | undefined>;
}

/** The mint operation's name: its Idempotency-Keys are scoped to it, and a purchase approval names it. */
export const MINT_VOUCHER_OPERATION = 'mintVoucher';

/** One call of a mint batch, as the voucher service takes it: with its request's binding when it has a key. */
function mintRequest({ call: { principal, input }, checked: maxUc, key, trace }: BatchedCall<MintVoucherInput, Uc | undefined>): MintRequest {
  const binding = key && { ...key, operation: MINT_VOUCHER_OPERATION, fingerprint: fingerprint(MINT_VOUCHER_OPERATION, input) };
  return { agentId: principal.agentId!, offerId: input.offerId, maxUc, trace, ...(binding ? { binding } : {}) };
}

export function voucherOperations(vouchers: VoucherService): VoucherOperations {
  return {
    mintVoucher: {
      name: MINT_VOUCHER_OPERATION,
      input: MintVoucherInput,
      idempotency: { key: 'required' },
      check: ({ input }) => vouchers.checkMint(input),
      // Group commit: concurrent mints share a transaction; one agent's mints apply in arrival order.
      batch: {
        orderKey: ({ principal }) => principal.agentId!,
        readAhead: (tx, calls) => vouchers.readAhead(tx, calls.map(mintRequest)),
        runMany: (tx, calls, read) => vouchers.mintMany(tx, calls.map(mintRequest), read),
      },
    },
  };
}
