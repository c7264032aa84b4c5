// POST /mcp as the transport and authorization rules state it: credentials before discovery, both
// protocol eras on one stateless endpoint, the tool list per principal, tool errors as problem bodies.
import { request as httpRequest } from 'node:http';
import { gzipSync } from 'node:zlib';
import { extractWWWAuthenticateParams, type Client } from '@modelcontextprotocol/client';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, envelope, LEGACY, MODERN, rawModern, toolBody } from './helpers.ts';

let world: World;
let mcpUrl: string;
let agent: { id: string; token: string; ownerToken: string };
let agentMcpToken: string;
let ownerMcpToken: string;
let holdId: string;
const ownerEmail = 'mcp-owner@example.com';

const AGENT_TOOLS = ['execute_service', 'get_hold', 'get_intent', 'get_topup', 'list_delegates', 'list_offers', 'mint_voucher', 'request_topup', 'whoami'];
const OWNER_TOOLS = ['execute_service', 'freeze_agent', 'get_intent', 'get_mandate', 'get_mandate_version', 'get_topup', 'list_agent_delegates', 'list_agent_holds', 'list_agents', 'list_mandate_versions', 'register_agent', 'request_topup', 'set_mandate', 'unfreeze_agent', 'update_agent', 'whoami'];
const READ_TOOLS = new Set(['get_hold', 'get_intent', 'get_topup', 'list_offers', 'whoami', 'list_agent_holds', 'list_agents', 'get_mandate', 'list_mandate_versions', 'get_mandate_version', 'list_delegates', 'list_agent_delegates']);

beforeAll(async () => {
  world = await startWorld();
  mcpUrl = `${world.url}/mcp`;
  agent = await world.createAgent(ownerEmail, 'mcp-agent', { allowedCategories: ['books'] });
  agentMcpToken = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, mcpUrl);
  const me = await world.api('GET', '/v1/me', { token: agent.ownerToken });
  ownerMcpToken = await world.accessToken({ sub: me.body.owner.id, scope: 'svc:owner', email: ownerEmail }, mcpUrl);
  const shop = await openShop(world);
  const offer = await shop.offer({ priceUc: '250000', category: 'books' });
  await shop.offer({ category: 'music' });
  await grant(world, agent.id, 5_000_000n);
  const minted = await mint(world, agent.token, offer.id);
  expect(minted.status).toBe(200);
  holdId = minted.body.redemption.id;
});

afterAll(async () => {
  await world?.close();
});

function structured(result: unknown): any {
  return toolBody(result);
}

describe('authorization before discovery', () => {
  for (const method of ['server/discover', 'tools/list']) {
    it(`${method} without a credential is 401 naming the MCP protected resource metadata and the scopes`, async () => {
      const res = await rawModern(world.url, method);
      expect(res.status).toBe(401);
      expect(res.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${world.url}/.well-known/oauth-protected-resource/mcp", scope="svc:agent svc:owner"`);
    });
  }

  it('a legacy initialize without a credential is 401', async () => {
    const res = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: 'x', version: '1' } } }),
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toContain('/.well-known/oauth-protected-resource/mcp');
  });

  it("an access token for the API's audience is refused with invalid_token", async () => {
    const apiToken = await world.accessToken({ sub: agent.id, scope: 'svc:agent' });
    const res = await rawModern(world.url, 'server/discover', {}, { token: apiToken });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer resource_metadata="[^"]+\/mcp", error="invalid_token", error_description="[^"]+", scope="svc:agent svc:owner"$/);
  });

  it('every challenge names the scopes a token for /mcp carries, which the official client reads as the scope to ask for', async () => {
    const refused = [await rawModern(world.url, 'tools/list'), await rawModern(world.url, 'tools/list', {}, { token: agent.token }), await rawModern(world.url, 'tools/list', {}, { token: 'not-a-jwt' })];
    for (const res of refused) {
      expect(res.status).toBe(401);
      const { resourceMetadataUrl, scope } = extractWWWAuthenticateParams(new Response(null, { headers: res.headers }));
      expect([resourceMetadataUrl?.href, scope]).toEqual([`${world.url}/.well-known/oauth-protected-resource/mcp`, 'svc:agent svc:owner']);
    }
    // The scopes the protected resource metadata lists, so a client that reads either asks for the same.
    const metadata = await (await fetch(`${world.url}/.well-known/oauth-protected-resource/mcp`)).json();
    expect(metadata.scopes_supported.join(' ')).toBe('svc:agent svc:owner');
  });

  it('an agent identity JWT is refused: agents present an access token issued for the MCP resource', async () => {
    const res = await rawModern(world.url, 'server/discover', {}, { token: agent.token });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('unauthorized');
  });

  it('a merchant API key is refused', async () => {
    const shop = await openShop(world);
    const res = await rawModern(world.url, 'server/discover', {}, { token: shop.key });
    expect(res.status).toBe(401);
  });

  it('an MCP token is still refused by the API', async () => {
    expect((await world.api('GET', '/v1/me', { token: agentMcpToken })).status).toBe(401);
  });
});

describe('the 2026-07-28 wire', () => {
  it('server/discover names the version, the tools capability and private cache hints', async () => {
    const res = await rawModern(world.url, 'server/discover', {}, { token: agentMcpToken });
    expect(res.status).toBe(200);
    expect(res.body.result).toMatchObject({ supportedVersions: ['2026-07-28'], capabilities: { tools: {} }, resultType: 'complete', cacheScope: 'private', ttlMs: 0 });
    expect(res.body.result._meta['io.modelcontextprotocol/serverInfo'].name).toBe('agent-credit-gateway');
  });

  it('tools/list differs by principal and says so with cacheScope private', async () => {
    const forAgent = await rawModern(world.url, 'tools/list', {}, { token: agentMcpToken });
    expect(forAgent.body.result.tools.map((t: { name: string }) => t.name).sort()).toEqual(AGENT_TOOLS);
    expect(forAgent.body.result.cacheScope).toBe('private');
    const forHuman = await rawModern(world.url, 'tools/list', {}, { token: agent.ownerToken });
    expect(forHuman.body.result.tools.map((t: { name: string }) => t.name).sort()).toEqual(OWNER_TOOLS);
  });

  it("every example of a tool's input is a valid call of it, its idempotencyKey included (found from outside: they lacked it)", async () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    const tools = [
      ...(await rawModern(world.url, 'tools/list', {}, { token: agentMcpToken })).body.result.tools,
      ...(await rawModern(world.url, 'tools/list', {}, { token: agent.ownerToken })).body.result.tools,
    ];
    let checked = 0;
    for (const tool of tools) {
      const validate = ajv.compile({ ...tool.inputSchema, examples: undefined });
      for (const example of tool.inputSchema.examples ?? []) {
        expect(validate(example), `${tool.name} ${JSON.stringify(example)}: ${ajv.errorsText(validate.errors)}`).toBe(true);
        checked += 1;
      }
    }
    expect(checked).toBeGreaterThanOrEqual(3);
  });

  it('read tools are annotated read-only; tools that change state are not, and take an idempotency key', async () => {
    const tools = [
      ...(await rawModern(world.url, 'tools/list', {}, { token: agentMcpToken })).body.result.tools,
      ...(await rawModern(world.url, 'tools/list', {}, { token: agent.ownerToken })).body.result.tools,
    ];
    for (const tool of tools) {
      if (READ_TOOLS.has(tool.name)) {
        expect(tool.annotations, tool.name).toMatchObject({ readOnlyHint: true, idempotentHint: true, destructiveHint: false });
      } else {
        expect(tool.annotations.readOnlyHint, tool.name).toBe(false);
        // execute_service's input is one closed shape per action: the key is a member of each.
        expect(JSON.stringify(tool.inputSchema), tool.name).toMatch(/"idempotencyKey":\{"type":"string",.*retry of the same operation MUST reuse it/);
      }
    }
    const byName = new Map(tools.map((tool) => [tool.name, tool]));
    expect(byName.get('freeze_agent').annotations.destructiveHint).toBe(true);
    expect(byName.get('execute_service').annotations.openWorldHint).toBe(true);
    expect(byName.get('mint_voucher').inputSchema.required).toContain('idempotencyKey');
  });

  it('every input schema is a plain object at its root (no oneOf, anyOf, allOf there), which every client accepts', async () => {
    // The Anthropic API refuses a whole request whose tool input_schema has a combinator at its root.
    for (const token of [agentMcpToken, agent.ownerToken]) {
      for (const tool of (await rawModern(world.url, 'tools/list', {}, { token })).body.result.tools) {
        expect(tool.inputSchema.type, tool.name).toBe('object');
        expect(tool.inputSchema.properties, tool.name).toBeTypeOf('object');
        expect(Object.keys(tool.inputSchema).filter((name) => ['oneOf', 'anyOf', 'allOf', 'discriminator'].includes(name)), tool.name).toEqual([]);
      }
    }
    const execute = (await rawModern(world.url, 'tools/list', {}, { token: agentMcpToken })).body.result.tools.find((tool: { name: string }) => tool.name === 'execute_service');
    expect(execute.inputSchema.required.sort()).toEqual(['action', 'idempotencyKey', 'input', 'serviceId']);
    expect(execute.inputSchema.properties.serviceId.enum).toContain('github-public');
    expect(execute.inputSchema.properties.action.enum).toContain('repository.get');
    expect(execute.inputSchema.properties.input).toMatchObject({ type: 'object' });
    expect(execute.inputSchema.properties.input.description).toContain('serviceId "github-public", action "repository.get"');
  });

  it("execute_service still checks each action's input: an action of another service, or a bad input, is refused before the tool runs, with a problem body naming what the action needs", async () => {
    const call = (args: Record<string, unknown>) => rawModern(world.url, 'tools/call', { name: 'execute_service', arguments: { idempotencyKey: `exact-${Math.random()}`, ...args } }, { token: agentMcpToken });
    for (const [args, detail] of [
      [{ serviceId: 'github-public', action: 'inboxes.list', input: {} }, /^arguments\/action must be one of "repository\.get"/],
      // A service no action belongs to is named as such, with the services there are (found from outside).
      [{ serviceId: 'weather', action: 'forecast.get', input: {} }, /^arguments\/serviceId must be one of "mail", "github-public"$/],
      [{ serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat' } }, /^arguments\/input must have required property 'repo'$/],
      [{ serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world', extra: 1 } }, /^arguments\/input\/extra is not a known member here$/],
    ] as const) {
      const res = await call(args);
      expect(res.body.result.isError, JSON.stringify(args)).toBe(true);
      expect(toolBody(res.body.result), JSON.stringify(args)).toMatchObject({ status: 400, code: 'invalid_input', errors: expect.any(Array) });
      expect(toolBody(res.body.result).detail, JSON.stringify(args)).toMatch(detail);
    }
    expect((await world.api('GET', '/v1/me', { token: agent.token })).body.balance.heldUc).toBe('250000');
  });

  it('a missing Mcp-Name header is -32020 with 400', async () => {
    const res = await rawModern(world.url, 'tools/call', { name: 'whoami', arguments: {} }, { token: agentMcpToken, headers: { 'mcp-name': undefined } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe(-32020);
  });

  it('an unsupported protocol version is -32022 listing the supported ones', async () => {
    const res = await rawModern(world.url, 'tools/list', {}, { token: agentMcpToken, headers: { 'mcp-protocol-version': '2099-01-01' } });
    expect(res.status).toBe(400);
    expect([-32020, -32022]).toContain(res.body.error.code);
  });

  it('a legacy initialize whose params are not what it takes is -32602 Invalid params with 400, not an internal error', async () => {
    for (const params of [undefined, { protocolVersion: 5, capabilities: {}, clientInfo: { name: 'x', version: '1' } }, { protocolVersion: LEGACY, capabilities: {} }]) {
      const res = await fetch(`${world.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}` },
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'initialize', ...(params ? { params } : {}) }),
      });
      expect(res.status, JSON.stringify(params)).toBe(400);
      const body = await res.json();
      expect(body).toMatchObject({ jsonrpc: '2.0', id: 7, error: { code: -32602 } });
      expect(body.error.message).toMatch(/^Invalid params for initialize: params/);
    }
    // On 2026-07-28 initialize is a removed method: 404 -32601 whatever its params (SEP-2575).
    const modern = await rawModern(world.url, 'initialize', {}, { token: agentMcpToken });
    expect([modern.status, modern.body.error.code]).toEqual([404, -32601]);
  });

  it('params that are not what the method takes are 400 -32602 naming the member, whatever the version header or the spelling of the method', async () => {
    const legacyHeaders = { 'mcp-protocol-version': LEGACY };
    const cases: Array<{ body: string; headers?: Record<string, string>; method: string }> = [
      { body: '{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}', headers: legacyHeaders, method: 'initialize' },
      { body: '{"jsonrpc":"2.0","id":3,"method":"initi\\u0061lize","params":{}}', method: 'initialize' },
      { body: '{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":5}}', headers: legacyHeaders, method: 'tools/list' },
      { body: '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":5}}', headers: legacyHeaders, method: 'tools/call' },
    ];
    for (const { body, headers, method } of cases) {
      const res = await fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, ...headers },
        body,
      });
      expect(res.status, body).toBe(400);
      const answer = await res.json();
      expect(answer, body).toMatchObject({ jsonrpc: '2.0', id: 3, error: { code: -32602 } });
      expect(answer.error.message, body).toMatch(new RegExp(`^Invalid params for ${method}: params`));
    }
    const modern = await rawModern(world.url, 'tools/list', { cursor: 5 }, { token: agentMcpToken });
    expect([modern.status, modern.body.error.code]).toEqual([400, -32602]);
    expect(modern.body.error.message).toBe('Invalid params for tools/list: params.cursor: Invalid input: expected string, received number');
  });

  it('a body whose bytes are not UTF-8 is 400 -32700 and nothing runs, as the API refuses it (found from outside: the tool wrote U+FFFD)', async () => {
    const nameOf = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.name as string;
    const before = await nameOf();
    const body = Buffer.concat([
      Buffer.from(`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"update_agent","arguments":{"id":"${agent.id}","name":"bad`),
      Buffer.from([0xff, 0xc3]),
      Buffer.from('"}}}'),
    ]);
    for (const headers of [{ 'mcp-protocol-version': LEGACY }, {}] as Array<Record<string, string>>) {
      const res = await fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agent.ownerToken}`, ...headers },
        body,
      });
      expect([res.status, await res.json()]).toEqual([400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error: the body is not valid UTF-8 (JSON is UTF-8)' } }]);
    }
    expect(await nameOf()).toBe(before);
  });

  it('a tools/list cursor is 400 -32602 on either version: every tool is listed in one page, so no cursor names a page (found from outside: a made-up one answered the whole list)', async () => {
    const legacy = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': LEGACY },
      body: '{"jsonrpc":"2.0","id":12,"method":"tools/list","params":{"cursor":"bogus"}}',
    });
    const modern = await rawModern(world.url, 'tools/list', { cursor: 'bogus' }, { token: agentMcpToken });
    for (const answer of [{ status: legacy.status, body: await legacy.json() }, modern]) {
      expect([answer.status, answer.body.error.code]).toEqual([400, -32602]);
      expect(answer.body.error.message).toBe('Invalid params for tools/list: params.cursor: "bogus" is no cursor this server gave (it lists every tool in one page, with no nextCursor)');
    }
    // Without one, the list is whole and says there is no next page.
    const whole = await rawModern(world.url, 'tools/list', {}, { token: agentMcpToken });
    expect(whole.status).toBe(200);
    expect(whole.body.result.nextCursor).toBeUndefined();
  });

  it('a JSON-RPC batch is 400 -32600 on either version, and none of it runs', async () => {
    const call = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'whoami', arguments: {} } });
    for (const headers of [{ 'mcp-protocol-version': LEGACY }, {}] as Array<Record<string, string>>) {
      for (const batch of [[call(1), call(2)], [call(1)]]) {
        const res = await fetch(mcpUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, ...headers },
          body: JSON.stringify(batch),
        });
        expect(res.status).toBe(400);
        expect(await res.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
      }
    }
  });

  it('an id that is no id (a fraction, a boolean, an object, an integer past 2^53 − 1) is 400 -32600 with id null, never echoed (found from outside: 2.5 came back, breaking the answer\'s schema, and 9007199254740993 came back rounded)', async () => {
    for (const headers of [{ 'mcp-protocol-version': LEGACY }, {}] as Array<Record<string, string>>) {
      for (const id of ['2.5', 'true', '{"n":1}', '[1]', '9007199254740993', '123456789012345678901234567890']) {
        const res = await fetch(mcpUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, ...headers },
          body: `{"jsonrpc":"2.0","id":${id},"method":"tools/list"}`,
        });
        expect(res.status, id).toBe(400);
        expect(await res.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request: id must be a string or an integer of at most 2^53 − 1 (send a larger one as a string)' } });
      }
    }
    // The largest that reads back as sent is answered with it.
    const largest = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': LEGACY },
      body: '{"jsonrpc":"2.0","id":9007199254740991,"method":"tools/list"}',
    });
    expect(largest.status).toBe(200);
    expect(await largest.text()).toMatch(/"id":9007199254740991[,}]/);
  });

  it('a protocol version that names no revision is refused as an unsupported one, naming those served (found from outside: `bogus` was told to add an envelope)', async () => {
    const answers = [];
    for (const version of ['bogus', '2025-01-01']) {
      const res = await fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': version },
        body: JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'tools/list' }),
      });
      expect(res.status, version).toBe(400);
      const { error } = await res.json();
      expect(error.code, version).toBe(-32000);
      expect(error.message, version).toMatch(new RegExp(`^Bad Request: Unsupported protocol version: ${version} \\(supported versions: 2026-07-28, ${LEGACY}`));
      answers.push(error.message.replace(version, 'V'));
    }
    // One answer for both: a word and a date the server does not speak.
    expect(answers[0]).toBe(answers[1]);
    // With the 2026-07-28 envelope the refusal is that revision's (the SDK's), with the request's id: as conformance checks.
    const modern = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': 'bogus', 'mcp-method': 'tools/list' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 301, method: 'tools/list', params: { _meta: { ...envelope(), 'io.modelcontextprotocol/protocolVersion': 'bogus' } } }),
    });
    expect(modern.status).toBe(400);
    expect(await modern.json()).toMatchObject({ id: 301, error: { code: -32022 } });
  });

  it('a message whose jsonrpc is not "2.0" is 400 -32600 Invalid Request, with or without params, not -32602 for the params it lacks (found from outside)', async () => {
    for (const message of [
      { jsonrpc: '1.0', id: 3, method: 'initialize' },
      { jsonrpc: '1.0', id: 3, method: 'initialize', params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: 'c', version: '1' } } },
      { id: 3, method: 'tools/call' },
    ]) {
      const res = await fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': LEGACY },
        body: JSON.stringify(message),
      });
      const label = JSON.stringify(message);
      expect(res.status, label).toBe(400);
      expect((await res.json()).error, label).toMatchObject({ code: -32600 });
    }
  });

  it('a prototype key (__proto__, or constructor with a prototype) is refused as REST refuses such a body: 400 -32602 anywhere in the params on either version, -32600 elsewhere, and nothing runs', async () => {
    const nameOf = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.name as string;
    const heldOf = async () => (await world.api('GET', '/v1/me', { token: agent.token })).body.balance.heldUc as string;
    const [nameBefore, heldBefore] = [await nameOf(), await heldOf()];
    const rename = `"name":"renamed-by-a-prototype-key","id":"${agent.id}"`;
    const execute = '"serviceId":"github-public","action":"repository.get","idempotencyKey":"proto-execute"';
    const cases: Array<{ token: string; params: string; path: string }> = [
      { token: agent.ownerToken, params: `{"name":"update_agent","arguments":{${rename},"__proto__":{"name":"x"}}}`, path: 'params.arguments.__proto__' },
      { token: agent.ownerToken, params: `{"name":"update_agent","arguments":{${rename},"constructor":{"prototype":{"name":"x"}}}}`, path: 'params.arguments.constructor.prototype' },
      { token: agentMcpToken, params: `{"name":"execute_service","arguments":{${execute},"input":{"owner":"octocat","repo":"hello-world","__proto__":{"x":1}}}}`, path: 'params.arguments.input.__proto__' },
      { token: agentMcpToken, params: '{"name":"whoami","arguments":{},"__proto__":{"x":1}}', path: 'params.__proto__' },
    ];
    for (const { token, params, path } of cases) {
      const legacy = await fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}`, 'mcp-protocol-version': LEGACY },
        body: `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":${params}}`,
      });
      const modern = await rawModern(world.url, 'tools/call', JSON.parse(params), { token });
      // An answer that is not this refusal may be an SSE stream: read it as text, so the failure shows what ran.
      const legacyText = await legacy.text();
      const legacyBody: unknown = legacy.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(legacyText) : legacyText;
      for (const [era, answer] of [['legacy', { status: legacy.status, body: legacyBody as any }], ['modern', modern]] as const) {
        expect(answer.status, `${era} ${params}`).toBe(400);
        expect(answer.body, `${era} ${params}`).toMatchObject({ jsonrpc: '2.0', error: { code: -32602 } });
        expect(answer.body.error.message, `${era} ${params}`).toBe(
          `Invalid params for tools/call: ${path} is a prototype key ("__proto__", or "constructor" with a "prototype"), which is refused in any JSON body`,
        );
      }
    }
    // Outside the params it is the message that is invalid.
    const envelopeKey = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': LEGACY },
      body: '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami","arguments":{}},"__proto__":{"x":1}}',
    });
    expect([envelopeKey.status, await envelopeKey.json()]).toEqual([
      400,
      { jsonrpc: '2.0', id: 9, error: { code: -32600, message: 'Invalid Request: __proto__ is a prototype key ("__proto__", or "constructor" with a "prototype"), which is refused in any JSON body' } },
    ]);
    expect([await nameOf(), await heldOf()]).toEqual([nameBefore, heldBefore]);
  });

  it('a member name repeated in one object is refused as REST refuses such a body: 400 -32602 in the params, -32600 elsewhere, and nothing runs', async () => {
    const nameOf = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.name as string;
    const nameBefore = await nameOf();
    const send = (token: string, body: string) =>
      fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}`, 'mcp-protocol-version': LEGACY },
        body,
      });
    const renamed = await send(agent.ownerToken, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"update_agent","arguments":{"id":"${agent.id}","name":"first","name":"second"}}}`);
    expect([renamed.status, await renamed.json()]).toEqual([
      400,
      {
        jsonrpc: '2.0',
        id: 9,
        error: { code: -32602, message: 'Invalid params for tools/call: params.arguments.name appears twice in one object; a member name may appear once (RFC 7493 §2.3), as another reader could take either value' },
      },
    ]);
    const envelope = await send(agentMcpToken, '{"jsonrpc":"2.0","id":9,"method":"tools/call","method":"tools/list","params":{}}');
    expect([envelope.status, (await envelope.json()).error]).toEqual([400, { code: -32600, message: 'Invalid Request: method appears twice in one object; a member name may appear once (RFC 7493 §2.3), as another reader could take either value' }]);
    // A notification is refused the same way (its error's id is null), rather than accepted with 202.
    for (const notification of ['{"jsonrpc":"2.0","method":"notifications/initialized","params":{"x":1,"x":2}}', '{"jsonrpc":"2.0","method":"notifications/initialized","params":{"__proto__":{"x":1}}}']) {
      const answer = await send(agentMcpToken, notification);
      expect([answer.status, await answer.json()], notification).toEqual([400, { jsonrpc: '2.0', id: null, error: { code: -32602, message: expect.stringMatching(/^Invalid params for notifications\/initialized: params\./) } }]);
    }
    expect(await nameOf()).toBe(nameBefore);
    // Nesting past 128 levels inside the params is -32602 too, as REST's 400 (found from outside: -32600 naming params).
    const deep = await send(agentMcpToken, `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"whoami","arguments":{"x":${'['.repeat(200)}${']'.repeat(200)}}}}`);
    expect([deep.status, await deep.json()]).toEqual([
      400,
      { jsonrpc: '2.0', id: 10, error: { code: -32602, message: 'Invalid params for tools/call: params.arguments.x nests objects and arrays more than 128 levels deep; a JSON body may nest 128 at most' } },
    ]);
  });

  it('an unknown method is 404 with -32601', async () => {
    const res = await rawModern(world.url, 'nope/nothing', {}, { token: agentMcpToken });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe(-32601);
  });

  it('an unknown method on a legacy revision is 200 with one server-sent event holding -32601, and the OpenAPI document says so for each era (found from outside: it stated the 2026-07-28 form for both)', async () => {
    for (const version of [LEGACY, '2025-06-18', undefined]) {
      const res = await fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, ...(version ? { 'mcp-protocol-version': version } : {}) },
        body: '{"jsonrpc":"2.0","id":1,"method":"nope/nothing"}',
      });
      expect([res.status, res.headers.get('content-type')], version).toEqual([200, 'text/event-stream']);
      expect(await res.text(), version).toContain('data: {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}');
    }
    const post = (await world.api('GET', '/openapi.json')).body.paths['/mcp'].post;
    expect(post.description).toContain('On 2026-07-28 the answer is one JSON object');
    expect(post.description).toContain('On the legacy revisions (2025-11-25 and earlier, and a request naming none) every answer is one server-sent event with 200');
    expect(post.description).toContain('an unknown method is 404 with -32601 on 2026-07-28, and 200 with -32601 on the legacy revisions');
    expect(post.description).not.toContain('404 with -32601 unknown method');
    expect(post.responses['404'].description).toBe('on 2026-07-28 only: a JSON-RPC error, unknown method (-32601); a legacy revision answers it 200 in one server-sent event');
    expect(post.responses['415'].description).toMatch(/^a JSON-RPC error \(-32000\)/);
    // Its credentials as they are admitted: an agent by our OAuth token (svc:agent), never by an identity token, which
    // the agentToken scheme also names (found from outside: a generated client sent one and met 401).
    expect(post.security).toEqual([{ humanSession: [] }, { ownerOAuth: ['svc:agent'] }, { ownerOAuth: ['svc:owner'] }]);
  });

  it('a body over the size limit is 413 with a JSON-RPC error on either era, as the MCP SDK answers it, and the OpenAPI document says so (found from outside: a problem body)', async () => {
    const limit = world.gw.gateway.config.bodyLimitBytes;
    const padded = (size: number) => {
      const head = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":"';
      return `${head}${'x'.repeat(size - head.length - 4)}"}}}`;
    };
    for (const version of [LEGACY, MODERN]) {
      const res = await fetch(mcpUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': version, 'mcp-method': 'ping' },
        body: padded(limit + 1),
      });
      expect([res.status, res.headers.get('content-type')?.split(';')[0], res.headers.get('cache-control')], version).toEqual([413, 'application/json', 'no-store']);
      expect(await res.json(), version).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Payload Too Large: the request body exceeds the size limit' } });
    }
    // At the limit it is read and runs.
    const atLimit = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': LEGACY },
      body: padded(limit),
    });
    expect(atLimit.status).toBe(200);
    await atLimit.text();
    const post = (await world.api('GET', '/openapi.json')).body.paths['/mcp'].post;
    expect(post.responses['413'].description).toMatch(/^a JSON-RPC error \(-32000\)/);
    expect(Object.keys(post.responses['413'].content)).toEqual(['application/json']);
  });

  it('a body it would have to decode is 415 with a JSON-RPC error on either era, and nothing runs: a Content-Encoding, or a charset other than UTF-8 (found from outside: a br-labelled body was read as plain)', async () => {
    const nameOf = async () => (await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.name as string;
    const nameBefore = await nameOf();
    const params = { name: 'update_agent', arguments: { id: agent.id, name: 'renamed-through-an-encoded-body' } };
    const eras: Array<[Record<string, string>, string]> = [
      [{ 'mcp-protocol-version': LEGACY }, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params })],
      [{ 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'update_agent' }, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { ...params, _meta: envelope() } })],
    ];
    for (const [eraHeaders, call] of eras) {
      const refusals: Array<[Record<string, string>, string | Uint8Array<ArrayBuffer>, string]> = [
        [{ 'content-encoding': 'br' }, call, 'Unsupported Media Type: request bodies are read as sent, not decoded: send it without Content-Encoding (br)'],
        [{ 'content-encoding': 'gzip' }, new Uint8Array(gzipSync(call)), 'Unsupported Media Type: request bodies are read as sent, not decoded: send it without Content-Encoding (gzip)'],
        [{ 'content-type': 'application/json; charset=iso-8859-1' }, call, 'Unsupported Media Type: JSON is UTF-8 (RFC 8259 §8.1): charset=iso-8859-1 is not taken'],
      ];
      for (const [headers, body, message] of refusals) {
        const res = await fetch(mcpUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${agent.ownerToken}`, ...eraHeaders, ...headers },
          body,
        });
        const label = JSON.stringify({ ...eraHeaders, ...headers });
        expect([res.status, res.headers.get('content-type')?.split(';')[0], await res.text()], label).toEqual([415, 'application/json', JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } })]);
      }
    }
    expect(await nameOf()).toBe(nameBefore);
    // UTF-8 named, and the identity coding, are read as sent.
    const ping = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-8', 'content-encoding': 'identity', accept: 'application/json, text/event-stream', authorization: `Bearer ${agentMcpToken}`, 'mcp-protocol-version': LEGACY },
      body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    });
    expect(ping.status).toBe(200);
  });

  it('GET and DELETE answer 405 with Allow: POST', async () => {
    for (const method of ['GET', 'DELETE']) {
      const res = await fetch(mcpUrl, { method, headers: { authorization: `Bearer ${agentMcpToken}`, accept: 'text/event-stream' } });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow')).toBe('POST');
    }
  });

  it('a Host or Origin naming another host is refused with 403 (DNS rebinding)', async () => {
    const badOrigin = await rawModern(world.url, 'server/discover', {}, { token: agentMcpToken, headers: { origin: 'http://evil.example.com' } });
    expect(badOrigin.status).toBe(403);
    const goodOrigin = await rawModern(world.url, 'server/discover', {}, { token: agentMcpToken, headers: { origin: world.url } });
    expect(goodOrigin.status).toBe(200);
    // Another name of this machine: refused, saying which URL to connect to (found from outside: it read as a credential refused).
    const port = new URL(world.url).port;
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const request = httpRequest(
        { host: '127.0.0.1', port, path: '/mcp', method: 'POST', headers: { host: `localhost:${port}`, authorization: `Bearer ${agentMcpToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' } },
        (response) => {
          let body = '';
          response.on('data', (chunk: Buffer) => (body += chunk.toString()));
          response.on('end', () => resolve({ status: response.statusCode!, body }));
        },
      );
      request.on('error', reject);
      request.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }));
    });
    expect(answer.status).toBe(403);
    expect(answer.body).toContain(`(Invalid Host: localhost): connect to ${world.url}/mcp, the gateway's base URL (ACG_BASE_URL)`);
  });

  it('a body over the size limit is 413 before any parsing', async () => {
    const res = await fetch(mcpUrl, {
      method: 'POST',
      headers: { authorization: `Bearer ${agentMcpToken}`, 'content-type': 'application/json' },
      body: 'x'.repeat(world.gw.config.bodyLimitBytes + 1),
    });
    expect(res.status).toBe(413);
  });
});

describe('tools through the official client', () => {
  let modern: Client;
  let legacy: Client;
  let owner: Client;

  beforeAll(async () => {
    modern = await connect(world.url, agentMcpToken, 'modern');
    legacy = await connect(world.url, agentMcpToken, 'legacy');
    owner = await connect(world.url, ownerMcpToken, 'modern');
  });

  afterAll(async () => {
    await Promise.all([modern?.close(), legacy?.close(), owner?.close()]);
  });

  it('the same token serves a 2026-07-28 client and a legacy 2025-11-25 session', async () => {
    expect(modern.getProtocolEra()).toBe('modern');
    expect(legacy.getProtocolEra()).toBe('legacy');
    expect(legacy.getNegotiatedProtocolVersion()).toBe(LEGACY);
    const [a, b] = await Promise.all([modern.listTools(), legacy.listTools()]);
    expect(a.tools.map((t) => t.name).sort()).toEqual(AGENT_TOOLS);
    expect(b.tools.map((t) => t.name).sort()).toEqual(AGENT_TOOLS);
  });

  it('whoami shows the agent, its balance and its lots', async () => {
    const result = structured(await modern.callTool({ name: 'whoami', arguments: {} }));
    expect(result).toMatchObject({ kind: 'agent', credential: 'oauth', agent: { id: agent.id, caps: { perHoldUc: null } } });
    expect(result.balance).toMatchObject({ availableUc: '4750000', heldUc: '250000' });
    expect(result.lots).toHaveLength(1);
  });

  it('list_offers lists only offers in the categories the agent may buy', async () => {
    const result = structured(await legacy.callTool({ name: 'list_offers', arguments: {} }));
    expect(result.offers.map((o: { category: string }) => o.category)).toEqual(['books']);
    expect(result.hasMore).toBe(false);
  });

  it('get_hold reads its own hold; an unknown id is a tool error with the HTTP problem body', async () => {
    expect(structured(await modern.callTool({ name: 'get_hold', arguments: { id: holdId } }))).toMatchObject({ id: holdId, state: 'held', amountUc: '250000' });
    const missing = await modern.callTool({ name: 'get_hold', arguments: { id: 'hold_nope' } });
    expect(missing.isError).toBe(true);
    const http = await world.api('GET', '/v1/redemptions/hold_nope', { token: agent.token });
    expect(structured(missing)).toEqual(http.body);
  });

  it('get_intent of an unknown intent is not_found', async () => {
    const result = await modern.callTool({ name: 'get_intent', arguments: { id: 'int_nope' } });
    expect(result.isError).toBe(true);
    expect(structured(result).code).toBe('not_found');
  });

  it('arguments that break the input schema are refused before the tool runs, with the problem body of every other refusal', async () => {
    const result = await modern.callTool({ name: 'list_offers', arguments: { limit: 0 } });
    expect(result.isError).toBe(true);
    expect(structured(result)).toMatchObject({ status: 400, code: 'invalid_input', detail: 'arguments/limit must be >= 1', errors: [{ path: 'arguments/limit', message: 'must be >= 1' }] });
  });

  // Found from outside: a detail alone, its member dotted (arguments.agentId), where every other refusal names it arguments/agentId with errors.
  it('text that cannot be stored is refused naming its member as the schema does, with errors, as the HTTP route refuses it', async () => {
    const result = await owner.callTool({ name: 'update_agent', arguments: { id: agent.id, name: 'Scout\u0007' } });
    expect(result.isError).toBe(true);
    const message = expect.stringMatching(/^holds a control character/);
    expect(structured(result)).toMatchObject({ status: 400, code: 'invalid_input', detail: expect.stringMatching(/^arguments\/name holds a control character/), errors: [{ path: 'arguments/name', message }] });
    const http = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { name: 'Scout\u0007' } });
    expect(http.body).toMatchObject({ code: 'invalid_input', detail: expect.stringMatching(/^body\/name holds a control character/), errors: [{ path: 'body/name', message }] });
  });

  // Found from outside: the tool said `must be "asc"` for DESC, where the HTTP route names both choices.
  it('a value outside a choice of literals is said with every choice, as the HTTP route says it', async () => {
    const result = await owner.callTool({ name: 'list_agent_holds', arguments: { agentId: agent.id, order: 'DESC' } });
    expect(result.isError).toBe(true);
    const http = await world.api('GET', `/v1/owner/agents/${agent.id}/holds?order=DESC`, { token: agent.ownerToken });
    expect(http.body.detail).toBe('querystring/order must be one of "asc", "desc"');
    expect(structured(result)).toMatchObject({ status: 400, code: 'invalid_input', detail: 'arguments/order must be one of "asc", "desc"', errors: [{ path: 'arguments/order', message: 'must be one of "asc", "desc"' }] });
  });

  it('an agent cannot call an owner-only tool', async () => {
    await expect(modern.callTool({ name: 'list_agents', arguments: {} })).rejects.toThrow(/list_agents/);
    await expect(modern.callTool({ name: 'freeze_agent', arguments: { id: agent.id } })).rejects.toThrow(/freeze_agent/);
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken })).body.status).toBe('active');
  });

  it('an owner lists its agents and their holds; another owner\'s agent is not_found', async () => {
    const agents = structured(await owner.callTool({ name: 'list_agents', arguments: {} }));
    expect(agents.agents.map((a: { id: string }) => a.id)).toEqual([agent.id]);
    const holds = structured(await owner.callTool({ name: 'list_agent_holds', arguments: { agentId: agent.id } }));
    expect(holds.redemptions.map((r: { id: string }) => r.id)).toEqual([holdId]);
    const stranger = await world.createAgent('someone-else@example.com', 'stranger-agent');
    const refused = await owner.callTool({ name: 'list_agent_holds', arguments: { agentId: stranger.id } });
    expect(refused.isError).toBe(true);
    expect(structured(refused).code).toBe('not_found');
  });

  it("a read's refusal reaches the 1.x SDK's client as a tool error with the problem body, not as a broken output schema (found from outside)", async () => {
    // That client checks structured content against the tool's output schema even on an error result, and threw
    // -32602 "Structured content does not match the tool's output schema" for a problem body there.
    const legacy = new LegacyClient({ name: 'sdk-1', version: '1' });
    await legacy.connect(new LegacyTransport(new URL(mcpUrl), { requestInit: { headers: { authorization: `Bearer ${ownerMcpToken}` } } }));
    try {
      await legacy.listTools(); // the client learns each tool's output schema
      for (const [args, code] of [
        [{ agentId: agent.id, limit: 0 }, 'invalid_input'],
        [{ agentId: 'agt_nope' }, 'not_found'],
      ] as const) {
        const refused = await legacy.callTool({ name: 'list_agent_holds', arguments: args });
        expect([refused.isError, refused.structuredContent]).toEqual([true, undefined]);
        expect(toolBody(refused)).toMatchObject({ code, status: code === 'not_found' ? 404 : 400 });
      }
      const read = await legacy.callTool({ name: 'list_agent_holds', arguments: { agentId: agent.id } });
      expect((read.structuredContent as { redemptions: unknown[] }).redemptions).toHaveLength(1);
    } finally {
      await legacy.close();
    }
  });
});
