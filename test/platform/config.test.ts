// Yes-or-no settings (src/platform/config.ts, `flag`): 1 or true, 0 or false, unset for the default, and
// anything else refused at start by name, never read as one or the other.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/platform/config.ts';

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

  it('refuses a Stripe test-mode key, whose payments move no money (a live key, or dev mode, is taken)', () => {
    const stripe = { ACG_PAYMENT_PROVIDER: 'stripe', ACG_STRIPE_WEBHOOK_SECRET: 'whsec_abc' };
    for (const key of ['sk_test_abc123', 'rk_test_abc123']) {
      expect(() => loadConfig({ ...live, ...stripe, ACG_STRIPE_SECRET_KEY: key })).toThrow('ACG_STRIPE_SECRET_KEY is a test-mode key');
      expect(loadConfig({ ...stripe, ACG_STRIPE_SECRET_KEY: key }).payments.provider).toBe('stripe');
    }
    expect(loadConfig({ ...live, ...stripe, ACG_STRIPE_SECRET_KEY: 'sk_live_abc123' }).payments.provider).toBe('stripe');
  });
});
