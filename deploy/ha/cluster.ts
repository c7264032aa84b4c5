// The production topology of deploy/ha/, on one machine, from Debian's packages: one etcd member, two
// Patroni-managed PostgreSQL 15 nodes (each its own ports and data directory), HAProxy routing to the primary
// by Patroni's /primary check and balancing the gateways, and N gateways (`acg serve`) whose DATABASE_URL is
// HAProxy. Patroni and HAProxy run on the very files of deploy/ha/ (patroni.yml, haproxy.cfg); only what is
// local (addresses, directories, faster failover timing, the watchdog off, passwords) is added, the way an operator adds a
// node's environment. The acceptance test (test/ha/failover.test.ts) drives this module; `--help` shows the
// command line.
//
// Nothing here uses a default port (5432, 2379/2380, 8008, 5000): every port is a free one. PostgreSQL refuses
// to run as root, so as root Patroni (and the PostgreSQL it starts) run as the `postgres` user, in directories
// that user owns.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, chmodSync, chownSync, closeSync, constants, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '../..');
const PG_BIN = process.env.ACG_TEST_PG_BIN ?? '/usr/lib/postgresql/15/bin';
/** Ports a real service on this machine may own; never handed out even if free at this instant. */
const RESERVED_PORTS = new Set([2379, 2380, 5000, 5432, 7000, 8008, 8080]);
const STOP_GRACE_MS = 15_000;
/** A standby at most this far behind (Patroni's `lag`, bytes of WAL) counts as caught up. */
const CAUGHT_UP_LAG_BYTES = 64 * 1024;
const START_TIMEOUT_MS = 90_000;

/**
 * Patroni's failover timing for a cluster on one machine: a lost leader is replaced within ttl + loop_wait
 * (11 s), a crashed PostgreSQL within loop_wait. Patroni needs loop_wait + 2 × retry_timeout ≤ ttl.
 * deploy/ha/patroni.yml keeps production's slower, steadier values (20/5/5).
 */
export const LOCAL_TIMING = { ttlS: 10, loopWaitS: 1, retryTimeoutS: 4 } as const;

export type Timing = { ttlS: number; loopWaitS: number; retryTimeoutS: number };

export interface GatewayHandle {
  url: string;
  /** Its process, so that a cluster whose owner ends without stop() can still end it. */
  pid: number | undefined;
  /** Stops it gracefully, and kills it if it has not exited after a grace period. */
  stop(): Promise<void>;
}

/** Starts one gateway with `env` (DATABASE_URL, PORT, …) and resolves once it serves. */
export type GatewayLauncher = (env: Record<string, string>, index: number) => Promise<GatewayHandle>;

export interface HaClusterOptions {
  /** Working directory (created if missing, kept on stop); default: a fresh temporary one, removed on stop. */
  dir?: string;
  /** Gateways to start (default 2). */
  gateways?: number;
  /** Patroni's synchronous_mode (default true); false is asynchronous replication, to show what it loses. */
  synchronous?: boolean;
  timing?: Timing;
  /** Extra environment for every gateway (issuers, rate limits, log level …). */
  gatewayEnv?: Record<string, string>;
  /** How a gateway is started (default: `node bin/acg.js serve`, waiting for its "gateway ready" line). */
  launchGateway?: GatewayLauncher;
  /** Progress lines (default: stderr). */
  progress?: (line: string) => void;
}

export interface HaNode {
  name: string;
  pgPort: number;
  apiPort: number;
  dir: string;
  dataDir: string;
  /** The running Patroni process, or undefined after kill/stop. */
  patroni: ChildProcess | undefined;
}

export interface ClusterMember {
  name: string;
  role: 'leader' | 'sync_standby' | 'replica' | string;
  state: string;
  timeline?: number;
  lag?: number | string;
}

export interface HaCluster {
  dir: string;
  nodes: HaNode[];
  gateways: GatewayHandle[];
  /** The gateways' database through HAProxy, as the application role. */
  databaseUrl: string;
  /** The superuser through HAProxy (the current primary). */
  adminUrl: string;
  /** The gateways behind HAProxy's HTTP front (their base URL). */
  gatewaysUrl: string;
  haproxyStatsUrl: string;
  /** Environment every gateway of this cluster runs with (without PORT and ACG_BASE_URL). */
  gatewayEnv: Record<string, string>;
  /** A direct superuser URL of one node's PostgreSQL (bypassing HAProxy). */
  nodeUrl(node: HaNode): string;
  /** The cluster as Patroni sees it (GET /cluster of any node that answers). */
  members(): Promise<ClusterMember[]>;
  /** Resolves with the leader once one node leads and another, caught up, is its standby (its synchronous standby with synchronous mode), both running. */
  healthy(timeoutMs?: number): Promise<HaNode>;
  leader(): Promise<HaNode | undefined>;
  /** PID of the node's postmaster, from its postmaster.pid. */
  postmasterPid(node: HaNode): number | undefined;
  /** SIGKILL to the node's postmaster: PostgreSQL crashes, its Patroni lives. */
  killPostgres(node: HaNode): void;
  /** Freezes the node's WAL receiver (SIGSTOP): the standby stops receiving and confirming WAL, as behind a stalled network. */
  freezeReplication(node: HaNode): void;
  /** Lets a frozen WAL receiver go on (SIGCONT): it reads what was sent meanwhile and confirms it. */
  thawReplication(node: HaNode): void;
  /**
   * Ends a frozen WAL receiver without letting it read what was sent to it meanwhile (SIGTERM, then SIGCONT):
   * that WAL never reaches the node, as if the network had lost it. PostgreSQL starts a new receiver.
   */
  dropFrozenReplication(node: HaNode): void;
  /** The node is lost: SIGKILL to its Patroni, then every PostgreSQL process of the node is stopped at once. */
  killNode(node: HaNode): Promise<void>;
  /** Starts a node's Patroni again (after killNode or stopNode); it rejoins as a replica. */
  startNode(node: HaNode): void;
  /** `patronictl switchover` from the current leader to `candidate`. Resolves once Patroni accepted it. */
  switchover(candidate: HaNode): Promise<string>;
  /**
   * The last `lines` decisions in a node's Patroni log (promotions, demotions, crash recovery, and why a
   * failover was not possible), without its routine lines and its REST API's tracebacks.
   */
  patroniLog(node: HaNode, lines?: number): string;
  /** Runs patronictl with this cluster's configuration. */
  patronictl(args: string[]): Promise<string>;
  stop(): Promise<void>;
}

export interface Prerequisites {
  ok: boolean;
  /** What is missing, as one sentence; empty when ok. */
  missing: string;
}

export function findExecutable(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/bin', '/sbin', '/usr/local/sbin', '/usr/local/bin'];
  for (const dir of dirs) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

const TOOLS = ['patroni', 'patronictl', 'etcd', 'haproxy'] as const;

function tools(): Record<(typeof TOOLS)[number], string> {
  const found = Object.fromEntries(TOOLS.map((name) => [name, findExecutable(name)]));
  const missing = TOOLS.filter((name) => !found[name]);
  if (missing.length > 0) throw new Error(`not installed: ${missing.join(', ')}`);
  return found as Record<(typeof TOOLS)[number], string>;
}

/** The user PostgreSQL runs as: ourselves, or `postgres` when we are root (PostgreSQL refuses root). */
function postgresUser(): { uid: number; gid: number; name: string } | undefined {
  const me = userInfo();
  if (me.uid !== 0) return { uid: me.uid, gid: me.gid, name: me.username };
  try {
    const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith('postgres:'));
    if (!line) return undefined;
    const [, , uid, gid] = line.split(':');
    return { uid: Number(uid), gid: Number(gid), name: 'postgres' };
  } catch {
    return undefined;
  }
}

/** Whether this machine can run the cluster; when not, says what to install. */
export function haPrerequisites(): Prerequisites {
  const missing: string[] = [];
  for (const name of TOOLS) if (!findExecutable(name)) missing.push(name);
  if (!existsSync(path.join(PG_BIN, 'initdb'))) missing.push(`PostgreSQL 15 (${PG_BIN})`);
  if (!postgresUser()) missing.push('a `postgres` user to run PostgreSQL as (running as root)');
  if (missing.length === 0) return { ok: true, missing: '' };
  return { ok: false, missing: `${missing.join(', ')} (apt install patroni etcd-server etcd-client haproxy postgresql-15; .ci/run does)` };
}

async function freePort(taken: Set<number>): Promise<number> {
  for (;;) {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    await new Promise((resolve) => server.close(resolve));
    if (!taken.has(port) && !RESERVED_PORTS.has(port)) {
      taken.add(port);
      return port;
    }
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitUntil<T>(probe: () => Promise<T | undefined>, what: string, timeoutMs: number, intervalMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${(lastError as Error).message})` : ''}`);
    await sleep(intervalMs);
  }
}

interface Launched {
  child: ChildProcess;
  exited: Promise<void>;
}

/** Starts a long-running process with its output appended to `logFile`. */
function launch(command: string, args: string[], options: { env: NodeJS.ProcessEnv; logFile: string; cwd: string; user?: { uid: number; gid: number } }): Launched {
  const fd = openSync(options.logFile, 'a');
  try {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: ['ignore', fd, fd],
      ...(options.user && options.user.uid !== process.getuid?.() ? { uid: options.user.uid, gid: options.user.gid } : {}),
    });
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    return { child, exited };
  } finally {
    closeSync(fd);
  }
}

async function stopProcess(launched: Launched | undefined, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (!launched || launched.child.exitCode !== null || launched.child.signalCode !== null) return;
  launched.child.kill(signal);
  const timer = setTimeout(() => launched.child.kill('SIGKILL'), STOP_GRACE_MS);
  await launched.exited;
  clearTimeout(timer);
}

function signal(pid: number | undefined, sig: NodeJS.Signals): void {
  if (!pid) return;
  try {
    process.kill(pid, sig);
  } catch {
    // gone already
  }
}

/** The default launcher: `node bin/acg.js serve`, ready once it logs "gateway ready". */
export const launchAcgServe: GatewayLauncher = async (env, index) => {
  const logFile = path.join(env.ACG_DATA_DIR ?? tmpdir(), `gateway${index + 1}.log`);
  const launched = launch(process.execPath, [path.join(REPO, 'bin/acg.js'), 'serve'], { env: { ...process.env, ...env }, logFile, cwd: REPO });
  try {
    await waitUntil(
      async () => {
        if (launched.child.exitCode !== null) throw new Error(`gateway ${index + 1} exited with ${launched.child.exitCode}; see ${logFile}`);
        return readFileSync(logFile, 'utf8').includes('gateway ready') ? true : undefined;
      },
      `gateway ${index + 1} to be ready (${logFile})`,
      START_TIMEOUT_MS,
    );
  } catch (error) {
    // One that never became ready is not left running (it would hold its port and connections).
    await stopProcess(launched);
    throw error;
  }
  return { url: `http://127.0.0.1:${env.PORT}`, pid: launched.child.pid, stop: () => stopProcess(launched) };
};

function localPatroniConfig(options: { etcdPort: number; dir: string; timing: Timing; synchronous: boolean; secrets: Secrets }): string {
  const { timing, secrets } = options;
  // JSON is YAML: Patroni reads this file after patroni.yml (alphabetical order) and merges it over it.
  return JSON.stringify(
    {
      etcd3: { hosts: `127.0.0.1:${options.etcdPort}` },
      restapi: { authentication: { username: 'patroni', password: secrets.restapi } },
      bootstrap: {
        dcs: {
          ttl: timing.ttlS,
          loop_wait: timing.loopWaitS,
          retry_timeout: timing.retryTimeoutS,
          synchronous_mode: options.synchronous,
          postgresql: {
            parameters: {
              max_connections: 100,
              wal_keep_size: '64MB',
              // The nodes share one machine: what a kill -9 of processes loses is what they never wrote,
              // which fsync does not change (only an operating-system crash would).
              fsync: 'off',
              shared_buffers: '32MB',
            },
          },
        },
      },
      postgresql: {
        bin_dir: PG_BIN,
        parameters: { unix_socket_directories: options.dir },
        authentication: {
          superuser: { username: 'postgres', password: secrets.superuser },
          replication: { username: 'replicator', password: secrets.replication },
        },
        pg_hba: [
          'host all postgres 127.0.0.1/32 scram-sha-256',
          'host replication replicator 127.0.0.1/32 scram-sha-256',
          'host all all 127.0.0.1/32 scram-sha-256',
        ],
      },
      watchdog: { mode: 'off' },
      log: { level: 'INFO' },
    },
    null,
    2,
  );
}

interface Secrets {
  superuser: string;
  replication: string;
  restapi: string;
  application: string;
}

export async function startHaCluster(options: HaClusterOptions = {}): Promise<HaCluster> {
  const bin = tools();
  const pgUser = postgresUser();
  if (!pgUser) throw new Error('running as root, but there is no `postgres` user to run PostgreSQL as');
  const progress = options.progress ?? ((line: string) => process.stderr.write(`[ha] ${line}\n`));
  const timing = options.timing ?? LOCAL_TIMING;
  const synchronous = options.synchronous ?? true;
  const gatewayCount = options.gateways ?? 2;
  const ownsDir = options.dir === undefined;
  const dir = options.dir ? path.resolve(options.dir) : mkdtempSync(path.join(tmpdir(), 'acg-ha-'));
  // A used directory holds another cluster's data, ports and passwords: start afresh or not at all.
  if (existsSync(dir) && readdirSync(dir).length > 0) throw new Error(`${dir} is not empty; give a new or empty directory`);
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o755);

  // Each port is picked just before the process that binds it starts: a free port can be taken by anyone
  // in between, and other test runs on this machine pick free ports too.
  const taken = new Set<number>();
  const port = () => freePort(taken);
  const secret = () => randomBytes(18).toString('base64url');
  const secrets: Secrets = { superuser: secret(), replication: secret(), restapi: secret(), application: secret() };

  let etcd: Launched | undefined;
  let haproxy: Launched | undefined;
  const nodes: HaNode[] = [];
  const gateways: GatewayHandle[] = [];
  const patronis = new Map<string, Launched>();
  let stopped = false;

  const nodeEnv = (node: HaNode): NodeJS.ProcessEnv => ({
    PATH: process.env.PATH,
    HOME: node.dir,
    LANG: 'C.UTF-8',
    // The variables of deploy/ha/node1.env, with this machine's values.
    PATRONI_NAME: node.name,
    PATRONI_RESTAPI_LISTEN: `127.0.0.1:${node.apiPort}`,
    PATRONI_RESTAPI_CONNECT_ADDRESS: `127.0.0.1:${node.apiPort}`,
    PATRONI_POSTGRESQL_LISTEN: `127.0.0.1:${node.pgPort}`,
    PATRONI_POSTGRESQL_CONNECT_ADDRESS: `127.0.0.1:${node.pgPort}`,
    PATRONI_POSTGRESQL_DATA_DIR: node.dataDir,
    PATRONI_POSTGRESQL_PGPASS: path.join(node.dir, 'pgpass'),
  });

  const startNode = (node: HaNode) => {
    const launched = launch(bin.patroni, [path.join(node.dir, 'config')], { env: nodeEnv(node), logFile: path.join(node.dir, 'patroni.log'), cwd: node.dir, user: pgUser });
    patronis.set(node.name, launched);
    node.patroni = launched.child;
  };

  const postmasterPid = (node: HaNode): number | undefined => {
    try {
      const pid = Number(readFileSync(path.join(node.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      return Number.isInteger(pid) && pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  };

  const api = async (node: HaNode, pathname: string): Promise<Response> => fetch(`http://127.0.0.1:${node.apiPort}${pathname}`, { signal: AbortSignal.timeout(2000) });

  const members = async (): Promise<ClusterMember[]> => {
    let lastError: unknown;
    for (const node of nodes) {
      try {
        const res = await api(node, '/cluster');
        if (res.ok) return ((await res.json()) as { members: ClusterMember[] }).members;
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(`no Patroni REST API answers (${(lastError as Error | undefined)?.message ?? 'none tried'})`);
  };

  const leader = async (): Promise<HaNode | undefined> => {
    const found = (await members()).find((m) => m.role === 'leader' && m.state === 'running');
    return nodes.find((n) => n.name === found?.name);
  };

  const healthy = (timeoutMs = START_TIMEOUT_MS) =>
    waitUntil(
      async () => {
        const list = await members();
        const lead = list.find((m) => m.role === 'leader' && m.state === 'running');
        // Caught up, too: a standby further behind than maximum_lag_on_failover could not be promoted.
        const standby = list.find((m) => m.role === (synchronous ? 'sync_standby' : 'replica') && m.state === 'running' && typeof m.lag === 'number' && m.lag <= CAUGHT_UP_LAG_BYTES);
        if (!lead || !standby) return undefined;
        // HAProxy routes by the same /primary check; wait until the leader answers it.
        const node = nodes.find((n) => n.name === lead.name)!;
        return (await api(node, '/primary')).status === 200 ? node : undefined;
      },
      synchronous ? 'a running leader and a synchronous standby' : 'a running leader and a replica',
      timeoutMs,
      200,
    );

  const patronictl = async (args: string[]): Promise<string> => {
    const { stdout } = await run(bin.patronictl, ['-c', path.join(nodes[0]!.dir, 'config'), ...args], { env: { ...process.env, ...nodeEnv(nodes[0]!) }, timeout: 60_000 });
    return stdout;
  };

  // The last word if this process ends without stop(): nothing it started may outlive it.
  const emergencyStop = () => {
    for (const gateway of gateways) signal(gateway.pid, 'SIGKILL');
    for (const launched of [etcd, haproxy]) signal(launched?.child.pid, 'SIGKILL');
    for (const node of nodes) {
      signal(node.patroni?.pid, 'SIGKILL');
      signal(postmasterPid(node), 'SIGQUIT');
    }
  };
  process.once('exit', emergencyStop);

  const stop = async () => {
    if (stopped) return;
    stopped = true;
    progress('stopping: gateways, HAProxy, Patroni (standbys first), etcd');
    await Promise.all(gateways.map((g) => g.stop().catch(() => {})));
    await stopProcess(haproxy);
    const lead = await leader().catch(() => undefined);
    const order = [...nodes.filter((n) => n !== lead), ...nodes.filter((n) => n === lead)];
    for (const node of order) {
      await stopProcess(patronis.get(node.name));
      // A PostgreSQL whose Patroni was killed is stopped here (Patroni stops its own on SIGTERM).
      signal(postmasterPid(node), 'SIGQUIT');
    }
    await stopProcess(etcd);
    process.removeListener('exit', emergencyStop);
    if (ownsDir) rmSync(dir, { recursive: true, force: true });
    progress(ownsDir ? 'stopped; removed its directory' : `stopped; files kept in ${dir}`);
  };

  try {
    progress(`directory ${dir}`);
    // etcd: one member. Its settings follow deploy/ha/etcd.conf.yml, whose addresses are another network's.
    const etcdDir = path.join(dir, 'etcd');
    mkdirSync(etcdDir, { recursive: true });
    const etcdPort = await port();
    const etcdUrl = `http://127.0.0.1:${etcdPort}`;
    const peerUrl = `http://127.0.0.1:${await port()}`;
    progress(`starting etcd on ${etcdUrl}`);
    etcd = launch(
        bin.etcd,
        [
          '--name', 'etcd1', '--data-dir', path.join(etcdDir, 'data'),
          '--listen-client-urls', etcdUrl, '--advertise-client-urls', etcdUrl,
          '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
          '--initial-cluster', `etcd1=${peerUrl}`, '--initial-cluster-token', 'acg-etcd', '--initial-cluster-state', 'new',
          '--heartbeat-interval', '100', '--election-timeout', '1000',
          '--auto-compaction-mode', 'periodic', '--auto-compaction-retention', '1h',
        ],
        { env: { PATH: process.env.PATH, HOME: etcdDir }, logFile: path.join(etcdDir, 'etcd.log'), cwd: etcdDir },
    );
    await waitUntil(async () => ((await fetch(`${etcdUrl}/health`, { signal: AbortSignal.timeout(1000) })).ok ? true : undefined), 'etcd to answer /health', START_TIMEOUT_MS);

    const addNode = async (name: string): Promise<HaNode> => {
      const nodeDir = path.join(dir, name);
      const node: HaNode = { name, pgPort: await port(), apiPort: await port(), dir: nodeDir, dataDir: path.join(nodeDir, 'data'), patroni: undefined };
      const configDir = path.join(nodeDir, 'config');
      mkdirSync(configDir, { recursive: true });
      // patroni.yml as shipped, then zz-local.yml over it (Patroni merges a directory's files in name order).
      copyFileSync(path.join(HERE, 'patroni.yml'), path.join(configDir, 'patroni.yml'));
      writeFileSync(path.join(configDir, 'zz-local.yml'), localPatroniConfig({ etcdPort, dir: nodeDir, timing, synchronous, secrets }), { mode: 0o600 });
      for (const entry of [nodeDir, configDir, path.join(configDir, 'patroni.yml'), path.join(configDir, 'zz-local.yml')]) chownSync(entry, pgUser.uid, pgUser.gid);
      nodes.push(node);
      return node;
    };
    // The first node bootstraps (initdb) alone; the second clones it, so it starts once a leader exists.
    const node1 = await addNode('node1');
    progress(`starting Patroni node1 (PostgreSQL 127.0.0.1:${node1.pgPort}, REST 127.0.0.1:${node1.apiPort}); it runs initdb`);
    startNode(node1);
    await waitUntil(async () => ((await api(node1, '/primary')).status === 200 ? true : undefined), 'node1 to become the primary', START_TIMEOUT_MS);
    const node2 = await addNode('node2');
    progress(`starting Patroni node2 (PostgreSQL 127.0.0.1:${node2.pgPort}, REST 127.0.0.1:${node2.apiPort}); it clones node1`);
    startNode(node2);
    await healthy();
    progress(synchronous ? 'node1 leads, node2 is its synchronous standby' : 'node1 leads, node2 replicates asynchronously (synchronous_mode off)');

    const haproxyDir = path.join(dir, 'haproxy');
    mkdirSync(haproxyDir, { recursive: true });
    const [haproxyPgPort, haproxyHttpPort, haproxyStatsPort] = [await port(), await port(), await port()];
    // HAProxy names the gateways' ports before they listen (it checks them until they do).
    const gatewayPorts: number[] = [];
    for (let i = 0; i < gatewayCount; i++) gatewayPorts.push(await port());
    progress(`starting HAProxy: PostgreSQL primary on 127.0.0.1:${haproxyPgPort}, gateways on 127.0.0.1:${haproxyHttpPort}`);
    const haproxyEnv = {
      PATH: process.env.PATH,
      ACG_HA_PG_LISTEN: `127.0.0.1:${haproxyPgPort}`,
      ACG_HA_HTTP_LISTEN: `127.0.0.1:${haproxyHttpPort}`,
      ACG_HA_STATS_LISTEN: `127.0.0.1:${haproxyStatsPort}`,
      ...Object.fromEntries(nodes.flatMap((n, i) => [[`ACG_HA_NODE${i + 1}_PG`, `127.0.0.1:${n.pgPort}`], [`ACG_HA_NODE${i + 1}_API`, String(n.apiPort)]])),
      // Both lines of haproxy.cfg need an address; without a second gateway it names the first (or a closed port).
      ...Object.fromEntries([0, 1].map((i) => [`ACG_HA_GATEWAY${i + 1}`, `127.0.0.1:${gatewayPorts[i] ?? gatewayPorts[0] ?? 9}`])),
    };
    haproxy = launch(bin.haproxy, ['-db', '-f', path.join(HERE, 'haproxy.cfg')], { env: haproxyEnv, logFile: path.join(haproxyDir, 'haproxy.log'), cwd: haproxyDir });

    // HAProxy starts with every server up until its first check: wait until it routes to the leader alone.
    const statsUrl = `http://127.0.0.1:${haproxyStatsPort}/`;
    const lead = await healthy();
    await waitUntil(
      async () => {
        const states = await haproxyStates(statsUrl, 'postgres_primary');
        return nodes.every((n) => states.get(n.name) === (n === lead ? 'UP' : 'DOWN')) ? true : undefined;
      },
      `HAProxy to route to ${lead.name} only`,
      30_000,
      100,
    );
    const adminUrl = `postgres://postgres:${secrets.superuser}@127.0.0.1:${haproxyPgPort}/postgres`;
    const databaseUrl = `postgres://acg:${secrets.application}@127.0.0.1:${haproxyPgPort}/acg`;
    progress('creating the application role and database (acg) through HAProxy');
    await createApplicationDatabase(adminUrl, secrets.application);

    const gatewayDir = path.join(dir, 'gateways');
    mkdirSync(gatewayDir, { recursive: true });
    const gatewaysUrl = `http://127.0.0.1:${haproxyHttpPort}`;
    const gatewayEnv: Record<string, string> = {
      DATABASE_URL: databaseUrl,
      // Dev instances that accept each other's dev tokens share their data directory and base URL.
      ACG_DATA_DIR: gatewayDir,
      ACG_BASE_URL: gatewaysUrl,
      LOG_LEVEL: 'info',
      ...options.gatewayEnv,
    };
    const launcher = options.launchGateway ?? launchAcgServe;
    for (const [i, gatewayPort] of gatewayPorts.entries()) progress(`starting gateway ${i + 1} on 127.0.0.1:${gatewayPort}`);
    // Every gateway that started is kept, so that stop() ends it when another of them failed to start.
    const launches = await Promise.allSettled(gatewayPorts.map((gatewayPort, i) => launcher({ ...gatewayEnv, PORT: String(gatewayPort), HOST: '127.0.0.1' }, i)));
    for (const started of launches) if (started.status === 'fulfilled') gateways.push(started.value);
    const failed = launches.find((started): started is PromiseRejectedResult => started.status === 'rejected');
    if (failed) throw failed.reason;
    progress(`ready: gateways ${gateways.map((g) => g.url).join(', ')} (balanced at ${gatewaysUrl}); DATABASE_URL ${databaseUrl.replace(secrets.application, '***')}`);

    return {
      dir,
      nodes,
      gateways,
      databaseUrl,
      adminUrl,
      gatewaysUrl,
      haproxyStatsUrl: statsUrl,
      gatewayEnv,
      nodeUrl: (node) => `postgres://postgres:${secrets.superuser}@127.0.0.1:${node.pgPort}/acg`,
      members,
      healthy,
      leader,
      postmasterPid,
      killPostgres(node) {
        signal(postmasterPid(node), 'SIGKILL');
      },
      freezeReplication(node) {
        const receiver = walReceiverPid(postmasterPid(node));
        if (!receiver) throw new Error(`${node.name} has no WAL receiver (is it a standby?)`);
        signal(receiver, 'SIGSTOP');
      },
      thawReplication(node) {
        signal(walReceiverPid(postmasterPid(node)), 'SIGCONT');
      },
      dropFrozenReplication(node) {
        const receiver = walReceiverPid(postmasterPid(node));
        signal(receiver, 'SIGTERM');
        signal(receiver, 'SIGCONT');
      },
      async killNode(node) {
        const launched = patronis.get(node.name);
        signal(launched?.child.pid, 'SIGKILL');
        await launched?.exited;
        node.patroni = undefined;
        // Every server process at once, as if the machine went: SIGQUIT is PostgreSQL's immediate shutdown.
        signal(postmasterPid(node), 'SIGQUIT');
        await waitUntil(async () => (postmasterPid(node) === undefined || !isAlive(postmasterPid(node)) ? true : undefined), `${node.name}'s PostgreSQL to stop`, 30_000, 50);
      },
      startNode,
      async switchover(candidate) {
        const lead = await leader();
        if (!lead) throw new Error('no leader to switch over from');
        return patronictl(['switchover', '--leader', lead.name, '--candidate', candidate.name, '--force']);
      },
      patroniLog(node, lines = 20) {
        let text = '';
        try {
          text = readFileSync(path.join(node.dir, 'patroni.log'), 'utf8');
        } catch {
          return '';
        }
        const routine = /no action\.|Lock owner:|Exception happened during processing|Traceback|updated leader lock during/;
        const decisions = text.split('\n').filter((line) => /^\d{4}-\d\d-\d\d [\d:,]+ (INFO|WARNING|ERROR):/.test(line) && !routine.test(line));
        return decisions.slice(-lines).join('\n');
      },
      patronictl,
      stop,
    };
  } catch (error) {
    progress(`start failed: ${(error as Error).message}; logs are under ${dir}`);
    // Keep the logs of a failed start when the caller asked for a directory; a temporary one goes.
    await stop().catch(() => {});
    throw error;
  }
}

/** Each server's status (UP, DOWN, …) in one HAProxy proxy, from its stats page's CSV. */
export async function haproxyStates(statsUrl: string, proxy: string): Promise<Map<string, string>> {
  const res = await fetch(`${statsUrl};csv`, { signal: AbortSignal.timeout(2000) });
  const [header, ...lines] = (await res.text()).trim().split('\n');
  const columns = header!.replace(/^# /, '').split(',');
  const [pxname, svname, status] = ['pxname', 'svname', 'status'].map((name) => columns.indexOf(name));
  const states = new Map<string, string>();
  for (const line of lines) {
    const fields = line.split(',');
    if (fields[pxname!] === proxy) states.set(fields[svname!]!, fields[status!]!);
  }
  return states;
}

/** The WAL receiver among a postmaster's children (its title reads "postgres: …: walreceiver …"). */
function walReceiverPid(postmaster: number | undefined): number | undefined {
  if (!postmaster) return undefined;
  for (const entry of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // "pid (comm) state ppid …": comm may hold spaces, so read after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === postmaster && readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes('walreceiver')) return Number(entry);
    } catch {
      // the process ended meanwhile
    }
  }
  return undefined;
}

function isAlive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The gateways' own role and database, owned by that role (no superuser at run time). */
async function createApplicationDatabase(adminUrl: string, password: string): Promise<void> {
  const { default: pg } = await import('pg');
  await waitUntil(
    async () => {
      const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 2000 });
      client.on('error', () => {});
      try {
        await client.connect();
        const { rows } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery');
        if (rows[0]!.recovery) return undefined;
        const { rowCount } = await client.query(`SELECT 1 FROM pg_roles WHERE rolname = 'acg'`);
        if (!rowCount) await client.query(`CREATE ROLE acg LOGIN PASSWORD '${password}'`);
        const { rowCount: dbs } = await client.query(`SELECT 1 FROM pg_database WHERE datname = 'acg'`);
        if (!dbs) await client.query('CREATE DATABASE acg OWNER acg');
        return true;
      } finally {
        await client.end().catch(() => {});
      }
    },
    'HAProxy to reach the primary',
    30_000,
  );
}

const HELP = `Usage: node --import tsx deploy/ha/cluster.ts [options]

Starts the high-availability topology of deploy/ha/ on this machine, from Debian's packages, and keeps it
running until Ctrl-C (or SIGTERM), then stops everything cleanly:
  - one etcd member;
  - two Patroni-managed PostgreSQL 15 nodes, each on its own free ports and data directory, with synchronous
    replication (deploy/ha/patroni.yml, with faster local failover timing: ttl ${LOCAL_TIMING.ttlS} s, loop_wait ${LOCAL_TIMING.loopWaitS} s,
    and the watchdog off: the file requires /dev/watchdog, which a test machine seldom has, so a leader whose Patroni
    alone dies keeps its PostgreSQL running as a primary here until that Patroni is back: docs/operations.md, "Watchdog");
  - HAProxy (deploy/ha/haproxy.cfg): PostgreSQL connections go to the primary, HTTP is balanced over the gateways;
  - gateways (\`acg serve\`) whose DATABASE_URL is HAProxy.
Every port is a free one (never 5432, 2379/2380 or 8008). As root, Patroni and PostgreSQL run as the
\`postgres\` user. Needs: apt install patroni etcd-server etcd-client haproxy postgresql-15.

Options:
  --dir <path>      working directory, new or empty, kept afterwards (default: a temporary one, removed on stop)
  --gateways <n>    gateways to start (default 2, at most 2 behind HAProxy's HTTP front)
  --async           synchronous_mode off (asynchronous replication: a failover may lose acknowledged commits)
  -h, --help        this text

While it runs, try (the command lines are printed once it is ready):
  patronictl -c <dir>/node1/config list
  patronictl -c <dir>/node1/config switchover --leader node1 --candidate node2 --force`;

async function main(argv: string[]): Promise<number> {
  const args = [...argv];
  const options: HaClusterOptions = {};
  while (args.length > 0) {
    const arg = args.shift()!;
    if (arg === '-h' || arg === '--help') {
      process.stdout.write(`${HELP}\n`);
      return 0;
    }
    if (arg === '--dir') options.dir = args.shift();
    else if (arg === '--gateways') options.gateways = Number(args.shift());
    else if (arg === '--async') options.synchronous = false;
    else {
      process.stderr.write(`unknown option: ${arg}\n\n${HELP}\n`);
      return 2;
    }
  }
  if (options.gateways !== undefined && !(Number.isInteger(options.gateways) && options.gateways >= 0 && options.gateways <= 2)) {
    process.stderr.write('--gateways must be 0, 1 or 2\n');
    return 2;
  }
  const prerequisites = haPrerequisites();
  if (!prerequisites.ok) {
    process.stderr.write(`cannot start: missing ${prerequisites.missing}\n`);
    return 1;
  }
  const cluster = await startHaCluster(options);
  process.stderr.write(
    [
      '',
      `gateways:        ${cluster.gatewaysUrl} (HAProxy) → ${cluster.gateways.map((g) => g.url).join(', ')}`,
      `DATABASE_URL:    ${cluster.databaseUrl}`,
      `HAProxy status:  ${cluster.haproxyStatsUrl}`,
      `patronictl:      patronictl -c ${path.join(cluster.nodes[0]!.dir, 'config')} list`,
      `logs:            ${cluster.dir}/{etcd,node1,node2,haproxy,gateways}/*.log`,
      'Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await cluster.stop();
  return 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: Error) => {
      process.stderr.write(`${error.message}\n`);
      process.exit(1);
    },
  );
}
