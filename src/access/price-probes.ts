// How many different prices one merchant may ask the merchant check about one agent in an hour. The check
// answers yes or no at the offer's price, and a merchant sets that price: asked again and again at prices it
// moves by halves, the yes and no add up to the owner's figures (what a budget has left, a per-hold cap), which
// the check must not reveal (found from outside: 27 checks found a budget's remainder to the microcredit).
// A merchant asking about its own offers at their prices asks at a few prices; a search needs many. So the
// check counts the distinct prices asked per (merchant, agent) and answers 429 beyond `maxDistinct` within the
// window: a price asked before is always answered. Per process, as the request limits are; bounded in memory.
// See docs/decisions.md, "The merchant check answers at a few prices an hour per agent".

/** Distinct prices per merchant and agent within the window. */
export const PRICE_PROBES_MAX = 8;
export const PRICE_PROBES_WINDOW_S = 3600;
/** Merchant-agent pairs remembered at most; the least recently asked is forgotten first. */
const PAIRS_MAX = 100_000;

export type ProbeDecision = { allowed: true } | { allowed: false; retryAfterS: number };

export class PriceProbes {
  /** By `merchantId agentId`, the prices asked and when each was last asked (s); in order of last use. */
  readonly #pairs = new Map<string, Map<bigint, number>>();

  constructor(
    readonly maxDistinct = PRICE_PROBES_MAX,
    readonly windowS = PRICE_PROBES_WINDOW_S,
    readonly pairsMax = PAIRS_MAX,
  ) {}

  /** Records a check of `priceUc` at `atS`, unless it would be one distinct price too many in the window. */
  admit(merchantId: string, agentId: string, priceUc: bigint, atS: number): ProbeDecision {
    const key = `${merchantId} ${agentId}`;
    const prices = this.#pairs.get(key) ?? new Map<bigint, number>();
    this.#pairs.delete(key);
    for (const [price, lastS] of prices) if (lastS <= atS - this.windowS) prices.delete(price);
    let decision: ProbeDecision = { allowed: true };
    if (prices.has(priceUc) || prices.size < this.maxDistinct) prices.set(priceUc, atS);
    else decision = { allowed: false, retryAfterS: Math.max(1, Math.min(...prices.values()) + this.windowS - atS) };
    if (prices.size > 0) this.#pairs.set(key, prices);
    if (this.#pairs.size > this.pairsMax) this.#pairs.delete(this.#pairs.keys().next().value!);
    return decision;
  }
}
