// The execute cell's upstream: a local stand-in for GitHub's REST API, so POST /v1/services/execute of the
// built-in `github-public` service (repository.get) runs its whole pipeline (clearance, hold, the outbound
// request, capture) with no outside network. The gateway is pointed at it by ACG_GITHUB_API_URL, operator
// configuration like any GitHub Enterprise URL. It answers GET /repos/{owner}/{repo} in GitHub's documented
// format with an ETag, and 304 to a matching If-None-Match, as GitHub does (so after the first call the
// gateway revalidates its cached copy, the common case for a repository asked about often).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export const EXECUTE_BODY = JSON.stringify({ serviceId: 'github-public', action: 'repository.get', input: { owner: 'bench', repo: 'bench' } });

function repository(owner: string, name: string): string {
  return JSON.stringify({
    id: 1296269,
    node_id: 'MDEwOlJlcG9zaXRvcnkxMjk2MjY5',
    name,
    full_name: `${owner}/${name}`,
    owner: { login: owner, id: 1, type: 'User', site_admin: false },
    private: false,
    html_url: `https://github.com/${owner}/${name}`,
    description: 'The bench repository',
    fork: false,
    language: 'TypeScript',
    forks_count: 9,
    stargazers_count: 80,
    watchers_count: 80,
    open_issues_count: 3,
    homepage: 'https://github.com',
    size: 108,
    default_branch: 'main',
    topics: ['bench'],
    archived: false,
    visibility: 'public',
    pushed_at: '2011-01-26T19:06:43Z',
    created_at: '2011-01-26T19:01:12Z',
    updated_at: '2011-01-26T19:14:43Z',
    license: { key: 'mit', name: 'MIT License', spdx_id: 'MIT' },
  });
}

export interface Upstream {
  url: string;
  /** Requests answered (200 and 304). */
  requests(): number;
  close(): Promise<void>;
}

export async function startUpstream(): Promise<Upstream> {
  let requests = 0;
  const server: Server = createServer((req, res) => {
    requests += 1;
    const match = /^\/repos\/([^/?]+)\/([^/?]+)$/.exec(req.url ?? '');
    const headers = { 'content-type': 'application/json; charset=utf-8', 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '4999', 'x-ratelimit-reset': '1900000000' };
    if (!match) {
      res.writeHead(404, headers).end('{"message":"Not Found"}');
      return;
    }
    const etag = `W/"${match[1]}-${match[2]}"`;
    if (req.headers['if-none-match'] === etag) {
      res.writeHead(304, { etag }).end();
      return;
    }
    res.writeHead(200, { ...headers, etag }).end(repository(match[1]!, match[2]!));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests: () => requests,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
