import { defineConfig } from 'vitest/config';

// The whole suite runs on embedded PGlite, and again on PostgreSQL when TEST_DATABASE_URL is set.
const databases = process.env.TEST_DATABASE_URL ? ['pglite', 'postgres'] : ['pglite'];

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ['test/support/global-setup.ts'],
    projects: databases.map((db) => ({
      extends: true,
      test: { name: db, include: ['test/**/*.test.ts', 'packages/*/test/**/*.test.ts'], env: { ACG_TEST_DB: db } },
    })),
  },
});
