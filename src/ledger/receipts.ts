// Signed receipts: a compact ES256 JWS (typ receipt+jwt) from the gateway's signing key for every capture
// and refund, verifiable by anyone with the JWKS. The claims state what was settled, so a receipt alone
// proves it: the redemption, offer, agent and merchant, the amounts after the operation, the time, and the
// agent's mandate version in force at the hold (`mandate`, its hash).
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { formatUc } from '../platform/money.ts';
import type { HoldRow } from './store.ts';

export const RECEIPT_TYP = 'receipt+jwt';

export interface ReceiptFacts {
  kind: 'capture' | 'refund';
  /** The hold as it stands after the operation. */
  hold: Pick<HoldRow, 'id' | 'offer_id' | 'agent_id' | 'acceptor_id' | 'amount_uc' | 'captured_uc' | 'refunded_uc' | 'mandate_hash'>;
  nowS: number;
  refund?: { id: string; amountUc: bigint };
}

/** Signs a receipt, or answers null when the gateway has no signing key (live mode without ACG_SIGNING_KEY). */
export async function signReceipt(gateway: Gateway, facts: ReceiptFacts): Promise<string | null> {
  if (!gateway.signing.configured) return null;
  const { hold } = facts;
  return gateway.signing.sign(
    {
      iss: gateway.config.baseUrl,
      jti: newId('rct'),
      iat: facts.nowS,
      kind: facts.kind,
      redemption_id: hold.id,
      offer_id: hold.offer_id,
      agent_id: hold.agent_id,
      merchant_id: hold.acceptor_id,
      amount_uc: formatUc(hold.amount_uc),
      captured_uc: formatUc(hold.captured_uc),
      released_uc: formatUc(hold.amount_uc - hold.captured_uc),
      refunded_uc: formatUc(hold.refunded_uc),
      ...(facts.refund ? { refund_id: facts.refund.id, refund_uc: formatUc(facts.refund.amountUc) } : {}),
      ...(hold.mandate_hash === null ? {} : { mandate: hold.mandate_hash }),
    },
    RECEIPT_TYP,
  );
}
