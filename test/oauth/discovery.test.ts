import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

describe('discovery', () => {
  it('serves RFC 8414 metadata whose issuer is exactly the base URL, at both probed paths', async () => {
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      const res = await fetch(`${gw.url}${path}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(await res.json()).toEqual({
        issuer: gw.url,
        authorization_endpoint: `${gw.url}/oauth/authorize`,
        token_endpoint: `${gw.url}/oauth/token`,
        registration_endpoint: `${gw.url}/oauth/register`,
        jwks_uri: `${gw.url}/.well-known/jwks.json`,
        scopes_supported: ['svc:agent', 'svc:owner'],
        response_types_supported: ['code'],
        response_modes_supported: ['query'],
        grant_types_supported: ['authorization_code'],
        token_endpoint_auth_methods_supported: ['none'],
        revocation_endpoint: `${gw.url}/oauth/revoke`,
        revocation_endpoint_auth_methods_supported: ['none'],
        code_challenge_methods_supported: ['S256'],
        authorization_response_iss_parameter_supported: true,
        // OpenID Connect Discovery's defaults would say a request_uri is taken (served at its path too): it is not.
        request_parameter_supported: false,
        request_uri_parameter_supported: false,
        client_id_metadata_document_supported: false,
        service_documentation: `${gw.url}/docs`,
      });
    }
  });

  it('serves RFC 9728 metadata for the API and, in both forms, for /mcp', async () => {
    const api = await (await fetch(`${gw.url}/.well-known/oauth-protected-resource`)).json();
    expect(api).toMatchObject({ resource: gw.url, authorization_servers: [gw.url], bearer_methods_supported: ['header'] });
    for (const path of ['/.well-known/oauth-protected-resource/mcp', '/mcp/.well-known/oauth-protected-resource']) {
      const mcp = await (await fetch(`${gw.url}${path}`)).json();
      expect(mcp).toMatchObject({ resource: `${gw.url}/mcp`, authorization_servers: [gw.url], scopes_supported: ['svc:agent', 'svc:owner'] });
    }
  });

  it('advertises a JWKS that holds the ES256 signing key', async () => {
    const metadata = await (await fetch(`${gw.url}/.well-known/oauth-authorization-server`)).json();
    const jwks = await (await fetch(metadata.jwks_uri)).json();
    expect(jwks.keys.length).toBeGreaterThan(0);
    expect(jwks.keys[0]).toMatchObject({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
    expect(jwks.keys[0].d).toBeUndefined();
  });

  it('documents every OAuth and discovery route in the OpenAPI document', async () => {
    const doc = await (await fetch(`${gw.url}/openapi.json`)).json();
    for (const path of ['/oauth/register', '/oauth/authorize', '/oauth/consent', '/oauth/select', '/oauth/token']) {
      const operations = Object.values(doc.paths[path] as Record<string, { tags: string[] }>);
      expect(operations[0]!.tags).toEqual(['oauth']);
    }
    expect(doc.paths['/oauth/token'].post.requestBody.content).toHaveProperty(['application/x-www-form-urlencoded']);
    expect(doc.paths['/.well-known/oauth-authorization-server'].get.tags).toEqual(['discovery']);
    expect(doc.paths['/.well-known/oauth-protected-resource/mcp'].get.tags).toEqual(['discovery']);
  });
});

describe('discovery under a base URL with a path', () => {
  const issuer = 'https://gw.example/gw';
  let prefixed: TestGateway;
  beforeAll(async () => {
    prefixed = await startTestGateway({ env: { ACG_BASE_URL: issuer } });
  });
  afterAll(() => prefixed.close());

  // The proxy docs/operations.md describes: /gw/… stripped of /gw, every other path forwarded as it is.
  const viaProxy = (url: string) => {
    const { pathname, search } = new URL(url);
    const path = pathname === '/gw' || pathname.startsWith('/gw/') ? pathname.slice(3) || '/' : pathname;
    return `${prefixed.url}${path}${search}`;
  };
  const asked: string[] = [];
  const customFetch = ((url: string, options: RequestInit) => {
    asked.push(url);
    return fetch(viaProxy(url), options);
  }) as unknown as typeof fetch;

  it('serves RFC 8414 metadata where a strict client asks for it, the issuer path after the well-known segment', async () => {
    const url = new URL(issuer);
    const response = await oauth.discoveryRequest(url, { algorithm: 'oauth2', [oauth.customFetch]: customFetch });
    expect(asked.at(-1)).toBe('https://gw.example/.well-known/oauth-authorization-server/gw');
    const as = await oauth.processDiscoveryResponse(url, response);
    expect(as).toMatchObject({ issuer, token_endpoint: `${issuer}/oauth/token` });
    for (const path of ['/.well-known/openid-configuration/gw', '/gw/.well-known/openid-configuration', '/gw/.well-known/oauth-authorization-server']) {
      const res = await fetch(viaProxy(`https://gw.example${path}`));
      expect([path, res.status, res.headers.get('cache-control')]).toEqual([path, 200, 'public, max-age=300']);
      expect((await res.json()).issuer).toBe(issuer);
    }
  });

  it('serves RFC 9728 metadata of the API and of /mcp at their resource paths after the well-known segment', async () => {
    for (const [resource, expected] of [[issuer, issuer], [`${issuer}/mcp`, `${issuer}/mcp`]]) {
      const url = new URL(resource!);
      const metadata = await oauth.processResourceDiscoveryResponse(url, await oauth.resourceDiscoveryRequest(url, { [oauth.customFetch]: customFetch }));
      expect(asked.at(-1)).toBe(`https://gw.example/.well-known/oauth-protected-resource${url.pathname}`);
      expect(metadata).toMatchObject({ resource: expected, authorization_servers: [issuer] });
    }
  });

  it('answers 404 at a well-known path that names neither the issuer nor a resource', async () => {
    for (const path of ['/.well-known/oauth-authorization-server/other', '/.well-known/oauth-authorization-server/gw/', '/.well-known/openid-configuration/gw/mcp',
      '/.well-known/oauth-protected-resource/gw/v1', '/.well-known/oauth-protected-resource/other/mcp', '/.well-known/oauth-protected-resource/']) {
      const res = await fetch(`${prefixed.url}${path}`);
      expect([path, res.status]).toEqual([path, 404]);
      expect((await res.json()).detail).toBe(`no route GET ${path}`);
    }
  });
});

describe('discovery at the root: no issuer path, so no path-inserted form', () => {
  it('answers 404 under the well-known segments', async () => {
    for (const path of ['/.well-known/oauth-authorization-server/', '/.well-known/oauth-authorization-server/x', '/.well-known/oauth-protected-resource/x']) {
      expect([path, (await fetch(`${gw.url}${path}`)).status]).toEqual([path, 404]);
    }
  });
});
