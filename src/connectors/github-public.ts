// The `github-public` service: read-only facts about a public GitHub repository from GitHub's REST API
// (GET /repos/{owner}/{repo}). The base URL and token are operator configuration, never caller input.
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Dispatcher } from 'undici';
import { SystemClock, type Clock } from '../platform/clock.ts';
import { loadUndici, trustingAlso } from '../platform/outbound.ts';
import { UC_PER_CREDIT } from '../platform/money.ts';
import type { ServiceModule } from './types.ts';
import { ConnectorError } from './connector-error.ts';

// GitHub's naming rules. Owner (user or organisation login): 1–39 characters, ASCII letters, digits and
// single hyphens, not starting or ending with a hyphen. Repository: 1–100 characters of ASCII letters,
// digits, `.`, `_`, `-`, and not `.` or `..` (which would walk the URL path).
export const GITHUB_OWNER_LENGTH_MAX = 39;
export const GITHUB_REPO_LENGTH_MAX = 100;
export const GITHUB_OWNER_PATTERN = '^[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*$';
export const GITHUB_REPO_PATTERN = '^(?!\\.{1,2}$)[A-Za-z0-9._-]+$';

export const RepositoryGetInput = Type.Object(
  {
    owner: Type.String({ minLength: 1, maxLength: GITHUB_OWNER_LENGTH_MAX, pattern: GITHUB_OWNER_PATTERN }),
    repo: Type.String({ minLength: 1, maxLength: GITHUB_REPO_LENGTH_MAX, pattern: GITHUB_REPO_PATTERN }),
  },
  { additionalProperties: false },
);
export type RepositoryGetInput = Static<typeof RepositoryGetInput>;

export const GITHUB_DEFAULT_BASE_URL = 'https://api.github.com';
export const GITHUB_DEFAULT_TIMEOUT_MS = 10_000;
export const GITHUB_DEFAULT_ETAG_CACHE_ENTRIES = 500;
/** A repository document is a few KiB; anything near this is not the answer we asked for. */
export const GITHUB_RESPONSE_BYTES_MAX = 1024 * 1024;
/** GitHub answers a renamed or transferred repository with a redirect to /repositories/{id}. */
const REDIRECTS_MAX = 1;
/** GitHub's advice when a secondary rate limit gives no header: wait at least a minute. */
const RATE_LIMIT_RETRY_AFTER_DEFAULT_S = 60;
const RETRY_AFTER_S_MAX = 3600;

export interface GitHubSettings {
  /** Operator configuration, e.g. https://api.github.com or a GitHub Enterprise `https://host/api/v3`. */
  baseUrl: string;
  /** Optional token; raises the rate limit from 60 to 5,000 requests an hour. */
  token?: string;
  /** Budget for the whole exchange: connect, headers and body. */
  timeoutMs: number;
  userAgent: string;
}

export interface GitHubContext extends GitHubSettings {
  /** Shared across requests so conditional requests can reuse earlier answers; null disables them. */
  etagCache: EtagCache | null;
  clock: Clock;
  /** undici dispatcher; the global one when absent. */
  dispatcher?: Dispatcher;
}

/** What the GitHub actions need: the operator's settings and the shared ETag cache. */
export interface GitHubServiceContext {
  github: GitHubContext;
}

/** The documented subset of a repository that `repository.get` returns. Times are Unix seconds. */
export interface GitHubRepository {
  id: number;
  fullName: string;
  owner: string;
  name: string;
  description: string | null;
  htmlUrl: string;
  defaultBranch: string;
  visibility: string;
  private: boolean;
  fork: boolean;
  archived: boolean;
  language: string | null;
  licenseSpdxId: string | null;
  topics: string[];
  stargazersCount: number;
  forksCount: number;
  openIssuesCount: number;
  createdAt: number;
  updatedAt: number;
  pushedAt: number | null;
}

export function isValidGitHubOwner(name: string): boolean {
  return Value.Check(RepositoryGetInput.properties.owner, name);
}

export function isValidGitHubRepoName(name: string): boolean {
  return Value.Check(RepositoryGetInput.properties.repo, name);
}

/**
 * A bounded least-recently-used map of ETag → parsed repository. A 304 answer to a conditional request
 * does not count against GitHub's primary rate limit, so repeated lookups of a popular repository stay
 * cheap. Entries are small (about 1 KiB), so 500 of them cost well under a megabyte.
 */
export class EtagCache {
  private readonly entries = new Map<string, { etag: string; repository: GitHubRepository }>();

  constructor(readonly entriesMax: number = GITHUB_DEFAULT_ETAG_CACHE_ENTRIES) {
    if (!Number.isInteger(entriesMax) || entriesMax < 1) throw new RangeError('entriesMax must be a positive integer');
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string): { etag: string; repository: GitHubRepository } | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    // Map keeps insertion order: re-inserting makes this the most recently used.
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry;
  }

  set(key: string, etag: string, repository: GitHubRepository): void {
    this.entries.delete(key);
    this.entries.set(key, { etag, repository });
    while (this.entries.size > this.entriesMax) {
      const oldest = this.entries.keys().next();
      if (oldest.done) break;
      this.entries.delete(oldest.value);
    }
  }
}

export function createGitHubContext(
  settings: Partial<GitHubSettings> & { etagCacheEntries?: number; clock?: Clock; dispatcher?: Dispatcher } = {},
): GitHubContext {
  const entries = settings.etagCacheEntries ?? GITHUB_DEFAULT_ETAG_CACHE_ENTRIES;
  return {
    baseUrl: (settings.baseUrl ?? GITHUB_DEFAULT_BASE_URL).replace(/\/+$/, ''),
    token: settings.token || undefined,
    timeoutMs: settings.timeoutMs ?? GITHUB_DEFAULT_TIMEOUT_MS,
    userAgent: settings.userAgent ?? 'agent-credit-gateway',
    etagCache: entries > 0 ? new EtagCache(entries) : null,
    clock: settings.clock ?? new SystemClock(),
    dispatcher: settings.dispatcher,
  };
}

// Only the members we return are checked; GitHub adds members over time and that must not break us.
const NullableString = Type.Union([Type.String(), Type.Null()]);
const RepositoryWire = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  full_name: Type.String(),
  owner: Type.Object({ login: Type.String() }),
  private: Type.Boolean(),
  visibility: Type.Optional(Type.String()),
  html_url: Type.String(),
  description: NullableString,
  fork: Type.Boolean(),
  archived: Type.Boolean(),
  default_branch: Type.String(),
  language: NullableString,
  license: Type.Union([Type.Object({ spdx_id: Type.Optional(NullableString) }), Type.Null()]),
  topics: Type.Optional(Type.Array(Type.String())),
  stargazers_count: Type.Integer(),
  forks_count: Type.Integer(),
  open_issues_count: Type.Integer(),
  created_at: Type.String(),
  updated_at: Type.String(),
  pushed_at: NullableString,
});
type RepositoryWire = Static<typeof RepositoryWire>;

function unixSeconds(iso: string): number {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) throw new ConnectorError('upstream_unavailable', 'GitHub returned an unreadable timestamp');
  return Math.floor(ms / 1000);
}

function toRepository(wire: RepositoryWire): GitHubRepository {
  return {
    id: wire.id,
    fullName: wire.full_name,
    owner: wire.owner.login,
    name: wire.name,
    description: wire.description,
    htmlUrl: wire.html_url,
    defaultBranch: wire.default_branch,
    visibility: wire.visibility ?? (wire.private ? 'private' : 'public'),
    private: wire.private,
    fork: wire.fork,
    archived: wire.archived,
    language: wire.language,
    licenseSpdxId: wire.license?.spdx_id ?? null,
    topics: wire.topics ?? [],
    stargazersCount: wire.stargazers_count,
    forksCount: wire.forks_count,
    openIssuesCount: wire.open_issues_count,
    createdAt: unixSeconds(wire.created_at),
    updatedAt: unixSeconds(wire.updated_at),
    pushedAt: wire.pushed_at === null ? null : unixSeconds(wire.pushed_at),
  };
}

function headerText(headers: Dispatcher.ResponseData['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

async function readBodyCapped(body: Dispatcher.ResponseData['body'], bytesMax: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    total += buffer.length;
    if (total > bytesMax) {
      body.destroy();
      throw new ConnectorError('upstream_unavailable', `GitHub's response exceeded ${bytesMax} bytes`);
    }
    chunks.push(buffer);
  }
  return Buffer.concat(chunks);
}

function parseJson(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

/** Seconds from `retry-after` (seconds or HTTP date), else from `x-ratelimit-reset` (epoch seconds). */
function retryAfterS(headers: Dispatcher.ResponseData['headers'], clock: Clock): number | undefined {
  const retryAfter = headerText(headers, 'retry-after');
  const reset = headerText(headers, 'x-ratelimit-reset');
  let seconds: number | undefined;
  if (retryAfter !== undefined && /^[0-9]+$/.test(retryAfter.trim())) seconds = Number(retryAfter.trim());
  else if (retryAfter !== undefined && !Number.isNaN(Date.parse(retryAfter))) seconds = Math.ceil((Date.parse(retryAfter) - clock.nowMs()) / 1000);
  else if (reset !== undefined && /^[0-9]+$/.test(reset.trim())) seconds = Number(reset.trim()) - clock.nowS();
  if (seconds === undefined) return undefined;
  return Math.min(RETRY_AFTER_S_MAX, Math.max(1, seconds));
}


function rateLimitError(response: Dispatcher.ResponseData, message: string, clock: Clock): ConnectorError | null {
  const { statusCode, headers } = response;
  if (statusCode !== 403 && statusCode !== 429) return null;
  const exhausted = headerText(headers, 'x-ratelimit-remaining') === '0';
  const hasRetryAfter = headerText(headers, 'retry-after') !== undefined;
  // A 403 without rate-limit headers is a secondary rate limit only when GitHub's message says so;
  // otherwise it is a refusal (e.g. a blocked repository or a token without access).
  if (statusCode === 403 && !exhausted && !hasRetryAfter && !/rate limit/i.test(message)) return null;
  const waitS = retryAfterS(headers, clock) ?? RATE_LIMIT_RETRY_AFTER_DEFAULT_S;
  return new ConnectorError('upstream_rate_limited', `GitHub is rate limiting the gateway; retry in ${waitS} s`, waitS);
}

/** A repository GitHub does not have, or has but not in public: the same answer, so neither is told apart. */
function notPublic(input: RepositoryGetInput): ConnectorError {
  return new ConnectorError('upstream_not_found', `GitHub has no public repository ${input.owner}/${input.repo}`);
}

function statusError(response: Dispatcher.ResponseData, json: unknown, input: RepositoryGetInput, clock: Clock): ConnectorError {
  const message = typeof json === 'object' && json !== null && 'message' in json && typeof json.message === 'string' ? json.message : '';
  const limited = rateLimitError(response, message, clock);
  if (limited) return limited;
  const { statusCode } = response;
  if (statusCode === 404) return notPublic(input);
  if (statusCode === 401) return new ConnectorError('upstream_auth_failed', "GitHub refused the gateway's token");
  // An outage that names its end (a 503's Retry-After) is passed on, as a rate limit's is; the rate limit's reset
  // says nothing of an outage, so only Retry-After counts here.
  const waitS = headerText(response.headers, 'retry-after') !== undefined ? retryAfterS(response.headers, clock) : undefined;
  if (waitS !== undefined) return new ConnectorError('upstream_unavailable', `GitHub answered with status ${statusCode}; it asks for a retry in ${waitS} s`, waitS);
  return new ConnectorError('upstream_unavailable', `GitHub answered with status ${statusCode}`);
}

/** Follows GitHub's rename redirects only within the configured API origin, so a redirect cannot steer us elsewhere. */
function redirectTarget(response: Dispatcher.ResponseData, currentUrl: string, baseUrl: string): string | null {
  const location = headerText(response.headers, 'location');
  if (!location) return null;
  let target: URL;
  try {
    target = new URL(location, currentUrl);
  } catch {
    return null;
  }
  return target.origin === new URL(baseUrl).origin ? target.href : null;
}

function cacheKey(github: GitHubContext, input: RepositoryGetInput): string {
  // ETags vary with the Authorization header, and GitHub names are case-insensitive.
  const tokenId = github.token ? createHash('sha256').update(github.token).digest('base64url').slice(0, 16) : '-';
  return `${github.baseUrl}\n${tokenId}\n${input.owner.toLowerCase()}/${input.repo.toLowerCase()}`;
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

function translateFailure(error: unknown, timedOut: boolean): unknown {
  if (error instanceof ConnectorError) return error;
  if (timedOut) return new ConnectorError('upstream_timeout', 'GitHub did not answer in time');
  const code = typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined;
  if (typeof code === 'string' && TIMEOUT_CODES.has(code)) return new ConnectorError('upstream_timeout', 'GitHub did not answer in time');
  // Socket, DNS and TLS failures all carry a code; an error without one is a bug and stays a 500.
  if (typeof code === 'string') return new ConnectorError('upstream_unavailable', `GitHub could not be reached (${code})`);
  return error;
}

export async function getRepository(github: GitHubContext, input: RepositoryGetInput): Promise<GitHubRepository> {
  const key = cacheKey(github, input);
  const cached = github.etagCache?.get(key);
  const headers: Record<string, string> = {
    accept: 'application/vnd.github+json',
    'x-github-api-version': '2022-11-28',
    'user-agent': github.userAgent,
  };
  if (github.token) headers.authorization = `Bearer ${github.token}`;
  if (cached) headers['if-none-match'] = cached.etag;
  const { request } = await loadUndici();
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), github.timeoutMs);
  let url = `${github.baseUrl}/repos/${encodeURIComponent(input.owner)}/${encodeURIComponent(input.repo)}`;
  try {
    for (let redirects = 0; ; redirects += 1) {
      const response = await request(url, {
        method: 'GET',
        headers,
        signal: controller.signal,
        headersTimeout: github.timeoutMs,
        bodyTimeout: github.timeoutMs,
        dispatcher: github.dispatcher,
      });
      const { statusCode } = response;
      if (statusCode === 304 && cached) {
        await response.body.dump();
        return cached.repository;
      }
      if (statusCode === 301 || statusCode === 302 || statusCode === 307 || statusCode === 308) {
        await response.body.dump();
        const target = redirectTarget(response, url, github.baseUrl);
        if (!target || redirects >= REDIRECTS_MAX) throw new ConnectorError('upstream_unavailable', 'GitHub redirected unexpectedly');
        url = target;
        continue;
      }
      const json = parseJson(await readBodyCapped(response.body, GITHUB_RESPONSE_BYTES_MAX));
      if (statusCode !== 200) throw statusError(response, json, input, github.clock);
      if (!Value.Check(RepositoryWire, json)) throw new ConnectorError('upstream_unavailable', 'GitHub returned an unexpected repository document');
      // The operator's token (ACG_GITHUB_TOKEN) may see private and internal repositories; this service serves
      // public ones only, so an agent cannot read through it what the token's owner may read.
      if (json.private || (json.visibility !== undefined && json.visibility !== 'public')) throw notPublic(input);
      const repository = toRepository(json);
      const etag = headerText(response.headers, 'etag');
      if (etag && github.etagCache) github.etagCache.set(key, etag, repository);
      return repository;
    }
  } catch (error) {
    throw translateFailure(error, controller.signal.aborted);
  } finally {
    clearTimeout(timer);
  }
}

export const githubPublicService: ServiceModule<GitHubServiceContext> = {
  id: 'github-public',
  title: 'GitHub public repositories',
  category: 'developer-tools',
  // One context for every execution: the operator's settings and the ETag cache they share.
  // The operator's extra CA (ACG_OUTBOUND_CA_FILE) is trusted here as for webhooks: a GitHub Enterprise behind a
  // private CA answered 502 while webhooks to the same host went through (found from outside).
  context: ({ config, clock }) => {
    const ca = config.outboundCaFile ? readFileSync(config.outboundCaFile, 'utf8') : undefined;
    let github: Promise<GitHubContext> | undefined;
    const open = async () => {
      const dispatcher = ca ? new (await loadUndici()).Agent({ connect: { secureContext: trustingAlso(ca) } }) : undefined;
      return createGitHubContext({ ...config.services.github, clock, ...(dispatcher ? { dispatcher } : {}) });
    };
    return async () => ({ github: await (github ??= open()) });
  },
  actions: {
    'repository.get': {
      description: 'Facts about a public GitHub repository: description, default branch, licence, topics, counts and dates.',
      input: RepositoryGetInput,
      priceUc: UC_PER_CREDIT,
      run: (ctx: GitHubServiceContext, input: RepositoryGetInput) => getRepository(ctx.github, input),
    },
  },
};
