// DNS-over-HTTPS TXT lookup for merchant domain verification (RFC 8484 wire format, POST).
// We ask a resolver the operator chose over TLS instead of the host's resolver, which is spoofable on the
// local network and differs between hosts. The resolver URL is configuration, not user input, so it does
// not go through the outbound SSRF rule. A definite "no such record" (NXDOMAIN, or NOERROR without one) is
// an answer; anything else (SERVFAIL, REFUSED, HTTP errors, timeouts, malformed messages) throws
// ResolverError, because "could not ask" must never be read as "not there".
import dnsPacket from 'dns-packet';
import type { Answer, DecodedPacket, StringAnswer, TxtAnswer } from 'dns-packet';
import { abortableConnector, discardBody, loadUndici, OutboundError, readBodyCapped } from '../platform/outbound.ts';

export type ResolverErrorReason = 'timeout' | 'unreachable' | 'http_status' | 'malformed' | 'rcode' | 'too_large';

export class ResolverError extends Error {
  constructor(
    readonly reason: ResolverErrorReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ResolverError';
  }
}

export interface DohOptions {
  /** RFC 8484 endpoint, e.g. https://cloudflare-dns.com/dns-query. */
  resolverUrl: string;
  /** Budget for the whole exchange, connect included. */
  timeoutMs: number;
  /** Largest accepted response; a TXT answer for one name is far smaller. */
  responseBytesMax?: number;
  /** Extra trusted CA certificate (PEM), for a test resolver with a self-signed certificate. */
  ca?: string;
  /**
   * Dev mode only: the gateway's own dev DNS zone, reached over plain HTTP on its listening address (a
   * local gateway has no certificate). Set by the composition root for that zone and nothing else.
   */
  devZoneCleartext?: boolean;
  /**
   * Plain HTTP is allowed to this resolver: dev mode, or a loopback host in live mode (a resolver or proxy beside the
   * gateway), as the configuration accepts it.
   */
  cleartext?: boolean;
}

export const DOH_RESPONSE_BYTES_MAX_DEFAULT = 64 * 1024;
/** CNAME hops followed inside one answer; a longer chain (or a loop) counts as "no record". */
const CNAME_HOPS_MAX = 8;
const DNS_MESSAGE = 'application/dns-message';

function canonicalName(name: string): string {
  return name.toLowerCase().replace(/\.$/, '');
}

function assertQueryableName(name: string): void {
  const labels = canonicalName(name).split('.');
  const fits = name.length > 0 && name.length <= 254 && labels.every((label) => label.length >= 1 && label.length <= 63);
  if (!fits) throw new RangeError(`not a DNS name: ${JSON.stringify(name)}`);
}

async function exchange(query: Buffer, options: DohOptions): Promise<Buffer> {
  const url = new URL(options.resolverUrl);
  const cleartextAllowed = (options.devZoneCleartext === true || options.cleartext === true) && url.protocol === 'http:';
  if (url.protocol !== 'https:' && !cleartextAllowed) throw new ResolverError('unreachable', 'the DoH resolver URL must be https (http only in dev mode or to a loopback host)');
  const { Agent, request } = await loadUndici();
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new ResolverError('timeout', `the resolver did not answer within ${options.timeoutMs} ms`));
  }, options.timeoutMs);
  // unbound and most public resolvers prefer (unbound: require) HTTP/2, hence allowH2.
  const agent = new Agent({
    allowH2: true,
    connect: abortableConnector({ signal: controller.signal, connectTimeoutMs: options.timeoutMs, ca: options.ca, allowH2: true }),
  });
  try {
    const response = await request(url, {
      dispatcher: agent,
      method: 'POST',
      headers: { 'content-type': DNS_MESSAGE, accept: DNS_MESSAGE },
      body: query,
      signal: controller.signal,
    });
    // undici's request() never follows redirects, so a 3xx arrives here and is refused like any non-200.
    if (response.statusCode !== 200) {
      discardBody(response.body);
      throw new ResolverError('http_status', `the resolver answered HTTP ${response.statusCode}`);
    }
    const contentType = String(response.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (contentType !== DNS_MESSAGE) {
      discardBody(response.body);
      throw new ResolverError('malformed', `the resolver answered with content type ${contentType || '(none)'}`);
    }
    return await readBodyCapped(response.body, options.responseBytesMax ?? DOH_RESPONSE_BYTES_MAX_DEFAULT);
  } catch (error) {
    if (error instanceof ResolverError) throw error;
    if (timedOut) throw new ResolverError('timeout', `the resolver did not answer within ${options.timeoutMs} ms`, { cause: error });
    if (error instanceof OutboundError) throw new ResolverError('too_large', error.message, { cause: error });
    const code = (error as { code?: unknown } | null)?.code;
    if (code === 'UND_ERR_CONNECT_TIMEOUT') throw new ResolverError('timeout', 'connecting to the resolver timed out', { cause: error });
    throw new ResolverError('unreachable', `could not reach the resolver (${String(code ?? 'error')})`, { cause: error });
  } finally {
    clearTimeout(timer);
    void agent.destroy().catch(() => undefined);
  }
}

function decodeResponse(bytes: Buffer, name: string): DecodedPacket {
  let message: DecodedPacket;
  try {
    message = dnsPacket.decode(bytes);
  } catch (error) {
    throw new ResolverError('malformed', 'the resolver answer is not a DNS message', { cause: error });
  }
  // The decoder reads past the end of a cut-short message without a word (a record's strings come back short or
  // empty, so a TXT value cut to the token read as the token; found from outside), and ignores bytes after it: a
  // message is whole only when decoding it took exactly its bytes.
  const decoded = dnsPacket.decode.bytes;
  if (decoded !== bytes.length) {
    const how = Number.isFinite(decoded) && decoded < bytes.length ? `${bytes.length - decoded} bytes follow its end (padded)` : 'its own lengths run past its end (cut short)';
    throw new ResolverError('malformed', `the resolver answer of ${bytes.length} bytes is not one whole DNS message: ${how}`);
  }
  const question = message.questions?.[0];
  const echoesQuestion =
    message.type === 'response' &&
    message.id === 0 &&
    message.questions?.length === 1 &&
    question !== undefined &&
    question.type === 'TXT' &&
    canonicalName(question.name) === canonicalName(name);
  if (!echoesQuestion) throw new ResolverError('malformed', 'the resolver answer does not match the question');
  if (message.flag_tc) throw new ResolverError('malformed', 'the resolver answer is truncated');
  return message;
}

const isTxt = (answer: Answer): answer is TxtAnswer => answer.type === 'TXT' && (answer.class ?? 'IN') === 'IN';
const isCname = (answer: Answer): answer is StringAnswer => answer.type === 'CNAME';

function txtBytes(answer: TxtAnswer): Buffer {
  const parts = Array.isArray(answer.data) ? answer.data : [answer.data];
  // Strings inside one TXT record are one value split at 255 bytes (RFC 7208 §3.3): join with nothing.
  return Buffer.concat(parts.map((part) => (Buffer.isBuffer(part) ? part : Buffer.from(String(part), 'utf8'))));
}

/**
 * The TXT records that answer `name`, following CNAMEs only inside this answer section: each hop's owner
 * must be the previous hop's target, so an unrelated TXT the resolver happened to include never counts.
 */
function txtRecordsAt(answers: Answer[], name: string): Buffer[] {
  const seen = new Set<string>();
  let owner = canonicalName(name);
  for (let hop = 0; hop <= CNAME_HOPS_MAX; hop += 1) {
    if (seen.has(owner)) return [];
    seen.add(owner);
    const atOwner = answers.filter((answer) => answer.name !== undefined && canonicalName(answer.name) === owner);
    const txt = atOwner.filter(isTxt);
    if (txt.length > 0) return txt.map(txtBytes);
    const cname = atOwner.find(isCname);
    if (cname === undefined || typeof cname.data !== 'string') return [];
    owner = canonicalName(cname.data);
  }
  return [];
}

async function resolveTxtBytes(name: string, options: DohOptions): Promise<Buffer[]> {
  assertQueryableName(name);
  // id 0 as RFC 8484 §4.1 recommends (cache friendly); the answer must echo it.
  const query = dnsPacket.encode({
    type: 'query',
    id: 0,
    flags: dnsPacket.RECURSION_DESIRED,
    questions: [{ type: 'TXT', class: 'IN', name: canonicalName(name) }],
  });
  const message = decodeResponse(await exchange(query, options), name);
  const rcode = (message as { rcode?: unknown }).rcode;
  if (rcode === 'NXDOMAIN') return [];
  if (rcode !== 'NOERROR') throw new ResolverError('rcode', `the resolver answered ${String(rcode)}`);
  return txtRecordsAt(message.answers ?? [], name);
}

/** Every TXT record at `name` (after in-answer CNAMEs), each record's strings joined; [] when none. */
export async function resolveTxt(name: string, options: DohOptions): Promise<string[]> {
  return (await resolveTxtBytes(name, options)).map((bytes) => bytes.toString('utf8'));
}

/** True when any one TXT record at `name` is exactly `value` (byte for byte, trimming nothing). */
export async function hasTxtValue(name: string, value: string, options: DohOptions): Promise<boolean> {
  const wanted = Buffer.from(value, 'utf8');
  return (await resolveTxtBytes(name, options)).some((record) => record.equals(wanted));
}
