// POST /v1/services/execute through the real pipeline against a local server that answers in GitHub's
// documented format: every path's ledger effect is read back from the database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant } from '../support/ledger-fixture.ts';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import {
  ONE_CREDIT_UC,
  availableUc,
  capturedFromAgent,
  execute,
  executionsOf,
  expectNothingCharged,
  holdsOf,
  intentsOf,
  newKey,
  revenueUc,
} from './helpers.ts';

let world: World;
let github: FakeGitHub;
let counter = 0;

beforeAll(async () => {
  github = await startFakeGitHub();
  world = await startWorld({ env: { ACG_GITHUB_API_URL: github.url, ACG_GITHUB_TIMEOUT_MS: '1000' } });
});
afterAll(async () => {
  await world?.close();
  await github?.close();
});

async function fundedAgent(amountUc = 5n * ONE_CREDIT_UC, settings: Record<string, unknown> = {}) {
  counter += 1;
  const agent = await world.createAgent(`gh${counter}@example.com`, `gh-agent-${counter}`, settings);
  if (amountUc > 0n) await grant(world, agent.id, amountUc);
  return agent;
}

const repo = (owner: string, name = 'hello-world') => ({ serviceId: 'github-public', action: 'repository.get', input: { owner, repo: name } });

describe('github-public through execute', () => {
  it('answers 200 with the repository and the captured receipt, and captures exactly one credit once', async () => {
    const agent = await fundedAgent();
    const revenueBefore = await revenueUc(world);
    const res = await execute(world, agent.token, repo('octocat', 'Hello-World'));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      state: 'succeeded',
      priceUc: '1000000',
      priceUsd: '0.01',
      paymentMethod: 'credits',
      result: {
        fullName: 'octocat/Hello-World',
        owner: 'octocat',
        defaultBranch: 'main',
        licenseSpdxId: 'MIT',
        stargazersCount: 80,
        createdAt: Date.parse('2011-01-26T19:01:12Z') / 1000,
      },
      receipt: {
        agentId: agent.id,
        acceptorId: 'gateway',
        offerId: 'github-public:repository.get',
        category: 'developer-tools',
        amountUc: '1000000',
        capturedUc: '1000000',
        state: 'captured',
      },
    });
    expect(res.body.executionId).toMatch(/^exe_/);
    const holds = await holdsOf(world, agent.id);
    expect(holds).toEqual([expect.objectContaining({ id: res.body.receipt.id, state: 'captured', amountUc: ONE_CREDIT_UC, capturedUc: ONE_CREDIT_UC })]);
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
    expect(await revenueUc(world)).toBe(revenueBefore + ONE_CREDIT_UC);
    expect(await availableUc(world, agent.id)).toBe(4n * ONE_CREDIT_UC);
    expect(await executionsOf(world, agent.id)).toEqual([expect.objectContaining({ id: res.body.executionId, state: 'succeeded', hold_id: res.body.receipt.id })]);
  });

  it('replays a retry with the same key: same result, Idempotent-Replayed, no second charge and no second call upstream', async () => {
    const agent = await fundedAgent();
    const key = newKey('replay');
    const first = await execute(world, agent.token, repo('replayer'), key);
    const callsAfterFirst = github.requests.length;
    const second = await execute(world, agent.token, repo('replayer'), key);
    expect(second.status).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body).toEqual(first.body);
    expect(github.requests.length).toBe(callsAfterFirst);
    expect(await holdsOf(world, agent.id)).toHaveLength(1);
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
    const changed = await execute(world, agent.token, repo('someone-else'), key);
    expect(changed.status).toBe(409);
    expect(changed.body.code).toBe('idempotency_key_reused');
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
  });

  it('charges each new execution, and uses a conditional request for a repository it has seen', async () => {
    const agent = await fundedAgent();
    await execute(world, agent.token, repo('etag-owner'));
    const second = await execute(world, agent.token, repo('etag-owner'));
    expect(second.status).toBe(200);
    expect(second.body.result.fullName).toBe('etag-owner/hello-world');
    const last = github.requests.filter((r) => r.path === '/repos/etag-owner/hello-world').at(-1);
    expect(last?.headers['if-none-match']).toBe('W/"etag-owner-hello-world"');
    expect(await capturedFromAgent(world, agent.id)).toBe(2n * ONE_CREDIT_UC);
  });

  it('answers 404 upstream_not_found, releases the hold, says nothing was charged, and replays that answer', async () => {
    const agent = await fundedAgent();
    const key = newKey('missing');
    const res = await execute(world, agent.token, repo('missing'), key);
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toContain('application/problem+json');
    expect(res.body).toMatchObject({ code: 'upstream_not_found', charged: false });
    expect(res.body.redemptionId).toMatch(/^hold_/);
    const holds = await holdsOf(world, agent.id);
    expect(holds.map((h) => h.state)).toEqual(['released']);
    await expectNothingCharged(world, agent.id, 5n * ONE_CREDIT_UC);
    expect((await executionsOf(world, agent.id))[0]).toMatchObject({ state: 'failed', error_code: 'upstream_not_found' });
    const replay = await execute(world, agent.token, repo('missing'), key);
    expect(replay.status).toBe(404);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await holdsOf(world, agent.id)).toHaveLength(1);
  });

  it.each(['secret-plans', 'internal-plans'])("answers a repository the operator's token sees but the public does not (%s) as not found: nothing of it handed out", async (name) => {
    const agent = await fundedAgent();
    const res = await execute(world, agent.token, repo('acme-private', name), newKey('private'));
    expect([res.status, res.body.code, res.body.charged]).toEqual([404, 'upstream_not_found', false]);
    expect(JSON.stringify(res.body)).not.toContain('CONFIDENTIAL');
    await expectNothingCharged(world, agent.id, 5n * ONE_CREDIT_UC);
  });

  it.each([
    ['limited', '3600'],
    ['throttled', '42'],
  ])('maps GitHub rate limiting (%s) to 429 upstream_rate_limited with Retry-After %s, releases, and lets the key be retried', async (owner, retryAfter) => {
    const agent = await fundedAgent();
    const key = newKey('limited');
    const res = await execute(world, agent.token, repo(owner), key);
    expect(res.status).toBe(429);
    expect(res.body).toMatchObject({ code: 'upstream_rate_limited', charged: false });
    expect(res.headers.get('retry-after')).toBe(retryAfter);
    // Not stored: the same key runs again (and is refused again), each time without a charge.
    const again = await execute(world, agent.token, repo(owner), key);
    expect(again.status).toBe(429);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect((await holdsOf(world, agent.id)).map((h) => h.state)).toEqual(['released', 'released']);
    await expectNothingCharged(world, agent.id, 5n * ONE_CREDIT_UC);
  });

  it('maps an upstream 5xx to 502 upstream_unavailable and releases', async () => {
    const agent = await fundedAgent();
    const res = await execute(world, agent.token, repo('broken'));
    expect(res.status).toBe(502);
    expect(res.body).toMatchObject({ code: 'upstream_unavailable', charged: false });
    await expectNothingCharged(world, agent.id, 5n * ONE_CREDIT_UC);
  });

  it('times out a server that never answers (504 upstream_timeout), releases the hold, and refuses a concurrent duplicate', async () => {
    const agent = await fundedAgent();
    const key = newKey('slow');
    const slowRequests = () => github.requests.filter((r) => r.path === '/repos/slow/hello-world').length;
    const slowBefore = slowRequests();
    const startedMs = Date.now();
    const slow = execute(world, agent.token, repo('slow'), key);
    // Once GitHub has the request, the execution holds its key.
    await waitFor(slowRequests, { until: (n) => n > slowBefore, what: 'the slow execution to reach GitHub' });
    const duplicate = await execute(world, agent.token, repo('slow'), key);
    expect(duplicate.status).toBe(409);
    expect(duplicate.body.code).toBe('idempotency_key_in_use');
    const res = await slow;
    expect(Date.now() - startedMs).toBeLessThan(5_000);
    expect(res.status).toBe(504);
    expect(res.body).toMatchObject({ code: 'upstream_timeout', charged: false });
    await expectNothingCharged(world, agent.id, 5n * ONE_CREDIT_UC);
    expect((await holdsOf(world, agent.id)).map((h) => h.state)).toEqual(['released']);
  });
});

describe('insufficient credit', () => {
  it('retains the intent, answers 503 link_configuration_required without a provider, charges nothing, and runs on a retry once funded', async () => {
    const agent = await fundedAgent(0n);
    const key = newKey('broke');
    const body = repo('octocat', 'Spoon-Knife');
    const res = await execute(world, agent.token, body, key);
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({
      code: 'link_configuration_required',
      charged: false,
      priceUc: '1000000',
      intent: { ...body, agentId: agent.id },
    });
    expect(res.body.intentId).toMatch(/^int_/);
    expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(await intentsOf(world, agent.id)).toEqual([
      expect.objectContaining({ id: res.body.intentId, state: 'pending', service_id: 'github-public', action: 'repository.get', input: body.input }),
    ]);
    // The same key answers the same intent.
    const again = await execute(world, agent.token, body, key);
    expect(again.body.intentId).toBe(res.body.intentId);
    expect(await intentsOf(world, agent.id)).toHaveLength(1);
    // Once credit arrives, the same key runs the execution, and the intent is marked executed by it.
    await grant(world, agent.id, ONE_CREDIT_UC);
    const funded = await execute(world, agent.token, body, key);
    expect(funded.status).toBe(200);
    expect(await intentsOf(world, agent.id)).toEqual([expect.objectContaining({ id: res.body.intentId, state: 'executed', execution_id: funded.body.executionId })]);
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
  });

  it('refuses a cap before any hold (403 CAP_EXCEEDED, as the spec gives it outside vouchers) without storing it: the same key runs once the owner raises the cap', async () => {
    const agent = await fundedAgent(5n * ONE_CREDIT_UC, { caps: { perHoldUc: '999999' } });
    const key = newKey('capped');
    const res = await execute(world, agent.token, repo('octocat'), key);
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ code: 'CAP_EXCEEDED', status: 403, reason: 'per_hold_cap', charged: false });
    expect(await holdsOf(world, agent.id)).toEqual([]);
    await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { caps: { perHoldUc: null } } });
    const retried = await execute(world, agent.token, repo('octocat'), key);
    expect(retried.status).toBe(200);
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
  });

  it('refuses past a budget with 403 CAP_EXCEEDED naming the budget, charging nothing', async () => {
    const agent = await fundedAgent();
    const mandate = { budgets: [{ id: 'daily', limitUc: '1500000', period: 'day' }] };
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: newKey('mandate'), body: mandate })).status).toBe(200);
    expect((await execute(world, agent.token, repo('octocat'))).status).toBe(200);
    const refused = await execute(world, agent.token, repo('octocat'));
    expect([refused.status, refused.body.code, refused.body.reason, refused.body.charged]).toEqual([403, 'CAP_EXCEEDED', 'budget_exceeded', false]);
    expect(refused.body.budget).toMatchObject({ id: 'daily', limitUc: '1500000', remainingUc: '500000' });
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
  });
});

describe('who executes', () => {
  it('answers an owner session without agentId with 400 agent_required', async () => {
    const agent = await fundedAgent();
    const res = await execute(world, agent.ownerToken, repo('octocat'));
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('agent_required');
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it("answers an owner naming another owner's agent, or an unknown one, with 403 owner_required", async () => {
    const mine = await fundedAgent();
    const theirs = await fundedAgent();
    for (const agentId of [theirs.id, 'agt_doesnotexist']) {
      const res = await execute(world, mine.ownerToken, { ...repo('octocat'), agentId });
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('owner_required');
    }
    expect(await holdsOf(world, theirs.id)).toEqual([]);
  });

  it("lets an owner (human session or OAuth owner token) execute for one of their agents, charging the agent", async () => {
    const agent = await fundedAgent();
    const human = await execute(world, agent.ownerToken, { ...repo('octocat'), agentId: agent.id });
    expect(human.status).toBe(200);
    expect(human.body.receipt.agentId).toBe(agent.id);
    const me = await world.api('GET', '/v1/me', { token: agent.ownerToken });
    const ownerToken = await world.accessToken({ sub: me.body.owner.id, scope: 'svc:owner', email: me.body.owner.email });
    const oauth = await execute(world, ownerToken, { ...repo('octocat'), agentId: agent.id });
    expect(oauth.status).toBe(200);
    expect(await capturedFromAgent(world, agent.id)).toBe(2n * ONE_CREDIT_UC);
  });

  it('lets an agent name itself, and refuses another agent id with 403 agent_mismatch', async () => {
    const agent = await fundedAgent();
    const other = await fundedAgent();
    expect((await execute(world, agent.token, { ...repo('octocat'), agentId: agent.id })).status).toBe(200);
    const res = await execute(world, agent.token, { ...repo('octocat'), agentId: other.id });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('agent_mismatch');
    expect(await holdsOf(world, other.id)).toEqual([]);
  });
});

describe('refusals before any hold', () => {
  it('requires an Idempotency-Key of the spec pattern (400 invalid_input)', async () => {
    const agent = await fundedAgent();
    const missing = await execute(world, agent.token, repo('octocat'), null);
    expect(missing.status).toBe(400);
    expect(missing.body.code).toBe('invalid_input');
    expect(missing.body.detail).toContain('Idempotency-Key');
    const malformed = await execute(world, agent.token, repo('octocat'), 'has spaces in it');
    expect(malformed.status).toBe(400);
    expect(malformed.body.code).toBe('invalid_input');
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it('refuses bad input, unknown services and actions, and actions of another service with 400 invalid_input', async () => {
    const agent = await fundedAgent();
    const cases = [
      { serviceId: 'github-public', action: 'repository.get', input: { owner: '-bad-', repo: 'x' } },
      { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: '..' } },
      { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat' } },
      { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'x', extra: 1 } },
      { serviceId: 'github-public', action: 'messages.list', input: {} },
      { serviceId: 'weather', action: 'repository.get', input: {} },
      { serviceId: 'github-public', action: 'repository.delete', input: {} },
    ];
    for (const body of cases) {
      const res = await execute(world, agent.token, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.code).toBe('invalid_input');
    }
    const tooLong = await execute(world, agent.token, { ...repo('octocat'), agentId: 'a'.repeat(201) });
    expect(tooLong.status).toBe(400);
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it('refuses a frozen agent (403 FROZEN) and a service or category the owner did not allow (403 SCOPE_FORBIDDEN)', async () => {
    const callsBefore = github.requests.length;
    const frozen = await fundedAgent();
    await world.api('POST', `/v1/owner/agents/${frozen.id}/freeze`, { token: frozen.ownerToken });
    const frozenKey = newKey('frozen');
    const res = await execute(world, frozen.token, repo('octocat'), frozenKey);
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ code: 'FROZEN', charged: false });
    expect(res.headers.get('idempotent-replayed')).toBeNull();

    const mailOnly = await fundedAgent(5n * ONE_CREDIT_UC, { allowedServices: ['mail'] });
    const scoped = await execute(world, mailOnly.token, repo('octocat'));
    expect(scoped.status).toBe(403);
    expect(scoped.body.code).toBe('SCOPE_FORBIDDEN');

    const noDevTools = await fundedAgent(5n * ONE_CREDIT_UC, { allowedCategories: ['email'] });
    const category = await execute(world, noDevTools.token, repo('octocat'));
    expect(category.status).toBe(403);
    expect(category.body.code).toBe('SCOPE_FORBIDDEN');
    for (const agent of [frozen, mailOnly, noDevTools]) expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(github.requests.length).toBe(callsBefore);

    // Nothing was stored for the refusal: once the owner unfreezes the agent, the same key runs.
    await world.api('POST', `/v1/owner/agents/${frozen.id}/unfreeze`, { token: frozen.ownerToken });
    expect((await execute(world, frozen.token, repo('octocat'), frozenKey)).status).toBe(200);
  });
});

describe('the catalogue', () => {
  it('lists the enabled services in /v1/integrations', async () => {
    const agent = await fundedAgent(0n);
    const res = await world.api('GET', '/v1/integrations', { token: agent.token });
    expect(res.body.services).toEqual(['mail', 'github-public']);
    expect(res.body.payments.link).toBe('unconfigured');
  });

  it('shows every action, its input schema and price in the OpenAPI document', async () => {
    const document = (await world.api('GET', '/openapi.json')).body;
    const operation = document.paths['/v1/services/execute'].post;
    for (const action of ['inboxes.list', 'messages.list', 'messages.get', 'repository.get']) expect(operation.description).toContain(`\`${action}\``);
    expect(operation.description).toContain('1000000 µc ($0.01)');
    const body = operation.requestBody.content['application/json'].schema;
    expect(body.oneOf.map((branch: { properties: { serviceId: { enum: string[] } } }) => branch.properties.serviceId.enum)).toEqual([['mail'], ['github-public']]);
    expect(body.oneOf).toContainEqual(
      expect.objectContaining({
        properties: expect.objectContaining({
          action: { type: 'string', enum: ['repository.get'] },
          input: { $ref: '#/components/schemas/GithubPublicRepositoryGetInput' },
        }),
      }),
    );
    expect(document.components.schemas.MailMessagesListInput.required).toEqual(['inbox']);
    expect(document.components.schemas.GithubPublicRepositoryGetInput.properties.owner.maxLength).toBe(39);
    expect(operation.responses['200'].content['application/json'].schema.$ref).toBe('#/components/schemas/ExecuteResult');
  });
});
