import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/platform/config.ts';
import { DEFAULT_DATABASE_TIMEOUTS } from '../../../src/platform/db/database.ts';
import { isStorageUnavailable, logBackgroundFailure, OutageTracker, StorageUnavailableError, storageFailureKind } from '../../../src/platform/db/faults.ts';
import { openPglite } from '../../../src/platform/db/pglite.ts';
import { openPostgres } from '../../../src/platform/db/postgres.ts';
import { createPostgresDatabase, onPostgres } from '../../support/database.ts';
import { waitFor } from '../../support/wait.ts';
import { startWorld } from '../../support/world.ts';

const withCode = (code: string, message = 'failed') => Object.assign(new Error(message), { code });

function captureLog() {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { log, lines };
}

describe('a background run that failed', () => {
  it('is a debug line without a stack when the database is unreachable, a warn line otherwise (found from outside: webhook work interrupted by an outage logged warn with a stack)', () => {
    const lines: Array<[string, Record<string, unknown>, string]> = [];
    const log = {
      debug: (fields: object, message: string) => void lines.push(['debug', fields as Record<string, unknown>, message]),
      info: (fields: object, message: string) => void lines.push(['info', fields as Record<string, unknown>, message]),
      warn: (fields: object, message: string) => void lines.push(['warn', fields as Record<string, unknown>, message]),
    };
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    logBackgroundFailure(log, new StorageUnavailableError('unreachable', refused), { deliveryId: 'whd_1' }, 'recording a webhook attempt');
    const bug = new TypeError('not a function');
    logBackgroundFailure(log, bug, { job: 'topups' }, 'background job');
    expect(lines).toEqual([
      ['debug', { deliveryId: 'whd_1', reason: expect.any(String) }, 'recording a webhook attempt skipped: database unavailable'],
      ['warn', { err: bug, job: 'topups' }, 'background job failed'],
    ]);
  });
});

describe('storage failure classification', () => {
  it('calls connection-level failures unreachable, statement and lock timeouts timeout, and leaves ordinary errors alone', () => {
    // 3D000 and class 28: the database or role dropped, or the password changed, while the gateway runs (found from
    // outside: every request answered 500 with a stack while /readyz said 503).
    for (const code of ['57P01', '57P02', '57P03', '53300', '08006', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', '3D000', '28000', '28P01']) {
      expect(storageFailureKind(withCode(code)), code).toBe('unreachable');
    }
    for (const message of ['cannot execute INSERT in a read-only transaction', 'cannot execute nextval() in a read-only transaction', 'cannot execute CREATE TABLE during recovery', 'Connection terminated unexpectedly', 'Connection terminated due to connection timeout', 'timeout expired', 'Query read timeout', 'Client has encountered a connection error and is not queryable', 'PGlite is closed']) {
      expect(storageFailureKind(new Error(message)), message).toBe('unreachable');
    }
    expect(storageFailureKind(withCode('57014', 'canceling statement due to statement timeout'))).toBe('timeout');
    // A full pool: the database answers, this instance has no free connection (found from outside: logged as an outage).
    expect(storageFailureKind(new Error('timeout exceeded when trying to connect'))).toBe('saturated');
    for (const error of [withCode('25006', 'cannot execute INSERT in a read-only transaction'), withCode('25006', 'cannot execute LOCK TABLE during recovery')]) {
      expect(storageFailureKind(error), error.message).toBe('unreachable');
    }
    expect(storageFailureKind(withCode('55P03', 'canceling statement due to lock timeout'))).toBe('timeout');
    for (const error of [withCode('23505'), withCode('40001'), withCode('42P01'), withCode('25P02', 'current transaction is aborted'), new Error('cannot execute INSERT'), new TypeError('x is undefined'), 'a string']) {
      expect(storageFailureKind(error)).toBeUndefined();
    }
  });

  it('recognises a StorageUnavailableError carried as the cause of another error', () => {
    const storage = new StorageUnavailableError('unreachable', withCode('ECONNREFUSED'));
    expect(isStorageUnavailable(storage)).toBe(true);
    expect(isStorageUnavailable(new Error('wrapped', { cause: storage }))).toBe(true);
    expect(isStorageUnavailable(withCode('ECONNREFUSED'))).toBe(false);
    expect(storage.message).toBe('the database is unavailable (ECONNREFUSED: failed)');
  });
});

describe('outage tracker', () => {
  it('logs one warn when an outage starts and one info when it ends, however many calls fail', async () => {
    const { log, lines } = captureLog();
    const tracker = new OutageTracker(log);
    for (let i = 0; i < 50; i++) await tracker.observe(() => Promise.reject(withCode('ECONNREFUSED'))).catch(() => {});
    await tracker.observe(async () => 'ok');
    await tracker.observe(async () => 'ok');
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [40, 'database unavailable: requests that need it answer 503 storage_unavailable until it is back'],
      [30, expect.stringMatching(/^database available again after \d+ ms$/)],
    ]);
    expect(lines[1]!.failedCalls).toBe(50);
  });

  it('keeps one outage one when a call sent before it began is answered after another call failed', async () => {
    const { log, lines } = captureLog();
    const tracker = new OutageTracker(log);
    let answerLate!: (value: string) => void;
    const early = tracker.observe(() => new Promise<string>((resolve) => (answerLate = resolve)));
    await tracker.observe(() => Promise.reject(withCode('ECONNRESET'))).catch(() => {});
    answerLate('answered before the server went away');
    await early;
    await tracker.observe(() => Promise.reject(withCode('ECONNREFUSED'))).catch(() => {});
    await tracker.observe(() => Promise.reject(withCode('23505'))).catch(() => {});
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [40, 'database unavailable: requests that need it answer 503 storage_unavailable until it is back'],
      [30, expect.stringMatching(/^database available again after \d+ ms$/)],
    ]);
    expect(lines[1]!.failedCalls).toBe(2);
  });

  it('keeps one outage one when a call sent during it fails after another call has ended it', async () => {
    const { log, lines } = captureLog();
    const tracker = new OutageTracker(log);
    await tracker.observe(() => Promise.reject(withCode('ECONNREFUSED'))).catch(() => {});
    let failLate!: (error: Error) => void;
    const waiting = tracker.observe(() => new Promise<string>((_, reject) => (failLate = reject)));
    await tracker.observe(async () => 'the server is back');
    failLate(new Error('timeout exceeded when trying to connect'));
    await expect(waiting).rejects.toBeInstanceOf(StorageUnavailableError);
    await tracker.observe(async () => 'still back');
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [40, 'database unavailable: requests that need it answer 503 storage_unavailable until it is back'],
      [30, expect.stringMatching(/^database available again after \d+ ms$/)],
    ]);
    expect(lines[1]!.failedCalls).toBe(1);

    await tracker.observe(() => Promise.reject(withCode('ECONNRESET'))).catch(() => {});
    expect(lines.map((l) => l.level), 'a call sent after the recovery starts the next outage').toEqual([40, 30, 40]);
  });

  it('does not call a server-side statement or lock timeout an outage, nor a full pool, nor an ordinary SQL error', async () => {
    const { log, lines } = captureLog();
    const tracker = new OutageTracker(log);
    await expect(tracker.observe(() => Promise.reject(withCode('57014')))).rejects.toBeInstanceOf(StorageUnavailableError);
    await expect(tracker.observe(() => Promise.reject(withCode('23505')))).rejects.toMatchObject({ code: '23505' });
    await expect(tracker.observe(() => Promise.reject(new Error('timeout exceeded when trying to connect')))).rejects.toMatchObject({ kind: 'saturated' });
    expect(lines).toEqual([]);
  });
});

describe('drivers', () => {
  it('a PostgreSQL that refuses connections fails every kind of call with StorageUnavailableError', async () => {
    const db = openPostgres('postgres://postgres@127.0.0.1:1/none', { timeouts: { ...DEFAULT_DATABASE_TIMEOUTS, connectTimeoutMs: 500 } });
    try {
      await expect(db.query('SELECT 1')).rejects.toBeInstanceOf(StorageUnavailableError);
      await expect(db.transaction((tx) => tx.query('SELECT 1'))).rejects.toBeInstanceOf(StorageUnavailableError);
      await expect(db.withAdvisoryLock(1, (conn) => conn.query('SELECT 1'))).rejects.toBeInstanceOf(StorageUnavailableError);
    } finally {
      await db.close();
    }
  });

  it('a server that accepts connections but never answers fails within the connect timeout', async () => {
    const sockets: Socket[] = [];
    const silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const db = openPostgres(`postgres://postgres@127.0.0.1:${(silent.address() as AddressInfo).port}/none`, {
      timeouts: { ...DEFAULT_DATABASE_TIMEOUTS, connectTimeoutMs: 300 },
    });
    try {
      const startedMs = Date.now();
      await expect(db.transaction((tx) => tx.query('SELECT 1'))).rejects.toBeInstanceOf(StorageUnavailableError);
      expect(Date.now() - startedMs).toBeLessThan(2000);
      // The migrations' own session too, so that start-up waits and retries (found from outside: exit 1 at once).
      await expect(db.withAdvisoryLock(1, async () => 1)).rejects.toBeInstanceOf(StorageUnavailableError);
    } finally {
      await db.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  // One run is enough: the PostgreSQL pass does not use PGlite.
  it.skipIf(onPostgres())('a closed PGlite fails with StorageUnavailableError', async () => {
    const db = await openPglite(undefined);
    await db.close();
    await expect(db.query('SELECT 1')).rejects.toBeInstanceOf(StorageUnavailableError);
    await expect(db.transaction((tx) => tx.query('SELECT 1'))).rejects.toBeInstanceOf(StorageUnavailableError);
  });

  describe.runIf(onPostgres())('on PostgreSQL', () => {
    async function withDatabase(timeouts: Partial<typeof DEFAULT_DATABASE_TIMEOUTS>, fn: (db: ReturnType<typeof openPostgres>) => Promise<void>) {
      const created = await createPostgresDatabase();
      const db = openPostgres(created.url, { timeouts: { ...DEFAULT_DATABASE_TIMEOUTS, ...timeouts } });
      try {
        await fn(db);
      } finally {
        await db.close();
        await created.drop();
      }
    }

    it('a database dropped while in use (3D000 on every new connection) fails each call with StorageUnavailableError (found from outside: 500 with a stack)', async () => {
      const created = await createPostgresDatabase();
      const db = openPostgres(created.url, { timeouts: DEFAULT_DATABASE_TIMEOUTS });
      try {
        await db.query('SELECT 1');
        await created.drop();
        for (let i = 0; i < 3; i++) {
          const failure = await db.transaction((tx) => tx.query('SELECT 1')).catch((error: unknown) => error);
          expect(failure).toBeInstanceOf(StorageUnavailableError);
          expect((failure as StorageUnavailableError).kind).toBe('unreachable');
        }
      } finally {
        await db.close();
        await created.drop();
      }
    });

    it('a connection terminated inside a transaction (57P01) fails it with StorageUnavailableError, and its client is never reused', async () => {
      await withDatabase({}, async (db) => {
        const pids = new Set<number>();
        await expect(
          db.transaction(async (tx) => {
            const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
            pids.add(rows[0]!.pid);
            await tx.query('SELECT pg_terminate_backend(pg_backend_pid())');
          }),
        ).rejects.toBeInstanceOf(StorageUnavailableError);
        for (let i = 0; i < 5; i++) {
          const { rows } = await db.transaction((tx) => tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'));
          expect(pids.has(rows[0]!.pid)).toBe(false);
        }
      });
    });

    it('a connection that refuses writes as a standby does (25006) fails its call with StorageUnavailableError and leaves the pool; the next call gets a writable one', async () => {
      // A session made read-only answers writes exactly as a hot standby does: SQLSTATE 25006.
      const created = await createPostgresDatabase();
      const db = openPostgres(created.url, { poolSizeMax: 1 });
      try {
        const pidOf = async () => (await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        await db.query('SET default_transaction_read_only = on');
        const readOnlyPid = await pidOf();
        await expect(db.query('CREATE TABLE written (id INT)')).rejects.toMatchObject({ name: 'StorageUnavailableError', kind: 'unreachable' });
        expect(await pidOf()).not.toBe(readOnlyPid);
        await db.query('CREATE TABLE written (id INT)');

        await db.query('SET default_transaction_read_only = on');
        const inTransactionPid = await pidOf();
        await expect(db.transaction((tx) => tx.query('INSERT INTO written VALUES (1)'))).rejects.toMatchObject({ name: 'StorageUnavailableError', kind: 'unreachable' });
        expect(await pidOf()).not.toBe(inTransactionPid);
        await db.transaction((tx) => tx.query('INSERT INTO written VALUES (1)'));
        expect((await db.query('SELECT count(*)::int AS n FROM written')).rows).toEqual([{ n: 1 }]);
      } finally {
        await db.close();
        await created.drop();
      }
    });

    it('a connection lost while its transaction waits between statements ends neither the process nor the next transaction', async () => {
      await withDatabase({}, async (db) => {
        await expect(
          db.transaction(async (tx) => {
            const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
            // Killed from another connection while this one is idle: the driver emits 'error' on the client.
            const pid = rows[0]!.pid;
            await db.query('SELECT pg_terminate_backend($1)', [pid]);
            // The backend sends its FATAL before it leaves pg_stat_activity, so once it has left, the idle
            // client's socket holds the error; the poll's own round trips let the driver read it.
            const backends = async () => (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [pid])).rows[0]!.n;
            await waitFor(backends, { until: (n) => n === 0, what: `backend ${pid} to exit` });
            await tx.query('SELECT 1');
          }),
        ).rejects.toBeInstanceOf(StorageUnavailableError);
        expect((await db.transaction((tx) => tx.query('SELECT 1 AS one'))).rows).toEqual([{ one: 1 }]);
      });
    });

    it('bounds a statement by the statement timeout and a lock wait by the lock timeout; the advisory-lock session has neither', async () => {
      await withDatabase({ statementTimeoutMs: 300, lockTimeoutMs: 200 }, async (db) => {
        await expect(db.query('SELECT pg_sleep(2)')).rejects.toMatchObject({ name: 'StorageUnavailableError', kind: 'timeout' });
        await db.query('CREATE TABLE locked (id INT PRIMARY KEY)');
        await db.query('INSERT INTO locked VALUES (1)');
        let releaseLock: (() => void) | undefined;
        const holding = db.transaction(async (tx) => {
          await tx.query('SELECT id FROM locked WHERE id = 1 FOR UPDATE');
          await new Promise<void>((resolve) => (releaseLock = resolve));
        });
        const release = await waitFor(() => releaseLock, { what: 'the first transaction to hold the row lock' });
        const startedMs = Date.now();
        await expect(db.transaction((tx) => tx.query('UPDATE locked SET id = 2 WHERE id = 1'))).rejects.toMatchObject({ kind: 'timeout' });
        expect(Date.now() - startedMs).toBeLessThan(1500);
        release();
        await holding;
        await expect(db.withAdvisoryLock(42, (conn) => conn.query('SELECT pg_sleep(0.5)'))).resolves.toBeDefined();
      });
    });
  });
});

describe('the HTTP edge', () => {
  it('answers 503 storage_unavailable with Retry-After when the database is gone (each request logged at info, no stack) or timed a statement out (warn)', async () => {
    const { log, lines } = captureLog();
    const timingOut = async (app: FastifyInstance) => {
      app.get('/v1/test/timeout', async () => {
        throw new StorageUnavailableError('timeout', withCode('57014', 'canceling statement due to statement timeout'));
      });
    };
    const world = await startWorld({ log, features: [timingOut] });
    try {
      const token = await world.humanToken('edge@example.com');
      await world.gw.database.db.close();
      const api = await world.api('GET', '/v1/me', { token });
      expect(api.status).toBe(503);
      expect(api.headers.get('retry-after')).toBe('1');
      expect(api.body.code).toBe('storage_unavailable');
      const oauth = await world.api('POST', '/oauth/register', { body: { redirect_uris: ['http://127.0.0.1:9/cb'], client_name: 'x' } });
      expect(oauth.status).toBe(503);
      expect(oauth.body.error).toBe('temporarily_unavailable');
      expect(oauth.headers.get('retry-after')).toBe('1');
      const failed = lines.filter((l) => l.msg === 'request failed: database unavailable');
      expect(failed.length).toBe(2);
      for (const line of failed) expect([line.level, line.err]).toEqual([30, undefined]);
      expect(lines.filter((l) => Number(l.level) >= 50)).toEqual([]);

      // A live database timing a statement out is the same answer, but a warn: a slow query or contention to look into.
      const timedOut = await world.api('GET', '/v1/test/timeout');
      expect([timedOut.status, timedOut.body.code, timedOut.headers.get('retry-after')]).toEqual([503, 'storage_unavailable', '1']);
      const warned = lines.filter((l) => l.msg === 'request failed: a database statement or lock wait timed out');
      expect(warned.map((l) => [l.level, l.err])).toEqual([[40, undefined]]);
    } finally {
      await world.close();
    }
  });
});

describe('configuration', () => {
  it('documents defaults for the database bounds and refuses a lock timeout above the statement timeout', () => {
    expect(loadConfig({}).db).toEqual({ ...DEFAULT_DATABASE_TIMEOUTS, startRetryMaxMs: 10_000, poolSizeMax: 20 });
    expect(loadConfig({ ACG_DB_POOL_SIZE_MAX: '50' }).db.poolSizeMax).toBe(50);
    expect(() => loadConfig({ ACG_DB_POOL_SIZE_MAX: '2' })).toThrow(/ACG_DB_POOL_SIZE_MAX/);
    expect(() => loadConfig({ ACG_DB_STATEMENT_TIMEOUT_MS: '1000', ACG_DB_LOCK_TIMEOUT_MS: '2000' })).toThrow(/ACG_DB_LOCK_TIMEOUT_MS \(2000\) must not exceed ACG_DB_STATEMENT_TIMEOUT_MS \(1000\)/);
  });
});
