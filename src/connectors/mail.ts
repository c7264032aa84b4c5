// The `mail` service: read-only access to an agent's IMAP mailbox, limited to the inboxes its owner put on
// the allowlist. One IMAP connection per execution (credentials differ per agent; a pool would hold
// logged-in sessions for no gain at one credit a call), opened read-only so reading never sets \Seen.
import { Type, type Static } from '@sinclair/typebox';
// imapflow and mailparser are loaded at the first mail call, not at start-up (they are large, and most
// gateways never run this connector).
import type { ImapFlow, FetchMessageObject, MessageStructureObject } from 'imapflow';
import type { AddressObject, ParsedMail } from 'mailparser';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { Config } from '../platform/config.ts';
import { UC_PER_CREDIT } from '../platform/money.ts';
import { isPublicAddress } from '../platform/outbound.ts';
import type { ServiceModule } from './types.ts';
import { ConnectorError, inputRefusal } from './connector-error.ts';

export type MailTlsMode = 'implicit' | 'starttls' | 'none';

/** An agent's IMAP account, as its owner configured it (password decrypted from the secret box). */
export interface MailConnectionSettings {
  host: string;
  port: number;
  /** implicit: TLS from the first byte (port 993); starttls: upgrade required; none: cleartext, test servers only. */
  tls: MailTlsMode;
  username: string;
  password: string;
  /** PEM of the CA to trust for this server instead of the public roots (self-hosted servers). */
  ca?: string;
}

export interface MailConnector {
  connection: MailConnectionSettings;
  /** Mailbox names the agent may read; see inboxAllowed for the matching rule. */
  allowlist: readonly string[];
}

/** What the mail actions need: the operator's limits and the executing agent's connector. */
export interface MailContext {
  mail: MailSettings;
  /** The executing agent's mail connector (password already decrypted), or null when it has none. */
  mailConnector: MailConnector | null;
}

/** Operator limits shared by every mail connection. */
export interface MailSettings {
  /** TCP + TLS handshake budget. */
  connectTimeoutMs: number;
  /** Wait for the server's greeting after connecting. */
  greetingTimeoutMs: number;
  /** Inactivity on an open socket. */
  socketTimeoutMs: number;
  /** Budget for the whole execution: connect, log in, work, log out. */
  operationTimeoutMs: number;
  /** messages.get reads at most this many bytes of a message's source (larger messages are truncated). */
  messageBytesMax: number;
  /** messages.get returns at most this many UTF-16 code units of text and of html each. */
  bodyCharsMax: number;
  /** TEST ONLY: allow mail hosts on loopback and private networks. */
  allowPrivateNetworkTargets: boolean;
}

export const MAIL_DEFAULTS: MailSettings = {
  connectTimeoutMs: 10_000,
  greetingTimeoutMs: 10_000,
  socketTimeoutMs: 20_000,
  operationTimeoutMs: 30_000,
  messageBytesMax: 5 * 1024 * 1024,
  bodyCharsMax: 256 * 1024,
  allowPrivateNetworkTargets: false,
};

export const MAIL_ALLOWLIST_ENTRIES_MAX = 50;
export const MAIL_PAGE_SIZE_DEFAULT = 20;
export const MAIL_PAGE_SIZE_MAX = 50;
/** Bounds what a hostile or huge server can make us buffer: a SEARCH of a million UIDs fits with room. */
const IMAP_RESPONSE_BYTES_MAX = 16 * 1024 * 1024;

// Mailbox names: any printable text; IMAP quoting and modified UTF-7 are imapflow's job.
const MailboxName = Type.String({ minLength: 1, maxLength: 255, pattern: '^[^\\x00-\\x1f\\x7f]+$' });

/** Shape of a mail connector as an owner submits it (for the lead's connector routes). */
export const MailConnectorInput = Type.Object(
  {
    host: Type.String({ minLength: 1, maxLength: 253, pattern: '^[A-Za-z0-9.:-]+$' }),
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
    tls: Type.Union([Type.Literal('implicit'), Type.Literal('starttls'), Type.Literal('none')]),
    username: Type.String({ minLength: 1, maxLength: 320 }),
    password: Type.String({ minLength: 1, maxLength: 1024 }),
    ca: Type.Optional(Type.String({ minLength: 1, maxLength: 64 * 1024 })),
    allowlist: Type.Array(MailboxName, { minItems: 1, maxItems: MAIL_ALLOWLIST_ENTRIES_MAX, uniqueItems: true }),
  },
  { additionalProperties: false },
);

export const InboxesListInput = Type.Object({}, { additionalProperties: false });
export const MessagesListInput = Type.Object(
  {
    inbox: MailboxName,
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAIL_PAGE_SIZE_MAX, default: MAIL_PAGE_SIZE_DEFAULT })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 512, pattern: '^[A-Za-z0-9_-]+$' })),
  },
  { additionalProperties: false },
);
export const MessagesGetInput = Type.Object(
  { inbox: MailboxName, uid: Type.Integer({ minimum: 1, maximum: 4_294_967_295 }) },
  { additionalProperties: false },
);
export type MessagesListInput = Static<typeof MessagesListInput>;
export type MessagesGetInput = Static<typeof MessagesGetInput>;

export interface MailAddress {
  name: string | null;
  address: string | null;
}

export interface InboxSummary {
  name: string;
  /** RFC 6154 special use such as `\Sent`; imapflow reports INBOX as `\Inbox`. */
  specialUse: string | null;
  messages: number;
  unseen: number;
}

export interface MessageSummary {
  uid: number;
  /** At most MAIL_SUBJECT_CHARS_MAX characters; `subjectTruncated` says when it was cut. */
  subject: string | null;
  subjectTruncated: boolean;
  /** At most MAIL_ADDRESSES_PER_FIELD_MAX addresses; `fromTruncated` says when addresses were left out or cut. */
  from: MailAddress[];
  fromTruncated: boolean;
  to: MailAddress[];
  toTruncated: boolean;
  /** Date header, else the server's internal date; Unix seconds. */
  date: number | null;
  /** RFC822.SIZE in bytes. */
  size: number;
  /** Without the session-dependent `\Recent`. */
  flags: string[];
  /** True when some leaf part is a disposition=attachment or carries a filename. */
  hasAttachments: boolean;
}

export interface MessageList {
  messages: MessageSummary[];
  nextCursor: string | null;
}

export interface AttachmentMetadata {
  filename: string | null;
  contentType: string;
  /** Decoded size in bytes (of the part as read, see `truncated`). */
  size: number;
  /** Content-ID without angle brackets, as `cid:` links reference it. */
  contentId: string | null;
}

export interface MessageDetail {
  uid: number;
  size: number;
  flags: string[];
  /** True when the source was larger than the cap and only its beginning was read and parsed. */
  truncated: boolean;
  /** Capped as in MessageSummary; an id longer than MAIL_MESSAGE_ID_CHARS_MAX is null (a cut id names no message). */
  headers: {
    messageId: string | null;
    subject: string | null;
    subjectTruncated: boolean;
    from: MailAddress[];
    fromTruncated: boolean;
    to: MailAddress[];
    toTruncated: boolean;
    cc: MailAddress[];
    ccTruncated: boolean;
    date: number | null;
    inReplyTo: string | null;
  };
  text: string | null;
  textTruncated: boolean;
  html: string | null;
  htmlTruncated: boolean;
  attachments: AttachmentMetadata[];
}

/**
 * Whether `inbox` is on the allowlist. Names match exactly and case-sensitively, except INBOX, whose
 * name IMAP defines as case-insensitive (RFC 3501 §5.1): `inbox` matches an allowlisted `INBOX`.
 */
export function inboxAllowed(allowlist: readonly string[], inbox: string): boolean {
  if (inbox.toUpperCase() === 'INBOX') return allowlist.some((entry) => entry.toUpperCase() === 'INBOX');
  return allowlist.includes(inbox);
}

/** The name to send to the server: INBOX in any case becomes `INBOX`. */
function serverMailboxName(inbox: string): string {
  return inbox.toUpperCase() === 'INBOX' ? 'INBOX' : inbox;
}

function requireConnector(ctx: MailContext): MailConnector {
  if (!ctx.mailConnector) throw new ConnectorError('connector_not_configured', 'the agent has no mail connector');
  return ctx.mailConnector;
}

function clearanceFor(ctx: MailContext, inbox: string | undefined): ConnectorError | null {
  if (!ctx.mailConnector) return new ConnectorError('connector_not_configured', 'the agent has no mail connector');
  if (inbox !== undefined && !inboxAllowed(ctx.mailConnector.allowlist, inbox)) {
    return new ConnectorError('inbox_not_allowed', `inbox "${inbox}" is not on the agent's mail allowlist`);
  }
  // Listing with no inbox allowed could only answer an empty list, for a credit: refused before the hold instead.
  if (ctx.mailConnector.allowlist.length === 0) {
    return new ConnectorError('inbox_not_allowed', "the agent's mail allowlist is empty: its owner allows no inbox (the agent's inboxAllowlist)");
  }
  return null;
}

function requireInbox(ctx: MailContext, inbox: string): MailConnector {
  const refusal = clearanceFor(ctx, inbox);
  if (refusal) throw refusal;
  return requireConnector(ctx);
}

// ---- connection ----

/** Never trust a lookup with more addresses than this. */
const RESOLVED_ADDRESSES_MAX = 32;

/**
 * Resolves the mail host once and connects to that address, so a DNS answer cannot change between the
 * check and the connection (rebinding). As for webhooks (platform/outbound.ts), every resolved address
 * must be public unicast. TLS still verifies the certificate against the configured host name.
 */
async function resolveTarget(host: string, allowPrivate: boolean): Promise<string> {
  let addresses: string[];
  if (isIP(host)) addresses = [host];
  else {
    try {
      addresses = (await lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);
    } catch {
      throw new ConnectorError('upstream_unavailable', `mail host "${host}" does not resolve`);
    }
  }
  const [first] = addresses;
  if (first === undefined || addresses.length > RESOLVED_ADDRESSES_MAX) {
    throw new ConnectorError('upstream_unavailable', `mail host "${host}" does not resolve to a usable address`);
  }
  if (!allowPrivate && !addresses.every(isPublicAddress)) {
    // The owner's setting, not the server's state: a retry reads the same answer until the owner changes it.
    throw new ConnectorError('connector_not_configured', `mail host "${host}" resolves to a non-public address; the gateway only connects to public mail servers: the owner must set the mail connector to a public host`);
  }
  return first;
}

const TIMEOUT_CODES = new Set(['CONNECT_TIMEOUT', 'GREETING_TIMEOUT', 'UPGRADE_TIMEOUT', 'ETIMEOUT', 'ETIMEDOUT', 'LockTimeout']);

interface ImapFailure {
  code?: unknown;
  /** imapflow: STARTTLS required but not offered, or the TLS upgrade failed. */
  tlsFailed?: unknown;
  authenticationFailed?: unknown;
  serverResponseCode?: unknown;
  responseStatus?: unknown;
  mailboxMissing?: unknown;
}

/**
 * Response codes (RFC 5530) of a refusal that passes by itself: a limit on sessions or load ([LIMIT], which Dovecot gives
 * past mail_max_userip_connections), a backend that is down ([UNAVAILABLE]), a resource another session holds ([INUSE]).
 */
const PASSING_REFUSAL_CODES = new Set(['LIMIT', 'UNAVAILABLE', 'INUSE']);

/**
 * The Retry-After of a login refused for a while. The gateway's own sessions last one execution (a second or two, at
 * most the 30 s operation budget), so a few seconds usually frees one.
 */
export const MAIL_LOGIN_REFUSED_RETRY_AFTER_S = 10;

/**
 * A refused LOGIN or AUTHENTICATE, told apart by its response code (RFC 5530), since the owner's next step differs:
 * change the password, or wait. No code at all is the common answer to a wrong password, and [ALERT] is how some
 * providers refuse a password that needs the owner's attention (an app password, a web sign-in).
 */
function loginRefusal(responseCode: string | undefined): ConnectorError {
  switch (responseCode) {
    case undefined:
    case 'ALERT':
    case 'AUTHENTICATIONFAILED':
      return new ConnectorError('upstream_auth_failed', 'the mail server refused the username or password');
    case 'EXPIRED':
      return new ConnectorError('upstream_auth_failed', 'the mail server says the password has expired');
    case 'AUTHORIZATIONFAILED':
      return new ConnectorError('upstream_auth_failed', 'the mail server refused access to the mailbox of this username');
  }
  if (PASSING_REFUSAL_CODES.has(responseCode)) {
    return new ConnectorError('upstream_unavailable', `the mail server refused the login for now ([${responseCode}]); retry later`, MAIL_LOGIN_REFUSED_RETRY_AFTER_S);
  }
  return new ConnectorError('upstream_unavailable', `the mail server refused the login ([${responseCode}])`);
}

function translateFailure(error: unknown, timedOut: boolean): unknown {
  if (error instanceof ConnectorError) return error;
  if (timedOut) return new ConnectorError('upstream_timeout', 'the mail server did not finish in time');
  if (typeof error !== 'object' || error === null) return error;
  const failure = error as ImapFailure;
  const responseCode = typeof failure.serverResponseCode === 'string' ? failure.serverResponseCode : undefined;
  if (failure.authenticationFailed === true) return loginRefusal(responseCode);
  if (responseCode === 'UNAVAILABLE') return new ConnectorError('upstream_unavailable', 'the mail server is temporarily unavailable');
  if (failure.mailboxMissing === true || failure.serverResponseCode === 'NONEXISTENT') return new ConnectorError('upstream_not_found', 'the mail server has no such inbox');
  if (failure.tlsFailed === true) {
    return new ConnectorError('upstream_unavailable', 'the mail server did not upgrade the connection to TLS (STARTTLS not offered, or the upgrade failed); nothing was sent in the clear');
  }
  const code = typeof failure.code === 'string' ? failure.code : undefined;
  if (code && TIMEOUT_CODES.has(code)) return new ConnectorError('upstream_timeout', 'the mail server did not answer in time');
  if (code) return new ConnectorError('upstream_unavailable', `the mail server could not be used (${code})`);
  if (failure.responseStatus === 'NO' || failure.responseStatus === 'BAD') {
    return new ConnectorError('upstream_unavailable', 'the mail server refused the request');
  }
  // Anything else is a bug on our side and stays a 500.
  return error;
}

async function withImap<T>(settings: MailSettings, connector: MailConnector, work: (client: ImapFlow) => Promise<T>): Promise<T> {
  const { connection } = connector;
  let timedOut = false;
  let client: ImapFlow | undefined;
  // Every phase, DNS included, shares the one operation budget.
  const timer = setTimeout(() => {
    timedOut = true;
    client?.close();
  }, settings.operationTimeoutMs);
  try {
    // Cleartext would send the password over the internet; only private test servers may use it, and
    // those are reachable only with the test-only setting anyway.
    if (connection.tls === 'none' && !settings.allowPrivateNetworkTargets) {
      throw new ConnectorError('connector_not_configured', 'cleartext IMAP (tls "none") is refused; the owner must set the mail connector to implicit TLS or STARTTLS');
    }
    const imap = await import('imapflow');
    const address = await resolveTarget(connection.host, settings.allowPrivateNetworkTargets);
    if (timedOut) throw new ConnectorError('upstream_timeout', 'the mail server did not finish in time');
    client = new imap.ImapFlow({
      host: address,
      servername: isIP(connection.host) ? undefined : connection.host,
      port: connection.port,
      secure: connection.tls === 'implicit',
      doSTARTTLS: connection.tls === 'starttls' ? true : connection.tls === 'none' ? false : undefined,
      tls: { minVersion: 'TLSv1.2', ...(connection.ca ? { ca: [connection.ca] } : {}) },
      auth: { user: connection.username, pass: connection.password },
      logger: false,
      disableAutoIdle: true,
      connectionTimeout: settings.connectTimeoutMs,
      greetingTimeout: settings.greetingTimeoutMs,
      socketTimeout: settings.socketTimeoutMs,
      maxLiteralSize: settings.messageBytesMax + 64 * 1024,
      maxLineLength: IMAP_RESPONSE_BYTES_MAX,
      maxResponseSize: Math.max(IMAP_RESPONSE_BYTES_MAX, settings.messageBytesMax * 2),
    });
    // Without a listener, a late socket error (e.g. 30 s after a failed connect) crashes the process. A socket
    // that went silent past socketTimeout is reported here (ETIMEOUT) while the command waiting on it then fails
    // as NoConnection: the answer is the timeout.
    client.on('error', (error: { code?: unknown }) => {
      if (error?.code === 'ETIMEOUT') timedOut = true;
    });
    await client.connect();
    const result = await work(client);
    await client.logout().catch(() => undefined);
    return result;
  } catch (error) {
    throw translateFailure(error, timedOut);
  } finally {
    clearTimeout(timer);
    client?.close();
  }
}

// ---- conversions ----

function parsedAddresses(value: AddressObject | AddressObject[] | undefined): MailAddress[] {
  const objects = value === undefined ? [] : Array.isArray(value) ? value : [value];
  const out: MailAddress[] = [];
  for (const object of objects) {
    for (const entry of object.value) {
      // Group syntax ("team: a@x, b@x;") nests members; flatten them.
      const members = entry.group ?? [entry];
      for (const member of members) out.push({ name: member.name || null, address: member.address || null });
    }
  }
  return out;
}

function unixSeconds(value: Date | string | undefined): number | null {
  if (value === undefined) return null;
  const ms = value instanceof Date ? value.getTime() : Date.parse(value);
  return Number.isNaN(ms) ? null : Math.floor(ms / 1000);
}

function flagList(flags: Set<string> | undefined): string[] {
  return [...(flags ?? [])].filter((flag) => flag !== '\\Recent').sort();
}

function hasAttachment(node: MessageStructureObject | undefined): boolean {
  if (!node) return false;
  if (node.childNodes?.length) return node.childNodes.some(hasAttachment);
  if (node.disposition?.toLowerCase() === 'attachment') return true;
  return Boolean(node.dispositionParameters?.filename ?? node.parameters?.name);
}

/** The summary of a listed message, from its header fields as read (see readHeaderFields) and parsed. */
async function summary(message: FetchMessageObject): Promise<MessageSummary> {
  const header = message.headers ?? Buffer.alloc(0);
  // A header that filled the partial fetch may go on past it.
  const fields = readHeaderFields(header, LIST_HEADER_FIELDS, header.length < MAIL_LIST_HEADER_BYTES_MAX);
  const parsed = await parse(fields.header);
  const subject = capText(parsed.subject || undefined, MAIL_SUBJECT_CHARS_MAX, fields.cut.has('subject'));
  const from = capAddresses(parsedAddresses(parsed.from), fields.cut.has('from'));
  const to = capAddresses(parsedAddresses(parsed.to), fields.cut.has('to'));
  return {
    uid: message.uid,
    subject: subject.value,
    subjectTruncated: subject.truncated,
    from: from.value,
    fromTruncated: from.truncated,
    to: to.value,
    toTruncated: to.truncated,
    date: sentDate(parsed) ?? unixSeconds(message.internalDate),
    size: message.size ?? 0,
    flags: flagList(message.flags),
    hasAttachments: hasAttachment(message.bodyStructure),
  };
}

/**
 * Cuts at `charsMax` code units without splitting a surrogate pair. `cut`: the text was cut already, before parsing
 * (its header field was longer than MAIL_HEADER_FIELD_BYTES_MAX).
 */
function capText(text: string | undefined | false, charsMax: number, cut = false): { value: string | null; truncated: boolean } {
  if (text === undefined || text === false) return { value: null, truncated: cut };
  if (text.length <= charsMax) return { value: text, truncated: cut };
  let end = charsMax;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end -= 1;
  return { value: text.slice(0, end), truncated: true };
}

/** The first MAIL_ADDRESSES_PER_FIELD_MAX addresses, each name and address capped; `cut` as for capText. */
function capAddresses(list: MailAddress[], cut: boolean): { value: MailAddress[]; truncated: boolean } {
  let truncated = cut || list.length > MAIL_ADDRESSES_PER_FIELD_MAX;
  const value = list.slice(0, MAIL_ADDRESSES_PER_FIELD_MAX).map((entry) => {
    const name = capText(entry.name ?? undefined, MAIL_ADDRESS_NAME_CHARS_MAX);
    const address = capText(entry.address ?? undefined, MAIL_ADDRESS_CHARS_MAX);
    truncated ||= name.truncated || address.truncated;
    return { name: name.value, address: address.value };
  });
  return { value, truncated };
}

/** A message id as sent, or null when it is longer than a header line: cut, it would name no message. */
function messageIdOf(value: string | undefined): string | null {
  return value === undefined || value.length > MAIL_MESSAGE_ID_CHARS_MAX ? null : value;
}

// ---- header fields ----
// A header is what any sender writes: a Subject of a megabyte, a To of twenty thousand addresses (found from outside:
// one page of ten such messages answered 8.9 MB, and parsing their ENVELOPEs held the event loop for 2.7 s). So the
// connector reads only the fields it returns, and those MIME parsing needs, each to a bounded number of bytes; parses
// only those; and caps what it returns of them as it caps the text, saying so with a `…Truncated` flag.

/** Bytes read of one header field: a hundred addresses of usual length fit several times over, and parse in about a millisecond. */
const MAIL_HEADER_FIELD_BYTES_MAX = 16 * 1024;
/** messages.list reads at most this much of each message's header (a partial fetch), whatever the header holds. */
const MAIL_LIST_HEADER_BYTES_MAX = 64 * 1024;
/** RFC 5322's limit of a header line (§2.1.1): a subject longer than that was never meant to be read whole. */
export const MAIL_SUBJECT_CHARS_MAX = 998;
export const MAIL_ADDRESSES_PER_FIELD_MAX = 100;
export const MAIL_ADDRESS_NAME_CHARS_MAX = 256;
/** A local part of 64 and a domain of 255 (RFC 5321 §4.5.3.1), with the @. */
const MAIL_ADDRESS_CHARS_MAX = 320;
/** A message id cannot be folded, so one longer than a header line (RFC 5322 §2.1.1) is not one. */
const MAIL_MESSAGE_ID_CHARS_MAX = 998;

const LIST_HEADER_FIELDS: ReadonlySet<string> = new Set(['subject', 'from', 'to', 'date']);
const GET_HEADER_FIELDS: ReadonlySet<string> = new Set([
  ...LIST_HEADER_FIELDS,
  'cc',
  'message-id',
  'in-reply-to',
  // What mailparser reads of the top-level header to find the text, the html and the attachments.
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'content-disposition',
  'content-id',
]);

const LF = 0x0a;
const CR = 0x0d;
const CRLF = Buffer.from('\r\n');

interface HeaderFields {
  /** The fields read, each ending in CRLF, then the empty line that ends a header. */
  header: Buffer;
  /** What follows the source's header (empty when it has no empty line). */
  body: Buffer;
  /** Names of the fields read that were cut: longer than MAIL_HEADER_FIELD_BYTES_MAX, or going on past the source. */
  cut: Set<string>;
}

/** True for the bytes after which a cut field still reads well: whitespace, and the comma between addresses. */
function isSeparator(byte: number | undefined): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x2c;
}

/**
 * `line` cut to `bytesMax`: after its last separator in the latter half of what is kept, so no address and no encoded
 * word is split; with none there (unbroken text, common in Chinese or Japanese), at `bytesMax`, never inside a UTF-8
 * character. Cutting back to any separator cut `Subject: 漢漢…` after its `Subject: `, to nothing (found from outside).
 */
function cutLine(line: Buffer, bytesMax: number): Buffer {
  const limit = Math.min(line.length, bytesMax);
  let end = limit;
  while (end > limit / 2 && !isSeparator(line[end - 1])) end -= 1;
  if (end > limit / 2) return line.subarray(0, end);
  end = limit;
  // A UTF-8 continuation byte (10xxxxxx) at the cut means the character began before it.
  while (end > 0 && end < line.length && (line[end]! & 0xc0) === 0x80) end -= 1;
  return line.subarray(0, end);
}

/**
 * The first occurrence of each of the `names` fields of the header that begins `source` (lower-case names), each
 * cut to MAIL_HEADER_FIELD_BYTES_MAX; every other field is dropped unread. `complete`: false when `source` is only the
 * beginning of the message, so that the header's last line may go on past it.
 */
function readHeaderFields(source: Buffer, names: ReadonlySet<string>, complete: boolean): HeaderFields {
  const fields: Array<{ name: string; lines: Buffer[]; bytes: number; full: boolean }> = [];
  const cut = new Set<string>();
  const seen = new Set<string>();
  let field: (typeof fields)[number] | null = null;
  // Adds a line to the field being read, as much of it as the field's budget leaves.
  const keep = (line: Buffer, whole: boolean) => {
    if (!field || field.full) return;
    const room = MAIL_HEADER_FIELD_BYTES_MAX - field.bytes;
    if (whole && line.length <= room) {
      field.lines.push(line);
      field.bytes += line.length + CRLF.length;
      return;
    }
    const part = room > 0 ? cutLine(line, room) : Buffer.alloc(0);
    if (part.length > 0) field.lines.push(part);
    field.full = true;
    cut.add(field.name);
  };
  let position = 0;
  let bodyStart: number | null = null;
  while (position < source.length) {
    const newline = source.indexOf(LF, position);
    const next = newline === -1 ? source.length : newline + 1;
    const end = newline === -1 ? source.length : newline > position && source[newline - 1] === CR ? newline - 1 : newline;
    const line = source.subarray(position, end);
    position = next;
    if (line.length === 0) {
      bodyStart = next;
      break;
    }
    const whole = newline !== -1 || complete;
    if (line[0] === 0x20 || line[0] === 0x09) {
      keep(line, whole);
      continue;
    }
    const colon = line.indexOf(0x3a);
    const name = colon > 0 ? line.subarray(0, colon).toString('latin1').trim().toLowerCase() : '';
    field = null;
    if (!names.has(name) || seen.has(name)) continue;
    seen.add(name);
    field = { name, lines: [], bytes: 0, full: false };
    fields.push(field);
    keep(line, whole);
  }
  // The source ended inside the header: its last field may go on, and a field not read yet may come after it.
  if (bodyStart === null && !complete) {
    if (field) cut.add(field.name);
    for (const name of names) if (!seen.has(name)) cut.add(name);
  }
  const lines = fields.flatMap((entry) => entry.lines.flatMap((line) => [line, CRLF]));
  return { header: Buffer.concat([...lines, CRLF]), body: source.subarray(bodyStart ?? source.length), cut };
}

// ---- cursors ----
// Opaque to callers: base64url of `<uidValidity>.<last uid returned>.<inbox>`. UIDs only grow within one
// UIDVALIDITY, so "UIDs below the last one returned" is a stable page boundary even while mail arrives.

function encodeCursor(uidValidity: bigint, uid: number, inbox: string): string {
  return Buffer.from(`${uidValidity}.${uid}.${inbox}`, 'utf8').toString('base64url');
}

/** A cursor's parts when it is one of this inbox's, whatever the inbox's state; otherwise the refusal. */
function cursorOf(cursor: string, inbox: string): { uidValidity: bigint; uid: number } | ConnectorError {
  const match = /^([0-9]{1,20})\.([0-9]{1,10})\.(.+)$/s.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  const uid = Number(match?.[2]);
  if (!match || match[3] !== inbox || uid < 1) return inputRefusal('cursor', 'is not valid for this inbox');
  return { uidValidity: BigInt(match[1]!), uid };
}

function decodeCursor(cursor: string, uidValidity: bigint, inbox: string): number {
  const parts = cursorOf(cursor, inbox);
  if (parts instanceof ConnectorError) throw parts;
  if (parts.uidValidity !== uidValidity) {
    throw inputRefusal('cursor', 'belongs to an earlier state of this inbox (UIDVALIDITY changed); start again without a cursor');
  }
  return parts.uid;
}

/**
 * messages.list's clearance: the inbox's, then a cursor that is not one of this inbox's, refused before the hold
 * (found from outside: it was refused after a hold was taken and released). Whether the inbox still has the state
 * the cursor was made in needs the server, so that waits for the run.
 */
function listClearance(ctx: MailContext, input: MessagesListInput): ConnectorError | null {
  const refusal = clearanceFor(ctx, input.inbox);
  if (refusal || input.cursor === undefined) return refusal;
  const parts = cursorOf(input.cursor, input.inbox);
  return parts instanceof ConnectorError ? parts : null;
}

// ---- actions ----

export async function listInboxes(ctx: MailContext): Promise<{ inboxes: InboxSummary[] }> {
  const connector = requireConnector(ctx);
  return withImap(ctx.mail, connector, async (client) => {
    const listed = await client.list();
    const allowed = listed.filter(
      (mailbox) => inboxAllowed(connector.allowlist, mailbox.path) && !mailbox.flags.has('\\Noselect') && !mailbox.flags.has('\\NonExistent'),
    );
    const inboxes: InboxSummary[] = [];
    // At most MAIL_ALLOWLIST_ENTRIES_MAX STATUS commands: only allowlisted mailboxes are ever asked about.
    for (const mailbox of allowed) {
      const status = await client.status(mailbox.path, { messages: true, unseen: true });
      inboxes.push({
        name: mailbox.path,
        specialUse: mailbox.specialUse ?? null,
        messages: (status && status.messages) || 0,
        unseen: (status && status.unseen) || 0,
      });
    }
    inboxes.sort((a, b) => (a.name === 'INBOX' ? -1 : b.name === 'INBOX' ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return { inboxes };
  });
}

/** What messages.list fetches of each message, but its structure (asked for apart: see listMessages). */
const LIST_FETCH = { uid: true, size: true, flags: true, internalDate: true, bodyParts: [{ key: 'HEADER', maxLength: MAIL_LIST_HEADER_BYTES_MAX }] };

export async function listMessages(ctx: MailContext, input: MessagesListInput): Promise<MessageList> {
  const connector = requireInbox(ctx, input.inbox);
  const inbox = serverMailboxName(input.inbox);
  const limit = input.limit ?? MAIL_PAGE_SIZE_DEFAULT;
  const listed = await withImap(ctx.mail, connector, async (client) => {
    const lock = await client.getMailboxLock(inbox, { readOnly: true });
    try {
      const mailbox = client.mailbox;
      if (!mailbox) throw new ConnectorError('upstream_unavailable', 'the mail server did not open the inbox');
      const beforeUid = input.cursor === undefined ? null : decodeCursor(input.cursor, mailbox.uidValidity, inbox);
      if (mailbox.exists === 0 || beforeUid === 1) return { found: [] as FetchMessageObject[], nextCursor: null };
      const searched = await client.search(beforeUid === null ? { all: true } : { uid: `1:${beforeUid - 1}` }, { uid: true });
      if (!searched) throw new ConnectorError('upstream_unavailable', 'the mail server could not search the inbox');
      const uids = [...searched].sort((a, b) => b - a);
      const page = uids.slice(0, limit);
      if (page.length === 0) return { found: [], nextCursor: null };
      // Not ENVELOPE, whose every address the server sends and imapflow parses: the beginning of each header
      // (BODY.PEEK[HEADER]<0.max>), of which summary() reads only the fields it returns.
      const fetched = await client.fetchAll(page.join(','), { ...LIST_FETCH, bodyStructure: true }, { uid: true });
      const byUid = new Map(fetched.map((message) => [message.uid, message]));
      // imapflow leaves out a message whose BODYSTRUCTURE it cannot parse (MIME nested about 20 deep and more): such a
      // message is fetched again without it, and lists with hasAttachments false (found from outside: it was missing).
      const unread = page.filter((uid) => !byUid.has(uid));
      if (unread.length > 0) {
        const again = await client.fetchAll(unread.join(','), LIST_FETCH, { uid: true });
        for (const message of again) byUid.set(message.uid, message);
      }
      // A message expunged between SEARCH and FETCH is simply absent; the cursor still moves past it.
      const found = page.flatMap((uid) => byUid.get(uid) ?? []);
      const lastUid = page[page.length - 1] ?? 1;
      return { found, nextCursor: uids.length > limit ? encodeCursor(mailbox.uidValidity, lastUid, inbox) : null };
    } finally {
      lock.release();
    }
  });
  const messages: MessageSummary[] = [];
  for (const message of listed.found) messages.push(await summary(message));
  return { messages, nextCursor: listed.nextCursor };
}

export async function getMessage(ctx: MailContext, input: MessagesGetInput): Promise<MessageDetail> {
  const connector = requireInbox(ctx, input.inbox);
  const inbox = serverMailboxName(input.inbox);
  const bytesMax = ctx.mail.messageBytesMax;
  const fetched = await withImap(ctx.mail, connector, async (client) => {
    const lock = await client.getMailboxLock(inbox, { readOnly: true });
    try {
      // A partial fetch (BODY.PEEK[]<0.max>) bounds what the server sends, whatever the message size.
      return await client.fetchOne(String(input.uid), { uid: true, size: true, flags: true, internalDate: true, source: { start: 0, maxLength: bytesMax } }, { uid: true });
    } finally {
      lock.release();
    }
  });
  if (!fetched || !fetched.source) throw new ConnectorError('upstream_not_found', `inbox "${input.inbox}" has no message with uid ${input.uid}`);
  const size = fetched.size ?? fetched.source.length;
  const truncated = size > bytesMax;
  const fields = readHeaderFields(fetched.source, GET_HEADER_FIELDS, !truncated);
  const parsed = await parse(Buffer.concat([fields.header, fields.body]));
  return detail(fetched.uid, size, flagList(fetched.flags), truncated, parsed, fields.cut, ctx.mail.bodyCharsMax, fetched.internalDate);
}

/**
 * Parses a message, or what messages.list read of its header. A message the parser refuses (more than 1,000 MIME
 * parts, or a part's header over 1 MiB: found from outside, it was a bare 500) will be refused on every retry, so it
 * is answered as a final failure, 422 upstream_unprocessable.
 */
async function parse(source: Buffer): Promise<ParsedMail> {
  // skipImageLinks keeps cid: links as they are instead of inlining attachment bytes into the html;
  // skipHtmlToText keeps parsing time bounded (html-only messages then have text null).
  const { simpleParser } = await import('mailparser');
  try {
    return await simpleParser(source, { skipImageLinks: true, skipTextToHtml: true, skipHtmlToText: true, skipTextLinks: true });
  } catch (error) {
    throw new ConnectorError('upstream_unprocessable', `the message could not be parsed: ${parseFailureReason(error)}`);
  }
}

/** mailsplit names the limit a message passed in a fixed sentence; any other error may quote the message, so it is not repeated. */
function parseFailureReason(error: unknown): string {
  const failure = error as { code?: unknown; message?: unknown } | null;
  if (failure?.code === 'EMAXLEN' && typeof failure.message === 'string') return `it passes a limit of the MIME parser (${failure.message})`;
  return 'it is not a message the MIME parser can read';
}

/**
 * The message's Date header as sent, in Unix seconds; null when it has none or one that does not read as a date.
 * Not mailparser's `date`, which puts the time of parsing in place of a date it cannot read, so the date moved with
 * every read (found from outside).
 */
function sentDate(parsed: ParsedMail): number | null {
  const header = parsed.headerLines.find((line) => line.key === 'date');
  return header === undefined ? null : unixSeconds(header.line.slice(header.line.indexOf(':') + 1).trim());
}

function detail(
  uid: number,
  size: number,
  flags: string[],
  truncated: boolean,
  parsed: ParsedMail,
  cut: ReadonlySet<string>,
  charsMax: number,
  internalDate: Date | string | undefined,
): MessageDetail {
  const text = capText(parsed.text, charsMax);
  const html = capText(parsed.html, charsMax);
  const subject = capText(parsed.subject, MAIL_SUBJECT_CHARS_MAX, cut.has('subject'));
  const from = capAddresses(parsedAddresses(parsed.from), cut.has('from'));
  const to = capAddresses(parsedAddresses(parsed.to), cut.has('to'));
  const cc = capAddresses(parsedAddresses(parsed.cc), cut.has('cc'));
  return {
    uid,
    size,
    flags,
    truncated,
    headers: {
      messageId: messageIdOf(parsed.messageId),
      subject: subject.value,
      subjectTruncated: subject.truncated,
      from: from.value,
      fromTruncated: from.truncated,
      to: to.value,
      toTruncated: to.truncated,
      cc: cc.value,
      ccTruncated: cc.truncated,
      // As the list says it: the Date header, else the date the server received the message.
      date: sentDate(parsed) ?? unixSeconds(internalDate),
      inReplyTo: messageIdOf(parsed.inReplyTo),
    },
    text: text.value,
    textTruncated: text.truncated,
    html: html.value,
    htmlTruncated: html.truncated,
    attachments: parsed.attachments.map((attachment) => ({
      filename: attachment.filename ?? null,
      contentType: attachment.contentType,
      size: attachment.size,
      contentId: attachment.cid ?? null,
    })),
  };
}

/** The operator's mail limits, from the gateway's configuration. */
export function mailSettingsOf(config: Pick<Config, 'services' | 'allowPrivateNetworkTargets'>): MailSettings {
  const { mail } = config.services;
  return {
    ...MAIL_DEFAULTS,
    connectTimeoutMs: mail.connectTimeoutMs,
    greetingTimeoutMs: mail.connectTimeoutMs,
    socketTimeoutMs: mail.socketTimeoutMs,
    operationTimeoutMs: mail.operationTimeoutMs,
    messageBytesMax: mail.messageBytesMax,
    bodyCharsMax: mail.bodyCharsMax,
    allowPrivateNetworkTargets: config.allowPrivateNetworkTargets,
  };
}

export const mailService: ServiceModule<MailContext, MailConnectionSettings> = {
  id: 'mail',
  title: 'Mail (IMAP, read-only)',
  category: 'email',
  // The operator's limits once; per execution, the agent's stored IMAP account and its inbox allowlist.
  context: ({ config }) => {
    const mail = mailSettingsOf(config);
    return async (execution) => {
      const connection = await execution.connection();
      return { mail, mailConnector: connection ? { connection, allowlist: execution.allowlists.inboxes } : null };
    };
  },
  actions: {
    'inboxes.list': {
      description: "The agent's allowlisted inboxes that exist on its mail server, with message and unseen counts. An empty allowlist is 403 inbox_not_allowed, before any hold.",
      input: InboxesListInput,
      priceUc: UC_PER_CREDIT,
      clearance: (ctx: MailContext) => clearanceFor(ctx, undefined),
      run: (ctx: MailContext) => listInboxes(ctx),
    },
    'messages.list': {
      description:
        'Messages of an allowlisted inbox, newest first, paged with an opaque cursor. Header fields are capped as in messages.get, ' +
        `with the same flags; only the first ${MAIL_LIST_HEADER_BYTES_MAX / 1024} KiB of each header is read, and a field that comes ` +
        'after it is absent and says truncated (the date is then the server\'s). A message whose MIME structure is nested too deep to read ' +
        'lists with hasAttachments false.',
      input: MessagesListInput,
      priceUc: UC_PER_CREDIT,
      clearance: listClearance,
      run: (ctx: MailContext, input: MessagesListInput) => listMessages(ctx, input),
    },
    'messages.get': {
      description:
        'One message: headers, text and html and attachment metadata, never attachment content. Capped, and a field that was cut ' +
        `says so in its \`…Truncated\` member: text and html (ACG_MAIL_BODY_CHARS_MAX characters each), \`subject\` (${MAIL_SUBJECT_CHARS_MAX} characters), ` +
        `\`from\`, \`to\` and \`cc\` (${MAIL_ADDRESSES_PER_FIELD_MAX} addresses each; a name ${MAIL_ADDRESS_NAME_CHARS_MAX} characters, ` +
        `an address ${MAIL_ADDRESS_CHARS_MAX}), every header field read from its first ${MAIL_HEADER_FIELD_BYTES_MAX / 1024} KiB; a ` +
        `\`messageId\` or \`inReplyTo\` longer than ${MAIL_MESSAGE_ID_CHARS_MAX} characters is null. A message the MIME parser refuses ` +
        '(more than 1,000 parts) is 422 upstream_unprocessable.',
      input: MessagesGetInput,
      priceUc: UC_PER_CREDIT,
      clearance: (ctx: MailContext, input: MessagesGetInput) => clearanceFor(ctx, input.inbox),
      run: (ctx: MailContext, input: MessagesGetInput) => getMessage(ctx, input),
    },
  },
};
