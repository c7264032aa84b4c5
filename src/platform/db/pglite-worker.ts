// The embedded database's engine on a thread of its own: the `worker_threads` worker that `pglite.ts` starts, so
// PGlite's WebAssembly Postgres runs on a second core beside the HTTP work. It answers one message per request,
// by id. Values cross by structured clone, which keeps bigint, Date, Uint8Array, arrays and JSON as PGlite returns
// them; an error crosses as its name, message and scalar fields (SQLSTATE `code`, `constraint`, `detail` …),
// which is all that faults.ts and the services read of it.
import { parentPort, workerData } from 'node:worker_threads';
import { openEngine, toCrossingError, type EngineOptions, type EngineReply, type EngineRequest } from './pglite-engine.ts';

/** What the worker is started with: the engine's options, marked so that loading this file anywhere else starts nothing. */
export interface WorkerOptions extends EngineOptions {
  engine: 'pglite';
}

async function serve(port: NonNullable<typeof parentPort>, options: EngineOptions): Promise<void> {
  let engine;
  try {
    engine = await openEngine(options);
  } catch (error) {
    port.postMessage({ id: 0, ready: false, error: toCrossingError(error) } satisfies EngineReply);
    return;
  }
  const run = engine;
  port.on('message', (request: EngineRequest) => {
    run(request).then(
      (answer) => port.postMessage({ id: request.id, ...answer } satisfies EngineReply),
      (error: unknown) => port.postMessage({ id: request.id, error: toCrossingError(error) } satisfies EngineReply),
    );
  });
  port.postMessage({ id: 0, ready: true } satisfies EngineReply);
}

if (parentPort && (workerData as Partial<WorkerOptions> | null)?.engine === 'pglite') await serve(parentPort, workerData as WorkerOptions);
