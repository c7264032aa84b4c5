// TEST ONLY, loaded into a spawned `acg serve` with NODE_OPTIONS=--import: the names ending in
// ACG_TEST_LOOPBACK_SUFFIX resolve to ACG_TEST_LOOPBACK_ADDRESS, as the in-process outbound test hooks
// (test/support/merchants.ts) do for a gateway built inside the test. Nothing in src/ knows about it.
import { createRequire, syncBuiltinESMExports } from 'node:module';

const require = createRequire(import.meta.url);
const dns = require('node:dns/promises');
const suffix = process.env.ACG_TEST_LOOPBACK_SUFFIX;
const address = process.env.ACG_TEST_LOOPBACK_ADDRESS;
const original = dns.lookup;
dns.lookup = async (hostname, options) => {
  if (!suffix || !address || !hostname.endsWith(suffix)) return original(hostname, options);
  const found = { address, family: 4 };
  return options?.all ? [found] : found;
};
syncBuiltinESMExports();
