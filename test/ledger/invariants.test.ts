// The ledger's invariants (src/ledger/invariants.ts): they hold over what the gateway writes, and a broken one
// names the rows that break it; `acg credit check` runs them over a database from the command line (found from
// outside: after a failover an operator had nothing to run but the tests' queries, copied into psql).
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkLedgerInvariants, LEDGER_INVARIANTS, ledgerViolations } from '../../src/ledger/invariants.ts';
import { listMigrations, migrate } from '../../src/platform/db/migrate.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import { loadConfig } from '../../src/platform/config.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

const run = promisify(execFile);
const ACG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/acg.js');

describe('the invariants over what the gateway wrote', () => {
  let world: World;
  let shop: Shop;
  beforeAll(async () => {
    world = await startWorld();
    shop = await openShop(world);
  });
  afterAll(() => world.close());

  it('hold after holds, captures and releases, and a lot changed behind the ledger breaks those that count it, naming it', async () => {
    const agent = await world.createAgent('invariants@example.com', 'invariants');
    const lot = await grant(world, agent.id, 10_000_000n);
    const offer = await shop.offer({ priceUc: '1000000' });
    const holds: string[] = [];
    for (let i = 0; i < 3; i++) {
      const minted = await mint(world, agent.token, offer.id);
      expect(minted.status).toBe(200);
      holds.push(minted.body.redemption.id);
    }
    expect((await world.api('POST', `/v1/redemptions/${holds[0]}/capture`, { token: shop.key, key: 'inv-capture', body: { amountUc: '400000' } })).status).toBe(200);
    expect((await world.api('POST', `/v1/redemptions/${holds[1]}/release`, { token: shop.key, key: 'inv-release', body: {} })).status).toBe(200);

    const results = await checkLedgerInvariants(world.gw.gateway.db);
    expect(results.map((result) => result.name)).toEqual(LEDGER_INVARIANTS.map((invariant) => invariant.name));
    expect(results.filter((result) => result.violations > 0)).toEqual([]);

    const lotId = (lot as { id: string }).id;
    await world.gw.gateway.db.query('UPDATE credit_lots SET remaining_uc = remaining_uc - 1 WHERE id = $1', [lotId]);
    try {
      const broken = (await ledgerViolations(world.gw.gateway.db)).filter((result) => result.violations > 0);
      expect(broken.map((result) => result.name)).toEqual([
        "each lot: granted = remaining + its open holds' allocations + its captured holds' allocations",
        "each lot's journal account replays to its remainder",
        "each agent's balance row: held, captured and granted are what its holds and lots say, and granted = remaining + held + captured",
      ]);
      expect(broken[0]!.examples).toEqual([{ subject: lotId, detail: expect.stringMatching(/^granted 10000000, remaining 8599999, open 1000000, captured 400000$/) }]);
      expect(broken[2]!.examples[0]!.subject).toBe(agent.id);
    } finally {
      await world.gw.gateway.db.query('UPDATE credit_lots SET remaining_uc = remaining_uc + 1 WHERE id = $1', [lotId]);
    }
  });
});

describe('acg credit check', () => {
  it('says each invariant as it checks it, exit 0; a broken one with its rows, exit 1; a database it cannot read, exit 2', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-credit-check-'));
    const database = onPostgres() ? await createPostgresDatabase() : undefined;
    const env = { ...process.env, ACG_DATA_DIR: dataDir, DATABASE_URL: database?.url ?? '', LOG_LEVEL: 'silent' };
    const acg = (...args: string[]) => run(process.execPath, [ACG, ...args], { env }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
    );
    const dbSettings = loadConfig({ LOG_LEVEL: 'silent' }).db;
    try {
      const db = await openDatabase({ dataDir, databaseUrl: database?.url, db: dbSettings });
      await migrate(db);
      await db.close();

      const holds = await acg('credit', 'check');
      expect(holds.code).toBe(0);
      const lines = holds.stdout.trim().split('\n');
      expect(lines[0]).toBe(`checking the ledger's ${LEDGER_INVARIANTS.length} invariants in ${database ? 'PostgreSQL (DATABASE_URL)' : `PGlite in ${dataDir}`}, in one snapshot`);
      expect(lines.slice(1, -1).map((line) => line.replace(/ \(\d+ ms\)$/, ''))).toEqual(LEDGER_INVARIANTS.map((invariant) => `  ok      ${invariant.name}`));
      expect(lines.at(-1)).toBe('every invariant holds');

      // A journal entry no operation balances: the first invariant names its operation.
      const writer = await openDatabase({ dataDir, databaseUrl: database?.url, db: dbSettings });
      await writer.query(`INSERT INTO journal_entries (operation_id, kind, account, amount_uc, created_at_s) VALUES ('op_unbalanced', 'grant', 'lot:lot_nowhere', 5, 0)`);
      await writer.close();
      const broken = await acg('credit', 'check', '--examples', '1');
      expect(broken.code).toBe(1);
      expect(broken.stdout).toContain(`  BROKEN  ${LEDGER_INVARIANTS[0]!.name}: 1 row(s)\n            op_unbalanced: sums to 5\n`);
      expect(broken.stdout.trim().split('\n').at(-1)).toBe(`1 of ${LEDGER_INVARIANTS.length} invariants broken`);

      expect(await acg('credit', 'check', '--examples', 'many')).toMatchObject({ code: 2, stderr: '--examples must be a whole number from 0 to 1000\n' });

      // A schema behind this release's: said as acg keys says it, not as a query's SQL error; nothing migrated.
      const last = listMigrations().at(-1)!;
      const rewinder = await openDatabase({ dataDir, databaseUrl: database?.url, db: dbSettings });
      await rewinder.query('DELETE FROM schema_migrations WHERE version = $1', [last.version]);
      await rewinder.close();
      expect(await acg('credit', 'check')).toEqual({
        code: 2,
        stdout: '',
        stderr: 'the database\'s schema is behind this release: run acg migrate first (during an upgrade, once the older instances are drained: docs/operations.md, "Upgrading to a new release"), or run the release the gateway runs\n',
      });
      if (!database) {
        const typo = path.join(dataDir, 'typo');
        expect(await run(process.execPath, [ACG, 'credit', 'check'], { env: { ...env, ACG_DATA_DIR: typo } }).catch((error: { code: number; stderr: string }) => error)).toMatchObject({
          code: 2,
          stderr: expect.stringContaining(`there is no database in ${typo}`),
        });
      }
    } finally {
      await database?.drop();
    }
  }, 90_000);

  it('says a database without the gateway\'s schema holds none and to run acg migrate, as acg keys does, exit 2 (found from outside: `relation "journal_entries" does not exist`)', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-credit-check-empty-'));
    const database = onPostgres() ? await createPostgresDatabase() : undefined;
    try {
      // An embedded database that exists, never migrated (on PostgreSQL, a new database).
      const db = await openDatabase({ dataDir, databaseUrl: database?.url, db: loadConfig({ LOG_LEVEL: 'silent' }).db });
      await db.query('SELECT 1');
      await db.close();
      const env = { ...process.env, ACG_DATA_DIR: dataDir, DATABASE_URL: database?.url ?? '', LOG_LEVEL: 'silent' };
      const refused = await run(process.execPath, [ACG, 'credit', 'check'], { env }).then(
        ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
        (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
      );
      expect(refused).toEqual({
        code: 2,
        stdout: '',
        stderr: "this database holds no gateway schema: run acg migrate (or start the gateway) first, or point DATABASE_URL / ACG_DATA_DIR at the gateway's\n",
      });
    } finally {
      await database?.drop();
    }
  });
});
