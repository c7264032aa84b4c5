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
// database alone cannot sign; live mode rotates only with that key set. Dev mode's own key, and rows written
// before sealing, are kept as JWK JSON (dev mode's box key lives in the same database: sealing would hide nothing).
import { createPrivateKey, sign as signBytes, type JsonWebKey, type KeyObject } from 'node:crypto';
import { decodeProtectedHeader, errors as joseErrors, exportJWK, importJWK, importPKCS8, calculateJwkThumbprint, generateKeyPair, jwtVerify, type JWK, type JWTPayload } from 'jose';
import { ApiError } from './errors.ts';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { Database, Queryable, Tx } from './db/database.ts';
import { configuredSecretBoxKey, openSecret, sealSecret, type SecretBoxKey } from './secret-box.ts';

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

/** A sealed key that the configured ACG_SECRET_BOX_KEY does not open (another box key sealed it). */
export class UnopenedKeyError extends Error {
  constructor(readonly kid: string, reason: string) {
    super(`signing key ${kid} does not open with ACG_SECRET_BOX_KEY (${reason})`);
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
    if (!box) throw new Error(`signing key ${row.kid} is sealed: set ACG_SECRET_BOX_KEY to the key that sealed it`);
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

export class SigningKeys {
  private keys: LoadedKey[] = [];
  /** ACG_SIGNING_KEY, imported at the first load (the environment does not change while running). */
  private configuredKey: LoadedKey | undefined;
  /** The unsealed keys live mode last left out, so each change of them is reported once. */
  private ignored = '';
  /** The sealed keys this instance's box key did not open at the last load (reported once a change). */
  private unopened: string[] = [];
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
    const unopened: UnopenedKeyError[] = [];
    let opened = 0;
    for (const row of rows) {
      if (loaded.some((k) => k.kid === row.kid)) continue;
      try {
        loaded.push(await fromRow(row, known.get(row.kid), box));
        if (isSealed(row.private_jwk)) opened += 1;
      } catch (error) {
        if (!(error instanceof UnopenedKeyError)) throw error;
        unopened.push(error);
      }
    }
    // A box key that opens none of the sealed keys is this instance's mistake: refused (at start, the gateway does not
    // start). One that opens some left out only keys another box key sealed (a rotation run with the wrong
    // ACG_SECRET_BOX_KEY): this instance goes on with the others, and says which (found from outside: every restart
    // then failed, though the key signing until then still opened).
    if (unopened.length > 0 && opened === 0) throw unopened[0]!;
    this.reportUnopenedKeys(unopened.map((error) => error.kid));
    this.keys = loaded;
  }

  private reportUnopenedKeys(kids: string[]): void {
    const now = kids.join(',');
    if (now === this.unopened.join(',')) return;
    this.unopened = kids;
    if (kids.length === 0) return;
    this.reportIgnored(
      "signing keys that this instance's ACG_SECRET_BOX_KEY does not open are left out (neither signing, published nor verifying here): " +
        'another box key sealed them, most likely an `acg keys rotate` run with another ACG_SECRET_BOX_KEY. Run `acg keys rotate` again with ' +
        "the instances' ACG_SECRET_BOX_KEY (the key that signs until then goes on)",
      kids,
    );
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
        'then delete these rows from signing_keys',
      kids,
    );
  }

  get configured(): boolean {
    return this.keys.length > 0;
  }

  /** Why nothing signs, as the operator needs to hear it: no key at all, or ACG_SIGNING_KEY left out (see `reload`). */
  get whyUnconfigured(): string {
    if (this.exposedConfiguredKid !== undefined) {
      return `ACG_SIGNING_KEY is a key the database keeps unsealed (kid ${this.exposedConfiguredKid}), which anyone who read the database could sign with: set it to a new ES256 private key`;
    }
    // A key exists but does not open here: the operator's fix is the box key, not ACG_SIGNING_KEY (found from outside).
    if (this.unopened.length > 0) {
      return `the signing key that would sign now (${this.unopened.join(', ')}) does not open with this instance's ACG_SECRET_BOX_KEY: run \`acg keys rotate\` with the instances' ACG_SECRET_BOX_KEY, or set ACG_SIGNING_KEY`;
    }
    return 'set ACG_SIGNING_KEY to an ES256 private key';
  }

  /** The refusal of whatever needs a signature while nothing signs: 503 signing_configuration_required, saying why. */
  unconfigured(what?: string): ApiError {
    return new ApiError('signing_configuration_required', { detail: what === undefined ? this.whyUnconfigured : `${what}: ${this.whyUnconfigured}` });
  }

  /** The key that signs now: of those already active and not retired, the one that became active last. */
  private current(): LoadedKey {
    const nowS = this.clock.nowS();
    const usable = this.keys.filter((k) => k.activeFromS <= nowS && (k.retiredAtS === null || k.retiredAtS > nowS));
    const key = usable.reduce<LoadedKey | undefined>((newest, k) => (!newest || k.activeFromS >= newest.activeFromS ? k : newest), undefined);
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
}

/** Each key's state as a gateway in `mode` sees it: live mode leaves unsealed keys out, so they are `ignored`. */
function summarise(rows: SigningKeyRow[], nowS: number, mode: Config['mode'] = 'dev'): SigningKeySummary[] {
  const keys = rows.map((r) => ({
    kid: r.kid,
    activeFromS: Number(r.active_from_s),
    retiredAtS: toS(r.retired_at_s),
    publishedUntilS: toS(r.published_until_s),
    sealed: isSealed(r.private_jwk),
  }));
  const used = (k: (typeof keys)[number]) => mode === 'dev' || k.sealed;
  const active = keys.filter((k) => used(k) && k.activeFromS <= nowS && (k.retiredAtS === null || k.retiredAtS > nowS));
  const signing = active.reduce<(typeof keys)[number] | undefined>((newest, k) => (!newest || k.activeFromS >= newest.activeFromS ? k : newest), undefined);
  return keys.map((k) => {
    let state: SigningKeyState = 'retired';
    if (!used(k)) state = 'ignored';
    else if (k.publishedUntilS !== null && k.publishedUntilS <= nowS) state = 'expired';
    else if (k.activeFromS > nowS) state = 'upcoming';
    else if (k === signing) state = 'signing';
    return { ...k, state };
  });
}

const KEY_ROWS = 'SELECT kid, public_jwk, private_jwk, active_from_s, retired_at_s, published_until_s FROM signing_keys ORDER BY active_from_s, kid';

async function findKeyRows(db: Queryable): Promise<SigningKeyRow[]> {
  const { rows } = await db.query<SigningKeyRow>(KEY_ROWS);
  return rows;
}

/** The key rows, locked: a rotation holds them until it commits, so two rotations do not interleave. */
async function lockKeyRows(tx: Tx): Promise<SigningKeyRow[]> {
  const { rows } = await tx.query<SigningKeyRow>(`${KEY_ROWS} FOR UPDATE`);
  return rows;
}

/** The keys in the shared table (a configured ACG_SIGNING_KEY is not among them). */
export async function listSigningKeys(db: Queryable, nowS: number, mode: Config['mode'] = 'dev'): Promise<SigningKeySummary[]> {
  return summarise(await findKeyRows(db), nowS, mode);
}

export interface RotationOptions {
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
  /** The mode the replaced keys are described for (live mode never uses an unsealed one: `ignored`). */
  mode?: Config['mode'];
}

export interface RotationReport {
  next: SigningKeySummary;
  replaced: SigningKeySummary[];
  removedKids: string[];
}

/** `acg keys rotate` sealing with a box key that does not open the keys the instances already read (exit 2). */
export class AnotherBoxKeyError extends Error {
  constructor(readonly kids: readonly string[]) {
    super(
      `ACG_SECRET_BOX_KEY here does not open the signing keys already in the database (${kids.join(', ')}), so it is not the instances' own: ` +
        'a key sealed with it would not open on any of them. Set ACG_SECRET_BOX_KEY to the one the gateway runs with, and run this again',
    );
    this.name = 'AnotherBoxKeyError';
  }
}

/**
 * Refuses to seal a new key with a box key that opens none of the sealed keys still published: the instances read
 * those, so they are the best check of the instances' box key (found from outside: a rotation run with another box key
 * was accepted, and no instance could open the key it made, nor restart). One that opens some is the instances' own:
 * the others are what a rotation with another box key left, and this rotation, with the right one, is the way out.
 */
function refuseAnotherBoxKey(rows: readonly SigningKeyRow[], box: SecretBoxKey, nowS: number): void {
  const sealed = rows.filter((row) => isSealed(row.private_jwk) && (row.published_until_s === null || Number(row.published_until_s) > nowS));
  const opens = (row: SigningKeyRow) => {
    try {
      openedPrivate(row, box);
      return true;
    } catch (error) {
      if (error instanceof UnopenedKeyError) return false;
      throw error;
    }
  };
  if (sealed.length > 0 && !sealed.some(opens)) throw new AnotherBoxKeyError(sealed.map((row) => row.kid));
}

/**
 * Adds the next signing key. It is published at once and signs from `nowS + leadS`; every key that
 * would still be signing then stops at that moment and stays published for `retentionS` more. Keys
 * past their publication window are deleted. Instances pick the change up on their next key reload.
 */
export async function rotateSigningKeys(db: Database, options: RotationOptions): Promise<RotationReport> {
  const key = await generateSigningKey();
  const activeFromS = options.nowS + options.leadS;
  const publishedUntilS = activeFromS + options.retentionS;
  return db.transaction(async (tx) => {
    const rows = await lockKeyRows(tx);
    if (options.sealWith) refuseAnotherBoxKey(rows, options.sealWith, options.nowS);
    const expired = rows.filter((r) => r.published_until_s !== null && Number(r.published_until_s) <= options.nowS).map((r) => r.kid);
    if (expired.length > 0) await tx.query('DELETE FROM signing_keys WHERE kid = ANY($1::text[])', [expired]);
    // Every key that would still sign then stops at that moment, one that becomes active at that very second too (two
    // rotations in one second left two keys active from one instant, neither replaced; found by CI); expiring now, an
    // upcoming key too (it would sign after).
    const { rows: replaced } = await tx.query<SigningKeyRow>(
      `UPDATE signing_keys SET retired_at_s = $1, published_until_s = $2
       WHERE (active_from_s <= $1 OR $3::boolean) AND (retired_at_s IS NULL OR retired_at_s > $1)
       RETURNING kid, public_jwk, private_jwk, active_from_s, retired_at_s, published_until_s`,
      [activeFromS, publishedUntilS, options.retentionS === 0],
    );
    // Expiring now (a leak), the keys an earlier rotation retired stop verifying too: a leak is often found after a
    // routine rotation, and the leaked key then verified for the rest of its retention (found from outside).
    if (options.retentionS === 0) {
      const { rows: published } = await tx.query<SigningKeyRow>(
        `UPDATE signing_keys SET published_until_s = $1
         WHERE retired_at_s <= $1 AND (published_until_s IS NULL OR published_until_s > $1)
         RETURNING kid, public_jwk, private_jwk, active_from_s, retired_at_s, published_until_s`,
        [options.nowS],
      );
      replaced.push(...published.filter((row) => !replaced.some((other) => other.kid === row.kid)));
    }
    await tx.query(
      `INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at_s, active_from_s) VALUES ($1, $2, $3, $4, $5, $6)`,
      [key.kid, SIGNING_ALG, JSON.stringify(key.publicJwk), storedPrivate(key.kid, key.privateJwk, options.sealWith), options.nowS, activeFromS],
    );
    const next: SigningKeySummary = { kid: key.kid, state: options.leadS > 0 ? 'upcoming' : 'signing', activeFromS, retiredAtS: null, publishedUntilS: null, sealed: options.sealWith !== undefined };
    return { next, replaced: summarise(replaced, options.nowS, options.mode), removedKids: expired };
  });
}
