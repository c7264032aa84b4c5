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
