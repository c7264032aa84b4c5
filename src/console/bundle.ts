// The console's built files, as bin/build.js leaves them in dist/console/static/: one script and one style
// sheet named by their content, each with a gzip and a brotli copy, and the manifest naming them. They are
// read at the first request that needs them and kept in memory (about 150 KB with their copies); a console
// that is not built yet (the sources run through tsx before `npm run build`) is read again at the next
// request, so building it while the gateway runs is enough.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** From src/console/ and from dist/console/ alike: the repository root's dist/console/static. */
export const CONSOLE_STATIC_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../dist/console/static');

export type Encoding = 'br' | 'gzip' | 'identity';

export interface ConsoleAsset {
  contentType: string;
  /** The same bytes, as built and compressed at build time. */
  bodies: Record<Encoding, Buffer>;
}

export interface ConsoleBundle {
  script: { path: string; integrity: string };
  style: { path: string; integrity: string };
  /** By file name (`console-<hash>.js`): what `/console/static/{file}` serves. */
  assets: ReadonlyMap<string, ConsoleAsset>;
}

interface Manifest {
  script: { file: string; integrity: string };
  style: { file: string; integrity: string };
  files: Record<string, 'script' | 'style'>;
}

const CONTENT_TYPES = { script: 'text/javascript; charset=utf-8', style: 'text/css; charset=utf-8' } as const;

/** Where the static files are served from (their names change with their content, so they are cached for good). */
export const CONSOLE_STATIC_PATH = '/console/static';

async function readBundle(dir: string): Promise<ConsoleBundle | undefined> {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(await readFile(path.join(dir, 'manifest.json'), 'utf8')) as Manifest;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  const assets = new Map<string, ConsoleAsset>();
  for (const [file, kind] of Object.entries(manifest.files)) {
    const [identity, gzip, br] = await Promise.all(['', '.gz', '.br'].map((suffix) => readFile(path.join(dir, file + suffix))));
    assets.set(file, { contentType: CONTENT_TYPES[kind], bodies: { identity: identity!, gzip: gzip!, br: br! } });
  }
  return {
    script: { path: `${CONSOLE_STATIC_PATH}/${manifest.script.file}`, integrity: manifest.script.integrity },
    style: { path: `${CONSOLE_STATIC_PATH}/${manifest.style.file}`, integrity: manifest.style.integrity },
    assets,
  };
}

/** Reads the built console once it exists; undefined (and asked again next time) while it does not. */
export function consoleBundleLoader(dir = CONSOLE_STATIC_DIR): () => Promise<ConsoleBundle | undefined> {
  let loaded: Promise<ConsoleBundle | undefined> | undefined;
  return async () => {
    loaded ??= readBundle(dir);
    const bundle = await loaded.catch((error: unknown) => {
      loaded = undefined;
      throw error;
    });
    if (bundle === undefined) loaded = undefined;
    return bundle;
  };
}

/** The best encoding the request accepts among those we keep (brotli, then gzip, else none). */
export function preferredEncoding(acceptEncoding: string | undefined): Encoding {
  const accepted = new Map<string, number>();
  for (const part of (acceptEncoding ?? '').split(',')) {
    const [name, ...parameters] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const q = parameters.map((p) => /^\s*q=([0-9.]+)\s*$/.exec(p)?.[1]).find((value) => value !== undefined);
    accepted.set(name, q === undefined ? 1 : Number(q));
  }
  const weight = (name: string) => accepted.get(name) ?? accepted.get('*') ?? 0;
  if (weight('br') > 0) return 'br';
  if (weight('gzip') > 0) return 'gzip';
  return 'identity';
}
