// A local stand-in for GitHub's REST API (GET /repos/{owner}/{repo}), answering in GitHub's documented
// format: repository JSON with an ETag, 304 for a matching If-None-Match, 404 Not Found, 403 with an
// exhausted primary rate limit, 429 with Retry-After, a rename redirect, and a route that never answers.
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export const FAKE_RATE_LIMIT_RESET_S = 1_900_000_000;

/** A trimmed copy of GitHub's documented example repository (octocat/Hello-World). */
export function repositoryJson(owner: string, name: string): Record<string, unknown> {
  return {
    id: 1296269,
    node_id: 'MDEwOlJlcG9zaXRvcnkxMjk2MjY5',
    name,
    full_name: `${owner}/${name}`,
    owner: { login: owner, id: 1, type: 'User', site_admin: false },
    private: false,
    html_url: `https://github.com/${owner}/${name}`,
    description: 'This your first repo!',
    fork: false,
    url: `https://api.github.com/repos/${owner}/${name}`,
    homepage: 'https://github.com',
    language: 'TypeScript',
    forks_count: 9,
    stargazers_count: 80,
    watchers_count: 80,
    size: 108,
    default_branch: 'main',
    open_issues_count: 3,
    is_template: false,
    topics: ['octocat', 'atom', 'electron', 'api'],
    has_issues: true,
    archived: false,
    disabled: false,
    visibility: 'public',
    pushed_at: '2011-01-26T19:06:43Z',
    created_at: '2011-01-26T19:01:12Z',
    updated_at: '2011-01-26T19:14:43Z',
    license: { key: 'mit', name: 'MIT License', spdx_id: 'MIT', url: 'https://api.github.com/licenses/mit', node_id: 'MDc6TGljZW5zZW1pdA==' },
    subscribers_count: 42,
    network_count: 0,
  };
}

export interface FakeGitHub {
  url: string;
  /** Headers of every request received, in order. */
  requests: Array<{ path: string; headers: IncomingHttpHeaders }>;
  close(): Promise<void>;
}

const NOT_FOUND = { message: 'Not Found', documentation_url: 'https://docs.github.com/rest/repos/repos#get-a-repository', status: '404' };

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-github-api-version-selected': '2022-11-28', ...headers });
  res.end(text);
}

export async function startFakeGitHub(): Promise<FakeGitHub> {
  const requests: FakeGitHub['requests'] = [];
  const hanging: ServerResponse[] = [];
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    requests.push({ path, headers: req.headers });
    const match = /^\/repos\/([^/]+)\/([^/]+)$/.exec(path);
    const limits = { 'x-ratelimit-limit': '60', 'x-ratelimit-remaining': '59', 'x-ratelimit-reset': String(FAKE_RATE_LIMIT_RESET_S) };
    if (path === '/repositories/1296269') {
      send(res, 200, repositoryJson('new-owner', 'new-name'), { ...limits, etag: 'W/"renamed"' });
      return;
    }
    if (!match) {
      send(res, 404, NOT_FOUND);
      return;
    }
    const [, owner = '', repo = ''] = match;
    switch (owner) {
      case 'missing':
        send(res, 404, NOT_FOUND, limits);
        return;
      case 'limited':
        send(res, 403, { message: 'API rate limit exceeded for 127.0.0.1. (But here\'s the good news: ...)', documentation_url: 'https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting' }, {
          ...limits,
          'x-ratelimit-remaining': '0',
        });
        return;
      case 'throttled':
        send(res, 429, { message: 'You have exceeded a secondary rate limit.', documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api' }, { 'retry-after': '42' });
        return;
      case 'forbidden':
        send(res, 403, { message: 'Repository access blocked', documentation_url: 'https://docs.github.com' }, limits);
        return;
      case 'broken':
        send(res, 502, { message: 'Server Error' });
        return;
      case 'unavailable':
        send(res, 503, { message: 'Service Unavailable' }, { ...limits, 'retry-after': '5' });
        return;
      case 'huge':
        send(res, 200, { ...repositoryJson(owner, repo), padding: 'x'.repeat(2 * 1024 * 1024) }, limits);
        return;
      case 'acme-private':
        // What GitHub answers a token that can see a private (or an enterprise's internal) repository.
        send(res, 200, { ...repositoryJson(owner, repo), private: repo !== 'internal-plans', visibility: repo === 'internal-plans' ? 'internal' : 'private', description: 'CONFIDENTIAL' }, limits);
        return;
      case 'odd':
        send(res, 200, { id: 'not-a-number' }, limits);
        return;
      case 'renamed':
        res.writeHead(301, { location: '/repositories/1296269', 'content-type': 'application/json' });
        res.end(JSON.stringify({ message: 'Moved Permanently', url: '/repositories/1296269' }));
        return;
      case 'elsewhere':
        res.writeHead(301, { location: 'https://evil.example/repositories/1', 'content-type': 'application/json' });
        res.end('{}');
        return;
      case 'slow':
        hanging.push(res);
        return;
      default: {
        const etag = `W/"${owner.toLowerCase()}-${repo.toLowerCase()}"`;
        if (req.headers['if-none-match'] === etag) {
          // GitHub's 304 carries no body and does not use up the primary rate limit.
          res.writeHead(304, { etag, ...limits });
          res.end();
          return;
        }
        send(res, 200, repositoryJson(owner, repo), { ...limits, etag });
      }
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
