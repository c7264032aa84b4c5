// The owner console's OAuth client: a first-party public client that the gateway declares itself, so the
// console signs in through the same authorization server as any other client, with every rule as strict:
// PKCE S256, state, the exact resource, and a consent the person gives on the consent page (remembered as
// for any client). What the gateway declares, and nothing else:
//   - its id, `acg-console` (registered ids are `cli_` + 128 random bits, so none can take it);
//   - scope `svc:owner` only: the console acts for a human owner, never as an agent;
//   - one redirect URI, `{base_url}/console/callback`, compared as an exact string: no loopback port freedom
//     (RFC 8252 §7.3 is for native apps on ephemeral ports; the console is served from one origin);
//   - no redirect URI at all when the base URL could not be registered as one (http on a non-loopback host):
//     the console then cannot sign in, and says why.
// The row in oauth_clients exists so that codes, remembered consents and revocations refer to it as to any
// client; its redirect URI is the declaration's (from the base URL now), never the row's, and the row is
// never purged as unused.
import type { Gateway } from '../platform/gateway.ts';
import { SCOPE_OWNER } from '../platform/access-tokens.ts';
import { matchRedirectUri, redirectUriProblem } from './redirect-uris.ts';
import * as store from './store.ts';

export const CONSOLE_CLIENT_ID = 'acg-console';
export const CONSOLE_CLIENT_NAME = 'Agent Credit Gateway console';
export const CONSOLE_CALLBACK_PATH = '/console/callback';

/** The console's one redirect URI, or undefined when the base URL cannot carry one (see the file header). */
export function consoleRedirectUri(baseUrl: string): string | undefined {
  const uri = `${baseUrl}${CONSOLE_CALLBACK_PATH}`;
  return redirectUriProblem(uri) === undefined ? uri : undefined;
}

/** Writes the console's row (once; later starts only refresh its name, scope and redirect URI). */
export async function declareConsoleClient(gateway: Gateway): Promise<void> {
  const redirectUri = consoleRedirectUri(gateway.config.baseUrl);
  await store.upsertBuiltInClient(gateway.db, {
    id: CONSOLE_CLIENT_ID,
    clientName: CONSOLE_CLIENT_NAME,
    redirectUris: redirectUri === undefined ? [] : [redirectUri],
    scope: SCOPE_OWNER,
    nowS: gateway.clock.nowS(),
  });
}

/** A client as the authorization server sees it: the console's redirect URI is the declaration's. */
export async function findClient(gateway: Gateway, clientId: string): Promise<store.ClientRow | undefined> {
  const row = await store.findClient(gateway.db, clientId);
  if (!row || row.id !== CONSOLE_CLIENT_ID) return row;
  const redirectUri = consoleRedirectUri(gateway.config.baseUrl);
  return { ...row, redirect_uris: redirectUri === undefined ? [] : [redirectUri], scope: SCOPE_OWNER };
}

/** The registered redirect URI a request names, or undefined: exact for the console, RFC 8252's rule for others. */
export function matchClientRedirectUri(client: store.ClientRow, requested: string): string | undefined {
  if (client.id === CONSOLE_CLIENT_ID) return client.redirect_uris.includes(requested) ? requested : undefined;
  return matchRedirectUri(requested, client.redirect_uris);
}
