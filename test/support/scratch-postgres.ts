// A PostgreSQL cluster of the test's own (a temporary data directory, its own port), to crash, pause
// and restart without touching the shared server, or to serve over TLS only. initdb refuses to run as root, so
// as root every PostgreSQL binary runs as the `postgres` user, which then owns the cluster's files.
import { execFile } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const BIN = process.env.ACG_TEST_PG_BIN ?? '/usr/lib/postgresql/15/bin';

export const scratchPostgresAvailable = existsSync(path.join(BIN, 'initdb')) && existsSync(path.join(BIN, 'pg_ctl'));

export interface ScratchOptions {
  /**
   * The server's certificate (its chain, PEM) and private key: the cluster then has ssl on, and its pg_hba admits
   * TCP connections over TLS alone (hostssl), from any loopback address.
   */
  tls?: { certPem: string; keyPem: string };
  /** Loopback addresses to listen on (default 127.0.0.1 alone). */
  listenAddresses?: string[];
}

export interface ScratchCluster {
  port: number;
  url: string;
  /** Starts the server and resolves once it accepts connections (after crash recovery, if any). */
  start(): Promise<void>;
  /** `pg_ctl stop -m immediate`: every server process quits at once, open transactions included. */
  crash(): Promise<void>;
  /** SIGSTOP to the postmaster and every backend: connections stay open, nothing answers. */
  pause(): void;
  resume(): void;
  destroy(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function childPids(parentPid: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc').filter((name) => /^\d+$/.test(name)).map(Number)) {
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so read after the last ')'.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === parentPid) pids.push(entry);
    } catch {
      // the process ended meanwhile
    }
  }
  return pids;
}

/** Sends SIGSTOP to a process and waits (up to 2 s) until the kernel shows it stopped (state T). */
function stopAndWait(pid: number): void {
  process.kill(pid, 'SIGSTOP');
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let waitedMs = 0; waitedMs < 2000; waitedMs += 5) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('T')) return;
    } catch {
      return; // the process ended
    }
    Atomics.wait(pause, 0, 0, 5);
  }
  throw new Error(`process ${pid} did not stop within 2 s of SIGSTOP`);
}

/**
 * Writes the server's certificate and key into the data directory, owned by the server's user and readable by it
 * alone (PostgreSQL refuses a key others may read), and admits TCP connections over TLS only.
 */
function configureTls(dataDir: string, tls: NonNullable<ScratchOptions['tls']>, owner: { uid: number; gid: number } | undefined): string {
  const certFile = path.join(dataDir, 'server.crt');
  const keyFile = path.join(dataDir, 'server.key');
  writeFileSync(certFile, tls.certPem, { mode: 0o644 });
  writeFileSync(keyFile, tls.keyPem, { mode: 0o600 });
  if (owner) for (const file of [certFile, keyFile]) chownSync(file, owner.uid, owner.gid);
  // Unix-socket connections stay trusted, for pg_ctl; nothing comes over TCP in cleartext.
  writeFileSync(path.join(dataDir, 'pg_hba.conf'), 'local all all trust\nhostssl all all 127.0.0.0/8 trust\nhostssl all all ::1/128 trust\n');
  return `ssl = on\nssl_cert_file = '${certFile}'\nssl_key_file = '${keyFile}'\n`;
}

/** Creates (initdb) a stopped cluster; call start(). */
export async function createScratchCluster(options: ScratchOptions = {}): Promise<ScratchCluster> {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-scratch-pg-'));
  const dataDir = path.join(dir, 'data');
  const asRoot = userInfo().uid === 0;
  let owner: { uid: number; gid: number } | undefined;
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    owner = { uid: Number(stdout.trim()), gid: Number(gid.trim()) };
    chownSync(dir, owner.uid, owner.gid);
  }
  const pg = (tool: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', path.join(BIN, tool), ...args], { cwd: dir }) : run(path.join(BIN, tool), args, { cwd: dir });
  await pg('initdb', ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
  const port = await freePort();
  const listen = (options.listenAddresses ?? ['127.0.0.1']).join(',');
  const tls = options.tls ? configureTls(dataDir, options.tls, owner) : '';
  // fsync off: a crash of the server processes (what the tests do) keeps every write that reached the
  // kernel; only an operating-system crash would lose it.
  appendFileSync(
    path.join(dataDir, 'postgresql.conf'),
    `\nport = ${port}\nlisten_addresses = '${listen}'\nunix_socket_directories = '${dir}'\nfsync = off\nshared_buffers = 32MB\nmax_connections = 60\n${tls}`,
  );
  const postmasterPid = () => Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const signalAll = (signal: NodeJS.Signals) => {
    const parent = postmasterPid();
    // The postmaster first, and its children read once it has stopped: a signal is delivered asynchronously, and a
    // connection it forked in between would otherwise go on serving (a paused database answering /readyz).
    if (signal === 'SIGSTOP') stopAndWait(parent);
    for (const pid of [parent, ...childPids(parent)]) {
      try {
        process.kill(pid, signal);
      } catch {
        // the process ended meanwhile
      }
    }
  };
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async start() {
      await pg('pg_ctl', ['start', '-w', '-t', '60', '-D', dataDir, '-l', path.join(dir, 'server.log')]);
    },
    async crash() {
      await pg('pg_ctl', ['stop', '-m', 'immediate', '-D', dataDir]);
    },
    pause() {
      signalAll('SIGSTOP');
    },
    resume() {
      signalAll('SIGCONT');
    },
    async destroy() {
      if (existsSync(path.join(dataDir, 'postmaster.pid'))) {
        signalAll('SIGCONT');
        await pg('pg_ctl', ['stop', '-m', 'immediate', '-D', dataDir]).catch(() => {});
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
