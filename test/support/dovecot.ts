// A real, private Dovecot IMAP server on 127.0.0.1 for tests (recipe: shared/research/imap.md). It lives in
// a fresh temp directory with its own config, users and Maildirs, never reads /etc/dovecot, and is removed
// on stop. This harness never installs anything: without the `dovecot` binary, dovecotBinary() is null and
// the tests that need it skip with a visible note (`.ci/run` installs dovecot-imapd).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, chmodSync, chownSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { createConnection, createServer, type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ImapFlow } from 'imapflow';
import { waitFor } from './wait.ts';

export const DOVECOT_SKIP_NOTE = 'SKIPPED: dovecot not installed; .ci/run installs it (apt package dovecot-imapd)';

const READY_TIMEOUT_MS = 10_000;
/**
 * IMAP sessions Dovecot allows per user and client address (its default, written out so that the tests of a login
 * refused with `NO [LIMIT]` do not depend on a packaging default).
 */
export const DOVECOT_USERIP_CONNECTIONS_MAX = 10;
const STOP_TIMEOUT_MS = 5_000;
/** nobody/nogroup: Dovecot never runs mail processes as uid 0, so a root runner maps mail to 65534. */
const ROOT_MAIL_UID = 65534;

export interface DovecotUser {
  username: string;
  password: string;
}

export interface DovecotServer {
  host: string;
  /** Cleartext IMAP; offers STARTTLS when `tls` is set. */
  port: number;
  /** Implicit-TLS IMAP and the PEM of its self-signed certificate (CN localhost, SAN localhost and 127.0.0.1), when openssl is available. */
  tls: { port: number; certPem: string } | null;
  dir: string;
  users: DovecotUser[];
  /** The server's own log; the client only ever sees "Internal error" or "Temporary failure". */
  log(): string;
  stop(): Promise<void>;
}

/** Path of the dovecot binary, or null when it is not installed. */
export function dovecotBinary(): string | null {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/local/sbin', '/sbin'];
  for (const dir of dirs) {
    if (!dir) continue;
    const candidate = path.join(dir, 'dovecot');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A self-signed certificate for localhost and 127.0.0.1, or null without the openssl CLI (TLS tests then skip). */
function selfSignedCertificate(dir: string): string | null {
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem'),
    ], { stdio: 'ignore' });
    return readFileSync(path.join(dir, 'cert.pem'), 'utf8');
  } catch {
    return null;
  }
}

function config(dir: string, port: number, tlsPort: number | null): string {
  const root = process.getuid?.() === 0;
  const uid = root ? ROOT_MAIL_UID : process.getuid!();
  const gid = root ? ROOT_MAIL_UID : process.getgid!();
  const user = os.userInfo().username;
  const group = (() => {
    try {
      const line = readFileSync('/etc/group', 'utf8').split('\n').find((entry) => entry.split(':')[2] === String(gid));
      return line?.split(':')[0] ?? user;
    } catch {
      return user;
    }
  })();
  // Rootless: Dovecot must not try to switch users, chown or chroot.
  const rootless = root
    ? ''
    : `default_internal_user = ${user}\ndefault_internal_group = ${group}\ndefault_login_user = ${user}\nservice anvil {\n  chroot =\n}\n`;
  return `instance_name = acg-test-dovecot-${port}
base_dir = ${dir}/run
state_dir = ${dir}/state
protocols = imap
listen = 127.0.0.1
log_path = ${dir}/dovecot.log
${tlsPort === null ? 'ssl = no' : `ssl = yes\nssl_cert = <${dir}/cert.pem\nssl_key = <${dir}/key.pem`}
disable_plaintext_auth = no
auth_mechanisms = plain login
# Failed logins are otherwise delayed 2 s and more per attempt (imap.md, "Auth penalty").
auth_failure_delay = 0
login_trusted_networks = 127.0.0.0/8
first_valid_uid = ${Math.min(500, uid)}
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u ${dir}/users
}
userdb {
  driver = static
  args = uid=${uid} gid=${gid} home=${dir}/mail/%u
}
mail_location = maildir:~/Maildir
protocol imap {
  mail_max_userip_connections = ${DOVECOT_USERIP_CONNECTIONS_MAX}
}
namespace inbox {
  inbox = yes
  separator = /
}
${rootless}service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = ${port}
  }
  inet_listener imaps {
    address = 127.0.0.1
    port = ${tlsPort ?? 0}${tlsPort === null ? '' : '\n    ssl = yes'}
  }${root ? '' : '\n  chroot ='}
}
`;
}

/** Whether the server on the port answers a connection with IMAP's `* OK` greeting. */
function greets(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('data', (chunk) => {
      socket.destroy();
      resolve(chunk.toString().startsWith('* OK'));
    });
    socket.once('error', () => resolve(false));
    socket.once('close', () => resolve(false));
  });
}

/** Resolves once the server sends its `* OK` greeting; rejects if the child exits first. */
async function waitForGreeting(port: number, child: ChildProcess, log: () => string): Promise<void> {
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  const state = await waitFor(async () => (exited() ? 'exited' : (await greets(port)) ? 'greeted' : 'starting'), {
    until: (s) => s !== 'starting',
    what: `dovecot's * OK greeting on port ${port}`,
    timeoutMs: READY_TIMEOUT_MS,
  }).catch((error: Error) => {
    throw new Error(`dovecot did not greet within ${READY_TIMEOUT_MS} ms: ${error.message}\n${log()}`, { cause: error });
  });
  if (state === 'exited') throw new Error(`dovecot exited during start-up:\n${log()}`);
}

export async function startDovecot(users: DovecotUser[]): Promise<DovecotServer> {
  const binary = dovecotBinary();
  if (!binary) throw new Error(DOVECOT_SKIP_NOTE);
  // Short path: Dovecot's unix sockets live under base_dir and must stay under 108 characters.
  const dir = mkdtempSync(path.join(os.tmpdir(), 'acg-imap-'));
  // mkdtemp makes 0700; the auth process runs as `dovecot` and must be able to read the users file.
  chmodSync(dir, 0o755);
  for (const sub of ['run', 'state', 'mail']) mkdirSync(path.join(dir, sub));
  if (process.getuid?.() === 0) chownSync(path.join(dir, 'mail'), ROOT_MAIL_UID, ROOT_MAIL_UID);
  writeFileSync(path.join(dir, 'users'), users.map((u) => `${u.username}:{PLAIN}${u.password}::::::\n`).join(''), { mode: 0o644 });
  const port = await freePort();
  const certPem = selfSignedCertificate(dir);
  const tlsPort = certPem === null ? null : await freePort();
  const confPath = path.join(dir, 'dovecot.conf');
  writeFileSync(confPath, config(dir, port, tlsPort), { mode: 0o644 });

  let output = '';
  const child = spawn(binary, ['-F', '-c', confPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const log = () => {
    let file = '';
    try {
      file = readFileSync(path.join(dir, 'dovecot.log'), 'utf8');
    } catch {
      // not written yet
    }
    return `${output}${file}`;
  };

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    await waitForGreeting(port, child, log);
  } catch (error) {
    await stop();
    throw error;
  }
  return { host: '127.0.0.1', port, tls: certPem === null || tlsPort === null ? null : { port: tlsPort, certPem }, dir, users, log, stop };
}

/** An imapflow client for provisioning, in the plain mode the private server speaks. */
export function provisioningClient(server: DovecotServer, user: DovecotUser): ImapFlow {
  const client = new ImapFlow({
    host: server.host,
    port: server.port,
    secure: false,
    doSTARTTLS: false,
    auth: { user: user.username, pass: user.password },
    logger: false,
    disableAutoIdle: true,
    connectionTimeout: 5_000,
    greetingTimeout: 5_000,
    socketTimeout: 10_000,
  });
  client.on('error', () => undefined);
  return client;
}

/** Opens every session Dovecot allows `user`, so that its next login is refused `NO [LIMIT]`; returns their closing. */
export async function holdEverySession(server: DovecotServer, user: DovecotUser): Promise<() => Promise<void>> {
  const held: ImapFlow[] = [];
  const release = async () => {
    await Promise.all(held.map((client) => client.logout().catch(() => client.close())));
  };
  try {
    for (let n = 0; n < DOVECOT_USERIP_CONNECTIONS_MAX; n += 1) {
      const client = provisioningClient(server, user);
      await client.connect();
      held.push(client);
    }
  } catch (error) {
    await release();
    throw error;
  }
  return release;
}

/** Builds an RFC 5322 message with CRLF line endings. */
export function rfc822(headers: Record<string, string>, body: string): string {
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}`);
  return `${head.join('\r\n')}\r\n\r\n${body.replace(/\r?\n/g, '\r\n')}`;
}

// ---- hostile messages: what anyone who can send mail to a mailbox can put in it (found from outside) ----

/** A multipart/mixed message of `parts` one-byte attachments (mailparser reads at most 1,000 MIME nodes). */
export function manyPartsMessage(parts: number): string {
  let body = '';
  for (let n = 0; n < parts; n += 1) body += `--B\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename="f${n}.bin"\r\n\r\nx\r\n`;
  return `From: bomb@example.test\r\nSubject: many parts\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="B"\r\n\r\n${body}--B--\r\n`;
}

/** multipart/mixed nested `depth` levels deep, with one text part at the bottom. */
export function nestedMultipartMessage(depth: number): string {
  let open = '';
  let close = '';
  for (let n = 0; n < depth; n += 1) {
    open += `--b${n}\r\nContent-Type: multipart/mixed; boundary="b${n + 1}"\r\n\r\n`;
    close = `--b${n}--\r\n${close}`;
  }
  return `From: bomb@example.test\r\nSubject: nested\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b0"\r\n\r\n${open}--b${depth}\r\nContent-Type: text/plain\r\n\r\ndeep\r\n--b${depth}--\r\n${close}`;
}

/** `count` addresses `u0@example.test`, `u1@example.test`, …, one per folded line. */
export function addressList(count: number): string {
  return Array.from({ length: count }, (_, n) => `u${n}@example.test`).join(',\r\n ');
}

// ---- the standard fixture: two users, three mailboxes, a multipart receipt with an attachment ----

export const ALICE: DovecotUser = { username: 'alice', password: 'alice-pass' };
export const BOB: DovecotUser = { username: 'bob', password: 'bob-pass' };
/**
 * Only for the tests that hold every session Dovecot allows: a session ends a moment after its LOGOUT, so
 * another user's login right after such a test could still be refused.
 */
export const CAROL: DovecotUser = { username: 'carol', password: 'carol-pass' };
export const RECEIPT_CSV = 'item,price\nwidget,29.99\n';
export const INBOX_MESSAGE_COUNT = 7;
export const LARGE_MESSAGE_BYTES = 300 * 1024;

const DAY_MS = 86_400_000;
const FIRST_DATE_MS = Date.parse('2024-05-01T09:00:00Z');

export interface MailFixture {
  server: DovecotServer;
  /** UIDs per user and mailbox, in append order. */
  uids: { alice: { INBOX: number[]; Receipts: { receipt: number; newsletter: number; large: number }; Private: number[] }; bob: { INBOX: number[] } };
}

function receiptMessage(): string {
  const alternative = [
    '--alt',
    'Content-Type: text/plain; charset=utf-8',
    '',
    'Thanks for your order. Total: 29.99 EUR',
    '--alt',
    'Content-Type: text/html; charset=utf-8',
    '',
    '<p>Thanks for your <b>order</b>. Total: 29.99 EUR</p>',
    '--alt--',
  ].join('\n');
  const body = [
    '--mixed',
    'Content-Type: multipart/alternative; boundary="alt"',
    '',
    alternative,
    '--mixed',
    'Content-Type: text/csv; name="receipt.csv"',
    'Content-Disposition: attachment; filename="receipt.csv"',
    'Content-Transfer-Encoding: base64',
    '',
    Buffer.from(RECEIPT_CSV).toString('base64'),
    '--mixed--',
    '',
  ].join('\n');
  return rfc822(
    {
      From: '"Shop" <orders@shop.example>',
      To: '"Alice" <alice@example.test>',
      Cc: 'accounts@example.test',
      Subject: 'Your receipt #1001',
      Date: 'Wed, 01 May 2024 10:00:00 +0000',
      'Message-ID': '<receipt-1001@shop.example>',
      'In-Reply-To': '<order-1001@example.test>',
      'MIME-Version': '1.0',
      'Content-Type': 'multipart/mixed; boundary="mixed"',
    },
    body,
  );
}

function newsletterMessage(): string {
  // html only, with an inline image referenced by cid: (the parser must not inline its bytes).
  const png = Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000a49444154789c6300010000050001', 'hex');
  const body = [
    '--rel',
    'Content-Type: text/html; charset=utf-8',
    '',
    '<h1>News</h1><img src="cid:logo@news.example">',
    '--rel',
    'Content-Type: image/png',
    'Content-ID: <logo@news.example>',
    'Content-Disposition: inline',
    'Content-Transfer-Encoding: base64',
    '',
    png.toString('base64'),
    '--rel--',
    '',
  ].join('\n');
  return rfc822(
    {
      From: 'news@news.example',
      To: 'alice@example.test',
      Subject: 'Newsletter',
      Date: 'Thu, 02 May 2024 10:00:00 +0000',
      'MIME-Version': '1.0',
      'Content-Type': 'multipart/related; boundary="rel"',
    },
    body,
  );
}

function plainMessage(n: number, to: string): string {
  return rfc822(
    {
      From: `"Sender ${n}" <sender${n}@example.test>`,
      To: to,
      Subject: `Hello ${n}`,
      Date: new Date(FIRST_DATE_MS + n * DAY_MS).toUTCString(),
      'Message-ID': `<hello-${n}@example.test>`,
    },
    `Message number ${n}.\n`,
  );
}

/** Appends a message and returns its UID. */
export async function append(client: ImapFlow, mailbox: string, source: string, flags: string[] = [], date?: Date): Promise<number> {
  const appended = await client.append(mailbox, source, flags, date);
  if (!appended || appended.uid === undefined) throw new Error(`APPEND to ${mailbox} returned no UID`);
  return appended.uid;
}

/** Starts Dovecot and fills it: alice has INBOX (7, every second one unseen), Receipts, Private; bob has INBOX (5); carol's is empty. */
export async function startMailFixture(): Promise<MailFixture> {
  const server = await startDovecot([ALICE, BOB, CAROL]);
  try {
    const alice = provisioningClient(server, ALICE);
    await alice.connect();
    await alice.mailboxCreate('Receipts');
    await alice.mailboxCreate('Private');
    const inbox: number[] = [];
    for (let n = 1; n <= INBOX_MESSAGE_COUNT; n += 1) {
      inbox.push(await append(alice, 'INBOX', plainMessage(n, '"Alice" <alice@example.test>'), n % 2 === 0 ? [] : ['\\Seen'], new Date(FIRST_DATE_MS + n * DAY_MS)));
    }
    const receipt = await append(alice, 'Receipts', receiptMessage(), ['\\Seen'], new Date(FIRST_DATE_MS));
    const newsletter = await append(alice, 'Receipts', newsletterMessage(), [], new Date(FIRST_DATE_MS));
    const largeBody = `${'A long line of text that repeats. '.repeat(30)}\n`.repeat(Math.ceil(LARGE_MESSAGE_BYTES / 1000));
    const large = await append(alice, 'Receipts', rfc822({ From: 'big@example.test', To: 'alice@example.test', Subject: 'Large', Date: 'Fri, 03 May 2024 10:00:00 +0000' }, largeBody), [], new Date(FIRST_DATE_MS));
    const secret = await append(alice, 'Private', plainMessage(99, 'alice@example.test'), [], new Date(FIRST_DATE_MS));
    await alice.logout();

    const bob = provisioningClient(server, BOB);
    await bob.connect();
    const bobInbox: number[] = [];
    for (let n = 1; n <= 5; n += 1) bobInbox.push(await append(bob, 'INBOX', plainMessage(n, 'bob@example.test'), [], new Date(FIRST_DATE_MS + n * DAY_MS)));
    await bob.logout();
    return { server, uids: { alice: { INBOX: inbox, Receipts: { receipt, newsletter, large }, Private: [secret] }, bob: { INBOX: bobInbox } } };
  } catch (error) {
    await server.stop();
    throw error;
  }
}
