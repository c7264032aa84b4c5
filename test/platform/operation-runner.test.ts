// The operation runner below every face: an operation run over HTTP and then called directly (as the MCP
// face will) with the same principal, key and input is one request; a stored business error comes back as
// the same ApiError.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ApiError } from '../../src/platform/errors.ts';
import { serve } from '../../src/platform/http/operation.ts';
import { runOperation, type SingleStepOperation } from '../../src/platform/operations.ts';
import type { Principal } from '../../src/platform/principal.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

const Input = Type.Object({ amount: Type.Integer() }, { additionalProperties: false });
type Input = Static<typeof Input>;

const alice: Principal = { kind: 'owner', id: 'own_runner_alice', ownerId: 'own_runner_alice', scopes: [], credential: 'test' };

let runs = 0;
const recordAmount: SingleStepOperation<Input, { run: number; amount: number }> = {
  name: 'recordAmount',
  input: Input,
  idempotency: { key: 'required' },
  run: async (_tx, { input }) => {
    runs += 1;
    if (input.amount === 0) throw new ApiError('conflict', { detail: 'zero is refused', extra: { hint: 'send a positive amount' } });
    return { run: runs, amount: input.amount };
  },
};

async function runnerRoute(app: FastifyInstance) {
  app.addHook('preHandler', async (request) => {
    request.principal = alice;
  });
  app.post('/v1/test/amounts', { schema: { body: Input }, config: { operation: recordAmount }, handler: (request, reply) => serve(request, reply, recordAmount, request.body as Input) });
}

/** A protocol that carries its own idempotency key (x402's jti): the key is derived from the input. */
const DerivedInput = Type.Object({ ticket: Type.String(), amount: Type.Integer() }, { additionalProperties: false });
let derivedRuns = 0;
const settleTicket: SingleStepOperation<Static<typeof DerivedInput>, { run: number }> = {
  name: 'settleTicket',
  input: DerivedInput,
  idempotency: { key: 'derived' },
  deriveKey: (input) => input.ticket,
  run: async () => ({ run: ++derivedRuns }),
};

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ features: [runnerRoute] });
});
afterAll(() => gw.close());

async function overHttp(key: string, input: Input) {
  const res = await fetch(`${gw.url}/v1/test/amounts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(input),
  });
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: await res.json() };
}

describe('operation runner', () => {
  it('treats a key used over HTTP and then directly (another face) as one key', async () => {
    const first = await overHttp('runner-shared', { amount: 5 });
    const direct = await runOperation(gw.gateway, recordAmount, { principal: alice, idempotencyKey: 'runner-shared', input: { amount: 5 } });
    expect(first.status).toBe(200);
    expect(direct).toEqual({ result: first.body, replayed: true });
  });

  it('refuses another input under a key first used from another face (409 idempotency_key_reused)', async () => {
    await runOperation(gw.gateway, recordAmount, { principal: alice, idempotencyKey: 'runner-changed', input: { amount: 6 } });
    const changed = await overHttp('runner-changed', { amount: 7 });
    expect(changed.status).toBe(409);
    expect(changed.body.code).toBe('idempotency_key_reused');
  });

  it('replays a stored business error as the same ApiError, to HTTP with Idempotent-Replayed', async () => {
    const first = await overHttp('runner-error', { amount: 0 });
    expect(first.status).toBe(409);
    expect(first.replayed).toBeNull();
    const replayedOverHttp = await overHttp('runner-error', { amount: 0 });
    expect(replayedOverHttp.replayed).toBe('true');
    expect(replayedOverHttp.body).toEqual(first.body);
    const direct = await runOperation(gw.gateway, recordAmount, { principal: alice, idempotencyKey: 'runner-error', input: { amount: 0 } }).catch((error: unknown) => error);
    expect(direct).toBeInstanceOf(ApiError);
    const error = direct as ApiError;
    expect([error.code, error.status, error.options.detail, error.options.extra]).toEqual(['conflict', 409, 'zero is refused', { hint: 'send a positive amount' }]);
  });

  it('checks the key rule and requirement for every face', async () => {
    const missing = await runOperation(gw.gateway, recordAmount, { principal: alice, input: { amount: 1 } }).catch((error: unknown) => error);
    expect((missing as ApiError).code).toBe('idempotency_required');
    const malformed = await runOperation(gw.gateway, recordAmount, { principal: alice, idempotencyKey: 'has space', input: { amount: 1 } }).catch((error: unknown) => error);
    expect((malformed as ApiError).code).toBe('invalid_input');
  });

  it('derives the key from the input when the operation says so: a sent key is not looked at, another input under it conflicts', async () => {
    const first = await runOperation(gw.gateway, settleTicket, { principal: alice, input: { ticket: 'tkt_1', amount: 3 } });
    const again = await runOperation(gw.gateway, settleTicket, { principal: alice, idempotencyKey: 'something-else', input: { ticket: 'tkt_1', amount: 3 } });
    expect(again).toEqual({ result: first.result, replayed: true });
    const other = await runOperation(gw.gateway, settleTicket, { principal: alice, input: { ticket: 'tkt_1', amount: 4 } }).catch((error: unknown) => error);
    expect((other as ApiError).code).toBe('idempotency_key_reused');
    expect((await runOperation(gw.gateway, settleTicket, { principal: alice, input: { ticket: 'tkt_2', amount: 4 } })).replayed).toBe(false);
    const malformed = await runOperation(gw.gateway, settleTicket, { principal: alice, input: { ticket: 'has space', amount: 1 } }).catch((error: unknown) => error);
    expect((malformed as ApiError).code).toBe('invalid_input');
  });
});
