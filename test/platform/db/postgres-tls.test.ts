// PostgreSQL over TLS, as docs/operations.md ("PostgreSQL over TLS") tells operators to connect: a scratch cluster of
// the test's own serves TCP over TLS alone (hostssl), with a certificate a test CA issued for localhost and 127.0.0.1.
// A DATABASE_URL with sslmode=verify-full&sslrootcert=<the CA> opens, migrates and moves money over TLS; a
// certificate from another CA, or one for another host, is refused at once, and `acg serve` says which in one line,
// exit 2, without the URL's password.
//
// These tests need no TEST_DATABASE_URL, so they run once per suite: in the `postgres` project when the suite has
// one, else in the `pglite` project (as test/platform/database-faults.test.ts does).
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/platform/config.ts';
import { connectionSettingsRefusal, storageFailureKind } from '../../../src/platform/db/faults.ts';
import { listMigrations } from '../../../src/platform/db/migrate.ts';
import { openDatabase } from '../../../src/platform/db/open.ts';
import { onPostgres } from '../../support/database.ts';
import { grant, mint, openShop } from '../../support/ledger-fixture.ts';
import { createScratchCluster, scratchPostgresAvailable, type ScratchCluster } from '../../support/scratch-postgres.ts';
import { makeTestCa, makeTestCertificate, type TestCertificate } from '../../support/test-certificate.ts';
import { startWorld } from '../../support/world.ts';

const runHere = process.env.TEST_DATABASE_URL ? onPostgres() : true;
const opensslAvailable = (() => {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
if (runHere && !(scratchPostgresAvailable && opensslAvailable)) {
  process.stdout.write('NOTE: initdb/pg_ctl (/usr/lib/postgresql/15/bin or ACG_TEST_PG_BIN) or the openssl CLI not found: the PostgreSQL-over-TLS tests are skipped.\n');
}

/** In every URL of these tests, and in no refusal they see. */
const PASSWORD = 'tls-test-password-never-printed';

describe.runIf(runHere && scratchPostgresAvailable && opensslAvailable)('PostgreSQL over TLS (sslmode=verify-full), on a scratch cluster', () => {
  let ca: TestCertificate;
  let otherCa: TestCertificate;
  let serverCertificate: TestCertificate;
  let cluster: ScratchCluster;
  /** ACG_DATA_DIR of the `acg serve` this file starts (made here, not when the file is collected, which a skip does too). */
  let dataDir: string;

  /** The URL docs/operations.md gives, to `host`, trusting `trusted` (the file of the CA that issued the server's certificate). */
  const urlTo = (host: string, trusted: TestCertificate) =>
    `postgres://postgres:${PASSWORD}@${host}:${cluster.port}/postgres?sslmode=verify-full&sslrootcert=${trusted.certPath}`;

  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'acg-tls-'));
    ca = makeTestCa();
    otherCa = makeTestCa('another-test-ca');
    serverCertificate = makeTestCertificate({ dns: ['localhost'], ip: ['127.0.0.1'] }, { issuer: ca });
    // 127.0.0.2 is loopback too (all of 127/8 is), and not in the certificate: the host name check's case.
    cluster = await createScratchCluster({ tls: { certPem: serverCertificate.certPem, keyPem: serverCertificate.keyPem }, listenAddresses: ['127.0.0.1', '127.0.0.2'] });
    await cluster.start();
  }, 60_000);

  afterAll(async () => {
    await cluster?.destroy();
    for (const made of [ca, otherCa, serverCertificate]) made?.remove();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("opens, migrates and moves money through the gateway's own path, every connection over TLS (pg_stat_ssl)", async () => {
    const config = loadConfig({ DATABASE_URL: urlTo('127.0.0.1', ca) });
    const db = await openDatabase(config);
    const world = await startWorld({ database: { db, drop: async () => {} } });
    try {
      const { rows: applied } = await db.query<{ count: string }>('SELECT count(*)::text AS count FROM schema_migrations');
      expect(Number(applied[0]!.count)).toBe(listMigrations().length);
      const agent = await world.createAgent('tls-owner@example.com', 'tls-agent');
      const shop = await openShop(world);
      const offer = await shop.offer({ priceUc: '1000' });
      await grant(world, agent.id, 1_000_000n);
      const minted = await mint(world, agent.token, offer.id);
      expect(minted.status).toBe(200);
      const { rows: holds } = await db.query<{ amount_uc: bigint }>('SELECT amount_uc FROM holds WHERE id = $1', [minted.body.redemption.id]);
      expect(holds).toEqual([{ amount_uc: 1000n }]);
      // This connection, and every other the gateway holds open (its pool's), is TLS: no cleartext one slipped by.
      const { rows: own } = await db.query<{ ssl: boolean; version: string }>('SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
      expect(own).toEqual([{ ssl: true, version: expect.stringMatching(/^TLSv1\.[23]$/) }]);
      const { rows: all } = await db.query<{ ssl: boolean }>("SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.backend_type = 'client backend'");
      expect(all.length).toBeGreaterThan(0);
      expect(all.every((row) => row.ssl)).toBe(true);
    } finally {
      await world.close();
      await db.close();
    }
  });

  it('the server takes no cleartext connection (hostssl only): what a URL without TLS meets here', async () => {
    const client = new pg.Client({ connectionString: `postgres://postgres:${PASSWORD}@127.0.0.1:${cluster.port}/postgres?sslmode=disable` });
    await expect(client.connect()).rejects.toMatchObject({ code: '28000', message: expect.stringContaining('no encryption') });
  });

  it('a certificate from another CA, or for another host, is refused at once, naming the certificate problem, as a storage failure (503 while serving)', async () => {
    const cases = [
      { url: urlTo('127.0.0.1', otherCa), said: /^cannot open the database: the server's TLS certificate is not trusted: unable to verify the first certificate \(UNABLE_TO_VERIFY_LEAF_SIGNATURE; check sslrootcert in DATABASE_URL/ },
      { url: urlTo('127.0.0.2', ca), said: /^cannot open the database: the server's TLS certificate is not for the host DATABASE_URL names: .*127\.0\.0\.2.* \(ERR_TLS_CERT_ALTNAME_INVALID;/ },
    ];
    for (const { url, said } of cases) {
      const db = await openDatabase(loadConfig({ DATABASE_URL: url }));
      try {
        const startedMs = performance.now();
        const error = await db.query('SELECT 1').then(() => undefined, (failure: unknown) => failure);
        // Refused in the handshake, not after the connect timeout (10 s by default).
        expect(performance.now() - startedMs).toBeLessThan(2_000);
        expect(storageFailureKind(error)).toBe('unreachable');
        const refusal = connectionSettingsRefusal(error);
        expect(refusal).toMatch(said);
        expect(refusal).not.toContain(PASSWORD);
      } finally {
        await db.close();
      }
    }
  });

  it('acg serve with a certificate from another CA: one line naming it, no stack, no password, exit 2', async () => {
    const env = { ...process.env, PORT: '0', ACG_DATA_DIR: dataDir, DATABASE_URL: urlTo('127.0.0.1', otherCa), ACG_BASE_URL: '', LOG_LEVEL: 'silent', NODE_NO_WARNINGS: '1' };
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [path.resolve('bin/acg.js'), 'serve'], { env, timeout: 30_000 }, (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr }),
      );
    });
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n').filter((line) => line !== '' && !line.startsWith('acg: dist/'))).toEqual([
      "cannot open the database: the server's TLS certificate is not trusted: unable to verify the first certificate (UNABLE_TO_VERIFY_LEAF_SIGNATURE; " +
        "check sslrootcert in DATABASE_URL: it names the file of the CA that issued the server's certificate)",
    ]);
    expect(result.stdout + result.stderr).not.toContain(PASSWORD);
  }, 30_000);

  // Found from outside (bb137): the operator's commands said only "the database is unavailable (UNABLE_TO_VERIFY_LEAF_SIGNATURE)".
  it('every acg command that opens the database names the refused certificate as acg serve does', async () => {
    const env = { ...process.env, ACG_DATA_DIR: dataDir, DATABASE_URL: urlTo('127.0.0.1', otherCa), LOG_LEVEL: 'silent', NODE_NO_WARNINGS: '1' };
    for (const command of [['credit', 'check'], ['migrate'], ['keys', 'list']]) {
      const result = await new Promise<{ code: number | null; output: string }>((resolve) => {
        execFile(process.execPath, [path.resolve('bin/acg.js'), ...command], { env, timeout: 30_000 }, (error, stdout, stderr) =>
          resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, output: stdout + stderr }),
        );
      });
      expect([command.join(' '), result.code]).toEqual([command.join(' '), 2]);
      expect(result.output).toContain("cannot open the database: the server's TLS certificate is not trusted");
      expect(result.output).not.toContain(PASSWORD);
    }
  }, 60_000);
});
