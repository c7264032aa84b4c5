// The README's "First purchase" block, run as written: extracted from README.md (so the test follows the
// README), against a real `npm start` in a fresh data directory, then stopped the way Ctrl-C stops it.
// The one change is the port: the block's 8080 becomes a free port, because other tests share the machine.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../support/database.ts';
import { freePort } from '../support/doh-server.ts';
import { waitFor } from '../support/wait.ts';

const MARKER = '<!-- first-purchase:';

/** The first ```sh block after the marker comment in README.md. */
export function firstPurchaseBlock(readme: string): string {
  const marker = readme.indexOf(MARKER);
  if (marker < 0) throw new Error(`README.md has no ${MARKER} marker`);
  const match = /```sh\n([\s\S]*?)```/.exec(readme.slice(marker));
  if (!match) throw new Error('no ```sh block after the first-purchase marker');
  return match[1]!;
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

  it('runs as written against npm start and ends with the balance and earnings it promises', async () => {
    const block = firstPurchaseBlock(readFileSync('README.md', 'utf8'));
    const port = String(await freePort());
    const env = { ...process.env, ACG_DATA_DIR: dataDir, PORT: port, DATABASE_URL: '', ACG_BASE_URL: '' };
    // Its own process group, like a terminal's foreground job: Ctrl-C signals npm and the gateway alike.
    gateway = spawn('npm', ['start'], { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    await waitForOutput(gateway, /gateway ready/, 120_000);

    const script = block.replaceAll('8080', port);
    const shell = spawn('bash', ['-e', '-o', 'pipefail', '-c', script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    shell.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    shell.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => shell.once('exit', resolve));
    expect(code, `${stdout}\n${stderr}`).toBe(0);

    const answers = stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, string>);
    expect(answers.find((a) => 'availableUc' in a)).toMatchObject({ availableUc: '3500000', heldUc: '0', capturedUc: '1500000', grantedUc: '5000000' });
    expect(answers.find((a) => 'earnedUc' in a)).toMatchObject({ earnedUc: '1500000' });
    expect(stdout).toMatch(/^granted 5000000 µc to agt_\w+ as lot lot_\w+ \(through the gateway/m);
    expect(stdout).toMatch(/^true$/m); // verify-domain
    expect(stdout).toMatch(/^captured$/m);

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
