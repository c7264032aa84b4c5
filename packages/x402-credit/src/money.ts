// Prices in microcredits, by decimal string arithmetic only: "$0.005" is 500000 µc exactly, and no amount
// ever passes through a binary float (0.1 + 0.2 is not 0.3 in one). A price finer than one microcredit
// ($0.00000001) is refused, not rounded: a merchant states what it charges.
import type { AssetAmount, Price } from '@x402/core/types';
import { AMOUNT_UC_DIGITS_MAX, AMOUNT_UC_MAX, AMOUNT_UC_PATTERN, CREDIT_ASSET, UC_PER_CREDIT, UC_PER_USD } from './constants.js';
import { CreditError } from './errors.js';

/** "$0.005", "0.005", "0.005 USD", "$1", "0.5 credits", "1 credit"; digits with an optional fraction. */
const MONEY_PATTERN = /^(\$)?\s*([0-9]+)(?:\.([0-9]+))?(?:\s*(usd|credits?))?$/i;
/** A number's shortest round-trip text: "0.005", "1e-7", "1.5e+21". */
const NUMBER_TEXT_PATTERN = /^([0-9]+)(?:\.([0-9]+))?(?:e([+-]?[0-9]+))?$/;

/** An amount of microcredits as the wire carries it; refuses what is not a non-negative integer the gateway can hold. */
export function amountUcText(amount: bigint | string, name = 'amount'): string {
  const text = typeof amount === 'bigint' ? amount.toString() : amount;
  if (!AMOUNT_UC_PATTERN.test(text)) {
    throw new CreditError('invalid_price', `${name} must be a non-negative integer of microcredits of at most ${AMOUNT_UC_DIGITS_MAX} digits, got ${String(amount)}`);
  }
  return BigInt(text).toString();
}

/** The refusal of an amount finer than one microcredit; `what` is what it was meant as ("a price"). */
function finerThanOneUc(amount: string, what: string): string {
  return `${amount} is finer than one microcredit: ${what} must be a whole number of microcredits (1 µc = $0.00000001)`;
}

/** `units` of a currency whose one unit is `ucPerUnit` µc, from its integer and fraction digits, exactly. */
function scaled(integer: string, fraction: string, ucPerUnit: bigint, original: string, what: string): bigint {
  const decimals = ucPerUnit.toString().length - 1;
  const significant = fraction.replace(/0+$/, '');
  if (significant.length > decimals) throw new CreditError('invalid_price', finerThanOneUc(original, what));
  return BigInt(integer) * ucPerUnit + BigInt(significant.padEnd(decimals, '0') || '0');
}

/** A number's exact decimal digits (its shortest round-trip text, exponent applied), without a float operation. */
function numberDigits(value: number): { integer: string; fraction: string } {
  if (!Number.isFinite(value) || value < 0) throw new CreditError('invalid_price', `a price must be a finite non-negative number, got ${value}`);
  const match = NUMBER_TEXT_PATTERN.exec(String(value));
  if (!match) throw new CreditError('invalid_price', `cannot read the number ${value}`);
  const digits = `${match[1]}${match[2] ?? ''}`;
  const point = match[1]!.length + Number(match[3] ?? '0');
  if (point <= 0) return { integer: '0', fraction: `${'0'.repeat(-point)}${digits}` };
  if (point >= digits.length) return { integer: digits.padEnd(point, '0'), fraction: '' };
  return { integer: digits.slice(0, point), fraction: digits.slice(point) };
}

function positive(amountUc: bigint, original: string): string {
  if (amountUc === 0n) throw new CreditError('invalid_price', `a price must be more than 0, got ${original}`);
  if (amountUc > AMOUNT_UC_MAX) throw new CreditError('invalid_price', `${original} is more than the gateway takes (${AMOUNT_UC_MAX} µc)`);
  return amountUc.toString();
}

/**
 * A price in microcredits: a dollar amount ("$0.005", "0.005", "0.005 USD", or the number 0.005), an amount of
 * credits ("0.5 credits"), or `{ amount, asset: 'microcredit' }` as it is. Never rounds: a price finer than
 * one microcredit, negative, zero or of another asset is refused with `CreditError('invalid_price')`.
 */
export function parseCreditPrice(price: Price): AssetAmount {
  if (typeof price === 'object' && price !== null) {
    if (price.asset !== CREDIT_ASSET) throw new CreditError('invalid_price', `the asset must be ${CREDIT_ASSET}, got ${String(price.asset)}`);
    const amount = positive(BigInt(amountUcText(price.amount, 'the price amount')), String(price.amount));
    return { amount, asset: CREDIT_ASSET, ...(price.extra ? { extra: price.extra } : {}) };
  }
  if (typeof price === 'number') {
    const { integer, fraction } = numberDigits(price);
    return { amount: positive(scaled(integer, fraction, UC_PER_USD, String(price), 'a price'), String(price)), asset: CREDIT_ASSET };
  }
  if (typeof price !== 'string') throw new CreditError('invalid_price', `a price is a string, a number or { amount, asset }, got ${typeof price}`);
  const match = MONEY_PATTERN.exec(price.trim());
  if (!match) throw new CreditError('invalid_price', `cannot read the price ${JSON.stringify(price)} (e.g. "$0.005", "0.5 credits")`);
  const [, dollarSign, integer, fraction = '', unit] = match;
  const inCredits = unit !== undefined && unit.toLowerCase().startsWith('credit');
  if (inCredits && dollarSign) throw new CreditError('invalid_price', `${JSON.stringify(price)} is both dollars and credits`);
  const amountUc = scaled(integer!, fraction, inCredits ? UC_PER_CREDIT : UC_PER_USD, price, 'a price');
  return { amount: positive(amountUc, price), asset: CREDIT_ASSET };
}

/** x402's forms of a settlement override (@x402/core 2.27, `resolveSettlementOverrideAmount`): a share of the price, dollars. */
const OVERRIDE_PERCENT_PATTERN = /^([0-9]+)(?:\.([0-9]{0,2}))?%$/;
const OVERRIDE_DOLLARS_PATTERN = /^\$([0-9]+)(?:\.([0-9]+))?$/;

/**
 * What a settlement override charges, in microcredits, exactly: `$0.003` (dollars), `60%` (of the price, `priceUc`)
 * or `300000` (µc), as x402's resource server reads them. x402 itself drops a dollar amount's digits past the
 * eighth and rounds a share down, and passes any other text on as µc, so what it would not settle exactly is
 * refused with `CreditError('invalid_price')` instead: finer than one microcredit, a share that is not a whole
 * microcredit, a bare decimal (`0.003` is dollars as a price, but x402 reads it as µc). 0 releases the hold.
 */
export function settlementOverrideUc(override: string, priceUc: string): string {
  const percent = OVERRIDE_PERCENT_PATTERN.exec(override);
  if (percent) {
    const basisPoints = BigInt(percent[1]!) * 100n + BigInt((percent[2] ?? '').padEnd(2, '0'));
    const shareUc = BigInt(amountUcText(priceUc, 'the price')) * basisPoints;
    if (shareUc % 10_000n !== 0n) throw new CreditError('invalid_price', finerThanOneUc(`${override} of ${priceUc} µc`, 'a settlement override'));
    return amountUcText(shareUc / 10_000n, `${override} of the price`);
  }
  const dollars = OVERRIDE_DOLLARS_PATTERN.exec(override);
  if (dollars) return amountUcText(scaled(dollars[1]!, dollars[2] ?? '', UC_PER_USD, override, 'a settlement override'), override);
  if (AMOUNT_UC_PATTERN.test(override)) return amountUcText(override);
  throw new CreditError(
    'invalid_price',
    `cannot read the settlement override ${JSON.stringify(override)}: dollars with a "$" ("$0.003"), a share of the price ("60%") or an integer of microcredits ("300000")`,
  );
}
