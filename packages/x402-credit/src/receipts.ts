// The payment response's proof: the gateway's signed capture receipt (`extra.receipt` of the
// PAYMENT-RESPONSE), verified against the gateway's JWKS. An agent (or a merchant) holds it as proof of
// exactly what was charged, for which hold, by whom and to whom.
import type { SettleResponse } from '@x402/core/types';
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, errors, jwksCache, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { AMOUNT_UC_PATTERN, RECEIPT_TYP } from './constants.js';
import { CreditError } from './errors.js';
import { authorityOf } from './requirements.js';

/** A verified capture receipt's claims. Amounts are microcredits as decimal strings. */
export interface CreditReceipt {
  receiptId: string;
  kind: 'capture' | 'refund';
  /** The hold: the attestation's `jti`, the payment response's `extra.commitmentId`. */
  redemptionId: string;
  offerId: string;
  agentId: string;
  merchantId: string;
  /** What the attestation authorized (the hold). */
  amountUc: string;
  /** What was charged. */
  capturedUc: string;
  /** What went back to the agent. */
  releasedUc: string;
  refundedUc: string;
  issuedAt: number;
  /** The hash of the agent's mandate version in force at the hold, when one was. */
  mandate: string | null;
}

export interface VerifyReceiptOptions {
  /** The gateway's base URL: the receipt's `iss`, and its JWKS at `/.well-known/jwks.json`. */
  gatewayUrl: string;
  /** Refuse a receipt for another merchant. */
  merchantId?: string;
  /** Refuse a receipt for another agent. */
  agentId?: string;
  /** Refuse a receipt of another hold (the payment response's `extra.commitmentId`). */
  redemptionId?: string;
}

/** Shortest time between two fetches of a gateway's key set that unknown kids ask for. */
const UNKNOWN_KID_COOLDOWN_MS = 1_000;

/** How far the gateway's clock may be behind this one's: a receipt's `iat` is read on the gateway's clock. */
const CLOCK_SKEW_MS = 30_000;

/**
 * When a token was signed at the latest, on this process's clock: the end of its `iat` second plus the clock skew
 * allowed, or its arrival if sooner (a claim in the future, or none). Its key was published by then, so a key set
 * fetched from then on holds it; tokens signed well before a fetch began share it, however they arrive (a forged `iat`
 * only spares the forger's own wait or costs it one). Without the skew, a gateway's clock a second behind this one's,
 * or a receipt signed again with its first `iat`, made a fetch begun before the new key's publication count as after it.
 */
function signedBy(token: { payload: string | Uint8Array }, arrivedMs: number): number {
  if (typeof token.payload !== 'string') return arrivedMs;
  try {
    const iat: unknown = JSON.parse(Buffer.from(token.payload, 'base64url').toString('utf8')).iat;
    return typeof iat === 'number' && Number.isFinite(iat) ? Math.min(arrivedMs, (Math.floor(iat) + 1) * 1000 + CLOCK_SKEW_MS) : arrivedMs;
  } catch {
    return arrivedMs;
  }
}

/**
 * One gateway's key set, cached by jose (10 min). A receipt naming a kid it lacks is checked against a key set fetched
 * after the receipt was signed (`signedBy`), so a key that began signing a moment ago is always found; such fetches start at least a
 * cooldown apart, and every receipt waiting meets the next one. The cooldown counted from the last fetch and refused
 * what met it, so one forged kid made a key that began signing right after (a rotation with no lead, `acg keys rotate
 * --expire-now`) refused for 30 s (the merchant SDK's fault, found from outside; the same rule here). jose's own
 * cooldown counts from any fetch, so keyFor makes these fetches itself.
 */
class GatewayKeys {
  private readonly jwks: ReturnType<typeof createRemoteJWKSet>;
  private readonly jwksUrl: string;
  /** Written by jose at each fetch of the key set: `uat`, when its answer came, says which key set a refusal looked in. */
  private readonly jwksRead: { uat?: number } = {};
  /** The latest fetch an unknown kid asked for: when it starts (or started), and its end. */
  private unknownKidFetch: { startsAtMs: number; done: Promise<void> } | undefined;

  constructor(authority: string) {
    this.jwksUrl = `${authority}/.well-known/jwks.json`;
    // jose's own refetch on an unknown kid is held back as long as the cache lives: keyFor makes it.
    this.jwks = createRemoteJWKSet(new URL(this.jwksUrl), { cacheMaxAge: 10 * 60_000, cooldownDuration: 10 * 60_000, [jwksCache]: this.jwksRead as Record<string, never> });
  }

  /**
   * Why no key verified a receipt: the kid looked for, the key set looked in (its URL, when it was fetched), the
   * receipt's `iat`, and the causes that fit them. It said jose's "no applicable key found in the JSON Web Key Set",
   * naming neither the kid nor the key set, though a gateway clock behind this one's by more than the skew allowed
   * refuses a genuine receipt so (a key set fetched that long after its `iat` is not fetched again for it: found from
   * outside, 9 s of refusals after a rotation with no lead, the gateway 40 s behind). A key set fetched after the
   * receipt arrived rules the clock out; then a rotation with no lead behind a load balancer can be the cause.
   */
  noKeyFor(receipt: string, arrivedMs: number): string {
    const fetchedAtMs = this.jwksRead.uat;
    const iat = claimedIat(receipt);
    const lookedFor = `no key of the gateway's JWKS (${this.jwksUrl}${fetchedAtMs === undefined ? '' : `, fetched at ${isoTime(fetchedAtMs)}`}) has its kid ${JSON.stringify(headerKid(receipt))}`;
    const stopped = 'a key the gateway stopped publishing (a rotated key is published for its retention, 7 days by default)';
    if (iat !== undefined && fetchedAtMs !== undefined && fetchedAtMs < arrivedMs) {
      return (
        `${lookedFor}; that key set was fetched before the receipt arrived, ${Math.round(fetchedAtMs / 1000 - iat)} s after its iat (${isoTime(iat * 1000)}), ` +
        `more than the clock skew allowed (${CLOCK_SKEW_MS / 1000} s), so it was not fetched again: a forgery, ${stopped}, or a gateway clock more than ` +
        `${CLOCK_SKEW_MS / 1000} s behind this one's, signing with a key published after that fetch (check the gateway's clock)`
      );
    }
    return (
      `${lookedFor}, and that key set was fetched after the receipt arrived (${iat === undefined ? 'it has no iat' : `its iat is ${isoTime(iat * 1000)}`}): ` +
      `a forgery, ${stopped}, or, just after a rotation with no lead, a gateway instance that had not loaded the new key yet (for up to 5 s) answering the fetch`
    );
  }

  readonly keyFor: JWTVerifyGetKey = async (header, token) => {
    try {
      return await this.jwks(header, token);
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey)) throw error;
      await this.fetchedAfter(signedBy(token, Date.now()));
      return this.jwks(header, token);
    }
  };

  /** Waits for a fetch that starts at or after `signedByMs`: the last one, the next one scheduled, or a new one, a cooldown after the last. */
  private fetchedAfter(signedByMs: number): Promise<void> {
    const last = this.unknownKidFetch;
    if (last !== undefined && last.startsAtMs >= signedByMs) return last.done;
    const nowMs = Date.now();
    const startsAtMs = last === undefined ? nowMs : Math.max(nowMs, last.startsAtMs + UNKNOWN_KID_COOLDOWN_MS);
    // After the last one has ended, so that jose's reload starts a fetch of its own rather than joining that one.
    const done = (last?.done.catch(() => {}) ?? Promise.resolve()).then(async () => {
      const waitMs = startsAtMs - Date.now();
      if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
      await this.jwks.reload();
    });
    // A failed fetch is each waiting receipt's own error, never an unhandled rejection.
    done.catch(() => {});
    this.unknownKidFetch = { startsAtMs, done };
    return done;
  }
}

const keySets = new Map<string, GatewayKeys>();

/** One cached key set per gateway. */
function keySet(authority: string): GatewayKeys {
  let keys = keySets.get(authority);
  if (!keys) {
    keys = new GatewayKeys(authority);
    keySets.set(authority, keys);
  }
  return keys;
}

/** The `kid` a token's header names, to say which key a refusal looked for (undefined when the header does not read). */
function headerKid(token: string): unknown {
  try {
    return decodeProtectedHeader(token).kid;
  } catch {
    return undefined;
  }
}

/** The `iat` a token's payload says, unverified, to say when it claims to be signed (undefined when none reads). */
function claimedIat(token: string): number | undefined {
  try {
    const iat = decodeJwt(token).iat;
    return typeof iat === 'number' && Number.isFinite(iat) ? iat : undefined;
  } catch {
    return undefined;
  }
}

/** A time as ISO 8601, or as its number when it is none (a forged claim far out of range). */
function isoTime(ms: number): string {
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? `${ms / 1000} s after the epoch` : date.toISOString();
}

function text(payload: JWTPayload, name: string, pattern?: RegExp): string {
  const value = payload[name];
  if (typeof value !== 'string' || value.length === 0 || (pattern && !pattern.test(value))) throw new CreditError('invalid_receipt', `the receipt's ${name} is missing or malformed`);
  return value;
}

function expect(name: string, actual: string, expected: string | undefined): void {
  if (expected !== undefined && actual !== expected) throw new CreditError('invalid_receipt', `the receipt is for ${name} ${actual}, not ${expected}`);
}

/** Whether jose could not read the key set at all (no answer, a timeout, an answer other than a key set), as the merchant SDK tells it. */
function isKeySetUnreachable(error: unknown): boolean {
  if (error instanceof errors.JWKSTimeout) return true;
  if (error instanceof TypeError && error.message === 'fetch failed') return true;
  return error instanceof errors.JOSEError && error.code === 'ERR_JOSE_GENERIC' && /JSON Web Key Set HTTP response/.test(error.message);
}

/** Verifies a receipt (ES256, typ `receipt+jwt`, iss the gateway) and the parties it names; returns its claims. */
export async function verifyCreditReceipt(receipt: string, options: VerifyReceiptOptions): Promise<CreditReceipt> {
  const authority = authorityOf(options.gatewayUrl);
  const keys = keySet(authority);
  const arrivedMs = Date.now();
  let payload: JWTPayload;
  try {
    // Spelled as the gateway signs it: jose's decoder ignores bits past a segment's last byte, so one receipt had
    // several spellings that all verified (found from outside on the gateway's own tokens).
    const oneSpelling = /^[\w-]+\.[\w-]+\.[\w-]+$/.test(receipt) && receipt.split('.').every((part) => Buffer.from(part, 'base64url').toString('base64url') === part);
    if (!oneSpelling) throw new errors.JWSInvalid('it is not a compact JWS of three base64url segments, each in its one spelling');
    ({ payload } = await jwtVerify(receipt, keys.keyFor, { algorithms: ['ES256'], typ: RECEIPT_TYP, issuer: authority }));
  } catch (error) {
    // The gateway's keys could not be read: nothing is known of the receipt, so it is no forgery; retry later (found
    // from outside: an outage read as invalid_receipt, where the merchant SDK says ConnectionError).
    if (isKeySetUnreachable(error)) {
      throw new CreditError('gateway_unavailable', `the gateway's keys (${authority}/.well-known/jwks.json) could not be read, so the receipt could not be checked: ${(error as Error).message}; retry later`, { cause: error });
    }
    const why = error instanceof errors.JWKSNoMatchingKey ? keys.noKeyFor(receipt, arrivedMs) : (error as Error).message;
    throw new CreditError('invalid_receipt', `the receipt does not verify: ${why}`, { cause: error });
  }
  const kind = payload.kind;
  if (kind !== 'capture' && kind !== 'refund') throw new CreditError('invalid_receipt', 'the receipt is neither a capture nor a refund');
  if (typeof payload.iat !== 'number') throw new CreditError('invalid_receipt', 'the receipt has no iat');
  const claims: CreditReceipt = {
    receiptId: text(payload, 'jti'),
    kind,
    redemptionId: text(payload, 'redemption_id'),
    offerId: text(payload, 'offer_id'),
    agentId: text(payload, 'agent_id'),
    merchantId: text(payload, 'merchant_id'),
    amountUc: text(payload, 'amount_uc', AMOUNT_UC_PATTERN),
    capturedUc: text(payload, 'captured_uc', AMOUNT_UC_PATTERN),
    releasedUc: text(payload, 'released_uc', AMOUNT_UC_PATTERN),
    refundedUc: text(payload, 'refunded_uc', AMOUNT_UC_PATTERN),
    issuedAt: payload.iat,
    mandate: typeof payload.mandate === 'string' ? payload.mandate : null,
  };
  expect('merchant', claims.merchantId, options.merchantId);
  expect('agent', claims.agentId, options.agentId);
  expect('hold', claims.redemptionId, options.redemptionId);
  return claims;
}

/**
 * The receipt of a payment response (PAYMENT-RESPONSE, or MCP's `x402/payment-response`), verified, and
 * checked against the response itself: the hold is its `commitmentId`, the charge its `chargedAmount`.
 */
export async function verifyPaymentResponse(response: SettleResponse, options: VerifyReceiptOptions): Promise<CreditReceipt> {
  const extra = response.extra ?? {};
  if (!response.success) throw new CreditError('invalid_receipt', `the payment was not settled: ${response.errorReason ?? 'unknown reason'}`);
  if (typeof extra.receipt !== 'string') throw new CreditError('invalid_receipt', 'the payment response carries no receipt');
  const claims = await verifyCreditReceipt(extra.receipt, {
    ...options,
    redemptionId: options.redemptionId ?? (typeof extra.commitmentId === 'string' ? extra.commitmentId : undefined),
  });
  if (claims.kind !== 'capture') throw new CreditError('invalid_receipt', 'the payment response carries a refund receipt');
  if (typeof extra.chargedAmount === 'string' && extra.chargedAmount !== claims.capturedUc) {
    throw new CreditError('invalid_receipt', `the response says ${extra.chargedAmount} µc were charged; the receipt says ${claims.capturedUc}`);
  }
  return claims;
}
