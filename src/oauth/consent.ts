// GET /oauth/consent: the page where the person chooses an identity provider for a pending request.
// It is shown only to the browser that started the request, and only while the request is pending.
import type { IdentityProvider } from '../identity/issuers.ts';
import type { Gateway } from '../platform/gateway.ts';
import { readAuthorizationRequest } from './authorization-request.ts';
import { browserMatches, consentToken, remembersConsent } from './browser-binding.ts';
import { IDENTITY_PROVIDERS, parseScope, SCOPE_FOR_PROVIDER, type IdentityProviderChoice } from './scopes.ts';
import * as store from './store.ts';

/** One identity provider the consent page offers. */
export interface ProviderOption {
  choice: IdentityProviderChoice;
  issuer: string;
  /** Dev mode's built-in issuer: the page signs in through its dev login route. */
  devLoginUrl?: string;
}

/** What the consent page shows (pages.ts renders it). */
export interface ConsentView {
  requestId: string;
  consentToken: string;
  selectUrl: string;
  /** Where the page's Decline goes (POST /oauth/deny). */
  denyUrl: string;
  clientName: string | null;
  clientId: string;
  redirectUri: string;
  resource: string;
  providers: ProviderOption[];
  /** The consent is remembered in this browser (`remembersConsent`). */
  remembered: boolean;
}

export type ConsentOutcome =
  | { kind: 'show'; status: 400 | 403; error: 'invalid_request' | 'access_denied'; description: string }
  | { kind: 'page'; view: ConsentView };

export type ProviderLookup = (choice: IdentityProviderChoice) => IdentityProvider | undefined;

export async function consent(gateway: Gateway, requestId: string | undefined, browserSecret: string | undefined, providers: ProviderLookup): Promise<ConsentOutcome> {
  const request = await readAuthorizationRequest(gateway, gateway.db, requestId);
  if ('problem' in request) return { kind: 'show', status: 400, error: 'invalid_request', description: request.problem };
  if (!browserSecret || !browserMatches(browserSecret, request.browserHash)) {
    return { kind: 'show', status: 403, error: 'access_denied', description: 'this authorization request was started in another browser; start again from the application here' };
  }
  const client = await store.findClient(gateway.db, request.clientId);
  if (!client) return { kind: 'show', status: 400, error: 'invalid_request', description: 'the client of this request no longer exists' };
  const { baseUrl, mode } = gateway.config;
  const grantable = request.scope === null ? undefined : parseScope(request.scope);
  const options: ProviderOption[] = [];
  for (const choice of IDENTITY_PROVIDERS) {
    const provider = providers(choice);
    if (!provider || (grantable && !grantable.has(SCOPE_FOR_PROVIDER[choice]))) continue;
    const devLoginUrl = mode === 'dev' && provider.source === 'built_in' ? `${baseUrl}/dev/issuers/${choice}/login` : undefined;
    options.push({ choice, issuer: provider.issuer, devLoginUrl });
  }
  if (options.length === 0) {
    return { kind: 'show', status: 400, error: 'invalid_request', description: 'no identity provider that can grant the requested scope is configured' };
  }
  return {
    kind: 'page',
    view: {
      requestId: requestId!,
      consentToken: consentToken(browserSecret, requestId!),
      selectUrl: `${baseUrl}/oauth/select`,
      denyUrl: `${baseUrl}/oauth/deny`,
      clientName: client.client_name,
      clientId: client.id,
      redirectUri: request.redirectUri,
      resource: request.resource,
      providers: options,
      remembered: remembersConsent(gateway.config),
    },
  };
}
