import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ApiError } from '../../src/platform/errors.ts';
import { fingerprint, NEW_KEY } from '../../src/platform/idempotency.ts';
import { serve } from '../../src/platform/http/operation.ts';
import type { SingleStepOperation } from '../../src/platform/operations.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

// A minimal operation with a real database effect: each run inserts one row into test_effects.
const Body = Type.Object({ amount: Type.Integer(), delayMs: Type.Optional(Type.Integer()), secret: Type.Optional(Type.Boolean()) });

const createTestEffect: SingleStepOperation<Static<typeof Body>, Record<string, unknown>> = {
  name: 'createTestEffect',
  input: Body,
  idempotency: { key: 'required' },
  secrets: { fields: ['secret'], replayNotice: 'The secret was shown once, in the first answer.' },
  run: async (tx, { input }) => {
    const { rows } = await tx.query<{ id: number }>('INSERT INTO test_effects (amount) VALUES ($1) RETURNING id', [input.amount]);
    // An injected delay (a sleep by design): the run stays this long inside its transaction, so that
    // concurrent requests with one key overlap it.
    if (input.delayMs) await new Promise((r) => setTimeout(r, input.delayMs));
    if (input.amount === 0) throw new ApiError('conflict', { detail: 'zero is refused' });
    if (input.amount < 0) throw new Error('server fault');
    return { effectId: rows[0]!.id, label: 'effect', amount: input.amount, ...(input.secret ? { secret: 'shown-once', notice: 'Store the secret now.' } : input.secret === false ? { notice: 'Nothing to store.' } : {}) };
  },
};

// What the route sends: the schema a replay is rendered by too.
const EffectAnswer = Type.Object({
  effectId: Type.Integer(),
  label: Type.Optional(Type.String()),
  amount: Type.Integer(),
  secret: Type.Optional(Type.String()),
  notice: Type.Optional(Type.String()),
});

const releaseTestEffect: SingleStepOperation<null, { ok: boolean }> = {
  name: 'releaseTestEffect',
  input: Type.Null(),
  idempotency: { key: 'required', rule: 'release' },
  run: async () => ({ ok: true }),
};

async function effectRoute(app: FastifyInstance) {
  await app.gateway.db.query('CREATE TABLE IF NOT EXISTS test_effects (id SERIAL PRIMARY KEY, amount INTEGER NOT NULL)');
  // The caller named by X-Caller stands for an authenticated principal.
  app.addHook('preHandler', async (request) => {
    request.principal = { kind: 'human', id: String(request.headers['x-caller'] ?? 'anon'), scopes: [], credential: 'test' };
  });
  app.post('/v1/test/effects', {
    config: { operation: createTestEffect },
    schema: { body: Body, response: { 201: EffectAnswer } },
    handler: (request, reply) => serve(request, reply, createTestEffect, request.body as Static<typeof Body>, { status: 201 }),
  });
  // The same answer by reference to a shared schema, as most routes declare theirs.
  app.addSchema({ ...EffectAnswer, $id: 'TestEffectAnswer' });
  app.post('/v1/test/effects-shared', {
    config: { operation: createTestEffect },
    schema: { body: Body, response: { 201: Type.Ref('TestEffectAnswer') } },
    handler: (request, reply) => serve(request, reply, createTestEffect, request.body as Static<typeof Body>, { status: 201 }),
  });
  // An answer of one of two shapes: fast-json-stringify picks the branch whose `required` members the body has.
  app.post('/v1/test/effects-union', {
    config: { operation: createTestEffect },
    schema: { body: Body, response: { 201: Type.Union([Type.Object({ effectId: Type.Integer(), receipt: Type.String() }), EffectAnswer]) } },
    handler: (request, reply) => serve(request, reply, createTestEffect, request.body as Static<typeof Body>, { status: 201 }),
  });
  app.post('/v1/test/effects-release', {
    config: { operation: releaseTestEffect },
    handler: (request, reply) => serve(request, reply, releaseTestEffect, null),
  });
}

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ features: [effectRoute] });
});
afterAll(() => gw.close());

async function call(key: string | undefined, body: unknown, caller = 'alice', path = '/v1/test/effects') {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-caller': caller };
  if (key !== undefined) headers['idempotency-key'] = key;
  const res = await fetch(`${gw.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

async function effectCount(): Promise<number> {
  const { rows } = await gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM test_effects');
  return Number(rows[0]!.n);
}

describe('the request fingerprint', () => {
  it("reads an amount (a member named …Uc) as the number it is: leading zeros make no other request (found from outside: a retry writing one was refused idempotency_key_reused)", () => {
    expect(fingerprint('refund', { id: 'hold_1', amountUc: '0100000' })).toBe(fingerprint('refund', { amountUc: '100000', id: 'hold_1' }));
    expect(fingerprint('setMandate', { budgets: [{ id: 'b', limitUc: '0005000000' }] })).toBe(fingerprint('setMandate', { budgets: [{ id: 'b', limitUc: '5000000' }] }));
    expect(fingerprint('refund', { amountUc: '000' })).toBe(fingerprint('refund', { amountUc: '0' }));
    // Another amount, or a member that is not an amount, is another request.
    expect(fingerprint('refund', { amountUc: '100000' })).not.toBe(fingerprint('refund', { amountUc: '1000000' }));
    expect(fingerprint('createOffer', { name: '007' })).not.toBe(fingerprint('createOffer', { name: '7' }));
  });
});

describe('idempotency', () => {
  it('replays the stored response for the same key and payload, with no second effect', async () => {
    const before = await effectCount();
    const first = await call('key-replay-1', { amount: 5 });
    const second = await call('key-replay-1', { amount: 5 });
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.body).toEqual(first.body);
    // Member for member in the same order, as the first answer's serializer wrote them, and the same type.
    expect(Object.keys(second.body)).toEqual(Object.keys(first.body));
    expect(second.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(first.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await effectCount()).toBe(before + 1);
  });

  it('treats member order as the same payload', async () => {
    const first = await call('key-order', { amount: 6, delayMs: 1 });
    const second = await call('key-order', { delayMs: 1, amount: 6 });
    expect(second.body).toEqual(first.body);
  });

  it('answers a changed payload under a used key with 409 idempotency_key_reused', async () => {
    await call('key-changed', { amount: 7 });
    const changed = await call('key-changed', { amount: 8 });
    expect(changed.status).toBe(409);
    expect(changed.body.code).toBe('idempotency_key_reused');
    // It names the key as every face takes it, an MCP tool's argument too (found from outside: the header alone).
    expect(changed.body.detail).toBe(`this idempotency key was first used with a different request; use ${NEW_KEY} for a new request`);
  });

  it('scopes keys to the caller: another caller with the same key gets its own effect', async () => {
    const a = await call('key-shared', { amount: 9 }, 'alice');
    const b = await call('key-shared', { amount: 9 }, 'bob');
    expect(b.body.effectId).not.toBe(a.body.effectId);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
  });

  it('answers a retry while the first is running with 409 idempotency_key_in_use and Retry-After', async () => {
    // The first request holds the key (claimed, lease running) and has not stored its response yet.
    const first = await call('key-inflight', { amount: 10 });
    await gw.gateway.db.query(
      "UPDATE idempotency_keys SET state = 'running', locked_until_ms = $1 WHERE key = 'key-inflight'",
      [Date.now() + 30_000],
    );
    const retry = await call('key-inflight', { amount: 10 });
    expect(first.status).toBe(201);
    expect(retry.status).toBe(409);
    expect(retry.body.code).toBe('idempotency_key_in_use');
    expect(Number(retry.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Another request too: a running claim may yet be given back (a refusal that leaves the key free), so it is not
    // said to be the key's first request (found from outside: the approved request under a key was told to use a new
    // key while a mistaken one under it ran, and gave the approval up).
    const other = await call('key-inflight', { amount: 12 });
    expect([other.status, other.body.code]).toEqual([409, 'idempotency_key_in_use']);
    await gw.gateway.db.query("UPDATE idempotency_keys SET state = 'done' WHERE key = 'key-inflight'");
    expect((await call('key-inflight', { amount: 12 })).body.code).toBe('idempotency_key_reused');
  });

  it('lets concurrent requests with one key produce exactly one effect', async () => {
    const before = await effectCount();
    const results = await Promise.all(Array.from({ length: 8 }, () => call('key-race', { amount: 11, delayMs: 50 })));
    const original = results.filter((r) => r.status === 201 && r.headers.get('idempotent-replayed') === null);
    expect(original).toHaveLength(1);
    for (const other of results.filter((r) => r !== original[0])) {
      // Either it saw the first one running (409 in use) or finished (a replay of the same body).
      if (other.status === 409) expect(other.body.code).toBe('idempotency_key_in_use');
      else expect(other.body).toEqual(original[0]!.body);
    }
    expect(await effectCount()).toBe(before + 1);
    const after = await call('key-race', { amount: 11, delayMs: 50 });
    expect(after.body).toEqual(original[0]!.body);
  });

  it('stores and replays business failures (4xx) without a second attempt', async () => {
    const before = await effectCount();
    const first = await call('key-fail', { amount: 0 });
    const second = await call('key-fail', { amount: 0 });
    expect(first.status).toBe(409);
    expect(first.body.code).toBe('conflict');
    expect(second.status).toBe(409);
    expect(second.body).toEqual(first.body);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await effectCount()).toBe(before); // the failed transaction left no effect
  });

  it('does not store server failures (5xx): the same key may be retried', async () => {
    const first = await call('key-5xx', { amount: -1 });
    expect(first.status).toBe(500);
    const retry = await call('key-5xx', { amount: -1 });
    expect(retry.status).toBe(500);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
  });

  it('omits secrets from replays, whose notice then says the secret was shown once instead of asking to store it', async () => {
    const first = await call('key-secret', { amount: 12, secret: true });
    const second = await call('key-secret', { amount: 12, secret: true });
    expect([first.body.secret, first.body.notice]).toEqual(['shown-once', 'Store the secret now.']);
    expect(second.body.secret).toBeUndefined();
    expect(second.body.notice).toBe('The secret was shown once, in the first answer.');
    // An answer that held no secret replays its own notice.
    await call('key-no-secret', { amount: 14, secret: false });
    expect((await call('key-no-secret', { amount: 14, secret: false })).body.notice).toBe('Nothing to store.');
    expect(second.body.effectId).toBe(first.body.effectId);
    const { rows } = await gw.gateway.db.query<{ response_body: string }>("SELECT response_body FROM idempotency_keys WHERE key = 'key-secret'");
    expect(rows[0]!.response_body).not.toContain('shown-once');
  });

  it('replays an answer stored before the response gained a required member (a deploy between the tries), as stored and still filtered by the schema', async () => {
    for (const path of ['/v1/test/effects', '/v1/test/effects-shared']) {
      const key = `key-older-shape${path.length}`;
      const first = await call(key, { amount: 13 }, 'alice', path);
      expect(first.status).toBe(201);
      // An earlier release's answer had no `amount`, which the response now requires; `internal` is a member the
      // schema never sends.
      await gw.gateway.db.query('UPDATE idempotency_keys SET response_body = $1 WHERE key = $2', [JSON.stringify({ effectId: first.body.effectId, label: 'effect', internal: 'x' }), key]);
      const replay = await call(key, { amount: 13 }, 'alice', path);
      expect([path, replay.status, replay.headers.get('idempotent-replayed'), replay.body]).toEqual([path, 201, 'true', { effectId: first.body.effectId, label: 'effect' }]);
    }
  });

  it('replays an answer of a union response in the branch it was first sent in', async () => {
    const first = await call('key-union', { amount: 16 }, 'alice', '/v1/test/effects-union');
    const replay = await call('key-union', { amount: 16 }, 'alice', '/v1/test/effects-union');
    expect(first.body).toEqual({ effectId: first.body.effectId, label: 'effect', amount: 16 });
    expect([replay.status, replay.headers.get('idempotent-replayed'), JSON.stringify(replay.body)]).toEqual([201, 'true', JSON.stringify(first.body)]);
  });

  it('requires the key: missing → 400 idempotency_required, malformed → 400 invalid_input', async () => {
    const missing = await call(undefined, { amount: 1 });
    expect(missing.status).toBe(400);
    expect(missing.body.code).toBe('idempotency_required');
    for (const bad of ['has space', 'x'.repeat(201), 'semi;colon', '']) {
      const res = await call(bad, { amount: 1 });
      expect(res.status, bad).toBe(400);
      expect(res.body.code).toBe('invalid_input');
    }
  });

  it('accepts the RFC 8941 quoted form of the key as the same key', async () => {
    const bare = await call('key-quoted', { amount: 13 });
    const quoted = await call('"key-quoted"', { amount: 13 });
    expect(quoted.headers.get('idempotent-replayed')).toBe('true');
    expect(quoted.body).toEqual(bare.body);
  });

  it('applies the release rule: 1 to 255 characters', async () => {
    const post = (key: string) =>
      fetch(`${gw.url}/v1/test/effects-release`, { method: 'POST', headers: { 'idempotency-key': key } });
    expect((await post('k'.repeat(255))).status).toBe(200);
    expect((await post('k'.repeat(256))).status).toBe(400);
    expect((await post('with;semicolons=and+plus')).status).toBe(200);
    // Spaces inside a key too (found from outside: refused, though the spec says "1 to 255 chars"); the same key again
    // is the same request.
    const spaced = await post('release order 42');
    expect(spaced.status).toBe(200);
    expect((await post('release order 42')).headers.get('idempotent-replayed')).toBe('true');
    // Not a control character, nor a byte past ASCII (a header carries them only as opaque bytes).
    const refused = await post('tab\there');
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { detail: string }).detail).toBe('Idempotency-Key must be 1 to 255 printable ASCII characters (spaces inside the key too)');
  });

  it('takes over a key whose first request died before finishing (lease over)', async () => {
    await gw.gateway.db.query(
      `INSERT INTO idempotency_keys (scope, route, key, fingerprint, state, claim_token, created_at_ms, locked_until_ms, expires_at_ms)
       SELECT 'owner:alice', 'createTestEffect', 'key-dead', fingerprint, 'running', 'dead', 0, 0, $1
         FROM (SELECT 'x' AS fingerprint) f`,
      [Date.now() + 86_400_000],
    );
    // Same key but the stored fingerprint differs from any real request: refused, never taken over.
    expect((await call('key-dead', { amount: 14 })).body.code).toBe('idempotency_key_reused');
    await gw.gateway.db.query("DELETE FROM idempotency_keys WHERE key = 'key-dead'");
    const first = await call('key-dead2', { amount: 15, delayMs: 1 });
    await gw.gateway.db.query("UPDATE idempotency_keys SET state = 'running', locked_until_ms = 0 WHERE key = 'key-dead2'");
    const retried = await call('key-dead2', { amount: 15, delayMs: 1 });
    expect(retried.status).toBe(201);
    expect(retried.body.effectId).not.toBe(first.body.effectId);
  });

  it('forgets records after their retention', async () => {
    await call('key-expiring', { amount: 16 });
    gw.clock.advance(86_400_000 + 1000);
    try {
      expect(await gw.gateway.idempotency.sweep()).toBeGreaterThan(0);
      const again = await call('key-expiring', { amount: 17 });
      expect(again.status).toBe(201);
    } finally {
      gw.clock.advance(-(86_400_000 + 1000));
    }
  });
});
