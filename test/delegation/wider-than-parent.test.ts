// A delegate's mandate wider than its parent's is refused 400 invalid_input naming the rule (`reason`) and, as
// members a client reads without parsing the detail, where: `pointer`, the delegate's member that is wider (RFC 6901,
// into its mandate's rules), and `parent`, the parent's member it was held to (`agentId`, `pointer` into the
// parent's mandate, `value` as GET …/mandate shows it, amounts as decimal strings). The same members on every face
// that asks the rule: creation, the delegate's PUT …/mandate and PATCH, and MCP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, toolBody } from '../mcp/helpers.ts';

let world: World;
let shops: Shop[];
let counter = 0;

beforeAll(async () => {
  world = await startWorld();
  shops = [await openShop(world), await openShop(world), await openShop(world)];
});
afterAll(() => world?.close());

const PARENT = () => ({
  allowedServices: ['github-public'],
  allowedCategories: ['books'],
  budgets: [
    { id: 'ever', limitUc: '50000000', period: 'total' },
    { id: 'daily', limitUc: '10000000', period: 'day' },
  ],
  caps: { perHoldUc: '5000000', perPeriodUc: '20000000', periodS: 86_400 },
  approvalAboveUc: '2000000',
  merchants: { allow: [shops[0]!.merchantId, shops[1]!.merchantId], deny: ['spam.example.com'] },
  notBefore: 1_000,
  notAfter: 4_000_000_000,
  timeZone: 'Asia/Kolkata',
  delegation: { allowed: true, maxDepth: 2 },
});

interface Root {
  id: string;
  token: string;
  ownerToken: string;
  ownerEmail: string;
  mandate: Record<string, unknown>;
}

async function rootAgent(): Promise<Root> {
  const ownerEmail = `wider-${++counter}@example.com`;
  const agent = await world.createAgent(ownerEmail, `wider-root-${counter}`);
  const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: `wider-root-${counter}`, body: PARENT() });
  expect(put.status, JSON.stringify(put.body)).toBe(200);
  return { ...agent, ownerEmail, mandate: put.body };
}

const createDelegate = (root: Root, mandate?: Record<string, unknown>) => {
  const subject = `wider-child-${++counter}`;
  return world.api('POST', `/v1/agents/${root.id}/delegates`, {
    token: root.token,
    key: `wider-child-${counter}`,
    body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, ...(mandate ? { mandate } : {}) },
  });
};

/** The member of `document` a JSON pointer names (RFC 6901). */
function at(document: unknown, pointer: string): unknown {
  return pointer
    .split('/')
    .slice(1)
    .map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce<unknown>((node, token) => (node as Record<string, unknown> | undefined)?.[token], document);
}

describe("a delegate's mandate wider than its parent's", () => {
  it('is refused naming the wider member of the delegate (pointer) and the parent\'s member it is held to (parent), for every rule', async () => {
    const root = await rootAgent();
    const { caps } = PARENT();
    const cases: Array<[Record<string, unknown>, string, string, string, unknown]> = [
      // [the delegate's mandate, reason, pointer, parent.pointer, parent.value (undefined: as the parent's mandate shows it)]
      [{ budgets: [PARENT().budgets[0], { id: 'mine', limitUc: '11000000', period: 'day' }] }, 'budget_wider_than_parent', '/budgets/1/limitUc', '/budgets/1', { id: 'daily', limitUc: '10000000', period: 'day' }],
      [{ budgets: [PARENT().budgets[0], { id: 'week', limitUc: '1', period: 'week' }] }, 'budget_wider_than_parent', '/budgets', '/budgets/1', { id: 'daily', limitUc: '10000000', period: 'day' }],
      [{ budgets: [] }, 'budget_wider_than_parent', '/budgets', '/budgets/0', { id: 'ever', limitUc: '50000000', period: 'total' }],
      [{ timeZone: 'UTC' }, 'budget_wider_than_parent', '/timeZone', '/timeZone', 'Asia/Kolkata'],
      [{ caps: { ...caps, perHoldUc: null } }, 'cap_wider_than_parent', '/caps/perHoldUc', '/caps/perHoldUc', '5000000'],
      [{ caps: { ...caps, perPeriodUc: '20000001' } }, 'cap_wider_than_parent', '/caps/perPeriodUc', '/caps/perPeriodUc', '20000000'],
      [{ caps: { ...caps, perPeriodUc: '1000000', periodS: 3_600 } }, 'cap_wider_than_parent', '/caps/periodS', '/caps/periodS', 86_400],
      [{ approvalAboveUc: null }, 'approval_wider_than_parent', '/approvalAboveUc', '/approvalAboveUc', '2000000'],
      [{ merchants: { allow: [shops[0]!.merchantId, shops[2]!.merchantId], deny: ['spam.example.com'] } }, 'merchant_outside_parent', '/merchants/allow/1', '/merchants/allow', undefined],
      [{ merchants: { allow: null, deny: ['spam.example.com'] } }, 'merchant_outside_parent', '/merchants/allow', '/merchants/allow', undefined],
      [{ merchants: { allow: [shops[1]!.merchantId], deny: [] } }, 'merchant_outside_parent', '/merchants/deny', '/merchants/deny/0', 'spam.example.com'],
      [{ notBefore: 999 }, 'window_outside_parent', '/notBefore', '/notBefore', 1_000],
      [{ notAfter: null }, 'window_outside_parent', '/notAfter', '/notAfter', 4_000_000_000],
      [{ allowedServices: ['github-public', 'mail'] }, 'allowance_outside_parent', '/allowedServices/1', '/allowedServices', ['github-public']],
      [{ allowedCategories: ['*'] }, 'allowance_outside_parent', '/allowedCategories/0', '/allowedCategories', ['books']],
      [{ delegation: { allowed: true, maxDepth: 2 } }, 'depth_exceeded', '/delegation/maxDepth', '/delegation/maxDepth', 2],
    ];
    for (const [mandate, reason, pointer, parentPointer, parentValue] of cases) {
      const label = JSON.stringify(mandate);
      const res = await createDelegate(root, mandate);
      expect(res.status, label).toBe(400);
      expect(res.body, label).toMatchObject({ code: 'invalid_input', reason, pointer, parent: { agentId: root.id, pointer: parentPointer } });
      if (parentValue !== undefined) expect(res.body.parent.value, label).toEqual(parentValue);
      // The parent's value is its mandate's, as GET …/mandate shows it (merchant ids in their stored form).
      expect(res.body.parent.value, label).toEqual(at(root.mandate, parentPointer));
      expect(Object.keys(res.body.parent).sort(), label).toEqual(['agentId', 'pointer', 'value']);
    }
  });

  it('lists every way it is wider in `wider`, the first of them as the problem\'s own members (found from outside: one rule a refusal, so an owner fixed a delegate narrowed in three rules in three round trips)', async () => {
    const root = await rootAgent();
    const { caps } = PARENT();
    const res = await createDelegate(root, { caps: { perHoldUc: '5000001', perPeriodUc: caps.perPeriodUc, periodS: 3_600 }, allowedCategories: ['books', 'music'], notAfter: null });
    expect(res.status).toBe(400);
    expect(res.body.detail).toBe("the mandate is wider than its parent's: caps.perHoldUc must be at most the parent's, 5000000 µc (null, no cap, is wider) (and in 3 more way(s): see wider)");
    expect(res.body).toMatchObject({ reason: 'cap_wider_than_parent', pointer: '/caps/perHoldUc' });
    expect(res.body.wider.map((way: { reason: string; pointer: string }) => [way.reason, way.pointer])).toEqual([
      ['cap_wider_than_parent', '/caps/perHoldUc'],
      ['cap_wider_than_parent', '/caps/periodS'],
      ['window_outside_parent', '/notAfter'],
      ['allowance_outside_parent', '/allowedCategories/1'],
    ]);
    for (const way of res.body.wider) {
      expect(Object.keys(way).sort()).toEqual(['detail', 'parent', 'pointer', 'reason']);
      expect(way.parent.agentId).toBe(root.id);
      expect(way.parent.value).toEqual(at(root.mandate, way.parent.pointer));
    }
    const one = await createDelegate(root, { notBefore: 999 });
    expect([one.body.detail, one.body.wider.length]).toEqual(["the mandate is wider than its parent's: notBefore must be at or after the parent's, 1000", 1]);
  });

  it("carries the same members at the delegate's PUT …/mandate and PATCH, and over MCP", async () => {
    const root = await rootAgent();
    const created = await createDelegate(root);
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const childId = created.body.id as string;
    const put = await world.api('PUT', `/v1/owner/agents/${childId}/mandate`, {
      token: root.ownerToken,
      key: `wider-put-${++counter}`,
      body: { ...PARENT(), delegation: { allowed: false, maxDepth: 0 }, budgets: [{ id: 'daily', limitUc: '10000000', period: 'day' }, { id: 'ever', limitUc: '60000000', period: 'total' }] },
    });
    expect(put.status).toBe(400);
    expect(put.body).toEqual(
      expect.objectContaining({
        code: 'invalid_input',
        reason: 'budget_wider_than_parent',
        pointer: '/budgets/1/limitUc',
        parent: { agentId: root.id, pointer: '/budgets/0', value: { id: 'ever', limitUc: '50000000', period: 'total' } },
      }),
    );
    const patched = await world.api('PATCH', `/v1/owner/agents/${childId}`, { token: root.ownerToken, body: { caps: { perHoldUc: '5000001' } } });
    expect(patched.status).toBe(400);
    expect(patched.body).toMatchObject({ reason: 'cap_wider_than_parent', pointer: '/caps/perHoldUc', parent: { agentId: root.id, pointer: '/caps/perHoldUc', value: '5000000' } });

    const client = await connect(world.url, await world.accessToken({ sub: root.id, scope: 'svc:agent' }, `${world.url}/mcp`), 'modern');
    try {
      const subject = `wider-mcp-${++counter}`;
      const refused = toolBody(
        await client.callTool({
          name: 'create_delegate',
          arguments: { id: root.id, idempotencyKey: `wider-mcp-${counter}`, name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, mandate: { approvalAboveUc: '2000001' } },
        }),
      );
      expect(refused).toMatchObject({ code: 'invalid_input', reason: 'approval_wider_than_parent', pointer: '/approvalAboveUc', parent: { agentId: root.id, pointer: '/approvalAboveUc', value: '2000000' } });
    } finally {
      await client.close();
    }
  });

  it('is documented: the 400 of each route that asks the rule names reason, pointer and parent', async () => {
    const document = (await world.api('GET', '/openapi.json')).body;
    const problem = document.components.schemas.MandateProblem;
    expect(Object.keys(problem.properties)).toEqual(expect.arrayContaining(['code', 'detail', 'reason', 'pointer', 'parent']));
    expect(Object.keys(problem.properties.parent.properties)).toEqual(['agentId', 'pointer', 'value']);
    for (const [path, method] of [['/v1/agents/{id}/delegates', 'post'], ['/v1/owner/agents/{id}/mandate', 'put'], ['/v1/owner/agents/{id}', 'patch']] as const) {
      expect(JSON.stringify(document.paths[path][method].responses['400']), `${method} ${path}`).toContain('#/components/schemas/MandateProblem');
    }
  });
});
