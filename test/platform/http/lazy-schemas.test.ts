// Route schemas compile on first use (src/platform/http/lazy-schemas.ts): start-up compiles none, a route's
// first request compiles what it needs and answers as an eager compile would, and every schema of every
// route compiles (what Fastify's eager compile used to prove at each start).
import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { LazySchemas, type BackgroundCompile } from '../../../src/platform/http/lazy-schemas.ts';
import { startTestGateway, type TestGateway } from '../../support/gateway.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

describe('route schemas compiled on first use', () => {
  it('compiles nothing at start, then a route its own schemas when it is first called, with the same answers', async () => {
    const atStart = gw.app.schemas.pendingCount;
    expect(atStart).toBeGreaterThan(100);

    // A body that fails validation: the validator compiles, runs and hands Fastify its errors.
    const refused = await fetch(`${gw.url}/v1/agents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'lazy-schemas-1' },
      body: JSON.stringify({ unexpected: true }),
    });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect(refused.status).toBeLessThan(500);
    expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);

    // A serialized answer: the health route's response schema compiles and shapes the body.
    const health = await fetch(`${gw.url}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: expect.any(String) });

    expect(gw.app.schemas.pendingCount).toBeLessThan(atStart);
  });

  it('compiles every schema of every route without an error', () => {
    const compiled = gw.app.schemas.compileAll();
    expect(compiled).toBeGreaterThan(100);
    expect(gw.app.schemas.pendingCount).toBe(0);
    expect(gw.app.schemas.compileAll()).toBe(0);
  });
});

describe('the background compile', () => {
  /** A validator factory of `routes` routes, each with a schema of its own, whose compile throws for the route named `bad`. */
  function validatorsOf(schemas: LazySchemas, routes: string[], bad?: string) {
    const compiledRoutes: string[] = [];
    const factory = () => (route: { url: string }) => {
      if (route.url === bad) throw new Error(`cannot compile ${route.url}`);
      compiledRoutes.push(route.url);
      return () => true;
    };
    const perRoute = (schemas.validators(factory as never) as (external: unknown, options: unknown) => (route: { url: string }) => unknown)({}, {});
    const validate = new Map(routes.map((url) => [url, perRoute({ url, schema: { title: url } } as never) as (data: unknown) => unknown]));
    return { compiledRoutes, validate };
  }

  const finished = (schemas: LazySchemas) => new Promise<BackgroundCompile>((resolve) => schemas.compileInBackground(resolve));

  // The compile waits while this process's event loop is busy, which a loaded machine (the suite's other files, a
  // gateway in this worker) can make it for longer than a test lasts: here the loop reads idle, so what is tested
  // is what a slice does, not the machine's load.
  afterEach(() => vi.restoreAllMocks());
  const idleLoop = () => vi.spyOn(performance, 'eventLoopUtilization').mockReturnValue({ idle: 1, active: 0, utilization: 0 });

  it('compiles every pending schema, skips those a request compiled first, and reports a failure while leaving it pending', async () => {
    idleLoop();
    const schemas = new LazySchemas();
    const { compiledRoutes, validate } = validatorsOf(schemas, ['/a', '/b', '/c', '/d'], '/c');
    validate.get('/b')!({}); // the route's first request, before the background compile
    const outcome = await finished(schemas);
    expect(outcome.compiled).toBe(2);
    expect(outcome.failed).toHaveLength(1);
    expect(String(outcome.failed[0]!.error)).toContain('cannot compile /c');
    expect(compiledRoutes.sort()).toEqual(['/a', '/b', '/d']);
    expect(schemas.pendingCount).toBe(1);
    // The failed one throws at its route's request, as a first-use compile would.
    expect(() => validate.get('/c')!({})).toThrow('cannot compile /c');
  });

  it('compiles the schemas of the routes it is told come first before the others, each set in its order', async () => {
    idleLoop();
    const schemas = new LazySchemas();
    const { compiledRoutes } = validatorsOf(schemas, ['/owner/a', '/v1/vouchers', '/owner/b', '/v1/me']);
    await new Promise<BackgroundCompile>((resolve) => schemas.compileInBackground(resolve, (url) => url.startsWith('/v1/')));
    expect(compiledRoutes).toEqual(['/v1/vouchers', '/v1/me', '/owner/a', '/owner/b']);
  });

  it('stops when told to (the app closing), leaving the rest to compile at first use', async () => {
    const schemas = new LazySchemas();
    const { compiledRoutes } = validatorsOf(schemas, ['/a', '/b']);
    let done = false;
    schemas.compileInBackground(() => {
      done = true;
    });
    schemas.stop();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(done).toBe(false);
    expect(compiledRoutes).toEqual([]);
    expect(schemas.pendingCount).toBe(2);
  });

  it('builds each serializer with its anyOf validators compiled (compileValidators), not at its first answer', () => {
    const schemas = new LazySchemas();
    const seen: unknown[] = [];
    const factory = (_external: unknown, options: unknown) => {
      seen.push(options);
      return () => () => '{}';
    };
    const serialize = (schemas.serializers(factory as never) as (external: unknown, options: unknown) => (route: { url: string }) => (data: unknown) => string)({}, { rounding: "trunc" })({ url: "/a" });
    expect(serialize({})).toBe('{}');
    expect(seen).toEqual([{ rounding: 'trunc', compileValidators: true }]);
  });

  it('compiles one validator for each schema and request part, and one serializer for each schema, whatever the routes', () => {
    const schemas = new LazySchemas();
    const validated: string[] = [];
    const validators = (schemas.validators((() => (route: { url: string; httpPart: string }) => {
      validated.push(`${route.httpPart} ${route.url}`);
      return () => true;
    }) as never) as (external: unknown, options: unknown) => (route: object) => (data: unknown) => unknown)({}, {});
    const id = { type: 'object', properties: { id: { type: 'string' } } };
    const checks = [
      validators({ url: '/a/:id', httpPart: 'params', schema: id }),
      validators({ url: '/b/:id', httpPart: 'params', schema: structuredClone(id) }), // the same JSON, another object
      validators({ url: '/c', httpPart: 'body', schema: id }), // bodies are checked without coercion: its own
    ];
    for (const check of checks) check({});
    expect(validated).toEqual(['params /a/:id', 'body /c']);

    const serialized: string[] = [];
    const serializers = (schemas.serializers((() => (route: { url: string; httpStatus: string }) => {
      serialized.push(`${route.httpStatus} ${route.url}`);
      return () => '{}';
    }) as never) as (external: unknown, options: unknown) => (route: object) => (data: unknown) => string)({}, {});
    const problem = { $ref: 'Problem#' };
    const answers = [
      serializers({ url: '/a', httpStatus: '400', schema: problem }),
      serializers({ url: '/b', httpStatus: '404', schema: { $ref: 'Problem#' } }),
      serializers({ url: '/a', httpStatus: '200', schema: id }),
    ];
    for (const answer of answers) expect(answer({})).toBe('{}');
    expect(serialized).toEqual(['400 /a', '200 /a']);
    expect(schemas.pendingCount).toBe(0);
  });

  it('compiles a schema once for every app of the process whose factory, shared schemas and options are the same', () => {
    const compiledRoutes: string[] = [];
    const factory = () => (route: { url: string }) => {
      compiledRoutes.push(route.url);
      return () => true;
    };
    const appOf = (options: unknown) => {
      const schemas = new LazySchemas();
      const perRoute = (schemas.validators(factory as never) as (external: unknown, options: unknown) => (route: unknown) => unknown)({ shared: 1 }, options);
      return (perRoute({ url: '/a', schema: { title: 'one' } }) as (data: unknown) => unknown)({});
    };
    appOf({ coerce: false });
    appOf({ coerce: false });
    expect(compiledRoutes).toEqual(['/a']);
    // Other options: another compiler, which compiles its own.
    appOf({ coerce: true });
    expect(compiledRoutes).toEqual(['/a', '/a']);
  });

  it('compileAll compiles what is pending, returns how many, and throws the first failure', () => {
    const schemas = new LazySchemas();
    const { compiledRoutes, validate } = validatorsOf(schemas, ['/a', '/b']);
    validate.get('/a')!({});
    expect(schemas.compileAll()).toBe(1);
    expect(compiledRoutes).toEqual(['/a', '/b']);
    expect(schemas.compileAll()).toBe(0);
    validatorsOf(schemas, ['/c'], '/c');
    expect(() => schemas.compileAll()).toThrow('cannot compile /c');
  });
});
