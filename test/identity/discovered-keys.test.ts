// Live mode fetches an identity provider's keys over https only, whether the JWKS URL is configured (refused at
// start: test/platform/config.test.ts) or named by the provider's OIDC discovery document (refused when it is
// read, before any key is fetched): whoever sits on a cleartext path could otherwise serve keys and mint any identity.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { identityProviders } from '../../src/identity/issuers.ts';
import { loadConfig } from '../../src/platform/config.ts';

let server: Server;
let issuer: string;
const requested: string[] = [];

beforeAll(async () => {
  server = createServer((request, response) => {
    requested.push(request.url ?? '');
    response.setHeader('content-type', 'application/json');
    response.end(JSON.stringify({ issuer, jwks_uri: 'http://keys.example.com/jwks.json' }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}/human`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe("a provider's discovered jwks_uri", () => {
  it('is refused in live mode when it is cleartext to a host other than loopback', async () => {
    const config = loadConfig({ ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example', ACG_HUMAN_ISSUER: issuer, ACG_AGENT_ISSUER: `${issuer}-agents` });
    const { human } = await identityProviders(config);
    const refusal = await Promise.resolve()
      .then(() => human!.keys({ alg: 'ES256', kid: 'any' }, { payload: '', signature: '' } as never))
      .catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(Error);
    expect((refusal as Error).message).toContain('named a cleartext jwks_uri (http://keys.example.com/jwks.json); live mode fetches keys over https only');
    expect(requested).toEqual(['/human/.well-known/openid-configuration']);
  });
});
