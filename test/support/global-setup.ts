// Tells the reader, once per run, which databases the suite runs on and what it skips.
let told = false;

export default function setup(): void {
  if (told) return;
  told = true;
  process.stdout.write(
    process.env.TEST_DATABASE_URL
      ? 'test databases: PGlite and PostgreSQL (TEST_DATABASE_URL)\n'
      : 'test databases: PGlite only. NOTE: TEST_DATABASE_URL is not set, so PostgreSQL-only tests (concurrency, multi-instance) are skipped.\n',
  );
}
