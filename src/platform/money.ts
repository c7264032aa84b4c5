// The one money type: microcredits as bigint. 1 credit = 1,000,000 µc = $0.01.
// On the wire an amount is a decimal string matching ^[0-9]+$; floats never touch it.
export type Microcredits = bigint;

export const UC_PER_CREDIT = 1_000_000n;
/** 1 credit is one US cent, so 1 USD = 100 credits = 100,000,000 µc. */
export const UC_PER_USD_CENT = UC_PER_CREDIT;
export const MICROCREDITS_PATTERN = '^[0-9]+$';
/** Largest amount accepted on the wire: fits a PostgreSQL BIGINT with room for sums. */
export const UC_MAX = 2n ** 62n;

export function parseUc(text: string): Microcredits {
  if (!/^[0-9]{1,19}$/.test(text)) throw new RangeError(`not a microcredit amount: ${text}`);
  const value = BigInt(text);
  if (value > UC_MAX) throw new RangeError(`amount too large: ${text}`);
  return value;
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
