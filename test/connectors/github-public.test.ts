// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { SystemClock } from '../../src/platform/clock.ts';
import { BUILT_IN_SERVICES, Catalogue, ConnectorError } from '../../src/connectors/catalogue.ts';
import {
  EtagCache,
  createGitHubContext,
  getRepository,
  githubPublicService,
  isValidGitHubOwner,
  isValidGitHubRepoName,
  type GitHubContext,
  type GitHubServiceContext,
} from '../../src/connectors/github-public.ts';
import { MAIL_DEFAULTS, type MailContext } from '../../src/connectors/mail.ts';
import type { ConnectorEnvironment, ExecutionFacts } from '../../src/connectors/types.ts';
import { FAKE_RATE_LIMIT_RESET_S, repositoryJson, startFakeGitHub, type FakeGitHub } from '../support/fake-github.ts';
import { makeTestCertificate } from '../support/test-certificate.ts';

/** Every built-in connector's context at once: these tests hand one context to any built-in action. */
type ServiceContext = GitHubServiceContext & MailContext;
const catalogue = new Catalogue(BUILT_IN_SERVICES);
const prepareAction = (ctx: ServiceContext, serviceId: string, action: string, input: unknown) => catalogue.prepare(ctx, serviceId, action, input);

let fake: FakeGitHub;
const clock = new SystemClock();
beforeAll(async () => {
  fake = await startFakeGitHub();
});
afterAll(() => fake.close());

function github(overrides: Parameters<typeof createGitHubContext>[0] = {}): GitHubContext {
  return createGitHubContext({ baseUrl: fake.url, timeoutMs: 2_000, clock, ...overrides });
}

function context(gh: GitHubContext = github()): ServiceContext {
  return { github: gh, mail: MAIL_DEFAULTS, mailConnector: null };
}

async function failure(promise: Promise<unknown>): Promise<ConnectorError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectorError);
  return error as ConnectorError;
}

describe('github-public repository.get', () => {
  it('returns the documented subset of a repository with Unix-second times', async () => {
    const result = await prepareAction(context(), 'github-public', 'repository.get', { owner: 'octocat', repo: 'Hello-World' }).run();
    expect(result).toEqual({
      id: 1296269,
      fullName: 'octocat/Hello-World',
      owner: 'octocat',
      name: 'Hello-World',
      description: 'This your first repo!',
      htmlUrl: 'https://github.com/octocat/Hello-World',
      defaultBranch: 'main',
      visibility: 'public',
      private: false,
      fork: false,
      archived: false,
      language: 'TypeScript',
      licenseSpdxId: 'MIT',
      topics: ['octocat', 'atom', 'electron', 'api'],
      stargazersCount: 80,
      forksCount: 9,
      openIssuesCount: 3,
      createdAt: Date.parse('2011-01-26T19:01:12Z') / 1000,
      updatedAt: Date.parse('2011-01-26T19:14:43Z') / 1000,
      pushedAt: Date.parse('2011-01-26T19:06:43Z') / 1000,
    });
  });

  it("sends GitHub's recommended headers and the token as a bearer credential", async () => {
    const before = fake.requests.length;
    await getRepository(github({ token: 'ghp_test', userAgent: 'acg-test' }), { owner: 'octocat', repo: 'headers' });
    const { headers } = fake.requests[before]!;
    expect(headers.accept).toBe('application/vnd.github+json');
    expect(headers['x-github-api-version']).toBe('2022-11-28');
    expect(headers['user-agent']).toBe('acg-test');
    expect(headers.authorization).toBe('Bearer ghp_test');
  });

  it('sends no Authorization header without a token', async () => {
    const before = fake.requests.length;
    await getRepository(github(), { owner: 'octocat', repo: 'anonymous' });
    expect(fake.requests[before]!.headers.authorization).toBeUndefined();
  });

  it('maps 404 to upstream_not_found', async () => {
    const error = await failure(getRepository(github(), { owner: 'missing', repo: 'nothing' }));
    expect(error).toMatchObject({ code: 'upstream_not_found', status: 404 });
  });

  it('maps an exhausted rate limit (403, x-ratelimit-remaining 0) to upstream_rate_limited until the reset', async () => {
    const fixed = { nowMs: () => (FAKE_RATE_LIMIT_RESET_S - 120) * 1000, nowS: () => FAKE_RATE_LIMIT_RESET_S - 120 };
    const error = await failure(getRepository(github({ clock: fixed }), { owner: 'limited', repo: 'x' }));
    expect(error).toMatchObject({ code: 'upstream_rate_limited', status: 429, retryAfterS: 120 });
  });

  it('maps 429 with retry-after to upstream_rate_limited with that delay', async () => {
    const error = await failure(getRepository(github(), { owner: 'throttled', repo: 'x' }));
    expect(error).toMatchObject({ code: 'upstream_rate_limited', status: 429, retryAfterS: 42 });
  });

  it('maps any other 403 and 5xx to upstream_unavailable', async () => {
    expect(await failure(getRepository(github(), { owner: 'forbidden', repo: 'x' }))).toMatchObject({ code: 'upstream_unavailable', status: 502 });
    expect(await failure(getRepository(github(), { owner: 'broken', repo: 'x' }))).toMatchObject({ code: 'upstream_unavailable', status: 502, retryAfterS: undefined });
  });

  it("passes a 5xx's own Retry-After on, and not the rate limit's reset (found from outside: a 503 asking for 5 s said nothing)", async () => {
    const error = await failure(getRepository(github(), { owner: 'unavailable', repo: 'x' }));
    expect(error).toMatchObject({ code: 'upstream_unavailable', status: 502, retryAfterS: 5, detail: 'GitHub answered with status 503; it asks for a retry in 5 s' });
  });

  it('maps an upstream that never answers to upstream_timeout within the budget', async () => {
    const startedMs = Date.now();
    const error = await failure(getRepository(github({ timeoutMs: 300 }), { owner: 'slow', repo: 'x' }));
    expect(error).toMatchObject({ code: 'upstream_timeout', status: 504 });
    expect(Date.now() - startedMs).toBeLessThan(2_000);
  });

  it('maps a refused connection to upstream_unavailable', async () => {
    const error = await failure(getRepository(createGitHubContext({ baseUrl: 'http://127.0.0.1:1', timeoutMs: 2_000 }), { owner: 'a', repo: 'b' }));
    expect(error).toMatchObject({ code: 'upstream_unavailable' });
  });

  it('refuses a response larger than the cap and one that is not a repository', async () => {
    expect(await failure(getRepository(github(), { owner: 'huge', repo: 'x' }))).toMatchObject({ code: 'upstream_unavailable' });
    expect(await failure(getRepository(github(), { owner: 'odd', repo: 'x' }))).toMatchObject({ code: 'upstream_unavailable' });
  });

  it('follows a rename redirect within the API origin only', async () => {
    const renamed = await getRepository(github(), { owner: 'renamed', repo: 'old-name' });
    expect(renamed.fullName).toBe('new-owner/new-name');
    expect(await failure(getRepository(github(), { owner: 'elsewhere', repo: 'x' }))).toMatchObject({ code: 'upstream_unavailable' });
  });

  it('reuses a cached answer on 304 Not Modified, sending If-None-Match', async () => {
    const gh = github();
    const first = await getRepository(gh, { owner: 'etag', repo: 'cached' });
    const before = fake.requests.length;
    const second = await getRepository(gh, { owner: 'ETag', repo: 'Cached' });
    expect(fake.requests[before]!.headers['if-none-match']).toBe('W/"etag-cached"');
    expect(second).toEqual(first);
    expect(gh.etagCache!.size).toBe(1);
  });

  it('does not send If-None-Match when the cache is disabled', async () => {
    const gh = github({ etagCacheEntries: 0 });
    await getRepository(gh, { owner: 'etag', repo: 'uncached' });
    const before = fake.requests.length;
    await getRepository(gh, { owner: 'etag', repo: 'uncached' });
    expect(fake.requests[before]!.headers['if-none-match']).toBeUndefined();
  });
});

describe('ETag cache', () => {
  it('evicts the least recently used entry beyond its bound', async () => {
    const cache = new EtagCache(2);
    const repository = await getRepository(github(), { owner: 'octocat', repo: 'lru' });
    cache.set('a', '"1"', repository);
    cache.set('b', '"2"', repository);
    cache.get('a');
    cache.set('c', '"3"', repository);
    expect(cache.get('b')).toBeUndefined();
    expect(cache.get('a')?.etag).toBe('"1"');
    expect(cache.get('c')?.etag).toBe('"3"');
    expect(cache.size).toBe(2);
  });
});

describe('GitHub name validation', () => {
  it.each(['octocat', 'a', 'A-b-C', 'x1-2-3', 'a'.repeat(39)])('accepts owner %s', (name) => {
    expect(isValidGitHubOwner(name)).toBe(true);
  });

  it.each(['', '-a', 'a-', 'a--b', 'a_b', 'a.b', 'a'.repeat(40), 'ö', 'a b', '../x'])('refuses owner %j', (name) => {
    expect(isValidGitHubOwner(name)).toBe(false);
  });

  it.each(['Hello-World', 'a', '.github', 'x.y_z-1', '...', '-', '_', 'r'.repeat(100)])('accepts repo %s', (name) => {
    expect(isValidGitHubRepoName(name)).toBe(true);
  });

  it.each(['', '.', '..', 'a/b', 'a b', 'r'.repeat(101), 'ä', 'a%2e'])('refuses repo %j', (name) => {
    expect(isValidGitHubRepoName(name)).toBe(false);
  });

  it('refuses invalid input with invalid_input before any request', () => {
    const before = fake.requests.length;
    for (const input of [{ owner: 'a--b', repo: 'x' }, { owner: 'a', repo: '..' }, { owner: 'a' }, { owner: 'a', repo: 'b', extra: 1 }, null, 'a/b']) {
      expect(() => prepareAction(context(), 'github-public', 'repository.get', input)).toThrowError(
        expect.objectContaining({ code: 'invalid_input', status: 400 }),
      );
    }
    expect(fake.requests.length).toBe(before);
  });

  const nameChars = fc.constantFrom(...'aZ09-._/ %ö'.split(''));
  const nameLike = fc.oneof(fc.string({ unit: nameChars, maxLength: 110 }), fc.string({ maxLength: 110 }));

  it('accepts no owner that breaks the rules', () => {
    fc.assert(
      fc.property(nameLike, (name) => {
        if (!isValidGitHubOwner(name)) return;
        expect(name.length).toBeGreaterThanOrEqual(1);
        expect(name.length).toBeLessThanOrEqual(39);
        expect(name).toMatch(/^[A-Za-z0-9-]+$/);
        expect(name.startsWith('-') || name.endsWith('-') || name.includes('--')).toBe(false);
      }),
      { numRuns: 2000 },
    );
  });

  it('accepts no repository name that breaks the rules', () => {
    fc.assert(
      fc.property(nameLike, (name) => {
        if (!isValidGitHubRepoName(name)) return;
        expect(name.length).toBeGreaterThanOrEqual(1);
        expect(name.length).toBeLessThanOrEqual(100);
        expect(name).toMatch(/^[A-Za-z0-9._-]+$/);
        expect(name === '.' || name === '..').toBe(false);
      }),
      { numRuns: 2000 },
    );
  });

  it('accepts every owner built by the rules', () => {
    const segment = fc.string({ unit: fc.constantFrom(...'abcXYZ0189'.split('')), minLength: 1, maxLength: 8 });
    fc.assert(
      fc.property(fc.array(segment, { minLength: 1, maxLength: 4 }), (segments) => {
        const name = segments.join('-');
        expect(isValidGitHubOwner(name)).toBe(name.length <= 39);
      }),
    );
  });

  it('never throws anything but invalid_input for arbitrary input', () => {
    fc.assert(
      fc.property(fc.oneof(fc.record({ owner: nameLike, repo: nameLike }), fc.anything()), (input) => {
        try {
          prepareAction(context(), 'github-public', 'repository.get', input);
        } catch (error) {
          expect(error).toBeInstanceOf(ConnectorError);
          expect((error as ConnectorError).code).toBe('invalid_input');
        }
      }),
      { numRuns: 1000 },
    );
  });
});

describe('github-public over HTTPS with a private CA (GitHub Enterprise)', () => {
  it('trusts ACG_OUTBOUND_CA_FILE, as webhook deliveries do, and without it refuses the certificate (found from outside: 502 where webhooks to the same host went through)', async () => {
    const certificate = makeTestCertificate({ ip: ['127.0.0.1'] });
    const server = createHttpsServer({ cert: certificate.certPem, key: certificate.keyPem }, (_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(repositoryJson('octocat', 'hello-world')));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const baseUrl = `https://127.0.0.1:${(server.address() as AddressInfo).port}/api/v3`;
      const environment = (outboundCaFile?: string) =>
        ({ config: { services: { github: { baseUrl, timeoutMs: 2_000, etagCacheEntries: 0 } }, ...(outboundCaFile ? { outboundCaFile } : {}) }, clock }) as unknown as ConnectorEnvironment;
      const facts = {} as ExecutionFacts<unknown>;
      const trusted = await githubPublicService.context(environment(certificate.certPath))(facts);
      expect(await getRepository(trusted.github, { owner: 'octocat', repo: 'hello-world' })).toMatchObject({ fullName: 'octocat/hello-world' });
      const untrusted = await githubPublicService.context(environment())(facts);
      expect((await failure(getRepository(untrusted.github, { owner: 'octocat', repo: 'hello-world' }))).code).toBe('upstream_unavailable');
    } finally {
      server.close();
      certificate.remove();
    }
  });
});
