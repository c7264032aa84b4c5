import { availableParallelism } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';
import { noDatabaseTestFiles } from './test/support/no-database.ts';

// The whole suite runs on embedded PGlite, and again on PostgreSQL when TEST_DATABASE_URL is set, but for the
// files marked as using no database (test/support/no-database.ts): the PostgreSQL pass would run them exactly
// as the PGlite one did.
const databases = process.env.TEST_DATABASE_URL ? ['pglite', 'postgres'] : ['pglite'];
const include = ['test/**/*.test.ts', 'packages/*/test/**/*.test.ts'];
const skippedOnPostgres = noDatabaseTestFiles(path.dirname(fileURLToPath(import.meta.url)));

export default defineConfig({
  test: {
    // Vitest's default is one worker fewer than the cores: one worker on a 2-core machine. Most test files
    // wait on spawned gateways, browsers and databases, so two files at a time nearly halve the run there
    // (each file has its own databases, ports and data directories, so files never share state).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // A worker runs its files one after another in one module cache, so the gateway's modules and their
    // dependencies load once a worker, not once a file (importing them took 400 s of a 1,350 s run). It holds
    // because no test file mocks a module or leaves state in one: each starts its own gateways, databases and
    // servers, and a module's state (an id pool, the prepared statements' names, the telemetry backend) is either
    // shared harmlessly or reset by the file that sets it.
    isolate: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ['test/support/global-setup.ts'],
    // After each file, the gateway processes it started and left running are killed (test/support/process.ts).
    setupFiles: ['test/support/each-file.ts'],
    projects: databases.map((db) => ({
      extends: true,
      test: {
        name: db,
        include,
        exclude: db === 'postgres' ? [...configDefaults.exclude, ...skippedOnPostgres] : configDefaults.exclude,
        env: { ACG_TEST_DB: db },
      },
    })),
  },
});
