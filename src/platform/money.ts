// The one money type: microcredits as bigint. 1 credit = 1,000,000 µc = $0.01.
// On the wire an amount is a decimal string of 1–18 digits; floats never touch it.
import { ApiError } from './errors.ts';

export type Microcredits = bigint;

export const UC_PER_CREDIT = 1_000_000n;
/** 1 credit is one US cent, so 1 USD = 100 credits = 100,000,000 µc. */
export const UC_PER_USD_CENT = UC_PER_CREDIT;
/**
 * The one limit on amounts: at most 18 digits, so the largest amount (10^18 − 1 µc, ten billion dollars)
 * fits a PostgreSQL BIGINT (about 9.2 × 10^18) with room for sums. The wire schema's pattern and the
 * parser both derive from it, so an amount the schema admits always parses.
 */
export const UC_DIGITS_MAX = 18;
export const UC_MAX = 10n ** BigInt(UC_DIGITS_MAX) - 1n;
export const MICROCREDITS_PATTERN = `^[0-9]{1,${UC_DIGITS_MAX}}$`;
const MICROCREDITS = new RegExp(MICROCREDITS_PATTERN);

/** Parses a wire amount; anything that is not 1–18 decimal digits is bad input (400 invalid_input). */
export function parseUc(text: string, field = 'amount'): Microcredits {
  if (!MICROCREDITS.test(text)) {
    throw new ApiError('invalid_input', { detail: `${field} must be a whole number of microcredits of at most ${UC_DIGITS_MAX} digits` });
  }
  return BigInt(text);
}

/** A wire amount in its one form (`"0100000"` → `"100000"`), or undefined for text that is not one. */
export function canonicalUc(text: string): string | undefined {
  return MICROCREDITS.test(text) ? BigInt(text).toString() : undefined;
}

export function formatUc(amount: Microcredits): string {
  if (amount < 0n) throw new RangeError('negative amounts never leave the ledger');
  return amount.toString();
}

/** "$0.01"-style price of an amount, exact: µc → USD with as many decimals as needed (at least 2). */
export function formatUsd(amount: Microcredits): string {
  const perUsd = UC_PER_USD_CENT * 100n;
  const whole = amount / perUsd;
  const fraction = (amount % perUsd).toString().padStart(8, '0').replace(/0+$/, '').padEnd(2, '0');
  return `${whole}.${fraction}`;
}
