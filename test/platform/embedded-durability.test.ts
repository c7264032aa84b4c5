// The embedded default, end to end through the real `acg` command: dev tokens minted by the CLI while
// the gateway runs, and an acknowledged write surviving SIGKILL.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { spawnGateway } from '../support/process.ts';
import { onPostgres } from '../support/database.ts';

const run = promisify(execFile);
const ACG = path.resolve('bin/acg.js');
const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-durability-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

// One run is enough: this is about the embedded database, which the PostgreSQL pass does not use.
describe.skipIf(onPostgres())('the embedded default (PGlite)', () => {
  it('keeps an acknowledged write across SIGKILL, with tokens from `acg dev token` minted while it runs', async () => {
    const port = String(20000 + Math.floor(Math.random() * 20000));
    const env = { ACG_DATA_DIR: dataDir, PORT: port, DATABASE_URL: '', LOG_LEVEL: 'warn' };
    const first = await spawnGateway({ ...env, LOG_LEVEL: 'info' });
    const cli = async (...args: string[]) => (await run(process.execPath, [ACG, ...args], { env: { ...process.env, ...env } })).stdout.trim();
    const human = await cli('dev', 'token', 'human', '--email', 'kim@example.com');
    const created = await fetch(`${first.url}/v1/owner/agents`, {
      method: 'POST',
      headers: { authorization: `Bearer ${human}`, 'content-type': 'application/json', 'idempotency-key': 'durable-1' },
      body: JSON.stringify({ name: 'Durable', identity: { issuer: `${first.url}/dev/issuers/agent`, subject: 'durable' } }),
    });
    expect(created.status).toBe(201);
    const agent = (await created.json()) as { id: string };
    await first.kill('SIGKILL');

    const second = await spawnGateway({ ...env, LOG_LEVEL: 'info' });
    try {
      const read = await fetch(`${second.url}/v1/owner/agents/${agent.id}`, { headers: { authorization: `Bearer ${human}` } });
      expect(read.status).toBe(200);
      expect(((await read.json()) as { name: string }).name).toBe('Durable');
      const agentToken = await cli('dev', 'token', 'agent', '--subject', 'durable', '--owner-email', 'kim@example.com');
      const me = await fetch(`${second.url}/v1/me`, { headers: { authorization: `Bearer ${agentToken}` } });
      expect(((await me.json()) as { agent: { id: string } }).agent.id).toBe(agent.id);
    } finally {
      await second.kill();
    }
  }, 120_000);
});
