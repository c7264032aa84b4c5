// How an execution is paid: its price held before the action, captured after it, given back when it fails.
// Today one payer, the agent's prepaid credit (the ledger's holds, acceptor `gateway`); its payment method is
// what the execute result names in `paymentMethod`. A rail that pays for each call itself (x402's `exact`
// scheme) would be a second payer with its own method, chosen by the pipeline instead of this one.
import { ApiError } from '../platform/errors.ts';
import type { Tx } from '../platform/db/database.ts';
import type { Microcredits } from '../platform/money.ts';
import type { Settled } from '../platform/batcher.ts';
import { GATEWAY_ACCEPTOR_ID, type Holders, type LedgerService, type Redemption } from '../ledger/service.ts';

/** Paid from the agent's prepaid credit. */
export const PREPAID_CREDIT_METHOD = 'credits';
export type PaymentMethod = typeof PREPAID_CREDIT_METHOD;

/** One execution's price, as the payer holds it. */
export interface ExecutionHold {
  agentId: string;
  serviceId: string;
  category: string;
  /** `{serviceId}:{action}`, as the hold records it. */
  offerId: string;
  amountUc: Microcredits;
  lifetimeS: number;
  /** What is bought, as it is sold now (`{serviceId, action, title, priceUc}`): the hold keeps it for its evidence. */
  offerSnapshot: { serviceId: string; action: string; title: string; priceUc: string };
  /** The owner approved this execution above the mandate's approval threshold. */
  approved?: boolean;
}

export interface ExecutionPayer {
  readonly paymentMethod: PaymentMethod;
  /**
   * Holds each execution's price in one pass, in order; a refusal (e.g. INSUFFICIENT_CREDITS) is that call's answer.
   * `holders`: what `lockHolders` locked for these agents in this transaction, beside the batch's other reads.
   */
  holdMany(tx: Tx, holds: readonly ExecutionHold[], holders?: Holders): Promise<Array<Settled<Redemption>>>;
  /** Locks what holding for these agents locks first (their rows, their lots), to hand to `holdMany`. */
  lockHolders(tx: Tx, agentIds: readonly string[]): Promise<Holders>;
  /** Captures each hold in full, in one pass; a hold no longer held answers `hold_resolved`. */
  captureMany(tx: Tx, holdIds: readonly string[]): Promise<Array<Settled<Redemption>>>;
  /** Gives a hold back. One already resolved (expired past its deadline) has given its credit back already. */
  release(tx: Tx, holdId: string): Promise<void>;
}

export function prepaidCredit(ledger: Pick<LedgerService, 'holdMany' | 'lockHolders' | 'resolveMany' | 'release'>): ExecutionPayer {
  return {
    paymentMethod: PREPAID_CREDIT_METHOD,
    holdMany: (tx, holds, holders) =>
      ledger.holdMany(
        tx,
        holds.map((hold) => ({ ...hold, acceptorId: GATEWAY_ACCEPTOR_ID, merchantId: null })),
        holders,
      ),
    lockHolders: (tx, agentIds) => ledger.lockHolders(tx, agentIds),
    captureMany: (tx, holdIds) => ledger.resolveMany(tx, holdIds.map((holdId) => ({ action: 'capture' as const, holdId }))),
    release: async (tx, holdId) => {
      try {
        await ledger.release(tx, holdId);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 'hold_resolved')) throw error;
      }
    },
  };
}
