// The console as a public OAuth client of its own gateway (authorization code + PKCE S256, RFC 6749, 7636,
// 8707, 9207): it signs the owner in through the authorization server and keeps the access token in memory
// only, never in localStorage or sessionStorage, and never in a URL.
//
// - Signing in with a click: a top-level redirect to /oauth/authorize (scope svc:owner, the API as resource,
//   a fresh state and verifier), the consent page, then back at /console/callback with a code. What the
//   round trip must remember (the state, the verifier, where to return) is in sessionStorage for that
//   navigation only, and removed when the callback is read. The code is exchanged at once and the callback's
//   URL replaced, so no code stays in the address bar or the history.
// - Signing in again without a click (the 10-minute token lapsed, or the page was reloaded): the same
//   request with `prompt=none`, sent by fetch, which follows the authorization server's 303 to the callback
//   URL; the code (or `consent_required`) is read from where it landed. The gateway answers it only from a
//   consent remembered for this browser (its HttpOnly binding cookie), this client, scope and resource.
// Every callback is checked before its code is used: the exact redirect URI, `iss` (RFC 9207), `state`.
import type { Settings } from './settings.ts';

const SCOPE = 'svc:owner';
/** Renew this long before the token's own expiry, so a request never leaves with a token about to lapse. */
const EXPIRY_MARGIN_MS = 30_000;
const PENDING_KEY = 'acg-console-sign-in';

interface Token {
  accessToken: string;
  expiresAtMs: number;
}

interface PendingSignIn {
  state: string;
  verifier: string;
  returnTo: string;
}

/** A sign-in that needs the person (no remembered consent answers): the console shows its sign-in screen. */
export class SignInRequired extends Error {
  /**
   * `consentGone`: the authorization server answered `consent_required`, so this browser holds no remembered consent
   * (the only case in which no token can be had because there is nothing left here to sign in with).
   */
  constructor(
    readonly reason: string,
    readonly consentGone = false,
  ) {
    super(reason);
  }
}

function base64url(bytes: Uint8Array): string {
  let text = '';
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function randomText(bytes = 32): string {
  return base64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

async function challengeOf(verifier: string): Promise<string> {
  return base64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
}

export class Auth {
  private token: Token | undefined;
  private renewing: Promise<void> | undefined;
  private readonly listeners = new Set<() => void>();

  constructor(private readonly settings: Settings) {}

  get signedIn(): boolean {
    return this.token !== undefined;
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** A token valid for a while yet: the one held, or a new one signed in without a click. */
  async accessToken(): Promise<string> {
    if (!this.token || this.token.expiresAtMs - EXPIRY_MARGIN_MS <= Date.now()) await this.renew();
    return this.token!.accessToken;
  }

  /** Signs in again without a click (one at a time, whoever asks); SignInRequired when only the person can. */
  renew(): Promise<void> {
    this.renewing ??= this.silentSignIn().finally(() => {
      this.renewing = undefined;
    });
    return this.renewing;
  }

  /**
   * Signs out: gives a live token back to the authorization server (RFC 7009), which revokes the grant behind it
   * (the consent remembered for the console in every browser, and its live tokens), then forgets it: 'everywhere'.
   * Forgetting alone left the consent, and a reload's silent sign-in signed the owner straight back in. A token that
   * lapsed is renewed first, since the server revokes nothing for a dead one; when the server says this browser holds
   * no consent any more (consent_required), there is nothing here to sign back in with: 'this-browser' (another
   * browser's consent, if any, is out of reach without a token). Any other failure to renew (the gateway unreachable,
   * the token endpoint failing) throws, as a refused revocation does: the owner is still signed in (found from
   * outside: it said "signed out" and a new tab signed straight back in).
   */
  async signOut(): Promise<'everywhere' | 'this-browser'> {
    let accessToken: string;
    try {
      // Renewed without forgetting the lapsed token on a failure: forgetting it would show "You are signed out."
      // while the consent stays and a new tab signs straight back in.
      if (!this.token || this.token.expiresAtMs - EXPIRY_MARGIN_MS <= Date.now()) await this.silentSignIn({ forgetOnFailure: false });
      accessToken = this.token!.accessToken;
    } catch (error) {
      if (!(error instanceof SignInRequired && error.consentGone)) throw error;
      this.setToken(undefined);
      return 'this-browser';
    }
    let response: Response;
    try {
      response = await fetch(this.settings.revocationEndpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token: accessToken, token_type_hint: 'access_token', client_id: this.settings.clientId }),
        cache: 'no-store',
      });
    } catch {
      throw new Error('the gateway could not be reached; try again.');
    }
    if (!response.ok) {
      const body = (await response.json().catch(() => ({}))) as { error_description?: string };
      throw new Error(body.error_description ?? `the gateway answered ${response.status}; try again.`);
    }
    this.setToken(undefined);
    return 'everywhere';
  }

  /** The click: off to the authorization server; `prompt` asks it for its page even when a consent is remembered. */
  async signIn(options: { prompt?: 'select_account'; returnTo?: string } = {}): Promise<never> {
    const pending: PendingSignIn = { state: randomText(), verifier: randomText(), returnTo: options.returnTo ?? currentPath() };
    sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
    location.assign(await this.authorizationUrl(pending, options.prompt));
    return new Promise<never>(() => {});
  }

  /** Whether this page is the callback of a sign-in (a code or an error from the authorization server). */
  isCallback(): boolean {
    const redirect = this.settings.redirectUri;
    return redirect !== undefined && `${location.origin}${location.pathname}` === redirect;
  }

  /**
   * Reads the callback of a sign-in started here, exchanges its code and takes its URL out of the address bar
   * and the history; returns where the person was going.
   */
  async completeSignIn(): Promise<string> {
    const pendingText = sessionStorage.getItem(PENDING_KEY);
    sessionStorage.removeItem(PENDING_KEY);
    const url = new URL(location.href);
    history.replaceState(null, '', '/console');
    if (!pendingText) throw new SignInRequired('This sign-in did not start in this tab. Sign in again.');
    const pending = JSON.parse(pendingText) as PendingSignIn;
    await this.redeem(url, pending);
    history.replaceState(null, '', pending.returnTo);
    return pending.returnTo;
  }

  private async silentSignIn(options: { forgetOnFailure: boolean } = { forgetOnFailure: true }): Promise<void> {
    const pending: PendingSignIn = { state: randomText(), verifier: randomText(), returnTo: '' };
    let landed: Response;
    try {
      landed = await fetch(await this.authorizationUrl(pending, 'none'), { credentials: 'same-origin', cache: 'no-store', redirect: 'follow' });
    } catch {
      throw new SignInRequired('The gateway could not be reached to sign you in again.');
    }
    await landed.body?.cancel();
    try {
      await this.redeem(new URL(landed.url), pending);
    } catch (error) {
      if (options.forgetOnFailure) this.setToken(undefined);
      throw error;
    }
  }

  private async authorizationUrl(pending: PendingSignIn, prompt?: string): Promise<string> {
    const { settings } = this;
    if (!settings.redirectUri) throw new SignInRequired('This gateway cannot sign the console in: its base URL (ACG_BASE_URL) must be https, or http on a loopback address.');
    const url = new URL(settings.authorizationEndpoint);
    const params: Record<string, string> = {
      response_type: 'code',
      client_id: settings.clientId,
      redirect_uri: settings.redirectUri,
      scope: SCOPE,
      resource: settings.resource,
      state: pending.state,
      code_challenge: await challengeOf(pending.verifier),
      code_challenge_method: 'S256',
    };
    if (prompt) params.prompt = prompt;
    url.search = new URLSearchParams(params).toString();
    return url.href;
  }

  /** Checks where an authorization answer landed (RFC 9207, state) and trades its code for a token. */
  private async redeem(landed: URL, pending: PendingSignIn): Promise<void> {
    const { settings } = this;
    const params = landed.searchParams;
    if (`${landed.origin}${landed.pathname}` !== settings.redirectUri) throw new SignInRequired('The sign-in did not come back to the console.');
    if (params.get('iss') !== settings.issuer) throw new SignInRequired('The sign-in answer came from another issuer; it was ignored.');
    if (params.get('state') !== pending.state) throw new SignInRequired('The sign-in answer does not match the sign-in started here; it was ignored.');
    const error = params.get('error');
    if (error === 'consent_required') throw new SignInRequired('Sign in to continue.', true);
    // The consent page's Decline is the person's own choice, not a failure (the gateway answers it with access_denied).
    if (error === 'access_denied') throw new SignInRequired('You declined the sign-in on the consent page; nothing was granted.');
    if (error) throw new SignInRequired(`Sign-in failed: ${params.get('error_description') ?? error}`);
    const code = params.get('code');
    if (!code) throw new SignInRequired('The sign-in answer carried no code.');
    const response = await fetch(settings.tokenEndpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code,
        client_id: settings.clientId,
        redirect_uri: settings.redirectUri!,
        code_verifier: pending.verifier,
        resource: settings.resource,
      }),
      cache: 'no-store',
    });
    const body = (await response.json().catch(() => ({}))) as { access_token?: string; expires_in?: number; error_description?: string; scope?: string };
    if (!response.ok || !body.access_token || body.scope !== SCOPE) throw new SignInRequired(`Sign-in failed: ${body.error_description ?? `the token endpoint answered ${response.status}`}`);
    this.setToken({ accessToken: body.access_token, expiresAtMs: Date.now() + (body.expires_in ?? 600) * 1000 });
  }

  private setToken(token: Token | undefined): void {
    const changed = (token === undefined) !== (this.token === undefined);
    this.token = token;
    if (changed) for (const listener of this.listeners) listener();
  }
}

function currentPath(): string {
  return `${location.pathname}${location.search}`;
}
