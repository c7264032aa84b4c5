// Row locks held by another session, as a long transaction of another instance would hold them: for tests of what a
// request does when it must wait for them (PostgreSQL only; PGlite admits one session).
import type { Tx } from '../../src/platform/db/database.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';

export interface HeldRows {
  /** Runs `then` in the holding transaction (if given), commits it, and closes the session. */
  release(): Promise<void>;
}

/** Resolves once another session's transaction has taken the locks `lockSql` takes; they stay until `release`. */
export async function holdRows(databaseUrl: string, lockSql: string, params: unknown[], then?: (tx: Tx) => Promise<void>): Promise<HeldRows> {
  const other = openPostgres(databaseUrl);
  let letGo!: () => void;
  const released = new Promise<void>((resolve) => (letGo = resolve));
  let held!: () => void;
  const isHeld = new Promise<void>((resolve) => (held = resolve));
  const holding = other.transaction(async (tx) => {
    await tx.query(lockSql, params);
    held();
    await released;
    await then?.(tx);
  });
  await Promise.race([isHeld, holding]);
  return {
    async release() {
      letGo();
      try {
        await holding;
      } finally {
        await other.close();
      }
    },
  };
}
