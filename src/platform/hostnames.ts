// What a public DNS hostname is: the rule a merchant's domain and the host of every webhook URL both keep.
// Both end up as targets of our own network calls (a DoH lookup, webhook deliveries), so they are checked
// strictly here and again at delivery time (outbound.ts). Each check names the reason it refuses, so a 400
// can say what to fix.
import net from 'node:net';
import { domainToASCII } from 'node:url';

export type DomainResult = { ok: true; domain: string } | { ok: false; reason: string };

/** Longer raw input is refused before any parsing work. */
const DOMAIN_INPUT_CHARS_MAX = 1024;
const DOMAIN_CHARS_MAX = 253;
const LABEL_CHARS_MAX = 63;

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
export const WHITESPACE_OR_CONTROL = /[\s\u0000-\u001f\u007f-\u009f]/;
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
