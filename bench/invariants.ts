// The ledger checked after the load, with the gateway stopped: its invariants, as `acg ledger check` runs them,
// and then the answers. Each check names what broke; any problem
// fails the bench (non-zero exit). The answers the load generator saw are checked against the rows: every
// 200 mint names one hold of its own, and every 200 capture names a captured hold.
import type { Queryable } from '../src/platform/db/database.ts';
import { ledgerViolations } from '../src/ledger/invariants.ts';
import { PRICE_UC } from './seed.ts';

export interface Answers {
  /** Hold ids of the 200 mint answers, all cells. */
  minted: string[];
  /** Hold ids of the 200 capture answers, all cells. */
  captured: string[];
  /** How many 200 answers each kind had (each must have named a hold). */
  mintOk: number;
  captureOk: number;
  /** Hold ids (the receipts) of the 200 execute answers, and of the 200 release answers. */
  executed: string[];
  executeOk: number;
  released: string[];
  releaseOk: number;
}

async function count(db: Queryable, sql: string, params: unknown[] = []): Promise<bigint> {
  const { rows } = await db.query<{ n: bigint | number | string }>(sql, params);
  return BigInt(rows[0]!.n);
}

function duplicates(ids: readonly string[]): number {
  return ids.length - new Set(ids).size;
}

export async function checkLedger(db: Queryable, answers: Answers): Promise<{ checks: string[]; problems: string[] }> {
  const checks: string[] = [];
  const problems: string[] = [];
  // The ledger's own invariants (src/ledger/invariants.ts, what `acg ledger check` runs).
  for (const result of await ledgerViolations(db)) {
    checks.push(result.name);
    if (result.violations > 0) problems.push(`${result.name}: ${result.violations} violation(s), e.g. ${result.examples.map((e) => `${e.subject} (${e.detail})`).join('; ')}`);
  }
  checks.push('every 200 mint answer names a distinct hold of the offer');
  if (answers.minted.length !== answers.mintOk) problems.push(`${answers.mintOk - answers.minted.length} 200 mint answers named no hold`);
  if (duplicates(answers.minted) > 0) problems.push(`${duplicates(answers.minted)} mint answers named a hold another answer named`);
  const missing = await count(
    db,
    `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.id IS NULL OR h.amount_uc <> $2 OR h.offer_id <> 'off_bench'`,
    [answers.minted, PRICE_UC],
  );
  if (missing !== 0n) problems.push(`${missing} 200 mint answers name no hold of the offer's price`);
  checks.push('every 200 capture answer names a distinct captured hold');
  if (answers.captured.length !== answers.captureOk) problems.push(`${answers.captureOk - answers.captured.length} 200 capture answers named no hold`);
  if (duplicates(answers.captured) > 0) problems.push(`${duplicates(answers.captured)} holds were captured twice with 200`);
  const uncaptured = await count(db, `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.state IS DISTINCT FROM 'captured'`, [answers.captured]);
  if (uncaptured !== 0n) problems.push(`${uncaptured} 200 capture answers name a hold that is not captured`);
  checks.push('every 200 execute answer names a distinct captured hold');
  if (answers.executed.length !== answers.executeOk) problems.push(`${answers.executeOk - answers.executed.length} 200 execute answers named no hold`);
  if (duplicates(answers.executed) > 0) problems.push(`${duplicates(answers.executed)} execute answers named a hold another answer named`);
  const unexecuted = await count(db, `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.state IS DISTINCT FROM 'captured'`, [answers.executed]);
  if (unexecuted !== 0n) problems.push(`${unexecuted} 200 execute answers name a hold that is not captured`);
  checks.push('every 200 release answer names a distinct released hold');
  if (answers.released.length !== answers.releaseOk) problems.push(`${answers.releaseOk - answers.released.length} 200 release answers named no hold`);
  if (duplicates(answers.released) > 0) problems.push(`${duplicates(answers.released)} holds were released twice with 200`);
  const unreleased = await count(db, `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.state IS DISTINCT FROM 'released'`, [answers.released]);
  if (unreleased !== 0n) problems.push(`${unreleased} 200 release answers name a hold that is not released`);
  return { checks, problems };
}
