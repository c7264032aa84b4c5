// The README's "First purchase" block, run as written (and its owner's section after it): extracted from README.md (so the test follows the
// README), pasted twice in a row into one shell against a real `npm start` in a fresh data directory (both
// pastes buy), then the README's MCP-by-hand block, then the gateway is stopped the way Ctrl-C stops it.
// The gateway runs on a free port, because other tests share the machine: the first-purchase block's 8080s become
// that port, and the MCP block runs exactly as written, finding the gateway by PORT.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../support/database.ts';
import { freePort } from '../support/doh-server.ts';
import { waitFor } from '../support/wait.ts';

/** The first ```sh block after the marker comment `<!-- name:` in README.md. */
export function readmeBlock(readme: string, name: string): string {
  const marker = readme.indexOf(`<!-- ${name}:`);
  if (marker < 0) throw new Error(`README.md has no <!-- ${name}: marker`);
  const match = /```sh\n([\s\S]*?)```/.exec(readme.slice(marker));
  if (!match) throw new Error(`no \`\`\`sh block after the ${name} marker`);
  return match[1]!;
}

/** Runs a script as bash would from a paste, but stopping at the first failure; its output. */
async function bash(script: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const shell = spawn('bash', ['-e', '-o', 'pipefail', '-c', script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  shell.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  shell.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => shell.once('exit', resolve));
  return { code, stdout, stderr };
}

function waitForOutput(child: ReturnType<typeof spawn>, pattern: RegExp, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`no ${pattern} within ${timeoutMs} ms:\n${seen}`)), timeoutMs);
    child.stdout!.on('data', (chunk: Buffer) => {
      seen += chunk.toString();
      if (pattern.test(seen)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`npm start exited with ${code}:\n${seen}`));
    });
  });
}

// One real gateway on the embedded database is what a newcomer starts; PostgreSQL adds nothing here.
describe.skipIf(onPostgres())('README "First purchase"', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-readme-'));
  let gateway: ReturnType<typeof spawn> | undefined;

  afterAll(() => {
    if (gateway?.pid && gateway.exitCode === null && gateway.signalCode === null) process.kill(-gateway.pid, 'SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('runs as written against npm start, twice in a row in one shell, and each paste ends with the balance and earnings it promises', async () => {
    const readme = readFileSync('README.md', 'utf8');
    const block = readmeBlock(readme, 'first-purchase');
    const port = String(await freePort());
    const env = { ...process.env, ACG_DATA_DIR: dataDir, PORT: port, DATABASE_URL: '', ACG_BASE_URL: '' };
    // Its own process group, like a terminal's foreground job: Ctrl-C signals npm and the gateway alike.
    gateway = spawn('npm', ['start'], { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    await waitForOutput(gateway, /gateway ready/, 120_000);

    const pasted = block.replaceAll('8080', port);
    // The second paste with ACG_BASE_URL in another spelling the gateway accepts (a scheme in capitals, a trailing
    // slash): the block writes it in the gateway's one form, so its URLs never get `//` and the agent's issuer is the
    // gateway's (found from outside: an upper-case host stopped the paste at its first step).
    // Then the owner's section, in the same shell, on the second paste's agent, merchant and offer.
    const owner = readmeBlock(readme, 'owner-side');
    const { code, stdout, stderr } = await bash(`${pasted}\nACG_BASE_URL=HTTP://127.0.0.1:${port}/\n${pasted}\n${owner}`, env);
    expect(code, `${stdout}\n${stderr}`).toBe(0);

    const answers = stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, string>);
    const balances = answers.filter((a) => 'availableUc' in a);
    const earnings = answers.filter((a) => 'earnedUc' in a);
    expect(balances).toHaveLength(2);
    expect(earnings).toHaveLength(2);
    for (const balance of balances) expect(balance).toMatchObject({ availableUc: '3500000', heldUc: '0', capturedUc: '1500000', grantedUc: '5000000' });
    for (const earned of earnings) expect(earned).toMatchObject({ earnedUc: '1500000' });
    // Each paste made its own agent: two grants, to two agents.
    const granted = [...stdout.matchAll(/^granted 5000000 µc to (agt_\w+) as lot lot_\w+ \(through the gateway/gm)].map((m) => m[1]);
    expect(granted).toHaveLength(2);
    expect(granted[0]).not.toBe(granted[1]);
    expect(stdout.match(/^true$/gm)).toHaveLength(2); // verify-domain
    expect(stdout.match(/^captured$/gm)).toHaveLength(2);
    // The owner's section: a new mandate version, the purchase approved and then held with the same key, a delegate,
    // the kill switch releasing that hold, the merchant's capture refused, and the agent active again.
    const ownerSaid = stdout.slice(stdout.lastIndexOf('"earnedUc"')).split('\n').slice(1);
    expect(ownerSaid[0]).toBe('2');
    expect(ownerSaid[1]).toMatch(/^the owner approves at http:\/\/127\.0\.0\.1:\d+\/payments\/purchases\/pur_\w+, or on the console's Approvals page; here by API:$/);
    expect(ownerSaid[2]).toBe('approved');
    // `json usage` prints an object as JSON, for jq (found from outside: it printed Node's inspection of it).
    expect(ownerSaid.join('\n')).toMatch(/"budgetId": "books",\n\s+"period": "week",\n\s+"limitUc": "5000000",\n[^\]]*"spentUc": "3500000",\n\s+"remainingUc": "1500000"/);
    expect(ownerSaid.slice(-5)).toEqual([expect.stringMatching(/^agt_\w+$/), '1', 'voucher_revoked', 'active', '']);

    // The MCP section's by-hand block: initialize and tools/list on 2025-11-25, tools/list on 2026-07-28. Its 8080 is
    // left as written: the block finds the gateway by ACG_BASE_URL (here ending in a slash), as the first-purchase block does.
    const mcp = await bash(readmeBlock(readme, 'mcp-by-hand'), { ...env, ACG_BASE_URL: `http://127.0.0.1:${port}/` });
    expect(mcp.code, `${mcp.stdout}\n${mcp.stderr}`).toBe(0);
    expect(mcp.stdout).toContain('"protocolVersion":"2025-11-25"');
    expect(mcp.stdout.match(/"name":"register_agent"/g)).toHaveLength(2);

    // Ctrl-C: SIGINT to the whole foreground group; the gateway shuts down cleanly and npm exits with it.
    const exited = new Promise<number | null>((resolve) => gateway!.once('exit', resolve));
    process.kill(-gateway.pid!, 'SIGINT');
    await exited;
    expect(gateway.signalCode === 'SIGINT' || gateway.exitCode === 0 || gateway.exitCode === 130).toBe(true);
    // No orphaned `node … serve` keeps the embedded database: its lock goes once the gateway has closed it.
    const lock = path.join(dataDir, 'pglite', 'acg.lock');
    await waitFor(() => !existsSync(lock), { what: `the embedded database's lock ${lock} to go`, timeoutMs: 20_000, intervalMs: 50 });
    expect(existsSync(lock)).toBe(false);
  }, 300_000);
});
