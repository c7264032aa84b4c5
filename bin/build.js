#!/usr/bin/env node
// `npm run build` (also npm install's `prepare` step): compiles src/**/*.ts to dist/**/*.js with esbuild,
// one output file per source file at the same depth, so that `import.meta.url`-relative paths (the
// migrations folder, package.json) point where they do from the sources. Nothing is bundled: each import
// stays an import, with `.ts` rewritten to `.js`. No type checking here (`npm run typecheck` does that);
// this is what tsx does at each start, done once. See docs/decisions.md, "A build step at install".
//
//   node bin/build.js             build
//   node bin/build.js --if-stale  build only when dist/ does not match the sources (test set-up)
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { buildIsCurrent, sourceState, STATE_FILE } from './build-state.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = path.join(ROOT, 'src');
const DIST = path.join(ROOT, 'dist');

/** Keeps every import as an import: relative `.ts` ones become `.js`; a relative import leaving src/ fails the build. */
const keepImports = {
  name: 'keep-imports',
  setup(builder) {
    builder.onResolve({ filter: /.*/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      if (!args.path.startsWith('.')) return { path: args.path, external: true };
      const target = path.resolve(args.resolveDir, args.path);
      if (!target.startsWith(SRC + path.sep)) return { errors: [{ text: `${args.path} is outside src/, which is all that is built` }] };
      return { path: args.path.replace(/\.ts$/, '.js'), external: true };
    });
  },
};

/** Builds into a fresh folder, then swaps it in, so a process starting meanwhile never sees half a build. */
async function buildDist() {
  const startedMs = performance.now();
  const state = sourceState(ROOT);
  const entryPoints = state.map(([file]) => file).filter((file) => file.startsWith('src/') && file.endsWith('.ts'));
  const staging = mkdtempSync(path.join(ROOT, '.dist-'));
  try {
    await build({
      absWorkingDir: ROOT,
      entryPoints,
      outbase: 'src',
      outdir: staging,
      bundle: true,
      plugins: [keepImports],
      format: 'esm',
      platform: 'node',
      target: 'node20.19',
      tsconfig: path.join(ROOT, 'tsconfig.json'),
      charset: 'utf8',
      logLevel: 'warning',
    });
    writeFileSync(path.join(staging, STATE_FILE), JSON.stringify(state));
    const previous = `${staging}-previous`;
    try {
      renameSync(DIST, previous);
    } catch (error) {
      if (error.code !== 'ENOENT') throw error;
    }
    try {
      renameSync(staging, DIST);
    } catch (error) {
      // Another build swapped its folder in between our two renames; its build is as good as ours.
      if ((error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') || !buildIsCurrent(ROOT)) throw error;
    }
    rmSync(previous, { recursive: true, force: true });
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return { files: entryPoints.length, ms: Math.round(performance.now() - startedMs) };
}

if (process.argv.includes('--if-stale') && buildIsCurrent(ROOT)) process.exit(0);
try {
  const { files, ms } = await buildDist();
  process.stdout.write(`built dist/ from ${files} source files in ${ms} ms\n`);
} catch (error) {
  // esbuild has printed each problem with its file and line.
  process.stderr.write(`build failed: ${error.message.split('\n')[0]}\n`);
  process.exit(1);
}
