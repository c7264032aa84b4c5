// Redirect URI rules: what registration accepts (RFC 7591, RFC 8252, RFC 9700 §2.1) and how a
// requested URI is matched against the registered ones (exact string; loopback IP literals may use any port),
// and how a redirect to one carries its parameters (the registered query kept byte for byte).

/** Hosts that count as the local machine for plain-http redirect URIs (RFC 8252 §7.3). */
const LOOPBACK_IP_HOSTS = new Set(['127.0.0.1', '[::1]']);
const LOOPBACK_HOSTS = new Set([...LOOPBACK_IP_HOSTS, 'localhost']);
/** Whitespace or control characters: a URI that carries them is never what its author meant. */
const UNSAFE_CHARACTERS = /[\u0000-\u0020\u007f-\u009f]/;

/**
 * The parameters a redirect adds to the registered URI's query (RFC 6749 §4.1.2, §4.1.2.1; RFC 9207 `iss`). A
 * registered query that held one would reach the client beside ours: `error=x` made every successful sign-in an
 * error to a strict client (found from outside, bb119).
 */
const RESPONSE_PARAMETERS: readonly string[] = ['code', 'state', 'iss', 'error', 'error_description', 'error_uri'];

/** The response parameter a URI's query already holds (as a form decoder reads its names), if any. */
function responseParameterInQuery(url: URL): string | undefined {
  return [...url.searchParams.keys()].find((name) => RESPONSE_PARAMETERS.includes(name));
}

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
  // Stored and compared as written, and followed as the URL parser reads it: the two must be one. A host left
  // empty (`https:///cb` reads as https://cb/), a backslash, a dot segment, a percent-encoded or upper-case host, a
  // default port: each reads as another URI than the one written, and the code would go there.
  if (url.href !== raw && url.href !== `${raw}/`) return `must be written as a URL parser writes it (${url.href}): no empty host, backslash, dot segment, encoded or upper-case host or scheme, or default port`;
  // Port 0 is no port a client listens on, and following a redirect to it throws (found from outside: a loopback
  // URI with port 0 was registered, and its authorization answered 5xx after storing a code).
  if (url.port === '0') return 'must not use port 0';
  const taken = responseParameterInQuery(url);
  if (taken !== undefined) return `must not hold ${taken} in its query: the redirect adds ${RESPONSE_PARAMETERS.join(', ')} itself`;
  if (url.protocol === 'https:') return undefined;
  if (url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  return 'must use https, or http on a loopback host (127.0.0.1, [::1], localhost)';
}

/** A loopback IP literal's http URI and its port, if one is written: the port is what RFC 8252 §7.3 lets vary. */
const LOOPBACK_PORT = /^(http:\/\/(?:127\.0\.0\.1|\[::1\]))(?::(\d{1,5}))?(?=[/?]|$)/;

/**
 * The registered URI the requested one matches, or undefined. Exact string comparison, except that
 * a loopback IP literal registered over http may be requested with any port from 1 to 65535, written as the
 * URL parser writes it (RFC 8252 §7.3); scheme, host, path and query must still be equal. `localhost` gets no
 * port freedom (RFC 8252 §8.3).
 */
export function matchRedirectUri(requested: string, registered: readonly string[]): string | undefined {
  // A client registered before registration refused port 0, or a response parameter in the query, keeps its URI,
  // which no redirect can follow (or none the client could read).
  if (registered.includes(requested)) {
    const url = new URL(requested);
    return url.port === '0' || responseParameterInQuery(url) !== undefined ? undefined : requested;
  }
  // The requested URI must be one registration would take, as the code goes where the parser reads it: a port
  // it cannot read (65536) or writes otherwise (`:03001`, `:80`) is not registered, nor is port 0 (before, each
  // matched, and the redirect threw: a 5xx, after a code was stored; found from outside).
  const loopback = LOOPBACK_PORT.exec(requested);
  if (loopback === null || redirectUriProblem(requested) !== undefined) return undefined;
  // The strings themselves, each without its port: a URI the parser would read as the same one (`/x/../cb`,
  // `127.1`, `HTTP://`) is another string, so it is not a match.
  const withoutPort = (uri: string) => (LOOPBACK_PORT.test(uri) ? uri.replace(LOOPBACK_PORT, '$1') : undefined);
  const wanted = withoutPort(requested);
  return registered.find((candidate) => withoutPort(candidate) === wanted);
}

/**
 * The redirect URI with the response's parameters appended to its query (RFC 6749 §3.1.2: the query component "MUST
 * be retained when adding additional query parameters"). The URI's own bytes are kept exactly, the string the client
 * registered and compares (re-serialising its query turned `?x&y=a%20b` into `?x=&y=a+b`; found from outside, bb119);
 * registration refuses a query that holds one of these names, so none is sent twice.
 */
export function redirectWith(redirectUri: string, params: Record<string, string | undefined>): string {
  const added = new URLSearchParams(Object.entries(params).filter((entry): entry is [string, string] => entry[1] !== undefined)).toString();
  const separator = !redirectUri.includes('?') ? '?' : /[?&]$/.test(redirectUri) ? '' : '&';
  return `${redirectUri}${separator}${added}`;
}
