// Whether dist/ was built from the sources as they are now. bin/acg.js asks this at every start, so it
// is cheap: one stat per source file (about 130, a millisecond or two), no reading, no hashing.
//
// The build's inputs are every file under src/, tsconfig.json (esbuild reads it) and bin/build.js (the
// build's own settings). Their path, size and modification time are recorded in dist/build-state.json
// just before the build reads them, and the build is current only while each one is unchanged: an
// edited, added or removed file, a checkout, or a copy with older times all make it stale.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

export const STATE_FILE = 'build-state.json';

/** Every input of the build, relative to `root`, with its size and modification time. */
export function sourceState(root) {
  const files = readdirSync(path.join(root, 'src'), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(root, path.join(entry.parentPath, entry.name)))
    .concat('tsconfig.json', path.join('bin', 'build.js'))
    .sort();
  return files.map((file) => {
    const stat = statSync(path.join(root, file));
    return [file.split(path.sep).join('/'), stat.size, stat.mtimeMs];
  });
}

/** True when `root`/dist holds a build of exactly the current sources. */
export function buildIsCurrent(root) {
  try {
    return readFileSync(path.join(root, 'dist', STATE_FILE), 'utf8') === JSON.stringify(sourceState(root));
  } catch {
    // No build yet, or a source vanished while we looked: not current.
    return false;
  }
}
