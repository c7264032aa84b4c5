// `acg serve`: start the gateway, and stop it gracefully (finish in-flight requests, then close the
// database) on SIGTERM or SIGINT.
import type { FastifyInstance } from 'fastify';
import { buildGatewayApp } from './app.ts';
import { loadConfig, type Config } from './platform/config.ts';
import { createGateway, createLogger, type Gateway } from './platform/gateway.ts';
import { checkConfiguredKey } from './platform/signing.ts';
import { ConfigError } from './platform/config.ts';
import { DatabaseInUseError } from './platform/db/pglite.ts';

export interface RunningGateway {
  app: FastifyInstance;
  gateway: Gateway;
  url: string;
  stop(): Promise<void>;
}

export async function startGateway(config: Config): Promise<RunningGateway> {
  if (config.signingKey) {
    const problem = await checkConfiguredKey(config.signingKey);
    if (problem) throw new ConfigError([problem]);
  }
  const gateway = await createGateway(config, { processMetrics: true });
  const { app } = await buildGatewayApp(gateway);
  await app.listen({ host: config.host, port: config.port });
  gateway.startBackgroundWork();
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  let stopping: Promise<void> | undefined;
  return {
    app,
    gateway,
    url,
    stop() {
      stopping ??= (async () => {
        await app.close();
        await gateway.close();
      })();
      return stopping;
    },
  };
}

export async function serve(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const log = createLogger(config);
  let running: RunningGateway;
  try {
    running = await startGateway(config);
  } catch (error) {
    if (error instanceof ConfigError || error instanceof DatabaseInUseError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    log.fatal({ err: error }, 'gateway failed to start');
    process.exit(1);
  }
  log.info(
    { url: running.url, mode: config.mode, storage: running.gateway.db.kind, baseUrl: config.baseUrl },
    `gateway listening on ${running.url} (docs: ${running.url}/docs)`,
  );
  const shutdown = (signal: string) => {
    log.info({ signal }, 'shutting down: finishing in-flight requests');
    const forced = setTimeout(() => {
      log.error('shutdown took longer than 15 s; exiting');
      process.exit(1);
    }, 15_000);
    forced.unref();
    running.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        log.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}
