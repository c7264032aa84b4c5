// Fastify compiles every route's request validators (Ajv) and response serializers (fast-json-stringify)
// when the app becomes ready: for this gateway's ~150 routes that was 0.7 s of a 2 s start and tens of MB
// of generated code, most of it for routes a given gateway never serves. Here each one is compiled the
// first time its route needs it, then kept: the same compiler, the same options, the same function, only
// later. `compileAll` compiles whatever is still pending (the test that proves every schema compiles).
// See docs/decisions.md, "Schemas compile on first use".

/** What Fastify's schema controller expects of a compilers factory: (externalSchemas, options) → (route) → function. */
// `any`: each factory (Ajv's, fast-json-stringify's) declares its own parameter types, which pass through unchanged.
type Factory = (externalSchemas: any, options: any) => (route: any) => unknown;

export class LazySchemas {
  readonly #pending = new Set<() => void>();

  /** Schemas registered but not compiled yet. */
  get pendingCount(): number {
    return this.#pending.size;
  }

  /** Compiles every schema not compiled yet; returns how many it compiled. Throws the first compile error. */
  compileAll(): number {
    const pending = [...this.#pending];
    for (const compile of pending) compile();
    return pending.length;
  }

  /**
   * A validator factory whose validators compile on their first call. Fastify reads `.errors` off the
   * function after a failed validation (Ajv's convention), so the wrapper carries the compiled one's.
   */
  validators<F extends Factory>(factory: F): F {
    const lazy: Factory = (externalSchemas, options) => {
      // The factory itself is deferred too: Ajv's adds every shared schema to a new instance (0.2 s).
      let compiler: ((route: unknown) => ValidateFunction) | undefined;
      const compileFor = (route: unknown) => (compiler ??= factory(externalSchemas, options) as (route: unknown) => ValidateFunction)(route);
      return (route) => {
        let compiled: ValidateFunction | undefined;
        const compile = (): ValidateFunction => {
          if (compiled === undefined) {
            compiled = compileFor(route);
            this.#pending.delete(compile);
          }
          return compiled;
        };
        this.#pending.add(compile);
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

  /** A serializer factory whose serializers compile on their first use. */
  serializers<F extends Factory>(factory: F): F {
    const lazy: Factory = (externalSchemas, options) => {
      let compiler: ((route: unknown) => (data: unknown) => string) | undefined;
      const compileFor = (route: unknown) => (compiler ??= factory(externalSchemas, options) as (route: unknown) => (data: unknown) => string)(route);
      return (route) => {
        let compiled: ((data: unknown) => string) | undefined;
        const compile = (): ((data: unknown) => string) => {
          if (compiled === undefined) {
            compiled = compileFor(route);
            this.#pending.delete(compile);
          }
          return compiled;
        };
        this.#pending.add(compile);
        return (data: unknown) => compile()(data);
      };
    };
    return lazy as F;
  }
}

interface ValidateFunction {
  (this: unknown, ...args: unknown[]): unknown;
  errors?: unknown;
}
