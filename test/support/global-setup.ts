// Once per run: brings dist/ up to date with the sources, so every test that spawns `bin/acg.js` runs the
// code under test compiled as users run it (bin/build.js; a no-op when dist/ already matches), and tells
// the reader which databases the suite runs on and what it skips.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let told = false;

export default function setup(): void {
  if (told) return;
  told = true;
  execFileSync(process.execPath, [path.join(ROOT, 'bin/build.js'), '--if-stale'], { cwd: ROOT, stdio: 'inherit' });
  process.stdout.write(
    process.env.TEST_DATABASE_URL
      ? 'test databases: PGlite and PostgreSQL (TEST_DATABASE_URL)\n'
      : 'test databases: PGlite only. NOTE: TEST_DATABASE_URL is not set, so PostgreSQL-only tests (concurrency, multi-instance) are skipped.\n',
  );
}
