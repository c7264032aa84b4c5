// The x402 package and the gateway write a gateway's base URL in one form each: the package's `authorityOf` (what a
// resource server puts in `extra.authority`) and the gateway's `baseUrlInOneForm` (what its facilitator compares that
// member with). The package cannot import the gateway's source, so the rule is written twice; this test keeps the two
// equal on every spelling a deployment or a merchant may write (docs/decisions.md "The gateway is the credit
// binding's authority: four routes under /x402", Verify).
import { describe, expect, it } from 'vitest';
import { authorityOf } from '../../packages/x402-credit/src/requirements.ts';
import { baseUrlInOneForm } from '../../src/platform/config.ts';

const SPELLINGS = [
  'http://127.0.0.1:8080',
  'http://127.0.0.1:8080/',
  'http://127.0.0.1:8080//',
  'HTTP://LOCALHOST:8080/',
  'https://Gateway.Example.com',
  'https://gateway.example.com:443/',
  'http://gateway.example.com:80',
  'https://gateway.example.com:8443/acg/',
  'https://gateway.example.com/acg//',
  'https://gateway.example.com/a%2Fb/',
  'https://xn--bcher-kva.example/',
  'https://bücher.example/',
  'http://[::1]:8080/',
  'https://gateway.example.com/./acg/../acg',
];

describe('the x402 authority and the gateway base URL are one form', () => {
  it.each(SPELLINGS)('%s', (spelling) => {
    expect(authorityOf(spelling)).toBe(baseUrlInOneForm(spelling));
  });

  it('both refuse what is no base URL: a query, a fragment or credentials', () => {
    for (const spelling of ['https://gateway.example.com/?a=1', 'https://gateway.example.com/#x', 'https://user:pw@gateway.example.com/']) {
      expect(baseUrlInOneForm(spelling)).toBeUndefined();
      expect(() => authorityOf(spelling)).toThrow(TypeError);
    }
  });
});
