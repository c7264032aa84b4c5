// Configuration comes from environment variables only, is validated once at start-up, and reports
// every problem at once with one readable line each (so an operator fixes them in one pass).
import { X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import path from 'node:path';
import { CREDENTIAL_FACTS_MS_DEFAULT, CREDENTIAL_FACTS_MS_MAX } from './credential-facts.ts';
import { DEFAULT_DATABASE_TIMEOUTS, DEFAULT_POOL_SIZE_MAX, type DatabaseTimeouts } from './db/database.ts';

export type Mode = 'dev' | 'live';

export interface IssuerConfig {
  issuer: string;
  /** JWKS URL; when absent it is discovered from `${issuer}/.well-known/openid-configuration`. */
  jwksUrl?: string;
  audience: string;
}

export interface Config {
  mode: Mode;
  host: string;
  port: number;
  baseUrl: string;
  databaseUrl?: string;
  dataDir: string;
  /** Bounds on waits for PostgreSQL, how patiently `acg serve` retries a database that is down at start-up, and its pool's size. */
  db: DatabaseTimeouts & { startRetryMaxMs: number; poolSizeMax: number };
  logLevel: string;
  bodyLimitBytes: number;
  /** How long a client may take to send a whole request, headers and body; past it 408 and the connection is closed. */
  requestTimeoutMs: number;
  idempotencyRetentionS: number;
  idempotencyLeaseS: number;
  /** How long a revocable credential fact is kept, and how long a revocation waits before it answers (credential-facts.ts). */
  credentialFactsMs: number;
  /** `acg serve` compiles every route schema in its idle time once ready (lazy-schemas.ts), or leaves each to its first request. */
  precompileSchemas: boolean;
  rateLimit: { windowS: number; perAddress: number; perPrincipal: number };
  /** Live signing key: a private ES256 JWK (JSON) or PKCS#8 PEM. Dev mode generates and persists one. */
  signingKey?: string;
  humanIssuer?: IssuerConfig;
  agentIssuer?: IssuerConfig;
  /** Name of the claim on an agent-identity JWT that carries its owner's verified email. */
  agentOwnerEmailClaim: string;
  /** HMAC key for merchant API key hashes; dev mode generates one. */
  apiKeyPepper?: string;
  /** AES-256-GCM key (base64, 32 bytes) sealing stored secrets (webhook secrets, mail passwords); dev mode generates one. */
  secretBoxKey?: string;
  /**
   * `devZone`: dev mode without ACG_DOH_RESOLVER_URL asks the gateway's own dev DNS zone (src/sandbox/). `cleartext`:
   * plain HTTP is allowed to the resolver, as the start-up check accepts it (dev mode, or a loopback host).
   */
  doh: { resolverUrl: string; timeoutMs: number; caFile?: string; devZone: boolean; cleartext: boolean };
  /** SHA-256 (hex) of the operator credential the gateway accepts; dev mode generates a credential instead. */
  operatorTokenSha256?: string;
  /** SHA-256 (hex) of the credential `/metrics` requires; in live mode without it `/metrics` answers 401 to everyone. */
  metricsTokenSha256?: string;
  /** The operator credential itself, for CLI commands that call a running gateway (the gateway ignores it). */
  operatorToken?: string;
  /** An owner's session token, for CLI commands that act as that owner (`acg agent mandate`; the gateway ignores it). */
  ownerToken?: string;
  /** Extra CA certificates (PEM file) trusted for outbound HTTPS: webhooks to a private PKI, and tests. */
  outboundCaFile?: string;
  webhookPollIntervalMs: number;
  /** The built-in metered services (POST /v1/services/execute). */
  services: ServicesConfig;
  /** Test-only relaxations; refused in live mode. */
  allowPrivateNetworkTargets: boolean;
  /** The payment-approval provider that top-ups go through. */
  payments: PaymentsConfig;
}

export interface PaymentsConfig {
  /** `local`: the owner approves on a gateway page; `stripe`: Stripe Checkout; `none`: no top-ups. */
  provider: 'local' | 'stripe' | 'none';
  stripe?: { secretKey: string; webhookSecret: string; apiUrl: string };
}

export interface ServicesConfig {
  /** Budget of one execution's action; past it the hold is released and the caller told upstream_timeout. */
  executeTimeoutMs: number;
  github: { baseUrl: string; token?: string; timeoutMs: number; etagCacheEntries: number };
  mail: { connectTimeoutMs: number; socketTimeoutMs: number; operationTimeoutMs: number; messageBytesMax: number; bodyCharsMax: number };
}

export interface EnvVarDoc {
  name: string;
  default: string;
  meaning: string;
  /** A whole-number setting's least and greatest values: start-up refuses one outside them, naming both. */
  range?: readonly [min: number, max: number];
}

/** What a variable means, with its range when it has one: the configuration table's and `acg --help`'s words. */
export function variableMeaning(variable: EnvVarDoc): string {
  if (variable.range === undefined) return variable.meaning;
  const [min, max] = variable.range;
  return `${variable.meaning}; a whole number from ${min} to ${max}`;
}

/** Every variable the gateway reads; the README's configuration table is this list. */
export const ENV_VARS: EnvVarDoc[] = [
  { name: 'ACG_MODE', default: 'dev', meaning: '`dev` (generates what it needs) or `live` (nothing generated; missing pieces answer 503; refuses at start cleartext http URLs other than to loopback, and Stripe test-mode keys)' },
  { name: 'HOST', default: '127.0.0.1', meaning: 'address to listen on' },
  { name: 'PORT', default: '8080', range: [0, 65535], meaning: 'TCP port to listen on (0 picks a free one)' },
  { name: 'ACG_BASE_URL', default: 'http://$HOST:$PORT (127.0.0.1 when HOST is 0.0.0.0, [::1] when ::)', meaning: 'public base URL; issuer of our tokens and the origin of the consent page (required in live mode); kept in one form: scheme and host in lower case, no default port, no trailing slash; at most 1,000 characters. In live mode an https base URL makes every answer carry `Strict-Transport-Security`; over plain http (loopback only) the consent page of a live gateway remembers no consent, since a cookie over http is shared with every port of the host (dev mode remembers them, its own convenience: a server on another port of 127.0.0.1 that the owner opens in the same browser receives the cookie, and can take an owner token without a click, though never approve, which takes a sign-in of the person)' },
  { name: 'DATABASE_URL', default: '(unset: embedded PGlite)', meaning: 'PostgreSQL connection string, e.g. postgres://acg@db.internal:5432/acg, or for a Unix socket postgres://acg@localhost/acg?host=/var/run/postgresql; when set the gateway uses PostgreSQL' },
  { name: 'ACG_DATA_DIR', default: './.acg-data', meaning: 'directory for the embedded database and dev-mode keys; made 0700 when it does not exist (an existing one is left as it is; what the gateway writes in it is for its owner alone: files 0600, its pglite directory kept 0700): it must belong to the user running the gateway' },
  { name: 'ACG_DB_STATEMENT_TIMEOUT_MS', default: String(DEFAULT_DATABASE_TIMEOUTS.statementTimeoutMs), range: [100, 600_000], meaning: 'longest a PostgreSQL statement may run; past it (or 1 s later if the server is silent) the request answers 503 storage_unavailable' },
  { name: 'ACG_DB_LOCK_TIMEOUT_MS', default: String(DEFAULT_DATABASE_TIMEOUTS.lockTimeoutMs), range: [100, 600_000], meaning: 'longest a PostgreSQL statement may wait for a lock (at most the statement timeout); past it 503 storage_unavailable' },
  { name: 'ACG_DB_CONNECT_TIMEOUT_MS', default: String(DEFAULT_DATABASE_TIMEOUTS.connectTimeoutMs), range: [100, 60_000], meaning: 'longest wait for a PostgreSQL connection (a new one, or a free one from the pool); past it 503 storage_unavailable' },
  { name: 'ACG_DB_POOL_SIZE_MAX', default: String(DEFAULT_POOL_SIZE_MAX), range: [8, 1000], meaning: 'PostgreSQL connections one instance opens at most; N instances need N × this below the server\'s max_connections' },
  { name: 'ACG_DB_START_RETRY_MAX_MS', default: '10000', range: [250, 300_000], meaning: 'while the database is unreachable at start-up, `acg serve` retries without end, the wait doubling from 250 ms up to this, each drawn between half and all of it' },
  { name: 'LOG_LEVEL', default: 'info', meaning: 'pino log level (`fatal`…`trace`, `silent`)' },
  { name: 'ACG_PRECOMPILE_SCHEMAS', default: '1', meaning: "once ready, `acg serve` compiles every route's request validators and response serializers in its idle time (about 4 s of one core), so that no route's first request stalls the others while its schemas compile; 0 leaves each to its route's first request" },
  { name: 'ACG_BODY_LIMIT_BYTES', default: '262144', range: [1024, 16 * 1024 * 1024], meaning: 'largest accepted JSON or form body; larger bodies get 413' },
  { name: 'ACG_REQUEST_TIMEOUT_MS', default: '30000', range: [1000, 600_000], meaning: 'longest a client may take to send a whole request (headers and body); past it 408 request_timeout and the connection is closed' },
  { name: 'ACG_IDEMPOTENCY_RETENTION_S', default: '86400', range: [86_400, 30 * 86_400], meaning: 'how long an Idempotency-Key record is kept' },
  { name: 'ACG_IDEMPOTENCY_LEASE_S', default: '60', range: [5, 3600], meaning: 'how long an unfinished request owns its key before a retry may take over' },
  { name: 'ACG_CREDENTIAL_FACTS_MS', default: String(CREDENTIAL_FACTS_MS_DEFAULT), range: [0, CREDENTIAL_FACTS_MS_MAX], meaning: "how long an instance keeps what a credential's check read that can be revoked (an identity's agent and its owner's email, a merchant key, the access-token deny-list); a revocation answers only once the longest lifetime any instance on the database announced has passed, so it holds on every instance from the next request. 0 reads on every request" },
  { name: 'ACG_RATE_LIMIT_WINDOW_S', default: '60', range: [1, 3600], meaning: 'rate-limit window length in seconds' },
  { name: 'ACG_RATE_LIMIT_PER_ADDRESS', default: '1200', range: [1, 10_000_000], meaning: 'requests per window per client address' },
  { name: 'ACG_RATE_LIMIT_PER_PRINCIPAL', default: '600', range: [1, 10_000_000], meaning: 'requests per window per authenticated account (a merchant\'s API keys share one, as do an owner\'s session and the OAuth tokens it granted)' },
  { name: 'ACG_SIGNING_KEY', default: '(dev: generated)', meaning: 'ES256 private key (JWK JSON or PKCS#8 PEM) used to sign tokens and vouchers; required in live mode (or a key made by `acg keys rotate`). Make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` (PKCS#8 PEM; `openssl ecparam -genkey` writes SEC1, which is refused: convert it with `openssl pkcs8 -topk8 -nocrypt`)' },
  { name: 'ACG_HUMAN_ISSUER', default: '(dev: built-in)', meaning: 'issuer URL of the human identity provider, exactly as its tokens write `iss` (a terminating slash included); no query or fragment' },
  { name: 'ACG_HUMAN_JWKS_URL', default: '(discovered)', meaning: 'JWKS URL of the human identity provider (default: OIDC discovery)' },
  { name: 'ACG_HUMAN_AUDIENCE', default: 'agent-credit-gateway', meaning: 'audience required on human session JWTs' },
  { name: 'ACG_AGENT_ISSUER', default: '(dev: built-in)', meaning: 'issuer URL of the agent identity provider, exactly as its tokens write `iss` (a terminating slash included); no query or fragment' },
  { name: 'ACG_AGENT_JWKS_URL', default: '(discovered)', meaning: 'JWKS URL of the agent identity provider' },
  { name: 'ACG_AGENT_AUDIENCE', default: 'agent-credit-gateway', meaning: 'audience required on agent identity JWTs' },
  { name: 'ACG_AGENT_OWNER_EMAIL_CLAIM', default: 'owner_email', meaning: "claim on an agent identity JWT holding its owner's verified email" },
  { name: 'ACG_API_KEY_PEPPER', default: '(dev: generated)', meaning: 'secret (≥ 32 chars) keying the hashes of merchant API keys; without it live mode cannot issue API keys. The same on every instance; changing it invalidates every API key issued' },
  { name: 'ACG_SECRET_BOX_KEY', default: '(dev: generated)', meaning: 'base64 of 32 random bytes; seals stored secrets (webhook signing secrets, mail passwords, keys made by `acg keys rotate`); required in live mode for webhooks, mail and key rotation' },
  { name: 'ACG_DOH_RESOLVER_URL', default: '(dev: the dev zone; live: https://cloudflare-dns.com/dns-query)', meaning: "DNS-over-HTTPS (RFC 8484) resolver used to verify merchant domains (https; plain http in dev mode or to a loopback host: a resolver or proxy beside the gateway); dev mode's default is the gateway's own dev zone (`acg dev dns publish`)" },
  { name: 'ACG_DOH_TIMEOUT_MS', default: '5000', range: [100, 60_000], meaning: 'time budget of one DNS-over-HTTPS query' },
  { name: 'ACG_DOH_CA_FILE', default: '(system CAs)', meaning: "extra CA certificate (PEM file) trusted for the resolver's HTTPS" },
  { name: 'ACG_OUTBOUND_CA_FILE', default: '(system CAs)', meaning: "extra CA certificates (PEM file) trusted for outbound HTTPS: webhook deliveries and github-public's API (ACG_GITHUB_API_URL); identity providers' discovery and keys use Node's trust store, which NODE_EXTRA_CA_CERTS extends" },
  { name: 'ACG_WEBHOOK_POLL_INTERVAL_MS', default: '1000', range: [50, 60_000], meaning: 'how often each instance looks for due webhook deliveries' },
  { name: 'ACG_EXECUTE_TIMEOUT_MS', default: '40000', range: [1000, 600_000], meaning: "budget of one service action in POST /v1/services/execute (at least the connectors' own budgets, below the idempotency lease)" },
  { name: 'ACG_GITHUB_API_URL', default: 'https://api.github.com', meaning: 'base URL of the GitHub REST API used by `github-public` (e.g. a GitHub Enterprise `https://host/api/v3`)' },
  { name: 'ACG_GITHUB_TOKEN', default: '(none)', meaning: 'optional GitHub token for `github-public`; raises the rate limit from 60 to 5,000 requests an hour (the service still serves public repositories only: one the token sees privately answers 404)' },
  { name: 'ACG_GITHUB_TIMEOUT_MS', default: '10000', range: [100, 300_000], meaning: 'time budget of one GitHub request (connect, headers and body)' },
  { name: 'ACG_GITHUB_ETAG_CACHE_ENTRIES', default: '500', range: [0, 100_000], meaning: 'repositories remembered for conditional requests (ETag); 0 disables them' },
  { name: 'ACG_MAIL_CONNECT_TIMEOUT_MS', default: '10000', range: [100, 300_000], meaning: "time budget to connect to an agent's IMAP server and receive its greeting" },
  { name: 'ACG_MAIL_SOCKET_TIMEOUT_MS', default: '20000', range: [100, 300_000], meaning: 'longest silence tolerated on an open IMAP connection' },
  { name: 'ACG_MAIL_OPERATION_TIMEOUT_MS', default: '30000', range: [100, 300_000], meaning: 'time budget of one whole mail action: connect, log in, work, log out' },
  { name: 'ACG_MAIL_MESSAGE_BYTES_MAX', default: '5242880', range: [1024, 50 * 1024 * 1024], meaning: '`messages.get` reads at most this many bytes of a message (larger ones are truncated)' },
  { name: 'ACG_MAIL_BODY_CHARS_MAX', default: '262144', range: [1024, 4 * 1024 * 1024], meaning: '`messages.get` returns at most this many characters of text and of html each' },
  { name: 'ACG_PAYMENT_PROVIDER', default: 'dev: local; live: none', meaning: 'payment-approval provider for top-ups: `local` (the owner approves on a gateway page), `stripe` (Stripe Checkout) or `none`' },
  { name: 'ACG_STRIPE_SECRET_KEY', default: '(none)', meaning: 'Stripe secret key (`sk_live_…`, `sk_test_…` or a restricted `rk_…`); required with ACG_PAYMENT_PROVIDER=stripe' },
  { name: 'ACG_STRIPE_WEBHOOK_SECRET', default: '(none)', meaning: 'signing secret (`whsec_…`) of the Stripe webhook endpoint `{base_url}/v1/payments/stripe/webhook`; required with stripe' },
  { name: 'ACG_STRIPE_API_URL', default: 'https://api.stripe.com', meaning: 'base URL of the Stripe API (tests point it at a local server)' },
  { name: 'ACG_METRICS_TOKEN_SHA256', default: '(none)', meaning: 'hex SHA-256 of the credential a Prometheus scraper presents to `/metrics` (`Authorization: Bearer …`); when set it is required; live mode without it answers 401 to every scrape, dev mode without it serves `/metrics` openly' },
  { name: 'ACG_OPERATOR_TOKEN_SHA256', default: '(dev: generated)', meaning: 'hex SHA-256 of the operator credential accepted by operator routes (`acg credit grant` on a running gateway); dev mode generates one into ACG_DATA_DIR/operator-token' },
  { name: 'ACG_OPERATOR_TOKEN', default: '(dev: read from ACG_DATA_DIR)', meaning: 'the operator credential itself, for CLI commands that call a running gateway; the gateway itself ignores it' },
  { name: 'ACG_OWNER_TOKEN', default: '(unset)', meaning: "an owner's session token (a human session JWT, or an OAuth access token with svc:owner) for CLI commands that act as the owner (`acg agent mandate`); the gateway itself ignores it" },
  { name: 'ACG_ALLOW_PRIVATE_NETWORK_TARGETS', default: 'false', meaning: "TEST ONLY: lets outbound calls reach loopback/private addresses; refused in live mode. It changes no URL rule: a webhook URL must still be https on port 443 with a public DNS name (a merchant's under its verified domain; an owner's any public name), resolved by the system's DNS, not the dev zone, so a merchant or owner on a laptop receives webhooks through a tunnel with a public https name, or reads the events feeds instead (`GET /v1/owner/events`; a merchant's events and revocations feeds, packages/merchant/README.md)" },
];

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

/** An integer setting, within the range its ENV_VARS entry states (which the table and `acg --help` show). */
function integer(env: Env, name: string, fallback: number, problems: string[]): number {
  const range = ENV_VARS.find((variable) => variable.name === name)?.range;
  if (range === undefined) throw new Error(`${name} has no range in ENV_VARS`);
  const [min, max] = range;
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  // One line for every value outside the range, a number or not, as `acg --help` states the range (found from outside:
  // PORT=-1 and PORT=abc were told in two wordings).
  const outOfRange = `${name} must be a whole number from ${min} to ${max}, got "${raw}"`;
  if (!/^-?[0-9]+$/.test(raw)) {
    problems.push(outOfRange);
    return fallback;
  }
  // Compared exactly, and named as written: a negative one, or one past 2^53 (which Number would round), is out of range too.
  const exact = BigInt(raw);
  if (exact < BigInt(min) || exact > BigInt(max)) {
    problems.push(outOfRange);
    return fallback;
  }
  return Number(exact);
}

/** A yes-or-no setting: 1 or true, 0 or false; anything else is a problem named at start. */
function flag(env: Env, name: string, fallback: boolean, problems: string[]): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw === '1' || raw === 'true') return true;
  if (raw === '0' || raw === 'false') return false;
  problems.push(`${name} must be 0 or 1, got "${raw}" (false and true are taken too)`);
  return fallback;
}

/** A URL setting as a message may quote it: any `user:password@` left out (a password is a secret), the rest as given. */
function shownUrl(raw: string): string {
  return raw.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/?#]*@/, '$1');
}

/**
 * How a URL setting is kept: a `base` the gateway joins paths to (an API's root) loses its trailing slashes; an
 * `exact` one is kept as written: an issuer, which tokens name and which OIDC compares character for character
 * (Auth0's ends in `/`: stripped, every token of it was refused, found from outside), or an endpoint fetched as it is.
 */
type UrlForm = 'base' | 'exact';

function url(env: Env, name: string, problems: string[], form: UrlForm = 'base'): string | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  try {
    const parsed = new URL(raw);
    if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') throw new Error('scheme');
    // fetch refuses a URL with credentials in it, so each call would fail later, one by one (found from outside: a
    // resolver URL with a user and password started). Named without the password, which is a secret.
    if (parsed.username !== '' || parsed.password !== '') {
      problems.push(`${name} must not carry a user name or password (user:password@): the gateway sends no credentials in a URL; got "${shownUrl(raw)}" with them`);
      return undefined;
    }
    return form === 'exact' ? raw : raw.replace(/\/+$/, '');
  } catch {
    problems.push(`${name} must be an http(s) URL, got "${shownUrl(raw)}"`);
    return undefined;
  }
}

/**
 * A connection URL as node-postgres reads it: it parses it with WHATWG `URL` (pg-connection-string), once more with a
 * placeholder host when the host is left out (a socket given as a `host` parameter), after encoding spaces. Undefined
 * when it cannot; checked here so a bad one is a configuration problem at start, not a crash at the first connection.
 * `hostless`: the URL names no host (the driver's default then, or its `host` parameter).
 */
function parseConnectionUrl(value: string): { url: URL; hostless: boolean } | undefined {
  const encoded = /\s|%(?![0-9a-f]{2})/i.test(value) ? encodeURI(value).replace(/%25([0-9a-f]{2})/gi, '%$1') : value;
  for (const [candidate, hostless] of [[encoded, false], [encoded.replace('@/', '@placeholder/'), true]] as const) {
    try {
      const url = new URL(candidate, 'postgres://base');
      return { url, hostless: hostless || url.hostname === '' };
    } catch {
      // try the next form
    }
  }
  return undefined;
}

/**
 * The files DATABASE_URL names, each must be readable, and sslrootcert a PEM file of CA certificates: the driver reads
 * them as it opens a connection, so a mistyped path was a crash with the driver's stack at start (found with the TLS
 * test, test/platform/db/postgres-tls.test.ts: ENOENT from inside pg-connection-string).
 */
function connectionUrlFileProblems(url: URL, problems: string[]): void {
  for (const name of ['sslrootcert', 'sslcert', 'sslkey'] as const) {
    const file = url.searchParams.get(name);
    if (file === null) continue;
    const problem = name === 'sslrootcert' ? caFileProblem(file) : readableFile(file).problem;
    if (problem) problems.push(`DATABASE_URL's ${name} must name a ${name === 'sslrootcert' ? 'PEM file of CA certificates' : 'readable file'}; ${file} ${problem}`);
  }
}

/**
 * sslmode values under which node-postgres connects over TLS or not at all: libpq's require, verify-ca and verify-full
 * (pg-connection-string 2 takes require and verify-ca as verify-full), and its own no-verify. Not disable, allow or
 * prefer: libpq settles for cleartext under allow and prefer, and pg-connection-string 3 adopts libpq's meanings.
 */
const TLS_REQUIRING_SSLMODES: ReadonlySet<string> = new Set(['require', 'verify-ca', 'verify-full', 'no-verify']);

/**
 * Where a DATABASE_URL connects, for a person to read: `host:port/database`, or the Unix socket's directory and the
 * database. Never the URL's user name or password; undefined when it cannot be read.
 */
export function databaseAddress(databaseUrl: string): string | undefined {
  const parsed = parseConnectionUrl(databaseUrl);
  if (!parsed) return undefined;
  const database = decodeURIComponent(parsed.url.pathname.replace(/^\//, ''));
  const host = connectionHost(parsed);
  if (host.startsWith('/')) return `the Unix socket in ${host}${database ? `, database ${database}` : ''}`;
  if (host === '') return undefined;
  return `${isIP(host) === 6 ? `[${host}]` : host}${parsed.url.port ? `:${parsed.url.port}` : ''}/${database}`;
}

/**
 * The host a parsed DATABASE_URL connects to, as the driver reads it: its `host` parameter, which stands for the URL's
 * host, else that host (an IPv6 one without brackets); a path is a Unix socket's directory, '' none (the default).
 */
function connectionHost(parsed: { url: URL; hostless: boolean }): string {
  return parsed.url.searchParams.get('host') ?? (parsed.hostless ? '' : decodeURIComponent(parsed.url.hostname).replace(/^\[(.+)\]$/, '$1'));
}

/**
 * The host a DATABASE_URL reaches over a network without requiring TLS, or undefined: when the host is a loopback one
 * or a Unix socket (a path), or the URL requires TLS (an sslmode above, or `ssl=true` with no sslmode). Never the
 * URL's user name or password.
 */
export function databaseHostWithoutTls(databaseUrl: string): string | undefined {
  const parsed = parseConnectionUrl(databaseUrl);
  if (!parsed) return undefined;
  const params = parsed.url.searchParams;
  const sslmode = params.get('sslmode');
  const tlsRequired = sslmode === null ? ['true', '1'].includes(params.get('ssl') ?? '') : TLS_REQUIRING_SSLMODES.has(sslmode);
  if (tlsRequired) return undefined;
  // A path (or none) is a Unix socket.
  const host = connectionHost(parsed);
  if (host === '' || host.startsWith('/')) return undefined;
  return isLoopbackHost(isIP(host) === 6 ? new URL(`http://[${host}]`).hostname : host.toLowerCase()) ? undefined : host;
}

/**
 * ACG_BASE_URL in one form: the scheme and host in lower case, no default port, no trailing slash. It is the
 * issuer of every token we sign and x402's trust anchor, which clients compare as written after normalising it
 * themselves (the x402 package lower-cases it and drops `:443`): `http://LocalHost:8080` failed every payment.
 */
const BASE_URL_CHARS_MAX = 1000;

function canonicalBaseUrl(value: string | undefined, problems: string[]): string | undefined {
  if (value === undefined) return undefined;
  const canonical = baseUrlInOneForm(value);
  if (canonical === undefined) problems.push('ACG_BASE_URL must be a scheme, a host, an optional port and an optional path: no credentials, query or fragment');
  // A pending OAuth request names the base URL three times in the consent page's URL (src/oauth/limits.ts
  // REQUEST_ID_CHARS_MAX): beyond this length the longest request the other limits allow could not be carried.
  else if (canonical.length > BASE_URL_CHARS_MAX) problems.push(`ACG_BASE_URL must be at most ${BASE_URL_CHARS_MAX} characters, got ${canonical.length}`);
  return canonical;
}

/**
 * A base URL in the one form ACG_BASE_URL is kept in (scheme and host in lower case, no default port, no trailing
 * slash), or undefined when it is no URL or has credentials, a query or a fragment. Whoever compares a stated base
 * URL with ours (x402's `extra.authority`) compares this form, as the x402 package's clients do.
 */
export function baseUrlInOneForm(value: string): string | undefined {
  if (!URL.canParse(value)) return undefined;
  const parsed = new URL(value);
  if (parsed.search !== '' || parsed.hash !== '' || parsed.username !== '' || parsed.password !== '') return undefined;
  return `${parsed.origin}${parsed.pathname}`.replace(/\/+$/, '');
}

/** Loopback hosts: a cleartext URL to one never crosses a network. */
function isLoopbackHost(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname);
}

/**
 * The URL settings live mode sends credentials, tokens or trust over (our own base URL, the identity providers
 * and their keys, Stripe, GitHub with the operator's token, the DNS resolver that proves domains): each must be
 * https, except to a loopback host (a proxy or a test on the same machine). RFC 8414 §2, RFC 6749 §3.1.
 */
const LIVE_HTTPS_URLS = [
  'ACG_BASE_URL', 'ACG_HUMAN_ISSUER', 'ACG_HUMAN_JWKS_URL', 'ACG_AGENT_ISSUER', 'ACG_AGENT_JWKS_URL',
  'ACG_STRIPE_API_URL', 'ACG_GITHUB_API_URL', 'ACG_DOH_RESOLVER_URL',
] as const;

/** Whether live mode refuses this URL as cleartext: http to anything but a loopback host. */
export function cleartextOffLoopback(raw: string): boolean {
  if (!URL.canParse(raw)) return false;
  const parsed = new URL(raw);
  return parsed.protocol === 'http:' && !isLoopbackHost(parsed.hostname);
}

function cleartextInLive(env: Env, problems: string[]): void {
  for (const name of LIVE_HTTPS_URLS) {
    const raw = env[name];
    if (raw && cleartextOffLoopback(raw)) problems.push(`${name} must be an https URL in live mode (http only to a loopback host), got "${shownUrl(raw)}"`);
  }
}

function issuer(env: Env, mode: Mode, prefix: 'HUMAN' | 'AGENT', problems: string[]): IssuerConfig | undefined {
  const iss = url(env, `ACG_${prefix}_ISSUER`, problems, 'exact');
  if (!iss) return undefined;
  // An issuer has no query or fragment (RFC 8414 §2, OIDC Discovery §3): with one, no token's iss could match it.
  // Read on the text, since an empty one ("…/human?" or "…#") is no `search` or `hash` of the parsed URL.
  if (iss.includes('?') || iss.includes('#')) problems.push(`ACG_${prefix}_ISSUER must be an issuer URL with no query or fragment (RFC 8414 §2), got "${shownUrl(iss)}"`);
  const jwksUrl = url(env, `ACG_${prefix}_JWKS_URL`, problems, 'exact');
  // A gateway's dev issuers (ours or another's) sign a token for any email or subject, without a password: trusted
  // in live mode, they would let anyone sign in as any owner or agent (found from outside, 2026-12-04).
  if (mode === 'live') {
    for (const [name, value] of [[`ACG_${prefix}_ISSUER`, iss], [`ACG_${prefix}_JWKS_URL`, jwksUrl]] as const) {
      if (value && namesDevRoute(new URL(value).pathname)) {
        problems.push(`${name} points at a gateway's dev routes (/dev/…, such as its dev issuers, which sign in anyone without a password); live mode needs a real identity provider`);
      }
    }
  }
  return { issuer: iss, jwksUrl, audience: env[`ACG_${prefix}_AUDIENCE`] || 'agent-credit-gateway' };
}

function paymentsConfig(env: Env, mode: Mode, problems: string[]): PaymentsConfig {
  const provider = env.ACG_PAYMENT_PROVIDER || (mode === 'dev' ? 'local' : 'none');
  if (provider !== 'local' && provider !== 'stripe' && provider !== 'none') {
    problems.push(`ACG_PAYMENT_PROVIDER must be "local", "stripe" or "none", got "${provider}"`);
    return { provider: 'none' };
  }
  if (provider !== 'stripe') return { provider };
  const secretKey = env.ACG_STRIPE_SECRET_KEY ?? '';
  const webhookSecret = env.ACG_STRIPE_WEBHOOK_SECRET ?? '';
  if (!/^(sk|rk)_(live|test)_[A-Za-z0-9]+$/.test(secretKey)) problems.push('ACG_STRIPE_SECRET_KEY must be a Stripe secret key (sk_live_…, sk_test_… or rk_…) when ACG_PAYMENT_PROVIDER=stripe');
  // A test-mode key takes test payments (card 4242…), which move no money: in live mode they would become spendable credit.
  else if (mode === 'live' && /^(sk|rk)_test_/.test(secretKey)) problems.push('ACG_STRIPE_SECRET_KEY is a test-mode key (sk_test_…/rk_test_…): its payments move no money, so live mode needs a live key (sk_live_…/rk_live_…)');
  if (!/^whsec_[A-Za-z0-9+/=_-]+$/.test(webhookSecret)) problems.push('ACG_STRIPE_WEBHOOK_SECRET must be the endpoint signing secret (whsec_…) when ACG_PAYMENT_PROVIDER=stripe');
  return { provider, stripe: { secretKey, webhookSecret, apiUrl: url(env, 'ACG_STRIPE_API_URL', problems) ?? 'https://api.stripe.com' } };
}

function servicesConfig(env: Env, problems: string[]): ServicesConfig {
  return {
    executeTimeoutMs: integer(env, 'ACG_EXECUTE_TIMEOUT_MS', 40_000, problems),
    github: {
      baseUrl: url(env, 'ACG_GITHUB_API_URL', problems) ?? 'https://api.github.com',
      token: env.ACG_GITHUB_TOKEN || undefined,
      timeoutMs: integer(env, 'ACG_GITHUB_TIMEOUT_MS', 10_000, problems),
      etagCacheEntries: integer(env, 'ACG_GITHUB_ETAG_CACHE_ENTRIES', 500, problems),
    },
    mail: {
      connectTimeoutMs: integer(env, 'ACG_MAIL_CONNECT_TIMEOUT_MS', 10_000, problems),
      socketTimeoutMs: integer(env, 'ACG_MAIL_SOCKET_TIMEOUT_MS', 20_000, problems),
      operationTimeoutMs: integer(env, 'ACG_MAIL_OPERATION_TIMEOUT_MS', 30_000, problems),
      messageBytesMax: integer(env, 'ACG_MAIL_MESSAGE_BYTES_MAX', 5 * 1024 * 1024, problems),
      bodyCharsMax: integer(env, 'ACG_MAIL_BODY_CHARS_MAX', 256 * 1024, problems),
    },
  };
}

/** Where the gateway serves its dev DNS zone (dev mode only); the default resolver of dev mode. */
export const DEV_ZONE_PATH = '/dev/dns-query';

/**
 * Whether a URL path reaches a gateway's dev routes (`/dev/…`) as its router reads it: percent-decoded, repeated
 * slashes and case not telling it apart (`/%64ev/dns-query` and `//DEV/dns-query` included). A path that does
 * not decode is taken as one.
 */
function namesDevRoute(pathname: string): boolean {
  let decoded: string;
  try {
    decoded = decodeURIComponent(pathname);
  } catch {
    return true;
  }
  const normal = decoded.replace(/\/+/g, '/').toLowerCase();
  return normal === '/dev' || normal.startsWith('/dev/');
}

function dohConfig(env: Env, mode: Mode, baseUrl: string, problems: string[]): Config['doh'] {
  const configured = url(env, 'ACG_DOH_RESOLVER_URL', problems, 'exact');
  // Live mode has no dev zone: a resolver URL that names one (ours or another gateway's) would let
  // anyone who can publish dev records verify any domain.
  if (mode === 'live' && configured && namesDevRoute(new URL(configured).pathname)) {
    problems.push(`ACG_DOH_RESOLVER_URL points at a gateway's dev routes (/dev/…, such as its dev DNS zone ${DEV_ZONE_PATH}); live mode needs a real DNS-over-HTTPS resolver`);
  }
  const devZone = mode === 'dev' && !configured;
  const resolverUrl = configured ?? (devZone ? `${baseUrl}${DEV_ZONE_PATH}` : 'https://cloudflare-dns.com/dns-query');
  return {
    resolverUrl,
    timeoutMs: integer(env, 'ACG_DOH_TIMEOUT_MS', 5000, problems),
    caFile: env.ACG_DOH_CA_FILE || undefined,
    devZone,
    // Until 2026-12-04 the start-up check let a loopback http resolver through and the client then refused every
    // query as "unreachable" (found from outside): the two now say the same.
    cleartext: URL.canParse(resolverUrl) && new URL(resolverUrl).protocol === 'http:' && (mode === 'dev' || !cleartextOffLoopback(resolverUrl)),
  };
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/** A file's text, or what keeps it from being read, in words that follow its path. */
function readableFile(file: string): { text: string; problem?: undefined } | { text?: undefined; problem: string } {
  try {
    const stats = statSync(file);
    if (stats.isDirectory()) return { problem: 'is a directory' };
    if (!stats.isFile()) return { problem: 'is not a regular file' };
    return { text: readFileSync(file, 'utf8') };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { problem: 'does not exist' };
    return { problem: `cannot be read (${code ?? (error as Error).message})` };
  }
}

// A CA file is read only once the gateway listens and has migrated its database (src/app.ts), and TLS skips
// what it cannot parse without a word. So a directory ended a started gateway with a stack and exit 1, and a
// file of no certificates was trusted as none (found from outside). Both are refused here, with the rest.
function caFileProblem(file: string): string | undefined {
  const { text, problem } = readableFile(file);
  if (text === undefined) return problem;
  const certificates = text.match(PEM_CERTIFICATE) ?? [];
  if (certificates.length === 0) return 'holds no PEM certificate (-----BEGIN CERTIFICATE-----)';
  // Every block must parse: Node's TLS stops at the first it cannot read and trusts none after it, without a word
  // (found from outside: a bundle of a broken block, then a good one, passed here and trusted nothing).
  const broken = certificates.findIndex((pem) => !parsesAsCertificate(pem));
  return broken < 0 ? undefined : `holds a PEM block that is not a certificate (block ${broken + 1} of ${certificates.length})`;
}

function parsesAsCertificate(pem: string): boolean {
  try {
    new X509Certificate(pem);
    return true;
  } catch {
    return false;
  }
}

/** How many single-character edits turn `a` into `b` (Levenshtein), or `limit + 1` once it is known to be more. */
function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) current.push(Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * Variables set in the environment that look meant for the gateway but are not read by it: a setting read without
 * the `ACG_` prefix written with it (`ACG_PORT` for `PORT`), or a name one or two letters from a setting's
 * (`ACG_BASE_ULR`). Each is a sentence naming the setting it resembles; `acg serve` logs them as warnings (found
 * from outside: `ACG_PORT=…` started a gateway on 8080 without a word). Other `ACG_` names are left alone: a
 * merchant's or an agent's own programs beside the gateway may read names of their own (`ACG_API_KEY`).
 */
export function unreadSettings(env: Env): string[] {
  const names = ENV_VARS.map((variable) => variable.name);
  const warnings: string[] = [];
  for (const name of Object.keys(env).sort()) {
    if (env[name] === undefined || names.includes(name)) continue;
    const unprefixed = name.startsWith('ACG_') ? name.slice(4) : undefined;
    if (unprefixed !== undefined && names.includes(unprefixed)) {
      warnings.push(`${name} is not a setting of the gateway, which reads ${unprefixed} (without ACG_): ${name} is ignored`);
      continue;
    }
    if (name.length < 8) continue;
    // A name near one of ours, of the same kind: ACG_… near ACG_…, and an unprefixed one near DATABASE_URL or
    // LOG_LEVEL (found from outside: DATABASE_ULR ran live mode on the embedded database, with no word).
    const prefixed = name.startsWith('ACG_');
    const near = names.find((known) => known.startsWith('ACG_') === prefixed && known.length >= 8 && editDistance(name, known, 2) <= 2);
    if (near !== undefined) warnings.push(`${name} is not a setting of the gateway: did you mean ${near}? ${name} is ignored`);
  }
  // An identity provider's audience and JWKS URL are read only with its issuer (found from outside: ignored in silence).
  for (const kind of ['HUMAN', 'AGENT'] as const) {
    if (env[`ACG_${kind}_ISSUER`]) continue;
    for (const name of [`ACG_${kind}_AUDIENCE`, `ACG_${kind}_JWKS_URL`].filter((setting) => env[setting])) {
      warnings.push(`${name} is set, but ACG_${kind}_ISSUER is not: ${name} belongs to that identity provider, so it is ignored`);
    }
  }
  // Stripe's settings are read only with the Stripe provider (found from outside: a live key was ignored in silence).
  const provider = env.ACG_PAYMENT_PROVIDER || undefined;
  if (provider !== 'stripe') {
    for (const name of ['ACG_STRIPE_SECRET_KEY', 'ACG_STRIPE_WEBHOOK_SECRET'].filter((setting) => env[setting])) {
      warnings.push(`${name} is set, but ACG_PAYMENT_PROVIDER is ${provider === undefined ? 'not set' : `"${provider}"`}: Stripe is not used until ACG_PAYMENT_PROVIDER=stripe, so ${name} is ignored`);
    }
  }
  return warnings;
}

/**
 * The base URL a dev gateway names itself by when ACG_BASE_URL is not set: the address it listens on, except that a
 * wildcard (0.0.0.0, ::), which listens on every interface and names none, is reached at the loopback address
 * (found from outside: with HOST=0.0.0.0 the gateway's issuer was http://0.0.0.0:8080, and the README's steps failed).
 */
function defaultBaseUrl(host: string, port: number): string {
  // Every spelling of a wildcard (`::0`, `0:0:0:0:0:0:0:0`, `0.0.0.0`), as the URL parser writes it.
  const wildcard = isIP(host) === 4 ? host === '0.0.0.0' : isIP(host) === 6 && new URL(`http://[${host}]`).hostname === '[::]';
  const reachable = wildcard ? (host.includes(':') ? '::1' : '127.0.0.1') : host;
  return `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}`;
}

/** A host name as DNS spells one (RFC 1123 labels of letters, digits and inner hyphens), which listen may resolve. */
const HOST_NAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;

export function loadConfig(env: Env = process.env): Config {
  const problems: string[] = [];
  const modeRaw = env.ACG_MODE || 'dev';
  if (modeRaw !== 'dev' && modeRaw !== 'live') problems.push(`ACG_MODE must be "dev" or "live", got "${modeRaw}"`);
  const mode: Mode = modeRaw === 'live' ? 'live' : 'dev';
  const port = integer(env, 'PORT', 8080, problems);
  const host = env.HOST || '127.0.0.1';
  // Said with the other settings, before the database opens (found from outside: a mistyped HOST was told only at listen).
  if (!isIP(host) && !HOST_NAME.test(host)) problems.push(`HOST must be an IP address or a host name (default 127.0.0.1; 0.0.0.0 for every interface), got "${host}"`);
  const baseUrlEnv = canonicalBaseUrl(url(env, 'ACG_BASE_URL', problems), problems);
  const baseUrl = baseUrlEnv ?? defaultBaseUrl(host, port);
  if (mode === 'live' && !env.ACG_BASE_URL) problems.push('ACG_BASE_URL is required in live mode (it is the issuer of every token we sign)');
  const databaseUrl = env.DATABASE_URL || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) problems.push('DATABASE_URL must start with postgres:// or postgresql://');
  else if (databaseUrl) {
    const parsed = parseConnectionUrl(databaseUrl);
    if (!parsed) problems.push('DATABASE_URL is not a valid URL: check its port, and percent-encode any reserved character of the user name or password');
    else connectionUrlFileProblems(parsed.url, problems);
  }
  const allowPrivate = flag(env, 'ACG_ALLOW_PRIVATE_NETWORK_TARGETS', false, problems);
  if (allowPrivate && mode === 'live') problems.push('ACG_ALLOW_PRIVATE_NETWORK_TARGETS is a test-only setting and is refused in live mode');
  if (mode === 'live') cleartextInLive(env, problems);
  const retention = integer(env, 'ACG_IDEMPOTENCY_RETENTION_S', 86_400, problems);
  const config: Config = {
    mode,
    host,
    port,
    baseUrl,
    databaseUrl,
    dataDir: path.resolve(env.ACG_DATA_DIR || './.acg-data'),
    db: {
      statementTimeoutMs: integer(env, 'ACG_DB_STATEMENT_TIMEOUT_MS', DEFAULT_DATABASE_TIMEOUTS.statementTimeoutMs, problems),
      lockTimeoutMs: integer(env, 'ACG_DB_LOCK_TIMEOUT_MS', DEFAULT_DATABASE_TIMEOUTS.lockTimeoutMs, problems),
      connectTimeoutMs: integer(env, 'ACG_DB_CONNECT_TIMEOUT_MS', DEFAULT_DATABASE_TIMEOUTS.connectTimeoutMs, problems),
      startRetryMaxMs: integer(env, 'ACG_DB_START_RETRY_MAX_MS', 10_000, problems),
      // Each operation's group commit runs up to 2 batches at once, beside the reads and the other operations': fewer connections only queue them.
      poolSizeMax: integer(env, 'ACG_DB_POOL_SIZE_MAX', DEFAULT_POOL_SIZE_MAX, problems),
    },
    logLevel: env.LOG_LEVEL || 'info',
    bodyLimitBytes: integer(env, 'ACG_BODY_LIMIT_BYTES', 262_144, problems),
    requestTimeoutMs: integer(env, 'ACG_REQUEST_TIMEOUT_MS', 30_000, problems),
    idempotencyRetentionS: retention,
    idempotencyLeaseS: integer(env, 'ACG_IDEMPOTENCY_LEASE_S', 60, problems),
    credentialFactsMs: integer(env, 'ACG_CREDENTIAL_FACTS_MS', CREDENTIAL_FACTS_MS_DEFAULT, problems),
    precompileSchemas: flag(env, 'ACG_PRECOMPILE_SCHEMAS', true, problems),
    rateLimit: {
      windowS: integer(env, 'ACG_RATE_LIMIT_WINDOW_S', 60, problems),
      perAddress: integer(env, 'ACG_RATE_LIMIT_PER_ADDRESS', 1200, problems),
      perPrincipal: integer(env, 'ACG_RATE_LIMIT_PER_PRINCIPAL', 600, problems),
    },
    signingKey: env.ACG_SIGNING_KEY || undefined,
    humanIssuer: issuer(env, mode, 'HUMAN', problems),
    agentIssuer: issuer(env, mode, 'AGENT', problems),
    agentOwnerEmailClaim: env.ACG_AGENT_OWNER_EMAIL_CLAIM || 'owner_email',
    apiKeyPepper: env.ACG_API_KEY_PEPPER || undefined,
    secretBoxKey: env.ACG_SECRET_BOX_KEY || undefined,
    doh: dohConfig(env, mode, baseUrl, problems),
    operatorTokenSha256: env.ACG_OPERATOR_TOKEN_SHA256?.toLowerCase() || undefined,
    metricsTokenSha256: env.ACG_METRICS_TOKEN_SHA256?.toLowerCase() || undefined,
    operatorToken: env.ACG_OPERATOR_TOKEN || undefined,
    ownerToken: env.ACG_OWNER_TOKEN || undefined,
    outboundCaFile: env.ACG_OUTBOUND_CA_FILE || undefined,
    webhookPollIntervalMs: integer(env, 'ACG_WEBHOOK_POLL_INTERVAL_MS', 1000, problems),
    services: servicesConfig(env, problems),
    allowPrivateNetworkTargets: allowPrivate,
    payments: paymentsConfig(env, mode, problems),
  };
  const { services } = config;
  const connectorBudgetMs = Math.max(services.github.timeoutMs, services.mail.operationTimeoutMs);
  if (services.executeTimeoutMs < connectorBudgetMs) {
    problems.push(`ACG_EXECUTE_TIMEOUT_MS (${services.executeTimeoutMs}) must be at least the connectors' budgets (ACG_GITHUB_TIMEOUT_MS, ACG_MAIL_OPERATION_TIMEOUT_MS: ${connectorBudgetMs})`);
  }
  // An execution must finish while it still owns its Idempotency-Key, or a retry could run it twice.
  if (services.executeTimeoutMs + 5_000 > config.idempotencyLeaseS * 1000) {
    problems.push(`ACG_EXECUTE_TIMEOUT_MS (${services.executeTimeoutMs}) must be at least 5000 ms shorter than ACG_IDEMPOTENCY_LEASE_S (${config.idempotencyLeaseS} s)`);
  }
  if (config.secretBoxKey && !/^[A-Za-z0-9+/_-]{42,44}={0,2}$/.test(config.secretBoxKey)) {
    problems.push('ACG_SECRET_BOX_KEY must be the base64 encoding of 32 random bytes (openssl rand -base64 32)');
  }
  for (const [name, file] of [['ACG_DOH_CA_FILE', config.doh.caFile], ['ACG_OUTBOUND_CA_FILE', config.outboundCaFile]] as const) {
    const problem = file ? caFileProblem(file) : undefined;
    if (problem) problems.push(`${name} must name a PEM file of CA certificates; ${file} ${problem}`);
  }
  if (config.db.lockTimeoutMs > config.db.statementTimeoutMs) {
    problems.push(`ACG_DB_LOCK_TIMEOUT_MS (${config.db.lockTimeoutMs}) must not exceed ACG_DB_STATEMENT_TIMEOUT_MS (${config.db.statementTimeoutMs})`);
  }
  if (config.metricsTokenSha256 && !/^[0-9a-f]{64}$/.test(config.metricsTokenSha256)) {
    problems.push('ACG_METRICS_TOKEN_SHA256 must be 64 hex characters: the SHA-256 of the scrape credential (printf %s "$TOKEN" | sha256sum)');
  }
  if (config.operatorTokenSha256 && !/^[0-9a-f]{64}$/.test(config.operatorTokenSha256)) {
    problems.push('ACG_OPERATOR_TOKEN_SHA256 must be 64 hex characters: the SHA-256 of the operator credential (printf %s "$TOKEN" | sha256sum)');
  }
  if (config.apiKeyPepper && config.apiKeyPepper.length < 32) problems.push('ACG_API_KEY_PEPPER must be at least 32 characters');
  if (config.humanIssuer && config.agentIssuer && config.humanIssuer.issuer === config.agentIssuer.issuer) {
    problems.push('ACG_HUMAN_ISSUER and ACG_AGENT_ISSUER must differ: an agent identity must never pass as a human');
  }
  const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
  if (!levels.includes(config.logLevel)) problems.push(`LOG_LEVEL must be one of ${levels.join(', ')}, got "${config.logLevel}"`);
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** Whether /metrics takes a scrape credential: when one is configured, and always in live mode (dev without one serves it openly). */
export function metricsTakeCredential(config: Pick<Config, 'metricsTokenSha256' | 'mode'>): boolean {
  return config.metricsTokenSha256 !== undefined || config.mode === 'live';
}
