// The merchant's side of the gateway: vouchers and receipts verified offline against the gateway's
// JWKS, and the redemption calls (capture, release, refund, read). Every mutating call carries an
// Idempotency-Key made once per call and reused on each retry, so a retry after a timeout or a 5xx can
// never move money twice. An offline verifier cannot ask the gateway whether a voucher was revoked, so the
// client keeps a RevocationSet, fed by the `voucher.revoked` webhook (handleWebhook) or by polling the
// revocations feed (pollRevocations, syncRevocations), and refuses the vouchers in it.
import { createHash, randomUUID } from 'node:crypto';
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, errors, jwksCache, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { ConnectionError, GatewayError, VerificationError } from './errors.js';
import { RevocationSet, REVOCATION_TOLERANCE_S_DEFAULT } from './revocations.js';
import type { EvidenceApproval, EvidenceClaims, EvidenceMandate, Problem, ReceiptClaims, Redemption, RefundResult, RevocationFeedPage, VoucherClaims, WebhookEvent } from './types.js';
import { verifyWebhook, type HeaderSource } from './webhooks.js';

export const VOUCHER_TYP = 'voucher+jwt';
export const RECEIPT_TYP = 'receipt+jwt';
export const EVIDENCE_TYP = 'evidence+jwt';
const ALGORITHMS = ['ES256'];
/** The most digits of an amount the gateway takes or signs (its `UC_DIGITS_MAX`): at most 10¹⁸ − 1 µc. */
const AMOUNT_UC_DIGITS_MAX = 18;
const AMOUNT_PATTERN = new RegExp(`^[0-9]{1,${AMOUNT_UC_DIGITS_MAX}}$`);
/** Revocations per feed request: the feed's largest page, so a catch-up takes the fewest round trips. */
const FEED_PAGE_LIMIT = 500;

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
  /** How long one call may go on retrying, from its first attempt (default 30 s): no retry is made whose wait would end past it. */
  retryWindowMs?: number;
  /**
   * Clock skew accepted on a token issued "in the future" by your clock, i.e. on its `nbf` (default 30 s), and on a
   * token whose key this client has not seen: it is looked for in a key set fetched after its `iat` plus this skew.
   * It does not extend a voucher's `exp`: a voucher is refused from its `exp` on, by your clock, since the
   * gateway expires its hold then (its credit goes back to the agent; a capture answers 409 hold_resolved).
   */
  clockToleranceS?: number;
  /**
   * The revoked vouchers verifyVoucher refuses (default: a RevocationSet of its own, with this client's
   * clockToleranceS). Any set will do: it keeps an entry at least until the voucher's `exp`, and no voucher
   * verifies past that.
   */
  revocations?: RevocationSet;
  /**
   * Shortest time between two JWKS fetches caused by unknown `kid`s (default 1 s). A token naming one waits for the
   * fetch that began after it was signed, so it is checked against keys published when it was made.
   */
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

export interface PollRevocationsOptions {
  /** The wait between the end of one sync and the start of the next: the worst-case delay is this plus one request. */
  intervalMs: number;
  /** Stops polling when aborted (as `stop()` does). */
  signal?: AbortSignal;
  /** Told of each sync that failed after its retries (default: a process warning); polling goes on. */
  onError?: (error: unknown) => void;
}

/** A running poller of the revocations feed. */
export interface RevocationPolling {
  /** Stops polling: a request in flight is aborted, none starts after; resolves once the poller has ended. */
  stop(): Promise<void>;
}

/** What one sync of the revocations feed read. */
export interface RevocationSync {
  /** The hold ids the feed listed since the previous sync (each now in the client's RevocationSet). */
  holdIds: string[];
  /** The cursor the next sync starts from. */
  nextSince: string;
}

const RETRY_AFTER_S_MAX = 30;
const RETRY_WINDOW_MS_DEFAULT = 30_000;
/** How long the cached key set is used before it is fetched again (an unknown kid fetches it sooner: keyFor). */
const JWKS_CACHE_MAX_AGE_MS = 10 * 60_000;
/** Shortest time between two fetches of the key set that unknown kids ask for, by default. */
const JWKS_REFETCH_COOLDOWN_MS_DEFAULT = 1_000;

/** The answer's Retry-After in seconds (delay-seconds, as the gateway sends it), as it said it. */
function retryAfterSOf(headers: Headers): number | undefined {
  const text = headers.get('retry-after');
  return text !== null && /^\s*\d{1,9}\s*$/.test(text) ? Number(text) : undefined;
}

function defaultBackoffMs(attempt: number): number {
  const ceilingMs = Math.min(5_000, 250 * 2 ** attempt);
  return ceilingMs / 2 + Math.random() * (ceilingMs / 2);
}

function amountText(amount: Amount, name: string): string {
  // A number from plain JavaScript is refused here, as the README says, not sent for the gateway to refuse (found
  // from outside): past 2^53 a number is no longer the amount that was meant.
  if (typeof amount !== 'bigint' && typeof amount !== 'string') {
    throw new TypeError(`${name} must be a string of digits or a bigint (a number loses microcredits past 2^53), got ${typeof amount} ${String(amount)}`);
  }
  const text = typeof amount === 'bigint' ? amount.toString() : amount;
  if (!AMOUNT_PATTERN.test(text)) throw new TypeError(`${name} must be a whole number of microcredits, digits only, at most ${AMOUNT_UC_DIGITS_MAX} of them, got ${String(amount)}`);
  return text;
}

/** A string claim that may be absent: null then. */
function optionalStringClaim(payload: JWTPayload, name: string): string | null {
  const value = payload[name];
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new VerificationError('invalid_token', `the ${name} claim is not a string`);
  return value;
}

function invalidEvidence(detail: string): never {
  throw new VerificationError('invalid_token', `the evidence does not hold: ${detail}`);
}

/** A mandate of the evidence, whose hash must be the base64url SHA-256 of the canonical JSON it carries. */
function checkedMandate(value: unknown, name: string): EvidenceMandate {
  const { version, hash, canonical } = (value ?? {}) as Partial<EvidenceMandate>;
  if (typeof version !== 'number' || typeof hash !== 'string' || typeof canonical !== 'string') invalidEvidence(`${name} is not {version, hash, canonical}`);
  if (createHash('sha256').update(canonical, 'utf8').digest('base64url') !== hash) invalidEvidence(`${name}'s hash is not the SHA-256 of its canonical JSON`);
  return { version, hash, canonical };
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

/**
 * When a token was signed at the latest, on this process's clock: the end of its `iat` second plus `skewMs` (how far the
 * gateway's clock may be behind this one's: `iat` is read on its clock), or its arrival if sooner (a claim in the
 * future, or none). Its key was published by then, so a key set fetched from then on holds it; tokens signed well
 * before a fetch began share it, however they arrive (a forged `iat` only spares the forger's own wait or costs it one).
 * Without the skew, a gateway's clock a second behind this one's made a fetch begun before a new key's publication
 * count as after it, and that key's tokens were refused as forgeries.
 */
function signedBy(token: { payload: string | Uint8Array }, arrivedMs: number, skewMs: number): number {
  if (typeof token.payload !== 'string') return arrivedMs;
  try {
    const iat: unknown = JSON.parse(Buffer.from(token.payload, 'base64url').toString('utf8')).iat;
    return typeof iat === 'number' && Number.isFinite(iat) ? Math.min(arrivedMs, (Math.floor(iat) + 1) * 1000 + skewMs) : arrivedMs;
  } catch {
    return arrivedMs;
  }
}

/**
 * Whether a token is spelled as the gateway signs it: three base64url segments, no padding, no bits set past a
 * segment's last byte. jose's decoder ignores those bits, so one voucher had several spellings that all verified
 * (found from outside), and a merchant keeping vouchers by their text would take them for different vouchers.
 */
function isOneSpelling(token: string): boolean {
  return /^[\w-]+\.[\w-]+\.[\w-]+$/.test(token) && token.split('.').every((part) => Buffer.from(part, 'base64url').toString('base64url') === part);
}

export class MerchantClient {
  /** The revoked vouchers verifyVoucher refuses: the one passed as `revocations`, or the client's own. */
  readonly revocations: RevocationSet;
  private readonly jwks: ReturnType<typeof createRemoteJWKSet>;
  private readonly jwksUrl: string;
  /** Written by jose at each fetch of the key set: `uat`, when its answer came, says which key set a refusal looked in. */
  private readonly jwksRead: { uat?: number } = {};
  /** The latest fetch of the key set an unknown kid asked for: when it starts (or started), and its end. */
  private unknownKidFetch: { startsAtMs: number; done: Promise<void> } | undefined;
  private readonly baseUrl: string;
  private readonly issuer: string;
  /** Where the next sync of the revocations feed starts; undefined: from the start of the feed. */
  private revocationsSince: string | undefined;
  /** The sync running or last run: syncs run one after another, each from where the previous one ended. */
  private revocationsSync: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: MerchantClientOptions) {
    // Each is what a voucher is checked against: left out (an unset environment variable, in plain JavaScript), a
    // voucher's audience would go unchecked, and one minted for another merchant would verify (found from outside).
    for (const name of ['gatewayUrl', 'merchantId'] as const) {
      if (typeof options[name] !== 'string' || options[name] === '') throw new TypeError(`MerchantClient needs ${name}, a non-empty string; got ${String(options[name])}`);
    }
    this.baseUrl = options.gatewayUrl.replace(/\/+$/, '');
    this.issuer = options.issuer ?? this.baseUrl;
    // No voucher verifies past its exp (verifyJwt gives exp no tolerance), and a set keeps an entry at least
    // until then, so the set's tolerance need not match the client's.
    this.revocations = options.revocations ?? new RevocationSet({ clockToleranceS: options.clockToleranceS ?? REVOCATION_TOLERANCE_S_DEFAULT });
    // jose caches the key set (fetched again once 10 minutes old). Its own refetch on an unknown kid is held back for as
    // long (its cooldown counts from any fetch, the first one too): keyFor makes that refetch, once per cooldown of its
    // own, so a flood of forged kids cannot make us hammer the gateway.
    this.jwksUrl = `${this.baseUrl}/.well-known/jwks.json`;
    this.jwks = createRemoteJWKSet(new URL(this.jwksUrl), {
      cacheMaxAge: JWKS_CACHE_MAX_AGE_MS,
      cooldownDuration: JWKS_CACHE_MAX_AGE_MS,
      [jwksCache]: this.jwksRead as Record<string, never>,
    });
  }

  /** Clock skew accepted between the gateway and this process (clockToleranceS). */
  private get clockToleranceMs(): number {
    return (this.options.clockToleranceS ?? REVOCATION_TOLERANCE_S_DEFAULT) * 1000;
  }

  private get jwksCooldownMs(): number {
    return this.options.jwksRefetchCooldownMs ?? JWKS_REFETCH_COOLDOWN_MS_DEFAULT;
  }

  /**
   * The key a token names. A kid the cached set lacks is looked for in a key set fetched after the token was signed (`signedBy`), so a
   * key that began signing a moment ago is always found; such fetches start at least a cooldown apart, and every token
   * waiting meets the next one (a flood of forged kids costs the gateway one fetch a cooldown, and the forger a wait).
   * The cooldown counted from the last such fetch and refused what met it: one forged kid then made a key that began
   * signing right after (a rotation with no lead, `--expire-now` after a leak) refused as a forgery for 30 s, and a
   * forged kid every 30 s kept it so (found from outside). jose's own cooldown counts from any fetch, so keyFor makes
   * these fetches itself.
   */
  private readonly keyFor: JWTVerifyGetKey = async (header, token) => {
    try {
      return await this.jwks(header, token);
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey)) throw error;
      await this.keySetFetchedAfter(signedBy(token, Date.now(), this.clockToleranceMs));
      return this.jwks(header, token);
    }
  };

  /** Waits for a fetch of the key set that starts at or after `signedByMs`: the last one, the next one scheduled, or a new one, a cooldown after the last. */
  private keySetFetchedAfter(signedByMs: number): Promise<void> {
    const last = this.unknownKidFetch;
    if (last !== undefined && last.startsAtMs >= signedByMs) return last.done;
    const nowMs = Date.now();
    const startsAtMs = last === undefined ? nowMs : Math.max(nowMs, last.startsAtMs + this.jwksCooldownMs);
    // After the last one has ended, so that jose's reload starts a fetch of its own rather than joining that one.
    const previous = last?.done.catch(() => {}) ?? Promise.resolve();
    const done = previous.then(async () => {
      const waitMs = startsAtMs - Date.now();
      if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
      await this.jwks.reload();
    });
    // A failed fetch is each waiting token's own error (the keys could not be read), never an unhandled rejection.
    done.catch(() => {});
    this.unknownKidFetch = { startsAtMs, done };
    return done;
  }

  /**
   * The signature, typ, iss, aud and times of a token. jose applies its clockTolerance to `exp` as well as to
   * `nbf`, so with `strictExp` (a voucher) `exp` is checked again without it: a voucher whose hold the gateway
   * has expired (credit back to the agent, capture 409 hold_resolved) must not verify for another 30 s. The
   * tolerance still absorbs a gateway clock ahead of ours (`nbf`). A receipt has no `exp`: it records a past
   * capture and verifies while its key is in the gateway's JWKS (a rotated key stays for its retention).
   */
  private async verifyJwt(token: string, typ: string, audience: string | undefined, strictExp: boolean): Promise<JWTPayload> {
    const arrivedMs = Date.now();
    try {
      if (!isOneSpelling(token)) throw new errors.JWSInvalid('it is not a compact JWS of three base64url segments, each in its one spelling');
      const { payload } = await jwtVerify(token, this.keyFor, {
        algorithms: ALGORITHMS,
        typ,
        issuer: this.issuer,
        audience,
        clockTolerance: this.options.clockToleranceS ?? REVOCATION_TOLERANCE_S_DEFAULT,
      });
      // A voucher is for one merchant: jose passes an `aud` list that names us among others, which the gateway never
      // signs (found from outside). Such a token is refused as invalid, not as another merchant's.
      if (audience !== undefined && payload.aud !== audience) {
        throw new errors.JWTClaimValidationFailed(`its aud ${JSON.stringify(payload.aud)} is not this merchant alone (${JSON.stringify(audience)})`, payload, 'aud', 'not_exact');
      }
      // Read the clock after the JWKS fetch (it may have taken seconds), as jose does, with its comparison: expired at exp.
      if (strictExp && typeof payload.exp === 'number' && payload.exp <= Math.floor(Date.now() / 1000)) {
        throw new errors.JWTExpired('"exp" claim timestamp check failed', payload, 'exp', 'check_failed');
      }
      return payload;
    } catch (error) {
      // The gateway's keys could not be read (no answer, a timeout, an answer other than 200): nothing is known of the
      // token, so it is not refused as forged (found from outside: an outage read as invalid_token, so a merchant
      // refused valid vouchers and a forgery alarm fired). Retry later, as for any call without an answer.
      if (isKeySetUnreachable(error)) {
        throw new ConnectionError(1, undefined, { cause: error, message: `the gateway's keys (${this.jwksUrl}) could not be read, so the ${typ} could not be checked: ${(error as Error).message}; retry later` });
      }
      // A token the gateway signed for another merchant is genuine (jose checks claims after the signature): a misrouted
      // agent, not a forgery, as for a receipt (found from outside: a voucher said invalid_token, a receipt wrong_merchant).
      const code = error instanceof errors.JWTClaimValidationFailed && error.claim === 'aud' && error.reason === 'check_failed' ? 'wrong_merchant' : 'invalid_token';
      throw new VerificationError(code, `the ${typ} does not verify: ${this.whyRefused(error, audience, token, arrivedMs)}`, { cause: error });
    }
  }

  /**
   * Why a token was refused, naming what was expected and what it holds where jose's words do not (found from
   * outside: "unexpected "iss" claim value" left a merchant guessing that gatewayUrl said localhost where the gateway
   * names itself 127.0.0.1). A claim check runs after the signature's, so the values named are the gateway's own.
   */
  private whyRefused(error: unknown, audience: string | undefined, token: string, arrivedMs: number): string {
    const message = (error as Error).message;
    if (error instanceof errors.JWKSNoMatchingKey) return this.noKeyFor(token, arrivedMs);
    if (error instanceof errors.JWTExpired) {
      const exp = error.payload.exp;
      return typeof exp === 'number' ? `it expired at ${new Date(exp * 1000).toISOString()} (now ${new Date().toISOString()} by this machine's clock)` : message;
    }
    if (error instanceof errors.JWTClaimValidationFailed && error.reason === 'check_failed') {
      if (error.claim === 'iss') {
        return `its issuer is ${JSON.stringify(error.payload.iss)}, not ${JSON.stringify(this.issuer)}: set gatewayUrl (or issuer, behind a proxy) to the URL the gateway names itself by, its issuer at /.well-known/oauth-authorization-server`;
      }
      if (error.claim === 'aud') return `it is for ${JSON.stringify(error.payload.aud)}, not merchantId ${JSON.stringify(audience)}`;
    }
    return message;
  }

  /**
   * Why no key verified a token: the kid looked for, the key set looked in (its URL, when it was fetched), the token's
   * `iat`, and the causes that fit them. A receipt outlives its key's publication (a rotated key leaves the JWKS after its
   * retention), which read as a forgery with jose's words alone (found from outside). A key set fetched more than
   * clockToleranceS after a token's `iat` is not fetched again for it (`signedBy`), so with a gateway clock behind this
   * one's by more than that, a key it began signing with after the last fetch is refused: the message called such a
   * genuine token a forgery and never named the clock (found from outside: 9 s of refusals after a rotation with no lead,
   * the gateway 40 s behind). A key set fetched after the token arrived rules the clock out; then a rotation with no lead
   * behind a load balancer can be the cause (an instance that has not reloaded its keys yet answered the fetch).
   */
  private noKeyFor(token: string, arrivedMs: number): string {
    const fetchedAtMs = this.jwksRead.uat;
    const iat = claimedIat(token);
    const lookedFor = `no key of the gateway's JWKS (${this.jwksUrl}${fetchedAtMs === undefined ? '' : `, fetched at ${isoTime(fetchedAtMs)}`}) has its kid ${JSON.stringify(headerKid(token))}`;
    const stopped = 'a key the gateway stopped publishing (a rotated key is published for its retention, 7 days by default; a receipt older than that is shown, signed anew, by getEvidence(redemptionId))';
    if (iat !== undefined && fetchedAtMs !== undefined && fetchedAtMs < arrivedMs) {
      return (
        `${lookedFor}; that key set was fetched before the token arrived, ${Math.round(fetchedAtMs / 1000 - iat)} s after its iat (${isoTime(iat * 1000)}), ` +
        `more than clockToleranceS (${this.clockToleranceMs / 1000} s), so it was not fetched again: a forgery, ${stopped}, or a gateway clock more than ` +
        `clockToleranceS behind this one's, signing with a key published after that fetch (check the gateway's clock, or raise clockToleranceS)`
      );
    }
    return (
      `${lookedFor}, and that key set was fetched after the token arrived (${iat === undefined ? 'it has no iat' : `its iat is ${isoTime(iat * 1000)}`}): ` +
      `a forgery, ${stopped}, or, just after a rotation with no lead, a gateway instance that had not loaded the new key yet (for up to 5 s) answering the fetch`
    );
  }

  /**
   * Verifies a voucher offline: ES256 signature by a key in the gateway's JWKS, typ voucher+jwt, the
   * gateway as issuer, you as audience, not expired (by your clock, from its `exp` on: clockToleranceS
   * does not extend it); not revoked (in `revocations`); then the offer and amount bounds you pass. An
   * expired voucher throws `invalid_token`, its cause jose's `JWTExpired` (claim `exp`). A valid voucher means the gateway holds its amount for you until `expiresAt`:
   * capture it by `redemptionId`. A revocation the set has not heard of yet still shows at capture (409
   * `voucher_revoked`).
   */
  async verifyVoucher(token: string, bounds: VoucherBounds = {}): Promise<VoucherClaims> {
    const payload = await this.verifyJwt(token, VOUCHER_TYP, this.options.merchantId, true);
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
      mandateHash: optionalStringClaim(payload, 'mandate'),
    };
    if (this.revocations.has(claims.redemptionId)) {
      // The voucher's own exp is a closer end for its entry than the feed's bound (revokedAt + longest lifetime).
      this.revocations.add(claims.redemptionId, { expiresAt: claims.expiresAt });
      throw new VerificationError('voucher_revoked', `the voucher's hold ${claims.redemptionId} was revoked by the gateway (its credit went back to the agent)`);
    }
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

  /**
   * Verifies a capture or refund receipt offline and checks that it was issued for you (`wrong_merchant` when not). It
   * verifies while the key that signed it is in the gateway's JWKS: a key replaced by a rotation stays for its retention
   * (7 days by default); for an older receipt, `getEvidence` carries it under the gateway's current signature.
   */
  async verifyReceipt(receipt: string): Promise<ReceiptClaims> {
    const payload = await this.verifyJwt(receipt, RECEIPT_TYP, undefined, false);
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
      mandateHash: optionalStringClaim(payload, 'mandate'),
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
   * The redemption's evidence for a dispute (needs the `evidence:read` scope): the signed JWS as the gateway gave it
   * (`evidence`, to hand to a third party) and its claims, verified here: ES256 by a key of the gateway's JWKS, typ
   * evidence+jwt, the gateway as issuer, for this redemption, and each mandate's hash the SHA-256 of the canonical
   * JSON it carries. Throws `VerificationError` (`invalid_token`) when any of it does not hold.
   */
  async getEvidence(redemptionId: string): Promise<{ evidence: string; claims: EvidenceClaims }> {
    const { evidence } = await this.send<{ evidence: string }>('GET', `/v1/redemptions/${encodeURIComponent(redemptionId)}/evidence`);
    const payload = await this.verifyJwt(evidence, EVIDENCE_TYP, undefined, false);
    if (payload.sub !== redemptionId) throw new VerificationError('invalid_token', `the evidence is for ${String(payload.sub)}, not ${redemptionId}`);
    if (typeof payload.iat !== 'number') throw new VerificationError('invalid_token', 'the evidence has no iat');
    const mandate = payload.mandate === null ? null : checkedMandate(payload.mandate, 'mandate');
    const ancestors = payload.ancestorMandates;
    const ancestorMandates = ancestors === null || ancestors === undefined
      ? null
      : Array.isArray(ancestors)
        ? ancestors.map((ancestor, index) => ({ agentId: stringClaim(ancestor as JWTPayload, 'agentId'), ...checkedMandate(ancestor, `ancestorMandates[${index}]`) }))
        : invalidEvidence('ancestorMandates is not a list');
    const claims = payload as unknown as Omit<EvidenceClaims, 'evidenceId' | 'redemptionId' | 'issuedAt' | 'mandate' | 'ancestorMandates' | 'approval'> & { approval?: EvidenceApproval | null };
    return {
      evidence,
      claims: {
        evidenceId: stringClaim(payload, 'jti'),
        redemptionId,
        issuedAt: payload.iat,
        mandate,
        ancestorMandates,
        approval: claims.approval ?? null,
        offer: claims.offer,
        voucher: claims.voucher,
        receipts: claims.receipts,
        history: claims.history,
        redemption: claims.redemption,
      },
    };
  }

  /**
   * Verifies a webhook delivery (as `verifyWebhook` does) and returns its event; a `voucher.revoked` event's
   * hold ids go into `revocations` before it returns, so answer 2xx only after it has. Deduplicate on the
   * event's `id` for your own handling: delivery is at least once (adding a revocation twice changes nothing).
   */
  handleWebhook(secret: string, headers: HeaderSource, body: string | Uint8Array, options: { toleranceS?: number; nowS?: number } = {}): WebhookEvent {
    const event = verifyWebhook(secret, headers, body, options);
    this.revocations.applyEvent(event);
    return event;
  }

  /**
   * Reads the revocations feed from where the previous sync ended (the first: from the start), every page,
   * and adds each hold id to `revocations`. Call it before a capture you cannot afford to lose; it waits
   * for a sync already running, then reads what came after it. Needs an API key with scope `offers:read`.
   */
  syncRevocations(options: { signal?: AbortSignal } = {}): Promise<RevocationSync> {
    const sync = this.revocationsSync.then(() => this.readRevocations(options.signal));
    // The chain itself never rejects: a failed sync is its caller's error, and the next one runs all the same.
    this.revocationsSync = sync.catch(() => undefined);
    return sync;
  }

  /**
   * Polls the revocations feed: a sync at once, then one `intervalMs` after each ends, until stopped. A sync
   * that fails after its retries is reported to `onError` and tried again after the interval, or after a
   * backoff (up to 5 s) when that is longer; polling never stops on its own.
   */
  pollRevocations(options: PollRevocationsOptions): RevocationPolling {
    const { intervalMs } = options;
    if (!Number.isFinite(intervalMs) || intervalMs <= 0) throw new TypeError(`intervalMs must be a positive number, got ${intervalMs}`);
    const onError = options.onError ?? ((error: unknown) => process.emitWarning(`revocations feed sync failed, retrying: ${(error as Error).message}`, 'RevocationPollingWarning'));
    const backoffMs = this.options.backoffMs ?? defaultBackoffMs;
    const controller = new AbortController();
    const external = options.signal;
    const abort = () => controller.abort(external?.reason);
    if (external?.aborted) abort();
    else external?.addEventListener('abort', abort, { once: true });
    const { signal } = controller;
    const polling = (async () => {
      for (let failures = 0; !signal.aborted; ) {
        try {
          await this.syncRevocations({ signal });
          failures = 0;
        } catch (error) {
          if (signal.aborted) break;
          failures++;
          try {
            onError(error);
          } catch {
            // A throwing handler must not end the poller: the set would silently stop being fed.
          }
        }
        await pause(failures === 0 ? intervalMs : Math.max(intervalMs, backoffMs(failures - 1)), signal);
      }
      external?.removeEventListener('abort', abort);
    })();
    return {
      stop() {
        controller.abort();
        return polling;
      },
    };
  }

  /** Every page of the feed from `revocationsSince`, each page's hold ids added before the cursor moves past them. */
  private async readRevocations(signal: AbortSignal | undefined): Promise<RevocationSync> {
    const holdIds: string[] = [];
    for (;;) {
      const since = this.revocationsSince;
      const query = new URLSearchParams({ limit: String(FEED_PAGE_LIMIT) });
      if (since !== undefined) query.set('since', since);
      const page = await this.send<unknown>('GET', `/v1/merchants/${encodeURIComponent(this.options.merchantId)}/revocations?${query}`, undefined, undefined, signal);
      if (!isFeedPage(page)) throw new Error('the revocations feed answered a body that is not a page of revocations');
      for (const entry of page.revocations) {
        this.revocations.add(entry.holdId, { revokedAt: entry.revokedAt });
        holdIds.push(entry.holdId);
      }
      this.revocationsSince = page.nextSince;
      if (!page.hasMore) return { holdIds, nextSince: page.nextSince };
      // A page that says there is more but does not move the cursor would be read forever.
      if (page.nextSince === since) throw new Error('the revocations feed says it has more but did not move its cursor');
    }
  }

  /**
   * One call with retries. A mutating call gets one Idempotency-Key (yours, or a fresh UUID) for all its
   * attempts: the gateway runs it once and replays the stored answer to every retry. No answer to any attempt is a
   * ConnectionError naming that key, so the caller can run the call again later, at most once.
   */
  private async send<T>(method: 'GET' | 'POST', path: string, body?: unknown, idempotencyKey?: string, signal?: AbortSignal): Promise<T> {
    if (!this.options.apiKey) throw new TypeError('this call needs a merchant API key: pass apiKey to MerchantClient');
    const headers: Record<string, string> = { authorization: `Bearer ${this.options.apiKey}`, accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const key = method === 'POST' ? (idempotencyKey ?? randomUUID()) : undefined;
    if (key !== undefined) headers['idempotency-key'] = key;
    const attemptsMax = this.options.attemptsMax ?? 4;
    const backoffMs = this.options.backoffMs ?? defaultBackoffMs;
    const startedMs = Date.now();
    const windowMs = this.options.retryWindowMs ?? RETRY_WINDOW_MS_DEFAULT;
    // A retry whose wait would end past the call's window is not made (found from outside: Retry-After 120 held a capture 90 s).
    const retriesAfter = (waitMs: number) => Date.now() + waitMs - startedMs < windowMs;
    for (let attempt = 0; ; attempt++) {
      signal?.throwIfAborted();
      const last = attempt + 1 >= attemptsMax;
      const attemptSignal = timeoutSignal(this.options.timeoutMs ?? 10_000, signal);
      let response: Response;
      let parsed: unknown;
      try {
        response = await fetch(`${this.baseUrl}${path}`, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          // The key goes to the gateway and nowhere else, and only the gateway's answer counts: a redirect is refused,
          // never followed (found from outside: a 307 to another host resolved a capture with that host's body).
          redirect: 'manual',
          signal: attemptSignal.signal,
        });
        parsed = await readJson(response);
      } catch (error) {
        // No answer (refused, reset, timed out): the call may or may not have run; the key makes a retry safe.
        signal?.throwIfAborted();
        const waitMs = backoffMs(attempt);
        if (last || !retriesAfter(waitMs)) throw new ConnectionError(attempt + 1, key, { cause: error });
        await pause(waitMs, signal);
        continue;
      } finally {
        attemptSignal.done();
      }
      if (response.ok) return parsed as T;
      if (response.status >= 300 && response.status < 400) {
        const detail = `the gateway answered with a redirect, ${response.status} to ${response.headers.get('location') ?? 'nowhere named'}: set gatewayUrl to the address that answers; the key is never sent on`;
        throw new GatewayError({ status: response.status, code: 'unexpected_redirect', title: 'Redirected', detail }, { idempotencyKey: key, attempts: attempt + 1 });
      }
      const problem: Problem = { status: response.status, ...(typeof parsed === 'object' && parsed !== null ? parsed : { detail: String(parsed ?? '') }) };
      const retryAfterS = retryAfterSOf(response.headers);
      const waitMs = retryAfterS !== undefined ? Math.min(retryAfterS, RETRY_AFTER_S_MAX) * 1000 : backoffMs(attempt);
      if (last || !retryable(response.status, problem.code) || !retriesAfter(waitMs)) throw new GatewayError(problem, { idempotencyKey: key, retryAfterS, attempts: attempt + 1 });
      await pause(waitMs, signal);
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

function isFeedPage(value: unknown): value is RevocationFeedPage {
  if (typeof value !== 'object' || value === null) return false;
  const { revocations, nextSince, hasMore } = value as Partial<RevocationFeedPage>;
  return (
    typeof nextSince === 'string' &&
    typeof hasMore === 'boolean' &&
    Array.isArray(revocations) &&
    revocations.every((entry) => typeof entry?.holdId === 'string' && entry.holdId.length > 0 && Number.isInteger(entry.revokedAt))
  );
}

/** An attempt's signal: aborted after `timeoutMs`, or with `signal`. Call done() once the attempt has ended. */
function timeoutSignal(timeoutMs: number, signal: AbortSignal | undefined): { signal: AbortSignal; done(): void } {
  if (signal === undefined) return { signal: AbortSignal.timeout(timeoutMs), done() {} };
  // AbortSignal.any would do this, but only from Node 20.3; the package promises every Node 20.
  const controller = new AbortController();
  const abort = () => controller.abort(signal.reason);
  const timer = setTimeout(() => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')), timeoutMs);
  if (signal.aborted) abort();
  else signal.addEventListener('abort', abort, { once: true });
  return {
    signal: controller.signal,
    done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', abort);
    },
  };
}

/** Waits `ms`, or less when `signal` aborts (the caller checks it). */
function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * Whether a verification failed because the gateway's key set could not be read: no answer (fetch's TypeError), a
 * timeout, or an answer that is not a key set (another status, not JSON). Not a verdict on the token.
 */
function isKeySetUnreachable(error: unknown): boolean {
  if (error instanceof errors.JWKSTimeout) return true;
  if (error instanceof TypeError && error.message === 'fetch failed') return true;
  return error instanceof errors.JOSEError && error.code === 'ERR_JOSE_GENERIC' && /JSON Web Key Set HTTP response/.test(error.message);
}
