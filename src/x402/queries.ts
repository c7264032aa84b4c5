// The x402 facilitator's read: verify a payment for the calling merchant (its API key), against its
// requirements and the ledger. A read with a body (x402's VerifyRequest), so a query run on POST.
import { Type } from '@sinclair/typebox';
import type { Query } from '../platform/queries.ts';
import { FacilitatorRequest, type VerifyResponse } from './schemas.ts';
import type { X402Service } from './service.ts';

export interface X402Queries {
  verifyX402Payment: Query<FacilitatorRequest, VerifyResponse>;
}

export function x402Queries(x402: X402Service): X402Queries {
  return {
    verifyX402Payment: {
      name: 'verifyX402Payment',
      input: FacilitatorRequest,
      output: Type.Ref('X402VerifyResponse'),
      read: (db, { principal, input }) => x402.verify(db, principal.merchantId!, input),
    },
  };
}
