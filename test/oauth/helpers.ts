// Helpers for the OAuth tests: drive registration, authorization, consent, select and token exchange
// over real HTTP, step by step, so each test can break exactly one rule.
import { createHash, randomBytes } from 'node:crypto';

export interface Json {
  status: number;
  headers: Headers;
  body: any;
}

async function read(res: Response): Promise<Json> {
  const text = await res.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // HTML or empty
  }
  return { status: res.status, headers: res.headers, body };
}

export function pkcePair(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

export async function register(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Json> {
  return read(await fetch(`${url}/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) }));
}

export async function newClient(url: string, redirectUris = ['http://127.0.0.1:9/callback'], extra: Record<string, unknown> = {}): Promise<string> {
  const res = await register(url, { redirect_uris: redirectUris, client_name: 'Test client', ...extra });
  if (res.status !== 201) throw new Error(`registration failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.client_id;
}

export interface AuthorizeParams {
  client_id?: string;
  redirect_uri?: string;
  response_type?: string;
  state?: string;
  code_challenge?: string;
  code_challenge_method?: string;
  resource?: string;
  scope?: string;
}

export interface AuthorizeResult {
  status: number;
  location: string | null;
  cookie: string | undefined;
  html: string;
  headers: Headers;
}

export async function authorizeRaw(url: string, query: string, cookie?: string): Promise<AuthorizeResult> {
  const res = await fetch(`${url}/oauth/authorize?${query}`, { redirect: 'manual', headers: cookie ? { cookie } : {} });
  const setCookie = res.headers.get('set-cookie');
  return {
    status: res.status,
    location: res.headers.get('location'),
    cookie: setCookie ? setCookie.split(';')[0] : cookie,
    html: await res.text(),
    headers: res.headers,
  };
}

export function authorizeQuery(params: AuthorizeParams): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined) query.set(name, value);
  return query.toString();
}

export interface Pending {
  requestId: string;
  consentToken: string;
  cookie: string;
  html: string;
}

/** Starts a valid authorization request and opens its consent page, as the browser would. */
export async function startConsent(url: string, params: AuthorizeParams, cookie?: string): Promise<Pending> {
  const started = await authorizeRaw(url, authorizeQuery({ response_type: 'code', code_challenge_method: 'S256', state: 'st-1', ...params }), cookie);
  if (started.status !== 303 || !started.location?.includes('/oauth/consent')) {
    throw new Error(`authorize did not go to consent: ${started.status} ${started.location} ${started.html.slice(0, 300)}`);
  }
  const page = await fetch(started.location, { headers: { cookie: started.cookie! } });
  const html = await page.text();
  if (page.status !== 200) throw new Error(`consent page ${page.status}: ${html.slice(0, 300)}`);
  return {
    requestId: /data-request-id="([^"]+)"/.exec(html)![1]!,
    consentToken: /data-consent-token="([^"]+)"/.exec(html)![1]!,
    cookie: started.cookie!,
    html,
  };
}

export interface SelectOptions {
  token?: string;
  origin?: string | null;
  cookie?: string | null;
  consentToken?: string | null;
  query?: string;
  contentType?: string;
}

export async function selectIdentity(url: string, pending: Pending, identityProvider: string, options: SelectOptions = {}): Promise<Json> {
  const headers: Record<string, string> = { 'content-type': options.contentType ?? 'application/json' };
  const origin = options.origin === undefined ? url : options.origin;
  if (origin !== null) headers.origin = origin;
  const cookie = options.cookie === undefined ? pending.cookie : options.cookie;
  if (cookie !== null) headers.cookie = cookie;
  const consentToken = options.consentToken === undefined ? pending.consentToken : options.consentToken;
  if (consentToken !== null) headers['x-consent-token'] = consentToken;
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  return read(
    await fetch(`${url}/oauth/select${options.query ?? ''}`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ requestId: pending.requestId, identityProvider }),
    }),
  );
}

export async function token(
  url: string,
  params: Record<string, string | string[] | undefined>,
  contentType = 'application/x-www-form-urlencoded',
  headers: Record<string, string> = {},
): Promise<Json> {
  const form = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) form.append(name, v);
  }
  const body = contentType === 'application/json' ? JSON.stringify(Object.fromEntries(form)) : form.toString();
  return read(await fetch(`${url}/oauth/token`, { method: 'POST', headers: { 'content-type': contentType, ...headers }, body }));
}

export interface IssuedCode {
  code: string;
  clientId: string;
  redirectUri: string;
  verifier: string;
  resource: string;
  callback: URL;
}

/** Registers a client and walks the whole flow up to a code, with `identityToken` consenting. */
export async function obtainCode(
  url: string,
  identityProvider: 'human' | 'agent',
  identityToken: string,
  options: { clientId?: string; resource?: string; redirectUri?: string; scope?: string } = {},
): Promise<IssuedCode> {
  const redirectUri = options.redirectUri ?? 'http://127.0.0.1:9/callback';
  // Registrations are rate-limited per address, so tests share one client where they can.
  const clientId = options.clientId ?? (await newClient(url, [redirectUri]));
  const { verifier, challenge } = pkcePair();
  const resource = options.resource ?? url;
  const pending = await startConsent(url, { client_id: clientId, redirect_uri: redirectUri, code_challenge: challenge, resource, scope: options.scope });
  const selected = await selectIdentity(url, pending, identityProvider, { token: identityToken });
  if (selected.status !== 200) throw new Error(`select failed: ${selected.status} ${JSON.stringify(selected.body)}`);
  const callback = new URL(selected.body.redirectUrl);
  return { code: callback.searchParams.get('code')!, clientId, redirectUri, verifier, resource, callback };
}

export function tokenParams(issued: IssuedCode): Record<string, string> {
  return {
    grant_type: 'authorization_code',
    code: issued.code,
    client_id: issued.clientId,
    redirect_uri: issued.redirectUri,
    code_verifier: issued.verifier,
    resource: issued.resource,
  };
}
