// `acg serve`: listen at once, then bring the gateway up behind the open socket as soon as the database
// can be reached (retrying with capped back-off, migrating under the advisory lock), and stop it
// gracefully (finish in-flight requests, then close the database) on SIGTERM or SIGINT.
// The features (./app.ts: Fastify, every route and schema) are loaded only once the socket is open, so
// the process answers /healthz, and says where it listens, before the bulk of its start-up.
import { setTimeout as delay } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { ConfigError, loadConfig, unreadSettings, type Config } from './platform/config.ts';
import { DatabaseInUseError, type Database } from './platform/db/database.ts';
import { MigrationError } from './platform/db/migrate.ts';
import { connectionSettingsRefusal, isStorageUnavailable, storageFailureKind } from './platform/db/faults.ts';
import { openDatabase } from './platform/db/open.ts';
import { createGateway, createLogger, migrateAndReport, type Gateway } from './platform/gateway.ts';
import { openFrontDoor, type FrontDoor } from './platform/http/front-door.ts';
import { tracedRequests } from './platform/http/tracing.ts';
import { applyHeapPolicy } from './platform/heap.ts';
import { BOX_KEY_CHECK_INTERVAL_S, configuredSecretBoxKey, recordBoxKeyCheck } from './platform/secret-box.ts';
import { checkConfiguredKey, UnusableSigningKeysError } from './platform/signing.ts';
import { processWideLog, startTelemetry, stopTelemetry, telemetryRequested } from './platform/telemetry.ts';

const START_RETRY_FIRST_MS = 250;
const SHUTDOWN_BUDGET_MS = 15_000;

/** The wait before start-up attempt `attempt + 1`: doubling from 250 ms, capped, with jitter so instances spread out. */
export function startRetryDelayMs(attempt: number, capMs: number): number {
  const ceilingMs = Math.min(capMs, START_RETRY_FIRST_MS * 2 ** Math.min(attempt - 1, 20));
  return Math.round(ceilingMs * (0.5 + Math.random() / 2));
}

/**
 * Waits `ms`, or less if `signal` aborts (the gateway is stopping). Node's timer removes its abort listener when it
 * fires: one added per retry and kept made Node warn of a leak (MaxListenersExceededWarning) after ten retries.
 */
export async function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  try {
    await delay(ms, undefined, { signal });
  } catch (error) {
    if ((error as Error).name !== 'AbortError') throw error;
  }
}

/** File-system refusals that mean the setting names a place the gateway cannot use, which no retry cures. */
const UNUSABLE_PATH_CODES = new Set(['ENOTDIR', 'EACCES', 'EPERM', 'EROFS', 'EEXIST', 'ENOSPC']);

/**
 * The embedded database's directory could not be made or used (ACG_DATA_DIR names a file, or a place this user may
 * not write): one line naming the setting, as a bad setting is said, not a crash with a stack (found from outside).
 */
export function dataDirRefusal(error: unknown, config: Pick<Config, 'databaseUrl' | 'dataDir'>): string | undefined {
  const { code, syscall } = (error ?? {}) as { code?: unknown; syscall?: unknown };
  // A mkdir's ENOENT: the directories are made parent first (makePrivateDirectory), so the file system refuses the
  // name itself (under /proc, say).
  const unusable = typeof code === 'string' && (UNUSABLE_PATH_CODES.has(code) || (code === 'ENOENT' && syscall === 'mkdir'));
  if (config.databaseUrl !== undefined || !unusable) return undefined;
  return `acg serve: cannot use ACG_DATA_DIR (${config.dataDir}) for the embedded database: ${(error as Error).message}. Set ACG_DATA_DIR to a directory this user may write, or DATABASE_URL to a PostgreSQL database`;
}

interface Started {
  app: FastifyInstance;
  gateway: Gateway;
  /** The settings live mode warns of at start (missingLivePieces: each it runs without, or runs with at a cost). */
  missingPieces: string[];
}

/**
 * Migrates and builds the gateway, retrying while the database is unavailable; any other failure
 * (a changed migration, a bad key) is thrown. Returns undefined when `signal` aborts first.
 */
async function bringUp(config: Config, db: Database, log: Logger, signal: AbortSignal): Promise<Started | undefined> {
  for (let attempt = 1; !signal.aborted; attempt++) {
    try {
      await migrateAndReport(db, log);
      const gateway = await createGateway(config, { db, log, processMetrics: true, skipMigrate: true });
      await checkSigningKeys(gateway);
      const { buildGatewayApp } = await import('./app.ts');
      const { app, missingPieces } = await buildGatewayApp(gateway);
      await app.ready();
      return { app, gateway, missingPieces };
    } catch (error) {
      // Connection settings the server refuses (no such database or role) no retry cures: said at once, exit 2.
      if (!isStorageUnavailable(error) || connectionSettingsRefusal(error) !== undefined) throw error;
      const retryInMs = startRetryDelayMs(attempt, config.db.startRetryMaxMs);
      log.info({ attempt, retryInMs, reason: (error as Error).message }, `waiting for the database; next attempt in ${retryInMs} ms`);
      await sleepUnlessAborted(retryInMs, signal);
    }
  }
  return undefined;
}

/**
 * The signing keys' word at start, before the app is built: an instance that can sign with no key because keys are
 * sealed that it cannot open stops (UnusableSigningKeysError: one line, exit 2), where it used to fail with a stack
 * (found from outside). One that serves records its box key's check, which `acg keys rotate` must open, and marks it
 * seen while it runs; it warns when instances lately ran with another box key.
 */
async function checkSigningKeys(gateway: Gateway): Promise<void> {
  const refusal = gateway.signing.startRefusal();
  if (refusal !== undefined) {
    await gateway.stop();
    throw refusal;
  }
  const box = configuredSecretBoxKey(gateway.config);
  if (box === undefined) return;
  const { anotherSeenAtS } = await recordBoxKeyCheck(gateway.db, box);
  if (anotherSeenAtS !== undefined) {
    gateway.log.warn(
      { setting: 'ACG_SECRET_BOX_KEY', anotherSeenAt: new Date(anotherSeenAtS * 1000).toISOString() },
      "ACG_SECRET_BOX_KEY here is not the one another instance ran with lately: neither opens what the other sealed (webhook secrets, mail passwords, " +
        'rotated signing keys), and `acg keys rotate` refuses to seal while both run. Give every instance the same box key',
    );
  }
  gateway.schedule('secret-box-check', BOX_KEY_CHECK_INTERVAL_S * 1000, () => recordBoxKeyCheck(gateway.db, box));
}

/**
 * The last line of defence. An error that escaped every request and job:
 * - from the database (a connection failing outside any request): logged, and the gateway serves on;
 *   the driver has discarded the connection and the next call opens a new one;
 * - a promise rejected with nobody waiting on it: logged, and the gateway serves on; the operation it
 *   belonged to has already answered or failed, and nothing was left half-done in memory;
 * - any other uncaught exception: synchronous code stopped midway, so the process state is unknown;
 *   logged, then the gateway stops gracefully and exits 1, for the supervisor to restart it.
 */
export function installLastLineOfDefence(log: Logger, exitCleanly: () => void, target: NodeJS.EventEmitter = process): void {
  target.on('unhandledRejection', (reason: unknown) => {
    if (storageFailureKind(reason) !== undefined || isStorageUnavailable(reason)) {
      log.warn({ lastLineOfDefence: true, reason: (reason as Error).message }, 'a database failure nobody waited for; serving on');
      return;
    }
    log.error({ lastLineOfDefence: true, err: reason }, 'unhandled promise rejection (a bug: nobody waited for this promise); serving on');
  });
  target.on('uncaughtException', (error: Error) => {
    if (storageFailureKind(error) !== undefined || isStorageUnavailable(error)) {
      log.warn({ lastLineOfDefence: true, reason: error.message }, 'a database connection failed outside any request; serving on');
      return;
    }
    log.fatal({ lastLineOfDefence: true, err: error }, 'uncaught exception: the process state is unknown; stopping gracefully and exiting 1');
    exitCleanly();
  });
}

/**
 * A socket that cannot be opened is a matter of configuration, not a crash: one line naming the address
 * and the variable to change, instead of a fatal log with a stack trace. Undefined for any other failure.
 */
export function listenProblem(error: unknown, config: Pick<Config, 'host' | 'port'>): string | undefined {
  const code = (error as NodeJS.ErrnoException).code;
  const where = `port ${config.port} on ${config.host}`;
  if (code === 'EADDRINUSE') {
    const free = config.port === 65535 ? 8081 : config.port + 1;
    return `acg serve: ${where} is already in use (a gateway already running?): stop what listens there, or choose a free port with PORT, e.g. PORT=${free} npm start (and the same PORT for acg commands aimed at it)`;
  }
  if (code === 'EACCES') return `acg serve: no permission to listen on ${where} (ports below 1024 need privileges): set PORT to another port, e.g. PORT=8080 npm start`;
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    return `acg serve: cannot listen on ${config.host}, which is not an address of this machine: set HOST (default 127.0.0.1; 0.0.0.0 for every interface)`;
  }
  return undefined;
}

export async function serve(): Promise<void> {
  applyHeapPolicy();
  let config: Config;
  try {
    config = loadConfig();
    if (config.signingKey) {
      const problem = await checkConfiguredKey(config.signingKey);
      if (problem) throw new ConfigError([problem]);
    }
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const log = createLogger(config, undefined, { traceFields: telemetryRequested(process.env) });
  for (const warning of unreadSettings(process.env)) log.warn(warning);
  // The front door reads the base URL at each answer: with PORT=0 it is known only once the socket is bound.
  const door = { host: config.host, port: config.port, baseUrl: config.baseUrl, mode: config.mode, requestTimeoutMs: config.requestTimeoutMs };
  let front: FrontDoor;
  let db: Database;
  try {
    front = await openFrontDoor(door, log);
  } catch (error) {
    const problem = listenProblem(error, config);
    if (problem) {
      process.stderr.write(`${problem}\n`);
      process.exit(2);
    }
    log.fatal({ err: error }, 'gateway failed to start');
    process.exit(1);
  }
  try {
    if (config.port === 0) {
      // Every URL derived from the port (the base URL, the dev DNS resolver) names the port actually bound.
      config = loadConfig({ ...process.env, PORT: new URL(front.url).port });
      door.baseUrl = config.baseUrl;
    }
    // The SDK (a few hundred ms to load, only when OTEL_* names a destination) loads while the database opens;
    // the app is built once it is on, so its hooks and handler are the traced ones.
    const tracingStarted = startTelemetry(process.env, log);
    db = await openDatabase(config, processWideLog(log));
    if (await tracingStarted) (await import('./platform/outbound.ts')).traceOutboundHttp();
  } catch (error) {
    if (error instanceof ConfigError || error instanceof DatabaseInUseError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    const unusable = dataDirRefusal(error, config);
    if (unusable !== undefined) {
      process.stderr.write(`${unusable}\n`);
      process.exit(2);
    }
    log.fatal({ err: error }, 'gateway failed to start');
    process.exit(1);
  }
  // The docs at the base URL: a page opened at a wildcard address (0.0.0.0) would call the API at another origin.
  log.info({ url: front.url, mode: config.mode, baseUrl: config.baseUrl }, `gateway listening on ${front.url} (docs: ${config.baseUrl}/docs)`);

  const starting = new AbortController();
  let started: Started | undefined;
  let stopping: Promise<void> | undefined;
  const stop = (exitCode: number) => {
    stopping ??= (async () => {
      const stopStartedMs = performance.now();
      const forced = setTimeout(() => {
        log.error(`shutdown took longer than ${SHUTDOWN_BUDGET_MS / 1000} s; exiting`);
        process.exit(1);
      }, SHUTDOWN_BUDGET_MS);
      forced.unref();
      starting.abort();
      try {
        await front.close();
        // The newer-schema watch stops with the gateway, before its database closes (Gateway.stop).
        if (started) {
          await started.app.close();
          await started.gateway.close();
        } else {
          await db.close();
        }
        await stopTelemetry();
      } catch (error) {
        log.error({ err: error }, 'shutdown failed');
        process.exit(1);
      }
      // The last line of a finished stop: without it, a stop cut short (SIGKILL, the budget above) looks the same in the log.
      const stopMs = Math.round(performance.now() - stopStartedMs);
      log.info({ exitCode, stopMs }, `stopped in ${stopMs} ms`);
      process.exit(exitCode);
    })();
  };
  const onSignal = (signal: string) => {
    log.info({ signal }, 'shutting down: finishing in-flight requests');
    stop(0);
  };
  process.once('SIGTERM', () => onSignal('SIGTERM'));
  process.once('SIGINT', () => onSignal('SIGINT'));
  installLastLineOfDefence(log, () => stop(1));

  log.info({ storage: db.kind }, 'connecting to the database');
  try {
    started = await bringUp(config, db, log, starting.signal);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      stop(2);
      return;
    }
    const refusal = error instanceof MigrationError || error instanceof UnusableSigningKeysError ? error.message : connectionSettingsRefusal(error);
    if (refusal !== undefined) {
      log.fatal(refusal);
      process.stderr.write(`${refusal}\n`);
      stop(2);
      return;
    }
    log.fatal({ err: error }, 'gateway failed to start');
    stop(1);
    return;
  }
  if (!started || starting.signal.aborted) return;
  front.open(tracedRequests(started.app.routing));
  started.gateway.startBackgroundWork();
  // Another process may migrate a shared PostgreSQL database under this one (PGlite admits one process): a newer
  // release's schema stops this instance, which must not write rows in the older form (docs/operations.md, "Upgrading").
  if (db.kind === 'postgres') {
    started.gateway.schema.start((refusal) => {
      const line = `stopping: ${refusal}`;
      log.fatal({ exitCode: 2 }, line);
      process.stderr.write(`${line}\n`);
      stop(2);
    });
  }
  // The ready line does not contradict the warnings above it (found from outside: "serving every route" after them).
  const { missingPieces } = started;
  log.info(
    { url: front.url, storage: db.kind, mode: config.mode, ...(missingPieces.length > 0 ? { missingPieces } : {}) },
    missingPieces.length === 0 ? 'gateway ready: serving every route' : `gateway ready, with warnings above about ${missingPieces.join(', ')}`,
  );
  // Every route schema no request has needed yet, so that no route's first request stalls every request in
  // flight while its schemas compile (docs/decisions.md "Route schemas compile in the background, each serializer with its validators").
  // The routes agents and merchants call at volume first, since a new instance behind a load balancer gets their
  // requests at once.
  if (config.precompileSchemas) started.app.schemas.compileInBackground(({ compiled, failed, ms }) => {
    if (failed.length > 0) log.error({ compiled, failed: failed.length, err: failed[0]!.error, ms }, `route schemas: ${failed.length} failed to compile; their routes will fail`);
    else log.info({ compiled, ms }, `route schemas compiled in the background: ${compiled} in ${ms} ms`);
  }, isBusiestRoute);
}

/** The routes of the money path (hold, settle, read, x402), whose schemas a new instance compiles first. */
const BUSIEST_ROUTES = ['/v1/vouchers', '/v1/redemptions/', '/v1/me', '/v1/offers', '/v1/services/execute', '/v1/intents/', '/v1/access/', '/x402/'];

function isBusiestRoute(url: string): boolean {
  return BUSIEST_ROUTES.some((prefix) => url === prefix || url.startsWith(prefix));
}
