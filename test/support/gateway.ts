// Starts a whole gateway for a test on a random port, on a fresh database of the run's kind.
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import pino, { type Logger } from 'pino';
import { buildGatewayApp, type AppDependencies, type Services } from '../../src/app.ts';
import { SystemClock } from '../../src/platform/clock.ts';
import { loadConfig, type Config } from '../../src/platform/config.ts';
import { createGateway, type Gateway } from '../../src/platform/gateway.ts';
import type { OutboundTestHooks } from '../../src/platform/outbound.ts';
import { openTestDatabase, type TestDatabase } from './database.ts';

export interface TestGateway {
  app: FastifyInstance;
  gateway: Gateway;
  services: Services;
  config: Config;
  clock: SystemClock;
  database: TestDatabase;
  url: string;
  close(): Promise<void>;
}

export interface TestGatewayOptions {
  env?: Record<string, string>;
  features?: FastifyPluginAsync[];
  /** Reuse a database (e.g. for two instances sharing one); the caller drops it. */
  database?: TestDatabase;
  /** Outbound name resolution and port for webhook receivers on test domains (see OutboundTestHooks). */
  outbound?: OutboundTestHooks;
  /** A logger to capture the gateway's log lines (default: silent, or the level `ACG_TEST_LOG` names, to stderr). */
  log?: Logger;
  /** What the composition root is given besides configuration (added services, a human approver). */
  dependencies?: AppDependencies;
  /** The gateway's clock (default: a new one on this host's clock). */
  clock?: SystemClock;
}

export async function startTestGateway(options: TestGatewayOptions = {}): Promise<TestGateway> {
  const database = options.database ?? (await openTestDatabase(undefined, { migrated: true }));
  const config = loadConfig({
    PORT: '0',
    LOG_LEVEL: 'silent',
    ACG_RATE_LIMIT_PER_ADDRESS: '100000',
    ACG_RATE_LIMIT_PER_PRINCIPAL: '100000',
    // Dev mode's default is local approval; tests that exercise top-ups ask for a provider explicitly.
    ACG_PAYMENT_PROVIDER: 'none',
    ...options.env,
  });
  const clock = options.clock ?? new SystemClock();
  const gateway = await createGateway(config, { db: database.db, clock, log: options.log ?? pino({ level: process.env.ACG_TEST_LOG ?? 'silent' }), outbound: options.outbound });
  const { app, services } = await buildGatewayApp(gateway, options.features, options.dependencies);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  // Tokens we sign name the base URL as issuer; give the test the real one.
  config.baseUrl = options.env?.ACG_BASE_URL ?? `http://127.0.0.1:${port}`;
  return {
    app,
    gateway,
    services,
    config,
    clock,
    database,
    url: `http://127.0.0.1:${port}`,
    async close() {
      await app.close();
      // The database may be shared with another gateway of the test, so this one only stops its own work.
      await gateway.stop();
      if (options.database) return;
      await database.drop();
      await database.db.close().catch(() => {});
    },
  };
}
