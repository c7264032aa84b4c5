// The gateway's own directories under ACG_DATA_DIR (the embedded database, the operator credential, the dev
// issuers' keys): each made for its owner alone.
import { mkdirSync, statSync } from 'node:fs';
import path from 'node:path';

const errno = (error: unknown) => (error as NodeJS.ErrnoException).code;

/**
 * Makes the directory `dir` and each missing parent, 0700, from the nearest existing parent down (`mkdir -p -m
 * 700`); an existing directory is left as it is. Not `mkdirSync(dir, {recursive: true})`: where a file system
 * answers ENOENT for a name it will never make (under /proc), Node's recursive mkdir retries the parent, finds it,
 * and tries the name again, forever, at full CPU and without a word (found from outside: `npm start` hung). Here each
 * missing name is made once and its refusal thrown. A file at `dir` is refused (ENOTDIR) rather than used.
 */
export function makePrivateDirectory(dir: string): void {
  const missing: string[] = [];
  for (let at = path.resolve(dir); ; ) {
    try {
      const found = statSync(at);
      if (missing.length === 0 && !found.isDirectory()) {
        throw Object.assign(new Error(`ENOTDIR: not a directory, mkdir '${dir}'`), { code: 'ENOTDIR' });
      }
      break;
    } catch (error) {
      if (errno(error) !== 'ENOENT') throw error;
    }
    missing.push(at);
    const parent = path.dirname(at);
    if (parent === at) break;
    at = parent;
  }
  for (const name of missing.reverse()) {
    try {
      mkdirSync(name, { mode: 0o700 });
    } catch (error) {
      // Another process starting on the same directory made it first.
      if (errno(error) !== 'EEXIST') throw error;
    }
  }
}
