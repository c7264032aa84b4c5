// The `acg` command line.
import { Command } from 'commander';
import { ConfigError, ENV_VARS, loadConfig } from './platform/config.ts';
import { migrate } from './platform/db/migrate.ts';
import { openDatabase } from './platform/db/open.ts';

function configOrExit() {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
}

export function buildCli(): Command {
  const program = new Command('acg')
    .description('Agent Credit Gateway: prepaid credit, holds and metered services for software agents')
    .showHelpAfterError()
    .addHelpText(
      'after',
      `\nConfiguration is read from environment variables:\n${ENV_VARS.map((v) => `  ${v.name.padEnd(34)} ${v.meaning}`).join('\n')}`,
    );

  program
    .command('serve')
    .description('run the gateway (applies pending migrations first)')
    .action(async () => {
      const { serve } = await import('./server.ts');
      await serve();
    });

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .action(async () => {
      const config = configOrExit();
      const db = await openDatabase(config);
      try {
        const report = await migrate(db, (m) => process.stdout.write(`applied ${String(m.version).padStart(4, '0')}_${m.name}\n`));
        process.stdout.write(
          `${report.applied.length} migration(s) applied, ${report.alreadyApplied} already present (${db.kind === 'postgres' ? 'PostgreSQL' : `PGlite in ${config.dataDir}`})\n`,
        );
      } finally {
        await db.close();
      }
    });

  return program;
}

export async function main(argv: string[]): Promise<void> {
  await buildCli().parseAsync(argv);
}
