// SQL of the kill switch: freezes (their reports) and the revocations feed. Nothing but queries. The holds'
// own revocation columns are the ledger's (it releases and marks them).
import type { Queryable, Tx } from '../platform/db/database.ts';

export interface FreezeRow {
  id: string;
  agent_id: string;
  release_holds: boolean;
  released_holds: number;
  released_uc: bigint;
  frozen_at_s: bigint;
  frozen_by: string;
}

/** One revoked merchant hold, as the feed keeps it; `feed_position` (its merchant's own 1, 2, 3, …) is its cursor. */
export interface RevocationRow {
  seq: bigint;
  feed_position: bigint;
  hold_id: string;
  merchant_id: string;
  agent_id: string;
  /** The freeze that revoked the hold; null for a retirement's revocation (reason agent_retired). */
  freeze_id: string | null;
  event_id: string;
  reason: string;
  revoked_at_s: bigint;
}

/** A merchant a freeze reached: its revoked holds (in feed order) and the event that told it. */
export interface FreezeMerchantRow {
  merchant_id: string;
  event_id: string;
  hold_ids: string[];
}

export async function insertFreeze(tx: Tx, row: FreezeRow): Promise<FreezeRow> {
  const { rows } = await tx.query<FreezeRow>(
    `INSERT INTO agent_freezes (id, agent_id, release_holds, released_holds, released_uc, frozen_at_s, frozen_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     RETURNING id, agent_id, release_holds, released_holds, released_uc, frozen_at_s, frozen_by`,
    [row.id, row.agent_id, row.release_holds, row.released_holds, row.released_uc, row.frozen_at_s, row.frozen_by],
  );
  return rows[0]!;
}

/**
 * Appends revoked holds to their merchants' feeds in the order given. First each merchant's feed row is locked
 * (sorted, counted), and its count read back: the merchant's new rows take the positions after its last, and
 * commit before any later append's, so positions and commits agree per merchant, and a poller never misses a row
 * behind its cursor. Two statements.
 */
export async function insertRevocations(tx: Tx, rows: ReadonlyArray<Omit<RevocationRow, 'seq' | 'feed_position'>>): Promise<void> {
  if (rows.length === 0) return;
  const counts = new Map<string, number>();
  for (const row of rows) counts.set(row.merchant_id, (counts.get(row.merchant_id) ?? 0) + 1);
  const merchants = [...counts.keys()].sort();
  const { rows: feeds } = await tx.query<{ merchant_id: string; revoked_holds: string }>(
    `INSERT INTO revocation_feeds (merchant_id, revoked_holds)
     SELECT merchant_id, revoked FROM unnest($1::text[], $2::bigint[]) AS f(merchant_id, revoked) ORDER BY merchant_id
     ON CONFLICT (merchant_id) DO UPDATE SET revoked_holds = revocation_feeds.revoked_holds + EXCLUDED.revoked_holds
     RETURNING merchant_id, revoked_holds::text`,
    [merchants, merchants.map((id) => String(counts.get(id)))],
  );
  // Each merchant's next position: the count before this append, plus one.
  const next = new Map(feeds.map((feed) => [feed.merchant_id, BigInt(feed.revoked_holds) - BigInt(counts.get(feed.merchant_id)!) + 1n]));
  const positions = rows.map((row) => {
    const position = next.get(row.merchant_id)!;
    next.set(row.merchant_id, position + 1n);
    return position.toString();
  });
  await tx.query(
    `INSERT INTO hold_revocations (hold_id, merchant_id, agent_id, freeze_id, event_id, reason, revoked_at_s, feed_position)
     SELECT hold_id, merchant_id, agent_id, freeze_id, event_id, reason, revoked_at_s, feed_position
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])
            WITH ORDINALITY AS r(hold_id, merchant_id, agent_id, freeze_id, event_id, reason, revoked_at_s, feed_position, position)
      ORDER BY position`,
    [
      rows.map((r) => r.hold_id),
      rows.map((r) => r.merchant_id),
      rows.map((r) => r.agent_id),
      rows.map((r) => r.freeze_id),
      rows.map((r) => r.event_id),
      rows.map((r) => r.reason),
      rows.map((r) => r.revoked_at_s.toString()),
      positions,
    ],
  );
}

/** The agent's latest freeze, if it was ever frozen since freezes were kept. */
export async function latestFreeze(db: Queryable, agentId: string): Promise<FreezeRow | undefined> {
  const { rows } = await db.query<FreezeRow>(
    `SELECT id, agent_id, release_holds, released_holds, released_uc, frozen_at_s, frozen_by
       FROM agent_freezes WHERE agent_id = $1 ORDER BY seq DESC LIMIT 1`,
    [agentId],
  );
  return rows[0];
}

/** The merchants a freeze reached, in the order their first hold was revoked. */
export async function freezeMerchants(db: Queryable, freezeId: string): Promise<FreezeMerchantRow[]> {
  const { rows } = await db.query<FreezeMerchantRow>(
    `SELECT merchant_id, event_id, array_agg(hold_id ORDER BY seq) AS hold_ids
       FROM hold_revocations WHERE freeze_id = $1
      GROUP BY merchant_id, event_id
      ORDER BY min(seq)`,
    [freezeId],
  );
  return rows;
}

/** A merchant's revocations after its feed position `afterPosition`, oldest first, at most `limit`. */
export async function listRevocations(db: Queryable, merchantId: string, afterPosition: bigint, limit: number): Promise<RevocationRow[]> {
  const { rows } = await db.query<RevocationRow>(
    'SELECT * FROM hold_revocations WHERE merchant_id = $1 AND feed_position > $2 ORDER BY feed_position LIMIT $3',
    [merchantId, afterPosition.toString(), limit],
  );
  return rows;
}

/** The last position of the merchant's feed (0 when it has none): how many holds it has revoked. */
export async function feedEnd(db: Queryable, merchantId: string): Promise<bigint> {
  const { rows } = await db.query<{ revoked_holds: string }>('SELECT revoked_holds::text FROM revocation_feeds WHERE merchant_id = $1', [merchantId]);
  return BigInt(rows[0]?.revoked_holds ?? '0');
}

/** The merchant's feed position reached by a cursor given before positions (its rows' `seq` up to `seq`). */
export async function positionAtSeq(db: Queryable, merchantId: string, seq: bigint): Promise<bigint> {
  const { rows } = await db.query<{ position: string }>(
    'SELECT coalesce(max(feed_position), 0)::text AS position FROM hold_revocations WHERE merchant_id = $1 AND seq <= $2',
    [merchantId, seq.toString()],
  );
  return BigInt(rows[0]!.position);
}
