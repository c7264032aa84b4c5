// Input rules for a merchant's domain and webhook URL. Both end up as targets of our own network calls
// (a DoH lookup, webhook deliveries), so they are checked strictly here and again at delivery time
// (src/platform/outbound.ts). Each check names the reason it refuses, so a 400 can say what to fix.
import net from 'node:net';
import { domainToASCII } from 'node:url';

export type DomainResult = { ok: true; domain: string } | { ok: false; reason: string };
export type WebhookUrlResult = { ok: true; url: string } | { ok: false; reason: string };

/** Longer raw input is refused before any parsing work. */
const DOMAIN_INPUT_CHARS_MAX = 1024;
const DOMAIN_CHARS_MAX = 253;
const LABEL_CHARS_MAX = 63;
export const WEBHOOK_URL_CHARS_MAX = 2048;

/**
 * Top-level names that never lead to a merchant's public server, and so can never be verified:
 * - localhost, test, invalid, example: RFC 6761 / RFC 2606 special-use names;
 * - local: multicast DNS (RFC 6762); onion: Tor (RFC 7686); alt: non-DNS namespaces (RFC 9476);
 * - arpa: infrastructure (reverse DNS, home.arpa of RFC 8375);
 * - internal: reserved by ICANN (2024) for private use;
 * - localdomain, lan, home, corp, intranet, private: de-facto private names (ICANN name-collision list
 *   for home/corp; the rest are common router and OS defaults).
 * The second-level example.com/.net/.org of RFC 2606 are left alone on purpose: they are real,
 * resolvable names, and a merchant cannot verify them anyway.
 */
export const SPECIAL_USE_TLDS: ReadonlySet<string> = new Set([
  'localhost',
  'test',
  'invalid',
  'example',
  'local',
  'onion',
  'alt',
  'arpa',
  'internal',
  'localdomain',
  'lan',
  'home',
  'corp',
  'intranet',
  'private',
]);

const LDH_LABEL = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/;
/** A TLD starts with a letter: this refuses all-numeric and 0x… last labels, which URL parsers read as IPv4. */
const TLD = /^[a-z](?:[a-z0-9-]*[a-z0-9])?$/;
/** \s covers Unicode spaces (NBSP, U+2028, U+FEFF …); the ranges add the C0 and C1 control characters. */
const WHITESPACE_OR_CONTROL = /[\s\u0000-\u001f\u007f-\u009f]/;
/** Characters that can only mean a URL part (scheme, port, credentials, path, query, fragment) or an escape. */
const URL_SYNTAX: Array<[RegExp, string]> = [
  [/:\/\//, 'must not include a scheme'],
  [/@/, 'must not include credentials'],
  [/[[\]]/, 'must not be an IP address'],
  [/:/, 'must not include a port'],
  [/[/\\]/, 'must not include a path'],
  [/\?/, 'must not include a query'],
  [/#/, 'must not include a fragment'],
  [/%/, 'must not be percent-encoded'],
];

function refuse(reason: string): { ok: false; reason: string } {
  return { ok: false, reason };
}

/** Checks an already IDNA-normalised, lower-case name with no trailing dot. */
function checkAsciiName(domain: string): DomainResult {
  if (net.isIP(domain) !== 0) return refuse('must not be an IP address');
  if (domain.length === 0) return refuse('must not be empty');
  if (domain.length > DOMAIN_CHARS_MAX) return refuse(`must be at most ${DOMAIN_CHARS_MAX} characters`);
  const labels = domain.split('.');
  if (labels.length < 2) return refuse('must have at least two labels (a single-label name is not public)');
  for (const label of labels) {
    if (label.length === 0) return refuse('must not have an empty label');
    if (label.length > LABEL_CHARS_MAX) return refuse(`each label must be at most ${LABEL_CHARS_MAX} characters`);
    if (!LDH_LABEL.test(label)) return refuse('labels may hold only letters, digits and inner hyphens');
  }
  const tld = labels[labels.length - 1]!;
  if (!TLD.test(tld)) return refuse('must not be an IP address (its last label must start with a letter)');
  if (SPECIAL_USE_TLDS.has(tld)) return refuse(`.${tld} is a special-use name, not a public domain`);
  return { ok: true, domain };
}

/**
 * A public DNS hostname, returned IDNA-ASCII, lower case, without a trailing dot. Refuses anything that
 * is, or could be read by some parser as, an IP address, a URL, or a private or special-use name.
 */
export function normaliseDomain(input: string): DomainResult {
  if (typeof input !== 'string') return refuse('must be a string');
  if (input.length > DOMAIN_INPUT_CHARS_MAX) return refuse(`must be at most ${DOMAIN_CHARS_MAX} characters`);
  if (WHITESPACE_OR_CONTROL.test(input)) return refuse('must not contain whitespace or control characters');
  for (const [pattern, reason] of URL_SYNTAX) if (pattern.test(input)) return refuse(reason);
  if (net.isIP(input) !== 0) return refuse('must not be an IP address');
  // domainToASCII maps full-width letters and ideographic dots (。) to ASCII, lower-cases, and punycodes;
  // it answers '' for names IDNA cannot encode. It also turns 0x7f.1 into 127.0.0.1, caught below.
  const ascii = domainToASCII(input);
  if (ascii === '') return refuse('is not a valid internationalised domain name');
  const withoutRoot = ascii.endsWith('.') ? ascii.slice(0, -1) : ascii;
  return checkAsciiName(withoutRoot);
}

/** The authority of a raw `https://…` string: up to the first '/', '?' or '#' (backslash is refused earlier). */
function rawAuthority(input: string): string {
  const rest = input.slice('https://'.length);
  const end = rest.search(/[/?#]/);
  return end === -1 ? rest : rest.slice(0, end);
}

function isUnderDomain(host: string, domain: string): boolean {
  // The dot keeps the label boundary: evil-example.com is not under example.com.
  return host === domain || host.endsWith(`.${domain}`);
}

/**
 * A webhook URL: absolute https, on the verified domain or a subdomain of it, no credentials, query or
 * fragment, and port 443 only (explicit `:443` is accepted and dropped). Other ports are refused so that a
 * merchant URL cannot aim deliveries at some other service that happens to listen on its hosts. Returns
 * the canonical form to store: `https://<normalised host><path>`.
 */
export function validateWebhookUrl(input: string, verifiedDomain: string): WebhookUrlResult {
  const domain = normaliseDomain(verifiedDomain);
  if (!domain.ok) return refuse(`the verified domain is not valid: ${domain.reason}`);
  const checked = checkPublicHttpsUrl(input);
  if (!checked.ok) return checked;
  if (!isUnderDomain(checked.host, domain.domain)) return refuse(`the host must be ${domain.domain} or a subdomain of it`);
  return { ok: true, url: checked.url };
}

/**
 * A webhook URL with no verified domain to anchor it (an owner's webhook): every rule of
 * `validateWebhookUrl` but the domain one. The host must still be a public DNS name (no IP literal,
 * no single-label or special-use name), and delivery re-checks every resolved address.
 */
export function validatePublicWebhookUrl(input: string): WebhookUrlResult {
  const checked = checkPublicHttpsUrl(input);
  return checked.ok ? { ok: true, url: checked.url } : checked;
}

function checkPublicHttpsUrl(input: string): { ok: true; url: string; host: string } | { ok: false; reason: string } {
  if (typeof input !== 'string') return refuse('must be a string');
  if (input.length > WEBHOOK_URL_CHARS_MAX) return refuse(`must be at most ${WEBHOOK_URL_CHARS_MAX} characters`);
  if (WHITESPACE_OR_CONTROL.test(input)) return refuse('must not contain whitespace or control characters');
  if (!/^https:\/\//i.test(input)) return refuse('must be an absolute https:// URL');
  // WHATWG reads '\' as '/' in https URLs; refusing it keeps our view of the authority the parser's view.
  if (input.includes('\\')) return refuse('must not contain a backslash');
  if (input.includes('?')) return refuse('must not include a query');
  if (input.includes('#')) return refuse('must not include a fragment');
  const authority = rawAuthority(input);
  if (authority.includes('@')) return refuse('must not include credentials');
  if (authority.includes('%')) return refuse('the host must not be percent-encoded');
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    return refuse('is not a valid URL');
  }
  if (url.protocol !== 'https:') return refuse('must be an absolute https:// URL');
  if (url.username !== '' || url.password !== '') return refuse('must not include credentials');
  if (url.search !== '' || url.hash !== '') return refuse('must not include a query or fragment');
  // WHATWG drops the default port, so '' means "443, written or not".
  if (url.port !== '') return refuse('must use the default https port 443');
  const host = normaliseDomain(url.hostname);
  if (!host.ok) return refuse(`the host ${host.reason}`);
  const canonical = `https://${host.domain}${url.pathname}`;
  if (canonical.length > WEBHOOK_URL_CHARS_MAX) return refuse(`must be at most ${WEBHOOK_URL_CHARS_MAX} characters`);
  return { ok: true, url: canonical, host: host.domain };
}
