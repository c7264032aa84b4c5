// A service added at composition runs through the same pipeline as the built-in ones: a gateway composed with
// the test-only `echo` connector (test/support/echo-connector.ts, one module given in AppDependencies.services)
// executes it over HTTP and MCP with its hold, run, capture, receipt and price; clears its category; checks
// its input; refuses before the hold; releases the hold when it fails. Every listing of services follows the
// catalogue it was composed with. And a failed intent has one `error`: its event's is its read's.
import type { Client } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../mcp/helpers.ts';
import { ECHO_CATEGORY, ECHO_PRICE_UC, ECHO_SERVICE_ID, REFUSED_WORD, echoConnector } from '../support/echo-connector.ts';
import { grant } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { availableUc, capturedFromAgent, execute, executionsOf, expectNothingCharged, holdsOf, intentsOf, newKey } from './helpers.ts';

const echo = echoConnector();
let world: World;
let counter = 0;

beforeAll(async () => {
  world = await startWorld({ dependencies: { services: [echo.module] } });
});
afterAll(async () => {
  await world?.close();
});

const say = (message: string, outcome?: 'answer' | 'not_found' | 'unavailable') => ({
  serviceId: ECHO_SERVICE_ID,
  action: 'say',
  input: outcome ? { message, outcome } : { message },
});

async function fundedAgent(amountUc = 10n * ECHO_PRICE_UC, settings: Record<string, unknown> = {}) {
  counter += 1;
  const agent = await world.createAgent(`echo${counter}@example.com`, `echo-agent-${counter}`, settings);
  if (amountUc > 0n) await grant(world, agent.id, amountUc);
  return agent;
}

function structured(result: unknown): any {
  return (result as { structuredContent: unknown }).structuredContent;
}

describe('a service added at composition', () => {
  it('runs over HTTP: a hold of its price, the action with its own context, the capture and the receipt', async () => {
    const agent = await fundedAgent();
    const contextsBefore = echo.counters.contexts;
    const res = await execute(world, agent.token, say('hello'));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      state: 'succeeded',
      result: { echoed: 'hello', agentId: agent.id, mode: 'dev' },
      priceUc: '2500000',
      priceUsd: '0.025',
      paymentMethod: 'credits',
      receipt: { state: 'captured', agentId: agent.id, acceptorId: 'gateway', offerId: 'echo:say', category: ECHO_CATEGORY, amountUc: '2500000', capturedUc: '2500000' },
    });
    expect(await holdsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'captured', amountUc: ECHO_PRICE_UC, capturedUc: ECHO_PRICE_UC, offerId: 'echo:say' })]);
    expect(await capturedFromAgent(world, agent.id)).toBe(ECHO_PRICE_UC);
    expect(await executionsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'succeeded', id: res.body.executionId })]);
    // The factory ran once, when the gateway was built; each execution built its own context.
    expect(echo.counters.factories).toBe(1);
    expect(echo.counters.contexts).toBe(contextsBefore + 1);
  });

  it('runs over MCP: execute_service takes its input and answers the same result and receipt, charged once', async () => {
    const agent = await fundedAgent();
    const client: Client = await connect(world.url, await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`), 'modern');
    try {
      const { tools } = await client.listTools();
      const tool = tools.find((candidate) => candidate.name === 'execute_service')!;
      expect(JSON.stringify(tool.inputSchema)).toContain('"echo"');
      const result = await client.callTool({ name: 'execute_service', arguments: { ...say('over mcp'), idempotencyKey: 'echo-mcp-1' } });
      expect(result.isError).toBeFalsy();
      expect(structured(result)).toMatchObject({
        state: 'succeeded',
        result: { echoed: 'over mcp', agentId: agent.id },
        priceUc: '2500000',
        paymentMethod: 'credits',
        receipt: { state: 'captured', capturedUc: '2500000', offerId: 'echo:say' },
      });
      const again = await client.callTool({ name: 'execute_service', arguments: { ...say('over mcp'), idempotencyKey: 'echo-mcp-1' } });
      expect(structured(again).executionId).toBe(structured(result).executionId);
      expect(await capturedFromAgent(world, agent.id)).toBe(ECHO_PRICE_UC);

      const invalid = await client
        .callTool({ name: 'execute_service', arguments: { serviceId: ECHO_SERVICE_ID, action: 'say', input: { message: '' }, idempotencyKey: 'echo-mcp-2' } })
        .catch((error: Error) => ({ isError: true, message: error.message }));
      expect(invalid.isError).toBe(true);
      expect(await holdsOf(world, agent.id)).toHaveLength(1);
    } finally {
      await client.close();
    }
  });

  it('is cleared by category and by service like a built-in one, before any hold', async () => {
    const byCategory = await fundedAgent(10n * ECHO_PRICE_UC, { allowedCategories: ['developer-tools'] });
    const refused = await execute(world, byCategory.token, say('hello'));
    expect([refused.status, refused.body.code, refused.body.charged]).toEqual([403, 'SCOPE_FORBIDDEN', false]);
    expect(await holdsOf(world, byCategory.id)).toEqual([]);

    const byService = await fundedAgent(10n * ECHO_PRICE_UC, { allowedServices: ['github-public'] });
    expect((await execute(world, byService.token, say('hello'))).body.code).toBe('SCOPE_FORBIDDEN');
    expect(await holdsOf(world, byService.id)).toEqual([]);

    // The agents' service ids follow the catalogue: echo may be allowed by name here.
    const allowed = await fundedAgent(10n * ECHO_PRICE_UC, { allowedServices: [ECHO_SERVICE_ID], allowedCategories: [ECHO_CATEGORY] });
    expect((await execute(world, allowed.token, say('hello'))).status).toBe(200);
  });

  it('checks its input with its own schema at the edge, before any hold', async () => {
    const agent = await fundedAgent();
    for (const input of [{}, { message: '' }, { message: 'hi', outcome: 'sometimes' }, { message: 'hi', extra: true }]) {
      const res = await execute(world, agent.token, { serviceId: ECHO_SERVICE_ID, action: 'say', input });
      expect([res.status, res.body.code]).toEqual([400, 'invalid_input']);
    }
    const unknownAction = await execute(world, agent.token, { serviceId: ECHO_SERVICE_ID, action: 'shout', input: { message: 'hi' } });
    expect([unknownAction.status, unknownAction.body.code]).toEqual([400, 'invalid_input']);
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it('refuses by its own clearance before the hold; nothing is stored, so the key may be retried', async () => {
    const agent = await fundedAgent();
    const key = newKey('echo-refused');
    const runsBefore = echo.counters.runs.length;
    const refused = await execute(world, agent.token, say(`a ${REFUSED_WORD} word`), key);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ code: 'invalid_input', detail: `echo does not repeat "${REFUSED_WORD}"`, charged: false });
    expect(await holdsOf(world, agent.id)).toEqual([]);
    expect(echo.counters.runs.length).toBe(runsBefore);
    const again = await execute(world, agent.token, say(`a ${REFUSED_WORD} word`), key);
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([400, null]);
  });

  it('releases the hold when its action fails, and charges nothing', async () => {
    const agent = await fundedAgent();
    const res = await execute(world, agent.token, say('hello', 'unavailable'));
    expect(res.status).toBe(502);
    expect(res.body).toMatchObject({ code: 'upstream_unavailable', charged: false, executionId: expect.stringMatching(/^exe_/), redemptionId: expect.stringMatching(/^hold_/) });
    expect((await holdsOf(world, agent.id)).map((hold) => hold.state)).toEqual(['released']);
    expect(await executionsOf(world, agent.id)).toEqual([expect.objectContaining({ state: 'failed', error_code: 'upstream_unavailable' })]);
    await expectNothingCharged(world, agent.id, 10n * ECHO_PRICE_UC);
  });

  it('appears wherever services are listed: the execute body, its catalogue table, /v1/integrations', async () => {
    const agent = await fundedAgent(0n);
    const integrations = await world.api('GET', '/v1/integrations', { token: agent.token });
    expect(integrations.body.services).toEqual(['mail', 'github-public', ECHO_SERVICE_ID]);
    const document = (await world.api('GET', '/openapi.json')).body;
    const operation = document.paths['/v1/services/execute'].post;
    const body = operation.requestBody.content['application/json'].schema;
    expect(body.oneOf.map((branch: { properties: { serviceId: { enum: string[] } } }) => branch.properties.serviceId.enum)).toEqual([['mail'], ['github-public'], [ECHO_SERVICE_ID]]);
    expect(document.components.schemas.EchoSayInput.required).toEqual(['message']);
    expect(operation.description).toContain('| `echo` | `say` | 2500000 µc ($0.025) | `testing` | `EchoSayInput` |');
  });
});

describe('a gateway composed without it', () => {
  it('does not know it: agents may not name it, and executing it is invalid_input', async () => {
    const other = await world.anotherInstance();
    try {
      const ownerToken = await world.humanToken('echo-less@example.com');
      const res = await fetch(`${other.url}/v1/owner/agents`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ownerToken}`, 'content-type': 'application/json', 'idempotency-key': newKey('echo-less') },
        body: JSON.stringify({ name: 'echo-less', identity: { issuer: world.agentIssuer.issuer, subject: 'echo-less' }, allowedServices: [ECHO_SERVICE_ID] }),
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { detail: string }).detail).toMatch(new RegExp(`^body/allowedServices/0 "${ECHO_SERVICE_ID}" is not a built-in service`));
    } finally {
      await other.close();
    }
  });
});

describe('a failed intent', () => {
  it('has one error: the problem body, equal in its intent.failed event and in GET /v1/intents/{id}', async () => {
    const agent = await fundedAgent(0n);
    const key = newKey('echo-intent');
    const body = say('hello', 'not_found');
    const retained = await execute(world, agent.token, body, key);
    expect([retained.status, retained.body.code]).toEqual([503, 'link_configuration_required']);
    const intentId = retained.body.intentId as string;

    await grant(world, agent.id, ECHO_PRICE_UC);
    const failed = await execute(world, agent.token, body, key);
    expect([failed.status, failed.body.code, failed.body.charged]).toEqual([404, 'upstream_not_found', false]);
    expect(await intentsOf(world, agent.id)).toEqual([expect.objectContaining({ id: intentId, state: 'failed' })]);
    expect(await availableUc(world, agent.id)).toBe(ECHO_PRICE_UC);

    const read = await world.api('GET', `/v1/intents/${intentId}`, { token: agent.token });
    const { rows } = await world.gw.gateway.db.query<{ payload: string }>(`SELECT payload FROM events WHERE type = 'intent.failed'`);
    const events = rows.map((row) => JSON.parse(row.payload)).filter((event) => event.data.intent.id === intentId);
    expect(events).toHaveLength(1);
    expect(read.body.error).toMatchObject({ code: 'upstream_not_found', status: 404, charged: false, executionId: failed.body.executionId });
    expect(events[0].data.intent.error).toEqual(read.body.error);
  });
});
