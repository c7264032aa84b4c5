// A real DNS-over-HTTPS resolver for tests: Debian's unbound on 127.0.0.1, HTTP/2 + TLS with a throw-away
// certificate, answering one authoritative zone whose records a test can replace (zone file + reload via
// unbound-control over a unix socket). Everything else is REFUSED, so nothing leaves the machine.
// The harness never installs packages: without unbound the DoH tests skip and say so.
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { makeTestCertificate, type TestCertificate } from './test-certificate.ts';
import { waitFor } from './wait.ts';

const execFileAsync = promisify(execFile);
const START_TIMEOUT_MS = 10_000;

function findBinary(name: string): string | undefined {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).stdout.trim();
  if (found) return found;
  const sbin = `/usr/sbin/${name}`;
  return existsSync(sbin) ? sbin : undefined;
}

const unboundPath = findBinary('unbound');
const unboundControlPath = findBinary('unbound-control');
export const hasUnbound = unboundPath !== undefined && unboundControlPath !== undefined;

/** Call at the top of a DoH test file so a skipped run is visible in the output. */
export function noteIfUnboundMissing(): void {
  if (!hasUnbound) console.warn('SKIPPED: unbound not installed; .ci/run installs it (DoH tests against a real resolver did not run)');
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface DohServer {
  /** RFC 8484 endpoint, e.g. https://127.0.0.1:40123/dns-query. */
  url: string;
  port: number;
  /** PEM of the self-signed certificate, to pass as the client's extra CA. */
  ca: string;
  zone: string;
  /** Replaces every record of the zone (SOA and NS are kept) with these zone-file lines, then reloads. */
  setRecords(records: string[]): Promise<void>;
  stop(): Promise<void>;
}

function zoneFile(zone: string, records: string[]): string {
  return [
    `$ORIGIN ${zone}.`,
    '$TTL 60',
    `@ IN SOA ns.${zone}. admin.${zone}. 1 3600 600 86400 60`,
    `@ IN NS ns.${zone}.`,
    ...records,
    '',
  ].join('\n');
}

function unboundConfig(dir: string, port: number, zone: string, cert: TestCertificate): string {
  return `server:
  username: ""
  chroot: ""
  directory: "${dir}"
  pidfile: "${dir}/unbound.pid"
  use-syslog: no
  logfile: "${dir}/unbound.log"
  verbosity: 1
  do-daemonize: no
  num-threads: 1
  so-reuseport: no
  do-ip6: no
  interface: 127.0.0.1@${port}
  https-port: ${port}
  http-endpoint: "/dns-query"
  tls-service-key: "${cert.keyPath}"
  tls-service-pem: "${cert.certPath}"
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
  local-zone: "." refuse
  local-zone: "${zone}." transparent
auth-zone:
  name: "${zone}."
  zonefile: "${dir}/zone.txt"
  for-downstream: yes
  for-upstream: no
  fallback-enabled: no
remote-control:
  control-enable: yes
  control-interface: "${dir}/control.sock"
  control-use-cert: no
`;
}

/** Whether something on the port accepts a TCP connection. */
function accepts(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => { socket.destroy(); resolve(true); });
    socket.once('error', () => resolve(false));
  });
}

/** Resolves once unbound accepts connections; rejects, with its log, if it exits first or does not start in time. */
async function waitForPort(port: number, child: ChildProcess, logPath: string): Promise<void> {
  const failed = (reason: string, cause?: unknown) => {
    const log = existsSync(logPath) ? readFileSync(logPath, 'utf8') : '(no log)';
    return new Error(`unbound did not start on port ${port}: ${reason}\n${log}`, { cause });
  };
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  const state = await waitFor(async () => (exited() ? 'exited' : (await accepts(port)) ? 'listening' : 'starting'), {
    until: (s) => s !== 'starting',
    what: `unbound to listen on port ${port}`,
    timeoutMs: START_TIMEOUT_MS,
    intervalMs: 50,
  }).catch((error: Error) => {
    throw failed(error.message, error);
  });
  if (state === 'exited') throw failed(`it exited (${child.exitCode ?? child.signalCode})`);
}

export async function startDohServer(options: { zone?: string; records?: string[] } = {}): Promise<DohServer> {
  if (!unboundPath || !unboundControlPath) throw new Error('unbound is not installed');
  const zone = options.zone ?? 'acg.test';
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-doh-'));
  const cert = makeTestCertificate({ ip: ['127.0.0.1'], dns: ['localhost'] });
  const port = await freePort();
  const configPath = path.join(dir, 'unbound.conf');
  writeFileSync(path.join(dir, 'zone.txt'), zoneFile(zone, options.records ?? []));
  writeFileSync(configPath, unboundConfig(dir, port, zone, cert));
  const child = spawn(unboundPath, ['-d', '-c', configPath], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await waitForPort(port, child, path.join(dir, 'unbound.log'));
  } catch (error) {
    child.kill('SIGKILL');
    cert.remove();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `https://127.0.0.1:${port}/dns-query`,
    port,
    ca: cert.certPem,
    zone,
    async setRecords(records) {
      writeFileSync(path.join(dir, 'zone.txt'), zoneFile(zone, records));
      const { stdout } = await execFileAsync(unboundControlPath, ['-c', configPath, 'auth_zone_reload', zone]);
      if (!stdout.includes('ok')) throw new Error(`unbound-control auth_zone_reload failed: ${stdout}`);
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
      cert.remove();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
