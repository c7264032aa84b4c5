// Fastify compiles every route's request validators (Ajv) and response serializers (fast-json-stringify)
// when the app becomes ready: for this gateway's ~150 routes that was 0.7 s of a 2 s start and tens of MB
// of generated code. Here each one is compiled after the gateway is ready instead: in the background, in the
// event loop's idle time (`compileInBackground`, started by `acg serve`), or at its route's first request if
// that comes first. The same compiler, the same options, the same function, only later.
// A serializer is compiled whole: the Ajv validators its `anyOf` branches choose by are compiled with it
// (fast-json-stringify's `compileValidators`), not at the first answer that reaches them.
// Each distinct schema compiles once per compiler scope and process, whatever the number of routes and apps that use it (`once`).
// `compileAll` compiles whatever is still pending (the test that proves every schema compiles).
// See docs/decisions.md, "Schemas compile on first use" and "Route schemas compile in the background".

import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';

/** What Fastify's schema controller expects of a compilers factory: (externalSchemas, options) → (route) → function. */
// `any`: each factory (Ajv's, fast-json-stringify's) declares its own parameter types, which pass through unchanged.
type Factory = (externalSchemas: any, options: any) => (route: any) => unknown;

/** The background compile's slice of compiling, and the window before each in which the loop must be mostly idle. */
const SLICE_MS = 5;
const WINDOW_MS = 10;
/** The share of a window above which the event loop counts as busy with requests, and the slice waits. */
const BUSY_UTILIZATION = 0.5;

/** How the background compile went, for the log line at its end. */
export interface BackgroundCompile {
  compiled: number;
  /** Schemas whose compile threw: they stay pending, so their route's request throws as it would have. */
  failed: Array<{ error: unknown }>;
  ms: number;
}

export class LazySchemas {
  /** Each schema not compiled yet, by its compile, with its route's URL (the background compile's order). */
  readonly #pending = new Map<() => void, string>();
  #background: NodeJS.Timeout | undefined;

  /** Schemas registered but not compiled yet. */
  get pendingCount(): number {
    return this.#pending.size;
  }

  /** Compiles every schema not compiled yet; returns how many it compiled. Throws the first compile error. */
  compileAll(): number {
    const pending = [...this.#pending.keys()];
    for (const compile of pending) compile();
    return pending.length;
  }

  /**
   * Compiles every schema still pending, in the event loop's idle time: slices of at most `SLICE_MS` of
   * compiling, each after a `WINDOW_MS` window in which the loop was less than half busy with anything else, so
   * requests come first (a request arriving during a slice waits for one compile at most: a few milliseconds,
   * the first validator also builds Ajv's instance). A route whose first request comes before its turn compiles
   * then, as before. `done` is called once the last one is; `stop()` (the app's close) ends it early. A schema
   * whose compile throws is left pending, so its route's request throws as it would have. The schemas of the
   * routes `first` picks (by URL) compile before the others: the routes a new instance's first requests need.
   */
  compileInBackground(done: (outcome: BackgroundCompile) => void, first: (url: string) => boolean = () => false): void {
    if (this.#background) return;
    const pending = [...this.#pending];
    const queue = [...pending.filter(([, url]) => first(url)), ...pending.filter(([, url]) => !first(url))].map(([compile]) => compile);
    const startedMs = performance.now();
    const outcome: BackgroundCompile = { compiled: 0, failed: [], ms: 0 };
    let window = performance.eventLoopUtilization();
    const slice = (): void => {
      const now = performance.eventLoopUtilization();
      const busy = performance.eventLoopUtilization(now, window).utilization > BUSY_UTILIZATION;
      if (!busy) {
        const sliceEndMs = performance.now() + SLICE_MS;
        while (queue.length > 0 && performance.now() < sliceEndMs) {
          const compile = queue.shift()!;
          if (!this.#pending.has(compile)) continue;
          try {
            compile();
            outcome.compiled += 1;
          } catch (error) {
            outcome.failed.push({ error });
          }
        }
      }
      if (queue.length === 0) {
        this.#background = undefined;
        outcome.ms = Math.round(performance.now() - startedMs);
        done(outcome);
        return;
      }
      // The next window starts after this slice, so the slice's own compiling does not count as others' work.
      window = performance.eventLoopUtilization();
      this.#background = setTimeout(slice, WINDOW_MS).unref();
    };
    this.#background = setTimeout(slice, WINDOW_MS).unref();
  }

  /** Stops a background compile; what is still pending compiles at first use, as before. */
  stop(): void {
    if (this.#background) clearTimeout(this.#background);
    this.#background = undefined;
  }

  /**
   * A validator factory whose validators compile on their first call. Fastify reads `.errors` off the
   * function after a failed validation (Ajv's convention), so the wrapper carries the compiled one's.
   */
  validators<F extends Factory>(factory: F): F {
    const lazy: Factory = (externalSchemas, options) => {
      // The factory itself is deferred too: Ajv's adds every shared schema to a new instance (0.2 s).
      let compiler: ((route: unknown) => ValidateFunction) | undefined;
      // A validator depends on its schema and on the part of the request it checks (bodies are not coerced).
      const compileFor = once(
        () => compiledBy(factory, externalSchemas, options),
        (route: RouteSchema) => `${route.httpPart ?? ''}\n${JSON.stringify(route.schema)}`,
        (route) => (compiler ??= factory(externalSchemas, options) as (route: unknown) => ValidateFunction)(route),
      );
      return (route: RouteSchema) => {
        let compiled: ValidateFunction | undefined;
        const compile = (): ValidateFunction => {
          if (compiled === undefined) {
            compiled = compileFor(route);
            this.#pending.delete(compile);
          }
          return compiled;
        };
        this.#pending.set(compile, route.url ?? '');
        const validate = function (this: unknown, ...args: unknown[]): unknown {
          const target = compile();
          const result = target.apply(this, args);
          validate.errors = target.errors;
          return result;
        } as ValidateFunction;
        validate.errors = null;
        return validate;
      };
    };
    return lazy as F;
  }

  /**
   * A serializer factory whose serializers compile on their first use, each with the validators of its
   * `anyOf` branches (`compileValidators`), so nothing of it is left to compile at an answer.
   */
  serializers<F extends Factory>(factory: F): F {
    const lazy: Factory = (externalSchemas, options) => {
      let compiler: ((route: unknown) => (data: unknown) => string) | undefined;
      const build = () => factory(externalSchemas, { ...options, compileValidators: true }) as (route: unknown) => (data: unknown) => string;
      // fast-json-stringify's compiler reads the schema alone, not the route's method, URL or status.
      const compileFor = once(
        () => compiledBy(factory, externalSchemas, options),
        (route: RouteSchema) => JSON.stringify(route.schema),
        (route) => (compiler ??= build())(route),
      );
      return (route: RouteSchema) => {
        let compiled: ((data: unknown) => string) | undefined;
        const compile = (): ((data: unknown) => string) => {
          if (compiled === undefined) {
            compiled = compileFor(route);
            this.#pending.delete(compile);
          }
          return compiled;
        };
        this.#pending.set(compile, route.url ?? '');
        return (data: unknown) => compile()(data);
      };
    };
    return lazy as F;
  }
}

/** What Fastify gives a compiler for one schema of one route. */
interface RouteSchema {
  schema: unknown;
  url?: string;
  httpPart?: string;
}

/**
 * What compiles made, by factory (one per process for each kind, src/platform/http/app.ts), then by the JSON of the
 * shared schemas and options the factory is given, then by schema: kept for the process, as Fastify's own compilers
 * pool their Ajv instances by the JSON of the shared schemas and options. One gateway builds one app, so this changes
 * nothing for it; a process that builds many (the test suite: one app a test world, each compiling its routes'
 * serializers anew, 7.5 s of 203 s of a profile of 37 test files) compiles each schema once.
 */
const made = new WeakMap<Factory, Map<string, Map<string, unknown>>>();

/** What the factory compiled, given these shared schemas and options (a function by its name: Ajv's plugins). */
function compiledBy(factory: Factory, externalSchemas: unknown, options: unknown): Map<string, unknown> {
  let text: string;
  try {
    text = JSON.stringify([externalSchemas, options], (_key, value: unknown) => (typeof value === 'function' ? `function ${value.name}` : value));
  } catch {
    // Options JSON cannot show (a cycle): what this compiler makes is its own, shared with no other, as before.
    return new Map();
  }
  const scope = createHash('sha256').update(text).digest('base64url');
  const byScope = made.get(factory) ?? new Map<string, Map<string, unknown>>();
  made.set(factory, byScope);
  const compiled = byScope.get(scope) ?? new Map<string, unknown>();
  byScope.set(scope, compiled);
  return compiled;
}

/**
 * `compile`, run once per key: the routes' schemas repeat (every route answers its errors with the same Problem
 * schema, many take the same path parameters), and what one compile made serves every route whose schema has the
 * same JSON, for every compiler of the same factory, shared schemas and options. 602 compiles were 151 distinct.
 * Which compiles are shared is worked out at the first compile, not when the app registers its routes.
 */
function once<T>(compiledOf: () => Map<string, unknown>, keyOf: (route: RouteSchema) => string, compile: (route: RouteSchema) => T): (route: unknown) => T {
  let compiledSoFar: Map<string, unknown> | undefined;
  return (route) => {
    const compiled = (compiledSoFar ??= compiledOf());
    const key = keyOf(route as RouteSchema);
    let result = compiled.get(key) as T | undefined;
    if (result === undefined) {
      result = compile(route as RouteSchema);
      compiled.set(key, result);
    }
    return result;
  };
}

interface ValidateFunction {
  (this: unknown, ...args: unknown[]): unknown;
  errors?: unknown;
}
