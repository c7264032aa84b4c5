// The hold ids (voucher `jti`s) the gateway has revoked, as this merchant has heard of them: from the
// `voucher.revoked` webhook, or from the revocations feed. In memory and bounded: an entry is only worth
// keeping while the voucher it revokes could still verify, so it is dropped once that voucher has expired
// (its `exp` when known, else the longest a voucher can live, counted from the revocation), and a hard cap
// on entries drops the one whose voucher expires soonest.
import { VerificationError } from './errors.js';
import type { Redemption, VoucherRevocation, WebhookEvent } from './types.js';

/** The longest a voucher can live: the gateway's longest hold lifetime (7 days). */
export const VOUCHER_LIFETIME_S_MAX_DEFAULT = 7 * 86_400;
/** Entries kept at most by default (a few megabytes). */
export const REVOCATIONS_MAX_DEFAULT = 100_000;
/**
 * The default clock tolerance: of a RevocationSet, how long past a voucher's `exp` its entry is kept (a
 * margin); of the MerchantClient, the skew accepted on `nbf` (never on `exp`: a voucher is refused from it on).
 */
export const REVOCATION_TOLERANCE_S_DEFAULT = 30;

export interface RevocationSetOptions {
  /**
   * How long after its revocation an entry whose voucher `exp` is unknown is kept (default 7 days, the
   * gateway's longest hold lifetime). A voucher cannot outlive its hold, and its hold existed before it was
   * revoked, so it has expired by then.
   */
  voucherLifetimeMaxS?: number;
  /**
   * Entries kept at most (default 100,000). Adding one more drops the entry whose voucher expires soonest,
   * which may be the one being added; `evictedCount` counts them.
   */
  entriesMax?: number;
  /**
   * How long past a voucher's `exp` its entry is kept (default 30 s): a margin only, since the MerchantClient
   * refuses a voucher from its `exp` on whatever its own `clockToleranceS`, so any value (0 included) keeps
   * an entry as long as its voucher could verify.
   */
  clockToleranceS?: number;
  /** The clock, in Unix seconds (default: the system clock). */
  nowS?: () => number;
}

export interface RevocationFacts {
  /** The voucher's `exp` (Unix s), when known: the entry is kept until then, plus the tolerance. */
  expiresAt?: number;
  /** When the gateway revoked it (Unix s; default now): without `exp`, the entry is kept the longest voucher lifetime from then. */
  revokedAt?: number;
}

/** A min-heap entry: the entry `holdId` may go at `keepUntilS` (stale once the map says otherwise). */
type HeapEntry = readonly [keepUntilS: number, holdId: string];

export class RevocationSet {
  readonly clockToleranceS: number;
  readonly entriesMax: number;
  private readonly voucherLifetimeMaxS: number;
  private readonly nowS: () => number;
  /** Hold id → the Unix second after which its voucher can no longer verify. */
  private readonly keepUntilS = new Map<string, number>();
  /** The same entries ordered by keepUntilS, soonest first; an entry replaced or removed stays until popped. */
  private heap: HeapEntry[] = [];
  private evicted = 0;

  constructor(options: RevocationSetOptions = {}) {
    this.voucherLifetimeMaxS = positiveInteger(options.voucherLifetimeMaxS ?? VOUCHER_LIFETIME_S_MAX_DEFAULT, 'voucherLifetimeMaxS');
    this.entriesMax = positiveInteger(options.entriesMax ?? REVOCATIONS_MAX_DEFAULT, 'entriesMax');
    this.clockToleranceS = options.clockToleranceS ?? REVOCATION_TOLERANCE_S_DEFAULT;
    if (!Number.isInteger(this.clockToleranceS) || this.clockToleranceS < 0) throw new TypeError(`clockToleranceS must be a non-negative integer, got ${this.clockToleranceS}`);
    this.nowS = options.nowS ?? (() => Math.floor(Date.now() / 1000));
  }

  /**
   * Adds a revoked hold id. Adding one again keeps the earlier of the two ends, both being bounds on when its
   * voucher expires. A revocation whose voucher has already expired is not kept: it cannot verify anyway.
   */
  add(holdId: string, facts: RevocationFacts = {}): void {
    if (typeof holdId !== 'string' || holdId.length === 0) throw new TypeError('a revoked hold id must be a non-empty string');
    const nowS = this.nowS();
    const keepUntilS =
      facts.expiresAt !== undefined ? facts.expiresAt + this.clockToleranceS : (facts.revokedAt ?? nowS) + this.voucherLifetimeMaxS + this.clockToleranceS;
    this.dropExpired(nowS);
    if (keepUntilS < nowS) return;
    const known = this.keepUntilS.get(holdId);
    if (known !== undefined && known <= keepUntilS) return;
    if (known === undefined && this.keepUntilS.size >= this.entriesMax) {
      // Full: whichever expires soonest goes, the new entry included (it is the one that matters least long).
      const soonest = this.soonestLive()!;
      this.evicted++;
      if (keepUntilS <= soonest[0]) return;
      this.pop();
      this.keepUntilS.delete(soonest[1]);
    }
    this.keepUntilS.set(holdId, keepUntilS);
    this.push([keepUntilS, holdId]);
  }

  /** Whether the hold's voucher is revoked (and could still verify). */
  has(holdId: string): boolean {
    this.dropExpired(this.nowS());
    return this.keepUntilS.has(holdId);
  }

  /** Entries kept now. */
  get size(): number {
    this.dropExpired(this.nowS());
    return this.keepUntilS.size;
  }

  /**
   * Revocations the cap dropped, or did not keep, before their voucher expired (each a revoked voucher that
   * verifies again until it expires): size the cap so this stays 0.
   */
  get evictedCount(): number {
    return this.evicted;
  }

  /**
   * Takes a verified webhook event (`verifyWebhook`'s result): a `voucher.revoked` adds its hold ids and
   * returns them; a `redemption.released` whose redemption carries a `revocation` (released by the kill switch)
   * adds that hold and returns it, so the set holds it whichever of the two events arrives first; any other event
   * returns []. Throws `VerificationError('invalid_webhook')` for a `voucher.revoked` event without a well-formed
   * `data.revocation`.
   */
  applyEvent(event: WebhookEvent): string[] {
    if (event.type === 'redemption.released') {
      // Read as untrusted JSON: a signed event of another gateway version may lack a member.
      const redemption: Partial<Redemption> | undefined = event.data?.redemption;
      const revokedAt = redemption?.revocation?.revokedAt;
      if (typeof redemption?.id !== 'string' || redemption.id.length === 0 || !Number.isInteger(revokedAt)) return [];
      this.add(redemption.id, { revokedAt, ...(Number.isInteger(redemption.expiresAt) ? { expiresAt: redemption.expiresAt } : {}) });
      return [redemption.id];
    }
    if (event.type !== 'voucher.revoked') return [];
    const revocation = event.data?.revocation;
    if (!isRevocation(revocation)) throw new VerificationError('invalid_webhook', `the voucher.revoked event ${event.id} has no well-formed data.revocation`);
    for (const holdId of revocation.holdIds) this.add(holdId, { revokedAt: revocation.revokedAt });
    return [...revocation.holdIds];
  }

  private dropExpired(nowS: number): void {
    while (this.heap.length > 0 && this.heap[0]![0] < nowS) {
      const [keepUntilS, holdId] = this.pop();
      if (this.keepUntilS.get(holdId) === keepUntilS) this.keepUntilS.delete(holdId);
    }
  }

  /** The live entry at the top of the heap (replaced ones above it are popped), or undefined when empty. */
  private soonestLive(): HeapEntry | undefined {
    while (this.heap.length > 0) {
      const top = this.heap[0]!;
      if (this.keepUntilS.get(top[1]) === top[0]) return top;
      this.pop();
    }
    return undefined;
  }

  private push(entry: HeapEntry): void {
    // Replaced entries linger in the heap until popped; rebuild it before they outnumber the live ones.
    if (this.heap.length >= 2 * this.entriesMax) this.heap = [...this.keepUntilS].map(([holdId, keepUntilS]) => [keepUntilS, holdId] as const).sort((a, b) => a[0] - b[0]);
    const heap = this.heap;
    heap.push(entry);
    for (let child = heap.length - 1; child > 0; ) {
      const parent = (child - 1) >> 1;
      if (heap[parent]![0] <= heap[child]![0]) break;
      [heap[parent], heap[child]] = [heap[child]!, heap[parent]!];
      child = parent;
    }
  }

  private pop(): HeapEntry {
    const heap = this.heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length === 0) return top;
    heap[0] = last;
    for (let parent = 0; ; ) {
      const left = 2 * parent + 1;
      const right = left + 1;
      let smallest = parent;
      if (left < heap.length && heap[left]![0] < heap[smallest]![0]) smallest = left;
      if (right < heap.length && heap[right]![0] < heap[smallest]![0]) smallest = right;
      if (smallest === parent) return top;
      [heap[parent], heap[smallest]] = [heap[smallest]!, heap[parent]!];
      parent = smallest;
    }
  }
}

function positiveInteger(value: number, name: string): number {
  if (!Number.isInteger(value) || value < 1) throw new TypeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

function isRevocation(value: unknown): value is VoucherRevocation {
  if (typeof value !== 'object' || value === null) return false;
  const { holdIds, revokedAt } = value as Partial<VoucherRevocation>;
  return Array.isArray(holdIds) && holdIds.every((id) => typeof id === 'string' && id.length > 0) && Number.isInteger(revokedAt);
}
