// deploy/ha/etcd.conf.yml started as an operator starts it (`etcd --config-file`), on this machine: its addresses
// moved to free loopback ports and a data directory of its own, one member. Patroni (etcd3) speaks etcd's v3 API
// through its JSON gateway, which etcd 3.4 leaves off when a config file does not turn it on: Patroni then waited on
// etcd for ever (found from outside: 404 from /v3/cluster/member/list). deploy/ha/cluster.ts passes flags, so the
// failover test does not read the file. Runs once per suite, and skips with a note without etcd.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findExecutable } from '../../deploy/ha/cluster.ts';
import { onPostgres } from '../support/database.ts';
import { freePort } from '../support/doh-server.ts';
import { waitFor } from '../support/wait.ts';

const runHere = process.env.TEST_DATABASE_URL ? onPostgres() : true;
const etcd = findExecutable('etcd');
if (runHere && !etcd) process.stdout.write('SKIPPED: the etcd configuration test needs etcd (apt install etcd-server; .ci/run does)\n');

const dir = mkdtempSync(path.join(tmpdir(), 'acg-etcd-conf-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.runIf(runHere && etcd)('deploy/ha/etcd.conf.yml', () => {
  it("serves the v3 JSON gateway Patroni's etcd3 client uses", async () => {
    const [client, peer] = [await freePort(), await freePort()];
    const settings: Record<string, string> = {
      'data-dir': path.join(dir, 'data'),
      'listen-client-urls': `http://127.0.0.1:${client}`,
      'advertise-client-urls': `http://127.0.0.1:${client}`,
      'listen-peer-urls': `http://127.0.0.1:${peer}`,
      'initial-advertise-peer-urls': `http://127.0.0.1:${peer}`,
      'initial-cluster': `etcd1=http://127.0.0.1:${peer}`,
    };
    // Only the addresses and the data directory change: every other line is the file's.
    const shipped = readFileSync('deploy/ha/etcd.conf.yml', 'utf8');
    const local = shipped.replace(/^([a-z0-9-]+): .*$/gm, (line, key: string) => (key in settings ? `${key}: ${settings[key]}` : line));
    const file = path.join(dir, 'etcd.conf.yml');
    writeFileSync(file, local);
    const child = spawn(etcd!, ['--config-file', file], { stdio: 'ignore' });
    try {
      const status = await waitFor(
        async () => {
          try {
            return (await fetch(`http://127.0.0.1:${client}/v3/cluster/member/list`, { method: 'POST', body: '{}' })).status;
          } catch {
            return undefined;
          }
        },
        { what: 'etcd to answer on its client port', timeoutMs: 20_000 },
      );
      expect(status).toBe(200);
    } finally {
      child.kill('SIGKILL');
    }
  }, 30_000);
});
