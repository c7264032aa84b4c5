// Existing clients: PATCH /v1/owner/agents/{id} with today's `caps`, `allowedServices` and `allowedCategories`
// works as it did before mandates (the rule it had is written out below, as the reference) and reads back the
// same on every read, now as a view of the mandate: each PATCH that names a policy member writes one mandate
// version with those members changed and every other rule (budgets, merchants, …) as it was; one that names
// none, or is refused, writes none.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;

beforeAll(async () => {
  world = await startWorld();
  shop = await openShop(world);
});
afterAll(() => world.close());

interface Legacy {
  allowedServices: string[];
  allowedCategories: string[];
  inboxAllowlist: string[];
  caps: { perHoldUc: string | null; perPeriodUc: string | null; periodS: number };
}

type Patch = { name?: string; allowedServices?: string[]; allowedCategories?: string[]; inboxAllowlist?: string[]; caps?: { perHoldUc?: string | null; perPeriodUc?: string | null; periodS?: number } };

/** PATCH as it was before mandates: a member given replaces the field (lists without repeats), a cap given replaces that cap, null removes it. */
function legacyPatch(before: Legacy, patch: Patch): Legacy {
  const unique = (values: string[]) => [...new Set(values)];
  const caps = patch.caps ?? {};
  return {
    allowedServices: patch.allowedServices ? unique(patch.allowedServices) : before.allowedServices,
    allowedCategories: patch.allowedCategories ? unique(patch.allowedCategories) : before.allowedCategories,
    inboxAllowlist: patch.inboxAllowlist ? unique(patch.inboxAllowlist) : before.inboxAllowlist,
    caps: {
      perHoldUc: caps.perHoldUc === undefined ? before.caps.perHoldUc : caps.perHoldUc,
      perPeriodUc: caps.perPeriodUc === undefined ? before.caps.perPeriodUc : caps.perPeriodUc,
      periodS: caps.periodS ?? before.caps.periodS,
    },
  };
}

const legacyOf = (agent: Record<string, any>): Legacy => ({ allowedServices: agent.allowedServices, allowedCategories: agent.allowedCategories, inboxAllowlist: agent.inboxAllowlist, caps: agent.caps });
const POLICY_MEMBERS = ['allowedServices', 'allowedCategories', 'caps'] as const;
/** The rules a version holds besides the legacy ones: PATCH never touches them. */
const OTHER_RULES = ['budgets', 'merchants', 'approvalAboveUc', 'notBefore', 'notAfter', 'timeZone', 'alertThresholds'] as const;
const pick = (from: object, names: readonly string[]) => Object.fromEntries(names.map((name) => [name, (from as Record<string, unknown>)[name]]));

// Every PATCH body the tests before mandates sent (agents, fuzzing, execute, mail, the mandates test), and the
// corners of the rule: a cap removed with null, caps given one at a time, repeats in a list, "*", an empty caps.
const ACCEPTED: Patch[] = [
  { caps: { perHoldUc: '5000000' } },
  { caps: { perPeriodUc: '9000000', periodS: 3600 }, allowedServices: ['github-public'] },
  { allowedServices: ['mail'], inboxAllowlist: ['INBOX', 'Receipts'], caps: { perPeriodUc: '9000000', periodS: 3600 } },
  { caps: { perHoldUc: '999999999999999999' } },
  { caps: { perHoldUc: null } },
  { inboxAllowlist: ['INBOX', 'Archive'] },
  { name: 'Renamed' },
  { allowedCategories: ['books', 'books', 'music'] },
  { caps: { periodS: 7200 } },
  { caps: { perPeriodUc: null } },
  { allowedServices: ['*'], allowedCategories: ['*'] },
  { caps: {} },
  { name: 'Both', allowedCategories: ['books'], caps: { perHoldUc: '500000', perPeriodUc: '3000000' } },
  { allowedCategories: ['books'], caps: { perHoldUc: '500000' } },
];
const REFUSED: unknown[] = [
  { caps: { perHoldUc: '1000000000000000000' } },
  { caps: { perPeriodUc: '1000000000000000000' } },
  { caps: { perHoldUc: '1.5' } },
  { caps: { perHoldUc: 10 } },
  { caps: { periodS: 59 } },
  { allowedServices: ['teleport'] },
  { name: 'a\uD800b' },
  { budgets: [] },
  {},
];

describe("PATCH's caps and allowed lists, as a view of the mandate", () => {
  it('read back as they did before mandates, on every read, and each policy PATCH writes one version keeping the other rules', async () => {
    const agent = await world.createAgent('patch-compat@example.com', 'patch-compat', { allowedCategories: ['books'], caps: { perHoldUc: '3000000' } });
    const token = agent.ownerToken;
    const rules = {
      allowedCategories: ['books'],
      caps: { perHoldUc: '3000000', perPeriodUc: null, periodS: 86_400 },
      budgets: [{ id: 'daily', limitUc: '20000000', period: 'day' }, { id: 'shop', limitUc: '9000000', period: 'total', merchantId: shop.merchantId }],
      merchants: { allow: null, deny: ['spam.example.com'] },
      approvalAboveUc: '50000000',
      notBefore: 1_000,
      timeZone: 'Asia/Kolkata',
      alertThresholds: [50, 100],
    };
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token, key: 'patch-compat-rules', body: rules })).status).toBe(200);
    const mandate = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate`, { token })).body;
    const versions = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions?limit=100`, { token })).body.versions as Array<{ version: number; canonical: string }>;
    const first = await mandate();
    let expected = legacyOf((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token })).body);
    let version: number = first.version;

    for (const patch of ACCEPTED) {
      const label = JSON.stringify(patch);
      const patched = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token, body: patch });
      expect(patched.status, label).toBe(200);
      const before = expected;
      expected = legacyPatch(expected, patch);
      // The answer, the agent read, the agents list and the mandate all say what the old rule says.
      expect(legacyOf(patched.body), label).toEqual(expected);
      expect(legacyOf((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token })).body), label).toEqual(expected);
      const listed = (await world.api('GET', '/v1/owner/agents?limit=100', { token })).body.agents.find((a: { id: string }) => a.id === agent.id);
      expect(legacyOf(listed), label).toEqual(expected);
      const now = await mandate();
      expect(pick(now, POLICY_MEMBERS), label).toEqual(pick(expected, POLICY_MEMBERS));
      expect(pick(now, OTHER_RULES), label).toEqual(pick(first, OTHER_RULES));
      // One version exactly when a policy member is named with another value than it had (naming the rules in
      // force, `caps: {}` included, writes none, as a PUT of them); its canonical document is what GET shows.
      const changed = JSON.stringify(pick(expected, POLICY_MEMBERS)) !== JSON.stringify(pick(before, POLICY_MEMBERS));
      version += changed ? 1 : 0;
      expect(now.version, label).toBe(version);
      const kept = (await versions())[0]!;
      expect(kept.version, label).toBe(version);
      const { hash, usage, ...shown } = now;
      expect(JSON.parse(kept.canonical), label).toEqual(shown);
    }
    expect((await versions()).map((v) => v.version)).toEqual(Array.from({ length: version }, (_, i) => version - i));

    for (const body of REFUSED) {
      const refused = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token, body });
      expect(refused.status, JSON.stringify(body)).toBe(400);
      expect(refused.body.code).toBe('invalid_input');
    }
    const stranger = await world.humanToken('patch-stranger@example.com');
    expect((await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: stranger, body: { caps: { perHoldUc: '1' } } })).status).toBe(404);
    expect((await mandate()).version).toBe(version);
    expect(legacyOf((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token })).body)).toEqual(expected);

    // And they are enforced as before: the last PATCH capped each hold at 0.5 credits.
    await grant(world, agent.id, 10_000_000n);
    const refusedHold = await mint(world, agent.token, (await shop.offer({ priceUc: '1000000' })).id);
    expect(refusedHold.body).toMatchObject({ code: 'CAP_EXCEEDED', reason: 'per_hold_cap' });
  });
});
