// `acg credit check`: the ledger's invariants (invariants.ts) over the configured database, for an operator after a
// failover, a restore or an incident: every invariant in one read-only snapshot, each said as it is checked, a
// broken one with the rows that break it. It never writes (no migration either: a check must not change what it
// looks at). Exit 0 when every invariant holds, 1 when one does not, 2 when the database cannot be read (or the command line is wrong).
import { existsSync } from 'node:fs';
import type { Config } from '../platform/config.ts';
import type { Database } from '../platform/db/database.ts';
import { embeddedDatabaseDir, openDatabase } from '../platform/db/open.ts';
import { cannotOpenDatabase } from '../platform/db/faults.ts';
import { schemaRefusal, schemaState, type SchemaState } from '../platform/db/migrate.ts';
import { checkLedgerInvariants, INVARIANT_EXAMPLES_DEFAULT, LEDGER_INVARIANTS } from './invariants.ts';

/** The most rows of a broken invariant --examples may ask for. */
const EXAMPLES_MAX = 1000;

/**
 * How long one invariant may take: each reads whole tables (an audit of the history, not a request), so a request's
 * statement timeout (ACG_DB_STATEMENT_TIMEOUT_MS, 5 s) would refuse it on a large ledger.
 */
const INVARIANT_TIMEOUT_MS = 30 * 60_000;

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

export async function checkLedger(config: Config, options: { examples?: string }): Promise<void> {
  const raw = options.examples ?? String(INVARIANT_EXAMPLES_DEFAULT);
  if (!/^[0-9]{1,4}$/.test(raw) || Number(raw) > EXAMPLES_MAX) fail(`--examples must be a whole number from 0 to ${EXAMPLES_MAX}`);
  const examples = Number(raw);
  // A mistyped ACG_DATA_DIR would otherwise get a new, empty database, whose ledger holds trivially.
  if (!config.databaseUrl && !existsSync(embeddedDatabaseDir(config.dataDir))) {
    fail(`there is no database in ${config.dataDir}: run this in the gateway's directory, or set ACG_DATA_DIR to its data directory (DATABASE_URL to its database on PostgreSQL)`);
  }
  const where = config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `PGlite in ${config.dataDir}`;
  let db: Database;
  let schema: SchemaState;
  try {
    db = await openDatabase({ ...config, db: { ...config.db, statementTimeoutMs: INVARIANT_TIMEOUT_MS } });
    schema = await schemaState(db);
  } catch (error) {
    // A gateway holding the embedded database is said by the error itself (stop it first); any other failure (a
    // directory of another user's, say) is not blamed on one (found from outside: the hint was given for both).
    fail(cannotOpenDatabase(error));
  }
  // The invariants are this release's queries: a database without the gateway's schema, or at another release's, is
  // said as such, as acg keys says it, not as the first query's SQL error (found from outside: `relation
  // "journal_entries" does not exist`). Never migrated here: a check must not change what it looks at.
  const refusal = schemaRefusal(schema);
  if (refusal !== undefined) {
    await db.close();
    fail(refusal);
  }
  process.stdout.write(`checking the ledger's ${LEDGER_INVARIANTS.length} invariants in ${where}, in one snapshot\n`);
  let broken = 0;
  try {
    await checkLedgerInvariants(db, {
      examples,
      progress: (result, ms) => {
        if (result.violations === 0) {
          process.stdout.write(`  ok      ${result.name} (${Math.round(ms)} ms)\n`);
          return;
        }
        broken += 1;
        process.stdout.write(`  BROKEN  ${result.name}: ${result.violations} row(s)${result.examples.length < result.violations ? `, the first ${result.examples.length}` : ''}\n`);
        for (const example of result.examples) process.stdout.write(`            ${example.subject}: ${example.detail}\n`);
      },
    });
  } catch (error) {
    // A database lost midway.
    await db.close();
    fail(`cannot check the ledger: ${(error as Error).message}`);
  }
  await db.close();
  process.stdout.write(broken === 0 ? `every invariant holds\n` : `${broken} of ${LEDGER_INVARIANTS.length} invariants broken\n`);
  if (broken > 0) process.exitCode = 1;
}
