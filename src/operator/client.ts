// How CLI commands reach a running gateway: HTTP to ACG_BASE_URL with a credential (the operator's, or an
// owner's for `acg agent mandate`). And what they say when they cannot: what they found at ACG_BASE_URL and
// in ACG_DATA_DIR, and what to do, in one place, so every command that needs a running gateway answers a
// wrong directory or port the same way.
import { randomUUID } from 'node:crypto';
import type { Config } from '../platform/config.ts';
import { devOperatorToken, operatorTokenFile } from './credential.ts';

const REQUEST_TIMEOUT_MS = 15_000;
/** A gateway that is up answers /healthz at once, even while it waits for its database. */
const PROBE_TIMEOUT_MS = 3_000;

/** Nothing answers at the base URL: the gateway is not running there. */
export class GatewayNotRunning extends Error {
  constructor(readonly baseUrl: string, options?: { cause?: unknown }) {
    super(`no gateway answers at ${baseUrl}`, options);
    this.name = 'GatewayNotRunning';
  }
}

export interface GatewayAnswer {
  status: number;
  body: Record<string, unknown>;
  /** The gateway's first answer to this Idempotency-Key, replayed (`Idempotent-Replayed: true`): nothing was done again. */
  replayed: boolean;
}

/**
 * A change sent with no answer back (the connection dropped, or the time ran out after the request went out): it
 * may have been applied. Its Idempotency-Key is what makes a retry safe: the same key applies it at most once and
 * replays the first answer (found from outside: "cannot reach the gateway" after a grant that went through, and a
 * retry under a new key granted it again).
 */
export class NoAnswer extends Error {
  constructor(readonly baseUrl: string, readonly idempotencyKey: string, reason: string, options?: { cause?: unknown }) {
    super(`no answer from the gateway at ${baseUrl} (${reason}): the change may have been applied`, options);
    this.name = 'NoAnswer';
  }
}

/** `fetch`, with a refused connection as GatewayNotRunning and any other failure as one readable line. */
async function send(baseUrl: string, path: string, init: RequestInit & { timeoutMs: number }): Promise<Response> {
  try {
    return await fetch(`${baseUrl}${path}`, { ...init, signal: AbortSignal.timeout(init.timeoutMs) });
  } catch (error) {
    const code = (error as { cause?: { code?: string } }).cause?.code;
    if (code === 'ECONNREFUSED') throw new GatewayNotRunning(baseUrl, { cause: error });
    const reason = code ?? (error as Error).message;
    // A refused connection or a name that does not resolve sent nothing; anything else may have been received and applied.
    const key = new Headers(init.headers).get('idempotency-key');
    if (key !== null && code !== 'ENOTFOUND' && code !== 'EAI_AGAIN') throw new NoAnswer(baseUrl, key, reason, { cause: error });
    throw new Error(`cannot reach the gateway at ${baseUrl}: ${reason}`, { cause: error });
  }
}

/**
 * The Authorization header's value for a credential, refused with a line that does not show it when a header cannot
 * carry it: a line break inside (a token pasted wrapped), a space, a control character. `fetch` refused it with an
 * error quoting the whole credential, which the commands printed (found from outside, 2026-12-07).
 */
export function bearer(token: string): string {
  if (!/^[\x21-\x7e]+$/.test(token)) {
    throw new Error('the credential holds a line break, a space or another character a header cannot carry (was it pasted wrapped?): set it again in one piece');
  }
  return `Bearer ${token}`;
}

/**
 * One JSON request; a mutating request carries an Idempotency-Key (the caller's `idempotency-key` header, or a fresh
 * one), so the gateway applies it once.
 */
export async function callGateway(
  baseUrl: string,
  token: string,
  method: 'GET' | 'POST' | 'PUT',
  path: string,
  body?: unknown,
  extraHeaders: Record<string, string> = {},
): Promise<GatewayAnswer> {
  const headers: Record<string, string> = { ...extraHeaders, authorization: bearer(token), accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET') headers['idempotency-key'] ??= randomUUID();
  const key = headers['idempotency-key'];
  const response = await send(baseUrl, path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), timeoutMs: REQUEST_TIMEOUT_MS });
  let text: string;
  try {
    text = await response.text();
  } catch (error) {
    // The answer began and broke off (a dropped connection, the time out): a change was received, and may have run.
    const reason = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).message;
    if (key !== undefined) throw new NoAnswer(baseUrl, key, reason, { cause: error });
    throw new Error(`cannot read the answer of the gateway at ${baseUrl}: ${reason}`, { cause: error });
  }
  let parsed: Record<string, unknown> | undefined;
  try {
    parsed = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
  } catch {
    parsed = undefined;
  }
  // The gateway refuses with a problem (`code`) or, on /oauth/*, an OAuth error (`error`), never with nothing: a
  // refusal without one comes from something else at this address (a proxy, another server), and reading it as the
  // gateway's "not found" would blame the agent id (found from outside).
  const problem = typeof parsed?.code === 'string' || typeof parsed?.error === 'string';
  // A proxy's 502 or 504 in front of the gateway: the change reached the gateway, or not; it cannot tell which.
  if (response.status >= 500 && !problem && key !== undefined) {
    throw new NoAnswer(baseUrl, key, `HTTP ${response.status} without the gateway's problem body, a proxy's answer`);
  }
  if (parsed === undefined) throw new Error(`the gateway at ${baseUrl} answered ${method} ${path} with HTTP ${response.status} and a body that is not JSON`);
  if (response.status >= 400 && !problem) {
    throw new Error(
      `${baseUrl} answered ${method} ${path} with HTTP ${response.status} and no problem body, which the gateway always gives: is the gateway at ${baseUrl}? ` +
        'Set ACG_BASE_URL (or PORT) to where it runs',
    );
  }
  return { status: response.status, body: parsed, replayed: response.headers.get('idempotent-replayed') === 'true' };
}

/** Whether anything answers at the base URL (its /healthz); false when the connection is refused. */
export async function gatewayAnswers(baseUrl: string): Promise<boolean> {
  try {
    const response = await send(baseUrl, '/healthz', { method: 'GET', timeoutMs: PROBE_TIMEOUT_MS });
    await response.body?.cancel();
    return true;
  } catch (error) {
    if (error instanceof GatewayNotRunning) return false;
    throw error;
  }
}

/** One line for a problem body: its code and detail. */
export function describeProblem(answer: GatewayAnswer): string {
  const { code, detail, title } = answer.body as { code?: string; detail?: string; title?: string };
  return `HTTP ${answer.status} ${code ?? ''}${detail || title ? `: ${detail ?? title}` : ''}`.trim();
}

/**
 * The mode the gateway at the base URL says it runs in (its /healthz, which asks no database), or undefined when none
 * says (nothing there, not the gateway). A dev command run against a live gateway says so, rather than print what it
 * never accepts. Not /readyz: its database check, late under load, named no mode, and a dev command went without its
 * credential (found in CI: four `acg demo` at once).
 */
export async function gatewayMode(baseUrl: string): Promise<'dev' | 'live' | undefined> {
  const mode = (await probeDocument(baseUrl, '/healthz'))?.mode;
  return mode === 'live' || mode === 'dev' ? mode : undefined;
}

/** The JSON object a GET of `path` answers with a 2xx, or undefined when none does. */
async function probeDocument(baseUrl: string, path: string): Promise<Record<string, unknown> | undefined> {
  try {
    const response = await send(baseUrl, path, { method: 'GET', timeoutMs: PROBE_TIMEOUT_MS });
    const body: unknown = await response.json().catch(() => undefined);
    const usable = response.ok && typeof body === 'object' && body !== null;
    return usable ? (body as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The issuer a running dev gateway names for one of its built-in identity issuers (its discovery document), or undefined
 * when none answers there. Built from the base URL the gateway was started with, which a token's `iss` must match.
 */
export async function devIssuerNamedBy(baseUrl: string, kind: 'human' | 'agent'): Promise<string | undefined> {
  const issuer = (await probeDocument(baseUrl, `/dev/issuers/${kind}/.well-known/openid-configuration`))?.issuer;
  return typeof issuer === 'string' ? issuer : undefined;
}

/** What a dev-mode command says of a gateway that runs in live mode: what it has not, and so what to do. */
export function liveGatewayAt(baseUrl: string, what: string): string {
  return `the gateway at ${baseUrl} runs in live mode: ${what}`;
}

type Where = Pick<Config, 'mode' | 'baseUrl' | 'dataDir' | 'operatorToken'>;

/** Nothing listens at ACG_BASE_URL, said with what to do. */
export function noGatewayAt(config: Pick<Config, 'baseUrl'>): string {
  return `no gateway answers at ${config.baseUrl}: start it first (npm start), or set ACG_BASE_URL (or PORT) to where it runs`;
}

/** A gateway answers at ACG_BASE_URL, but the command holds no operator credential for it. */
export function noCredentialFor(config: Where): string {
  if (config.mode === 'live') {
    return `a gateway answers at ${config.baseUrl}, but ACG_OPERATOR_TOKEN is not set: set it to the operator credential (the one whose SHA-256 the gateway has in ACG_OPERATOR_TOKEN_SHA256)`;
  }
  return (
    `a gateway answers at ${config.baseUrl}, but there is no operator credential for it here: ${operatorTokenFile(config.dataDir)} does not exist. ` +
    "A dev gateway writes it into its own ACG_DATA_DIR: run this in the directory the gateway was started from, or set ACG_DATA_DIR to the gateway's data directory (or ACG_OPERATOR_TOKEN to its credential)"
  );
}

/** The gateway refused the command: a credential it does not know (another data directory's), or a problem of the request. */
export function describeRefusal(config: Where, answer: GatewayAnswer): string {
  if (answer.status !== 401) return `refused: ${describeProblem(answer)}`;
  const source = config.operatorToken ? 'ACG_OPERATOR_TOKEN' : operatorTokenFile(config.dataDir);
  // Live mode has no data directory's credential: only ACG_OPERATOR_TOKEN and the hash the gateway runs with (found from outside).
  if (config.mode === 'live') {
    return (
      `the gateway at ${config.baseUrl} does not accept the operator credential from ${source}: its ACG_OPERATOR_TOKEN_SHA256 is another's. ` +
      "Set ACG_OPERATOR_TOKEN to the credential whose SHA-256 the gateway runs with"
    );
  }
  return (
    `the gateway at ${config.baseUrl} does not accept the operator credential from ${source}: it was started with another ` +
    "ACG_DATA_DIR (or another ACG_OPERATOR_TOKEN_SHA256). Run this with the gateway's ACG_DATA_DIR, or ACG_OPERATOR_TOKEN set to its credential"
  );
}

/**
 * The operator credential a command presents to the gateway at the base URL, or undefined when it holds none for it
 * (`missingCredential` says why): ACG_OPERATOR_TOKEN, or in dev mode the credential a dev gateway wrote into
 * ACG_DATA_DIR. That one is a dev gateway's, and is sent only to a gateway that says it runs in dev mode (its /healthz):
 * never to a live one, which may be another machine's and takes only ACG_OPERATOR_TOKEN, nor to whatever answers
 * without saying (found from outside: the dev file was presented to a live gateway, whose 401 was then blamed on
 * another ACG_DATA_DIR).
 */
export async function operatorCredentialFor(config: Where): Promise<string | undefined> {
  if (config.operatorToken) return config.operatorToken;
  if (config.mode !== 'dev' || (await gatewayMode(config.baseUrl)) !== 'dev') return undefined;
  return devOperatorToken(config.dataDir);
}

/**
 * Why a command that needs a running gateway holds no operator credential for it: nothing runs there; it runs in live
 * mode; what answers does not say it is a dev gateway, so the data directory's credential was not sent; or it runs
 * but the credential is elsewhere.
 */
export async function missingCredential(config: Where): Promise<string> {
  const mode = config.mode === 'dev' ? await gatewayMode(config.baseUrl) : undefined;
  if (mode === 'live') {
    return liveGatewayAt(config.baseUrl, 'run this with ACG_MODE=live and ACG_OPERATOR_TOKEN set to its operator credential');
  }
  // A gateway that named its mode answered /healthz already: asked again only when none did.
  if (mode === undefined) {
    let answers: boolean;
    try {
      answers = await gatewayAnswers(config.baseUrl);
    } catch (error) {
      return (error as Error).message;
    }
    if (!answers) return noGatewayAt(config);
  }
  if (config.mode === 'dev' && mode === undefined && devOperatorToken(config.dataDir) !== undefined) {
    return (
      `${config.baseUrl} answers, but does not say it is a dev gateway (its /healthz names no mode: it is not the gateway, or not this ` +
      `release of it), and ${operatorTokenFile(config.dataDir)} is a dev gateway's credential, sent to no other: set ACG_BASE_URL (or PORT) ` +
      "to where the dev gateway runs, or ACG_OPERATOR_TOKEN to the gateway's operator credential"
    );
  }
  // It says so now, but did not within PROBE_TIMEOUT_MS a moment ago, so the credential, which is here, was not sent.
  if (config.mode === 'dev' && mode === 'dev' && devOperatorToken(config.dataDir) !== undefined) {
    return `the gateway at ${config.baseUrl} did not say within ${PROBE_TIMEOUT_MS / 1000} s that it runs in dev mode (its /healthz): run this again`;
  }
  return noCredentialFor(config);
}

/**
 * Dev tokens are signed with the keys a dev gateway made in its ACG_DATA_DIR (`file`). Without them here,
 * minting would make new keys that no running gateway trusts (and a data directory nobody asked for): what
 * was found instead, and what to do.
 */
export async function missingDevIssuerKeys(config: Pick<Config, 'baseUrl'>, file: string): Promise<string> {
  const running = await gatewayAnswers(config.baseUrl).catch(() => false);
  if (running) {
    return (
      `a gateway answers at ${config.baseUrl}, but its dev issuer keys are not here: ${file} does not exist. A dev gateway makes them ` +
      "in its own ACG_DATA_DIR: run this in the directory the gateway was started from, or set ACG_DATA_DIR to the gateway's data directory"
    );
  }
  return `no gateway answers at ${config.baseUrl}, and ${file} does not exist: start the gateway first (npm start), which makes the dev issuers' keys, then run this in its directory`;
}
