// The x402 facilitator's writes, for every face: authorize (a mint, in the voucher mint's group commit) and
// settle (a capture or a release, in the ledger's). Verify is a read (queries.ts).
import { fingerprint } from '../platform/idempotency.ts';
import { ApiError } from '../platform/errors.ts';
import type { BatchedCall, SingleStepOperation } from '../platform/operations.ts';
import { AuthorizeX402Input, SettleX402Input, type SettleResponse } from './schemas.ts';
import type { AuthorizeChecked, AuthorizeRequest, Authorization, X402Service } from './service.ts';

/** The authorize operation's name: its Idempotency-Keys are scoped to it, and a purchase approval names it. */
export const AUTHORIZE_X402_OPERATION = 'authorizeX402Payment';

export interface X402Operations {
  authorizeX402Payment: SingleStepOperation<AuthorizeX402Input, Authorization, AuthorizeChecked>;
  settleX402Payment: SingleStepOperation<SettleX402Input, SettleResponse>;
}

/** One call of an authorize batch, as the service takes it: with its request's binding when it has a key. */
function authorizeRequest({ call: { principal, input }, checked, key }: BatchedCall<AuthorizeX402Input, AuthorizeChecked>): AuthorizeRequest {
  const binding = key && { ...key, operation: AUTHORIZE_X402_OPERATION, fingerprint: fingerprint(AUTHORIZE_X402_OPERATION, input) };
  return { agentId: principal.agentId!, input, checked, ...(binding ? { binding } : {}) };
}

export function x402Operations(x402: X402Service): X402Operations {
  return {
    authorizeX402Payment: {
      name: AUTHORIZE_X402_OPERATION,
      input: AuthorizeX402Input,
      // The draft makes the key normative: at most one hold per key, the same attestation for every retry.
      idempotency: { key: 'required', member: 'idempotencyKey' },
      check: ({ principal, input }) => x402.checkAuthorize(principal, input),
      // Group commit with voucher mints' rules: one agent's authorizes apply in arrival order.
      batch: {
        orderKey: ({ principal }) => principal.agentId!,
        readAhead: (tx, calls) => x402.readAhead(tx, calls.map(authorizeRequest)),
        runMany: (tx, calls, read) => x402.authorizeMany(tx, calls.map(authorizeRequest), read),
      },
    },
    settleX402Payment: {
      name: 'settleX402Payment',
      input: SettleX402Input,
      // The jti is the settle idempotency key (the draft): one settlement per jti and merchant key, whichever
      // instance it reaches; the same jti with another charge is the runner's idempotency_key_reused.
      idempotency: { key: 'derived' },
      deriveKey: (input) => input.holdId,
      check: ({ principal, input }) => {
        if (input.amountUc === '0' && !principal.scopes.includes('redemptions:release')) {
          throw new ApiError('scope_required', { detail: 'a settlement of "0" releases the hold: the API key needs scope redemptions:release' });
        }
        return undefined;
      },
      batch: {
        orderKey: ({ input }) => input.holdId,
        runMany: (tx, calls) => x402.settleMany(tx, calls.map(({ call: { principal, input } }) => ({ ...input, merchantId: principal.merchantId! }))),
      },
    },
  };
}
