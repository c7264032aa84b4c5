// Outbound HTTP to a URL a user gave us (webhooks, later anything else). A user-chosen URL is an SSRF
// vector: it may name, or resolve to, loopback, the cloud metadata address or the private network we run
// in. So we resolve the host ourselves, refuse unless EVERY address is public unicast, and connect only
// to an address we checked (the socket's `lookup` returns it), so a DNS answer that changes between the
// check and the connect (rebinding) cannot reach anything else. TLS still verifies the certificate for
// the hostname (SNI) and the Host header stays the hostname. Redirects are never followed: following
// one would need this whole check again, and a webhook receiver has no reason to redirect.
import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import diagnostics from 'node:diagnostics_channel';
import { maxHeaderSize, type ClientRequest, type IncomingMessage } from 'node:http';
import net from 'node:net';
import type { Readable } from 'node:stream';
import tls from 'node:tls';
import ipaddr from 'ipaddr.js';
import type { Agent, buildConnector } from 'undici';
import { endSpan, setSpanAttributes, startSpan, tracing, type SpanRef } from './telemetry.ts';

let undici: Promise<typeof import('undici')> | undefined;
/**
 * undici, loaded by the first outbound request rather than at start: it is a tenth of the gateway's
 * start-up and 20 MB, and a gateway may send nothing for a long while (webhooks, DoH, connectors).
 */
export function loadUndici(): Promise<typeof import('undici')> {
  return (undici ??= import('undici'));
}

export type OutboundErrorReason =
  | 'invalid_url'
  | 'forbidden_address'
  | 'dns_failed'
  | 'connect_failed'
  | 'connection_closed'
  | 'tls_failed'
  | 'timeout'
  | 'too_large'
  | 'invalid_response'
  | 'request_failed';

export class OutboundError extends Error {
  constructor(
    readonly reason: OutboundErrorReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'OutboundError';
  }
}

interface SafeRequestCommonOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Budget for the whole exchange: DNS, connect, TLS, headers and (when read) body. */
  timeoutMs: number;
  /** Budget for TCP + TLS set-up alone; never more than `timeoutMs`. */
  connectTimeoutMs?: number;
  /** TEST ONLY (ACG_ALLOW_PRIVATE_NETWORK_TARGETS): relaxes the address rule and nothing else. */
  allowPrivateNetworkTargets: boolean;
  /** Extra trusted CA certificate (PEM), for tests with self-signed certificates. */
  ca?: string;
  /** Resolves a hostname to addresses; defaults to the operating system resolver (all A and AAAA). */
  lookupHost?: (hostname: string) => Promise<string[]>;
  /** TEST ONLY: connect to this port instead of the URL's (a test receiver cannot listen on 443). */
  connectPort?: number;
}

/** What is done with the answer's body: read under a cap (the default), or not read at all. */
type ResponseBodyOptions =
  | {
      responseBody?: 'read';
      /** A body longer than this throws `too_large`. */
      responseBytesMax: number;
    }
  | {
      /**
       * The exchange ends at the status line and headers: the body is discarded unread (the answer's is empty).
       * For callers whom the status alone answers (webhook deliveries: "only a 2xx counts"), so that a slow or
       * endless body can neither delay the answer nor turn a status already received into a `timeout`.
       */
      responseBody: 'status_only';
    };

export type SafeRequestOptions = SafeRequestCommonOptions & ResponseBodyOptions;

/**
 * TEST ONLY: how tests reach local servers under public-looking names (`hooks.shop-test.com` → 127.0.0.1,
 * on the receiver's port). Passed in code by test harnesses; no configuration reaches it, so production
 * always resolves through the system and connects to the URL's own port. The address rule still applies
 * unless ACG_ALLOW_PRIVATE_NETWORK_TARGETS (refused in live mode) relaxes it.
 */
export interface OutboundTestHooks {
  lookupHost?: (hostname: string) => Promise<string[]>;
  connectPort?: (hostname: string) => number | undefined;
}

export interface SafeResponse {
  status: number;
  headers: Record<string, string | string[]>;
  /** Empty with `responseBody: 'status_only'`. */
  body: Buffer;
}

const CONNECT_TIMEOUT_MS_DEFAULT = 5_000;
/** Never trust a lookup with more addresses than this (each one is checked and offered to connect). */
const RESOLVED_ADDRESSES_MAX = 32;

/** True only for public unicast addresses: ipaddr.js `range()` is `unicast` after un-mapping IPv4-in-IPv6. */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  // process() turns ::ffff:127.0.0.1 into 127.0.0.1, so a mapped private address is judged as itself.
  const parsed = ipaddr.process(address);
  // The deprecated IPv4-compatible block ::/96 (::7f00:1 is ::127.0.0.1) is no public address, whatever
  // ipaddr.js calls it: a host with a 6in4 tunnel could route it to the IPv4 address it embeds.
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).parts.slice(0, 6).every((part) => part === 0)) return false;
  return parsed.range() === 'unicast';
}

async function systemLookup(hostname: string): Promise<string[]> {
  const found: LookupAddress[] = await dnsLookup(hostname, { all: true, verbatim: true });
  return found.map((entry) => entry.address);
}

function parseTarget(rawUrl: string): URL {
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new OutboundError('invalid_url', 'not an absolute URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new OutboundError('invalid_url', `scheme ${url.protocol} is not allowed`);
  if (url.username !== '' || url.password !== '') throw new OutboundError('invalid_url', 'credentials in the URL are not allowed');
  return url;
}

/** Resolves the URL's host and returns the addresses to connect to, each already checked. */
async function checkedAddresses(url: URL, options: SafeRequestOptions): Promise<string[]> {
  // WHATWG keeps IPv6 literals in brackets; it has already rewritten 0x7f.1 and 2130706433 to dotted IPv4.
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  let addresses: string[];
  if (net.isIP(host) !== 0) {
    addresses = [host];
  } else {
    try {
      addresses = await (options.lookupHost ?? systemLookup)(host);
    } catch (error) {
      throw new OutboundError('dns_failed', `could not resolve ${host}`, { cause: error });
    }
  }
  if (addresses.length === 0) throw new OutboundError('dns_failed', `${host} has no addresses`);
  if (addresses.length > RESOLVED_ADDRESSES_MAX) throw new OutboundError('dns_failed', `${host} has too many addresses`);
  const unparsable = addresses.find((address) => !ipaddr.isValid(address));
  if (unparsable !== undefined) throw new OutboundError('dns_failed', `${host} resolved to a non-address`);
  if (!options.allowPrivateNetworkTargets) {
    const forbidden = addresses.find((address) => !isPublicAddress(address));
    if (forbidden !== undefined) throw new OutboundError('forbidden_address', `${host} resolves to a non-public address`);
  }
  return addresses.map((address) => ipaddr.process(address).toString());
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** A socket `lookup` that ignores the name and answers with the addresses we already checked. */
function pinnedLookup(addresses: string[]) {
  const entries: LookupAddress[] = addresses.map((address) => ({ address, family: net.isIP(address) }));
  return (_hostname: string, options: { all?: boolean }, callback: LookupCallback): void => {
    // Node asks for all addresses when it races IPv4 and IPv6 (autoSelectFamily), otherwise for one.
    if (options.all) callback(null, entries);
    else callback(null, entries[0]!.address, entries[0]!.family);
  };
}

export interface ConnectorOptions {
  /** Abort destroys a socket still connecting (undici's own connect ignores the request signal). */
  signal: AbortSignal;
  connectTimeoutMs: number;
  /** Replaces name resolution for the socket; absent means the system resolver. */
  lookup?: ReturnType<typeof pinnedLookup>;
  ca?: string;
  /** Offer HTTP/2 in ALPN (the DoH resolver); webhook targets get HTTP/1.1 only. */
  allowH2: boolean;
  /** TEST ONLY: replaces the URL's port (see OutboundTestHooks). */
  port?: number;
}

/** How many extra CAs keep a context: one or two in a deployment (ACG_OUTBOUND_CA_FILE, ACG_DOH_CA_FILE), a few in tests. */
const TRUST_CONTEXTS_MAX = 16;
const trustContexts = new Map<string, tls.SecureContext>();

/**
 * The TLS context that trusts Node's roots and one extra CA (PEM), made once per CA. `tls.connect({ ca })` builds a
 * context at every connection, parsing Node's 140-odd root certificates again: 34 ms of the event loop on this
 * machine, which every webhook delivery and DNS-over-HTTPS query paid while an extra CA was configured.
 */
export function trustingAlso(ca: string): tls.SecureContext {
  let context = trustContexts.get(ca);
  if (!context) {
    // `ca` replaces Node's trusted roots, so the extra certificate is added to them, not swapped in.
    context = tls.createSecureContext({ ca: [...tls.rootCertificates, ca] });
    if (trustContexts.size >= TRUST_CONTEXTS_MAX) trustContexts.delete(trustContexts.keys().next().value!);
    trustContexts.set(ca, context);
  }
  return context;
}

/**
 * An undici connector we own, instead of undici's: its connect timeout has about one second of
 * resolution and keeps running after the request is aborted, so a target that accepts TCP but never
 * completes TLS would hold us past our budget. Here the budget's signal destroys the socket at once.
 */
export function abortableConnector(options: ConnectorOptions): buildConnector.connector {
  return ({ hostname, protocol, port, servername }, callback) => {
    let settled = false;
    const finish = (error: Error | null, socket: net.Socket | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal.removeEventListener('abort', onAbort);
      if (error) {
        socket?.destroy();
        callback(error, null);
      } else {
        callback(null, socket!);
      }
    };
    const common = { host: hostname, port: options.port ?? (Number(port) || (protocol === 'https:' ? 443 : 80)), ...(options.lookup ? { lookup: options.lookup } : {}) };
    const socket =
      protocol === 'https:'
        ? tls.connect({
            ...common,
            // The certificate is checked for the name in the URL, not for the address we connect to.
            servername: servername || (net.isIP(hostname) === 0 ? hostname : undefined),
            ALPNProtocols: options.allowH2 ? ['h2', 'http/1.1'] : ['http/1.1'],
            ...(options.ca ? { secureContext: trustingAlso(options.ca) } : {}),
          })
        : net.connect(common);
    const onAbort = () => finish(options.signal.reason instanceof Error ? options.signal.reason : new Error('aborted'), socket);
    const timer = setTimeout(() => finish(Object.assign(new Error('connect timed out'), { code: 'UND_ERR_CONNECT_TIMEOUT' }), socket), options.connectTimeoutMs);
    if (options.signal.aborted) return onAbort();
    options.signal.addEventListener('abort', onAbort, { once: true });
    socket.setNoDelay(true);
    socket.once(protocol === 'https:' ? 'secureConnect' : 'connect', () => finish(null, socket));
    socket.once('error', (error) => finish(error, socket));
  };
}

/** Stops reading a body we do not want; undici reports the destroy as an error nobody needs to hear. */
export function discardBody(body: Readable): void {
  body.on('error', () => undefined);
  body.destroy();
}

/**
 * Reads at most `bytesMax` bytes of a body. Past the cap it stops reading, destroys the stream and throws
 * `too_large`, so a hostile server cannot make us buffer without limit.
 */
export async function readBodyCapped(body: Readable, bytesMax: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let bytesRead = 0;
  for await (const chunk of body) {
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    if (bytesRead + bytes.length > bytesMax) {
      discardBody(body);
      throw new OutboundError('too_large', `response body is over ${bytesMax} bytes`);
    }
    chunks.push(bytes);
    bytesRead += bytes.length;
  }
  return Buffer.concat(chunks);
}

function flatHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) out[name] = value;
  return out;
}

function classify(error: unknown, timedOut: boolean): OutboundError {
  if (error instanceof OutboundError) return error;
  if (timedOut) return new OutboundError('timeout', 'the request took too long', { cause: error });
  const code = (error as { code?: unknown } | null)?.code;
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new OutboundError('timeout', 'the request took too long', { cause: error });
  }
  // The server answered, but not in HTTP the client can read (found from outside: a 200 with 80 KB of headers read
  // "the request failed", with no code): the receiver's owner fixes their answer, not their network. undici's parser
  // error has a code (HPE_…) only for some of what it refuses.
  if (code === 'UND_ERR_HEADERS_OVERFLOW') {
    return new OutboundError('invalid_response', `the answer's headers are over ${maxHeaderSize} bytes (${code})`, { cause: error });
  }
  if (errorText(error) === 'HTTPParserError' || (typeof code === 'string' && code.startsWith('HPE_'))) {
    return new OutboundError('invalid_response', `the answer is not valid HTTP (${typeof code === 'string' ? code : 'HTTPParserError'})`, { cause: error });
  }
  if (typeof code !== 'string') return new OutboundError('request_failed', `the request failed (${errorText(error)})`, { cause: error });
  // Three failures an operator and a receiver's owner act on differently (found from outside: all three read
  // "could not connect"): nothing accepted the connection; the receiver accepted it and closed it before answering;
  // TLS failed (a certificate expired, of another name, of an untrusted CA). The code stays in the message.
  if (['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL'].includes(code)) {
    return new OutboundError('connect_failed', `could not connect (${code})`, { cause: error });
  }
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET' || code === 'EPIPE') {
    return new OutboundError('connection_closed', `the receiver closed the connection before answering (${code})`, { cause: error });
  }
  if (code.startsWith('ERR_TLS') || code.startsWith('ERR_SSL') || code.includes('CERT') || code === 'UNABLE_TO_VERIFY_LEAF_SIGNATURE') {
    return new OutboundError('tls_failed', `TLS failed (${code})`, { cause: error });
  }
  return new OutboundError('request_failed', `the request failed (${code})`, { cause: error });
}

/** What an error without a system code says about itself, for a message: its name, or its type. */
function errorText(error: unknown): string {
  return error instanceof Error ? error.name : typeof error;
}

function raceAbort<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** One HTTP exchange with a user-given URL under the SSRF rules above. Throws only OutboundError. */
export async function safeRequest(rawUrl: string, options: SafeRequestOptions): Promise<SafeResponse> {
  if (!(options.timeoutMs > 0)) throw new RangeError('timeoutMs must be set');
  if (options.responseBody !== 'status_only' && !(options.responseBytesMax >= 0)) throw new RangeError('responseBytesMax must be set to read a body');
  const url = parseTarget(rawUrl);
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new OutboundError('timeout', `no complete answer within ${options.timeoutMs} ms`));
  }, options.timeoutMs);
  let agent: Agent | undefined;
  try {
    const addresses = await raceAbort(checkedAddresses(url, options), controller.signal);
    const { Agent, request } = await loadUndici();
    // A fresh agent per request, so no pooled socket to some other address is ever reused.
    agent = new Agent({
      connections: 1,
      connect: abortableConnector({
        signal: controller.signal,
        connectTimeoutMs: Math.min(options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS_DEFAULT, options.timeoutMs),
        lookup: pinnedLookup(addresses),
        ca: options.ca,
        allowH2: false,
        port: options.connectPort,
      }),
    });
    const response = await request(url, {
      dispatcher: agent,
      method: (options.method ?? 'GET') as 'GET',
      headers: options.headers,
      body: options.body,
      signal: controller.signal,
    });
    const headers = flatHeaders(response.headers);
    if (options.responseBody === 'status_only') {
      // The status is the answer: the timer stops covering the exchange here, before any body byte.
      discardBody(response.body);
      return { status: response.statusCode, headers, body: Buffer.alloc(0) };
    }
    return { status: response.statusCode, headers, body: await readBodyCapped(response.body, options.responseBytesMax) };
  } catch (error) {
    throw classify(error, timedOut);
  } finally {
    clearTimeout(timer);
    void agent?.destroy().catch(() => undefined);
  }
}

let outboundTraced = false;

/** A client span for one outbound request, named by its origin only: a path or query may carry a token (a webhook URL's). */
function outboundSpan(method: string, origin: URL | undefined): SpanRef | undefined {
  return startSpan(method, {
    kind: 'client',
    attributes: {
      'http.request.method': method,
      'url.scheme': origin?.protocol.replace(/:$/, ''),
      'server.address': origin?.hostname.replace(/^\[(.*)\]$/, '$1'),
      'server.port': origin && effectivePort(origin),
    },
  });
}

/** The port the request goes to: the origin's own, else its scheme's default (the URL parser drops a default port). */
function effectivePort(origin: URL): number | undefined {
  if (origin.port !== '') return Number(origin.port);
  return DEFAULT_PORTS[origin.protocol];
}

const DEFAULT_PORTS: Readonly<Record<string, number>> = { 'https:': 443, 'http:': 80 };

function parsedOrigin(origin: unknown): URL | undefined {
  const text = String(origin);
  return URL.canParse(text) ? new URL(text) : undefined;
}

/** Ends a client span with the answer's status (4xx and 5xx are failures of the request, as the conventions say). */
function answered(span: SpanRef, statusCode: number): void {
  setSpanAttributes(span, { 'http.response.status_code': statusCode });
  endSpan(span, statusCode >= 400 ? `HTTP ${statusCode}` : undefined);
}

/**
 * When tracing: a client span for every outbound HTTP request, whoever sends it. undici (safeRequest, DoH, the
 * GitHub connector, and Node's fetch: OIDC discovery, JWKS) and Node's http client (Stripe's SDK) publish each
 * request on diagnostics channels, synchronously in the caller's context, so the span is a child of whatever
 * asked (an operation, a webhook attempt); subscribing observes an ESM program built by esbuild without
 * patching any module. Nothing is added to these requests: only a webhook attempt sends trace context
 * (webhook-sender.ts), to the merchant or owner who may join the trace; a third party (GitHub, Stripe, a DNS
 * resolver) gets nothing of ours. Called once tracing is on (src/server.ts).
 */
export function traceOutboundHttp(): void {
  if (outboundTraced || !tracing()) return;
  outboundTraced = true;
  const undiciSpans = new WeakMap<object, { span: SpanRef; statusCode?: number }>();
  diagnostics.subscribe('undici:request:create', (message) => {
    const { request } = message as { request: { method: string; origin: unknown } };
    const span = outboundSpan(request.method, parsedOrigin(request.origin));
    if (span) undiciSpans.set(request, { span });
  });
  diagnostics.subscribe('undici:request:headers', (message) => {
    const { request, response } = message as { request: object; response: { statusCode: number } };
    const traced = undiciSpans.get(request);
    if (traced) traced.statusCode = response.statusCode;
  });
  // The body is read to its end (trailers) or the exchange fails (error): the span ends with either.
  diagnostics.subscribe('undici:request:trailers', (message) => {
    const { request } = message as { request: object };
    const traced = undiciSpans.get(request);
    undiciSpans.delete(request);
    if (traced) answered(traced.span, traced.statusCode ?? 0);
  });
  diagnostics.subscribe('undici:request:error', (message) => {
    const { request, error } = message as { request: object; error: unknown };
    const traced = undiciSpans.get(request);
    undiciSpans.delete(request);
    if (!traced) return;
    // A body the caller chose not to read (discardBody) aborts the request: the exchange still answered its status.
    const { statusCode } = traced;
    if (statusCode !== undefined && (error as { code?: unknown } | null)?.code === 'UND_ERR_ABORTED') answered(traced.span, statusCode);
    else endSpan(traced.span, error);
  });
  const httpSpans = new WeakMap<ClientRequest, SpanRef>();
  diagnostics.subscribe('http.client.request.start', (message) => {
    const { request } = message as { request: ClientRequest };
    // The Host header names the port when it is not the scheme's default.
    const host = request.getHeader('host') ?? request.host;
    const span = outboundSpan(request.method, parsedOrigin(`${request.protocol}//${String(host)}`));
    if (span) httpSpans.set(request, span);
  });
  diagnostics.subscribe('http.client.response.finish', (message) => {
    const { request, response } = message as { request: ClientRequest; response: IncomingMessage };
    const span = httpSpans.get(request);
    httpSpans.delete(request);
    if (span) answered(span, response.statusCode ?? 0);
  });
  diagnostics.subscribe('http.client.request.error', (message) => {
    const { request, error } = message as { request: ClientRequest; error: unknown };
    const span = httpSpans.get(request);
    httpSpans.delete(request);
    if (span) endSpan(span, error);
  });
}
