// The gateway's own ES256 signing keys (access tokens, vouchers, receipts). Dev mode generates one key once
// and keeps it in the database, so every instance sharing the database signs with the same key. Live
// mode never generates: the key comes from ACG_SIGNING_KEY or a sealed rotated key, and any route that must sign
// answers 503 signing_configuration_required without one. Live mode never uses a key kept unsealed (dev mode's own,
// or a rotation before sealing): anyone who read the database could sign with it.
//
// Signing is on the hot path (every voucher, receipt and access token), so it uses node:crypto directly
// with a key object built once per key, and a header segment built once per key and `typ`: the output is
// the same compact JWS jose produces (docs/decisions.md "Signing on the hot path").
//
// Rotation (`acg keys rotate`): the next key is published `leadS` before it signs, so every instance's
// reload and every verifier's JWKS cache see it first; the keys it replaces stop signing at that moment
// and stay published (and verifying) for `retentionS`, the life of the longest token they signed. A rotated
// key's private half is sealed with ACG_SECRET_BOX_KEY (context `signing_key:<kid>`), so a copy of the
// database alone cannot sign; live mode rotates only with that key set, and only with the box key the instances run
// with (their checks in `secret_box_checks`, platform/secret-box.ts). Dev mode's own key, and rows written before
// sealing, are kept as JWK JSON (dev mode's box key lives in the same database: sealing would hide nothing).
//
// A key this instance cannot open (another box key sealed it, or it has none) is left out, said once, and the
// instance goes on with the keys it opens; `acg keys withdraw` removes a key that never signed.
import { createPrivateKey, sign as signBytes, type JsonWebKey, type KeyObject } from 'node:crypto';
import { decodeProtectedHeader, errors as joseErrors, exportJWK, importJWK, importPKCS8, calculateJwkThumbprint, generateKeyPair, jwtVerify, type JWK, type JWTPayload } from 'jose';
import { ApiError } from './errors.ts';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { Database, Queryable, Tx } from './db/database.ts';
import { boxKeyVerdict, BOX_KEY_CHECK_RECENT_S, configuredSecretBoxKey, openSecret, sealSecret, type SecretBoxKey } from './secret-box.ts';

export const SIGNING_ALG = 'ES256';
/** Leeway for another instance's clock ahead of this one (`nbf`, `iat`); never applied to `exp`. */
const VERIFY_LEEWAY_S = 30;
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/**
 * Whether `token` is a compact JWS exactly as one is signed: three base64url segments, nothing around them, each
 * in base64url's one spelling (no padding, and no bits set past the last byte, which a decoder ignores: RFC 4648
 * §3.5). jose decodes a segment leniently, so a token that is not the one issued is refused before its signature
 * is checked: white space after the signature verified (found from outside on an x402 attestation), and so did a
 * signature whose last character was changed within the ignored bits, a second spelling of one token that the
 * verified-token cache, keyed by the token's text, did not know (found from outside, 2026-12-06).
 */
export function isCanonicalCompactJws(token: string): boolean {
  return COMPACT_JWS.test(token) && token.split('.').every((segment) => Buffer.from(segment, 'base64url').toString('base64url') === segment);
}
/**
 * How often every instance re-reads the key set (`reload`): a rotation, and above all `--expire-now` after a leak, holds
 * everywhere within it. One read of a table of a few rows; it was 60 s, in which a leaked key, expired, still verified
 * forged tokens on the other instances and signed vouchers no merchant could verify (found from outside: 38–43 s).
 */
export const KEY_RELOAD_INTERVAL_S = 5;
/**
 * A key that becomes active later than this after now (by the database's clock) has signed nothing on any instance:
 * each reloads the keys every KEY_RELOAD_INTERVAL_S, and its clock may be ahead of the database's by the leeway we
 * grant. Such a key may be withdrawn (deleted) without a token failing to verify.
 */
export const NEVER_SIGNED_MARGIN_S = KEY_RELOAD_INTERVAL_S + VERIFY_LEEWAY_S;
/** Covers the key reload of every instance plus the 300 s JWKS cache we advertise, with margin. */
export const PUBLICATION_LEAD_S_DEFAULT = 600;
/** Vouchers live as long as their hold; a week covers the longest hold, and access tokens (600 s). */
export const RETIRED_KEY_RETENTION_S_DEFAULT = 7 * 86_400;

interface LoadedKey {
  kid: string;
  publicJwk: JWK;
  /** Signs (node:crypto). */
  signingKey: KeyObject;
  /** Verifies our tokens (jose), imported once. */
  verifyingKey: CryptoKey;
  /** The encoded protected header for each `typ` this key has signed: a constant, built once. */
  headers: Map<string, string>;
  activeFromS: number;
  retiredAtS: number | null;
  publishedUntilS: number | null;
}

interface SigningKeyRow {
  kid: string;
  public_jwk: string;
  private_jwk: string;
  active_from_s: bigint;
  retired_at_s: bigint | null;
  published_until_s: bigint | null;
}

const toS = (value: bigint | null): number | null => (value === null ? null : Number(value));

function encodeSegment(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

type KeyTimes = Pick<LoadedKey, 'activeFromS' | 'retiredAtS' | 'publishedUntilS'>;

async function loadKey(kid: string, publicJwk: JWK, privateJwk: JWK, times: KeyTimes): Promise<LoadedKey> {
  return {
    kid,
    publicJwk,
    signingKey: createPrivateKey({ key: privateJwk as JsonWebKey, format: 'jwk' }),
    verifyingKey: (await importJWK(publicJwk, SIGNING_ALG)) as CryptoKey,
    headers: new Map(),
    ...times,
  };
}

const sealContext = (kid: string): string => `signing_key:${kid}`;

/** Whether a row's private half is sealed (`v1.…`) rather than JWK JSON. */
function isSealed(privateJwk: string): boolean {
  return !privateJwk.trimStart().startsWith('{');
}

/** A private JWK as the row stores it: sealed with `box` when given, else as JSON. */
function storedPrivate(kid: string, privateJwk: JWK, box: SecretBoxKey | undefined): string {
  const json = JSON.stringify(privateJwk);
  return box ? sealSecret(box, json, sealContext(kid)) : json;
}

const NO_BOX_KEY = 'this instance has no ACG_SECRET_BOX_KEY';

/** Why this instance cannot open the key `kid`, as the error and the warning about it both say it. */
const cannotOpen = (kid: string, reason: string): string =>
  reason === NO_BOX_KEY ? `signing key ${kid} is sealed, and ${NO_BOX_KEY}` : `signing key ${kid} does not open with this instance's ACG_SECRET_BOX_KEY (${reason})`;

/** A sealed key that this instance cannot open: another box key sealed it, or none is configured (`reason`). */
export class UnopenedKeyError extends Error {
  constructor(readonly kid: string, readonly reason: string) {
    super(cannotOpen(kid, reason));
    this.name = 'UnopenedKeyError';
  }
}

/** A sealed row's private JWK JSON, opened with `box`; UnopenedKeyError when another box key sealed it. */
function openedPrivate(row: SigningKeyRow, box: SecretBoxKey): string {
  try {
    return openSecret(box, row.private_jwk, sealContext(row.kid));
  } catch (error) {
    throw new UnopenedKeyError(row.kid, (error as Error).message);
  }
}

/** The row's key; one already loaded under the same kid is reused (a kid names one key pair), with the row's times. */
async function fromRow(row: SigningKeyRow, loaded: LoadedKey | undefined, box: SecretBoxKey | undefined): Promise<LoadedKey> {
  const times = { activeFromS: Number(row.active_from_s), retiredAtS: toS(row.retired_at_s), publishedUntilS: toS(row.published_until_s) };
  if (loaded) return { ...loaded, ...times };
  let privateJson = row.private_jwk;
  if (isSealed(privateJson)) {
    if (!box) throw new UnopenedKeyError(row.kid, NO_BOX_KEY);
    privateJson = openedPrivate(row, box);
  }
  return loadKey(row.kid, JSON.parse(row.public_jwk) as JWK, JSON.parse(privateJson) as JWK, times);
}

/** A fresh ES256 key pair as the database row stores it. */
export async function generateSigningKey(): Promise<{ kid: string; publicJwk: JWK; privateJwk: JWK }> {
  const { publicKey, privateKey } = await generateKeyPair(SIGNING_ALG, { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(publicJwk);
  return {
    kid,
    publicJwk: { ...publicJwk, kid, alg: SIGNING_ALG, use: 'sig' },
    privateJwk: { ...(await exportJWK(privateKey)), kid, alg: SIGNING_ALG },
  };
}

/** The kid of ACG_SIGNING_KEY (its RFC 7638 thumbprint), as the key table names keys. */
export async function configuredKid(text: string): Promise<string> {
  return (await importConfiguredKey(text)).kid;
}

async function importConfiguredKey(text: string): Promise<LoadedKey> {
  const trimmed = text.trim();
  const privateKey = trimmed.startsWith('{')
    ? ((await importJWK(JSON.parse(trimmed) as JWK, SIGNING_ALG, { extractable: true })) as CryptoKey)
    : await importPKCS8(trimmed, SIGNING_ALG, { extractable: true });
  const privateJwk = await exportJWK(privateKey);
  const { d: _d, ...publicPart } = privateJwk;
  const kid = await calculateJwkThumbprint(publicPart);
  return loadKey(kid, { ...publicPart, kid, alg: SIGNING_ALG, use: 'sig' }, privateJwk, { activeFromS: 0, retiredAtS: null, publishedUntilS: null });
}

/** Validates ACG_SIGNING_KEY at start-up so a bad key is a configuration error, not a 503 later. */
export async function checkConfiguredKey(text: string): Promise<string | undefined> {
  try {
    await importConfiguredKey(text);
    return undefined;
  } catch (error) {
    // `openssl ecparam -genkey` writes SEC1, the first command most operators try (found from outside: jose's words
    // alone, '"pkcs8" must be PKCS#8 formatted string', did not say what to run).
    const sec1 = text.includes('-----BEGIN EC PRIVATE KEY-----')
      ? ': this is a SEC1 EC key; convert it with `openssl pkcs8 -topk8 -nocrypt`, or make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`'
      : '';
    return `ACG_SIGNING_KEY is not a usable ES256 private key (JWK or PKCS#8 PEM): ${(error as Error).message}${sec1}`;
  }
}

/** What live mode tells its operator about keys it will not use. */
export type IgnoredKeysReport = (message: string, kids: readonly string[]) => void;

/** A key in the table that this instance could not open (UnopenedKeyError), with the times that say whether it would sign. */
type UnopenedKey = KeyTimes & { kid: string; reason: string };

/** Whether a key signs at `nowS`, or will later (it is not retired by then, nor before it becomes active). */
const signsNowOrLater = (key: KeyTimes, nowS: number): boolean => key.retiredAtS === null || (key.retiredAtS > nowS && key.retiredAtS > key.activeFromS);

/** Of keys active at `nowS` and not retired, the one that became active last: the key that signs. */
function signingAt<K extends KeyTimes>(keys: readonly K[], nowS: number): K | undefined {
  const usable = keys.filter((k) => k.activeFromS <= nowS && (k.retiredAtS === null || k.retiredAtS > nowS));
  return usable.reduce<K | undefined>((newest, k) => (!newest || k.activeFromS >= newest.activeFromS ? k : newest), undefined);
}

const isoS = (atS: number): string => new Date(atS * 1000).toISOString();

/** What an instance that cannot open `kid` should do, as every message about it says: a sentence. */
function unopenedRemedy(kid: string, reason: string): string {
  const box = reason === NO_BOX_KEY ? 'Set ACG_SECRET_BOX_KEY to the box key' : 'Give this instance the ACG_SECRET_BOX_KEY';
  return (
    `${box} the gateway's other instances run with (the one \`acg keys rotate\` sealed it with); or, if that rotation ran with a mistaken ` +
    `box key, \`acg keys withdraw ${kid}\` removes the key (it never signed anywhere), then rotate again with the instances' box key`
  );
}

/** An instance that can sign with no key: keys are sealed that it cannot open, and none it opened signs now or later. */
export class UnusableSigningKeysError extends Error {
  constructor(readonly keys: readonly UnopenedKey[]) {
    const kids = keys.map((key) => key.kid).join(', ');
    const [first] = keys;
    const why = first!.reason === NO_BOX_KEY ? `${keys.length > 1 ? 'are' : 'is'} sealed and this instance has no ACG_SECRET_BOX_KEY` : `${keys.length > 1 ? 'do' : 'does'} not open with this instance's ACG_SECRET_BOX_KEY`;
    super(
      `acg serve: no signing key this instance can use: ${keys.length > 1 ? 'the keys' : 'the key'} ${kids}, which would sign, ${why}, and no other key signs now or later. ` +
        `${unopenedRemedy(first!.kid, first!.reason)}. Or set ACG_SIGNING_KEY`,
    );
    this.name = 'UnusableSigningKeysError';
  }
}

export class SigningKeys {
  private keys: LoadedKey[] = [];
  /** ACG_SIGNING_KEY, imported at the first load (the environment does not change while running). */
  private configuredKey: LoadedKey | undefined;
  /** The unsealed keys live mode last left out, so each change of them is reported once. */
  private ignored = '';
  /** The keys still published that this instance could not open at the last load. */
  private unopened: UnopenedKey[] = [];
  /** The kids of `unopened` already reported: each is said once, when first met (not at every 5 s reload). */
  private reportedUnopened = new Set<string>();
  /** Live mode: ACG_SIGNING_KEY's kid when the database keeps that key unsealed, so it is left out like the row. */
  private exposedConfiguredKid: string | undefined;

  private constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly config: Config,
    private readonly reportIgnored: IgnoredKeysReport,
  ) {}

  static async open(db: Database, clock: Clock, config: Config, reportIgnored: IgnoredKeysReport = () => {}): Promise<SigningKeys> {
    const keys = new SigningKeys(db, clock, config, reportIgnored);
    if (config.mode === 'dev') await keys.ensureDevKey();
    await keys.reload();
    return keys;
  }

  private async ensureDevKey(): Promise<void> {
    const { rows } = await this.db.query('SELECT kid FROM signing_keys LIMIT 1');
    if (rows.length > 0) return;
    const key = await generateSigningKey();
    const nowS = this.clock.nowS();
    await this.db.query(
      `INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at_s, active_from_s)
       VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (kid) DO NOTHING`,
      [key.kid, SIGNING_ALG, JSON.stringify(key.publicJwk), JSON.stringify(key.privateJwk), nowS],
    );
  }

  /**
   * Re-reads the key set (called periodically, so a rotation reaches every instance). Live mode leaves out every
   * key kept unsealed: it neither signs, nor is published, nor verifies.
   */
  async reload(): Promise<void> {
    const loaded: LoadedKey[] = [];
    const all = await findKeyRows(this.db);
    const rows = this.config.mode === 'dev' ? all : all.filter((row) => isSealed(row.private_jwk));
    const unsealed = all.filter((row) => !rows.includes(row));
    if (this.config.signingKey) {
      const configured = (this.configuredKey ??= await importConfiguredKey(this.config.signingKey));
      // ACG_SIGNING_KEY set to a key the database keeps in clear (dev mode's own, copied from the table) is as readable
      // as that row: live mode leaves it out too (found from outside: a live gateway signed with it, and the warning
      // named every unsealed key but that one).
      this.exposedConfiguredKid = unsealed.some((row) => row.kid === configured.kid) ? configured.kid : undefined;
      if (this.exposedConfiguredKid === undefined) loaded.push(configured);
    }
    this.reportIgnoredKeys(unsealed.filter((row) => !loaded.some((k) => k.kid === row.kid)).map((row) => row.kid));
    const known = new Map(this.keys.map((k) => [k.kid, k]));
    const box = rows.some((row) => isSealed(row.private_jwk)) ? configuredSecretBoxKey(this.config) : undefined;
    const nowS = this.clock.nowS();
    const unopened: UnopenedKey[] = [];
    for (const row of rows) {
      if (loaded.some((k) => k.kid === row.kid)) continue;
      try {
        loaded.push(await fromRow(row, known.get(row.kid), box));
      } catch (error) {
        if (!(error instanceof UnopenedKeyError)) throw error;
        const times = { activeFromS: Number(row.active_from_s), retiredAtS: toS(row.retired_at_s), publishedUntilS: toS(row.published_until_s) };
        if (times.publishedUntilS === null || times.publishedUntilS > nowS) unopened.push({ kid: row.kid, reason: error.reason, ...times });
      }
    }
    // A key this instance cannot open is left out, and this instance goes on with the keys it opens, whichever they
    // are: ACG_SIGNING_KEY, or sealed keys. Before, an instance that opened none of the sealed keys threw, at each
    // reload (a warning with a stack every 5 s) and at start (exit 1, the reason in a stack in the log), though
    // ACG_SIGNING_KEY still signed; the start refuses only when nothing can sign (`startRefusal`; found from outside).
    this.reportUnopenedKeys(unopened);
    this.unopened = unopened;
    this.keys = loaded;
  }

  private reportUnopenedKeys(keys: readonly UnopenedKey[]): void {
    for (const key of keys) {
      if (this.reportedUnopened.has(key.kid)) continue;
      this.reportIgnored(
        `${cannotOpen(key.kid, key.reason)}: it is left out here, neither signing, published nor verifying, and the keys that open go on. ` +
          `${unopenedRemedy(key.kid, key.reason)}`,
        [key.kid],
      );
    }
    // A key gone (withdrawn) and back is said again.
    this.reportedUnopened = new Set(keys.map((key) => key.kid));
  }

  /**
   * Why this instance must not start, if it must not: keys that would sign are sealed and it cannot open them, and no
   * key it opened signs now or later. Then the box key is this instance's mistake (or a rotation's), which one line at
   * start says better than 503s. A key it cannot open that would not sign (another signs now or later) stops nothing.
   */
  startRefusal(): UnusableSigningKeysError | undefined {
    const nowS = this.clock.nowS();
    if (this.exposedConfiguredKid !== undefined || this.keys.some((key) => signsNowOrLater(key, nowS))) return undefined;
    const blocking = this.unopened.filter((key) => signsNowOrLater(key, nowS));
    return blocking.length === 0 ? undefined : new UnusableSigningKeysError(blocking);
  }

  private reportIgnoredKeys(kids: string[]): void {
    const now = `${kids.join(',')}|${this.exposedConfiguredKid ?? ''}`;
    if (now === this.ignored) return;
    this.ignored = now;
    if (kids.length === 0) return;
    this.reportIgnored(
      'live mode does not use signing keys kept unsealed in the database (dev mode\'s own key, or a rotation before sealing): ' +
        'anyone who read the database could sign with them. ' +
        (this.exposedConfiguredKid === undefined
          ? 'Sign with ACG_SIGNING_KEY, or `acg keys rotate` with ACG_SECRET_BOX_KEY set; '
          : `ACG_SIGNING_KEY is one of them (kid ${this.exposedConfiguredKid}), so nothing signs: set it to a new key that was never in the database; `) +
        'then remove each with `acg keys withdraw <kid>` (in live mode)',
      kids,
    );
  }

  get configured(): boolean {
    return this.keys.length > 0;
  }

  /**
   * Why nothing signs, as the operator needs to hear it: ACG_SIGNING_KEY left out (see `reload`), the key due to sign
   * not opening here, no key active yet by this instance's clock, or no key at all.
   */
  get whyUnconfigured(): string {
    if (this.exposedConfiguredKid !== undefined) {
      return `ACG_SIGNING_KEY is a key the database keeps unsealed (kid ${this.exposedConfiguredKid}), which anyone who read the database could sign with: set it to a new ES256 private key`;
    }
    const nowS = this.clock.nowS();
    // A key exists but does not open here: the operator's fix is the box key, not ACG_SIGNING_KEY (found from outside).
    const due = signingAt(this.unopened, nowS) ?? this.unopened.find((key) => signsNowOrLater(key, nowS) && !this.keys.some((k) => signsNowOrLater(k, nowS)));
    if (due !== undefined) {
      return `the signing key that would sign (${due.kid}) does not open here (${due.reason}). ${unopenedRemedy(due.kid, due.reason)}`;
    }
    // Keys exist, but by this instance's clock none is active yet (found from outside: an instance whose clock was
    // 300 s behind the database's answered every mint "set ACG_SIGNING_KEY", and the keys' activation is the
    // database's time, set by `acg keys rotate`).
    const upcoming = this.keys.filter((key) => key.activeFromS > nowS && signsNowOrLater(key, nowS));
    const earliest = upcoming.reduce<LoadedKey | undefined>((first, key) => (!first || key.activeFromS < first.activeFromS ? key : first), undefined);
    if (earliest !== undefined) {
      return (
        `no signing key is active yet by this instance's clock (${isoS(nowS)}): the earliest, ${earliest.kid}, signs from ${isoS(earliest.activeFromS)}, ` +
        `${earliest.activeFromS - nowS} s from now by this clock. Keys become active by the database's clock: if it is past that time there, this ` +
        "host's clock is behind (check its time synchronisation); otherwise wait for it, or set ACG_SIGNING_KEY"
      );
    }
    return 'set ACG_SIGNING_KEY to an ES256 private key';
  }

  /** The refusal of whatever needs a signature while nothing signs: 503 signing_configuration_required, saying why. */
  unconfigured(what?: string): ApiError {
    return new ApiError('signing_configuration_required', { detail: what === undefined ? this.whyUnconfigured : `${what}: ${this.whyUnconfigured}` });
  }

  /** The key that signs now: of those already active and not retired, the one that became active last. */
  private current(): LoadedKey {
    const key = signingAt(this.keys, this.clock.nowS());
    if (!key) throw this.unconfigured();
    return key;
  }

  /** Keys that are published and verify: upcoming, current, and retired ones within their retention. */
  private published(): LoadedKey[] {
    const nowS = this.clock.nowS();
    return this.keys.filter((k) => k.publishedUntilS === null || k.publishedUntilS > nowS);
  }

  /** Public keys to publish: upcoming, current, and retired ones still verifying. */
  jwks(): { keys: JWK[] } {
    if (!this.configured) throw this.unconfigured();
    return { keys: this.published().map((k) => k.publicJwk) };
  }

  publicKeyFor(kid: string): JWK | undefined {
    return this.published().find((k) => k.kid === kid)?.publicJwk;
  }

  /** Is the key `kid` still published, so that what it signed still verifies? */
  trusts(kid: string | undefined): boolean {
    return kid !== undefined && this.publicKeyFor(kid) !== undefined;
  }

  /**
   * Verifies a token we signed: ES256 only, one of our keys, our issuer, the given audience and `typ`
   * (so a voucher is never an access token and vice versa). Throws jose errors on any failure. Without an
   * `audience` the caller checks `aud` itself (to name its own refusal: x402's unauthorized_server);
   * `requiredClaims` must be present. The 30 s of leeway absorb another instance's clock ahead of this one's
   * (`nbf`, `iat`), never a token past its `exp`: jose applies its leeway to `exp` too, so `exp` is checked
   * again without it (an access token answered for 30 s after it lapsed; docs/decisions.md "Our tokens lapse at
   * their exp"). Every token of ours lapses: `exp` is required whatever the caller lists. `lifetimeMaxS` bounds the
   * life a token may claim (`iat` required, not ahead of this clock beyond the leeway, `exp - iat` at most it): what
   * we issue never claims more, so a token that does was not issued by this gateway's rules.
   */
  async verify(
    token: string,
    expected: { typ: string; audience?: string; issuer: string; requiredClaims?: readonly string[]; lifetimeMaxS?: number },
  ): Promise<{ payload: JWTPayload; kid: string }> {
    if (!isCanonicalCompactJws(token)) throw new joseErrors.JWSInvalid('the token is not a compact JWS of three base64url segments, each in its one spelling');
    const required = new Set(['exp', ...(expected.requiredClaims ?? []), ...(expected.lifetimeMaxS === undefined ? [] : ['iat'])]);
    const { payload, protectedHeader } = await jwtVerify(
      token,
      (header) => {
        const key = this.published().find((k) => k.kid === header.kid);
        if (!key) throw new Error('unknown kid');
        return key.verifyingKey;
      },
      {
        algorithms: [SIGNING_ALG],
        // jose checks `typ` once the signature holds and before any claim (RFC 8725 §3.11, explicit typing), so a token
        // we signed for another purpose is refused as what it is, not for a claim it never had (found from outside,
        // bb119: the consent page's request id as a Bearer token was refused for its missing "sub").
        typ: expected.typ,
        issuer: expected.issuer,
        ...(expected.audience === undefined ? {} : { audience: expected.audience }),
        requiredClaims: [...required],
        clockTolerance: VERIFY_LEEWAY_S,
        currentDate: new Date(this.clock.nowMs()),
      },
    ).catch((error: unknown) => {
      if (error instanceof joseErrors.JWTClaimValidationFailed && error.claim === 'typ') {
        throw new joseErrors.JWTClaimValidationFailed(`token typ is ${decodeProtectedHeader(token).typ ?? 'absent'}, expected ${expected.typ}`, error.payload, 'typ', 'check_failed');
      }
      throw error;
    });
    const nowS = Math.floor(this.clock.nowMs() / 1000);
    if (typeof payload.exp === 'number' && payload.exp <= nowS) {
      throw new joseErrors.JWTExpired('"exp" claim timestamp check failed', payload, 'exp', 'check_failed');
    }
    if (expected.lifetimeMaxS !== undefined) {
      const { iat, exp } = payload as { iat: number; exp: number };
      if (iat > nowS + VERIFY_LEEWAY_S) throw new joseErrors.JWTClaimValidationFailed('"iat" claim is in the future', payload, 'iat', 'check_failed');
      if (exp - iat > expected.lifetimeMaxS) {
        throw new joseErrors.JWTClaimValidationFailed(`the token claims a life longer than ${expected.lifetimeMaxS} s`, payload, 'exp', 'check_failed');
      }
    }
    return { payload, kid: protectedHeader.kid! };
  }

  /** A compact JWS with header `{alg: "ES256", typ, kid}` over the JSON of `payload`, signed by the current key. */
  async sign(payload: JWTPayload, typ: string): Promise<string> {
    const key = this.current();
    let header = key.headers.get(typ);
    if (header === undefined) {
      header = encodeSegment({ alg: SIGNING_ALG, typ, kid: key.kid });
      key.headers.set(typ, header);
    }
    const signingInput = `${header}.${encodeSegment(payload)}`;
    const signature = signBytes('sha256', Buffer.from(signingInput), { key: key.signingKey, dsaEncoding: 'ieee-p1363' });
    return `${signingInput}.${signature.toString('base64url')}`;
  }
}

/** `ignored`: kept unsealed, which live mode never uses (see `reload`). */
export type SigningKeyState = 'upcoming' | 'signing' | 'retired' | 'expired' | 'ignored';

export interface SigningKeySummary {
  kid: string;
  state: SigningKeyState;
  activeFromS: number;
  retiredAtS: number | null;
  publishedUntilS: number | null;
  /** Whether its private half is sealed with ACG_SECRET_BOX_KEY; live mode uses only sealed keys. */
  sealed: boolean;
  /** For a sealed key, when a box key was given to look with: whether it opens with that key. */
  opens?: boolean;
}

/** Whether `box` opens the row's sealed private half. */
function opensWith(row: SigningKeyRow, box: SecretBoxKey): boolean {
  try {
    openedPrivate(row, box);
    return true;
  } catch (error) {
    if (error instanceof UnopenedKeyError) return false;
    throw error;
  }
}

/**
 * Each key's state as a gateway in `mode` sees it: live mode leaves unsealed keys out, so they are `ignored`. A key
 * retired before it became active (a later rotation replaced it first) never signs: `retired`, not `upcoming`.
 */
function summarise(rows: SigningKeyRow[], nowS: number, mode: Config['mode'] = 'dev', box?: SecretBoxKey): SigningKeySummary[] {
  const keys = rows.map((r) => ({
    kid: r.kid,
    activeFromS: Number(r.active_from_s),
    retiredAtS: toS(r.retired_at_s),
    publishedUntilS: toS(r.published_until_s),
    sealed: isSealed(r.private_jwk),
    ...(box !== undefined && isSealed(r.private_jwk) ? { opens: opensWith(r, box) } : {}),
  }));
  const used = (k: (typeof keys)[number]) => mode === 'dev' || k.sealed;
  const signing = signingAt(keys.filter(used), nowS);
  return keys.map((k) => {
    let state: SigningKeyState = 'retired';
    if (!used(k)) state = 'ignored';
    else if (k.publishedUntilS !== null && k.publishedUntilS <= nowS) state = 'expired';
    else if (k.activeFromS > nowS && signsNowOrLater(k, nowS)) state = 'upcoming';
    else if (k === signing) state = 'signing';
    return { ...k, state };
  });
}

const KEY_COLUMNS = 'kid, public_jwk, private_jwk, active_from_s, retired_at_s, published_until_s';
const KEY_ROWS = `SELECT ${KEY_COLUMNS} FROM signing_keys ORDER BY active_from_s, kid`;

async function findKeyRows(db: Queryable): Promise<SigningKeyRow[]> {
  const { rows } = await db.query<SigningKeyRow>(KEY_ROWS);
  return rows;
}

/** The key rows, locked: a rotation holds them until it commits, so two rotations do not interleave. */
async function lockKeyRows(tx: Tx): Promise<SigningKeyRow[]> {
  const { rows } = await tx.query<SigningKeyRow>(`${KEY_ROWS} FOR UPDATE`);
  return rows;
}

/**
 * The keys in the shared table (a configured ACG_SIGNING_KEY is not among them). With `box`, each sealed key says
 * whether it opens with it (`opens`): `acg keys list` shows the keys a rotation with another box key sealed.
 */
export async function listSigningKeys(db: Queryable, nowS: number, mode: Config['mode'] = 'dev', box?: SecretBoxKey): Promise<SigningKeySummary[]> {
  return summarise(await findKeyRows(db), nowS, mode, box);
}

/** Whether the row's key has signed nothing on any instance: it becomes active later than NEVER_SIGNED_MARGIN_S from now. */
const neverSigned = (row: SigningKeyRow, nowS: number): boolean => Number(row.active_from_s) > nowS + NEVER_SIGNED_MARGIN_S;

export interface RotationOptions {
  /** Now, by the database's clock (`databaseNowMs`): the time every instance's keys are compared with. */
  nowS: number;
  /** Seconds between publishing the new key and signing with it. */
  leadS: number;
  /**
   * Seconds a replaced key stays published after it stops signing; 0 (with no lead): every other key stops verifying
   * now, an upcoming one and one an earlier rotation retired included (a leaked key).
   */
  retentionS: number;
  /** Seals the new key's private half (ACG_SECRET_BOX_KEY); without it the row keeps JWK JSON (dev mode only). */
  sealWith?: SecretBoxKey;
  /**
   * Live mode: seal with `sealWith` though nothing shows it is the instances' box key (no instance recorded one, and no
   * key is sealed yet): the first key of a new deployment. A box key the instances' checks refuse is refused whatever this says.
   */
  uncheckedBoxKey?: boolean;
  /** The mode the replaced keys are described for (live mode never uses an unsealed one: `ignored`); live mode requires the box key proven. */
  mode?: Config['mode'];
}

export interface RotationReport {
  next: SigningKeySummary;
  replaced: SigningKeySummary[];
  removedKids: string[];
  /** Keys of earlier rotations still upcoming, which signed nothing: this rotation's key replaces them (deleted). */
  withdrawnKids: string[];
}

/** A refusal of a key command (exit 2): what is wrong and what to do, in one message. */
export class SigningKeyRefusal extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SigningKeyRefusal';
  }
}

/** `acg keys rotate` (or `withdraw`) with a box key that is not the instances' own, as their checks or sealed keys show. */
export class AnotherBoxKeyError extends SigningKeyRefusal {
  constructor(message: string) {
    super(message);
    this.name = 'AnotherBoxKeyError';
  }
}

/** Live mode: nothing shows which box key the instances run with, and the command was not told to go on without. */
export class UnprovenBoxKeyError extends SigningKeyRefusal {
  constructor(message: string) {
    super(message);
    this.name = 'UnprovenBoxKeyError';
  }
}

const ago = (atS: number, nowS: number): string => `${isoS(atS)} (${Math.max(0, nowS - atS)} s ago)`;

/**
 * Whether `box` is the box key the instances run with. The checks they keep in the database (`secret_box_checks`:
 * each serving instance with a box key keeps one, seen every minute) are the proof: `box` must open those seen lately,
 * or the last one seen; one they refuse is refused (AnotherBoxKeyError). With no check (a database no instance of this
 * release served on with a box key), the sealed keys still published but `except` are the next witness: it must open
 * one. False when nothing shows it either way: the caller decides. `consequence` says what a wrong key would do.
 */
async function boxKeyProven(q: Queryable, rows: readonly SigningKeyRow[], box: SecretBoxKey, nowS: number, consequence: string, except?: string): Promise<boolean> {
  const verdict = await boxKeyVerdict(q, box, nowS);
  if (verdict.kind === 'opens') return true;
  if (verdict.kind === 'another') {
    throw new AnotherBoxKeyError(
      verdict.alsoOpens
        ? `instances ran within the last ${BOX_KEY_CHECK_RECENT_S} s with another ACG_SECRET_BOX_KEY than this one (its check in the database was last seen ` +
            `${ago(verdict.seenAtS, nowS)}), ${consequence} on them. Give every instance the same box key, and run this again once the others have been stopped ${BOX_KEY_CHECK_RECENT_S} s`
        : `ACG_SECRET_BOX_KEY here is not the one the gateway's instances run with: it does not open the check they keep in the database (last seen ` +
            `${ago(verdict.seenAtS, nowS)}), ${consequence} on any of them. Set ACG_SECRET_BOX_KEY to the one the gateway runs with, and run this again`,
    );
  }
  const sealed = rows.filter((row) => row.kid !== except && isSealed(row.private_jwk) && (row.published_until_s === null || Number(row.published_until_s) > nowS));
  if (sealed.length === 0) return false;
  if (sealed.some((row) => opensWith(row, box))) return true;
  throw new AnotherBoxKeyError(
    `ACG_SECRET_BOX_KEY here does not open the signing keys already in the database (${sealed.map((row) => row.kid).join(', ')}), so it is not the instances' own, ` +
      `${consequence} on any of them. Set ACG_SECRET_BOX_KEY to the one the gateway runs with, and run this again (a serving instance records its box key in ` +
      'the database, and this check then uses that). If a rotation sealed those keys with a mistaken box key, `acg keys withdraw <kid>` removes each',
  );
}

const UNPROVEN =
  "nothing shows which ACG_SECRET_BOX_KEY the gateway's instances run with: none with a box key has served on this database yet (each records its " +
  'own while it serves), and no other key here is sealed';

/**
 * Refuses to seal a new key with a box key that is not the instances' own (`boxKeyProven`), and, in live mode, one that
 * nothing shows to be theirs unless told to go on (`uncheckedBoxKey`). Found from outside: a rotation run with another
 * box key than the instances' was accepted on a database that held no sealed key yet, the usual live case (the
 * instances signed with ACG_SIGNING_KEY); no instance could open the key it sealed, nor restart.
 */
async function refuseBoxKey(q: Queryable, rows: readonly SigningKeyRow[], options: RotationOptions): Promise<void> {
  if (!options.sealWith) return;
  const proven = await boxKeyProven(q, rows, options.sealWith, options.nowS, 'so a key sealed with it would open');
  if (proven || options.mode !== 'live' || options.uncheckedBoxKey) return;
  throw new UnprovenBoxKeyError(
    `${UNPROVEN}. Start the gateway with its ACG_SECRET_BOX_KEY and run this again; or, for the first key of a new deployment, ` +
      'pass --unchecked-box-key, and give every instance this box key',
  );
}

/** What `rotateSigningKeys` would refuse, checked before it generates anything (the command says so before it works). */
export async function checkRotation(db: Queryable, options: RotationOptions): Promise<void> {
  await refuseBoxKey(db, await findKeyRows(db), options);
}

/**
 * The keys a withdrawn key was to replace go on as if its rotation had not been: each retired at its activation
 * (and not expired with it, as `--expire-now` does) is retired instead when the next key left becomes active, with
 * the retention it had, or not at all when none is left to replace it.
 */
async function restoreReplaced(tx: Tx, withdrawn: readonly SigningKeyRow[]): Promise<SigningKeyRow[]> {
  const restored: SigningKeyRow[] = [];
  for (const row of withdrawn) {
    const { rows } = await tx.query<SigningKeyRow>(
      `UPDATE signing_keys k
          SET retired_at_s = n.next_s,
              published_until_s = CASE WHEN n.next_s IS NULL THEN NULL ELSE n.next_s + (k.published_until_s - k.retired_at_s) END
         FROM (SELECT min(active_from_s) AS next_s FROM signing_keys WHERE active_from_s > $1) n
        WHERE k.retired_at_s = $1 AND k.published_until_s > k.retired_at_s
        RETURNING k.kid, k.public_jwk, k.private_jwk, k.active_from_s, k.retired_at_s, k.published_until_s`,
      [row.active_from_s],
    );
    restored.push(...rows);
  }
  return restored;
}

/**
 * Adds the next signing key. It is published at once and signs from `nowS + leadS`; every other key that would
 * still sign then stops at that moment and stays published for `retentionS` more. Keys past their publication window
 * are deleted, and so are keys of earlier rotations still upcoming, which signed nothing (`neverSigned`): the latest
 * rotation's key is the one that signs next. Instances pick the change up on their next key reload.
 */
export async function rotateSigningKeys(db: Database, options: RotationOptions): Promise<RotationReport> {
  const key = await generateSigningKey();
  const activeFromS = options.nowS + options.leadS;
  const publishedUntilS = activeFromS + options.retentionS;
  return db.transaction(async (tx) => {
    const rows = await lockKeyRows(tx);
    await refuseBoxKey(tx, rows, options);
    const expired = rows.filter((r) => r.published_until_s !== null && Number(r.published_until_s) <= options.nowS).map((r) => r.kid);
    if (expired.length > 0) await tx.query('DELETE FROM signing_keys WHERE kid = ANY($1::text[])', [expired]);
    // Found from outside: after a routine rotation, one with --lead-s 0 signed at once, and the routine one's key, still
    // upcoming, took over when it became active, replacing the newer key. An upcoming key signed nothing: withdrawn,
    // and the keys it was to replace go on until this rotation's key takes over.
    const withdrawn = rows.filter((r) => !expired.includes(r.kid) && neverSigned(r, options.nowS));
    if (withdrawn.length > 0) {
      await tx.query('DELETE FROM signing_keys WHERE kid = ANY($1::text[])', [withdrawn.map((r) => r.kid)]);
      await restoreReplaced(tx, withdrawn);
    }
    // Every key that would still sign then stops at that moment: one that becomes active at that very second too (two
    // rotations in one second left two keys active from one instant, neither replaced; found by CI), and one becoming
    // active after it, too soon to withdraw (it would sign after); expiring now, all of them.
    const { rows: replaced } = await tx.query<SigningKeyRow>(
      `UPDATE signing_keys SET retired_at_s = $1, published_until_s = $2
       WHERE retired_at_s IS NULL OR retired_at_s > $1
       RETURNING ${KEY_COLUMNS}`,
      [activeFromS, publishedUntilS],
    );
    // Expiring now (a leak), the keys an earlier rotation retired stop verifying too: a leak is often found after a
    // routine rotation, and the leaked key then verified for the rest of its retention (found from outside).
    if (options.retentionS === 0) {
      const { rows: published } = await tx.query<SigningKeyRow>(
        `UPDATE signing_keys SET published_until_s = $1
         WHERE retired_at_s <= $1 AND (published_until_s IS NULL OR published_until_s > $1)
         RETURNING ${KEY_COLUMNS}`,
        [options.nowS],
      );
      replaced.push(...published.filter((row) => !replaced.some((other) => other.kid === row.kid)));
    }
    await tx.query(
      `INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at_s, active_from_s) VALUES ($1, $2, $3, $4, $5, $6)`,
      [key.kid, SIGNING_ALG, JSON.stringify(key.publicJwk), storedPrivate(key.kid, key.privateJwk, options.sealWith), options.nowS, activeFromS],
    );
    const next: SigningKeySummary = { kid: key.kid, state: options.leadS > 0 ? 'upcoming' : 'signing', activeFromS, retiredAtS: null, publishedUntilS: null, sealed: options.sealWith !== undefined };
    return { next, replaced: summarise(replaced, options.nowS, options.mode), removedKids: expired, withdrawnKids: withdrawn.map((r) => r.kid) };
  });
}

export interface WithdrawalOptions {
  /** Now, by the database's clock. */
  nowS: number;
  /** ACG_SECRET_BOX_KEY: a key that may have signed is withdrawn only when the instances' box key does not open it. */
  box?: SecretBoxKey;
  /** Withdraw a key `box` does not open though nothing shows `box` is the instances' own (see RotationOptions). */
  uncheckedBoxKey?: boolean;
  mode: Config['mode'];
}

/**
 * Why a key could be withdrawn: it signed nothing, because it was still `upcoming`, no instance could open it
 * (`unopened`: the instances' box key does not), or live mode never uses it (`ignored`: kept unsealed).
 */
export type WithdrawalReason = 'upcoming' | 'unopened' | 'ignored';

export interface WithdrawalReport {
  withdrawn: SigningKeySummary;
  reason: WithdrawalReason;
  /** The keys it was to replace, which go on signing (`restoreReplaced`). */
  restored: SigningKeySummary[];
  /** The keys left in the table. */
  left: SigningKeySummary[];
}

/** Why `row` may be withdrawn, or a refusal: a key that may have signed stays (what it signed would stop verifying). */
async function withdrawalReason(tx: Tx, rows: readonly SigningKeyRow[], row: SigningKeyRow, options: WithdrawalOptions): Promise<WithdrawalReason> {
  const { nowS } = options;
  const activeFromS = Number(row.active_from_s);
  if (neverSigned(row, nowS)) return 'upcoming';
  const since = activeFromS <= nowS ? `has been due to sign since ${ago(activeFromS, nowS)}` : `becomes active at ${isoS(activeFromS)}, too soon to be sure no instance signs with it`;
  const replace = 'withdrawing it would make what it signed stop verifying. To replace it, run `acg keys rotate` (with --expire-now if it leaked)';
  if (!isSealed(row.private_jwk)) {
    if (options.mode === 'live') return 'ignored';
    throw new SigningKeyRefusal(`${row.kid} ${since}, and any instance may sign with it (it is kept unsealed): ${replace}`);
  }
  if (!options.box) {
    throw new SigningKeyRefusal(`${row.kid} ${since}: it is withdrawn only if the instances' box key does not open it. Set ACG_SECRET_BOX_KEY to the one the gateway runs with, and run this again`);
  }
  const proven = await boxKeyProven(tx, rows, options.box, nowS, 'so it cannot show which keys they open', row.kid);
  if (opensWith(row, options.box)) throw new SigningKeyRefusal(`${row.kid} ${since}, and it opens with ACG_SECRET_BOX_KEY here, so instances with this box key sign with it: ${replace}`);
  if (!proven && !options.uncheckedBoxKey) {
    throw new UnprovenBoxKeyError(
      `${row.kid} does not open with ACG_SECRET_BOX_KEY here, but ${UNPROVEN}. Start the gateway with its ACG_SECRET_BOX_KEY (and ACG_SIGNING_KEY, if ` +
        `${row.kid} stops it from starting) and run this again; or, if you are sure this box key is the instances' own, pass --unchecked-box-key`,
    );
  }
  return 'unopened';
}

/**
 * Removes a key that signed nothing: one still upcoming, one no instance can open (sealed with another box key than
 * the instances', as a rotation run with a mistaken one leaves), or, in live mode, one kept unsealed. The keys it was
 * to replace go on signing. A key that may have signed is refused (SigningKeyRefusal): `acg keys rotate` replaces it.
 */
export async function withdrawSigningKey(db: Database, kid: string, options: WithdrawalOptions): Promise<WithdrawalReport> {
  return db.transaction(async (tx) => {
    const rows = await lockKeyRows(tx);
    const row = rows.find((r) => r.kid === kid);
    if (!row) {
      throw new SigningKeyRefusal(`no signing key ${kid} in the database${rows.length > 0 ? ` (it holds ${rows.map((r) => r.kid).join(', ')}: acg keys list shows them)` : ', which holds none'}`);
    }
    const reason = await withdrawalReason(tx, rows, row, options);
    await tx.query('DELETE FROM signing_keys WHERE kid = $1', [kid]);
    const restored = await restoreReplaced(tx, [row]);
    const [withdrawn] = summarise([row], options.nowS, options.mode);
    return { withdrawn: withdrawn!, reason, restored: summarise(restored, options.nowS, options.mode), left: summarise(await findKeyRows(tx), options.nowS, options.mode) };
  });
}
