// Test files that do not use the database under test, so that the PostgreSQL pass does not run them a second
// time exactly as the PGlite pass already did. Such a file says so with this line among its first lines:
//
//   // vitest: no database
//
// vitest.config.ts leaves the marked files out of the PostgreSQL project; test/architecture.test.ts checks that
// no marked file reaches, through its imports, a module that reads which database the pass runs on.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const MARK = /^\/\/ vitest: no database\b/m;
/** How far into a file the mark is looked for: its opening comment, before the imports. */
const HEAD_CHARS = 4_000;

export function marksNoDatabase(text: string): boolean {
  return MARK.test(text.slice(0, HEAD_CHARS));
}

/** Every test file under `root` (test/ and each package's test/), by its path from `root`. */
export function testFiles(root: string): string[] {
  const roots = ['test', ...readdirSync(path.join(root, 'packages')).map((name) => path.join('packages', name, 'test'))];
  return roots.flatMap((dir) => {
    let names: string[];
    try {
      names = readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' });
    } catch {
      return [];
    }
    return names.filter((name) => name.endsWith('.test.ts')).map((name) => path.join(dir, name).split(path.sep).join('/'));
  });
}

/** The test files under `root` that carry the mark, by their path from `root`. */
export function noDatabaseTestFiles(root: string): string[] {
  return testFiles(root).filter((file) => marksNoDatabase(readFileSync(path.join(root, file), 'utf8')));
}
