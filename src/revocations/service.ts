// The kill switch with reach. A freeze sets the agent's status (its delegates are refused through the policy's
// chain of ancestors) and cancels what its subtree left to run by itself (execute's retained intents, closing the
// top-ups that waited on them); with
// `releaseHolds` it also, in the same transaction, releases every outstanding hold of
// the agent's subtree through the ledger's own release (credit back to the lots, budgets given back), revokes
// their vouchers, appends them to each holding merchant's revocations feed and tells each merchant once with a
// signed `voucher.revoked` event. Every freeze keeps a report of how far it reached; the report reads each
// merchant's event delivery as it stands at the time of the read. A retirement (src/delegation) revokes its
// subtree's holds the same way, with reason `agent_retired` and no report (`revokeRetired`).
import type { RefusalReason } from '../platform/reasons.ts';
import type { Agent, AgentService } from '../agents/service.ts';
import { emitEvents } from '../events/outbox.ts';
import type { EventReach, WebhookService } from '../events/service.ts';
import type { LedgerService, RevokedHold } from '../ledger/service.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { formatUc, parseUc } from '../platform/money.ts';
import { principalScope, type Principal } from '../platform/principal.ts';
import * as store from './store.ts';

export const REVOCATION_REASONS = ['agent_frozen', 'agent_retired'] as const satisfies readonly RefusalReason[];
export type RevocationReason = (typeof REVOCATION_REASONS)[number];

/** A feed page: at most this many revocations (the default is the query's). */
export const REVOCATIONS_PAGE_MAX = 500;
export const REVOCATIONS_PAGE_DEFAULT = 100;

/** Why vouchers are revoked: the agent frozen or retired (the holds are its subtree's), when, and the freeze's id (a retirement has none). */
export interface RevocationCause {
  agentId: string;
  reason: RevocationReason;
  atS: number;
  freezeId: string | null;
}

export interface FreezeMerchant {
  merchantId: string;
  holdIds: string[];
  eventId: string;
  webhook: EventReach;
  lastAttemptAt: number | null;
  /** When the next attempt of the event is due (its delivery pending), an open circuit's end included; else null. */
  nextAttemptAt: number | null;
}

/** The freeze's answer: the agent as every agent route shows it (today's answer, unchanged), and how far the freeze reached. */
export type FrozenAgent = Agent & { freeze: FreezeReport };

export interface FreezeReport {
  id: string;
  agentId: string;
  frozenAt: number;
  releaseHolds: boolean;
  releasedHolds: number;
  releasedUc: string;
  merchants: FreezeMerchant[];
}

export interface Revocation {
  holdId: string;
  agentId: string;
  reason: string;
  revokedAt: number;
  cursor: string;
}

export interface RevocationPage {
  revocations: Revocation[];
  /** The last item's cursor, or the `since` given when the page is empty: what the next poll passes back. */
  nextSince: string;
  hasMore: boolean;
}

/**
 * The feed's cursor, opaque to readers: `p` and the merchant's own feed position (`p3`: after its third
 * revocation). A cursor of digits alone is one given before positions, the row's `seq` over every merchant, still
 * read (as the position of the merchant's last row up to it), so a poller that kept one misses nothing.
 */
export const FEED_START = '0';
const cursorOf = (position: bigint): string => `p${position}`;

async function positionOf(db: Queryable, merchantId: string, cursor: string): Promise<bigint> {
  if (cursor.startsWith('p')) return BigInt(cursor.slice(1));
  const seq = BigInt(cursor);
  return seq === 0n ? 0n : store.positionAtSeq(db, merchantId, seq);
}

/** Retained work of a subtree (execute's intents, and the top-ups waiting on them), stopped with its holds. */
export interface RetainedWork {
  /** Locks what funds the retained work (top-ups waiting for the owner), before any hold is locked. */
  lockFundingOf(tx: Tx, agentIds: readonly string[]): Promise<void>;
  /** Cancels the retained work, closing the top-ups that waited on it. */
  cancelPendingOf(tx: Tx, agentIds: readonly string[], reason: RevocationReason, atS: number): Promise<number>;
}

export interface RevocationDependencies {
  agents: AgentService;
  ledger: LedgerService;
  webhooks: WebhookService;
  /** Given late: execute is composed after the kill switch's dependencies exist. */
  retained: () => RetainedWork;
}

export class RevocationService {
  constructor(
    private readonly gateway: Gateway,
    private readonly deps: RevocationDependencies,
  ) {}

  /**
   * Freezes one of the principal's agents (404 for any other). Freezing a frozen agent without releaseHolds
   * changes nothing and answers its latest report. With releaseHolds, every outstanding hold of its subtree
   * is released and revoked now, whether or not the agent was frozen already; a frozen agent's freeze that finds
   * nothing to release after one that released answers that one's report.
   */
  async freeze(tx: Tx, principal: Principal, agentId: string, options: { releaseHolds: boolean }): Promise<FrozenAgent> {
    const { agents } = this.deps;
    const wasFrozen = (await agents.lockAgentFor(tx, principal, agentId)).status === 'frozen';
    const agent = await agents.setStatus(tx, principal, agentId, 'frozen');
    if (wasFrozen && !options.releaseHolds) {
      const latest = await store.latestFreeze(tx, agentId);
      if (latest) return { ...agent, freeze: await this.report(tx, latest) };
    }
    const nowS = this.gateway.clock.nowS();
    const freezeId = newId('frz');
    const cause: RevocationCause = { agentId, reason: 'agent_frozen', atS: nowS, freezeId };
    const revoked = await this.stop(tx, await agents.subtreeIds(tx, agentId), cause, options.releaseHolds);
    // A frozen agent's freeze that released nothing, after one that released its holds (a double click, a retry under
    // a new key, a freeze on another instance at the same time), answers that report rather than hide it behind an
    // empty one: GET …/freeze is where the owner watches which merchants were told (found from outside).
    if (wasFrozen && revoked.length === 0) {
      const latest = await store.latestFreeze(tx, agentId);
      if (latest?.release_holds) return { ...agent, freeze: await this.report(tx, latest) };
    }
    // The freeze's row before the feed's, which name it.
    const freeze = await store.insertFreeze(tx, {
      id: freezeId,
      agent_id: agentId,
      release_holds: options.releaseHolds,
      released_holds: revoked.length,
      released_uc: revoked.reduce((sumUc, { redemption }) => sumUc + parseUc(redemption.releasedUc), 0n),
      frozen_at_s: BigInt(nowS),
      frozen_by: principalScope(principal),
    });
    await this.tellMerchants(tx, revoked, cause);
    return { ...agent, freeze: await this.report(tx, freeze) };
  }

  /**
   * A retirement's reach: releases every outstanding hold of `agentIds` (the retired subtree, whose rows the
   * caller locked) and revokes their vouchers as a freeze with releaseHolds does (the ledger's release, then the
   * merchants told), with reason `agent_retired` and `agentId` the delegate retired. Answers the holds and the
   * revocation's time, which the retirement records as its own.
   */
  async revokeRetired(tx: Tx, agentId: string, agentIds: readonly string[]): Promise<{ revoked: RevokedHold[]; atS: number }> {
    const cause: RevocationCause = { agentId, reason: 'agent_retired', atS: this.gateway.clock.nowS(), freezeId: null };
    const revoked = await this.stop(tx, agentIds, cause, true);
    await this.tellMerchants(tx, revoked, cause);
    return { revoked, atS: cause.atS };
  }

  /**
   * What a freeze and a retirement stop in a subtree: what it left waiting to run by itself (execute's retained
   * intents, and the top-ups still waiting for the owner's approval of them), always; and its outstanding holds,
   * released and revoked (the ledger's release path), unless a freeze without releaseHolds leaves them to their
   * merchants.
   */
  private async stop(tx: Tx, agentIds: readonly string[], cause: RevocationCause, releaseHolds: boolean): Promise<RevokedHold[]> {
    const retained = this.deps.retained();
    // Lock order: the agents' rows (the caller's), the top-ups waiting on their intents, then holds, lots and
    // balances (the release), then the intents (as a capture reaches its intent after its hold).
    await retained.lockFundingOf(tx, agentIds);
    const revoked = releaseHolds ? await this.deps.ledger.revokeHolds(tx, agentIds, cause.reason, cause.atS) : [];
    await retained.cancelPendingOf(tx, agentIds, cause.reason, cause.atS);
    return revoked;
  }

  /**
   * One `voucher.revoked` event per merchant holding revoked vouchers, and the feed's rows, in merchant order
   * (the feeds' rows locked last). The event and the feed name the cause: the agent frozen or retired.
   */
  private async tellMerchants(tx: Tx, revoked: readonly RevokedHold[], cause: RevocationCause): Promise<void> {
    const byMerchant = new Map<string, string[]>();
    for (const { redemption, merchantId } of revoked) {
      if (merchantId !== null) byMerchant.set(merchantId, [...(byMerchant.get(merchantId) ?? []), redemption.id]);
    }
    const merchants = [...byMerchant.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const envelopes = await emitEvents(
      tx,
      merchants.map(([merchantId, holdIds]) => ({
        merchantId,
        type: 'voucher.revoked' as const,
        data: { revocation: { agentId: cause.agentId, reason: cause.reason, holdIds, revokedAt: cause.atS } },
      })),
      this.gateway.clock.nowMs(),
    );
    await store.insertRevocations(
      tx,
      merchants.flatMap(([merchantId, holdIds], index) =>
        holdIds.map((holdId) => ({
          hold_id: holdId,
          merchant_id: merchantId,
          agent_id: cause.agentId,
          freeze_id: cause.freezeId,
          event_id: envelopes[index]!.id,
          reason: cause.reason,
          revoked_at_s: BigInt(cause.atS),
        })),
      ),
    );
  }

  /** The report of a freeze, each merchant's event delivery read as it stands now. */
  private async report(db: Queryable, freeze: store.FreezeRow): Promise<FreezeReport> {
    const merchants = await store.freezeMerchants(db, freeze.id);
    const reach = await this.deps.webhooks.reachOf(db, merchants.map((m) => ({ merchantId: m.merchant_id, eventId: m.event_id })));
    return {
      id: freeze.id,
      agentId: freeze.agent_id,
      frozenAt: Number(freeze.frozen_at_s),
      releaseHolds: freeze.release_holds,
      releasedHolds: freeze.released_holds,
      releasedUc: formatUc(freeze.released_uc),
      merchants: merchants.map((m) => ({
        merchantId: m.merchant_id,
        holdIds: m.hold_ids,
        eventId: m.event_id,
        webhook: reach.get(m.event_id)?.webhook ?? 'none',
        lastAttemptAt: reach.get(m.event_id)?.lastAttemptAt ?? null,
        nextAttemptAt: reach.get(m.event_id)?.nextAttemptAt ?? null,
      })),
    };
  }

  /** The agent's latest freeze report (the caller checked the agent is the principal's); 404 when never frozen. */
  async latestReport(db: Queryable, agentId: string): Promise<FreezeReport> {
    const latest = await store.latestFreeze(db, agentId);
    if (!latest) throw new ApiError('not_found', { detail: `agent ${agentId} has not been frozen (since freeze reports were kept)` });
    return this.report(db, latest);
  }

  /** A merchant's revocations after `since` (the feed's start when absent), oldest first (the caller reached the merchant). */
  async revocations(db: Queryable, merchantId: string, page: { since?: string; limit: number }): Promise<RevocationPage> {
    const since = page.since ?? FEED_START;
    const position = await positionOf(db, merchantId, since);
    const rows = await store.listRevocations(db, merchantId, position, page.limit + 1);
    // Positions only grow, and each merchant's feed counts its own: a cursor past its end was never given by it (one
    // of another merchant's feed, say), and echoing it would skip every row up to it as they come (found from outside).
    if (rows.length === 0 && position > 0n) {
      const end = await store.feedEnd(db, merchantId);
      if (position > end) {
        throw memberRefusal('since', `"${page.since}" is past the end of this merchant's feed (${cursorOf(end)}): positions are per merchant; poll from ${cursorOf(end)}, or from the start without since`);
      }
    }
    const items = rows.slice(0, page.limit).map(
      (row): Revocation => ({ holdId: row.hold_id, agentId: row.agent_id, reason: row.reason, revokedAt: Number(row.revoked_at_s), cursor: cursorOf(row.feed_position) }),
    );
    // Nothing new: the cursor given, in today's form (a cursor from before positions is moved to one).
    const unchanged = since === FEED_START || since.startsWith('p') ? since : cursorOf(position);
    return { revocations: items, nextSince: items.at(-1)?.cursor ?? unchanged, hasMore: rows.length > page.limit };
  }
}
