// The kill switch's operation, for every face: freeze an agent, optionally releasing and revoking the
// outstanding holds of its subtree (unfreezing is agent management's: it releases nothing back).
import { Type, type Static } from '@sinclair/typebox';
import { AgentIdParams } from '../platform/schemas.ts';
import { inputOf, type SingleStepOperation } from '../platform/operations.ts';
import type { FrozenAgent, RevocationService } from './service.ts';

export const FreezeBody = Type.Object(
  {
    releaseHolds: Type.Optional(
      Type.Boolean({
        default: false,
        description:
          'also release every outstanding hold of the agent and its delegates now (credit back to the lots, budgets given back) and ' +
          'revoke their vouchers: each holding merchant gets `voucher.revoked`, its revocations feed lists them, a capture answers 409 voucher_revoked. ' +
          'false (the default): the holds stay capturable by the merchants holding them; only new spending is refused',
      }),
    ),
  },
  { additionalProperties: false, examples: [{ releaseHolds: true }] },
);
export type FreezeBody = Static<typeof FreezeBody>;

const FreezeAgentInput = inputOf(AgentIdParams, FreezeBody);

export interface RevocationOperations {
  freezeAgent: SingleStepOperation<Static<typeof FreezeAgentInput>, FrozenAgent>;
}

/** Owner operations: the principal is a human or owner credential; another owner's agent is not found. */
/** `deliverSoon`: start delivering the webhooks just queued, without waiting for the worker's next poll. */
export function revocationOperations(revocations: RevocationService, deliverSoon: () => void): RevocationOperations {
  return {
    freezeAgent: {
      name: 'freezeAgent',
      input: FreezeAgentInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input }) => revocations.freeze(tx, principal, input.id, { releaseHolds: input.releaseHolds ?? false }),
      // Merchants holding a revoked voucher hear of it at once, not at the next delivery poll (up to 1 s later).
      committed: (frozen) => {
        if (frozen.freeze.merchants.length > 0) deliverSoon();
      },
    },
  };
}
