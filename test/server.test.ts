import { execFile } from 'node:child_process';
import { EventEmitter, getEventListeners, once } from 'node:events';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { StorageUnavailableError } from '../src/platform/db/faults.ts';
import { SCHEMA_WATCH_INTERVAL_MS } from '../src/platform/db/migrate.ts';
import { installLastLineOfDefence, listenProblem, sleepUnlessAborted, startRetryDelayMs } from '../src/server.ts';
import { createPostgresDatabase, onPostgres } from './support/database.ts';
import { spawnGateway, type GatewayProcess } from './support/process.ts';
import { waitFor } from './support/wait.ts';

function setUp() {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  const target = new EventEmitter();
  let exits = 0;
  installLastLineOfDefence(log, () => exits++, target);
  return { lines, target, exits: () => exits };
}

describe('the last line of defence', () => {
  it('serves on after a database failure escapes as an uncaught exception or an unhandled rejection, with one warn each', () => {
    const { lines, target, exits } = setUp();
    target.emit('uncaughtException', new Error('Connection terminated unexpectedly'));
    target.emit('unhandledRejection', new StorageUnavailableError('unreachable', new Error('read ECONNRESET')));
    expect(exits()).toBe(0);
    expect(lines.map((l) => [l.level, l.lastLineOfDefence])).toEqual([
      [40, true],
      [40, true],
    ]);
  });

  it('logs any other unhandled rejection as an error and serves on', () => {
    const { lines, target, exits } = setUp();
    target.emit('unhandledRejection', new TypeError('x is undefined'));
    expect(exits()).toBe(0);
    expect(lines.map((l) => l.level)).toEqual([50]);
  });

  it('stops gracefully on any other uncaught exception, since the process state is unknown', () => {
    const { lines, target, exits } = setUp();
    target.emit('uncaughtException', new TypeError('x is undefined'));
    expect(exits()).toBe(1);
    expect(lines.map((l) => l.level)).toEqual([60]);
  });
});

describe('start-up retries', () => {
  it('wait about twice as long after each failed attempt, from 250 ms up to the cap', () => {
    for (let attempt = 1; attempt <= 12; attempt++) {
      const ceilingMs = Math.min(2000, 250 * 2 ** (attempt - 1));
      const delayMs = startRetryDelayMs(attempt, 2000);
      expect(delayMs).toBeGreaterThanOrEqual(ceilingMs / 2);
      expect(delayMs).toBeLessThanOrEqual(ceilingMs);
    }
  });
});

describe('the wait between start-up attempts', () => {
  it('leaves no abort listener on the signal, however many retries there are (eleven made Node warn of a leak)', async () => {
    const starting = new AbortController();
    for (let attempt = 1; attempt <= 12; attempt++) await sleepUnlessAborted(1, starting.signal);
    expect(getEventListeners(starting.signal, 'abort')).toHaveLength(0);
  });

  it('ends at once when the gateway stops starting, before or during the wait', async () => {
    const starting = new AbortController();
    const startedMs = performance.now();
    const waiting = sleepUnlessAborted(60_000, starting.signal);
    starting.abort();
    await waiting;
    await sleepUnlessAborted(60_000, starting.signal);
    expect(performance.now() - startedMs).toBeLessThan(1_000);
  });
});

/** Runs `use` against a real `acg serve` on a data directory (and, on PostgreSQL, a database) of its own, then removes them. */
async function withSpawnedGateway(dirPrefix: string, env: Record<string, string>, use: (gateway: GatewayProcess) => Promise<void>): Promise<void> {
  const database = onPostgres() ? await createPostgresDatabase() : undefined;
  const dataDir = mkdtempSync(path.join(tmpdir(), dirPrefix));
  try {
    const gateway = await spawnGateway({ ACG_DATA_DIR: dataDir, DATABASE_URL: database?.url ?? '', ...env });
    try {
      await use(gateway);
    } finally {
      await gateway.kill();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    await database?.drop();
  }
}

describe('acg serve with PORT=0', () => {
  it('names the port it bound in its base URL: in its listening line and as the issuer it publishes', async () => {
    // ACG_PORT beside it (found from outside: set alone, it started the gateway on 8080 without a word) is said to be ignored.
    await withSpawnedGateway('acg-port0-', { PORT: '0', ACG_PORT: '19999' }, async (gateway) => {
      expect(gateway.url).toMatch(/^http:\/\/127\.0\.0\.1:[1-9][0-9]*$/);
      expect(gateway.logs.filter((line) => line.level === 40).map((line) => line.msg)).toContain('ACG_PORT is not a setting of the gateway, which reads PORT (without ACG_): ACG_PORT is ignored');
      expect(gateway.logs.find((line) => String(line.msg).startsWith('gateway listening'))?.baseUrl).toBe(gateway.url);
      const metadata = (await (await fetch(`${gateway.url}/.well-known/oauth-authorization-server`)).json()) as { issuer: string };
      expect(metadata.issuer).toBe(gateway.url);
    });
  }, 90_000);
});

describe('acg serve in live mode without some settings', () => {
  it('says in its ready line which settings it warned of, rather than "serving every route" under its own warnings (found from outside)', async () => {
    await withSpawnedGateway('acg-live-ready-', { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1' }, async (gateway) => {
      const warned = gateway.logs.filter((line) => line.level === 40 && typeof line.setting === 'string').map((line) => line.setting);
      const ready = gateway.logs.find((line) => String(line.msg).startsWith('gateway ready'));
      expect(warned).toContain('ACG_SIGNING_KEY');
      expect(ready?.missingPieces).toEqual(warned);
      expect(ready?.msg).toBe(`gateway ready, with warnings above about ${warned.join(', ')}`);
    });
  }, 90_000);
});

describe('acg serve after it is ready', () => {
  // On PGlite only: what it tests does not touch the database, and the spawned gateway's start costs seconds.
  it.skipIf(onPostgres())('compiles every route schema no request needed yet in its idle time, says so, and still answers', async () => {
    await withSpawnedGateway('acg-schemas-', { ACG_PRECOMPILE_SCHEMAS: '1' }, async (gateway) => {
      const compiled = await waitFor(() => gateway.logs.find((line) => String(line.msg).startsWith('route schemas compiled in the background')), {
        what: 'the background compile of the route schemas to end',
        timeoutMs: 60_000,
      });
      expect(compiled.compiled).toBeGreaterThan(100);
      expect(gateway.logs.some((line) => String(line.msg).startsWith('route schemas:'))).toBe(false);
      // A route whose schemas were compiled in the background answers as before: a validated refusal.
      const refused = await fetch(`${gateway.url}/v1/agents`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'k1' }, body: '{"unexpected":true}' });
      expect(refused.status).toBeGreaterThanOrEqual(400);
      expect(refused.status).toBeLessThan(500);
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    });
  }, 90_000);
});

describe('acg serve stopping', () => {
  it('ends a clean stop on SIGTERM with an info line saying how long it took, then exits 0', async () => {
    await withSpawnedGateway('acg-stop-', {}, async (gateway) => {
      expect(await gateway.kill('SIGTERM')).toBe(0);
      const last = await waitFor(() => gateway.logs.find((line) => String(line.msg).startsWith('stopped in')), { what: 'the line of a finished stop', timeoutMs: 5_000 });
      expect(last).toMatchObject({ level: 30, exitCode: 0, msg: `stopped in ${String(last.stopMs)} ms` });
      expect(last.stopMs).toBeGreaterThanOrEqual(0);
      expect(gateway.logs.at(-1)).toBe(last);
    });
  }, 90_000);

  it('stops at once when a client holds a connection that has sent nothing, or half a request head (found from outside: 15 s, then exit 1)', async () => {
    await withSpawnedGateway('acg-stop-held-', {}, async (gateway) => {
      const { port } = new URL(gateway.url);
      const silent = connect(Number(port), '127.0.0.1');
      const halfHead = connect(Number(port), '127.0.0.1');
      await Promise.all([once(silent, 'connect'), once(halfHead, 'connect')]);
      halfHead.write('GET /v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\n');
      for (const socket of [silent, halfHead]) socket.on('error', () => {});
      const startedMs = Date.now();
      expect(await gateway.kill('SIGTERM')).toBe(0);
      expect(Date.now() - startedMs).toBeLessThan(5_000);
      expect(gateway.logs.find((line) => String(line.msg).startsWith('stopped in'))).toMatchObject({ level: 30, exitCode: 0 });
      silent.destroy();
      halfHead.destroy();
    });
  }, 90_000);
});

describe('acg serve stopping while its last spans wait for a collector', () => {
  // PostgreSQL only: the watch for a newer release's schema runs there alone (the embedded database admits one
  // process). The stop waits up to 3 s for a collector that never answers, after the database is closed; the SIGTERM
  // is timed so that a tick of the watch falls in that wait.
  it.runIf(onPostgres())('queries nothing once the database is closed: no "database unavailable" line (found from outside)', async () => {
    const held: Socket[] = [];
    const collector = createServer((socket) => {
      held.push(socket);
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    const { port } = collector.address() as AddressInfo;
    try {
      await withSpawnedGateway('acg-stop-flush-', { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` }, async (gateway) => {
        expect((await fetch(`${gateway.url}/healthz`)).status).toBe(200);
        const readyAtMs = Number(gateway.logs.find((line) => String(line.msg).startsWith('gateway ready'))?.time);
        const tickAtMs = readyAtMs + SCHEMA_WATCH_INTERVAL_MS;
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, tickAtMs - 1_500 - Date.now())));
        expect(await gateway.kill('SIGTERM')).toBe(0);
        const stopped = gateway.logs.find((line) => String(line.msg).startsWith('stopped in'));
        // The stop outlasted the tick, so a watch still running would have met the closed pool.
        expect(Number(stopped?.time)).toBeGreaterThan(tickAtMs);
        expect(gateway.logs.filter((line) => String(line.msg).includes('database unavailable'))).toEqual([]);
      });
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => collector.close(resolve));
    }
  }, 90_000);
});

describe('acg serve with connection settings PostgreSQL refuses', () => {
  // No retry cures a database or role that does not exist: one line naming it and DATABASE_URL, exit 2, as every
  // other acg command says it (found from outside: a crash with the driver's stack).
  it.runIf(onPostgres())('says a missing database or role in one line, no stack trace, and exits 2', async () => {
    const base = new URL(process.env.TEST_DATABASE_URL!);
    const missingDatabase = new URL(base);
    missingDatabase.pathname = '/acg_no_such_database';
    const missingRole = new URL(base);
    missingRole.username = 'acg_no_such_role';
    for (const [url, said] of [
      [missingDatabase, 'cannot open the database: database "acg_no_such_database" does not exist (SQLSTATE 3D000; check DATABASE_URL)'],
      [missingRole, 'cannot open the database: role "acg_no_such_role" does not exist (SQLSTATE 28000; check DATABASE_URL)'],
    ] as const) {
      const env = { ...process.env, PORT: '0', DATABASE_URL: url.href, ACG_BASE_URL: '', LOG_LEVEL: 'silent' };
      const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        execFile(process.execPath, [path.resolve('bin/acg.js'), 'serve'], { env, timeout: 60_000 }, (error, _stdout, stderr) =>
          resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stderr }),
        );
      });
      expect(result.code).toBe(2);
      expect(result.stderr.split('\n').filter((line) => line !== '' && !line.startsWith('acg: dist/'))).toEqual([said]);
    }
  }, 60_000);
});

describe('acg serve asked for TLS by a server without it', () => {
  // A server that answers PostgreSQL's SSLRequest with 'N', as one without TLS does; DATABASE_URL asks sslmode=require.
  it.skipIf(onPostgres())('says so in one line naming sslmode, no stack trace, and exits 2 (found from outside: a crash, exit 1)', async () => {
    const server = createServer((socket) => socket.once('data', () => socket.write('N')));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-no-tls-'));
    try {
      const env = { ...process.env, PORT: '0', ACG_DATA_DIR: dataDir, DATABASE_URL: `postgres://acg@127.0.0.1:${port}/acg?sslmode=require`, ACG_BASE_URL: '', LOG_LEVEL: 'silent', NODE_NO_WARNINGS: '1' };
      const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        execFile(process.execPath, [path.resolve('bin/acg.js'), 'serve'], { env, timeout: 60_000 }, (error, _stdout, stderr) =>
          resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stderr }),
        );
      });
      expect(result.code).toBe(2);
      expect(result.stderr.split('\n').filter((line) => line !== '' && !line.startsWith('acg: dist/'))).toEqual([
        'cannot open the database: the server does not support SSL connections (check sslmode in DATABASE_URL)',
      ]);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
      await new Promise((resolve) => server.close(resolve));
    }
  }, 60_000);
});

describe('acg serve with an ACG_DATA_DIR it cannot use', () => {
  const serveWith = (dataDir: string) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const env = { ...process.env, PORT: '0', ACG_DATA_DIR: dataDir, DATABASE_URL: '', ACG_BASE_URL: '', LOG_LEVEL: 'silent' };
      execFile(process.execPath, [path.resolve('bin/acg.js'), 'serve'], { env, timeout: 60_000 }, (error, _stdout, stderr) =>
        resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stderr }),
      );
    });
  const linesOf = (stderr: string) => stderr.split('\n').filter((line) => line !== '' && !line.startsWith('acg: dist/'));

  it.skipIf(onPostgres())('says so in one line naming the setting, no stack trace, and exits 2 (found from outside: a crash)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'acg-data-file-'));
    const file = path.join(dir, 'a-file');
    writeFileSync(file, '');
    try {
      const result = await serveWith(file);
      expect(result.code).toBe(2);
      expect(linesOf(result.stderr)).toEqual([
        `acg serve: cannot use ACG_DATA_DIR (${file}) for the embedded database: ENOTDIR: not a directory, stat '${file}/pglite'. ` +
          'Set ACG_DATA_DIR to a directory this user may write, or DATABASE_URL to a PostgreSQL database',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it.skipIf(onPostgres() || process.platform !== 'linux')('says so for a place the file system never makes (under /proc), where it hung at full CPU (found from outside)', async () => {
    const result = await serveWith('/proc/acg-data');
    expect(result.code).toBe(2);
    expect(linesOf(result.stderr)).toEqual([
      "acg serve: cannot use ACG_DATA_DIR (/proc/acg-data) for the embedded database: ENOENT: no such file or directory, mkdir '/proc/acg-data'. " +
        'Set ACG_DATA_DIR to a directory this user may write, or DATABASE_URL to a PostgreSQL database',
    ]);
  }, 60_000);
});

describe('acg serve on a port it cannot have', () => {
  it('answers a taken port with one line naming the port and PORT, no stack trace, and exits 2', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-port-taken-'));
    try {
      const env = { ...process.env, PORT: String(port), ACG_DATA_DIR: dataDir, DATABASE_URL: '', ACG_BASE_URL: '' };
      const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        execFile(process.execPath, [path.resolve('bin/acg.js'), 'serve'], { env, timeout: 60_000 }, (error, stdout, stderr) =>
          resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stdout, stderr }),
        );
      });
      expect(result).toEqual({
        code: 2,
        stdout: '',
        stderr:
          `acg serve: port ${port} on 127.0.0.1 is already in use (a gateway already running?): stop what listens there, ` +
          `or choose a free port with PORT, e.g. PORT=${port + 1} npm start (and the same PORT for acg commands aimed at it)\n`,
      });
      // It stopped before touching its data directory.
      expect(existsSync(path.join(dataDir, 'pglite'))).toBe(false);
    } finally {
      taken.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('names the variable to change for a port it may not open and an address that is not this machine', () => {
    const failure = (code: string) => Object.assign(new Error(code), { code });
    expect(listenProblem(failure('EACCES'), { host: '127.0.0.1', port: 80 })).toBe(
      'acg serve: no permission to listen on port 80 on 127.0.0.1 (ports below 1024 need privileges): set PORT to another port, e.g. PORT=8080 npm start',
    );
    expect(listenProblem(failure('EADDRNOTAVAIL'), { host: '192.0.2.7', port: 8080 })).toBe(
      'acg serve: cannot listen on 192.0.2.7, which is not an address of this machine: set HOST (default 127.0.0.1; 0.0.0.0 for every interface)',
    );
    expect(listenProblem(failure('EMFILE'), { host: '127.0.0.1', port: 8080 })).toBeUndefined();
  });
});
