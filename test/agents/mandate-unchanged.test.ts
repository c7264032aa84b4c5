// A PUT of the mandate in force is an idempotent update, as Stripe's is: when the rules it states, normalised and
// with their defaults filled in, have the canonical JSON of the version in force, nothing is written (no version,
// no event) and the answer is that version as it stands (same version, hash and createdAt; ETag the same). Its
// checks are those of any PUT, in the same order: If-Match first (a stale tag is 412 even for the same rules),
// then the rules, then a delegate's parent.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';
import { connect, toolBody } from '../mcp/helpers.ts';

let world: World;
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
});
afterAll(() => world?.close());

type Agent = { id: string; ownerToken: string };

const put = (agent: Agent, body: unknown, headers: Record<string, string> = {}, key = `unchanged-${++counter}`) =>
  world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key, body, headers });
const versions = async (agent: Agent) =>
  (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions?limit=100`, { token: agent.ownerToken })).body.versions.map((v: { version: number }) => v.version);
const eventCount = async () => Number((await world.gw.gateway.db.query<{ n: string }>('SELECT count(*) AS n FROM events')).rows[0]!.n);

const RULES = {
  allowedCategories: ['books'],
  budgets: [{ id: 'daily', limitUc: '2000000', period: 'day' }],
  merchants: { allow: null, deny: ['spam.example.com'] },
  approvalAboveUc: '5000000',
  timeZone: 'Europe/Paris',
};

describe('a PUT of the mandate in force', () => {
  it('writes no version and answers the version in force as it stands, with its ETag', async () => {
    const agent = await world.createAgent(`unchanged-${++counter}@example.com`, `unchanged-${counter}`);
    const written = await put(agent, RULES);
    expect([written.status, written.body.version], JSON.stringify(written.body)).toEqual([200, 2]);
    const eventsBefore = await eventCount();

    const again = await put(agent, RULES);
    expect(again.status).toBe(200);
    expect(again.headers.get('etag')).toBe('"2"');
    expect(again.body).toEqual(written.body);
    expect(await versions(agent)).toEqual([2, 1]);
    expect(await eventCount()).toBe(eventsBefore);
  });

  it('compares the rules normalised, defaults filled in: the same mandate spelled otherwise is unchanged', async () => {
    const agent = await world.createAgent(`unchanged-${++counter}@example.com`, `unchanged-${counter}`);
    const written = await put(agent, RULES);
    expect(written.status).toBe(200);
    const spelledOtherwise = {
      ...RULES,
      allowedServices: ['*'],
      allowedCategories: ['books', 'books'],
      budgets: [{ id: 'daily', limitUc: '0002000000', period: 'day' }],
      merchants: { allow: null, deny: ['SPAM.example.com'] },
      approvalAboveUc: '05000000',
      timeZone: 'europe/paris',
      alertThresholds: [100, 80, 80],
      caps: { perHoldUc: null, perPeriodUc: null, periodS: 86_400 },
      notBefore: null,
      notAfter: null,
      delegation: { allowed: false, maxDepth: 0 },
    };
    const same = await put(agent, spelledOtherwise);
    expect([same.status, same.body.version, same.body.hash, same.body.createdAt]).toEqual([200, written.body.version, written.body.hash, written.body.createdAt]);
    // What GET shows, PUT back unchanged, is unchanged too.
    const { agentId, version, createdAt, hash, usage, ...shown } = (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken })).body;
    expect((await put(agent, shown)).body.version).toBe(written.body.version);
    expect(await versions(agent)).toEqual([2, 1]);
    // Any change, however small, is a new version; the order of a list is part of the mandate.
    expect((await put(agent, { ...RULES, approvalAboveUc: '5000001' })).body.version).toBe(3);
    expect((await put(agent, { ...RULES, allowedCategories: ['books', 'music'] })).body.version).toBe(4);
    expect((await put(agent, { ...RULES, allowedCategories: ['music', 'books'] })).body.version).toBe(5);
  });

  it('takes a retry under the same key that spells the same mandate otherwise as the same request: its answer replayed, not 409 (found from outside: europe/paris then Europe/Paris)', async () => {
    const agent = await world.createAgent(`unchanged-${++counter}@example.com`, `unchanged-${counter}`);
    const key = `unchanged-retry-${++counter}`;
    const first = await put(agent, { ...RULES, timeZone: 'europe/paris' }, {}, key);
    expect([first.status, first.body.version, first.body.timeZone]).toEqual([200, 2, 'Europe/Paris']);
    const retried = await put(agent, { ...RULES, allowedCategories: ['books', 'books'], approvalAboveUc: '05000000', budgets: [{ id: 'daily', limitUc: '02000000', period: 'day' }], merchants: { allow: null, deny: ['SPAM.example.com'] } }, {}, key);
    expect([retried.status, retried.headers.get('idempotent-replayed'), retried.body]).toEqual([200, 'true', first.body]);
    // Another mandate under the key is still another request.
    const other = await put(agent, { ...RULES, timeZone: 'Europe/Berlin' }, {}, key);
    expect([other.status, other.body.code]).toEqual([409, 'idempotency_key_reused']);
    // A mandate the gateway refuses is read as sent: the same refusal replayed, another spelling of it another request.
    const refusedKey = `unchanged-refused-${++counter}`;
    expect((await put(agent, { ...RULES, timeZone: 'Mars/Olympus' }, {}, refusedKey)).status).toBe(400);
    expect((await put(agent, { ...RULES, timeZone: 'Mars/Olympus' }, {}, refusedKey)).headers.get('idempotent-replayed')).toBe('true');
    expect((await put(agent, { ...RULES, timeZone: 'mars/olympus' }, {}, refusedKey)).status).toBe(409);
    expect(await versions(agent)).toEqual([2, 1]);
  });

  it('keeps If-Match: the version in force or * answers it unchanged; a stale version is 412 even for the same rules', async () => {
    const agent = await world.createAgent(`unchanged-${++counter}@example.com`, `unchanged-${counter}`);
    expect((await put(agent, RULES)).body.version).toBe(2);
    for (const ifMatch of ['"2"', '*']) {
      const same = await put(agent, RULES, { 'if-match': ifMatch });
      expect([ifMatch, same.status, same.body.version, same.headers.get('etag')]).toEqual([ifMatch, 200, 2, '"2"']);
    }
    const stale = await put(agent, RULES, { 'if-match': '"1"' });
    expect(stale.status).toBe(412);
    expect(stale.body).toMatchObject({ code: 'precondition_failed', currentVersion: 2 });
    // The unchanged answer is the key's stored answer like any other: a retry replays it, another body is a reuse.
    const first = await put(agent, RULES, { 'if-match': '"2"' }, 'unchanged-replayed');
    const replay = await put(agent, RULES, { 'if-match': '"2"' }, 'unchanged-replayed');
    expect([replay.status, replay.headers.get('idempotent-replayed'), replay.body]).toEqual([200, 'true', first.body]);
    expect((await put(agent, { ...RULES, timeZone: 'UTC' }, { 'if-match': '"2"' }, 'unchanged-replayed')).body.code).toBe('idempotency_key_reused');
    expect(await versions(agent)).toEqual([2, 1]);
  });

  it("is checked as any PUT: a delegate's mandate in force, now wider than its narrowed parent's, is refused, not answered", async () => {
    const email = `unchanged-${++counter}@example.com`;
    const root = await world.createAgent(email, `unchanged-${counter}`);
    const daily = (limitUc: string) => ({ budgets: [{ id: 'daily', limitUc, period: 'day' }], delegation: { allowed: true, maxDepth: 1 } });
    expect((await put(root, daily('10000000'))).status).toBe(200);
    const subject = `unchanged-child-${counter}`;
    const created = await world.api('POST', `/v1/agents/${root.id}/delegates`, {
      token: root.ownerToken,
      key: `unchanged-child-${counter}`,
      body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const child = { id: created.body.id as string, ownerToken: root.ownerToken };
    const { agentId, version, createdAt, hash, usage, ...shown } = (await world.api('GET', `/v1/owner/agents/${child.id}/mandate`, { token: root.ownerToken })).body;
    expect((await put(child, shown)).body.version).toBe(1);
    expect((await put(root, daily('5000000'))).status).toBe(200);
    const refused = await put(child, shown);
    expect([refused.status, refused.body.reason]).toEqual([400, 'budget_wider_than_parent']);
    expect(await versions(child)).toEqual([1]);
  });

  it("MCP's set_mandate, the same operation, answers the version in force unchanged", async () => {
    const email = `unchanged-${++counter}@example.com`;
    const agent = await world.createAgent(email, `unchanged-${counter}`);
    const client = await connect(world.url, agent.ownerToken, 'modern');
    try {
      const call = async (key: string) => toolBody(await client.callTool({ name: 'set_mandate', arguments: { id: agent.id, idempotencyKey: key, ...RULES } }));
      const first = await call(`mcp-unchanged-${counter}-a`);
      const second = await call(`mcp-unchanged-${counter}-b`);
      expect(first).toMatchObject({ version: 2 });
      expect(second).toEqual(first);
    } finally {
      await client.close();
    }
    expect(await versions(agent)).toEqual([2, 1]);
  });
});
