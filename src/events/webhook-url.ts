// The webhook's URL rules: where the gateway will send a merchant's or an owner's events. A URL is a target
// of our own network calls, so it is checked strictly here and again at delivery time (every resolved
// address, src/platform/outbound.ts). The host rule (a public DNS name) is the platform's, shared with the
// merchants' domains. Each check names the reason it refuses, so a 400 can say what to fix: said of the URL, as the
// refusal follows the member's name (`body/url must use the default https port 443`).
import { normaliseDomain, WHITESPACE_OR_CONTROL } from '../platform/hostnames.ts';

export type WebhookUrlResult = { ok: true; url: string } | { ok: false; reason: string };

export const WEBHOOK_URL_CHARS_MAX = 2048;

function refuse(reason: string): { ok: false; reason: string } {
  return { ok: false, reason };
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
  if (!domain.ok) return refuse(`cannot be checked: the merchant's verified domain is not a public DNS name (${domain.reason})`);
  const checked = checkPublicHttpsUrl(input);
  if (!checked.ok) return checked;
  if (!isUnderDomain(checked.host, domain.domain)) return refuse(`must be on ${domain.domain} or a subdomain of it`);
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
  if (authority.includes('%')) return refuse('must not have a percent-encoded host');
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
  if (!host.ok) return refuse(`has a host that is not a public DNS name (${host.reason})`);
  const canonical = `https://${host.domain}${url.pathname}`;
  if (canonical.length > WEBHOOK_URL_CHARS_MAX) return refuse(`must be at most ${WEBHOOK_URL_CHARS_MAX} characters`);
  return { ok: true, url: canonical, host: host.domain };
}
