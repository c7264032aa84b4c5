// DNS rebinding, on a dev gateway. Its dev sign-in (`/dev/issuers/*/login`) gives an owner's or an agent's token to
// anyone who asks, which is its purpose on a developer's machine; but a web page the developer visits can point its
// own name at 127.0.0.1 and then call the gateway as a page of the same origin (found from outside: such a page
// signed in as the README's owner, listed the agents and froze one). What tells it apart is the Host header, which
// names the page's domain, on a request a browser sends. So a dev gateway refuses (403, before any route runs) a
// browser's request, one that carries `Origin` (every POST, PUT, PATCH and DELETE a browser sends, same-origin ones
// included) or `Sec-Fetch-Site` (Fetch Metadata, which browsers send only to secure origins and localhost: a rebound
// plain-http name's GETs pass, and read nothing without a token, which only a POST gets), whose Host names anything
// but an IP address (a rebinding needs a name), `localhost` or a name under it (RFC 6761 §6.3: never resolved
// elsewhere), or ACG_BASE_URL's own host. A client that is no browser (curl, an SDK, a container calling the
// gateway by its service name) sends neither header, cannot be rebound, and is answered under any name. A live
// gateway has no dev sign-in, and its API reads bearer tokens only, so a rebound page holds nothing to call it
// with; `/mcp` checks Host and Origin in both modes (MCP's transport rule).
// Anchor: Vite's `server.allowedHosts` and webpack-dev-server's `allowedHosts` (IP addresses and localhost always,
// other names when configured); Fetch Metadata request headers (W3C), whose resource isolation policies tell a
// browser's request by them.
import { isIP } from 'node:net';
import { ApiError } from '../errors.ts';

/** The host name of a Host header (`name`, `name:port`, `[v6]:port`), in lower case; undefined when unreadable. */
function hostnameOf(host: string): string | undefined {
  const bracketed = /^\[([0-9A-Fa-f:.]+)\](?::\d{1,5})?$/.exec(host);
  if (bracketed) return bracketed[1]!.toLowerCase();
  const named = /^([^:[\]]+)(?::\d{1,5})?$/.exec(host);
  return named ? named[1]!.toLowerCase().replace(/\.$/, '') : undefined;
}

/** A request's headers as the check reads them. */
export interface DevHostHeaders {
  host?: string;
  origin?: string;
  'sec-fetch-site'?: string | string[];
}

/** The check of a dev gateway whose base URL is `baseUrl`: throws 403 for a browser's request naming a Host that could be a rebound name. */
export function devHostCheck(baseUrl: string): (headers: DevHostHeaders) => void {
  const ownHost = new URL(baseUrl).hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return ({ host, origin, 'sec-fetch-site': fetchSite }) => {
    // No Host: HTTP/1.0 (HTTP/1.1 without one is refused before), which no browser sends; no browser's mark: no page sent it.
    if (host === undefined || (origin === undefined && fetchSite === undefined)) return;
    const name = hostnameOf(host);
    if (name !== undefined && (isIP(name) !== 0 || name === 'localhost' || name.endsWith('.localhost') || name === ownHost)) return;
    throw new ApiError('forbidden', {
      detail:
        `a dev gateway answers a browser only under a Host header naming ${ownHost}, localhost or an IP address, not ${JSON.stringify(host.slice(0, 100))}: ` +
        'another name could be a web page rebinding its domain to this machine (DNS rebinding). To browse the gateway by that name, make it ACG_BASE_URL\'s host',
    });
  };
}
