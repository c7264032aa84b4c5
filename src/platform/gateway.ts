// The gateway's shared context: built once per process, decorated onto Fastify as `app.gateway`,
// and handed to every feature. It owns the long-lived parts and their shutdown order.
import { createRequire } from 'node:module';
import pino, { type Logger } from 'pino';
import { DATABASE_CLOCK_SAMPLE_INTERVAL_MS, describeDatabaseClockChange, SystemClock, type DatabaseClockChange } from './clock.ts';
import type { Config } from './config.ts';
import { AnnouncedLifetimes, CredentialFacts } from './credential-facts.ts';
import type { Database } from './db/database.ts';
import { logBackgroundFailure } from './db/faults.ts';
import { migrate, migrationName, SchemaWatch } from './db/migrate.ts';
import { openDatabase } from './db/open.ts';
import { IdempotencyStore } from './idempotency.ts';
import { Metrics } from './metrics.ts';
import type { OutboundTestHooks } from './outbound.ts';
import { RateLimiter } from './rate-limit.ts';
import { KEY_RELOAD_INTERVAL_S, SigningKeys } from './signing.ts';
import { logTraceFields, processWideLog } from './telemetry.ts';

export interface Gateway {
  config: Config;
  db: Database;
  /** The gateway's time: this host's clock, or the database server's when this host's is off (clock.ts). */
  clock: SystemClock;
  log: Logger;
  metrics: Metrics;
  idempotency: IdempotencyStore;
  /** What credential checks read that can be revoked, kept briefly; a revocation waits them out (credential-facts.ts). */
  credentials: CredentialFacts;
  rateLimiter: RateLimiter;
  signing: SigningKeys;
  /**
   * Whether a newer release migrated the database under this instance: `acg serve` starts its watch on PostgreSQL and
   * stops when it finds one; a request whose statement failed unexpectedly asks it at once (migrate.ts).
   */
  schema: SchemaWatch;
  /** TEST ONLY: name resolution and port for outbound calls (webhooks); empty in production. */
  outbound: OutboundTestHooks;
  /**
   * Registers a periodic job of a feature (sweepers, workers); it runs once background work starts. `stop` ends what
   * the job's runs started without waiting for it (a webhook pass's attempts), and resolves once that is over.
   */
  schedule(name: string, intervalMs: number, job: () => Promise<unknown>, options?: { stop?: () => Promise<void> }): void;
  /** Starts periodic jobs (platform sweepers, key reload, the database clock's samples, and every scheduled feature job); stopped on close. */
  startBackgroundWork(): void;
  /**
   * Stops this gateway's own work and leaves the database open (for gateways that share one, as tests run them):
   * its periodic jobs (a run in flight, and what a run started, finish first), its rate-limit counts (flushed), and
   * its lifetime announcement (withdrawn).
   */
  stop(): Promise<void>;
  /** `stop`, then closes the database. */
  close(): Promise<void>;
}

export const LOG_REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'authorization',
  'password',
  'secret',
  'webhookSecret',
  'apiKey',
  'secretKey',
  'access_token',
  'code_verifier',
];

/** A request is logged by method, path and address only: a misplaced credential in the query string stays out of the logs. */
function requestForLog(request: { method?: string; url?: string; ip?: string }) {
  return { method: request.method, path: (request.url ?? '').split('?')[0], remoteAddress: request.ip };
}

export interface LoggerOptions {
  /** Every line logged inside a span carries `trace_id` and `span_id` (a traced gateway: OTEL_* configured). */
  traceFields?: boolean;
}

/**
 * `destination` defaults to stdout: JSON lines for log collectors, or readable lines when stdout is a
 * terminal (a person is watching). Tests pass a stream to read what the gateway logs.
 */
export function createLogger(config: Pick<Config, 'logLevel'>, destination?: pino.DestinationStream, logger: LoggerOptions = {}): Logger {
  const options = {
    level: config.logLevel,
    redact: { paths: LOG_REDACT_PATHS, censor: '[redacted]' },
    serializers: { req: requestForLog },
    // Only on a traced gateway: an untraced one pays nothing per line.
    ...(logger.traceFields ? { mixin: logTraceFields } : {}),
  };
  if (destination) return pino(options, destination);
  // Synchronous writes: pino's default writes asynchronously, and at exit writes what it holds at once, ahead of a
  // write still under way, so the last lines came out of order (CI saw "shutting down" after "stopped in"). A line
  // costs one write either way; written at once, what the log says is the order things happened.
  if (!process.stdout.isTTY) return pino(options, pino.destination({ dest: 1, sync: true }));
  // Loaded only for a person at a terminal (it is a large module), synchronously since this function is.
  const pretty = createRequire(import.meta.url)('pino-pretty') as typeof import('pino-pretty');
  // sync: a fatal line written just before process.exit is not lost.
  return pino(options, pretty({ colorize: true, sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' }));
}

export interface GatewayOptions {
  db?: Database;
  clock?: SystemClock;
  log?: Logger;
  processMetrics?: boolean;
  /** Skip migrations (the caller migrated already). */
  skipMigrate?: boolean;
  /** TEST ONLY: see OutboundTestHooks; nothing in the configuration can set it. */
  outbound?: OutboundTestHooks;
}

const SWEEP_INTERVAL_MS = 10 * 60 * 1000;
/** When a periodic job of a longer interval first runs after start (server.ts starts them once the gateway serves). */
export const FIRST_RUN_AFTER_MS = 30_000;

/**
 * Applies pending migrations (under the advisory lock) and says so: on a database that had some, one line per
 * migration applied (an upgrade, each worth reading); on a new one, one line for them all, each at debug (found from
 * outside: a first `npm start` printed 42 lines of migrations before the one that says the gateway is ready). Then one
 * line for the result. A migration that fails applied none (they run in one transaction): its error says so.
 */
export async function migrateAndReport(db: Database, log: Logger): Promise<void> {
  const applied: string[] = [];
  const report = await migrate(db, { applied: (m) => void applied.push(migrationName(m)) });
  if (report.alreadyApplied === 0 && applied.length > 1) {
    for (const migration of applied) log.debug({ migration }, 'migration applied');
    log.info({ applied: applied.length, first: applied[0], last: applied.at(-1) }, `new database: ${applied.length} migrations applied (${applied[0]} … ${applied.at(-1)})`);
  } else {
    for (const migration of applied) log.info({ migration }, 'migration applied');
  }
  log.info({ applied: report.applied.length, alreadyApplied: report.alreadyApplied }, 'database reachable; schema is current');
}

/** One line, without a stack, when the time the gateway follows moved by more than the threshold. */
function reportDatabaseClock(log: Logger, change: DatabaseClockChange | undefined): void {
  if (change === undefined) return;
  const fields = { databaseClockOffsetMs: change.toMs, previousOffsetMs: change.fromMs };
  if (change.toMs === 0) log.info(fields, describeDatabaseClockChange(change));
  else log.warn(fields, describeDatabaseClockChange(change));
}

export async function createGateway(config: Config, options: GatewayOptions = {}): Promise<Gateway> {
  const log = options.log ?? createLogger(config);
  const clock = options.clock ?? new SystemClock();
  const db = options.db ?? (await openDatabase(config, processWideLog(log)));
  if (!options.skipMigrate) await migrateAndReport(db, log);
  // Before anything reads the time (which signing keys are active) and before serving: instances sharing the database
  // take its clock as the one time (docs/decisions.md "The gateway's time is the database server's").
  const followDatabaseClock = async () => reportDatabaseClock(log, await clock.followDatabase(db));
  await followDatabaseClock();
  const signing = await SigningKeys.open(db, clock, config, (message, kids) => log.warn({ kids }, message));
  const rateLimiter = new RateLimiter(db, clock, config.rateLimit.windowS);
  const idempotency = new IdempotencyStore(db, clock, config.idempotencyRetentionS, config.idempotencyLeaseS);
  const timers: NodeJS.Timeout[] = [];
  /** Runs of periodic jobs in flight; each settles (its failure is logged here). */
  const runs = new Set<Promise<void>>();
  const scheduled: Array<{ name: string; intervalMs: number; job: () => Promise<unknown>; stop?: () => Promise<void> }> = [];
  const every = (ms: number, name: string, job: () => Promise<unknown>) => {
    let running = false;
    const runOnce = () => {
      if (running) return; // a slow run never overlaps the next one
      running = true;
      const run = job()
        .then(() => {})
        // An unreachable database is announced once (platform/db/faults.ts); the job simply runs again later.
        .catch((error: unknown) => logBackgroundFailure(log, error, { job: name }, 'background job'))
        .finally(() => {
          running = false;
          runs.delete(run);
        });
      runs.add(run);
    };
    const timer = setInterval(runOnce, ms);
    timer.unref();
    timers.push(timer);
    // A job of a long interval (the purges, every 10 minutes or hour) also runs soon after start: an instance restarted
    // more often than its interval never ran it, and its tables grew without end (found from outside).
    if (ms > FIRST_RUN_AFTER_MS) {
      const first = setTimeout(runOnce, FIRST_RUN_AFTER_MS);
      first.unref();
      timers.push(first);
    }
  };
  const metrics = new Metrics({ processMetrics: options.processMetrics ?? false });
  // Other processes may share a PostgreSQL database; PGlite's is this process's alone.
  // Other processes' lifetimes may differ from this one's: each announces its own, before this one serves.
  const announced = db.kind === 'postgres' ? new AnnouncedLifetimes(db, config.credentialFactsMs) : undefined;
  await announced?.announce();
  const credentials = new CredentialFacts({ lifetimeMs: config.credentialFactsMs, database: db, shared: db.kind === 'postgres', announced, metrics });
  const schema = new SchemaWatch(db);
  const stop = async () => {
    credentials.close();
    // A look in flight ends before the database closes.
    await schema.stop();
    for (const timer of timers) clearInterval(timer);
    // A run in flight, or an attempt a run started, still queries the database that `close` ends next: a query on a
    // closed pool fails and reads as an outage (found from outside: "database unavailable" at a graceful stop).
    await Promise.all(runs);
    await Promise.all(scheduled.map(({ stop: stopJob }) => stopJob?.()));
    await announced?.withdraw();
    await rateLimiter.stop();
  };
  return {
    config,
    db,
    clock,
    log,
    metrics,
    idempotency,
    credentials,
    rateLimiter,
    signing,
    schema,
    outbound: options.outbound ?? {},
    schedule(name, intervalMs, job, { stop: stopJob } = {}) {
      scheduled.push({ name, intervalMs, job, stop: stopJob });
    },
    startBackgroundWork() {
      rateLimiter.start();
      for (const { name, intervalMs, job } of scheduled) every(intervalMs, name, job);
      every(SWEEP_INTERVAL_MS, 'idempotency-sweep', () => idempotency.sweep());
      every(KEY_RELOAD_INTERVAL_S * 1000, 'signing-key-reload', () => signing.reload());
      every(DATABASE_CLOCK_SAMPLE_INTERVAL_MS, 'database-clock', followDatabaseClock);
    },
    stop,
    async close() {
      await stop();
      await db.close();
    },
  };
}
