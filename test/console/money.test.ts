// The console's reading of an amount typed in credits: exact microcredits, or a refusal that names its own reason.
import { describe, expect, it } from 'vitest';
import { parseCredits } from '../../console/src/money.ts';

describe('parseCredits', () => {
  it('reads credits to the microcredit, with a dot and thousands commas', () => {
    expect(parseCredits('2.5', 'Limit')).toEqual({ uc: '2500000' });
    expect(parseCredits('0.000001', 'Limit')).toEqual({ uc: '1' });
    expect(parseCredits('1,000', 'Limit')).toEqual({ uc: '1000000000' });
    expect(parseCredits('999999999999.999999', 'Limit')).toEqual({ uc: '999999999999999999' });
  });

  it('says why a number is refused: too large, too fine, or not an amount (found from outside: a number too large was told of decimals)', () => {
    expect(parseCredits('99999999999999999', 'Budget 1')).toEqual({ problem: 'Budget 1: at most 999,999,999,999 credits (12 digits before the point).' });
    expect(parseCredits('1000000000000.5', 'Budget 1')).toEqual({ problem: 'Budget 1: at most 999,999,999,999 credits (12 digits before the point).' });
    expect(parseCredits('0.0000001', 'Budget 1')).toEqual({ problem: 'Budget 1: at most six decimals (1 credit is 1,000,000 µc, the smallest amount).' });
    expect(parseCredits('abc', 'Budget 1')).toEqual({ problem: 'Budget 1: enter an amount in credits, like 5 or 0.25 (1 credit is $0.01; at most six decimals).' });
    expect(parseCredits('2,5', 'Budget 1')).toEqual({ problem: 'Budget 1: write decimals with a dot, like 2.5; a comma may only separate thousands, like 1,000.' });
  });
});
