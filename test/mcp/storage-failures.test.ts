// What /mcp answers when the database fails it: never a 500. A failure before any tool runs (reading what the caller
// may be listed) is the route's 503 storage_unavailable with Retry-After, as over HTTP; one inside a tool is that
// tool's storage_unavailable error, with retryAfterS, not internal_error.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdRows } from '../support/row-locks.ts';
import { onPostgres } from '../support/database.ts';
import { startWorld, type World } from '../support/world.ts';
import { connect, toolBody } from './helpers.ts';

let world: World;

beforeAll(async () => {
  world = await startWorld({ env: { ACG_DB_LOCK_TIMEOUT_MS: '300' } });
});

afterAll(async () => {
  await world?.close().catch(() => {});
});

describe('/mcp when the database fails', () => {
  it.runIf(onPostgres())("a tool that waits past the lock timeout answers storage_unavailable with retryAfterS, not internal_error", async () => {
    const agent = await world.createAgent('mcp-storage-owner@example.com', 'mcp-storage-locked');
    const owner = await connect(world.url, agent.ownerToken, 'legacy');
    // Another session holds the agent's row, as a long transaction of another instance would.
    const held = await holdRows(world.gw.database.url!, 'SELECT 1 FROM agents WHERE id = $1 FOR UPDATE', [agent.id]);
    try {
      const frozen = await owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id, idempotencyKey: 'mcp-storage-freeze' } });
      expect(frozen.isError).toBe(true);
      expect(toolBody(frozen)).toMatchObject({ status: 503, code: 'storage_unavailable', retryAfterS: 1 });
      // Counted as what it answered, not as internal_error.
      const metrics = await (await fetch(`${world.url}/metrics`)).text();
      expect(metrics).toMatch(/^acg_operation_errors_total\{operation="freezeAgent",code="storage_unavailable"\} [1-9]/m);
      expect(metrics).not.toMatch(/^acg_operation_errors_total\{operation="freezeAgent",code="internal_error"\}/m);
    } finally {
      await held.release();
    }
    // The key was given back: once the lock is gone, the retry runs.
    const retried = await owner.callTool({ name: 'freeze_agent', arguments: { id: agent.id, idempotencyKey: 'mcp-storage-freeze' } });
    expect(retried.isError).toBeFalsy();
    await owner.close();
  });

  // Last: it closes the world's database.
  it('a request whose caller cannot be read is 503 storage_unavailable with Retry-After, not the SDK\'s 500 (found here: every /mcp request answered 500 -32603)', async () => {
    const agent = await world.createAgent('mcp-storage-owner@example.com', 'mcp-storage-agent');
    const token = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`);
    const client = await connect(world.url, token, 'modern');
    await client.close();
    await world.gw.gateway.db.close();
    // Within the credential facts' two seconds: the token still verifies, and the first read is the caller's tools.
    const answer = await fetch(`${world.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
    });
    expect(answer.status).toBe(503);
    expect(answer.headers.get('retry-after')).toBe('1');
    expect(((await answer.json()) as { code: string }).code).toBe('storage_unavailable');
  });
});
