// The console's strictness, over HTTP: its page's policy (no inline script or style at all, Trusted Types,
// no framing, no referrer, no caching) and the consent page's headers beside it; its built files (named by
// content, with SRI, compressed as accepted); and its OAuth client, which the gateway declares and holds to
// every rule a registered client meets, and one more: its one redirect URI compared exactly.
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONSOLE_STATIC_DIR, consoleBundleLoader, preferredEncoding } from '../../src/console/bundle.ts';
import { landingPage } from '../../src/console/pages.ts';
import { CONSOLE_CLIENT_ID } from '../../src/oauth/console-client.ts';
import * as oauthStore from '../../src/oauth/store.ts';
import { authorizeQuery, authorizeRaw, obtainCode, pkcePair, startConsent, token, tokenParams } from '../oauth/helpers.ts';
import { startTestGateway } from '../support/gateway.ts';
import { startWorld, type World } from '../support/world.ts';

/** The compressed size the console must stay under (it is about 26 KB: see docs/decisions.md, "Console"). */
const BUNDLE_BROTLI_BYTES_MAX = 40 * 1024;

let world: World;
let url: string;
let callback: string;

beforeAll(async () => {
  world = await startWorld();
  url = world.url;
  callback = `${url}/console/callback`;
});
afterAll(async () => {
  await world.close();
});

function directives(policy: string): Map<string, string> {
  return new Map(policy.split(';').map((part) => part.trim().split(/\s+/)).map(([name, ...values]) => [name!, values.join(' ')]));
}

async function shell(pathname = '/console') {
  const res = await fetch(`${url}${pathname}`);
  return { status: res.status, headers: res.headers, html: await res.text() };
}

function settingsOf(html: string): Record<string, unknown> {
  const content = /<meta name="acg-console" content="([^"]*)">/.exec(html)![1]!;
  return JSON.parse(content.replace(/&#(\d+);/g, (_m, code: string) => String.fromCharCode(Number(code))));
}

describe("the console's page", () => {
  it('answers every path under /console with the same shell, whose policy allows no inline code, requires Trusted Types and forbids framing', async () => {
    const answers = await Promise.all(['/console', '/console/agents/agt_anything', '/console/callback?code=x&state=y&iss=z'].map((p) => shell(p)));
    for (const { status, headers, html } of answers) {
      expect(status).toBe(200);
      expect(html).toBe(answers[0]!.html);
      const csp = directives(headers.get('content-security-policy')!);
      expect(Object.fromEntries(csp)).toEqual({
        'default-src': "'none'",
        'script-src': "'self'",
        'style-src': "'self'",
        'connect-src': "'self'",
        'img-src': "'self'",
        'form-action': "'none'",
        'base-uri': "'none'",
        'frame-ancestors': "'none'",
        'require-trusted-types-for': "'script'",
        'trusted-types': "'none'",
      });
      expect(headers.get('x-frame-options')).toBe('DENY');
      expect(headers.get('referrer-policy')).toBe('no-referrer');
      expect(headers.get('x-content-type-options')).toBe('nosniff');
      expect(headers.get('cache-control')).toBe('no-store');
    }
  });

  it('is at least as strict as the consent page: every directive the consent page sets, no inline allowance the consent page has', async () => {
    const pkce = pkcePair();
    const pending = await startConsent(url, { client_id: CONSOLE_CLIENT_ID, redirect_uri: callback, code_challenge: pkce.challenge, resource: url, scope: 'svc:owner' });
    // The gateway's own client: its page is not marked as a developer's application.
    expect(pending.html).toContain('<h1><strong>Agent Credit Gateway console</strong> wants access');
    expect(pending.html).not.toContain('registered by its own developer');
    const consent = await fetch(`${url}/oauth/consent?request_id=${pending.requestId}`, { headers: { cookie: pending.cookie } });
    const consentPolicy = directives(consent.headers.get('content-security-policy')!);
    const consolePolicy = directives((await shell()).headers.get('content-security-policy')!);
    for (const [name, value] of consentPolicy) {
      const ours = consolePolicy.get(name)!;
      // The consent page allows its one inline script and style by nonce; the console allows no inline code at all.
      expect(ours, name).toBe(value.startsWith("'nonce-") ? "'self'" : value);
    }
    for (const header of ['x-frame-options', 'referrer-policy', 'x-content-type-options', 'cache-control']) {
      expect((await shell()).headers.get(header), header).toBe(consent.headers.get(header));
    }
  });

  it('carries no inline script, style or event handler: one script and one style sheet of this origin, each with its SRI hash', async () => {
    const { html } = await shell();
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts).toHaveLength(1);
    expect(scripts[0]![2]).toBe('');
    expect(scripts[0]![1]).toMatch(/ src="\/console\/static\/console-[\w-]{12}\.js" integrity="sha384-[\w+/=]+"/);
    expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i);
    expect(html).toMatch(/<link rel="stylesheet" href="\/console\/static\/console-[\w-]{12}\.css" integrity="sha384-[\w+/=]+">/);
  });

  it('tells its script this gateway: the client, its exact redirect URI, the API as resource; no secret', async () => {
    expect(settingsOf((await shell()).html)).toEqual({
      issuer: url,
      clientId: CONSOLE_CLIENT_ID,
      redirectUri: callback,
      resource: url,
      authorizationEndpoint: `${url}/oauth/authorize`,
      tokenEndpoint: `${url}/oauth/token`,
      revocationEndpoint: `${url}/oauth/revoke`,
      jwksUri: `${url}/.well-known/jwks.json`,
      agentIssuer: world.agentIssuer.issuer,
      mode: 'dev',
      humanSignIn: { kind: 'token', issuer: world.human.issuer },
    });
  });
});

describe("the console's built files", () => {
  it('are served by content name, compressed as the request accepts, cached for good, and match their SRI hashes', async () => {
    const { html } = await shell();
    for (const [, file, integrity] of html.matchAll(/(?:src|href)="(\/console\/static\/[^"]+)" integrity="([^"]+)"/g)) {
      const plain = await fetch(`${url}${file}`, { headers: { 'accept-encoding': 'identity' } });
      const bytes = Buffer.from(await plain.arrayBuffer());
      expect(plain.headers.get('content-encoding')).toBeNull();
      expect(plain.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      expect(plain.headers.get('x-content-type-options')).toBe('nosniff');
      expect(plain.headers.get('content-type')).toBe(file!.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8');
      expect(`sha384-${createHash('sha384').update(bytes).digest('base64')}`).toBe(integrity);
      // Node's fetch decodes what it is sent, so the raw bodies are read through the gateway's own routing.
      for (const [encoding, decode] of [['br', brotliDecompressSync], ['gzip', gunzipSync]] as const) {
        const compressed = await world.gw.app.inject({ method: 'GET', url: file!, headers: { 'accept-encoding': `${encoding}, identity;q=0.5` } });
        expect(compressed.headers['content-encoding']).toBe(encoding);
        expect(compressed.headers.vary).toBe('accept-encoding');
        expect(decode(compressed.rawPayload).equals(bytes)).toBe(true);
      }
    }
  });

  it('stay small: the script and style sheet together under 40 KB with brotli', async () => {
    const { html } = await shell();
    let total = 0;
    for (const [, file] of html.matchAll(/(?:src|href)="(\/console\/static\/[^"]+)"/g)) {
      total += (await world.gw.app.inject({ method: 'GET', url: file!, headers: { 'accept-encoding': 'br' } })).rawPayload.length;
    }
    expect(total).toBeLessThan(BUNDLE_BROTLI_BYTES_MAX);
  });

  it('answer 404 for any other name', async () => {
    for (const name of ['console-aaaaaaaaaaaa.js', 'manifest.json', 'build-state.json', '..%2F..%2Fpackage.json', 'console-aaaaaaaaaaaa.js.br']) {
      const res = await fetch(`${url}/console/static/${name}`);
      expect([400, 404], name).toContain(res.status);
    }
  });

  it('are picked by the best encoding the request accepts', () => {
    expect(preferredEncoding('gzip, deflate, br')).toBe('br');
    expect(preferredEncoding('gzip;q=1, br;q=0')).toBe('gzip');
    expect(preferredEncoding('*')).toBe('br');
    expect(preferredEncoding('identity')).toBe('identity');
    expect(preferredEncoding(undefined)).toBe('identity');
  });

  it('are read once built: before, /console says it is not built, and a build made while the gateway runs is found', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'acg-console-static-'));
    try {
      const load = consoleBundleLoader(dir);
      expect(await load()).toBeUndefined();
      const real = consoleBundleLoader(CONSOLE_STATIC_DIR);
      const built = (await real())!;
      const manifest = { files: Object.fromEntries([...built.assets].map(([file, asset]) => [file, asset.contentType.startsWith('text/css') ? 'style' : 'script'])) } as Record<string, unknown>;
      for (const [file, asset] of built.assets) {
        writeFileSync(path.join(dir, file), asset.bodies.identity);
        writeFileSync(path.join(dir, `${file}.gz`), asset.bodies.gzip);
        writeFileSync(path.join(dir, `${file}.br`), asset.bodies.br);
      }
      manifest.script = { file: built.script.path.split('/').pop(), integrity: built.script.integrity };
      manifest.style = { file: built.style.path.split('/').pop(), integrity: built.style.integrity };
      writeFileSync(path.join(dir, 'manifest.json'), JSON.stringify(manifest));
      expect((await load())?.script).toEqual(built.script);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the landing page', () => {
  it('in dev mode links the console, the API reference, the error catalogue and the MCP setup', async () => {
    const res = await fetch(`${url}/`);
    const html = await res.text();
    expect(res.status).toBe(200);
    expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    for (const link of ['href="/console"', 'href="/docs"', 'href="/docs/errors"', 'href="#mcp"']) expect(html).toContain(link);
    expect(html).toContain(`claude mcp add --transport http agent-credit-gateway ${url}/mcp`);
  });

  it('in live mode links only the console and the API reference', () => {
    const html = landingPage('n', { baseUrl: 'https://gateway.example.com', mode: 'live' });
    expect([...html.matchAll(/href="([^"]+)"/g)].map((m) => m[1])).toEqual(['/console', '/docs', '/openapi.json']);
  });
});

describe('transport and credential headers (found from outside)', () => {
  it('a live gateway served over https holds browsers to https (HSTS); over http, and in dev mode, it says nothing of it', async () => {
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com' } });
    const liveHttp = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1' } });
    const devHttps = await startTestGateway({ env: { ACG_BASE_URL: 'https://localhost:8443' } });
    try {
      // A refusal Fastify raises before any route (a bad percent-encoding in the path) too, with its request id and
      // nosniff (found from outside: it carried none of the three).
      for (const pathname of ['/console', '/healthz', '/v1/me', '/oauth/authorize', '/%', '/payments/purchases/%E0%A4%A']) {
        const res = await fetch(`${live.url}${pathname}`);
        expect(res.headers.get('strict-transport-security'), pathname).toBe('max-age=63072000');
        expect([res.headers.get('x-content-type-options'), res.headers.get('x-request-id')], pathname).toEqual(['nosniff', expect.any(String)]);
      }
      // Dev mode over https too: HSTS for a dev host such as localhost would hold every other local server to https.
      for (const gateway of [liveHttp, devHttps]) expect((await fetch(`${gateway.url}/console`)).headers.get('strict-transport-security')).toBeNull();
      expect((await fetch(`${url}/console`)).headers.get('strict-transport-security')).toBeNull();
    } finally {
      await Promise.all([live.close(), liveHttp.close(), devHttps.close()]);
    }
  });

  it("the dev issuer's login answer, a token, is kept by no cache, though its request carries no credential", async () => {
    // A gateway with the built-in issuers (the world configures its own).
    const dev = await startTestGateway();
    try {
      const res = await fetch(`${dev.url}/dev/issuers/human/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'cache@example.com' }) });
      expect(res.status).toBe(200);
      expect((await res.json()).token).toMatch(/^eyJ/);
      expect([res.headers.get('cache-control'), res.headers.get('pragma')]).toEqual(['no-store', 'no-cache']);
    } finally {
      await dev.close();
    }
  });
});

describe("the gateway's icon", () => {
  it('answers /favicon.ico with a 32×32 PNG, so no page of this origin logs a 404 for it', async () => {
    const res = await fetch(`${url}/favicon.ico`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('image/png');
    expect(res.headers.get('cache-control')).toBe('public, max-age=86400');
    const png = Buffer.from(await res.arrayBuffer());
    expect(png.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    expect([png.toString('latin1', 12, 16), png.readUInt32BE(16), png.readUInt32BE(20), png[24], png[25]]).toEqual(['IHDR', 32, 32, 8, 6]);
    // Its pixels: one filter byte and 32 RGBA pixels a row, the corners transparent and the middle of the ring opaque.
    const idat = png.indexOf('IDAT', 0, 'latin1');
    const pixels = inflateSync(png.subarray(idat + 4, idat + 4 + png.readUInt32BE(idat - 4)));
    expect(pixels.length).toBe(32 * (1 + 32 * 4));
    const alpha = (x: number, y: number) => pixels[y * (1 + 32 * 4) + 1 + x * 4 + 3];
    expect([alpha(0, 0), alpha(31, 31), alpha(16, 16)]).toEqual([0, 0, 255]);
  });
});

describe("the console's OAuth client", () => {
  it('is declared by the gateway: public, svc:owner only, one redirect URI, and never purged as unused', async () => {
    const { rows } = await world.gw.gateway.db.query<{ scope: string; redirect_uris: string[]; client_name: string }>('SELECT * FROM oauth_clients WHERE id = $1', [CONSOLE_CLIENT_ID]);
    expect(rows[0]).toMatchObject({ scope: 'svc:owner', client_name: 'Agent Credit Gateway console' });
    await world.gw.gateway.db.transaction((tx) => oauthStore.purgeUnusedClients(tx, world.gw.clock.nowS() + 10 * 86_400, CONSOLE_CLIENT_ID));
    expect((await world.gw.gateway.db.query('SELECT id FROM oauth_clients WHERE id = $1', [CONSOLE_CLIENT_ID])).rows).toHaveLength(1);
  });

  it('accepts only its exact redirect URI: another port, path, case, a trailing slash or a query is shown an error page, never redirected', async () => {
    const port = new URL(url).port;
    const wrong = [
      callback.replace(`:${port}`, `:${Number(port) === 9 ? 10 : 9}`),
      `${callback}/`,
      `${callback}?next=/`,
      callback.replace('/callback', '/Callback'),
      callback.replace('127.0.0.1', 'localhost'),
      `${url}/console`,
    ];
    const { challenge } = pkcePair();
    for (const redirect of wrong) {
      const answer = await authorizeRaw(url, authorizeQuery({ response_type: 'code', client_id: CONSOLE_CLIENT_ID, redirect_uri: redirect, code_challenge: challenge, code_challenge_method: 'S256', resource: url, state: 's' }));
      expect(answer.status, redirect).toBe(400);
      expect(answer.location, redirect).toBeNull();
      expect(answer.html, redirect).toContain('invalid_redirect_uri');
    }
  });

  it('needs PKCE S256, its own scope and one of our resources, and echoes state and iss on every refusal, as any client does', async () => {
    const base = { response_type: 'code', client_id: CONSOLE_CLIENT_ID, redirect_uri: callback, state: 'st-9', resource: url };
    const { challenge } = pkcePair();
    const cases: Array<[Record<string, string>, string]> = [
      [{ ...base }, 'invalid_request'],
      [{ ...base, code_challenge: challenge, code_challenge_method: 'plain' }, 'invalid_request'],
      [{ ...base, code_challenge: challenge, code_challenge_method: 'S256', scope: 'svc:agent' }, 'invalid_scope'],
      [{ ...base, code_challenge: challenge, code_challenge_method: 'S256', resource: 'https://elsewhere.example' }, 'invalid_target'],
    ];
    for (const [params, error] of cases) {
      const answer = await authorizeRaw(url, authorizeQuery(params));
      expect(answer.status).toBe(303);
      const location = new URL(answer.location!);
      expect(`${location.origin}${location.pathname}`).toBe(callback);
      expect(Object.fromEntries(location.searchParams)).toMatchObject({ error, state: 'st-9', iss: url });
    }
  });

  it('is issued an owner token only for the code, its verifier and its exact redirect URI, once', async () => {
    const owner = await world.humanToken('console-client@example.com');
    const issued = await obtainCode(url, 'human', owner, { clientId: CONSOLE_CLIENT_ID, redirectUri: callback, scope: 'svc:owner' });
    expect(issued.callback.searchParams.get('iss')).toBe(url);
    expect(issued.callback.searchParams.get('state')).toBe('st-1');
    expect((await token(url, { ...tokenParams(issued), code_verifier: pkcePair().verifier })).body.error).toBe('invalid_grant');
    expect((await token(url, { ...tokenParams(issued), redirect_uri: `${callback}/` })).body.error).toBe('invalid_grant');
    const granted = await token(url, tokenParams(issued));
    expect(granted.status).toBe(200);
    expect(granted.body).toMatchObject({ token_type: 'Bearer', scope: 'svc:owner', expires_in: 600 });
    expect((await token(url, tokenParams(issued))).body.error).toBe('invalid_grant');
  });
});
