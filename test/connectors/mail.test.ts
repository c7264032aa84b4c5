// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { BUILT_IN_SERVICES, Catalogue, ConnectorError } from '../../src/connectors/catalogue.ts';
import { createGitHubContext, type GitHubServiceContext } from '../../src/connectors/github-public.ts';
import {
  MAIL_ADDRESS_NAME_CHARS_MAX,
  MAIL_ADDRESSES_PER_FIELD_MAX,
  MAIL_DEFAULTS,
  MAIL_LOGIN_REFUSED_RETRY_AFTER_S,
  MAIL_SUBJECT_CHARS_MAX,
  getMessage,
  inboxAllowed,
  listMessages,
  type MailConnectionSettings,
  type MailContext,
  type MailSettings,
  type MessageDetail,
  type MessageList,
} from '../../src/connectors/mail.ts';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import {
  ALICE,
  BOB,
  CAROL,
  DOVECOT_SKIP_NOTE,
  INBOX_MESSAGE_COUNT,
  RECEIPT_CSV,
  addressList,
  append,
  dovecotBinary,
  holdEverySession,
  manyPartsMessage,
  nestedMultipartMessage,
  provisioningClient,
  rfc822,
  startMailFixture,
  type DovecotUser,
  type MailFixture,
} from '../support/dovecot.ts';

/** Every built-in connector's context at once: these tests hand one context to any built-in action. */
type ServiceContext = GitHubServiceContext & MailContext;
const catalogue = new Catalogue(BUILT_IN_SERVICES);
const prepareAction = (ctx: ServiceContext, serviceId: string, action: string, input: unknown) => catalogue.prepare(ctx, serviceId, action, input);

describe('inboxAllowed', () => {
  it.each([
    [['INBOX'], 'INBOX', true],
    [['INBOX'], 'inbox', true],
    [['inbox'], 'InBoX', true],
    [['Receipts'], 'Receipts', true],
    [['Receipts'], 'receipts', false],
    [['Receipts'], 'Receipts/2024', false],
    [['INBOX'], 'INBOX/Sub', false],
    [['INBOX/Sub'], 'inbox/Sub', false],
    [[], 'INBOX', false],
    [['Receipts'], 'Private', false],
  ] as const)('allowlist %j, inbox %j → %s', (allowlist, inbox, expected) => {
    expect(inboxAllowed(allowlist, inbox)).toBe(expected);
  });
});

const dovecot = dovecotBinary();
if (!dovecot) console.log(DOVECOT_SKIP_NOTE);

const LOOPBACK_SETTINGS: MailSettings = { ...MAIL_DEFAULTS, allowPrivateNetworkTargets: true, connectTimeoutMs: 2_000, greetingTimeoutMs: 2_000 };

function contextFor(
  connection: MailConnectionSettings | null,
  allowlist: readonly string[] = ['INBOX', 'Receipts'],
  settings: Partial<MailSettings> = {},
): ServiceContext {
  return {
    github: createGitHubContext(),
    mail: { ...LOOPBACK_SETTINGS, ...settings },
    mailConnector: connection ? { connection, allowlist } : null,
  };
}

/**
 * A scripted IMAP server on loopback (cleartext): greets with `capabilities`, answers CAPABILITY with them and
 * every other command OK, and goes silent from the first command matching `silentFrom`. Records each command.
 */
async function startScriptedImap(script: {
  capabilities: string;
  silentFrom?: RegExp;
  /** Answers a command itself (true: handled; 'silent': handled, then the server goes silent). */
  answer?: (command: string, tag: string, socket: Socket) => boolean | 'silent';
}): Promise<{ port: number; commands: string[]; close(): Promise<void> }> {
  const commands: string[] = [];
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    let silent = false;
    let buffered = '';
    socket.write(`* OK [CAPABILITY ${script.capabilities}] scripted server ready\r\n`);
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n'); end >= 0; end = buffered.indexOf('\r\n')) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const [tag = '*', ...rest] = line.split(' ');
        const command = rest.join(' ');
        commands.push(command);
        if (silent || (script.silentFrom && script.silentFrom.test(command))) {
          silent = true;
          continue;
        }
        const answered = script.answer?.(command, tag, socket) ?? false;
        if (answered === 'silent') silent = true;
        if (answered) continue;
        if (/^CAPABILITY\b/i.test(command)) socket.write(`* CAPABILITY ${script.capabilities}\r\n`);
        if (/^LOGOUT\b/i.test(command)) socket.write('* BYE\r\n');
        socket.write(`${tag} OK done\r\n`);
      }
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    commands,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function failure(promise: Promise<unknown>): Promise<ConnectorError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectorError);
  return error as ConnectorError;
}

describe('mail connector without a server', () => {
  const unreachable: MailConnectionSettings = { host: '127.0.0.1', port: 1, tls: 'none', username: 'a', password: 'b' };

  it('refuses an off-allowlist inbox before any connection, in prepareAction and in run', async () => {
    // prepareAction is synchronous: a refusal there cannot have touched the network or taken a hold.
    expect(() => prepareAction(contextFor(unreachable), 'mail', 'messages.list', { inbox: 'Private' })).toThrowError(
      expect.objectContaining({ code: 'inbox_not_allowed', status: 403 }),
    );
    expect(() => prepareAction(contextFor(unreachable), 'mail', 'messages.get', { inbox: 'receipts', uid: 1 })).toThrowError(
      expect.objectContaining({ code: 'inbox_not_allowed' }),
    );
    const direct = await failure(listMessages(contextFor(unreachable), { inbox: 'Private' }));
    expect(direct.code).toBe('inbox_not_allowed');
  });

  it('refuses inboxes.list before any connection when the allowlist is empty (there is nothing it may list, so nothing to charge for)', () => {
    expect(() => prepareAction(contextFor(unreachable, []), 'mail', 'inboxes.list', {})).toThrowError(
      expect.objectContaining({ code: 'inbox_not_allowed', status: 403, message: expect.stringContaining('allowlist is empty') }),
    );
  });

  it('refuses every mail action when the agent has no mail connector', () => {
    expect(() => prepareAction(contextFor(null), 'mail', 'inboxes.list', {})).toThrowError(
      expect.objectContaining({ code: 'connector_not_configured' }),
    );
  });

  it('validates input: limit range, uid, unknown members, cursor alphabet', () => {
    for (const input of [{ inbox: 'INBOX', limit: 0 }, { inbox: 'INBOX', limit: 51 }, { inbox: 'INBOX', extra: true }, { inbox: '' }, { inbox: 'INBOX', cursor: 'a+b' }]) {
      expect(() => prepareAction(contextFor(unreachable), 'mail', 'messages.list', input)).toThrowError(expect.objectContaining({ code: 'invalid_input' }));
    }
    for (const input of [{ inbox: 'INBOX', uid: 0 }, { inbox: 'INBOX', uid: 1.5 }, { inbox: 'INBOX' }]) {
      expect(() => prepareAction(contextFor(unreachable), 'mail', 'messages.get', input)).toThrowError(expect.objectContaining({ code: 'invalid_input' }));
    }
  });

  it('answers upstream_unavailable quickly when nothing listens on the port', async () => {
    const startedMs = Date.now();
    const error = await failure(prepareAction(contextFor(unreachable), 'mail', 'inboxes.list', {}).run());
    expect(error).toMatchObject({ code: 'upstream_unavailable', status: 502 });
    expect(Date.now() - startedMs).toBeLessThan(1_000);
  });

  it('refuses cleartext IMAP unless the test-only setting allows it', async () => {
    const ctx = contextFor({ ...unreachable, host: '192.0.2.1' }, ['INBOX'], { allowPrivateNetworkTargets: false });
    const error = await failure(prepareAction(ctx, 'mail', 'inboxes.list', {}).run());
    expect(error).toMatchObject({ code: 'connector_not_configured', status: 409 });
    expect(error.detail).toContain('cleartext');
  });

  it('refuses a host that resolves to a loopback or private address unless the test-only setting allows it, as the owner\'s setting to change (409 connector_not_configured), not an outage to retry (found from outside)', async () => {
    const ctx = contextFor({ ...unreachable, host: 'localhost', tls: 'implicit' }, ['INBOX'], { allowPrivateNetworkTargets: false });
    const error = await failure(prepareAction(ctx, 'mail', 'inboxes.list', {}).run());
    expect(error).toMatchObject({ code: 'connector_not_configured', status: 409 });
    expect(error.detail).toContain('resolves to a non-public address');
    expect(error.detail).toContain('the owner must set the mail connector');
  });

  it('tells a refused password from a login the server refuses for now by its response code (RFC 5530): [LIMIT], [UNAVAILABLE] and [INUSE] are upstream_unavailable with a Retry-After (found from outside)', async () => {
    const answers: Record<string, { code: string; retryAfterS: number | undefined; saysPassword: boolean }> = {};
    for (const responseCode of ['AUTHENTICATIONFAILED', 'AUTHORIZATIONFAILED', 'EXPIRED', 'none', 'ALERT', 'LIMIT', 'UNAVAILABLE', 'INUSE', 'CONTACTADMIN']) {
      const server = await startScriptedImap({
        capabilities: 'IMAP4rev1',
        answer: (command, tag, socket) => {
          if (!/^LOGIN\b/i.test(command)) return false;
          socket.write(`${tag} NO ${responseCode === 'none' ? '' : `[${responseCode}] `}login refused\r\n`);
          return true;
        },
      });
      try {
        const error = await failure(prepareAction(contextFor({ ...unreachable, port: server.port }), 'mail', 'inboxes.list', {}).run());
        answers[responseCode] = { code: error.code, retryAfterS: error.retryAfterS, saysPassword: error.detail.includes('password') };
      } finally {
        await server.close();
      }
    }
    const refused = { code: 'upstream_auth_failed', retryAfterS: undefined };
    const forNow = { code: 'upstream_unavailable', retryAfterS: MAIL_LOGIN_REFUSED_RETRY_AFTER_S, saysPassword: false };
    expect(answers).toEqual({
      AUTHENTICATIONFAILED: { ...refused, saysPassword: true },
      AUTHORIZATIONFAILED: { ...refused, saysPassword: false },
      EXPIRED: { ...refused, saysPassword: true },
      // Many servers give no code with a refused password, and some [ALERT] with one the owner has to change.
      none: { ...refused, saysPassword: true },
      ALERT: { ...refused, saysPassword: true },
      LIMIT: forNow,
      UNAVAILABLE: forNow,
      INUSE: forNow,
      // Neither a refused password nor a limit that passes: the owner has to look.
      CONTACTADMIN: { code: 'upstream_unavailable', retryAfterS: undefined, saysPassword: false },
    });
  });

  it('answers upstream_unavailable, not a 500, when STARTTLS is required and the server does not offer it; no login is sent', async () => {
    const server = await startScriptedImap({ capabilities: 'IMAP4rev1 AUTH=PLAIN' });
    try {
      const ctx = contextFor({ ...unreachable, port: server.port, tls: 'starttls' });
      const error = await failure(prepareAction(ctx, 'mail', 'inboxes.list', {}).run());
      expect(error).toMatchObject({ code: 'upstream_unavailable', status: 502 });
      expect(error.detail).toContain('STARTTLS');
      expect(server.commands.some((command) => /^(LOGIN|AUTHENTICATE)\b/i.test(command))).toBe(false);
    } finally {
      await server.close();
    }
  });

  it('answers upstream_timeout when the server goes silent in the middle of a session (socket timeout), as before its greeting', async () => {
    const server = await startScriptedImap({ capabilities: 'IMAP4rev1 AUTH=PLAIN', silentFrom: /^(LIST|STATUS|SELECT|EXAMINE)\b/i });
    try {
      const ctx = contextFor({ ...unreachable, port: server.port }, ['INBOX'], { socketTimeoutMs: 300, operationTimeoutMs: 5_000 });
      const startedMs = Date.now();
      const error = await failure(prepareAction(ctx, 'mail', 'inboxes.list', {}).run());
      expect(error).toMatchObject({ code: 'upstream_timeout', status: 504 });
      expect(server.commands.some((command) => /^(LOGIN|AUTHENTICATE)\b/i.test(command))).toBe(true);
      expect(Date.now() - startedMs).toBeLessThan(4_000);
    } finally {
      await server.close();
    }
  });

  it('answers upstream_timeout when the server stalls in the middle of sending a message (socket timeout)', async () => {
    const server = await startScriptedImap({
      capabilities: 'IMAP4rev1 AUTH=PLAIN',
      answer: (command, tag, socket) => {
        if (/^(EXAMINE|SELECT)\b/i.test(command)) {
          socket.write(`* 1 EXISTS\r\n* 0 RECENT\r\n* OK [UIDVALIDITY 7] ok\r\n* OK [UIDNEXT 2] ok\r\n* FLAGS (\\Seen)\r\n${tag} OK [READ-ONLY] done\r\n`);
          return true;
        }
        if (/^UID FETCH\b/i.test(command)) {
          // The literal announces 200,000 bytes; 1,000 arrive, then nothing.
          socket.write(`* 1 FETCH (UID 1 RFC822.SIZE 200000 BODY[] {200000}\r\n${'x'.repeat(1000)}`);
          return 'silent';
        }
        return false;
      },
    });
    try {
      const ctx = contextFor({ ...unreachable, port: server.port }, ['INBOX'], { socketTimeoutMs: 300, operationTimeoutMs: 5_000 });
      const error = await failure(prepareAction(ctx, 'mail', 'messages.get', { inbox: 'INBOX', uid: 1 }).run());
      expect(error).toMatchObject({ code: 'upstream_timeout', status: 504 });
      expect(server.commands.some((command) => /^UID FETCH\b/i.test(command))).toBe(true);
    } finally {
      await server.close();
    }
  });

  it('answers upstream_timeout when the server accepts but never greets', async () => {
    const sockets: Socket[] = [];
    const silent: Server = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      const ctx = contextFor({ ...unreachable, port }, ['INBOX'], { greetingTimeoutMs: 300, operationTimeoutMs: 2_000 });
      const startedMs = Date.now();
      const error = await failure(prepareAction(ctx, 'mail', 'inboxes.list', {}).run());
      expect(error).toMatchObject({ code: 'upstream_timeout', status: 504 });
      expect(Date.now() - startedMs).toBeLessThan(1_500);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe.skipIf(!dovecot)('mail connector against a real Dovecot', () => {
  let fixture: MailFixture;
  beforeAll(async () => {
    fixture = await startMailFixture();
  });
  afterAll(() => fixture?.server.stop());

  function connection(user: DovecotUser): MailConnectionSettings {
    return { host: fixture.server.host, port: fixture.server.port, tls: 'none', username: user.username, password: user.password };
  }

  /** Prepares the action (its clearance: a refusal there, e.g. another inbox's cursor, is this promise's too) and runs it. */
  async function run(user: DovecotUser, action: string, input: unknown, allowlist?: readonly string[], settings?: Partial<MailSettings>): Promise<object> {
    return prepareAction(contextFor(connection(user), allowlist, settings), 'mail', action, input).run();
  }

  it('inboxes.list returns only allowlisted mailboxes that exist, with counts', async () => {
    const result = await run(ALICE, 'inboxes.list', {}, ['INBOX', 'Receipts', 'Missing']);
    expect(result).toEqual({
      inboxes: [
        { name: 'INBOX', specialUse: '\\Inbox', messages: INBOX_MESSAGE_COUNT, unseen: 3 },
        { name: 'Receipts', specialUse: null, messages: 3, unseen: 2 },
      ],
    });
  });

  it("inboxes.list never shows another user's mailboxes", async () => {
    const result = await run(BOB, 'inboxes.list', {}, ['INBOX', 'Receipts', 'Private']);
    expect(result).toEqual({ inboxes: [{ name: 'INBOX', specialUse: '\\Inbox', messages: 5, unseen: 5 }] });
  });

  it('messages.list returns the newest messages first with envelope facts', async () => {
    const result = (await run(ALICE, 'messages.list', { inbox: 'inbox' })) as MessageList;
    expect(result.nextCursor).toBeNull();
    expect(result.messages.map((m) => m.uid)).toEqual([...fixture.uids.alice.INBOX].reverse());
    expect(result.messages[0]).toEqual({
      uid: fixture.uids.alice.INBOX[6],
      subject: 'Hello 7',
      subjectTruncated: false,
      from: [{ name: 'Sender 7', address: 'sender7@example.test' }],
      fromTruncated: false,
      to: [{ name: 'Alice', address: 'alice@example.test' }],
      toTruncated: false,
      date: Date.parse('2024-05-08T09:00:00Z') / 1000,
      size: expect.any(Number),
      flags: ['\\Seen'],
      hasAttachments: false,
    });
    expect(result.messages[1]!.flags).toEqual([]);
  });

  it('messages.list pages with limit and cursor over every message exactly once, newest first', async () => {
    const seen: number[] = [];
    let cursor: string | undefined;
    const pageSizes: number[] = [];
    for (let page = 0; page < 10; page += 1) {
      const result = (await run(ALICE, 'messages.list', { inbox: 'INBOX', limit: 3, ...(cursor ? { cursor } : {}) })) as MessageList;
      pageSizes.push(result.messages.length);
      seen.push(...result.messages.map((m) => m.uid));
      if (!result.nextCursor) break;
      cursor = result.nextCursor;
    }
    expect(pageSizes).toEqual([3, 3, 1]);
    expect(seen).toEqual([...fixture.uids.alice.INBOX].reverse());
  });

  it('keeps paging stable while new mail arrives', async () => {
    const first = (await run(BOB, 'messages.list', { inbox: 'INBOX', limit: 2 })) as MessageList;
    const client = provisioningClient(fixture.server, BOB);
    await client.connect();
    await client.append('INBOX', 'Subject: late\r\n\r\nlate\r\n');
    await client.logout();
    const rest = (await run(BOB, 'messages.list', { inbox: 'INBOX', limit: 50, cursor: first.nextCursor! })) as MessageList;
    const all = [...first.messages, ...rest.messages].map((m) => m.uid);
    expect(all).toEqual([...fixture.uids.bob.INBOX].reverse());
    expect(rest.nextCursor).toBeNull();
  });

  it('refuses a cursor from another inbox or from an earlier UIDVALIDITY', async () => {
    const receipts = (await run(ALICE, 'messages.list', { inbox: 'Receipts', limit: 1 })) as MessageList;
    expect(await failure(run(ALICE, 'messages.list', { inbox: 'INBOX', cursor: receipts.nextCursor! }))).toMatchObject({ code: 'invalid_input' });
    expect(await failure(run(ALICE, 'messages.list', { inbox: 'INBOX', cursor: 'bm9uc2Vuc2U' }))).toMatchObject({ code: 'invalid_input' });

    const client = provisioningClient(fixture.server, ALICE);
    await client.connect();
    await client.mailboxCreate('Temp');
    await client.append('Temp', 'Subject: one\r\n\r\n1\r\n');
    await client.append('Temp', 'Subject: two\r\n\r\n2\r\n');
    const before = (await run(ALICE, 'messages.list', { inbox: 'Temp', limit: 1 }, ['Temp'])) as MessageList;
    // Deleting and recreating a mailbox gives it a new UIDVALIDITY: old UIDs mean nothing there.
    await client.mailboxDelete('Temp');
    await client.mailboxCreate('Temp');
    await client.append('Temp', 'Subject: three\r\n\r\n3\r\n');
    await client.append('Temp', 'Subject: four\r\n\r\n4\r\n');
    await client.logout();
    const error = await failure(run(ALICE, 'messages.list', { inbox: 'Temp', cursor: before.nextCursor! }, ['Temp']));
    expect(error).toMatchObject({ code: 'invalid_input' });
    expect(error.detail).toContain('UIDVALIDITY');
  });

  it('messages.get parses a multipart/alternative message and lists its attachment without content', async () => {
    const uid = fixture.uids.alice.Receipts.receipt;
    const result = (await run(ALICE, 'messages.get', { inbox: 'Receipts', uid })) as MessageDetail;
    expect(result).toEqual({
      uid,
      size: expect.any(Number),
      flags: ['\\Seen'],
      truncated: false,
      headers: {
        messageId: '<receipt-1001@shop.example>',
        subject: 'Your receipt #1001',
        subjectTruncated: false,
        from: [{ name: 'Shop', address: 'orders@shop.example' }],
        fromTruncated: false,
        to: [{ name: 'Alice', address: 'alice@example.test' }],
        toTruncated: false,
        cc: [{ name: null, address: 'accounts@example.test' }],
        ccTruncated: false,
        date: Date.parse('2024-05-01T10:00:00Z') / 1000,
        inReplyTo: '<order-1001@example.test>',
      },
      text: 'Thanks for your order. Total: 29.99 EUR',
      textTruncated: false,
      html: '<p>Thanks for your <b>order</b>. Total: 29.99 EUR</p>',
      htmlTruncated: false,
      attachments: [{ filename: 'receipt.csv', contentType: 'text/csv', size: Buffer.byteLength(RECEIPT_CSV), contentId: null }],
    });
    const json = JSON.stringify(result);
    expect(json).not.toContain('widget');
    expect(json).not.toContain(Buffer.from(RECEIPT_CSV).toString('base64'));
  });

  it('messages.get keeps cid: links instead of inlining attachment bytes, and reads without marking \\Seen', async () => {
    const uid = fixture.uids.alice.Receipts.newsletter;
    const result = (await run(ALICE, 'messages.get', { inbox: 'Receipts', uid })) as MessageDetail;
    expect(result.html).toContain('cid:logo@news.example');
    expect(result.html).not.toContain('data:');
    expect(result.text).toBeNull();
    expect(result.attachments).toEqual([{ filename: null, contentType: 'image/png', size: expect.any(Number), contentId: 'logo@news.example' }]);
    const again = (await run(ALICE, 'messages.get', { inbox: 'Receipts', uid })) as MessageDetail;
    expect(again.flags).not.toContain('\\Seen');
  });

  it('messages.get truncates a message above the size cap and caps the text', async () => {
    const uid = fixture.uids.alice.Receipts.large;
    const result = (await run(ALICE, 'messages.get', { inbox: 'Receipts', uid }, undefined, { messageBytesMax: 64 * 1024, bodyCharsMax: 1_000 })) as MessageDetail;
    expect(result.truncated).toBe(true);
    expect(result.size).toBeGreaterThan(64 * 1024);
    expect(result.textTruncated).toBe(true);
    expect(result.text).toHaveLength(1_000);
    expect(result.headers.subject).toBe('Large');
  });

  it('messages.get dates a message as messages.list does: its Date header, else when the server received it, never the time of the read (found from outside)', async () => {
    const client = provisioningClient(fixture.server, ALICE);
    await client.connect();
    await client.mailboxCreate('Dates');
    const received = new Date('2026-03-04T05:06:07Z');
    await client.append('Dates', 'Date: Tue, 1 Sep 2026 10:00:00 +0000\r\nSubject: dated\r\n\r\nd\r\n', [], received);
    await client.append('Dates', 'Date: not a date at all\r\nSubject: bad date\r\n\r\nb\r\n', [], received);
    await client.append('Dates', 'Subject: no date\r\n\r\nn\r\n', [], received);
    await client.logout();
    const listed = (await run(ALICE, 'messages.list', { inbox: 'Dates', limit: 10 }, ['Dates'])) as MessageList;
    const dates = new Map<string, number | null>();
    for (const message of listed.messages) {
      const got = (await run(ALICE, 'messages.get', { inbox: 'Dates', uid: message.uid }, ['Dates'])) as MessageDetail;
      expect(got.headers.date, message.subject ?? '').toBe(message.date);
      dates.set(got.headers.subject ?? '', got.headers.date);
    }
    expect(Object.fromEntries(dates)).toEqual({
      dated: Date.UTC(2026, 8, 1, 10) / 1000,
      'bad date': received.getTime() / 1000,
      'no date': received.getTime() / 1000,
    });
  });

  it('messages.get of an unknown uid is upstream_not_found', async () => {
    expect(await failure(run(ALICE, 'messages.get', { inbox: 'INBOX', uid: 999 }))).toMatchObject({ code: 'upstream_not_found', status: 404 });
  });

  it('an allowlisted inbox that does not exist is upstream_not_found', async () => {
    expect(await failure(run(ALICE, 'messages.list', { inbox: 'Missing' }, ['Missing']))).toMatchObject({ code: 'upstream_not_found' });
  });

  it('connects with implicit TLS and with STARTTLS, verifying the certificate against the host name', async (context) => {
    const tls = fixture.server.tls;
    if (!tls) {
      console.log('SKIPPED: TLS mail tests need the openssl CLI');
      context.skip();
      return;
    }
    // "localhost" resolves to 127.0.0.1; the connection goes to that address and TLS checks the name.
    const base = { ...connection(ALICE), host: 'localhost', ca: tls.certPem };
    const expected = { inboxes: [expect.objectContaining({ name: 'INBOX' })] };
    const ctx = (settings: MailConnectionSettings) => contextFor(settings, ['INBOX']);
    expect(await prepareAction(ctx({ ...base, port: tls.port, tls: 'implicit' }), 'mail', 'inboxes.list', {}).run()).toEqual(expected);
    expect(await prepareAction(ctx({ ...base, tls: 'starttls' }), 'mail', 'inboxes.list', {}).run()).toEqual(expected);
    const { ca: _ca, ...untrusted } = base;
    const error = await failure(prepareAction(ctx({ ...untrusted, port: tls.port, tls: 'implicit' }), 'mail', 'inboxes.list', {}).run());
    expect(error).toMatchObject({ code: 'upstream_unavailable' });
  });

  // Before any refused password: Dovecot delays every later login from the same address a little.
  it('a login refused for the number of sessions (NO [LIMIT]) is a retryable upstream_unavailable, not upstream_auth_failed (found from outside)', async () => {
    const release = await holdEverySession(fixture.server, CAROL);
    try {
      const error = await failure(run(CAROL, 'inboxes.list', {}, ['INBOX']));
      expect(error).toMatchObject({ code: 'upstream_unavailable', status: 502, retryAfterS: MAIL_LOGIN_REFUSED_RETRY_AFTER_S });
      expect(error.detail).toContain('[LIMIT]');
      expect(error.detail).not.toContain('password');
    } finally {
      await release();
    }
  });

  it('a wrong password is upstream_auth_failed, without a login penalty delay', async () => {
    const startedMs = Date.now();
    const error = await failure(run({ username: 'alice', password: 'wrong' }, 'inboxes.list', {}));
    expect(error).toMatchObject({ code: 'upstream_auth_failed', status: 502 });
    expect(Date.now() - startedMs).toBeLessThan(3_000);
  });

  /** Appends the messages to a new mailbox of alice's; their UIDs in order. */
  async function mailbox(name: string, sources: string[]): Promise<number[]> {
    const client = provisioningClient(fixture.server, ALICE);
    await client.connect();
    try {
      await client.mailboxCreate(name);
      const uids: number[] = [];
      for (const source of sources) uids.push(await append(client, name, source));
      return uids;
    } finally {
      await client.logout();
    }
  }

  it('messages.get of a message the parser refuses (too many MIME parts, nested too deep) is upstream_unprocessable, not a 500; the inbox still lists both (found from outside)', async () => {
    const [manyParts, nested] = await mailbox('Bombs', [manyPartsMessage(1_500), nestedMultipartMessage(1_100)]);
    for (const uid of [manyParts!, nested!]) {
      const error = await failure(run(ALICE, 'messages.get', { inbox: 'Bombs', uid }, ['Bombs']));
      expect(error).toMatchObject({ code: 'upstream_unprocessable', status: 422 });
      expect(error.detail).toContain('could not be parsed');
    }
    const listed = (await run(ALICE, 'messages.list', { inbox: 'Bombs' }, ['Bombs'])) as MessageList;
    expect(listed.messages.find((message) => message.uid === manyParts)).toMatchObject({ subject: 'many parts', hasAttachments: true });
    // The nested one too: its structure is past what imapflow parses, so it lists without it (it was missing).
    expect(listed.messages.find((message) => message.uid === nested)).toMatchObject({ subject: 'nested', hasAttachments: false });
  });

  it('caps header fields as it caps the text, and says so: the subject, each address list, each name; an id too long to be one is null (found from outside)', async () => {
    const subject = Array.from({ length: 2_000 }, (_, n) => `word${n}`).join('\r\n ');
    const longName = 'N'.repeat(1_000);
    const filler = `X-Filler: ${'f'.repeat(70)}\r\n`.repeat(1_000);
    const [uid, late] = await mailbox('Headers', [
      rfc822(
        {
          Date: 'Wed, 01 May 2024 10:00:00 +0000',
          From: `"${longName}" <long@example.test>`,
          To: addressList(2_000),
          Cc: addressList(150),
          Subject: subject,
          'Message-ID': `<${'i'.repeat(1_200)}@example.test>`,
        },
        'body\n',
      ),
      // Its fields come after 80 KB of others: past what messages.list reads of a header.
      `${filler}Subject: late\r\nDate: Wed, 01 May 2024 10:00:00 +0000\r\n\r\nbody\r\n`,
    ]);
    const got = (await run(ALICE, 'messages.get', { inbox: 'Headers', uid }, ['Headers'])) as MessageDetail;
    const cut = {
      subject: got.headers.subject?.length,
      subjectTruncated: got.headers.subjectTruncated,
      fromName: got.headers.from[0]?.name?.length,
      fromTruncated: got.headers.fromTruncated,
      to: got.headers.to.length,
      toTruncated: got.headers.toTruncated,
      cc: got.headers.cc.length,
      ccTruncated: got.headers.ccTruncated,
    };
    expect(cut).toEqual({
      subject: MAIL_SUBJECT_CHARS_MAX,
      subjectTruncated: true,
      fromName: MAIL_ADDRESS_NAME_CHARS_MAX,
      fromTruncated: true,
      to: MAIL_ADDRESSES_PER_FIELD_MAX,
      toTruncated: true,
      cc: MAIL_ADDRESSES_PER_FIELD_MAX,
      ccTruncated: true,
    });
    expect(got.headers.to[0]).toEqual({ name: null, address: 'u0@example.test' });
    expect(got.headers.messageId).toBeNull();
    expect(got.headers.date).toBe(Date.parse('2024-05-01T10:00:00Z') / 1000);
    expect(got.text).toBe('body\n');

    const listed = (await run(ALICE, 'messages.list', { inbox: 'Headers' }, ['Headers'])) as MessageList;
    const summary = listed.messages.find((message) => message.uid === uid)!;
    expect({
      subject: summary.subject,
      subjectTruncated: summary.subjectTruncated,
      from: summary.from,
      fromTruncated: summary.fromTruncated,
      to: summary.to,
      toTruncated: summary.toTruncated,
      date: summary.date,
    }).toEqual({
      subject: got.headers.subject,
      subjectTruncated: true,
      from: got.headers.from,
      fromTruncated: true,
      to: got.headers.to,
      toTruncated: true,
      date: got.headers.date,
    });
    // What the list did not read, it does not claim: the fields it did not reach say truncated, and the date is the
    // server's INTERNALDATE (the append, moments ago).
    const lateSummary = listed.messages.find((message) => message.uid === late)!;
    expect(lateSummary).toMatchObject({ subject: null, subjectTruncated: true, from: [], fromTruncated: true, to: [], toTruncated: true });
    expect(Math.abs(lateSummary.date! - Date.now() / 1000)).toBeLessThan(600);
    expect(((await run(ALICE, 'messages.get', { inbox: 'Headers', uid: late }, ['Headers'])) as MessageDetail).headers).toMatchObject({ subject: 'late', subjectTruncated: false });
  });

  it('cuts an unbroken subject longer than what it reads to its first 998 characters, not to nothing (found from outside: null, or "Re:")', async () => {
    const subjects = ['x'.repeat(17_000), `Re: ${'漢'.repeat(6_000)}`, '漢'.repeat(6_000)];
    const uids = await mailbox('Unbroken', subjects.map((subject) => rfc822({ Date: 'Wed, 01 May 2024 10:00:00 +0000', Subject: subject }, 'body\n')));
    for (const [index, uid] of uids.entries()) {
      const got = (await run(ALICE, 'messages.get', { inbox: 'Unbroken', uid }, ['Unbroken'])) as MessageDetail;
      expect(got.headers.subjectTruncated).toBe(true);
      expect(got.headers.subject).toBe(subjects[index]!.slice(0, MAIL_SUBJECT_CHARS_MAX));
    }
    const listed = (await run(ALICE, 'messages.list', { inbox: 'Unbroken' }, ['Unbroken'])) as MessageList;
    expect(listed.messages.map((message) => message.subject?.length)).toEqual(subjects.map(() => MAIL_SUBJECT_CHARS_MAX));
  });

  it('messages.get reads a message whose header is more than the MIME parser takes (1 MiB): only the fields it returns, each from its first 16 KiB', async () => {
    const filler = `X-Filler: ${'f'.repeat(70)}\r\n`.repeat(15_000);
    const [wideTo, junk] = await mailbox('BigHeaders', [
      rfc822({ From: 'a@example.test', To: addressList(100_000), Subject: 'wide' }, 'wide body\n'),
      `${filler}From: b@example.test\r\nSubject: junk\r\n\r\njunk body\r\n`,
    ]);
    const wide = (await run(ALICE, 'messages.get', { inbox: 'BigHeaders', uid: wideTo }, ['BigHeaders'])) as MessageDetail;
    expect([wide.headers.subject, wide.headers.to.length, wide.headers.toTruncated, wide.text]).toEqual(['wide', MAIL_ADDRESSES_PER_FIELD_MAX, true, 'wide body\n']);
    const other = (await run(ALICE, 'messages.get', { inbox: 'BigHeaders', uid: junk }, ['BigHeaders'])) as MessageDetail;
    expect([other.headers.subject, other.headers.from, other.text]).toEqual(['junk', [{ name: null, address: 'b@example.test' }], 'junk body\n']);
  });

  it('messages.list of messages with huge headers stays small and never holds the event loop: it reads a bounded prefix of each header (found from outside)', async () => {
    const recipients = addressList(20_000);
    await mailbox('ToBomb', Array.from({ length: 10 }, (_, n) => rfc822({ From: 'a@example.test', To: recipients, Subject: `many to ${n}` }, 'body\n')));
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const listed = (await run(ALICE, 'messages.list', { inbox: 'ToBomb', limit: 10 }, ['ToBomb'])) as MessageList;
    delay.disable();
    expect(listed.messages.map((message) => [message.to.length, message.toTruncated])).toEqual(Array.from({ length: 10 }, () => [MAIL_ADDRESSES_PER_FIELD_MAX, true]));
    expect(JSON.stringify(listed).length).toBeLessThan(100_000);
    // Parsing the ENVELOPEs of these ten messages (20,000 addresses each) held the loop for 2.7 s.
    expect(delay.max / 1e6).toBeLessThan(1_000);
  });
});
