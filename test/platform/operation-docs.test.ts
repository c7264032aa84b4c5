// The OpenAPI document a client generator reads: every operation named, and the idempotency contract typed.
import { request } from 'node:http';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';

interface Operation {
  operationId?: string;
  parameters?: Array<{ in: string; name: string; required?: boolean }>;
  requestBody?: { required?: boolean; content: Record<string, { example?: unknown; schema?: unknown }> };
  responses: Record<string, { headers?: Record<string, unknown> }>;
}

let world: World;
let document: any;
let operations: Array<{ method: string; path: string; operation: Operation }>;
beforeAll(async () => {
  world = await startWorld();
  document = await (await fetch(`${world.url}/openapi.json`)).json();
  operations = Object.entries<Record<string, Operation>>(document.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, operation]) => ({ method, path, operation })),
  );
});
afterAll(() => world.close());

/**
 * The operations that answer without the database: documents built at start, the signing keys held in memory, the
 * dev issuers (their keys are files), the console's and the approval pages' static files, and the probes, which describe
 * their own 503.
 * Every other operation may meet an unavailable database, and must say so.
 */
const NEEDS_NO_DATABASE = [
  /(^|\/)\.well-known\//,
  /^\/docs(\/|$)/,
  /^\/openapi\.json$/,
  /^\/(healthz|readyz|livez|metrics)$/,
  /^\/console(\/|$)/,
  /^\/dev\/issuers\//,
  /^\/payments\/(topups|purchases)\/\{id\}$/, // the approval pages: static HTML whose script calls /v1
  /^\/favicon/,
  /^\/$/,
];

const keyOf = (operation: Operation) => operation.parameters?.find((p) => p.in === 'header' && p.name === 'Idempotency-Key');

describe('operations in /openapi.json', () => {
  it('gives every operation a unique camelCase operationId', () => {
    const ids = operations.map(({ operation }) => operation.operationId);
    for (const [index, id] of ids.entries()) expect(id, `${operations[index]!.method} ${operations[index]!.path}`).toMatch(/^[a-z][A-Za-z0-9]*$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('declares Idempotency-Key, required where the spec requires it, and Idempotent-Replayed on its successes', () => {
    const byId = new Map(operations.map((entry) => [entry.operation.operationId, entry.operation]));
    for (const id of ['mintVoucher', 'captureRedemption', 'releaseRedemption', 'executeService', 'registerAgent', 'registerMerchant', 'updateMerchant', 'verifyMerchantDomain', 'createMerchantApiKey', 'configureMerchantWebhook', 'createOffer']) {
      expect(keyOf(byId.get(id)!)?.required, id).toBe(true);
    }
    for (const id of ['updateAgent', 'freezeAgent', 'revokeMerchantApiKey', 'updateOffer']) expect(keyOf(byId.get(id)!)?.required, id).toBeFalsy();
    for (const { operation } of operations.filter(({ operation }) => keyOf(operation))) {
      const successes = Object.entries(operation.responses).filter(([status]) => status.startsWith('2'));
      for (const [status, response] of successes) expect(response.headers?.['Idempotent-Replayed'], `${operation.operationId} ${status}`).toBeDefined();
    }
    // Its description says what a missing key gets only where one is required (an optional key is never missing).
    for (const { operation } of operations.filter(({ operation }) => keyOf(operation))) {
      const { description } = keyOf(operation)! as { description?: string };
      expect(description ?? '', operation.operationId).toMatch(/Malformed: 400 invalid_input|malformed: 400 invalid_input/);
      if (description?.startsWith('Optional.')) expect(description, operation.operationId).not.toMatch(/Missing/);
    }
    expect(byId.get('registerAgent')!.responses['201']!.headers?.Location).toBeDefined();
    expect(keyOf(byId.get('getAgent')!)).toBeUndefined();
  });

  it('says a body is optional exactly where the gateway takes a request without one: a POST whose options are all optional', async () => {
    const optional = operations.filter(({ operation }) => operation.requestBody?.required === false).map(({ method, path }) => `${method} ${path}`);
    for (const route of [
      'post /v1/redemptions/{id}/capture',
      'post /v1/redemptions/{id}/release',
      'post /v1/owner/agents/{id}/freeze',
      'post /v1/owner/agents/{id}/unfreeze',
      'post /v1/owner/agents/{id}/retire',
      'post /v1/payments/topups/{id}/approve',
      'post /v1/payments/purchases/{id}/decline',
      'post /v1/merchants/{id}/webhook/rotate-secret',
    ]) {
      expect(optional).toContain(route);
    }
    expect(optional.filter((route) => !route.startsWith('post '))).toEqual([]);
    expect(operations.find(({ method, path }) => method === 'put' && path === '/v1/owner/agents/{id}/mandate')!.operation.requestBody!.required).toBe(true);
    // Taken without one: the route's refusal is about the request (no such hold), never "body must be object"; a PUT
    // without its body is refused.
    const owner = `Bearer ${await world.humanToken('bodies@example.com')}`;
    const decline = await fetch(`${world.url}/v1/payments/purchases/pur_nope/decline`, { method: 'POST', headers: { authorization: owner, 'idempotency-key': 'no-body-1' } });
    expect([decline.status, (await decline.json()).code]).toEqual([404, 'not_found']);
    // An empty body with the JSON content type is no body too (found from outside: "the body is empty").
    const empty = await fetch(`${world.url}/v1/payments/purchases/pur_nope/decline`, { method: 'POST', headers: { authorization: owner, 'idempotency-key': 'no-body-3', 'content-type': 'application/json' }, body: '' });
    expect([empty.status, (await empty.json()).code]).toEqual([404, 'not_found']);
    // A body is read as sent: compressed, or in another character set, it is refused, not read as UTF-8 JSON.
    for (const [header, value] of [['content-encoding', 'br'], ['content-type', 'application/json; charset=iso-8859-1']]) {
      const headers: Record<string, string> = { authorization: owner, 'idempotency-key': `odd-${header}`, 'content-type': 'application/json', [header!]: value! };
      const odd = await fetch(`${world.url}/v1/merchants`, { method: 'POST', headers, body: JSON.stringify({ name: 'Odd', domain: 'odd.example.com', categories: ['books'] }) });
      expect([header, odd.status, (await odd.json()).code]).toEqual([header, 415, 'unsupported_media_type']);
    }
    // A header sent once is sent once: two credentials were read as the first (found from outside).
    const other = `Bearer ${await world.humanToken('someone-else@example.com')}`;
    const twice = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      // Raw header pairs, one line each (fetch would join the two values into one line).
      const sent = request(`${world.url}/v1/me`, { headers: ['authorization', owner, 'authorization', other] }, (res) => {
        let text = '';
        res.on('data', (chunk) => (text += chunk)).on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      sent.on('error', reject).end();
    });
    expect([twice.status, twice.body.detail]).toEqual([400, 'send one authorization header, not several']);
    // Two Host lines are 400 (RFC 9112 §3.2): which one names the target, a dev gateway's rebinding check included, is
    // not for the gateway to guess (found from outside: the first was used).
    const hosts = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const sent = request(`${world.url}/v1/me`, { headers: ['host', '127.0.0.1', 'host', 'rebind.example', 'authorization', owner] }, (res) => {
        let text = '';
        res.on('data', (chunk) => (text += chunk)).on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      sent.on('error', reject).end();
    });
    expect([hosts.status, hosts.body.detail]).toEqual([400, 'send one host header, not several']);
    const put = await fetch(`${world.url}/v1/owner/agents/agt_nope/mandate`, { method: 'PUT', headers: { authorization: owner, 'idempotency-key': 'no-body-2' } });
    expect([put.status, (await put.json()).detail]).toEqual([400, expect.stringMatching(/body/)]);
  });

  it('lists a 503 with Retry-After on every operation that needs the database (found from outside: 73 did not, then /mcp and the dev zone)', () => {
    const missing = operations
      .filter(({ path }) => !NEEDS_NO_DATABASE.some((pattern) => pattern.test(path)))
      .filter(({ operation }) => !(operation.responses['503']?.headers as Record<string, unknown> | undefined)?.['Retry-After'])
      .map(({ method, path }) => `${method} ${path}`);
    expect(missing).toEqual([]);
  });

  it("declares Retry-After on execute's 502, which a busy mail server's refusal carries", () => {
    const execute = operations.find(({ operation }) => operation.operationId === 'executeService')!.operation;
    expect(execute.responses['502']?.headers?.['Retry-After']).toBeDefined();
  });

  it('gives an example for every JSON request body of /v1', () => {
    const bodies = operations.filter(({ path, operation }) => path.startsWith('/v1/') && operation.requestBody?.content['application/json']);
    expect(bodies.length).toBeGreaterThan(10);
    for (const { operation } of bodies) expect(operation.requestBody!.content['application/json']!.example, operation.operationId).toBeDefined();
  });

  it('gives request body examples that are valid against their own schemas', () => {
    // The document is the root its `$ref`s point into; each body schema is validated by its JSON pointer.
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    ajv.addSchema({ ...document, $id: 'openapi' });
    const pointer = (...parts: string[]) => parts.map((part) => part.replace(/~/g, '~0').replace(/\//g, '~1')).join('/');
    const invalid: string[] = [];
    for (const { method, path, operation } of operations) {
      const body = operation.requestBody?.content['application/json'];
      if (!body?.example || !body.schema) continue;
      const validate = ajv.compile({ $ref: `openapi#/${pointer('paths', path, method, 'requestBody', 'content', 'application/json', 'schema')}` });
      if (!validate(body.example)) invalid.push(`${operation.operationId}: ${ajv.errorsText(validate.errors)}`);
    }
    expect(invalid).toEqual([]);
  });

  it('gives examples that are valid against their own schemas, wherever the document has one (found from outside: EvidenceClaims lacked a required member)', () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    ajv.addSchema({ ...document, $id: 'openapi' });
    const escape = (part: string) => part.replace(/~/g, '~0').replace(/\//g, '~1');
    const invalid: string[] = [];
    let checked = 0;
    const check = (pointer: string, examples: unknown[]) => {
      const validate = ajv.compile({ $ref: `openapi#${pointer}` });
      for (const example of examples) {
        checked += 1;
        if (!validate(example)) invalid.push(`${pointer}: ${ajv.errorsText(validate.errors)}`);
      }
    };
    // A schema's `examples`, and the `example` of a media type or parameter beside its `schema`.
    const walk = (node: unknown, pointer: string): void => {
      if (typeof node !== 'object' || node === null) return;
      if (Array.isArray(node)) return node.forEach((item, index) => walk(item, `${pointer}/${index}`));
      const object = node as Record<string, unknown>;
      if (Array.isArray(object.examples) && !pointer.endsWith('/properties')) check(pointer, object.examples);
      if ('example' in object && typeof object.schema === 'object') check(`${pointer}/schema`, [object.example]);
      for (const [key, value] of Object.entries(object)) if (key !== 'examples' && key !== 'example') walk(value, `${pointer}/${escape(key)}`);
    };
    walk(document.paths, '/paths');
    walk(document.components, '/components');
    expect(checked).toBeGreaterThan(40);
    expect(invalid).toEqual([]);
  });
});
