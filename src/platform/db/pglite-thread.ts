// The request thread's side of the embedded engine running in a worker (`pglite-worker.ts`): each call is
// one message, answered by id. Errors come back as errors again, with the SQLSTATE and fields they had, so
// `faults.ts` classifies them as before; a worker that dies fails every waiting call as unreachable.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { QueryResult } from './database.ts';
import type { CrossingError, EngineOptions, EngineReply, EngineRequest, EngineResult } from './pglite-worker.ts';

/** What a caller may send: a request without the id, which the client assigns. */
type Call = EngineRequest extends infer R ? (R extends EngineRequest ? Omit<R, 'id'> : never) : never;

/** The message of every call after the engine stopped; faults.ts classifies it as unreachable (as PGlite's own "PGlite is closed"). */
export const ENGINE_STOPPED = 'the embedded database engine stopped';

function revive(crossing: CrossingError): Error {
  const error = crossing.wasmTrap ? new WebAssembly.RuntimeError(crossing.message) : new Error(crossing.message);
  Object.assign(error, crossing.fields);
  if (!crossing.wasmTrap) error.name = crossing.name;
  return error;
}

let compiled: Promise<Pick<EngineOptions, 'pgliteWasmModule' | 'initdbWasmModule'>> | undefined;

/**
 * PGlite's two WebAssembly modules, compiled once per process and handed to every worker (a compiled module
 * crosses threads without being compiled again). In process PGlite keeps them between instances; a fresh
 * worker would compile them at each open, seconds each, which every test's database would pay.
 */
function compiledModules(): Promise<Pick<EngineOptions, 'pgliteWasmModule' | 'initdbWasmModule'>> {
  compiled ??= (async () => {
    const dist = path.dirname(createRequire(import.meta.url).resolve('@electric-sql/pglite'));
    const compile = async (file: string) => WebAssembly.compile(await readFile(path.join(dist, file)));
    const [pgliteWasmModule, initdbWasmModule] = await Promise.all([compile('pglite.wasm'), compile('initdb.wasm')]);
    return { pgliteWasmModule, initdbWasmModule };
  })();
  return compiled;
}

/**
 * The worker's entry: the built `.js` beside this file in dist/, or the `.ts` source under tsx and vitest,
 * where a worker does not inherit the parent's TypeScript loader: a small bootstrap registers tsx first.
 */
function startWorker(options: EngineOptions): Worker {
  const entry = new URL(import.meta.url.endsWith('.ts') ? './pglite-worker.ts' : './pglite-worker.js', import.meta.url);
  if (!entry.pathname.endsWith('.ts')) return new Worker(entry, { workerData: options });
  // tsx's ESM API, as the `import` condition of its exports names it (require.resolve gives the CommonJS twin).
  const tsxApi = pathToFileURL(createRequire(import.meta.url).resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;
  const bootstrap = `import(${JSON.stringify(tsxApi)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(bootstrap, { eval: true, workerData: options });
}

export class EngineThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve(result: EngineResult): void; reject(error: Error): void }>();
  private nextId = 1;
  private stopped: Error | undefined;

  private constructor(options: EngineOptions) {
    this.worker = startWorker(options);
    this.worker.on('message', (reply: EngineReply) => {
      if (reply.id === 0) return;
      const call = this.pending.get(reply.id);
      if (!call) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) this.worker.unref();
      if ('ok' in reply && reply.ok) call.resolve(reply);
      else if ('error' in reply) call.reject(revive(reply.error));
    });
    this.worker.on('error', (error) => this.stop(new Error(`${ENGINE_STOPPED}: ${error.message}`, { cause: error })));
    this.worker.on('exit', (code) => this.stop(new Error(`${ENGINE_STOPPED} (exit code ${code})`)));
  }

  /** Starts the worker and waits for its engine to open the data directory (or fail to: that error is thrown here). */
  static async start(options: EngineOptions): Promise<EngineThread> {
    const thread = new EngineThread({ ...options, ...(await compiledModules()) });
    const ready = await new Promise<EngineReply>((resolve, reject) => {
      thread.worker.once('message', resolve);
      thread.worker.once('error', reject);
      thread.worker.once('exit', (code) => reject(new Error(`${ENGINE_STOPPED} while opening (exit code ${code})`)));
    });
    if ('ready' in ready && !ready.ready) {
      await thread.worker.terminate();
      throw revive(ready.error);
    }
    // Like an in-process PGlite, an idle engine does not hold the process open; a call waiting on it does.
    thread.worker.unref();
    return thread;
  }

  private stop(reason: Error): void {
    this.stopped ??= reason;
    for (const call of this.pending.values()) call.reject(this.stopped);
    this.pending.clear();
  }

  private call(request: Call): Promise<EngineResult> {
    if (this.stopped) return Promise.reject(this.stopped);
    const id = this.nextId++;
    if (this.pending.size === 0) this.worker.ref();
    this.worker.postMessage({ ...request, id });
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }

  async query<R>(sql: string, params: readonly unknown[] | undefined, txId?: number): Promise<QueryResult<R>> {
    const reply = await this.call({ op: 'query', sql, params: params as unknown[] | undefined, txId });
    return { rows: reply.rows as R[], rowCount: reply.rowCount ?? 0 };
  }

  async exec(sql: string, txId?: number): Promise<void> {
    await this.call({ op: 'exec', sql, txId });
  }

  /** Opens a transaction without waiting: its statements follow in order, and `end` reports whether it committed. */
  begin(txId: number): void {
    if (this.stopped) return;
    this.worker.postMessage({ op: 'begin', txId, id: 0 } satisfies EngineRequest);
  }

  async end(txId: number, commit: boolean): Promise<void> {
    await this.call({ op: 'end', txId, commit });
  }

  /** Closes the engine (PGlite flushes its data directory), then waits for the worker to end. */
  async close(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.call({ op: 'close' });
    } finally {
      this.stop(new Error('PGlite is closed'));
      // The engine has closed (or cannot answer any more): nothing is left in the worker to wait for.
      await this.worker.terminate();
    }
  }
}
