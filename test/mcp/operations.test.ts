// The tools that change state run the operations the HTTP routes run: the same restrictions and codes,
// and one Idempotency-Key space across both faces.
import type { Client } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, openShop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, toolBody } from './helpers.ts';

let world: World;
let offerId: string;
const ownerEmail = 'mcp-ops-owner@example.com';

beforeAll(async () => {
  world = await startWorld();
  const shop = await openShop(world);
  offerId = (await shop.offer({ priceUc: '400000', category: 'books' })).id;
});

afterAll(async () => {
  await world?.close();
});

function structured(result: unknown): any {
  return toolBody(result);
}

async function holdCount(agentId: string): Promise<number> {
  const { rows } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*)::bigint AS n FROM holds WHERE agent_id = $1', [agentId]);
  return Number(rows[0]!.n);
}

/** A fresh agent with its own MCP clients (agent token and the owner's human session). */
async function agentWithClients(subject: string, creditUc: bigint, settings?: Record<string, unknown>): Promise<{ id: string; token: string; ownerToken: string; client: Client; owner: Client }> {
  const agent = await world.createAgent(ownerEmail, subject, settings);
  if (creditUc > 0n) await grant(world, agent.id, creditUc);
  const mcpToken = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`);
  return { ...agent, client: await connect(world.url, mcpToken, 'modern'), owner: await connect(world.url, agent.ownerToken, 'legacy') };
}

describe('idempotency across faces', () => {
  it('a mint over MCP, retried over MCP and then over HTTP with the same key, makes one hold', async () => {
    const agent = await agentWithClients('idem-agent', 5_000_000n);
    const args = { offerId, idempotencyKey: 'mint-across-faces-1' };
    const first = await agent.client.callTool({ name: 'mint_voucher', arguments: args });
    expect(first.isError).toBeFalsy();
    const holdId = structured(first).redemption.id;
    const again = await agent.client.callTool({ name: 'mint_voucher', arguments: args });
    expect(structured(again).redemption.id).toBe(holdId);
    const http = await world.api('POST', '/v1/vouchers', { token: agent.token, key: 'mint-across-faces-1', body: { offerId } });
    expect(http.status).toBe(200);
    expect(http.headers.get('idempotent-replayed')).toBe('true');
    expect(http.body.redemption.id).toBe(holdId);
    expect(await holdCount(agent.id)).toBe(1);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  // Found from outside (bb81): HTTP's validator fills a body's defaults (releaseHolds: false) and MCP's check did not,
  // so the same freeze was two requests to the key: the retry over the other face answered idempotency_key_reused.
  it('a request leaving out a member with a default is the same request over either face: a freeze over HTTP, then over MCP, and the other way', async () => {
    const agent = await agentWithClients('idem-freeze-agent', 0n);
    const freezes = async () => Number((await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*)::bigint AS n FROM agent_freezes WHERE agent_id = $1', [agent.id])).rows[0]!.n);
    const http = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: 'freeze-across-faces-1' });
    expect(http.status).toBe(200);
    const mcp = await agent.owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id, idempotencyKey: 'freeze-across-faces-1' } });
    expect(mcp.isError).toBeFalsy();
    expect(structured(mcp)).toEqual(http.body);
    await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken, key: 'unfreeze-across-faces-1', body: {} });
    const first = await agent.owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id, idempotencyKey: 'freeze-across-faces-2' } });
    expect(first.isError).toBeFalsy();
    for (const body of [undefined, {}, { releaseHolds: false }]) {
      const again = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken, key: 'freeze-across-faces-2', body });
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body).toEqual(structured(first));
    }
    const explicit = await agent.owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id, releaseHolds: false, idempotencyKey: 'freeze-across-faces-2' } });
    expect(structured(explicit)).toEqual(structured(first));
    // Another request under the key is still refused.
    const other = await agent.owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id, releaseHolds: true, idempotencyKey: 'freeze-across-faces-2' } });
    expect(structured(other).code).toBe('idempotency_key_reused');
    expect(await freezes()).toBe(2);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  // Found from outside (bb82): the HTTP face's validator fills the mail `limit` inside the chosen branch of execute's
  // discriminated oneOf, behind a $ref; a fill of our own missed it, so the retry over MCP was idempotency_key_reused.
  it("an execution leaving out its action's defaulted input member is one request over either face", async () => {
    for (const [index, order] of (['http-first', 'mcp-first'] as const).entries()) {
      // Without credit, with a mail connector and its inbox allowed: the execution's answer is a retained intent, found by its key.
      const agent = await agentWithClients(`idem-exec-agent-${index}`, 0n, { inboxAllowlist: ['INBOX'] });
      const connector = { host: 'imap.example.com', port: 993, tls: 'implicit', username: 'alice', password: 'correct horse battery staple' };
      expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mail-connector`, { token: agent.ownerToken, body: connector })).status).toBe(200);
      const key = `exec-across-faces-${index}`;
      const request = { serviceId: 'mail', action: 'messages.list', input: { inbox: 'INBOX' } };
      const viaHttp = () => world.api('POST', '/v1/services/execute', { token: agent.token, key, body: request });
      const viaMcp = async () => structured(await agent.client.callTool({ name: 'execute_service', arguments: { ...request, idempotencyKey: key } }));
      const [first, second] = order === 'http-first' ? [(await viaHttp()).body, await viaMcp()] : [await viaMcp(), (await viaHttp()).body];
      // Credit short and no approval provider here: the intent is retained under the key (retried with it, it runs once credit is added).
      expect(first.intent, JSON.stringify(first)).toEqual({ serviceId: 'mail', action: 'messages.list', input: { inbox: 'INBOX', limit: 20 }, agentId: agent.id });
      expect(second).toEqual(first);
      // A really different request under the key is still another request.
      const other = structured(await agent.client.callTool({ name: 'execute_service', arguments: { ...request, input: { inbox: 'INBOX', limit: 5 }, idempotencyKey: key } }));
      expect(other.code).toBe('idempotency_key_reused');
      await Promise.all([agent.client.close(), agent.owner.close()]);
    }
  });

  it('the same key with another input is idempotency_key_reused, over MCP as over HTTP', async () => {
    const agent = await agentWithClients('idem-agent-2', 5_000_000n);
    await agent.client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'reuse-1' } });
    const changed = await agent.client.callTool({ name: 'mint_voucher', arguments: { offerId, maxUc: '900000', idempotencyKey: 'reuse-1' } });
    expect(changed.isError).toBe(true);
    expect(structured(changed).code).toBe('idempotency_key_reused');
    expect(await holdCount(agent.id)).toBe(1);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });
});

describe('per-tool restrictions', () => {
  it("an agent, whose execute_service lists no agentId, may still send its own, and another agent's is refused, as over HTTP", async () => {
    const agent = await agentWithClients('self-naming-agent', 0n, { inboxAllowlist: ['INBOX'] });
    const other = await world.createAgent(ownerEmail, 'self-naming-other');
    const connector = { host: 'imap.example.com', port: 993, tls: 'implicit', username: 'alice', password: 'correct horse battery staple' };
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mail-connector`, { token: agent.ownerToken, body: connector })).status).toBe(200);
    const request = { serviceId: 'mail', action: 'messages.list', input: { inbox: 'INBOX' } };
    // Credit short and no approval provider here: the request is retained for the agent it names, itself.
    const own = structured(await agent.client.callTool({ name: 'execute_service', arguments: { ...request, agentId: agent.id, idempotencyKey: 'self-named-1' } }));
    expect(own.intent, JSON.stringify(own)).toMatchObject({ serviceId: 'mail', action: 'messages.list', agentId: agent.id });
    const refused = structured(await agent.client.callTool({ name: 'execute_service', arguments: { ...request, agentId: other.id, idempotencyKey: 'self-named-2' } }));
    const http = await world.api('POST', '/v1/services/execute', { token: agent.token, key: 'self-named-3', body: { ...request, agentId: other.id } });
    expect([refused.status, refused.code]).toEqual([http.status, http.body.code]);
    expect(refused.status).toBeGreaterThanOrEqual(400);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('an owner executing without agentId gets agent_required, as over HTTP', async () => {
    const agent = await agentWithClients('owner-exec-agent', 5_000_000n);
    const body = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } };
    const result = await agent.owner.callTool({ name: 'execute_service', arguments: { ...body, idempotencyKey: 'exec-no-agent' } });
    expect(result.isError).toBe(true);
    const http = await world.api('POST', '/v1/services/execute', { token: agent.ownerToken, key: 'exec-no-agent-http', body });
    expect(http.status).toBe(400);
    expect(structured(result)).toEqual(http.body);
    expect(structured(result).code).toBe('agent_required');
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('a frozen agent gets FROZEN and no hold; unfreezing lets it mint again', async () => {
    const agent = await agentWithClients('frozen-agent', 5_000_000n);
    const frozen = await agent.owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id } });
    expect(structured(frozen).status).toBe('frozen');
    const refused = await agent.client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'frozen-1' } });
    expect(refused.isError).toBe(true);
    expect(structured(refused)).toMatchObject({ code: 'FROZEN', status: 403 });
    expect(await holdCount(agent.id)).toBe(0);
    await agent.owner.callTool({ name: 'unfreeze_agent', arguments: { id: agent.id } });
    const minted = await agent.client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'frozen-2' } });
    expect(structured(minted).redemption.state).toBe('held');
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('insufficient credit is INSUFFICIENT_CREDITS with no hold', async () => {
    const agent = await agentWithClients('poor-agent', 100_000n);
    const result = await agent.client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'poor-1' } });
    expect(result.isError).toBe(true);
    expect(structured(result)).toMatchObject({ code: 'INSUFFICIENT_CREDITS', status: 402 });
    expect(await holdCount(agent.id)).toBe(0);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('an execution the credit does not cover is retained; get_intent reads it back, another agent cannot', async () => {
    const agent = await agentWithClients('intent-agent', 0n);
    const body = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } };
    const refused = await agent.client.callTool({ name: 'execute_service', arguments: { ...body, idempotencyKey: 'intent-1' } });
    expect(refused.isError).toBe(true);
    expect(structured(refused)).toMatchObject({ code: 'link_configuration_required', status: 503, charged: false });
    const intentId = structured(refused).intentId as string;
    const intent = structured(await agent.client.callTool({ name: 'get_intent', arguments: { id: intentId } }));
    expect(intent).toMatchObject({ id: intentId, state: 'pending', intent: { ...body, agentId: agent.id }, priceUc: '1000000', executionId: null });
    const other = await agentWithClients('intent-other-agent', 0n);
    const hidden = await other.client.callTool({ name: 'get_intent', arguments: { id: intentId } });
    expect(structured(hidden).code).toBe('not_found');
    // The owner, told to read it with get_intent when it executes for its agent, has the tool too (found from outside).
    expect(structured(await agent.owner.callTool({ name: 'get_intent', arguments: { id: intentId } }))).toEqual(intent);
    expect(await holdCount(agent.id)).toBe(0);
    await Promise.all([agent.client.close(), agent.owner.close(), other.client.close(), other.owner.close()]);
  });

  it("execute without idempotencyKey is refused naming the argument, not an HTTP header (found from outside)", async () => {
    const agent = await agentWithClients('keyless-exec', 5_000_000n);
    const body = { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } };
    const result = await agent.client.callTool({ name: 'execute_service', arguments: body });
    expect(result.isError).toBe(true);
    expect(structured(result)).toMatchObject({ code: 'invalid_input', detail: 'send the argument `idempotencyKey` (a UUID is a good key)' });
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('a mint without idempotencyKey is refused before anything happens, idempotency_required as over HTTP (found from outside: invalid_input)', async () => {
    const agent = await agentWithClients('keyless-agent', 5_000_000n);
    const result = await agent.client.callTool({ name: 'mint_voucher', arguments: { offerId } });
    expect(result.isError).toBe(true);
    expect(structured(result)).toMatchObject({ code: 'idempotency_required', title: 'This operation requires an idempotency key', detail: 'send the argument `idempotencyKey` (a UUID is a good key)' });
    // The published input schema still says the argument is required.
    const { tools } = await agent.client.listTools();
    expect(tools.find((tool) => tool.name === 'mint_voucher')?.inputSchema.required).toContain('idempotencyKey');
    expect(await holdCount(agent.id)).toBe(0);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('an owner registers an agent and sets its caps; a cap then refuses a larger mint with CAP_EXCEEDED', async () => {
    const agent = await agentWithClients('capped-agent', 5_000_000n);
    const registered = await agent.owner.callTool({
      name: 'register_agent',
      arguments: { name: 'Second', identity: { issuer: world.agentIssuer.issuer, subject: 'second-agent' }, idempotencyKey: 'register-second' },
    });
    expect(structured(registered)).toMatchObject({ name: 'Second', status: 'active' });
    const updated = await agent.owner.callTool({ name: 'update_agent', arguments: { id: agent.id, caps: { perHoldUc: '300000' } } });
    expect(structured(updated).caps.perHoldUc).toBe('300000');
    const refused = await agent.client.callTool({ name: 'mint_voucher', arguments: { offerId, idempotencyKey: 'capped-1' } });
    expect(structured(refused).code).toBe('CAP_EXCEEDED');
    expect(await holdCount(agent.id)).toBe(0);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });
});

describe('a refusal of one member, by a rule the schema cannot state', () => {
  const NO_MERCHANT = '"mer_nosuchmerchant" names no merchant (an id names a registered merchant; a domain may be named before its merchant registers)';

  it('names the member under arguments/, in detail and errors, as a refusal by the schema does; HTTP names it under body/ (found from outside: a bare merchants/deny/0, and no errors)', async () => {
    const agent = await agentWithClients('member-refusal-agent', 0n);
    const merchants = { allow: null, deny: ['mer_nosuchmerchant'] };
    const mandate = structured(await agent.owner.callTool({ name: 'set_mandate', arguments: { id: agent.id, merchants, idempotencyKey: 'member-refusal-1' } }));
    expect(mandate).toMatchObject({ code: 'invalid_input', status: 400, detail: `arguments/merchants/deny/0 ${NO_MERCHANT}`, errors: [{ path: 'arguments/merchants/deny/0', message: NO_MERCHANT }] });
    const http = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: 'member-refusal-2', body: { merchants } });
    expect([http.status, http.body.detail, http.body.errors]).toEqual([400, `body/merchants/deny/0 ${NO_MERCHANT}`, [{ path: 'body/merchants/deny/0', message: NO_MERCHANT }]]);
    // A budget's merchant, and a service an agent's registration names, the same way.
    const budget = structured(await agent.owner.callTool({
      name: 'set_mandate',
      arguments: { id: agent.id, budgets: [{ id: 'a', limitUc: '1', period: 'day', merchantId: 'mer_nosuchmerchant' }], idempotencyKey: 'member-refusal-3' },
    }));
    expect(budget.errors).toEqual([{ path: 'arguments/budgets/0/merchantId', message: '"mer_nosuchmerchant" names no merchant: a budget names its merchant by id (mer_…)' }]);
    const registered = structured(await agent.owner.callTool({
      name: 'register_agent',
      arguments: { name: 'Teleporter', identity: { issuer: world.agentIssuer.issuer, subject: 'member-refusal-teleporter' }, allowedServices: ['teleport'], idempotencyKey: 'member-refusal-4' },
    }));
    expect(registered).toMatchObject({ code: 'invalid_input', detail: expect.stringMatching(/^arguments\/allowedServices\/0 "teleport" is not a built-in service/), errors: [{ path: 'arguments/allowedServices/0' }] });
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('a stored refusal names the member as the face that replays it does: set over MCP, replayed over HTTP, and the other way', async () => {
    const agent = await agentWithClients('member-replay-agent', 0n);
    const merchants = { allow: null, deny: ['mer_nosuchmerchant'] };
    const viaMcp = () => agent.owner.callTool({ name: 'set_mandate', arguments: { id: agent.id, merchants, idempotencyKey: 'member-replay-1' } });
    const viaHttp = () => world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: 'member-replay-1', body: { merchants } });
    expect(structured(await viaMcp()).errors).toEqual([{ path: 'arguments/merchants/deny/0', message: NO_MERCHANT }]);
    const replayed = await viaHttp();
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    expect([replayed.status, replayed.body.detail, replayed.body.errors]).toEqual([400, `body/merchants/deny/0 ${NO_MERCHANT}`, [{ path: 'body/merchants/deny/0', message: NO_MERCHANT }]]);
    expect(structured(await viaMcp())).toMatchObject({ detail: `arguments/merchants/deny/0 ${NO_MERCHANT}`, errors: [{ path: 'arguments/merchants/deny/0', message: NO_MERCHANT }] });
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it("a delegate's mandate is named where the registration holds it, under mandate/", async () => {
    const agent = await agentWithClients('member-parent-agent', 0n);
    const allowed = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, { token: agent.ownerToken, key: 'member-parent-1', body: { delegation: { allowed: true, maxDepth: 1 } } });
    expect(allowed.status, JSON.stringify(allowed.body)).toBe(200);
    const delegate = (subject: string) => ({ name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, mandate: { merchants: { deny: ['mer_nosuchmerchant'] } } });
    const mcp = structured(await agent.client.callTool({ name: 'create_delegate', arguments: { id: agent.id, ...delegate('member-child-1'), idempotencyKey: 'member-child-1' } }));
    expect(mcp).toMatchObject({ code: 'invalid_input', detail: `arguments/mandate/merchants/deny/0 ${NO_MERCHANT}`, errors: [{ path: 'arguments/mandate/merchants/deny/0', message: NO_MERCHANT }] });
    const http = await world.api('POST', `/v1/agents/${agent.id}/delegates`, { token: agent.token, key: 'member-child-2', body: delegate('member-child-2') });
    expect([http.status, http.body.detail, http.body.errors]).toEqual([400, `body/mandate/merchants/deny/0 ${NO_MERCHANT}`, [{ path: 'body/mandate/merchants/deny/0', message: NO_MERCHANT }]]);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it('update_agent naming nothing to change is refused with errors naming the arguments, as PATCH with an empty body names the body', async () => {
    const agent = await agentWithClients('member-nothing-agent', 0n);
    const nothing = structured(await agent.owner.callTool({ name: 'update_agent', arguments: { id: agent.id } }));
    expect(nothing).toMatchObject({ code: 'invalid_input', detail: expect.stringMatching(/^arguments names nothing to change: name at least one of name, /), errors: [{ path: 'arguments', message: expect.stringMatching(/^names nothing to change/) }] });
    const http = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: {} });
    expect([http.status, http.body.code, http.body.errors]).toEqual([400, 'invalid_input', [{ path: 'body', message: expect.any(String) }]]);
    expect(http.body.detail).toBe(`body ${http.body.errors[0].message}`);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it("a mint's: maxAmount differing from maxUc, before its key; an offerId naming no offer, in its batch, stored and replayed as the face that replays it names it", async () => {
    const agent = await agentWithClients('member-mint-agent', 5_000_000n);
    const limits = { offerId, maxUc: '500000', maxAmount: '600000' };
    const DIFFERS = '(600000) differs from maxUc (500000), the same limit under its newer name; send one, or equal values';
    const mcp = structured(await agent.client.callTool({ name: 'mint_voucher', arguments: { ...limits, idempotencyKey: 'member-mint-1' } }));
    expect(mcp).toMatchObject({ code: 'invalid_input', status: 400, detail: `arguments/maxAmount ${DIFFERS}`, errors: [{ path: 'arguments/maxAmount', message: DIFFERS }] });
    const http = await world.api('POST', '/v1/vouchers', { token: agent.token, key: 'member-mint-2', body: limits });
    expect([http.status, http.body.detail, http.body.errors]).toEqual([400, `body/maxAmount ${DIFFERS}`, [{ path: 'body/maxAmount', message: DIFFERS }]]);
    const NO_OFFER = '"off_nosuchoffer" names no active offer of a verified merchant';
    const missing = { offerId: 'off_nosuchoffer' };
    const first = structured(await agent.client.callTool({ name: 'mint_voucher', arguments: { ...missing, idempotencyKey: 'member-mint-3' } }));
    expect(first).toMatchObject({ code: 'invalid_input', detail: `arguments/offerId ${NO_OFFER}`, errors: [{ path: 'arguments/offerId', message: NO_OFFER }] });
    const replayed = await world.api('POST', '/v1/vouchers', { token: agent.token, key: 'member-mint-3', body: missing });
    expect([replayed.status, replayed.headers.get('idempotent-replayed'), replayed.body.detail, replayed.body.errors]).toEqual([400, 'true', `body/offerId ${NO_OFFER}`, [{ path: 'body/offerId', message: NO_OFFER }]]);
    expect(await holdCount(agent.id)).toBe(0);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });

  it("an execution's, of a member of its action's input: under arguments/input/, as HTTP names it under body/input/", async () => {
    const agent = await agentWithClients('member-exec-agent', 5_000_000n, { inboxAllowlist: ['INBOX'] });
    const connector = { host: 'imap.example.com', port: 993, tls: 'implicit', username: 'alice', password: 'correct horse battery staple' };
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mail-connector`, { token: agent.ownerToken, body: connector })).status).toBe(200);
    // A cursor of another inbox, refused by the action's clearance before any hold.
    const request = { serviceId: 'mail', action: 'messages.list', input: { inbox: 'INBOX', cursor: Buffer.from('7.5.Other').toString('base64url') } };
    const mcp = structured(await agent.client.callTool({ name: 'execute_service', arguments: { ...request, idempotencyKey: 'member-exec-1' } }));
    expect(mcp).toMatchObject({ code: 'invalid_input', detail: 'arguments/input/cursor is not valid for this inbox', errors: [{ path: 'arguments/input/cursor', message: 'is not valid for this inbox' }], charged: false });
    const http = await world.api('POST', '/v1/services/execute', { token: agent.token, key: 'member-exec-2', body: request });
    expect([http.status, http.body.detail, http.body.errors]).toEqual([400, 'body/input/cursor is not valid for this inbox', [{ path: 'body/input/cursor', message: 'is not valid for this inbox' }]]);
    expect(await holdCount(agent.id)).toBe(0);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });
});

describe('text the gateway cannot store or show', () => {
  // The platform's text rule (src/platform/http/text-guard.ts) holds for tool arguments as for every HTTP body.
  async function agentsNamed(ownerId: string): Promise<string[]> {
    const { rows } = await world.gw.gateway.db.query<{ name: string }>('SELECT name FROM agents WHERE owner_id = $1 ORDER BY name', [ownerId]);
    return rows.map((row) => row.name);
  }

  it('a NUL, a lone surrogate or a bidi control in any argument is invalid_input, as over HTTP, and nothing is stored', async () => {
    const agent = await agentWithClients('text-guard-agent', 0n);
    const ownerId = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id as string;
    const before = await agentsNamed(ownerId);
    const calls = [
      { name: 'update_agent', arguments: { id: agent.id, name: 'nul\u0000name' } },
      { name: 'update_agent', arguments: { id: agent.id, name: 'Invoice \u202Efdp.exe' } },
      { name: 'update_agent', arguments: { id: agent.id, inboxAllowlist: ['in\u2066box'] } },
      { name: 'register_agent', arguments: { name: 'Lone \uD800 surrogate', identity: { issuer: world.agentIssuer.issuer, subject: 'lone' }, idempotencyKey: 'text-guard-register' } },
      { name: 'register_agent', arguments: { name: 'Fine', identity: { issuer: world.agentIssuer.issuer, subject: 'x\uDC00y' }, idempotencyKey: 'text-guard-register-2' } },
      { name: 'list_agents', arguments: { startingAfter: 'agt_\u0000' } },
    ];
    for (const call of calls) {
      const result = await agent.owner.callTool(call);
      expect(result.isError, JSON.stringify(call)).toBe(true);
      expect(structured(result), JSON.stringify(call)).toMatchObject({ status: 400, code: 'invalid_input' });
    }
    expect(await agentsNamed(ownerId)).toEqual(before);
    const http = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { name: 'Invoice \u202Efdp.exe' } });
    expect([http.status, http.body.code]).toEqual([400, 'invalid_input']);
    await Promise.all([agent.client.close(), agent.owner.close()]);
  });
});
