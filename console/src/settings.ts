// What the gateway tells its console about itself, in the shell's <meta name="acg-console"> (src/console/pages.ts):
// facts of this gateway, never a secret. Read once at start.

export interface Settings {
  issuer: string;
  clientId: string;
  /** Absent when the gateway's base URL cannot carry a redirect URI: the console cannot sign in there. */
  redirectUri?: string;
  resource: string;
  authorizationEndpoint: string;
  tokenEndpoint: string;
  revocationEndpoint: string;
  jwksUri: string;
  agentIssuer?: string;
  mode: 'dev' | 'live';
  humanSignIn: { kind: 'dev'; url: string } | { kind: 'token'; issuer: string } | { kind: 'none' };
}

export function readSettings(): Settings {
  const meta = document.querySelector<HTMLMetaElement>('meta[name="acg-console"]');
  if (!meta) throw new Error('the console page carries no settings');
  return JSON.parse(meta.content) as Settings;
}
