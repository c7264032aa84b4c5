// The build step (bin/build.js) and the choice bin/acg.js makes at each start: the compiled dist/ when it
// was built from exactly the current sources, otherwise the sources through tsx, with a note on stderr.
// Each case works on a copy of the project in a temporary folder, so the real dist/ that other tests
// run is never touched.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { execFile } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const VERSION = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const NOTE = 'acg: dist/ does not match src/ (run `npm run build`); running the sources through tsx, which starts slower\n';
const run = promisify(execFile);

let project: string;

async function node(...args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, args, { cwd: project });
}

/** Makes dist/cli.js announce itself, so a run shows whether the compiled code is what ran. */
function markDist(): void {
  appendFileSync(path.join(project, 'dist/cli.js'), "\nprocess.stderr.write('ran dist\\n');\n");
}

beforeEach(async () => {
  project = mkdtempSync(path.join(tmpdir(), 'acg-build-'));
  for (const entry of ['src', 'bin', 'tsconfig.json', 'package.json']) cpSync(path.join(ROOT, entry), path.join(project, entry), { recursive: true });
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(project, 'node_modules'));
  const built = await node('bin/build.js');
  expect(built.stdout).toMatch(/^built dist\/ from \d+ source files in \d+ ms\n$/);
  markDist();
});

afterEach(() => {
  rmSync(project, { recursive: true, force: true });
});

describe('the build', () => {
  it('compiles every source file to dist/ at the same path, and acg then runs dist/ without a note', async () => {
    expect(existsSync(path.join(project, 'dist/platform/db/migrate.js'))).toBe(true);
    expect(readFileSync(path.join(project, 'dist/cli.js'), 'utf8')).toContain('from "./platform/config.js"');
    expect(await node('bin/acg.js', '--version')).toEqual({ stdout: `${VERSION}\n`, stderr: 'ran dist\n' });
  });

  it('falls back to the sources through tsx, with a one-line note, when a source changed after the build', async () => {
    appendFileSync(path.join(project, 'src/cli.ts'), "\nprocess.stderr.write('ran src\\n');\n");
    expect(await node('bin/acg.js', '--version')).toEqual({ stdout: `${VERSION}\n`, stderr: `${NOTE}ran src\n` });
  });

  it('counts a source whose time alone changed, even to an older one, as changed', async () => {
    utimesSync(path.join(project, 'src/platform/money.ts'), new Date('2020-01-01'), new Date('2020-01-01'));
    expect((await node('bin/acg.js', '--version')).stderr).toBe(NOTE);
  });

  it('is stale while a source file exists that it did not build, and current again once it is gone', async () => {
    const extra = path.join(project, 'src/platform/extra.ts');
    writeFileSync(extra, 'export const extra = 1;\n');
    expect((await node('bin/acg.js', '--version')).stderr).toBe(NOTE);
    rmSync(extra);
    expect((await node('bin/acg.js', '--version')).stderr).toBe('ran dist\n');
  });

  it('rebuilds only when stale (--if-stale), and the rebuilt dist/ runs the changed source', async () => {
    expect(await node('bin/build.js', '--if-stale')).toEqual({ stdout: '', stderr: '' });
    appendFileSync(path.join(project, 'src/cli.ts'), "\nprocess.stderr.write('ran src\\n');\n");
    expect((await node('bin/build.js', '--if-stale')).stdout).toMatch(/^built dist\//);
    expect(await node('bin/acg.js', '--version')).toEqual({ stdout: `${VERSION}\n`, stderr: 'ran src\n' });
  });

  it('fails on a relative import that leaves src/, and leaves the previous dist/ in place', async () => {
    writeFileSync(path.join(project, 'src/platform/outside.ts'), "export { NOTE } from '../../test/build.test.ts';\n");
    const failed = await node('bin/build.js').catch((error: { code: number; stderr: string }) => error);
    expect(failed).toMatchObject({ code: 1, stderr: expect.stringContaining('../../test/build.test.ts is outside src/, which is all that is built') });
    expect(readFileSync(path.join(project, 'dist/cli.js'), 'utf8')).toContain('ran dist');
  });
});

describe("the repository's own dist/", () => {
  it('matches the sources during the test run, so tests that spawn acg run the code under test', async () => {
    expect(await run(process.execPath, [path.join(ROOT, 'bin/acg.js'), '--version'], { cwd: ROOT })).toEqual({ stdout: `${VERSION}\n`, stderr: '' });
  });
});
