#!/usr/bin/env node
// `npm run build` (also npm install's `prepare` step) builds two things:
//
// - the gateway: src/**/*.ts to dist/**/*.js with esbuild, one output file per source file at the same
//   depth, so that `import.meta.url`-relative paths (the migrations folder, package.json) point where they
//   do from the sources. Nothing is bundled: each import stays an import, with `.ts` rewritten to `.js`.
//   No type checking here (`npm run typecheck` does that); this is what tsx does at each start, done once.
//   See docs/decisions.md, "A build step at install".
// - the packages, where present: the merchant SDK (packages/merchant) and the x402 credit scheme
//   (packages/x402-credit), each src/ to dist/ with tsc (JavaScript and .d.ts, which only tsc writes, so their
//   types are checked too), which is what each package.json exports and what `npm pack` ships. See
//   docs/decisions.md, "The merchant SDK is built JavaScript with declarations".
// - the owner console, where console/ is present: console/src/main.tsx bundled by esbuild (Preact, JSX,
//   its CSS) into dist/console/static/, minified, with content-hashed names, a manifest naming them (with
//   their SRI hashes), and a gzip and a brotli copy of each, so the gateway serves them as they are. See
//   docs/decisions.md, "Console".
//
// Each is built into a fresh folder and swapped in, with a record of its inputs, so that a build that
// matches the sources is skipped with --if-stale (the test set-up), for each on its own.
// A fresh dist/ has no console, so rebuilding the gateway rebuilds the console after it.
//
//   node bin/build.js             build them all
//   node bin/build.js --if-stale  build each only when its dist/ does not match its sources
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants as zlib, gzipSync } from 'node:zlib';
import { build } from 'esbuild';
import { buildIsCurrent, sourceState, STATE_FILE } from './build-state.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = path.join(ROOT, 'src');
const DIST = path.join(ROOT, 'dist');
/** The workspace packages tsc builds, in dependency order (neither imports the other). */
const PACKAGES = ['packages/merchant', 'packages/x402-credit'].map((dir) => {
  const root = path.join(ROOT, dir);
  return { dir, root, config: path.join(root, 'tsconfig.build.json'), dist: path.join(root, 'dist') };
});
const CONSOLE = path.join(ROOT, 'console');
const CONSOLE_ENTRY = path.join(CONSOLE, 'src/main.tsx');
const CONSOLE_DIST = path.join(DIST, 'console/static');

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

/**
 * Puts a finished build at `dist`, replacing the previous one, so a process starting meanwhile never sees half a build.
 * The staging folder came from mkdtemp, which makes it 0700 whatever the umask: it is opened as a folder made by
 * mkdir would be (0755 under the usual umask), so a service account can run a checkout another user built (found
 * from outside: it read dist/ as stale, and could not import the packages).
 */
function swapIn(staging, dist, isCurrent) {
  chmodSync(staging, 0o755);
  const previous = `${staging}-previous`;
  try {
    renameSync(dist, previous);
  } catch (error) {
    if (error.code !== 'ENOENT') throw error;
  }
  try {
    renameSync(staging, dist);
  } catch (error) {
    // Another build swapped its folder in between our two renames; its build is as good as ours.
    if ((error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') || !isCurrent()) throw error;
  }
  rmSync(previous, { recursive: true, force: true });
}

/** Builds the gateway into a fresh folder, then swaps it in. */
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
    swapIn(staging, DIST, () => buildIsCurrent(ROOT));
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return { files: entryPoints.length, ms: Math.round(performance.now() - startedMs) };
}

/**
 * A package build's inputs, as bin/build-state.js records the gateway's: its sources, its tsc settings, its
 * package.json (`"type": "module"` decides what tsc emits) and this file, each with size and modification time.
 */
function packageSourceState(pkg) {
  return treeState(path.join(pkg.root, 'src'), [pkg.config, path.join(pkg.root, 'package.json')]);
}

/** Every file under `dir` plus `extra` files and this one, relative to the root, each with size and modification time. */
function treeState(dir, extra) {
  const files = readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(ROOT, path.join(entry.parentPath, entry.name)))
    .concat(extra.map((file) => path.relative(ROOT, file)), path.join('bin', 'build.js'))
    .sort();
  return files.map((file) => {
    const stat = statSync(path.join(ROOT, file));
    return [file.split(path.sep).join('/'), stat.size, stat.mtimeMs];
  });
}

/** Whether `dist` holds a build of exactly the inputs `state()` lists now. */
function isCurrent(dist, state) {
  try {
    return readFileSync(path.join(dist, STATE_FILE), 'utf8') === JSON.stringify(state());
  } catch {
    return false;
  }
}

function packageIsCurrent(pkg) {
  return isCurrent(pkg.dist, () => packageSourceState(pkg));
}

/** The console's inputs: its sources (TSX, CSS, its tsconfig) and the lock file, which fixes Preact's version. */
function consoleSourceState() {
  return treeState(CONSOLE, [path.join(ROOT, 'package-lock.json')]);
}

function consoleIsCurrent() {
  return isCurrent(CONSOLE_DIST, consoleSourceState);
}

/** A content hash for a file name, and the SRI value of the same bytes. */
function hashes(bytes) {
  return {
    name: createHash('sha256').update(bytes).digest('base64url').slice(0, 12),
    integrity: `sha384-${createHash('sha384').update(bytes).digest('base64')}`,
  };
}

/**
 * Bundles the console (one script, one style sheet) into a fresh folder, names each file by its content,
 * writes a gzip and a brotli copy of each beside it and the manifest the gateway reads, then swaps it in.
 */
async function buildConsole() {
  const startedMs = performance.now();
  const state = consoleSourceState();
  mkdirSync(path.dirname(CONSOLE_DIST), { recursive: true });
  const staging = mkdtempSync(path.join(path.dirname(CONSOLE_DIST), '.static-'));
  try {
    const result = await build({
      absWorkingDir: ROOT,
      entryPoints: [CONSOLE_ENTRY],
      bundle: true,
      write: false,
      outdir: staging,
      format: 'esm',
      platform: 'browser',
      target: ['chrome111', 'firefox115', 'safari16.4'],
      jsx: 'automatic',
      jsxImportSource: 'preact',
      tsconfig: path.join(CONSOLE, 'tsconfig.json'),
      minify: true,
      legalComments: 'none',
      charset: 'utf8',
      logLevel: 'warning',
    });
    const manifest = { files: {} };
    for (const output of result.outputFiles) {
      const extension = path.extname(output.path);
      const kind = { '.js': 'script', '.css': 'style' }[extension];
      if (kind === undefined) throw new Error(`the console build made an unexpected file: ${output.path}`);
      const { name, integrity } = hashes(output.contents);
      const file = `console-${name}${extension}`;
      writeFileSync(path.join(staging, file), output.contents);
      writeFileSync(path.join(staging, `${file}.gz`), gzipSync(output.contents, { level: 9 }));
      writeFileSync(path.join(staging, `${file}.br`), brotliCompressSync(output.contents, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11 } }));
      manifest[kind] = { file, integrity, bytes: output.contents.length };
      manifest.files[file] = kind;
    }
    if (!manifest.script || !manifest.style) throw new Error('the console build must make one script and one style sheet');
    writeFileSync(path.join(staging, 'manifest.json'), JSON.stringify(manifest));
    writeFileSync(path.join(staging, STATE_FILE), JSON.stringify(state));
    swapIn(staging, CONSOLE_DIST, consoleIsCurrent);
    return { bytes: manifest.script.bytes + manifest.style.bytes, ms: Math.round(performance.now() - startedMs) };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** tsc's command-line script, or undefined where TypeScript (a dev dependency) is not installed. */
function tscPath() {
  try {
    return createRequire(import.meta.url).resolve('typescript/bin/tsc');
  } catch {
    return undefined;
  }
}

/** Compiles a package with tsc into a fresh folder (tsc prints its own diagnostics), then swaps it in. */
function buildPackage(pkg, tsc) {
  const startedMs = performance.now();
  const state = packageSourceState(pkg);
  const staging = mkdtempSync(path.join(pkg.root, '.dist-'));
  try {
    const compiled = spawnSync(process.execPath, [tsc, '--project', pkg.config, '--outDir', staging], { cwd: pkg.root, stdio: 'inherit' });
    if (compiled.status !== 0) throw new Error(`tsc could not build ${pkg.dir} (${compiled.error?.message ?? `exit code ${compiled.status ?? compiled.signal}`})`);
    writeFileSync(path.join(staging, STATE_FILE), JSON.stringify(state));
    swapIn(staging, pkg.dist, () => packageIsCurrent(pkg));
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return { ms: Math.round(performance.now() - startedMs) };
}

const USAGE = `Usage: node bin/build.js [--if-stale]   (npm run build)

Builds dist/ (the gateway), dist/console/static/ (the owner console) and packages/*/dist/ (the merchant SDK and
the x402 credit scheme), each into a fresh folder swapped in whole.

  --if-stale   build each only when its output does not match its sources (what the test set-up runs)
  --help       this text
`;
const flags = process.argv.slice(2);
if (flags.includes('--help') || flags.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const unknown = flags.filter((flag) => flag !== '--if-stale');
if (unknown.length > 0) {
  process.stderr.write(`build: unknown option ${unknown.join(' ')} (it takes --if-stale and --help)\n`);
  process.exit(2);
}
const ifStale = flags.includes('--if-stale');
try {
  if (!ifStale || !buildIsCurrent(ROOT)) {
    const { files, ms } = await buildDist();
    process.stdout.write(`built dist/ from ${files} source files in ${ms} ms\n`);
  }
  // A copy of the gateway without console/ (the build's own tests make one) has no console to build.
  if (existsSync(CONSOLE_ENTRY) && (!ifStale || !consoleIsCurrent())) {
    const { bytes, ms } = await buildConsole();
    process.stdout.write(`built dist/console/static/ (${Math.round(bytes / 1024)} KiB before compression) in ${ms} ms\n`);
  }
  // A copy of the gateway without the workspace (the build's own tests make one) has no package to build.
  for (const pkg of PACKAGES) {
    if (!existsSync(pkg.config) || (ifStale && packageIsCurrent(pkg))) continue;
    const tsc = tscPath();
    if (tsc === undefined) {
      // An install without dev dependencies: the gateway runs without the packages, which only tsc can build.
      process.stderr.write(`${pkg.dir}/dist/ not built: TypeScript, a dev dependency, is not installed\n`);
    } else {
      const { ms } = buildPackage(pkg, tsc);
      process.stdout.write(`built ${pkg.dir}/dist/ in ${ms} ms\n`);
    }
  }
} catch (error) {
  // esbuild and tsc have printed each problem with its file and line.
  process.stderr.write(`build failed: ${error.message.split('\n')[0]}\n`);
  process.exit(1);
}
