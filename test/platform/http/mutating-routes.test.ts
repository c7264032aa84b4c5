// Every mutating route is an operation (or a query that reads with a body, or says why it is neither): the
// rule is checked as each route is registered, so a gateway breaking it does not start.
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertMutationIsOperation } from '../../../src/platform/http/app.ts';
import { startWorld, type World } from '../../support/world.ts';

let world: World;

beforeAll(async () => {
  world = await startWorld();
});

afterAll(async () => {
  await world?.close();
});

describe('mutating routes', () => {
  it('the whole gateway starts: each of its mutating routes is an operation, a query, or says why not', async () => {
    const document = (await world.api('GET', '/openapi.json')).body;
    const mutating = Object.entries<Record<string, { operationId?: string }>>(document.paths).flatMap(([path, methods]) =>
      Object.entries(methods).filter(([method]) => ['post', 'put', 'patch', 'delete'].includes(method)).map(([method, operation]) => `${method} ${path} ${operation.operationId}`),
    );
    expect(mutating.length).toBeGreaterThan(30);
  });

  it('refuses a mutating route that is none of them, and accepts each declared kind', () => {
    expect(() => assertMutationIsOperation('/v1/things', ['POST'], {})).toThrow(/a mutating route must be an operation/);
    expect(() => assertMutationIsOperation('/v1/things', ['DELETE'], undefined)).toThrow(/DELETE \/v1\/things/);
    expect(() => assertMutationIsOperation('/v1/things', ['GET', 'HEAD'], {})).not.toThrow();
    const operation = { name: 'doThing', input: {} as never, idempotency: { key: 'none' as const } };
    expect(() => assertMutationIsOperation('/v1/things', ['PUT'], { operation })).not.toThrow();
    expect(() => assertMutationIsOperation('/v1/things', ['POST'], { notAnOperation: 'a protocol step' })).not.toThrow();
  });

  it('a Fastify app built with the rule refuses the route at registration', async () => {
    const app = Fastify();
    app.addHook('onRoute', (route) => assertMutationIsOperation(route.url, Array.isArray(route.method) ? route.method : [route.method], route.config));
    expect(() => app.post('/v1/planted', async () => ({}))).toThrow(/POST \/v1\/planted/);
    await app.close();
  });
});
