// The merchant's side of the gateway: vouchers and receipts verified offline against the gateway's
// JWKS, and the redemption calls (capture, release, refund, read). Every mutating call carries an
// Idempotency-Key made once per call and reused on each retry, so a retry after a timeout or a 5xx can
// never move money twice.
import { randomUUID } from 'node:crypto';
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose';
import { GatewayError, VerificationError } from './errors.ts';
import type { Problem, ReceiptClaims, Redemption, RefundResult, VoucherClaims } from './types.ts';

export const VOUCHER_TYP = 'voucher+jwt';
export const RECEIPT_TYP = 'receipt+jwt';
const ALGORITHMS = ['ES256'];
const AMOUNT_PATTERN = /^[0-9]{1,19}$/;

export interface MerchantClientOptions {
  /** The gateway's base URL, e.g. https://gateway.example.com; it is also the `iss` of its tokens. */
  gatewayUrl: string;
  /** Your merchant id: the `aud` of every voucher made for you. */
  merchantId: string;
  /** A merchant API key (needed for capture, release, refund and getRedemption, each with its scope). */
  apiKey?: string;
  /** The expected `iss`, when it differs from gatewayUrl (a gateway behind a proxy). */
  issuer?: string;
  /** Attempts per call, the first included (default 4). */
  attemptsMax?: number;
  /** Timeout of one attempt (default 10 s). */
  timeoutMs?: number;
  /** Clock skew accepted on `exp`/`iat` (default 30 s). */
  clockToleranceS?: number;
  /** Shortest time between two JWKS fetches caused by unknown `kid`s (default 30 s). */
  jwksRefetchCooldownMs?: number;
  /** For tests: the wait before retry n (0-based). Default: 250 ms · 2ⁿ with jitter, at most 5 s. */
  backoffMs?: (attempt: number) => number;
}

export interface VoucherBounds {
  /** The offer (or offers) this endpoint sells; a voucher for any other is refused. */
  offerId?: string | readonly string[];
  minAmountUc?: bigint | string;
  maxAmountUc?: bigint | string;
}

type Amount = bigint | string;

const RETRY_AFTER_S_MAX = 30;

function defaultBackoffMs(attempt: number): number {
  const ceilingMs = Math.min(5_000, 250 * 2 ** attempt);
  return ceilingMs / 2 + Math.random() * (ceilingMs / 2);
}

function amountText(amount: Amount, name: string): string {
  const text = typeof amount === 'bigint' ? amount.toString() : amount;
  if (!AMOUNT_PATTERN.test(text)) throw new TypeError(`${name} must be a non-negative integer of microcredits, got ${String(amount)}`);
  return text;
}

function stringClaim(payload: JWTPayload, name: string): string {
  const value = payload[name];
  if (typeof value !== 'string' || value.length === 0) throw new VerificationError('invalid_token', `the ${name} claim is missing or not a string`);
  return value;
}

function amountClaim(payload: JWTPayload, name: string): string {
  const value = stringClaim(payload, name);
  if (!AMOUNT_PATTERN.test(value)) throw new VerificationError('invalid_token', `the ${name} claim is not an amount`);
  return value;
}

/** A status worth retrying with the same key: the request may not have run, or ran and can be replayed. */
function retryable(status: number, code: string | undefined): boolean {
  return status === 429 || status >= 500 || (status === 409 && code === 'idempotency_key_in_use');
}

export class MerchantClient {
  private readonly jwks: ReturnType<typeof createRemoteJWKSet>;
  private readonly baseUrl: string;
  private readonly issuer: string;

  constructor(private readonly options: MerchantClientOptions) {
    this.baseUrl = options.gatewayUrl.replace(/\/+$/, '');
    this.issuer = options.issuer ?? this.baseUrl;
    // jose caches the key set and refetches it when a token names a kid it does not know (a rotation),
    // at most once per cooldown, so a flood of forged kids cannot make us hammer the gateway.
    this.jwks = createRemoteJWKSet(new URL(`${this.baseUrl}/.well-known/jwks.json`), { cacheMaxAge: 10 * 60_000, cooldownDuration: options.jwksRefetchCooldownMs ?? 30_000 });
  }

  private async verifyJwt(token: string, typ: string, audience?: string): Promise<JWTPayload> {
    try {
      const { payload } = await jwtVerify(token, this.jwks, {
        algorithms: ALGORITHMS,
        typ,
        issuer: this.issuer,
        audience,
        clockTolerance: this.options.clockToleranceS ?? 30,
      });
      return payload;
    } catch (error) {
      throw new VerificationError('invalid_token', `the ${typ} does not verify: ${(error as Error).message}`, { cause: error });
    }
  }

  /**
   * Verifies a voucher offline: ES256 signature by a key in the gateway's JWKS, typ voucher+jwt, the
   * gateway as issuer, you as audience, not expired; then the offer and amount bounds you pass. A valid
   * voucher means the gateway holds its amount for you until `expiresAt`: capture it by `redemptionId`.
   */
  async verifyVoucher(token: string, bounds: VoucherBounds = {}): Promise<VoucherClaims> {
    const payload = await this.verifyJwt(token, VOUCHER_TYP, this.options.merchantId);
    if (typeof payload.exp !== 'number' || typeof payload.iat !== 'number') throw new VerificationError('invalid_token', 'the voucher has no exp or iat');
    const claims: VoucherClaims = {
      redemptionId: stringClaim(payload, 'jti'),
      agentId: stringClaim(payload, 'sub'),
      merchantId: this.options.merchantId,
      offerId: stringClaim(payload, 'offer_id'),
      category: stringClaim(payload, 'category'),
      amountUc: amountClaim(payload, 'amount_uc'),
      issuedAt: payload.iat,
      expiresAt: payload.exp,
    };
    if (bounds.offerId !== undefined) {
      const accepted = typeof bounds.offerId === 'string' ? [bounds.offerId] : bounds.offerId;
      if (!accepted.includes(claims.offerId)) throw new VerificationError('wrong_offer', `the voucher is for offer ${claims.offerId}, not ${accepted.join(' or ')}`);
    }
    const amount = BigInt(claims.amountUc);
    if (bounds.minAmountUc !== undefined && amount < BigInt(amountText(bounds.minAmountUc, 'minAmountUc'))) {
      throw new VerificationError('amount_out_of_bounds', `the voucher holds ${amount} µc, less than ${bounds.minAmountUc} µc`);
    }
    if (bounds.maxAmountUc !== undefined && amount > BigInt(amountText(bounds.maxAmountUc, 'maxAmountUc'))) {
      throw new VerificationError('amount_out_of_bounds', `the voucher holds ${amount} µc, more than ${bounds.maxAmountUc} µc`);
    }
    return claims;
  }

  /** Verifies a capture or refund receipt offline and checks that it was issued for you. */
  async verifyReceipt(receipt: string): Promise<ReceiptClaims> {
    const payload = await this.verifyJwt(receipt, RECEIPT_TYP);
    const kind = payload.kind;
    if (kind !== 'capture' && kind !== 'refund') throw new VerificationError('invalid_token', 'the receipt kind is neither capture nor refund');
    if (typeof payload.iat !== 'number') throw new VerificationError('invalid_token', 'the receipt has no iat');
    const claims: ReceiptClaims = {
      receiptId: stringClaim(payload, 'jti'),
      kind,
      redemptionId: stringClaim(payload, 'redemption_id'),
      offerId: stringClaim(payload, 'offer_id'),
      agentId: stringClaim(payload, 'agent_id'),
      merchantId: stringClaim(payload, 'merchant_id'),
      amountUc: amountClaim(payload, 'amount_uc'),
      capturedUc: amountClaim(payload, 'captured_uc'),
      releasedUc: amountClaim(payload, 'released_uc'),
      refundedUc: amountClaim(payload, 'refunded_uc'),
      refundId: kind === 'refund' ? stringClaim(payload, 'refund_id') : null,
      refundUc: kind === 'refund' ? amountClaim(payload, 'refund_uc') : null,
      issuedAt: payload.iat,
    };
    if (claims.merchantId !== this.options.merchantId) throw new VerificationError('wrong_merchant', `the receipt was issued for ${claims.merchantId}`);
    return claims;
  }

  /** Captures the hold, fully (default) or `amountUc` of it; the rest returns to the agent. */
  capture(redemptionId: string, options: { amountUc?: Amount; idempotencyKey?: string } = {}): Promise<Redemption> {
    const body = options.amountUc === undefined ? {} : { amountUc: amountText(options.amountUc, 'amountUc') };
    return this.send('POST', `/v1/redemptions/${encodeURIComponent(redemptionId)}/capture`, body, options.idempotencyKey);
  }

  /** Releases the hold: all of it returns to the agent. Releasing a released hold is a no-op. */
  release(redemptionId: string, options: { idempotencyKey?: string } = {}): Promise<Redemption> {
    return this.send('POST', `/v1/redemptions/${encodeURIComponent(redemptionId)}/release`, {}, options.idempotencyKey);
  }

  /** Refunds captured credit to the agent: all that is left (default) or `amountUc`. */
  refund(redemptionId: string, options: { amountUc?: Amount; reason?: string; idempotencyKey?: string } = {}): Promise<RefundResult> {
    const body: Record<string, string> = {};
    if (options.amountUc !== undefined) body.amountUc = amountText(options.amountUc, 'amountUc');
    if (options.reason !== undefined) body.reason = options.reason;
    return this.send('POST', `/v1/redemptions/${encodeURIComponent(redemptionId)}/refunds`, body, options.idempotencyKey);
  }

  getRedemption(redemptionId: string): Promise<Redemption> {
    return this.send('GET', `/v1/redemptions/${encodeURIComponent(redemptionId)}`);
  }

  /**
   * One call with retries. A mutating call gets one Idempotency-Key (yours, or a fresh UUID) for all its
   * attempts: the gateway runs it once and replays the stored answer to every retry.
   */
  private async send<T>(method: 'GET' | 'POST', path: string, body?: unknown, idempotencyKey?: string): Promise<T> {
    if (!this.options.apiKey) throw new TypeError('this call needs a merchant API key: pass apiKey to MerchantClient');
    const headers: Record<string, string> = { authorization: `Bearer ${this.options.apiKey}`, accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (method === 'POST') headers['idempotency-key'] = idempotencyKey ?? randomUUID();
    const attemptsMax = this.options.attemptsMax ?? 4;
    const backoffMs = this.options.backoffMs ?? defaultBackoffMs;
    for (let attempt = 0; ; attempt++) {
      const last = attempt + 1 >= attemptsMax;
      let response: Response;
      try {
        response = await fetch(`${this.baseUrl}${path}`, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(this.options.timeoutMs ?? 10_000),
        });
      } catch (error) {
        // No answer (refused, reset, timed out): the call may or may not have run; the key makes a retry safe.
        if (last) throw error;
        await sleep(backoffMs(attempt));
        continue;
      }
      const parsed = await readJson(response);
      if (response.ok) return parsed as T;
      const problem: Problem = { status: response.status, ...(typeof parsed === 'object' && parsed !== null ? parsed : { detail: String(parsed ?? '') }) };
      if (last || !retryable(response.status, problem.code)) throw new GatewayError(problem);
      const retryAfterS = Number(response.headers.get('retry-after'));
      await sleep(Number.isFinite(retryAfterS) && retryAfterS > 0 ? Math.min(retryAfterS, RETRY_AFTER_S_MAX) * 1000 : backoffMs(attempt));
    }
  }
}

/** The body as JSON, or as text when something in between (a proxy) answered with a page. */
async function readJson(response: Response): Promise<unknown> {
  const text = await response.text();
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text.slice(0, 200);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
