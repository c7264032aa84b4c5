import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { CLIENTS_MAX, REGISTRATIONS_PER_ADDRESS_PER_WINDOW } from '../../src/oauth/limits.ts';

let gw: TestGateway;
let addressCounter = 0;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw.close());

/** Each call comes from a fresh address, so the per-address limit never interferes unless a test wants it. */
async function registerFrom(body: unknown, options: { address?: string; contentType?: string; raw?: string } = {}) {
  addressCounter += 1;
  const res = await gw.app.inject({
    method: 'POST',
    url: '/oauth/register',
    remoteAddress: options.address ?? `10.${(addressCounter >> 16) & 255}.${(addressCounter >> 8) & 255}.${addressCounter & 255}`,
    headers: { 'content-type': options.contentType ?? 'application/json' },
    payload: options.raw ?? JSON.stringify(body),
  });
  return { status: res.statusCode, headers: res.headers, body: res.json() };
}

const good = { redirect_uris: ['https://app.example/callback'] };

describe('POST /oauth/register accepts', () => {
  it('a public client and answers 201 with the registration record, never cached', async () => {
    const issuedFrom = gw.clock.nowS();
    const res = await registerFrom({ ...good, client_name: 'Example', token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], response_types: ['code'] });
    const issuedBy = gw.clock.nowS();
    expect(res.status).toBe(201);
    // The registration's second: a busy machine may cross a second boundary during the request.
    expect(res.body.client_id_issued_at).toBeGreaterThanOrEqual(issuedFrom);
    expect(res.body.client_id_issued_at).toBeLessThanOrEqual(issuedBy);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toEqual({
      client_id: expect.stringMatching(/^cli_[a-z2-7]{26}$/),
      client_id_issued_at: res.body.client_id_issued_at,
      client_name: 'Example',
      redirect_uris: ['https://app.example/callback'],
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code'],
      response_types: ['code'],
    });
    expect(res.body.client_secret).toBeUndefined();
  });

  it('the metadata MCP clients send (grant_types with refresh_token), registered with the code grant alone', async () => {
    const res = await registerFrom({
      redirect_uris: ['http://127.0.0.1:33418/callback'],
      client_name: 'MCP Inspector',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ client_name: 'MCP Inspector', grant_types: ['authorization_code'], token_endpoint_auth_method: 'none' });
  });

  it('names in any script and with accents, when they do not read as the gateway\'s', async () => {
    for (const name of ['Москва агент', 'Αθήνα Gateway', 'Café Crédit', 'Agent Credit Tools', 'ᏣᎳᎩ Gateway']) {
      const res = await registerFrom({ ...good, client_name: name });
      expect(res.status, name).toBe(201);
      expect(res.body.client_name).toBe(name);
    }
  });

  it('loopback http redirect URIs (127.0.0.1, [::1], localhost) and up to ten URIs', async () => {
    const uris = ['http://127.0.0.1/cb', 'http://127.0.0.1:3000/callback', 'http://[::1]:8080/cb', 'http://localhost:1234/cb', 'https://a.example/cb?x=1'];
    const res = await registerFrom({ redirect_uris: [...uris, ...Array.from({ length: 5 }, (_, i) => `https://a.example/${i}`)] });
    expect(res.status).toBe(201);
    expect(res.body.redirect_uris.slice(0, 5)).toEqual(uris);
  });

  it('a redirect URI listed twice, registered once, as node-oidc-provider does (found from outside: stored and echoed twice)', async () => {
    const res = await registerFrom({ redirect_uris: ['https://a.example/cb', 'https://a.example/other', 'https://a.example/cb'] });
    expect(res.status).toBe(201);
    expect(res.body.redirect_uris).toEqual(['https://a.example/cb', 'https://a.example/other']);
  });

  it('ignores unknown metadata and never echoes it', async () => {
    const res = await registerFrom({ ...good, logo_uri: 'https://evil.example/x.png', software_id: 'abc', contacts: ['a@b.c'] });
    expect(res.status).toBe(201);
    expect(res.body).not.toHaveProperty('logo_uri');
    expect(res.body).not.toHaveProperty('software_id');
  });

  it('a scope limit of our scopes and echoes it', async () => {
    const res = await registerFrom({ ...good, scope: 'svc:agent' });
    expect(res.status).toBe(201);
    expect(res.body.scope).toBe('svc:agent');
  });
});

describe('POST /oauth/register refuses', () => {
  const long = `https://a.example/${'x'.repeat(2000)}`;
  const cases: Array<[string, unknown, string]> = [
    ['no redirect_uris', { client_name: 'x' }, 'invalid_redirect_uri'],
    ['redirect_uris not an array', { redirect_uris: 'https://a.example/cb' }, 'invalid_redirect_uri'],
    ['zero redirect URIs', { redirect_uris: [] }, 'invalid_redirect_uri'],
    ['eleven redirect URIs', { redirect_uris: Array.from({ length: 11 }, (_, i) => `https://a.example/${i}`) }, 'invalid_redirect_uri'],
    ['a non-string redirect URI', { redirect_uris: [42] }, 'invalid_redirect_uri'],
    ['plain http off loopback', { redirect_uris: ['http://app.example/cb'] }, 'invalid_redirect_uri'],
    ['a lookalike loopback host', { redirect_uris: ['http://127.0.0.1.evil.example/cb'] }, 'invalid_redirect_uri'],
    ['a fragment', { redirect_uris: ['https://a.example/cb#frag'] }, 'invalid_redirect_uri'],
    ['an empty fragment', { redirect_uris: ['https://a.example/cb#'] }, 'invalid_redirect_uri'],
    ['credentials', { redirect_uris: ['https://user:pass@a.example/cb'] }, 'invalid_redirect_uri'],
    ['a user name', { redirect_uris: ['https://user@a.example/cb'] }, 'invalid_redirect_uri'],
    ['a javascript: URI', { redirect_uris: ['javascript:alert(1)'] }, 'invalid_redirect_uri'],
    ['a data: URI', { redirect_uris: ['data:text/html,hi'] }, 'invalid_redirect_uri'],
    ['a file: URI', { redirect_uris: ['file:///etc/passwd'] }, 'invalid_redirect_uri'],
    ['a custom scheme', { redirect_uris: ['com.example.app:/cb'] }, 'invalid_redirect_uri'],
    ['a relative URI', { redirect_uris: ['/callback'] }, 'invalid_redirect_uri'],
    ['whitespace', { redirect_uris: [' https://a.example/cb'] }, 'invalid_redirect_uri'],
    ['an over-long URI', { redirect_uris: [long] }, 'invalid_redirect_uri'],
    // Each reads as another URI than the one written, where the code would go: https://cb/, …/c/b, …/cb.
    ['an empty host', { redirect_uris: ['https:///cb'] }, 'invalid_redirect_uri'],
    ['a backslash', { redirect_uris: ['https://a.example/c\\b'] }, 'invalid_redirect_uri'],
    ['a dot segment', { redirect_uris: ['https://a.example/a/../cb'] }, 'invalid_redirect_uri'],
    ['a percent-encoded host', { redirect_uris: ['https://a%2eexample/cb'] }, 'invalid_redirect_uri'],
    ['a loopback address in another notation', { redirect_uris: ['http://0x7f000001/cb'] }, 'invalid_redirect_uri'],
    // Port 0 is no port a client listens on; its authorization answered 5xx after storing a code (found from outside).
    ['port 0 on a loopback address', { redirect_uris: ['http://127.0.0.1:0/cb'] }, 'invalid_redirect_uri'],
    ['port 0 over https', { redirect_uris: ['https://a.example:0/cb'] }, 'invalid_redirect_uri'],
    // The redirect adds these itself: `error=x` in the query made every successful sign-in an error (found from outside, bb119).
    ...['code', 'state', 'iss', 'error', 'error_description', 'error_uri'].map((name): [string, unknown, string] =>
      [`${name} in a redirect URI's query`, { redirect_uris: [`https://a.example/cb?a=1&${name}=x`] }, 'invalid_redirect_uri']),
    ['a response parameter\'s name percent-encoded in the query', { redirect_uris: ['https://a.example/cb?st%61te'] }, 'invalid_redirect_uri'],
    ['a 121-character client_name', { ...good, client_name: 'n'.repeat(121) }, 'invalid_client_metadata'],
    ['an empty client_name', { ...good, client_name: '' }, 'invalid_client_metadata'],
    ['a client_name of white space alone', { ...good, client_name: '   ' }, 'invalid_client_metadata'],
    ['a client_name of invisible characters alone', { ...good, client_name: '\u3164\u200b\u2800' }, 'invalid_client_metadata'],
    ['control characters in client_name', { ...good, client_name: 'a\u0007b' }, 'invalid_client_metadata'],
    ['a NUL or a bidi override in client_name', { ...good, client_name: 'a\u0000b\u202e' }, 'invalid_client_metadata'],
    // The consent page would read as the gateway's own console (found from outside: a phishing client got an owner token).
    ['the console\'s own name', { ...good, client_name: 'Agent Credit Gateway console' }, 'invalid_client_metadata'],
    ['the gateway\'s name in other case, spacing and width', { ...good, client_name: 'ＡＧＥＮＴ credit-gateway (official)' }, 'invalid_client_metadata'],
    // Look-alike letters of other scripts, and accents (found from outside: each registered, and its consent page opened with it).
    ['the gateway\'s name with a Cyrillic А', { ...good, client_name: '\u0410gent Credit Gateway console' }, 'invalid_client_metadata'],
    ['the gateway\'s name with a Cyrillic е', { ...good, client_name: 'Agent Credit Gat\u0435way' }, 'invalid_client_metadata'],
    ['the gateway\'s name with a combining accent', { ...good, client_name: 'Agent Credit Gatewa\u0301y console' }, 'invalid_client_metadata'],
    ['the gateway\'s name in Greek and Cherokee capitals', { ...good, client_name: '\u0391GE\u039d\u03a4 \u13DFREDIT GATEWAY' }, 'invalid_client_metadata'],
    ['the gateway\'s name with a lower-case l for the I', { ...good, client_name: 'AGENT CREDlT GATEWAY' }, 'invalid_client_metadata'],
    ['the gateway\'s name with VV for the W, and a 1 for the I', { ...good, client_name: 'Agent Cred1t GATEVVAY' }, 'invalid_client_metadata'],
    ['the gateway\'s name in Lisu capitals', { ...good, client_name: '\ua4ee\ua4d6\ua4f0\ua4e0\ua4d4 \ua4da\ua4e3\ua4f0\ua4d3I\ua4d4 \ua4d6\ua4ee\ua4d4\ua4f0\ua4ea\ua4ee\ua4ec' }, 'invalid_client_metadata'],
    ['the gateway\'s name in small capitals', { ...good, client_name: '\u1d00\u0262\u1d07\u0274\u1d1b \u1d04\u0280\u1d07\u1d05\u026a\u1d1b \u0262\u1d00\u1d1b\u1d07\u1d21\u1d00\u028f' }, 'invalid_client_metadata'],
    ['the gateway\'s name with a Hangul filler for a space', { ...good, client_name: 'Agent\u3164Credit Gateway' }, 'invalid_client_metadata'],
    ['the gateway\'s name with a regional indicator, Armenian and Coptic letters', { ...good, client_name: '\u{1F1E6}gent Credit Gate\u0561ay \u2c9a' }, 'invalid_client_metadata'],
    ['a non-string client_name', { ...good, client_name: 7 }, 'invalid_client_metadata'],
    ['client_secret_basic', { ...good, token_endpoint_auth_method: 'client_secret_basic' }, 'invalid_client_metadata'],
    ['private_key_jwt', { ...good, token_endpoint_auth_method: 'private_key_jwt' }, 'invalid_client_metadata'],
    ['a refresh_token grant alone', { ...good, grant_types: ['refresh_token'] }, 'invalid_client_metadata'],
    ['a grant listed twice', { ...good, grant_types: ['authorization_code', 'authorization_code'] }, 'invalid_client_metadata'],
    ['the client credentials grant beside the code', { ...good, grant_types: ['authorization_code', 'client_credentials'] }, 'invalid_client_metadata'],
    ['the implicit grant', { ...good, grant_types: ['implicit'] }, 'invalid_client_metadata'],
    ['grant_types not an array', { ...good, grant_types: 'authorization_code' }, 'invalid_client_metadata'],
    ['response_type token', { ...good, response_types: ['token'] }, 'invalid_client_metadata'],
    ['a client secret', { ...good, client_secret: 's3cret' }, 'invalid_client_metadata'],
    ['a jwks_uri', { ...good, jwks_uri: 'https://a.example/jwks' }, 'invalid_client_metadata'],
    ['a scope we do not issue', { ...good, scope: 'openid svc:agent' }, 'invalid_client_metadata'],
    ['a JSON array body', [good], 'invalid_client_metadata'],
    ['a JSON string body', 'hello', 'invalid_client_metadata'],
  ];
  for (const [name, body, error] of cases) {
    it(`${name} with 400 ${error}`, async () => {
      const res = await registerFrom(body);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ error, error_description: expect.any(String) });
    });
  }

  it('names a member one way whichever check refuses it, as OAuth names parameters (found from outside, bb119: `body/client_name …` beside `redirect_uris[0] …`)', async () => {
    const refusals: Array<[unknown, string] | [string, string, 'raw']> = [
      [{ redirect_uris: ['https://a.example/cb', 'http://a.example/cb'] }, 'redirect_uris[1] must use https'],
      [{ ...good, client_name: 'a\u0007b' }, 'client_name holds a control character'],
      [{ redirect_uris: ['https://a.example/cb', 'https://a.example/\u202e'] }, 'redirect_uris[1] holds a control character'],
      [{ ...good, extra: { list: ['ok', 'a\u0000'] } }, 'extra.list[1] holds a control character'],
      ['a\u0000', 'body holds a control character'],
      ['{"redirect_uris": ["https://a.example/cb"], "client_name": "a", "client_name": "b"}', 'client_name appears twice in one object', 'raw'],
    ];
    for (const [body, start, raw] of refusals) {
      const res = raw ? await registerFrom(undefined, { raw: body as string }) : await registerFrom(body);
      expect([res.status, res.body.error_description.slice(0, start.length)]).toEqual([400, start]);
    }
  });

  it('malformed JSON with 400 invalid_request', async () => {
    const res = await registerFrom(undefined, { raw: '{"redirect_uris": [' });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
  });

  it('a form body with 415 invalid_request', async () => {
    const res = await registerFrom(undefined, { contentType: 'application/x-www-form-urlencoded', raw: 'redirect_uris=https%3A%2F%2Fa.example%2Fcb' });
    expect(res.status).toBe(415);
    expect(res.body.error).toBe('invalid_request');
  });

  it(`more than ${REGISTRATIONS_PER_ADDRESS_PER_WINDOW} registration requests from one address per window, refused ones too, with 429 temporarily_unavailable that says so (found from outside: "registrations" when none had succeeded)`, async () => {
    const address = '203.0.113.7';
    // The windows are fixed: begin at the start of one, so no boundary falls between these registrations.
    const windowMs = gw.config.rateLimit.windowS * 1000;
    gw.clock.advance(windowMs - (gw.clock.nowMs() % windowMs));
    expect((await registerFrom({ redirect_uris: [] }, { address })).status).toBe(400);
    for (let i = 1; i < REGISTRATIONS_PER_ADDRESS_PER_WINDOW; i++) expect((await registerFrom(good, { address })).status).toBe(201);
    const refused = await registerFrom(good, { address });
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({
      error: 'temporarily_unavailable',
      error_description: `more than ${REGISTRATIONS_PER_ADDRESS_PER_WINDOW} registration requests from this address (${address}) in ${gw.config.rateLimit.windowS} s (refused ones count too)`,
    });
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect((await registerFrom(good, { address: '203.0.113.8' })).status).toBe(201);
    gw.clock.advance(gw.config.rateLimit.windowS * 1000);
    expect((await registerFrom(good, { address })).status).toBe(201);
  });

  it(`a client beyond ${CLIENTS_MAX} with 429 temporarily_unavailable, until unused clients are a day old`, async () => {
    const { db } = gw.gateway;
    const nowS = gw.clock.nowS();
    // The console's declared client is not one of them (found from outside: the 1,000th registration was refused).
    expect((await db.query('SELECT 1 FROM oauth_clients WHERE id = $1', ['acg-console'])).rows).toHaveLength(1);
    const { rows } = await db.query<{ n: bigint }>("SELECT count(*)::bigint AS n FROM oauth_clients WHERE id <> 'acg-console'");
    const fill = CLIENTS_MAX - 1 - Number(rows[0]!.n);
    await db.query(
      `INSERT INTO oauth_clients (id, redirect_uris, created_at_s) SELECT 'cli_fill_' || g, '["https://a.example/cb"]', $1 FROM generate_series(1, $2::int) g`,
      [nowS, fill],
    );
    const last = await registerFrom(good);
    expect(last.status).toBe(201);
    await db.query("UPDATE oauth_clients SET id = 'cli_fill_last' WHERE id = $1", [last.body.client_id]);
    const refused = await registerFrom(good);
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({ error: 'temporarily_unavailable', error_description: expect.stringContaining('1000') });
    // Clients that never obtained a token are purged once they are a day old, making room again.
    await db.query("UPDATE oauth_clients SET created_at_s = created_at_s - 86401 WHERE id LIKE 'cli_fill_%'");
    expect((await registerFrom(good)).status).toBe(201);
    await db.query("DELETE FROM oauth_clients WHERE id LIKE 'cli_fill_%'");
  });
});

// An oracle written from the spec, independent of the implementation: what a registrable client is.
function breaksRules(body: unknown): boolean {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return true;
  const b = body as Record<string, unknown>;
  const uris = b.redirect_uris;
  if (!Array.isArray(uris) || uris.length < 1 || uris.length > 10) return true;
  for (const uri of uris) {
    if (typeof uri !== 'string' || uri.length > 2000 || uri.includes('#') || /\s/.test(uri)) return true;
    let url: URL;
    try {
      url = new URL(uri);
    } catch {
      return true;
    }
    if (url.username || url.password || /^[a-z]+:\/\/[^/?]*@/i.test(uri)) return true;
    const loopback = ['127.0.0.1', '[::1]', 'localhost'].includes(url.hostname);
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) return true;
  }
  if (b.client_name !== undefined && (typeof b.client_name !== 'string' || /^\s*$/u.test(b.client_name) || [...b.client_name].length > 120)) return true;
  if (b.token_endpoint_auth_method !== undefined && b.token_endpoint_auth_method !== 'none') return true;
  const grants = b.grant_types;
  if (grants !== undefined && !['["authorization_code"]', '["authorization_code","refresh_token"]', '["refresh_token","authorization_code"]'].includes(JSON.stringify(grants))) return true;
  if (b.response_types !== undefined && JSON.stringify(b.response_types) !== '["code"]') return true;
  return ['client_secret', 'jwks', 'jwks_uri'].some((m) => b[m] !== undefined);
}

const tricky = fc.constantFrom(
  'https://a.example/cb', 'http://127.0.0.1/cb', 'http://localhost:8080/x', 'http://[::1]/', 'http://127.0.0.1.evil.com/',
  'http://[::ffff:127.0.0.1]/', 'http://2130706433/', 'http://0177.0.0.1/', 'https://u:p@a.example/', 'https://a.example/#',
  'HTTPS://A.EXAMPLE/cb', 'https:a.example', 'https:\\\\a.example\\cb', 'javascript://a.example/%0aalert(1)', 'data:,x',
  'http://localhost./cb', 'https://a.example/cb?next=https://evil.example', 'http://127.0.0.1:99999/', 'https://[fe80::1%25eth0]/',
  'https://xn--80ak6aa92e.com/', 'https://a.example/\u0000', 'vbscript:x', 'blob:https://a.example/1', 'https://@a.example/',
);
const uri = fc.oneof(
  tricky,
  fc.webUrl({ withFragments: true, withQueryParameters: true }),
  fc.tuple(fc.constantFrom('http', 'https', 'HTTP', 'ftp', 'javascript'), fc.constantFrom('127.0.0.1', 'localhost', '[::1]', 'a.example', 'u@a.example', '10.0.0.1'), fc.string())
    .map(([scheme, host, rest]) => `${scheme}://${host}/${rest}`),
  fc.string(),
);
const metadata = fc.record(
  {
    redirect_uris: fc.oneof(fc.array(uri, { minLength: 0, maxLength: 12 }), fc.anything()),
    client_name: fc.oneof(fc.string({ maxLength: 130 }), fc.anything()),
    token_endpoint_auth_method: fc.constantFrom('none', 'client_secret_basic', 'private_key_jwt', 7, null),
    grant_types: fc.oneof(fc.constant(['authorization_code']), fc.array(fc.constantFrom('authorization_code', 'refresh_token', 'implicit')), fc.anything()),
    response_types: fc.oneof(fc.constant(['code']), fc.array(fc.constantFrom('code', 'token')), fc.anything()),
    client_secret: fc.string(),
    jwks_uri: fc.webUrl(),
    extra: fc.anything(),
  },
  { requiredKeys: [] },
);

// Close to valid: mostly good URIs and names, so the accepting side is reached as often as the refusing one.
const nearlyValid = fc.record(
  {
    redirect_uris: fc.array(
      fc.oneof(
        { arbitrary: tricky, weight: 1 },
        {
          arbitrary: fc.tuple(fc.constantFrom('http://127.0.0.1', 'http://[::1]:8080', 'http://localhost:3000', 'https://a.example'), fc.webPath(), fc.webQueryParameters())
            .map(([origin, path, query]) => `${origin}${path}${query ? `?${query}` : ''}`),
          weight: 4,
        },
      ),
      { minLength: 1, maxLength: 11 },
    ),
    client_name: fc.string({ minLength: 0, maxLength: 125, unit: 'grapheme' }),
    token_endpoint_auth_method: fc.constantFrom('none', 'client_secret_post'),
    grant_types: fc.constantFrom(['authorization_code'], ['refresh_token']),
  },
  { requiredKeys: ['redirect_uris'] },
);

describe('registration fuzzing', () => {
  it('never answers 5xx and never accepts a client that breaks a rule', async () => {
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(fc.oneof(nearlyValid, metadata, fc.anything()), async (body) => {
        const raw = JSON.stringify(body);
        if (raw === undefined) return;
        const res = await registerFrom(undefined, { raw });
        expect(res.status).toBeLessThan(500);
        if (res.status === 201) {
          accepted += 1;
          expect(breaksRules(JSON.parse(raw))).toBe(false);
        } else {
          expect(res.status).toBe(400);
          expect(['invalid_redirect_uri', 'invalid_client_metadata', 'invalid_request']).toContain(res.body.error);
        }
      }),
      // A registrable client is always among the runs, whatever the seed draws.
      { numRuns: 400, examples: [[{ redirect_uris: ['https://a.example/cb'], client_name: 'Fuzz' }]] },
    );
    // The generator must reach the accepting side too, or the property says little.
    expect(accepted).toBeGreaterThan(0);
  });
});
