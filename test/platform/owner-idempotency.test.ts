// An owner's Idempotency-Keys are the owner's, whichever credential sends them: a request first sent with the
// owner's session and retried with an OAuth token the owner granted (or the other way round) replays, and migration
// 0034 moves what was stored under a session's scope (`human:<owner id>`) into the owner's (`owner:<owner id>`).
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let session: string;
let oauth: string;
let ownerId: string;
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  session = await world.humanToken('one-owner@example.com');
  ownerId = (await world.api('GET', '/v1/me', { token: session })).body.owner.id;
  oauth = await world.accessToken({ sub: ownerId, scope: 'svc:owner', email: 'one-owner@example.com' });
});
afterAll(() => world.close());

const register = (token: string, key: string, subject: string) =>
  world.api('POST', '/v1/owner/agents', { token, key, body: { name: 'Scout', identity: { issuer: world.agentIssuer.issuer, subject } } });

describe("an owner's Idempotency-Keys", () => {
  it('replay across the session and an OAuth token of the same owner, either way round', async () => {
    for (const [first, second] of [
      [session, oauth],
      [oauth, session],
    ] as const) {
      const key = `one-owner-${++counter}`;
      const made = await register(first, key, `one-owner-${counter}`);
      const retried = await register(second, key, `one-owner-${counter}`);
      expect([made.status, retried.status, retried.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true']);
      expect(retried.body).toEqual(made.body);
      const other = await register(second, key, `another-${counter}`);
      expect([other.status, other.body.code]).toEqual([409, 'idempotency_key_reused']);
    }
    const { rows } = await world.gw.gateway.db.query<{ n: bigint }>("SELECT count(*) AS n FROM agents WHERE owner_id = $1 AND name = 'Scout'", [ownerId]);
    expect(rows[0]!.n).toBe(2n);
  });

  it("moved with migration 0034: a session's records, intents and approvals land in the owner's scope, the newest record of a key kept", async () => {
    const db = world.gw.gateway.db;
    const agent = await world.createAgent('one-owner@example.com', `migrated-${++counter}`);
    const record = (scope: string, key: string, createdAtMs: number, body: string) =>
      db.query(
        `INSERT INTO idempotency_keys (scope, route, key, fingerprint, state, claim_token, status_code, response_body, response_headers, created_at_ms, locked_until_ms, expires_at_ms)
         VALUES ($1, 'registerAgent', $2, 'f', 'done', 't', 201, $3, '{}', $4, $4, $5)`,
        [scope, key, body, createdAtMs, createdAtMs + 86_400_000],
      );
    const intent = (id: string, requestedBy: string, key: string) =>
      db.query(
        `INSERT INTO service_intents (id, agent_id, service_id, action, input, price_uc, requested_by, idempotency_key, state, created_at_s, updated_at_s, expires_at_s)
         VALUES ($1, $2, 'github-public', 'repo', '{}', 1, $3, $4, 'pending', 1, 1, 2)`,
        [id, agent.id, requestedBy, key],
      );
    const [lone, newerOwner, newerSession, intentKey, sharedIntentKey] = ['lone', 'newer-owner', 'newer-session', 'intent', 'shared-intent'].map(
      (name) => `${name}-${++counter}`,
    ) as [string, string, string, string, string];
    await record(`human:${ownerId}`, lone, 1_000, '"lone"');
    await record(`human:${ownerId}`, newerOwner, 1_000, '"older session"');
    await record(`owner:${ownerId}`, newerOwner, 2_000, '"newer owner"');
    await record(`human:${ownerId}`, newerSession, 3_000, '"newer session"');
    await record(`owner:${ownerId}`, newerSession, 2_000, '"older owner"');
    await intent(`int_a${counter}`, `human:${ownerId}`, intentKey);
    await intent(`int_b${counter}`, `human:${ownerId}`, sharedIntentKey);
    await intent(`int_c${counter}`, `owner:${ownerId}`, sharedIntentKey);

    const migration = readFileSync(new URL('../../migrations/0034_owner_idempotency_scope.sql', import.meta.url), 'utf8');
    for (const statement of migration.split(';').map((text) => text.trim()).filter((text) => text.replace(/--.*$/gm, '').trim() !== '')) await db.query(statement);

    const records = await db.query<{ scope: string; key: string; response_body: string }>(
      'SELECT scope, key, response_body FROM idempotency_keys WHERE key = ANY($1::text[]) ORDER BY key',
      [[lone, newerOwner, newerSession]],
    );
    expect(records.rows).toEqual(
      expect.arrayContaining([
        { scope: `owner:${ownerId}`, key: lone, response_body: '"lone"' },
        { scope: `owner:${ownerId}`, key: newerOwner, response_body: '"newer owner"' },
        { scope: `owner:${ownerId}`, key: newerSession, response_body: '"newer session"' },
      ]),
    );
    expect(records.rows).toHaveLength(3);
    const intents = await db.query<{ id: string; requested_by: string }>('SELECT id, requested_by FROM service_intents WHERE agent_id = $1 ORDER BY id', [agent.id]);
    expect(intents.rows).toEqual([
      { id: `int_a${counter}`, requested_by: `owner:${ownerId}` },
      { id: `int_b${counter}`, requested_by: `human:${ownerId}` },
      { id: `int_c${counter}`, requested_by: `owner:${ownerId}` },
    ]);
  });
});
