// Yes-or-no settings (src/platform/config.ts, `flag`): 1 or true, 0 or false, unset for the default, and
// anything else refused at start by name, never read as one or the other.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, databaseAddress, databaseHostWithoutTls, ENV_VARS, loadConfig, unreadSettings, variableMeaning } from '../../src/platform/config.ts';
import { makeTestCertificate } from '../support/test-certificate.ts';

describe('variables meant for the gateway that it does not read', () => {
  it('names a setting written with ACG_ that is read without it, and a name one or two letters from a setting, and nothing else', () => {
    expect(unreadSettings({ ACG_PORT: '1', ACG_DATABASE_URL: 'postgres://x', ACG_BASE_ULR: 'http://x', ACG_MDOE: 'live', PORT: '1', ACG_MODE: 'dev' })).toEqual([
      'ACG_BASE_ULR is not a setting of the gateway: did you mean ACG_BASE_URL? ACG_BASE_ULR is ignored',
      'ACG_DATABASE_URL is not a setting of the gateway, which reads DATABASE_URL (without ACG_): ACG_DATABASE_URL is ignored',
      'ACG_MDOE is not a setting of the gateway: did you mean ACG_MODE? ACG_MDOE is ignored',
      'ACG_PORT is not a setting of the gateway, which reads PORT (without ACG_): ACG_PORT is ignored',
    ]);
    // The names the SDKs' READMEs give a merchant's or an agent's own programs are theirs, not misspellings.
    expect(unreadSettings({ ACG_GATEWAY_URL: 'x', ACG_MERCHANT_ID: 'x', ACG_OFFER_ID: 'x', ACG_API_KEY: 'x', ACG_AGENT_ID: 'x', ACG_AGENT_TOKEN: 'x', ACG_TEST_DB: 'pglite', HOME: '/root' })).toEqual([]);
  });

  it('names an unprefixed name one or two letters from DATABASE_URL or LOG_LEVEL, and leaves the environment\'s own names alone (found from outside: DATABASE_ULR ran live mode on the embedded database)', () => {
    expect(unreadSettings({ DATABASE_ULR: 'postgres://x', LOG_LEVLE: 'info' })).toEqual([
      'DATABASE_ULR is not a setting of the gateway: did you mean DATABASE_URL? DATABASE_ULR is ignored',
      'LOG_LEVLE is not a setting of the gateway: did you mean LOG_LEVEL? LOG_LEVLE is ignored',
    ]);
    expect(unreadSettings({ DATABASE_URL: 'postgres://x', PATH: '/bin', HOSTNAME: 'h', XDG_DATA_DIRS: '/x', NODE_OPTIONS: '', PGDATABASE: 'x' })).toEqual([]);
  });

  it("names an identity provider's audience or JWKS URL given without its issuer, which is read only with it (found from outside)", () => {
    expect(unreadSettings({ ACG_HUMAN_AUDIENCE: 'foo', ACG_AGENT_JWKS_URL: 'https://id.example/jwks' })).toEqual([
      'ACG_HUMAN_AUDIENCE is set, but ACG_HUMAN_ISSUER is not: ACG_HUMAN_AUDIENCE belongs to that identity provider, so it is ignored',
      'ACG_AGENT_JWKS_URL is set, but ACG_AGENT_ISSUER is not: ACG_AGENT_JWKS_URL belongs to that identity provider, so it is ignored',
    ]);
    expect(unreadSettings({ ACG_HUMAN_ISSUER: 'https://id.example', ACG_HUMAN_AUDIENCE: 'foo' })).toEqual([]);
  });

  it("names Stripe's settings given without the Stripe provider, which reads them only then (found from outside: a live key ignored in silence)", () => {
    expect(unreadSettings({ ACG_STRIPE_SECRET_KEY: 'sk_live_x' })).toEqual([
      'ACG_STRIPE_SECRET_KEY is set, but ACG_PAYMENT_PROVIDER is not set: Stripe is not used until ACG_PAYMENT_PROVIDER=stripe, so ACG_STRIPE_SECRET_KEY is ignored',
    ]);
    expect(unreadSettings({ ACG_PAYMENT_PROVIDER: 'local', ACG_STRIPE_WEBHOOK_SECRET: 'whsec_x' })).toEqual([
      'ACG_STRIPE_WEBHOOK_SECRET is set, but ACG_PAYMENT_PROVIDER is "local": Stripe is not used until ACG_PAYMENT_PROVIDER=stripe, so ACG_STRIPE_WEBHOOK_SECRET is ignored',
    ]);
    expect(unreadSettings({ ACG_PAYMENT_PROVIDER: 'stripe', ACG_STRIPE_SECRET_KEY: 'sk_live_x', ACG_STRIPE_WEBHOOK_SECRET: 'whsec_x' })).toEqual([]);
  });
});

describe("an identity provider's issuer", () => {
  it('is kept as written, a terminating slash included, as tokens name it (found from outside: an Auth0 issuer lost its slash)', () => {
    const config = loadConfig({ ACG_HUMAN_ISSUER: 'https://tenant.auth0.com/', ACG_AGENT_ISSUER: 'https://agents.example/realm', ACG_HUMAN_JWKS_URL: 'https://tenant.auth0.com/.well-known/jwks.json' });
    expect([config.humanIssuer?.issuer, config.agentIssuer?.issuer, config.humanIssuer?.jwksUrl]).toEqual(['https://tenant.auth0.com/', 'https://agents.example/realm', 'https://tenant.auth0.com/.well-known/jwks.json']);
  });

  it('is refused with a query or a fragment, which no token could name (found from outside: the gateway started and refused every token)', () => {
    for (const value of ['https://id.example/human?x=1', 'https://id.example/human#x', 'https://id.example/human?', 'https://id.example/human#']) {
      expect(() => loadConfig({ ACG_HUMAN_ISSUER: value }), value).toThrow(`ACG_HUMAN_ISSUER must be an issuer URL with no query or fragment (RFC 8414 §2), got "${value}"`);
    }
  });
});

describe('whole-number settings', () => {
  const ranged = ENV_VARS.filter((variable) => variable.range !== undefined);

  it('state their range where the table and acg --help say what they mean (found from outside: the table gave few of them)', () => {
    expect(ranged.map((variable) => variable.name)).toEqual(expect.arrayContaining(['PORT', 'ACG_DB_POOL_SIZE_MAX', 'ACG_RATE_LIMIT_PER_ADDRESS', 'ACG_MAIL_BODY_CHARS_MAX']));
    for (const variable of ranged) expect(variableMeaning(variable)).toMatch(new RegExp(`; a whole number from ${variable.range![0]} to ${variable.range![1]}$`));
  });

  it('refuse at start-up a value just outside that range, naming it, and take its ends', () => {
    for (const variable of ranged) {
      const [min, max] = variable.range!;
      expect(() => loadConfig({ [variable.name]: String(max + 1) }), variable.name).toThrow(`${variable.name} must be a whole number from ${min} to ${max}, got "${max + 1}"`);
      if (min > 0) expect(() => loadConfig({ [variable.name]: String(min - 1) }), variable.name).toThrow(`${variable.name} must be a whole number from ${min} to ${max}, got "${min - 1}"`);
    }
    // A negative value, or one past 2^53, is out of range too, named as written (found from outside: "must be a whole
    // number" without the range, and a huge PORT echoed rounded).
    // One wording for every value outside the range, a number or not (found from outside: -1 and abc were told two ways).
    expect(() => loadConfig({ PORT: '-1' })).toThrow('PORT must be a whole number from 0 to 65535, got "-1"');
    expect(() => loadConfig({ PORT: '99999999999999999999' })).toThrow('PORT must be a whole number from 0 to 65535, got "99999999999999999999"');
    expect(() => loadConfig({ PORT: '80.5' })).toThrow('PORT must be a whole number from 0 to 65535, got "80.5"');
    expect(() => loadConfig({ PORT: 'abc' })).toThrow('PORT must be a whole number from 0 to 65535, got "abc"');
    const ends = loadConfig({ ACG_DB_POOL_SIZE_MAX: '8', ACG_RATE_LIMIT_WINDOW_S: '3600' });
    expect([ends.db.poolSizeMax, ends.rateLimit.windowS]).toEqual([8, 3600]);
  });
});

describe('yes-or-no settings', () => {
  it('takes ACG_PRECOMPILE_SCHEMAS as 1 (the default) or 0, and refuses anything else by name', () => {
    expect(loadConfig({}).precompileSchemas).toBe(true);
    expect(loadConfig({ ACG_PRECOMPILE_SCHEMAS: '0' }).precompileSchemas).toBe(false);
    expect(loadConfig({ ACG_PRECOMPILE_SCHEMAS: '1' }).precompileSchemas).toBe(true);
    expect(() => loadConfig({ ACG_PRECOMPILE_SCHEMAS: 'yes' })).toThrow('ACG_PRECOMPILE_SCHEMAS must be 0 or 1, got "yes"');
  });

  it('takes false and true as 0 and 1', () => {
    expect(loadConfig({ ACG_PRECOMPILE_SCHEMAS: 'false' }).precompileSchemas).toBe(false);
    expect(loadConfig({ ACG_PRECOMPILE_SCHEMAS: 'true' }).precompileSchemas).toBe(true);
  });

  it('reads ACG_ALLOW_PRIVATE_NETWORK_TARGETS the same way (off by default), and still refuses it in live mode', () => {
    expect(loadConfig({}).allowPrivateNetworkTargets).toBe(false);
    expect(loadConfig({ ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }).allowPrivateNetworkTargets).toBe(true);
    expect(loadConfig({ ACG_ALLOW_PRIVATE_NETWORK_TARGETS: '1' }).allowPrivateNetworkTargets).toBe(true);
    expect(loadConfig({ ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'false' }).allowPrivateNetworkTargets).toBe(false);
    expect(() => loadConfig({ ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'yes' })).toThrow('ACG_ALLOW_PRIVATE_NETWORK_TARGETS must be 0 or 1, got "yes"');
    expect(() => loadConfig({ ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example', ACG_ALLOW_PRIVATE_NETWORK_TARGETS: '1' })).toThrow(
      'ACG_ALLOW_PRIVATE_NETWORK_TARGETS is a test-only setting and is refused in live mode',
    );
  });
});

describe('live mode refuses what would run it insecurely', () => {
  const live = { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example' };

  it('needs https for every URL it sends credentials, tokens or trust over, except to a loopback host', () => {
    for (const name of ['ACG_BASE_URL', 'ACG_HUMAN_ISSUER', 'ACG_HUMAN_JWKS_URL', 'ACG_AGENT_ISSUER', 'ACG_AGENT_JWKS_URL', 'ACG_STRIPE_API_URL', 'ACG_GITHUB_API_URL', 'ACG_DOH_RESOLVER_URL']) {
      const env = { ...live, ACG_HUMAN_ISSUER: 'https://id.example', ACG_AGENT_ISSUER: 'https://agents.example', [name]: 'http://idp.example.com/x' };
      expect(() => loadConfig(env), name).toThrow(`${name} must be an https URL in live mode (http only to a loopback host), got "http://idp.example.com/x"`);
      for (const loopback of ['http://127.0.0.1:9000/x', 'http://localhost:9000/x', 'http://[::1]:9000/x']) {
        expect(() => loadConfig({ ...env, [name]: loopback }), `${name} ${loopback}`).not.toThrow();
      }
      // Dev mode runs on a laptop: cleartext stays allowed there.
      expect(() => loadConfig({ ...env, ACG_MODE: 'dev' }), name).not.toThrow();
    }
  });

  it('refuses a URL setting with a user name or password in it, in either mode, and does not repeat the password (found from outside: a resolver URL with credentials started)', () => {
    for (const name of ['ACG_BASE_URL', 'ACG_HUMAN_ISSUER', 'ACG_AGENT_JWKS_URL', 'ACG_GITHUB_API_URL', 'ACG_DOH_RESOLVER_URL']) {
      for (const mode of ['live', 'dev']) {
        const env = { ...live, ACG_MODE: mode, ACG_HUMAN_ISSUER: 'https://id.example', ACG_AGENT_ISSUER: 'https://agents.example', [name]: 'https://user:s3cret@dns.example/dns-query' };
        const error = (() => {
          try {
            loadConfig(env);
          } catch (caught) {
            return caught as Error;
          }
        })();
        expect(error, `${name} ${mode}`).toBeInstanceOf(ConfigError);
        expect(error!.message).toContain(`${name} must not carry a user name or password (user:password@): the gateway sends no credentials in a URL; got "https://dns.example/dns-query" with them`);
        expect(error!.message).not.toContain('s3cret');
      }
    }
    // Nor does any other refusal of a URL setting quote its password: cleartext in live mode, a scheme that is not http(s).
    for (const [env, said] of [
      [{ ...live, ACG_BASE_URL: 'http://admin:BasePw9@gw.example.com' }, 'ACG_BASE_URL must be an https URL in live mode (http only to a loopback host), got "http://gw.example.com"'],
      [{ ...live, ACG_DOH_RESOLVER_URL: 'ftp://user:S3cretPW@dns.example/q' }, 'ACG_DOH_RESOLVER_URL must be an http(s) URL, got "ftp://dns.example/q"'],
    ] as const) {
      expect(() => loadConfig(env)).toThrow(said);
      expect(() => loadConfig(env)).not.toThrow(/BasePw9|S3cretPW/);
    }
  });

  it('names an out-of-range PORT in one line, with no stack from the settings built on it (found from outside: TypeError Invalid URL)', () => {
    for (const port of ['99999', '65536']) {
      expect(() => loadConfig({ PORT: port })).toThrow(ConfigError);
      expect(() => loadConfig({ PORT: port })).toThrow(`PORT must be a whole number from 0 to 65535, got "${port}"`);
    }
  });

  it('names a HOST that is neither an address nor a host name with the other settings (found from outside: it was told only at listen)', () => {
    for (const host of ['bad..host', 'http://127.0.0.1', '127.0.0.1:8080', 'exa mple', '-leading.example']) {
      expect(() => loadConfig({ HOST: host }), host).toThrow(`HOST must be an IP address or a host name (default 127.0.0.1; 0.0.0.0 for every interface), got "${host}"`);
    }
    for (const host of ['0.0.0.0', '::', '::1', '127.0.0.1', 'localhost', 'gateway.internal', 'gw-1.example.com.']) expect(loadConfig({ HOST: host }).host, host).toBe(host);
  });

  it('lets the DNS resolver client use plain HTTP exactly where the start-up check accepts it (found from outside: it refused a loopback http resolver at every query)', () => {
    const issuers = { ACG_HUMAN_ISSUER: 'https://id.example', ACG_AGENT_ISSUER: 'https://agents.example' };
    expect(loadConfig({ ...live, ...issuers, ACG_DOH_RESOLVER_URL: 'http://127.0.0.1:8053/dns-query' }).doh.cleartext).toBe(true);
    expect(loadConfig({ ...live, ...issuers, ACG_DOH_RESOLVER_URL: 'http://[::1]:8053/dns-query' }).doh.cleartext).toBe(true);
    expect(loadConfig({ ...live, ...issuers, ACG_DOH_RESOLVER_URL: 'https://dns.example/dns-query' }).doh.cleartext).toBe(false);
    expect(loadConfig({ ...live, ...issuers }).doh.cleartext).toBe(false);
    expect(loadConfig({ ACG_DOH_RESOLVER_URL: 'http://resolver.lan/dns-query' }).doh.cleartext).toBe(true);
  });

  it('refuses a Stripe test-mode key, whose payments move no money (a live key, or dev mode, is taken)', () => {
    const stripe = { ACG_PAYMENT_PROVIDER: 'stripe', ACG_STRIPE_WEBHOOK_SECRET: 'whsec_abc' };
    for (const key of ['sk_test_abc123', 'rk_test_abc123']) {
      expect(() => loadConfig({ ...live, ...stripe, ACG_STRIPE_SECRET_KEY: key })).toThrow('ACG_STRIPE_SECRET_KEY is a test-mode key');
      expect(loadConfig({ ...stripe, ACG_STRIPE_SECRET_KEY: key }).payments.provider).toBe('stripe');
    }
    expect(loadConfig({ ...live, ...stripe, ACG_STRIPE_SECRET_KEY: 'sk_live_abc123' }).payments.provider).toBe('stripe');
  });

  it("refuses a gateway's dev issuers as identity providers: they sign in anyone, without a password (found from outside)", () => {
    const issuers = { ACG_HUMAN_ISSUER: 'https://id.example', ACG_AGENT_ISSUER: 'https://agents.example' };
    expect(() => loadConfig({ ...live, ...issuers })).not.toThrow();
    for (const [name, value] of [
      ['ACG_HUMAN_ISSUER', 'https://dev-gateway.example/dev/issuers/human'],
      ['ACG_AGENT_ISSUER', 'https://dev-gateway.example/dev/issuers/agent'],
      ['ACG_HUMAN_JWKS_URL', 'https://dev-gateway.example/dev/issuers/human/jwks.json'],
      ['ACG_AGENT_JWKS_URL', 'https://dev-gateway.example/%64ev/issuers/agent/jwks.json'],
      ['ACG_HUMAN_ISSUER', 'https://dev-gateway.example//DEV/issuers/human'],
    ] as const) {
      const env = { ...live, ...issuers, [name]: value };
      expect(() => loadConfig(env), `${name} ${value}`).toThrow(`${name} points at a gateway's dev routes`);
      expect(() => loadConfig({ ...env, ACG_MODE: 'dev' }), `${name} ${value}`).not.toThrow();
    }
    // A real provider whose path merely contains "dev" further down is no dev route.
    expect(() => loadConfig({ ...live, ...issuers, ACG_HUMAN_ISSUER: 'https://id.example/tenants/dev/' })).not.toThrow();
  });
});

describe('ACG_BASE_URL left out', () => {
  it('names the address the gateway listens on, and the loopback one for a wildcard, which names no interface (found from outside: http://0.0.0.0:8080 as the issuer)', () => {
    expect(loadConfig({ PORT: '9000' }).baseUrl).toBe('http://127.0.0.1:9000');
    expect(loadConfig({ PORT: '9000', HOST: '0.0.0.0' }).baseUrl).toBe('http://127.0.0.1:9000');
    expect(loadConfig({ PORT: '9000', HOST: '::' }).baseUrl).toBe('http://[::1]:9000');
    for (const wildcard of ['::0', '0:0:0:0:0:0:0:0', '0000::']) expect(loadConfig({ PORT: '9000', HOST: wildcard }).baseUrl, wildcard).toBe('http://[::1]:9000');
    expect(loadConfig({ PORT: '9000', HOST: '::1' }).baseUrl).toBe('http://[::1]:9000');
    expect(loadConfig({ PORT: '9000', HOST: '192.168.1.5' }).baseUrl).toBe('http://192.168.1.5:9000');
    expect(loadConfig({ PORT: '9000', HOST: '0.0.0.0', ACG_BASE_URL: 'https://gw.example' }).baseUrl).toBe('https://gw.example');
  });
});

describe('ACG_BASE_URL, in one form', () => {
  it('lower-cases the scheme and host and drops the default port and trailing slashes, as x402 clients normalise it (found from outside)', () => {
    expect(loadConfig({ ACG_BASE_URL: 'http://LocalHost:18421' }).baseUrl).toBe('http://localhost:18421');
    expect(loadConfig({ ACG_BASE_URL: 'HTTPS://Gateway.Example.com:443/' }).baseUrl).toBe('https://gateway.example.com');
    expect(loadConfig({ ACG_BASE_URL: 'http://gateway.example:80/acg//' }).baseUrl).toBe('http://gateway.example/acg');
    expect(loadConfig({ ACG_BASE_URL: 'http://127.0.0.1:8080' }).baseUrl).toBe('http://127.0.0.1:8080');
  });

  it('refuses credentials, a query or a fragment', () => {
    for (const value of ['https://gateway.example/?a=1', 'https://gateway.example/#top']) {
      expect(() => loadConfig({ ACG_BASE_URL: value })).toThrow('ACG_BASE_URL must be a scheme, a host, an optional port and an optional path');
    }
    expect(() => loadConfig({ ACG_BASE_URL: 'https://user:pw@gateway.example' })).toThrow('ACG_BASE_URL must not carry a user name or password');
  });

  it('refuses one over 1,000 characters, under which the longest OAuth request still fits its consent URL (found from outside: above about 2,900 every sign-in was refused)', () => {
    const base = 'https://gateway.example.com/';
    expect(loadConfig({ ACG_BASE_URL: `${base}${'p'.repeat(1000 - base.length)}` }).baseUrl).toHaveLength(1000);
    expect(() => loadConfig({ ACG_BASE_URL: `${base}${'p'.repeat(1001 - base.length)}` })).toThrow('ACG_BASE_URL must be at most 1000 characters');
  });
});

describe('DATABASE_URL', () => {
  it('refuses at start a URL node-postgres cannot read, naming the setting and not echoing it (found from outside: a crash at the first connection)', () => {
    let message = '';
    try {
      loadConfig({ DATABASE_URL: 'postgres://u:secret@127.0.0.1:notaport/db' });
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain('DATABASE_URL is not a valid URL');
    expect(message).not.toContain('secret');
  });

  it('takes the forms node-postgres reads: a host and port, a socket as a host parameter, spaces in a parameter', () => {
    for (const value of ['postgres://postgres@127.0.0.1:5432/postgres', 'postgresql://u@/db?host=/var/run/postgresql', 'postgres://u:p%40ss@db.internal/app?application_name=a b']) {
      expect(loadConfig({ DATABASE_URL: value }).databaseUrl).toBe(value);
    }
  });

  it("refuses at start an sslrootcert that is no readable file of CA certificates, or an sslcert or sslkey it cannot read, naming the file and not the password (found with the TLS test: a crash with the driver's stack)", () => {
    const cert = makeTestCertificate({ dns: ['db.internal'] });
    const dir = mkdtempSync(path.join(tmpdir(), 'acg-config-db-'));
    try {
      const url = (params: string) => `postgres://acg:secret-pw@db.internal/acg?sslmode=verify-full&${params}`;
      expect(loadConfig({ DATABASE_URL: url(`sslrootcert=${cert.certPath}`) }).databaseUrl).toBe(url(`sslrootcert=${cert.certPath}`));
      const missing = path.join(dir, 'ca.pem');
      const cases: [string, string][] = [
        [`sslrootcert=${missing}`, `DATABASE_URL's sslrootcert must name a PEM file of CA certificates; ${missing} does not exist`],
        [`sslrootcert=${dir}`, `DATABASE_URL's sslrootcert must name a PEM file of CA certificates; ${dir} is a directory`],
        [`sslrootcert=${cert.keyPath}`, `DATABASE_URL's sslrootcert must name a PEM file of CA certificates; ${cert.keyPath} holds no PEM certificate`],
        [`sslrootcert=${cert.certPath}&sslcert=${missing}&sslkey=${dir}`, `DATABASE_URL's sslcert must name a readable file; ${missing} does not exist`],
        [`sslrootcert=${cert.certPath}&sslcert=${cert.certPath}&sslkey=${dir}`, `DATABASE_URL's sslkey must name a readable file; ${dir} is a directory`],
      ];
      for (const [params, said] of cases) {
        let message = '';
        try {
          loadConfig({ DATABASE_URL: url(params) });
        } catch (error) {
          expect(error).toBeInstanceOf(ConfigError);
          message = (error as Error).message;
        }
        expect(message, params).toContain(said);
        expect(message, params).not.toContain('secret-pw');
      }
    } finally {
      cert.remove();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a DATABASE_URL that crosses a network without requiring TLS (live mode warns of it at start)', () => {
  it('names the host, not the password, when no sslmode is given, or disable, allow or prefer', () => {
    const cases: [string, string][] = [
      ['postgres://acg:secret-pw@db.internal:5432/acg', 'db.internal'],
      ['postgres://acg:secret-pw@db.internal/acg?sslmode=disable', 'db.internal'],
      ['postgres://acg:secret-pw@db.internal/acg?sslmode=allow', 'db.internal'],
      ['postgres://acg:secret-pw@db.internal/acg?sslmode=prefer', 'db.internal'],
      ['postgres://acg:secret-pw@db.internal/acg?ssl=true&sslmode=disable', 'db.internal'],
      // An sslrootcert without an sslmode: node-postgres 8 then connects over TLS, but libpq's default (prefer) does not
      // require it, nor will the driver's next major version: the warning asks for verify-full to be written.
      ['postgres://acg@10.0.0.5/acg?sslrootcert=/etc/acg/db-ca.pem', '10.0.0.5'],
      ['postgres://acg@[2001:db8::1]:5432/acg', '2001:db8::1'],
      ['postgres://acg@haproxy:5000/acg', 'haproxy'],
      // The driver takes a host parameter over the URL's host.
      ['postgres://acg@localhost/acg?host=db.internal', 'db.internal'],
    ];
    for (const [url, host] of cases) expect(databaseHostWithoutTls(url), url).toBe(host);
  });

  it('names none when TLS is required, or the host is loopback or a Unix socket', () => {
    const cases = [
      'postgres://acg:secret-pw@db.internal/acg?sslmode=verify-full&sslrootcert=/etc/acg/db-ca.pem',
      'postgres://acg@db.internal/acg?sslmode=verify-ca',
      'postgres://acg@db.internal/acg?sslmode=require',
      'postgres://acg@db.internal/acg?sslmode=no-verify',
      'postgres://acg@db.internal/acg?uselibpqcompat=true&sslmode=require',
      'postgres://acg@db.internal/acg?ssl=true',
      'postgres://acg:secret-pw@127.0.0.1:5432/acg',
      'postgres://acg@127.8.9.10/acg',
      'postgres://acg@localhost/acg',
      'postgres://acg@LOCALHOST/acg',
      'postgres://acg@[::1]:5432/acg',
      'postgres://acg@db.internal/acg?host=::1',
      'postgresql://acg@/acg?host=/var/run/postgresql',
      'postgres:///acg',
      'postgres://acg@%2Fvar%2Frun%2Fpostgresql/acg',
    ];
    for (const url of cases) expect(databaseHostWithoutTls(url), url).toBeUndefined();
  });

  it('says where it connects for a person to read, a Unix socket as one, never who as (acg migrate\'s first line)', () => {
    const cases: Array<[string, string | undefined]> = [
      ['postgres://acg:s3cret@127.0.0.1:5432/acg', '127.0.0.1:5432/acg'],
      ['postgres://acg@db.internal/acg', 'db.internal/acg'],
      ['postgres://acg@[::1]:5432/acg', '[::1]:5432/acg'],
      ['postgres://acg@%2Fvar%2Frun%2Fpostgresql/acg', 'the Unix socket in /var/run/postgresql, database acg'],
      ['postgresql://acg:s3cret@/acg?host=/var/run/postgresql', 'the Unix socket in /var/run/postgresql, database acg'],
      ['postgres:///acg', undefined],
    ];
    for (const [url, where] of cases) expect(databaseAddress(url), url).toBe(where);
  });
});

describe('CA files', () => {
  const cert = makeTestCertificate({ dns: ['localhost'] });
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-config-ca-'));
  const write = (name: string, text: string): string => {
    const file = path.join(dir, name);
    writeFileSync(file, text);
    return file;
  };
  const brokenBlock = '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n';
  afterAll(() => {
    cert.remove();
    rmSync(dir, { recursive: true, force: true });
  });

  it('takes a PEM file of certificates that all parse, beside text', () => {
    const bundle = write('bundle.pem', `# our test CA\n${cert.certPem}# again\n${cert.certPem}`);
    for (const name of ['ACG_OUTBOUND_CA_FILE', 'ACG_DOH_CA_FILE']) {
      expect(() => loadConfig({ [name]: cert.certPath }), name).not.toThrow();
      expect(() => loadConfig({ [name]: bundle }), name).not.toThrow();
    }
  });

  it('refuses at start, naming the setting and the path, what is not a readable PEM file of certificates (found from outside: a directory ended a started gateway with a stack)', () => {
    const unreadable = write('unreadable.pem', cert.certPem);
    chmodSync(unreadable, 0o000);
    const cases: [string, string][] = [
      [dir, `${dir} is a directory`],
      [path.join(dir, 'missing.pem'), `${path.join(dir, 'missing.pem')} does not exist`],
      ['/etc/passwd', '/etc/passwd holds no PEM certificate (-----BEGIN CERTIFICATE-----)'],
      [write('empty.pem', ''), `${path.join(dir, 'empty.pem')} holds no PEM certificate`],
      [write('broken.pem', brokenBlock), `${path.join(dir, 'broken.pem')} holds a PEM block that is not a certificate (block 1 of 1)`],
      // Node's TLS stops at a block it cannot parse and trusts none after it (found from outside: the good one was not trusted).
      [write('broken-first.pem', `${brokenBlock}${cert.certPem}`), `${path.join(dir, 'broken-first.pem')} holds a PEM block that is not a certificate (block 1 of 2)`],
      [cert.keyPath, `${cert.keyPath} holds no PEM certificate`],
    ];
    // A test run as root reads any file, so the unreadable one is only checked when the mode holds.
    if (process.getuid?.() !== 0) cases.push([unreadable, `${unreadable} cannot be read (EACCES)`]);
    for (const name of ['ACG_OUTBOUND_CA_FILE', 'ACG_DOH_CA_FILE']) {
      for (const [file, reason] of cases) {
        expect(() => loadConfig({ [name]: file }), `${name} ${file}`).toThrow(ConfigError);
        expect(() => loadConfig({ [name]: file }), `${name} ${file}`).toThrow(`${name} must name a PEM file of CA certificates; ${reason}`);
      }
    }
  });

  it('reports both settings in the one list of problems', () => {
    let message = '';
    try {
      loadConfig({ ACG_OUTBOUND_CA_FILE: dir, ACG_DOH_CA_FILE: '/etc/passwd', PORT: 'abc' });
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain(`ACG_DOH_CA_FILE must name a PEM file of CA certificates; /etc/passwd holds no PEM certificate`);
    expect(message).toContain(`ACG_OUTBOUND_CA_FILE must name a PEM file of CA certificates; ${dir} is a directory`);
    expect(message).toContain('PORT must be a whole number');
  });
});
