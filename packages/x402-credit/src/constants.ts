// The identifiers of agent credit as an x402 payment scheme: the draft's `batch-settlement` scheme with its
// `credit` binding (x402-foundation/x402 PR #2612), on this gateway's network. Trust is anchored to
// `extra.authority` (the gateway's base URL), never to the network label, as the draft says.

/** The x402 scheme: the draft's credit binding of `batch-settlement`. */
export const CREDIT_SCHEME = 'batch-settlement' as const;
/** The network: x402's `namespace:reference` form, a label only (the authority is `extra.authority`). */
export const CREDIT_NETWORK = 'acg:credit' as const;
/** The asset: every amount is a decimal string of microcredits (1 credit = 1,000,000 µc = $0.01). */
export const CREDIT_ASSET = 'microcredit';
/** The binding version this package speaks (`extra.version`); a requirement of another major is refused. */
export const CREDIT_BINDING_VERSION = '1.0.0';
/** The `typ` of the gateway's attestations (distinct from `voucher+jwt`). */
export const ATTESTATION_TYP = 'x402-credit+jwt';
/** The `typ` of the gateway's signed capture receipts. */
export const RECEIPT_TYP = 'receipt+jwt';
/** The payment payload's type: the draft's one x402-visible payload. */
export const CONSUME_PAYLOAD_TYPE = 'consume';

/** Microcredits in one US dollar: a credit is $0.01 and 1,000,000 µc, so a dollar is 10⁸ µc. */
export const UC_PER_USD = 100_000_000n;
/** The decimals of a dollar price in microcredits, for x402's `$…` settlement overrides and spend caps. */
export const USD_DECIMALS = 8;
/** Microcredits in one credit. */
export const UC_PER_CREDIT = 1_000_000n;
/**
 * The most digits of an amount the gateway takes (its `UC_DIGITS_MAX`): every amount on its wire is 1 to 18
 * decimal digits of microcredits, so a larger price would be refused by every authorize and verify.
 */
export const AMOUNT_UC_DIGITS_MAX = 18;
/** The largest amount the gateway takes: 10¹⁸ − 1 µc (ten billion dollars). */
export const AMOUNT_UC_MAX = 10n ** BigInt(AMOUNT_UC_DIGITS_MAX) - 1n;
/** An amount as the wire carries it: 1 to 18 decimal digits. */
export const AMOUNT_UC_PATTERN = new RegExp(`^[0-9]{1,${AMOUNT_UC_DIGITS_MAX}}$`);

/** MCP `_meta` keys of the x402 MCP transport (specs/transports-v2/mcp.md, the tool-result binding). */
export const MCP_PAYMENT_META_KEY = 'x402/payment';
export const MCP_PAYMENT_RESPONSE_META_KEY = 'x402/payment-response';
