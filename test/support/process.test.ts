// The child-process helper the start-up, crash and restart tests use: a gateway that never became ready is
// not left running behind the test that gave up on it.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { killLeftoverGateways, spawnGateway } from './process.ts';
import { waitFor } from './wait.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'acg-process-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** This user's processes whose environment names `dir` (read from /proc: the helper does not give out the pid of a failed start). */
function processesWith(marker: string): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`ACG_DATA_DIR=${marker}`);
      } catch {
        return false; // gone, or another user's
      }
    })
    .map(Number);
}

describe.runIf(process.platform === 'linux')('spawnGateway', () => {
  it('kills a gateway that did not become ready in time, and says what it waited for', async () => {
    const dataDir = path.join(dir, 'slow');
    // 1 ms is shorter than any start: the wait times out while the process runs.
    await expect(spawnGateway({ ACG_DATA_DIR: dataDir }, { timeoutMs: 1 })).rejects.toThrow(/did not log "gateway ready" in 1 ms/);
    await waitFor(() => (processesWith(dataDir).length === 0 ? true : undefined), { what: 'the gateway that timed out to be gone', timeoutMs: 10_000, intervalMs: 50 });
  });

  it('kills what a test file left running when the file ends (found here: a failed test left its gateway running after the run)', async () => {
    const dataDir = path.join(dir, 'left');
    const left = await spawnGateway({ ACG_DATA_DIR: dataDir });
    const exited = new Promise<number | null>((resolve) => left.child.once('exit', (code) => resolve(code)));
    expect(processesWith(dataDir)).toHaveLength(1);
    // What test/support/each-file.ts runs after every file.
    killLeftoverGateways();
    await exited;
    expect(processesWith(dataDir)).toEqual([]);
  });
});
