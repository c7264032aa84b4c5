// Bearer JWTs this instance has already verified, so a token presented again skips the signature check.
// Only what cannot change about a token is kept: its claims after the signature, algorithm, `iss`, `aud`,
// `typ` and time checks passed. Everything that can be revoked (the deny-list of access tokens, the agent's
// registration, the owner's verified email, a merchant key) lives in the database, is kept at most two seconds
// (platform/credential-facts.ts), and every revocation waits that out before it answers, so it holds on every
// instance from the next request (docs/decisions.md "Verified-token cache").
//
// An entry is keyed by the SHA-256 of the token (never the token itself), is reused only for the same check
// (issuer, audience and kind), never past the token's `exp`, and at most VERIFIED_TOKEN_AGE_MAX_MS after its
// verification, the interval at which every instance reloads its signing keys. The map is bounded: the
// least recently used entry goes first.
import { hash } from 'node:crypto';
import type { JWTPayload } from 'jose';
import type { Clock } from '../platform/clock.ts';

/** How many verified tokens one instance keeps. */
export const VERIFIED_TOKENS_MAX = 10_000;
/** How long a verification is reused at most, even for a token that lives longer. */
export const VERIFIED_TOKEN_AGE_MAX_MS = 60_000;

export interface VerifiedToken {
  claims: Readonly<JWTPayload>;
  /** The `kid` of the key that verified it, so a reuse can ask whether that key is still trusted. */
  kid: string | undefined;
}

interface Entry extends VerifiedToken {
  check: string;
  untilMs: number;
}

function keyOf(token: string): string {
  return hash('sha256', token, 'base64url');
}

export class VerifiedTokens {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly clock: Clock,
    readonly capacity = VERIFIED_TOKENS_MAX,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /** The earlier verification of `token` for the same `check`, while it is still usable. */
  find(token: string, check: string): VerifiedToken | undefined {
    const key = keyOf(token);
    const entry = this.entries.get(key);
    if (!entry || entry.check !== check) return undefined;
    if (this.clock.nowMs() >= entry.untilMs) {
      this.entries.delete(key);
      return undefined;
    }
    // Most recently used last: Map iteration order is insertion order.
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry;
  }

  /** Keeps a successful verification; a token without `exp` is not kept. */
  remember(token: string, check: string, verified: VerifiedToken): void {
    const { exp } = verified.claims;
    if (typeof exp !== 'number') return;
    const nowMs = this.clock.nowMs();
    const untilMs = Math.min(exp * 1000, nowMs + VERIFIED_TOKEN_AGE_MAX_MS);
    if (untilMs <= nowMs) return;
    const key = keyOf(token);
    this.entries.delete(key);
    this.entries.set(key, { claims: Object.freeze({ ...verified.claims }), kid: verified.kid, check, untilMs });
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
  }
}
