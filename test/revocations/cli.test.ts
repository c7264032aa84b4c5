// `acg agent freeze|unfreeze` as an owner runs them: bin/acg.js against an in-process gateway, with the owner's
// credential in ACG_OWNER_TOKEN; the answer is printed as JSON, a refusal as one line.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant, mint, openShop } from '../support/ledger-fixture.ts';
import { startWorld, type World } from '../support/world.ts';

const ACG = path.resolve('bin/acg.js');
const run = promisify(execFile);
const workDir = mkdtempSync(path.join(tmpdir(), 'acg-cli-freeze-'));
let world: World;

beforeAll(async () => {
  world = await startWorld();
});
afterAll(async () => {
  await world?.close();
  rmSync(workDir, { recursive: true, force: true });
});

/** Runs bin/acg.js with only the gateway's address and the owner credential (no ACG_ setting inherited). */
async function acg(ownerToken: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(ACG_|DATABASE_URL$|PORT$|HOST$)/.test(name)));
  try {
    const { stdout, stderr } = await run(process.execPath, [ACG, ...args], { cwd: workDir, env: { ...inherited, ACG_BASE_URL: world.url, ACG_OWNER_TOKEN: ownerToken }, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe('acg agent freeze and unfreeze', () => {
  it('freeze --release-holds prints the agent and the report; unfreeze prints the agent; a stranger is told no such agent', async () => {
    const shop = await openShop(world);
    const offer = await shop.offer({ priceUc: '2000000' });
    const agent = await world.createAgent('cli-freezer@example.com', 'cli-frozen-agent');
    await grant(world, agent.id, 5_000_000n);
    const holdId = (await mint(world, agent.token, offer.id)).body.redemption.id;

    const frozen = await acg(agent.ownerToken, 'agent', 'freeze', agent.id, '--release-holds');
    expect(frozen.code, frozen.stderr).toBe(0);
    const answer = JSON.parse(frozen.stdout);
    expect(answer).toMatchObject({ id: agent.id, status: 'frozen' });
    expect(answer.freeze).toMatchObject({ releaseHolds: true, releasedHolds: 1, releasedUc: '2000000', merchants: [{ merchantId: shop.merchantId, holdIds: [holdId], webhook: 'none' }] });

    const thawed = await acg(agent.ownerToken, 'agent', 'unfreeze', agent.id);
    expect(thawed.code, thawed.stderr).toBe(0);
    expect(JSON.parse(thawed.stdout)).toMatchObject({ id: agent.id, status: 'active' });

    const stranger = await acg(await world.humanToken('cli-stranger@example.com'), 'agent', 'freeze', agent.id);
    expect(stranger.code).toBe(2);
    expect(stranger.stderr).toContain(`no agent ${agent.id} among the agents of the owner of ACG_OWNER_TOKEN`);
  });
});
