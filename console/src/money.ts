// Amounts: the API counts integer microcredits (decimal strings; 1 credit = 1,000,000 µc = $0.01). People read
// and type credits. Exact both ways (BigInt), never through a float.

const UC_PER_CREDIT = 1_000_000n;

/** "2.50" for 2,500,000 µc: at least two decimals, more only when the amount has them. */
export function credits(uc: string | bigint): string {
  const value = BigInt(uc);
  const sign = value < 0n ? '-' : '';
  const magnitude = value < 0n ? -value : value;
  const whole = (magnitude / UC_PER_CREDIT).toLocaleString('en-US');
  const fraction = (magnitude % UC_PER_CREDIT).toString().padStart(6, '0').replace(/0+$/, '').padEnd(2, '0');
  return `${sign}${whole}.${fraction}`;
}

/** "$0.03" for 3 credits. */
export function dollars(uc: string | bigint): string {
  const cents = BigInt(uc) / UC_PER_CREDIT;
  return `$${(cents / 100n).toLocaleString('en-US')}.${(cents % 100n).toString().padStart(2, '0')}`;
}

/**
 * Credits as typed ("5", "0.25", "1,000") to µc, or a message a person understands. A comma only separates
 * thousands ("1,000", "12,500.5"): one anywhere else ("2,5", a decimal comma) is refused, never dropped, since
 * dropping it read "2,5" as 25 credits.
 */
export function parseCredits(text: string, what: string): { uc: string } | { problem: string } {
  const trimmed = text.trim();
  if (trimmed.includes(',') && !/^\d{1,3}(?:,\d{3})+(?:\.\d*)?$/.test(trimmed)) {
    return { problem: `${what}: write decimals with a dot, like 2.5; a comma may only separate thousands, like 1,000.` };
  }
  const cleaned = trimmed.replace(/,/g, '');
  // Each way a number is refused says its own reason (found from outside: a number too large was told of decimals).
  if (/^\d{13,}(?:\.\d*)?$/.test(cleaned)) return { problem: `${what}: at most 999,999,999,999 credits (12 digits before the point).` };
  if (/^\d+\.\d{7,}$/.test(cleaned)) return { problem: `${what}: at most six decimals (1 credit is 1,000,000 µc, the smallest amount).` };
  const match = /^(\d{1,12})(?:\.(\d{1,6}))?$/.exec(cleaned);
  if (!match) return { problem: `${what}: enter an amount in credits, like 5 or 0.25 (1 credit is $0.01; at most six decimals).` };
  const uc = BigInt(match[1]!) * UC_PER_CREDIT + BigInt((match[2] ?? '').padEnd(6, '0'));
  return { uc: uc.toString() };
}

/** The µc amount as credits for an input field ("2.5"), without a thousands separator. */
export function creditsInput(uc: string | null | undefined): string {
  if (uc === null || uc === undefined) return '';
  return credits(uc).replace(/,/g, '').replace(/\.?0+$/, '');
}
