// Redirect URI rules: what registration accepts (RFC 7591, RFC 8252, RFC 9700 §2.1) and how a
// requested URI is matched against the registered ones (exact string; loopback IP literals may use any port).

/** Hosts that count as the local machine for plain-http redirect URIs (RFC 8252 §7.3). */
const LOOPBACK_IP_HOSTS = new Set(['127.0.0.1', '[::1]']);
const LOOPBACK_HOSTS = new Set([...LOOPBACK_IP_HOSTS, 'localhost']);
/** Whitespace or control characters: a URI that carries them is never what its author meant. */
const UNSAFE_CHARACTERS = /[\u0000-\u0020\u007f-\u009f]/;

/** Why a redirect URI is refused at registration, or undefined when it is acceptable. */
export function redirectUriProblem(raw: string): string | undefined {
  if (UNSAFE_CHARACTERS.test(raw)) return 'must not contain whitespace or control characters';
  // An empty fragment (`…/cb#`) parses to an empty hash, so test the raw string (research brief §1.2).
  if (raw.includes('#')) return 'must not contain a fragment';
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'is not an absolute URI';
  }
  const authority = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?]*)/.exec(raw)?.[1];
  if (url.username || url.password || authority === undefined || authority.includes('@')) {
    return authority === undefined ? 'must be an http(s) URI with an authority' : 'must not contain credentials';
  }
  if (url.protocol === 'https:') return undefined;
  if (url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  return 'must use https, or http on a loopback host (127.0.0.1, [::1], localhost)';
}

function isLoopbackIpHttp(url: URL): boolean {
  return url.protocol === 'http:' && LOOPBACK_IP_HOSTS.has(url.hostname);
}

/**
 * The registered URI the requested one matches, or undefined. Exact string comparison, except that
 * a loopback IP literal registered over http may be requested with any port (RFC 8252 §7.3); scheme,
 * host, path and query must still be equal. `localhost` gets no port freedom (RFC 8252 §8.3).
 */
export function matchRedirectUri(requested: string, registered: readonly string[]): string | undefined {
  if (registered.includes(requested)) return requested;
  let wanted: URL;
  try {
    wanted = new URL(requested);
  } catch {
    return undefined;
  }
  if (!isLoopbackIpHttp(wanted) || requested.includes('#') || wanted.username || wanted.password) return undefined;
  return registered.find((candidate) => {
    const known = new URL(candidate);
    return isLoopbackIpHttp(known) && known.hostname === wanted.hostname && known.pathname === wanted.pathname && known.search === wanted.search;
  });
}
