// Where a refund's credit goes back to: the lots the hold's captured credit came from, undone in reverse burn order.
//
// A refund undoes part of a capture, so it lands as a partial capture's unspent rest does (`settleMany`: the first
// `capturedUc` of the allocations, in burn order, are spent, the rest goes back): a capture of X and then a refund
// of Y leave the agent's credit as a capture of X − Y would have, the last-burned source first. Each refund takes
// the next part of that order after what earlier refunds of the hold took (their total is the hold's
// `refunded_uc`), so no per-source record is kept. Each part comes back as a new lot (source `refund`) with its
// source's priority and expiry: expiring promotional credit comes back expiring (or lapsed, when its lot has
// expired meanwhile, as a release into an expired lot does), never as lasting credit because a lasting lot also
// funded the purchase. Parts whose sources burn and lapse alike share one lot.

/** A lot a captured hold's credit came from, in burn order, with what the hold captured from it. */
export interface RefundSource {
  priority: number;
  expires_at_s: bigint | null;
  captured_from_uc: bigint;
}

/** One new lot of a refund: how it burns and lapses, and what it holds. */
export interface RefundLot {
  priority: number;
  expiresAtS: bigint | null;
  amountUc: bigint;
}

/**
 * The lots a refund of `amountUc` makes, after earlier refunds of the same hold took `refundedUc`: `sources` in
 * burn order (as `capturedSourceLots` reads them), undone from the last. Throws when the sources do not cover
 * what is refunded (the caller checked it against the hold's captured total, which they sum to).
 */
export function refundLots(sources: readonly RefundSource[], refundedUc: bigint, amountUc: bigint): RefundLot[] {
  const lots: RefundLot[] = [];
  let skipUc = refundedUc;
  let leftUc = amountUc;
  for (const source of [...sources].reverse()) {
    if (leftUc === 0n) break;
    const skippedUc = source.captured_from_uc < skipUc ? source.captured_from_uc : skipUc;
    skipUc -= skippedUc;
    const availableUc = source.captured_from_uc - skippedUc;
    const takenUc = availableUc < leftUc ? availableUc : leftUc;
    if (takenUc === 0n) continue;
    leftUc -= takenUc;
    const same = lots.find((lot) => lot.priority === source.priority && lot.expiresAtS === source.expires_at_s);
    if (same) same.amountUc += takenUc;
    else lots.push({ priority: source.priority, expiresAtS: source.expires_at_s, amountUc: takenUc });
  }
  if (leftUc !== 0n) throw new Error(`ledger invariant: a refund of ${amountUc} µc after ${refundedUc} µc is not covered by the captured allocations`);
  return lots;
}
