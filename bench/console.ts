// Step 8 of `npm run bench`: the owner console's cold load, measured as a person meets it. A gateway on the
// embedded default (its own scratch data directory, dev mode) with one owner and a few agents; headless
// Chromium signs in once through the consent page (the dev human issuer), then opens `/console` again and
// again in a fresh browser context with the same cookies and the HTTP cache off, each time until the agents
// list shows. Reported: the median and slowest load, the requests made and the bytes transferred (the page,
// script and style sheet apart from the API calls), against the target of one second.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { BenchConfig } from './config.ts';
import { devIssuerUrl } from '../src/identity/dev-issuers.ts';
import { startGateway } from './gateway.ts';
import { log } from './report.ts';
import { gatewayEnv } from './seed.ts';

/** The target for a cold load of /console on the embedded default. */
export const CONSOLE_COLD_LOAD_TARGET_MS = 1000;
const OWNER = 'console-bench@example.com';
const AGENTS = ['Scout', 'Ledger', 'Courier'];

export interface ConsoleLoads {
  loads: number;
  medianMs: number;
  slowestMs: number;
  requests: number;
  transferredBytes: number;
  /** Of them, the page, script and style sheet (everything but /v1 and /oauth). */
  shellBytes: number;
  targetMs: number;
}

/**
 * What the page transferred, from its resource timings. A string, not a function: the bench runs through tsx,
 * whose transform names functions with a helper the page does not have.
 */
const TRANSFERRED = `(() => {
  const entries = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')];
  const sum = (list) => list.reduce((total, entry) => total + entry.transferSize, 0);
  const shell = entries.filter((entry) => !entry.name.includes('/v1/') && !entry.name.includes('/oauth/'));
  return { requests: entries.length, all: sum(entries), shell: sum(shell) };
})()`;

async function post(baseUrl: string, route: string, body: unknown, headers: Record<string, string> = {}): Promise<any> {
  const res = await fetch(`${baseUrl}${route}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const answer = await res.json().catch(() => undefined);
  if (!res.ok) throw new Error(`POST ${route} answered ${res.status}: ${JSON.stringify(answer)}`);
  return answer;
}

/** Why the console step cannot run here, or undefined when it can. */
export function consoleStepBlocked(config: BenchConfig): string | undefined {
  if (!config.console) return 'BENCH_CONSOLE=0';
  if (!existsSync(config.chromium)) return `no Chromium at ${config.chromium} (apt-get install chromium, or set BENCH_CHROMIUM)`;
  return undefined;
}

export async function measureConsole(config: BenchConfig): Promise<ConsoleLoads> {
  const { chromium } = await import('playwright-core');
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-bench-console-'));
  const env = gatewayEnv({ dataDir, port: config.port });
  const gateway = await startGateway(env, config.port, config.nodeOptions);
  const browser = await chromium.launch({ executablePath: config.chromium, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'] });
  try {
    const { baseUrl } = gateway;
    const { token } = await post(baseUrl, '/dev/issuers/human/login', { email: OWNER });
    const issuer = devIssuerUrl(baseUrl, 'agent');
    for (const [index, name] of AGENTS.entries()) {
      await post(baseUrl, '/v1/owner/agents', { name, identity: { issuer, subject: `console-bench-${index}` } }, { authorization: `Bearer ${token}`, 'idempotency-key': `console-bench-agent-${index}` });
    }
    // Signed in once, as a person would: the console's button, then the consent page's dev form.
    const signedIn = await browser.newContext();
    const page = await signedIn.newPage();
    await page.goto(`${baseUrl}/console`);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.waitForURL((url) => url.pathname === '/oauth/consent');
    const form = page.locator('form[data-provider="human"]');
    await form.locator('input[name="email"]').fill(OWNER);
    await form.locator('button').click();
    await page.getByRole('link', { name: AGENTS[0]!, exact: true }).waitFor({ timeout: 30_000 });
    const storageState = await signedIn.storageState();
    await signedIn.close();

    const timings: number[] = [];
    let last = { requests: 0, all: 0, shell: 0 };
    for (let n = 0; n < config.consoleLoads; n++) {
      const fresh = await browser.newContext({ storageState });
      try {
        const cold = await fresh.newPage();
        const cdp = await fresh.newCDPSession(cold);
        await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
        const startedMs = performance.now();
        await cold.goto(`${baseUrl}/console`);
        await cold.getByRole('link', { name: AGENTS[0]!, exact: true }).waitFor({ timeout: 30_000 });
        timings.push(Math.round(performance.now() - startedMs));
        last = (await cold.evaluate(TRANSFERRED)) as typeof last;
      } finally {
        await fresh.close();
      }
    }
    const sorted = [...timings].sort((a, b) => a - b);
    const result: ConsoleLoads = {
      loads: timings.length,
      medianMs: sorted[Math.floor(sorted.length / 2)]!,
      slowestMs: sorted[sorted.length - 1]!,
      requests: last.requests,
      transferredBytes: last.all,
      shellBytes: last.shell,
      targetMs: CONSOLE_COLD_LOAD_TARGET_MS,
    };
    log(`console cold load: median ${result.medianMs} ms, slowest ${result.slowestMs} ms over ${result.loads} loads; ${result.requests} requests, ${result.transferredBytes} bytes (${result.shellBytes} page, script and style)`);
    return result;
  } finally {
    await browser.close();
    await gateway.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The report's lines for the console step. */
export function consoleReport(loads: ConsoleLoads): string {
  const verdict = loads.medianMs < loads.targetMs ? 'within' : 'OVER';
  return (
    `Owner console cold load (embedded default, no HTTP cache, until the agents list shows): median ${loads.medianMs} ms, ` +
    `slowest ${loads.slowestMs} ms over ${loads.loads} loads (${verdict} the ${loads.targetMs} ms target); ${loads.requests} requests, ` +
    `${(loads.transferredBytes / 1024).toFixed(1)} KiB transferred, ${(loads.shellBytes / 1024).toFixed(1)} KiB of it the page, script and style sheet.\n`
  );
}
