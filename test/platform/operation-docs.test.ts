// The OpenAPI document a client generator reads: every operation named, and the idempotency contract typed.
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

interface Operation {
  operationId?: string;
  parameters?: Array<{ in: string; name: string; required?: boolean }>;
  requestBody?: { content: Record<string, { example?: unknown; schema?: unknown }> };
  responses: Record<string, { headers?: Record<string, unknown> }>;
}

let gw: TestGateway;
let document: any;
let operations: Array<{ method: string; path: string; operation: Operation }>;
beforeAll(async () => {
  gw = await startTestGateway();
  document = await (await fetch(`${gw.url}/openapi.json`)).json();
  operations = Object.entries<Record<string, Operation>>(document.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, operation]) => ({ method, path, operation })),
  );
});
afterAll(() => gw.close());

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
});
