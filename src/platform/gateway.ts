// The gateway's shared context: built once per process, decorated onto Fastify as `app.gateway`,
// and handed to every feature. It owns the long-lived parts and their shutdown order.
import pino, { type Logger } from 'pino';
import { SystemClock } from './clock.ts';
import type { Config } from './config.ts';
import type { Database } from './db/database.ts';
import { migrate } from './db/migrate.ts';
import { openDatabase } from './db/open.ts';
import { IdempotencyStore } from './idempotency.ts';
import { Metrics } from './metrics.ts';
import { RateLimiter } from './rate-limit.ts';
import { SigningKeys } from './signing.ts';

export interface Gateway {
  config: Config;
  db: Database;
  clock: SystemClock;
  log: Logger;
  metrics: Metrics;
  idempotency: IdempotencyStore;
  rateLimiter: RateLimiter;
  signing: SigningKeys;
  /** Periodic jobs (sweepers, key reload); stopped on close. */
  startBackgroundWork(): void;
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
  'access_token',
  'code_verifier',
];

export function createLogger(config: Pick<Config, 'logLevel'>): Logger {
  return pino({ level: config.logLevel, redact: { paths: LOG_REDACT_PATHS, censor: '[redacted]' } });
}

export interface GatewayOptions {
  db?: Database;
  clock?: SystemClock;
  log?: Logger;
  processMetrics?: boolean;
  /** Skip migrations (the caller migrated already). */
  skipMigrate?: boolean;
}

const SWEEP_INTERVAL_MS = 10 * 60 * 1000;
const KEY_RELOAD_INTERVAL_MS = 60 * 1000;

export async function createGateway(config: Config, options: GatewayOptions = {}): Promise<Gateway> {
  const log = options.log ?? createLogger(config);
  const clock = options.clock ?? new SystemClock();
  const db = options.db ?? (await openDatabase(config));
  if (!options.skipMigrate) {
    const report = await migrate(db, (m) => log.info({ migration: `${m.version}_${m.name}` }, 'migration applied'));
    log.debug({ applied: report.applied.length }, 'schema is current');
  }
  const signing = await SigningKeys.open(db, clock, config);
  const rateLimiter = new RateLimiter(db, clock, config.rateLimit.windowS);
  const idempotency = new IdempotencyStore(db, clock, config.idempotencyRetentionS, config.idempotencyLeaseS);
  const timers: NodeJS.Timeout[] = [];
  const every = (ms: number, name: string, job: () => Promise<unknown>) => {
    const timer = setInterval(() => {
      job().catch((error: unknown) => log.warn({ err: error, job: name }, 'background job failed'));
    }, ms);
    timer.unref();
    timers.push(timer);
  };
  return {
    config,
    db,
    clock,
    log,
    metrics: new Metrics({ processMetrics: options.processMetrics ?? false }),
    idempotency,
    rateLimiter,
    signing,
    startBackgroundWork() {
      rateLimiter.start();
      every(SWEEP_INTERVAL_MS, 'idempotency-sweep', () => idempotency.sweep());
      every(KEY_RELOAD_INTERVAL_MS, 'signing-key-reload', () => signing.reload());
    },
    async close() {
      for (const timer of timers) clearInterval(timer);
      await rateLimiter.stop();
      await db.close();
    },
  };
}
