// The gateway as the x402 facilitator for agent credit (the credit binding of `batch-settlement`):
//   authorize  a mint (vouchers' mintMany): a hold of the requirements' amount against the merchant's offer,
//              under the agent's mandate, in group commit, answered with a signed attestation instead of a voucher;
//   verify     a read: the attestation verified in full (ES256, typ, iss, exp, aud), matched to the server's
//              requirements, and the hold's state in the ledger;
//   settle     a capture of the settlement-time amount, or a release at "0", through the ledger's resolve path,
//              exactly once per jti (the operation runner's key is the jti).
// Each refusal names its own reason, as the draft asks; nothing here knows about HTTP.
import { decodeProtectedHeader, errors as joseErrors, type JWTPayload } from 'jose';
import type { HoldRecord, LedgerService, Redemption } from '../ledger/service.ts';
import type { Settled } from '../platform/batcher.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, memberRefusal, type ErrorCode } from '../platform/errors.ts';
import { baseUrlInOneForm } from '../platform/config.ts';
import type { Gateway } from '../platform/gateway.ts';
import { formatUc, MICROCREDITS_PATTERN, parseUc, type Microcredits } from '../platform/money.ts';
import type { Principal } from '../platform/principal.ts';
import type { RequestBinding } from '../platform/approvals.ts';
import type { CredentialSigner, MintReads, MintRequest, VoucherService } from '../vouchers/service.ts';
import {
  ATTESTATION_PRESENTATION_S_MAX,
  ATTESTATION_TYP,
  X402_ASSET,
  X402_BINDING_VERSION,
  X402_NETWORK,
  ATTESTATION_CHARS_MAX,
  NETWORK_CHARS_MAX,
  X402_SCHEME,
  X402_VERSION,
  type AuthorizeX402Input,
  type FacilitatorRequest,
  type InvalidReason,
  type PaymentPayload,
  type PaymentRequirements,
  type RequirementsReason,
  type SettleErrorReason,
  type SettleResponse,
  type SettleX402Input,
  type Supported,
  type VerifyResponse,
} from './schemas.ts';

/** The attestation's claims, as signed (see `attestationSigner`). */
export interface AttestationClaims {
  iss: string;
  /** The agent: the draft's bundle. */
  sub: string;
  /** The merchant the attestation may be presented to. */
  aud: string;
  /** The hold id: the commitment, the replay anchor and the settle idempotency key. */
  jti: string;
  iat: number;
  /** The end of the presentation window. */
  exp: number;
  /** The hold's deadline: settlement is accepted until then. */
  holdExp: number;
  amountUc: Microcredits;
  asset: string;
  resource: string;
  offerId: string;
}

const REQUIRED_CLAIMS = ['sub', 'aud', 'jti', 'iat', 'exp', 'holdExp', 'amount', 'asset', 'resource', 'offer_id'] as const;
const UC = new RegExp(MICROCREDITS_PATTERN);

type Reading = { ok: true; claims: AttestationClaims } | { ok: false; reason: 'attestation_invalid' | 'attestation_expired' | 'hold_expired'; message: string; payer?: string };

/** An authorize as the batch runs it: the agent, its checked request, and the key that names it (for a purchase approval). */
export interface AuthorizeRequest {
  agentId: string;
  input: AuthorizeX402Input;
  checked: AuthorizeChecked;
  binding?: RequestBinding;
}

/** What an authorize's rules found before its key was claimed. */
export interface AuthorizeChecked {
  amountUc: Microcredits;
  /** The attestation's presentation window, at most ATTESTATION_PRESENTATION_S_MAX. */
  presentationS: number;
}

export interface Authorization {
  attestation: string;
  redemption: Redemption;
}

/** A settle whose attestation verified: run it (the operation's input), or its refusal as the answer. */
export type Settlement = { refused: SettleResponse } | { input: SettleX402Input };

/** The draft's code for a gateway refusal of an authorize, carried in the problem's `error` member. */
const DRAFT_CODES: Partial<Record<ErrorCode, string>> = {
  INSUFFICIENT_CREDITS: 'insufficient_credits',
  FROZEN: 'bundle_revoked',
  idempotency_key_reused: 'idempotency_conflict',
  not_found: 'bundle_not_found',
};

export interface X402Dependencies {
  ledger: LedgerService;
  vouchers: VoucherService;
}

export class X402Service {
  constructor(
    private readonly gateway: Gateway,
    private readonly deps: X402Dependencies,
  ) {}

  /** The issuer of every attestation and the trust anchor of the scheme (`extra.authority`): the gateway's base URL. */
  get authority(): string {
    return this.gateway.config.baseUrl;
  }

  /**
   * What this gateway facilitates: the credit scheme once it can sign attestations and merchants can hold API
   * keys (what /v1/integrations reports as x402 configured), nothing before.
   */
  configured(apiKeysAvailable: boolean): boolean {
    return this.gateway.signing.configured && apiKeysAvailable;
  }

  supported(configured: boolean): Supported {
    const kinds = configured ? [{ x402Version: X402_VERSION, scheme: X402_SCHEME, network: X402_NETWORK, extra: { authority: this.authority, asset: X402_ASSET, version: X402_BINDING_VERSION } }] : [];
    return { kinds, extensions: [], signers: {} };
  }

  // ---- authorize ---------------------------------------------------------------------------------------

  /**
   * The Idempotency-Key of an authorize: the header or the draft's `idempotencyKey` member; both sent, they
   * must be one key.
   */
  authorizeKey(header: string | undefined, member: string | undefined): string | undefined {
    if (header !== undefined && member !== undefined && header !== member) {
      throw memberRefusal('idempotencyKey', 'differs from the Idempotency-Key header: send one, or the same key in both');
    }
    return header ?? member;
  }

  /** The rules an authorize checks before its key is claimed (a refusal here is as if never sent). */
  checkAuthorize(principal: Principal, input: AuthorizeX402Input): AuthorizeChecked {
    if (input.bundleId !== undefined && input.bundleId !== principal.agentId) {
      throw new ApiError('not_found', { detail: `no bundle ${input.bundleId}: an agent authorizes from its own credit, and its bundleId is its agent id` });
    }
    if (!isAbsoluteUri(input.resource)) {
      throw memberRefusal('resource', 'must be an absolute URI: the URL the server protects (an MCP tool: mcp://tool/{name}), or sha256:<hex> of its requirements');
    }
    const amountUc = parseUc(input.amount);
    if (amountUc === 0n) throw memberRefusal('amount', 'must be positive');
    if (!this.gateway.signing.configured) throw this.gateway.signing.unconfigured();
    return { amountUc, presentationS: Math.min(input.maxTimeoutSeconds ?? ATTESTATION_PRESENTATION_S_MAX, ATTESTATION_PRESENTATION_S_MAX) };
  }

  /**
   * Authorizes many in one pass: the voucher mint, each request holding its own amount of the offer of the
   * merchant it names, no longer than its key is kept (so a retry within the hold's life always finds its
   * answer), signed with an attestation instead of a voucher.
   */
  async authorizeMany(tx: Tx, requests: readonly AuthorizeRequest[], read?: MintReads): Promise<Array<Settled<Authorization>>> {
    const minted = await this.deps.vouchers.mintMany(tx, requests.map((request) => this.mintOf(request)), read);
    return minted.map((outcome) => (outcome.ok ? { ok: true, value: { attestation: outcome.value.voucher, redemption: outcome.value.redemption } } : outcome));
  }

  /** What an authorize's batch reads first, beside its claims: a mint's (`VoucherService.readAhead`). */
  readAhead(tx: Tx, requests: readonly AuthorizeRequest[]): Promise<MintReads> {
    return this.deps.vouchers.readAhead(tx, requests.map((request) => this.mintOf(request)));
  }

  /** The mint an authorize is: the price the server asked (at most the offer's), for the merchant it names. */
  private mintOf({ agentId, input, checked, binding }: AuthorizeRequest): MintRequest {
    return {
      agentId,
      offerId: input.offerId,
      amountUc: checked.amountUc,
      merchantId: input.payTo,
      resource: input.resource,
      lifetimeSMax: this.gateway.config.idempotencyRetentionS,
      signer: this.attestationSigner(input, checked.presentationS),
      ...(binding ? { binding } : {}),
    };
  }

  /** An authorize's refusal with the draft's code beside the gateway's (`error`), where the draft names one. */
  withDraftCode(error: unknown): unknown {
    if (!(error instanceof ApiError)) return error;
    const draft = DRAFT_CODES[error.code];
    if (draft === undefined) return error;
    return new ApiError(error.code, { ...error.options, status: error.status, extra: { ...error.options.extra, error: draft } });
  }

  /**
   * The attestation of a hold: `exp` ends the presentation window (at most five minutes, and before the
   * hold's deadline), `holdExp` is the hold's deadline; `aud` the merchant, `resource` what it may be
   * presented for, `mandate` the hash of the mandate in force.
   */
  private attestationSigner(input: AuthorizeX402Input, presentationS: number): CredentialSigner {
    return ({ agentId, offer, redemption, mandateHash }) =>
      this.gateway.signing.sign(
        {
          iss: this.authority,
          sub: agentId,
          aud: offer.merchant_id,
          jti: redemption.id,
          iat: redemption.createdAt,
          exp: Math.min(redemption.createdAt + presentationS, redemption.expiresAt - 1),
          holdExp: redemption.expiresAt,
          amount: redemption.amountUc,
          asset: X402_ASSET,
          resource: input.resource,
          offer_id: offer.id,
          ...(mandateHash === null ? {} : { mandate: mandateHash }),
        },
        ATTESTATION_TYP,
      );
  }

  // ---- verify ------------------------------------------------------------------------------------------

  /**
   * Verifies a payment for the calling merchant, in the draft's order: the request is this facilitator's (x402
   * version, scheme, network, asset); the attestation (structure, ES256, typ, our key, iss = the requirements' authority, then exp); its
   * audience is the caller; its resource, asset, offer and amount meet the requirements; then the hold:
   * revoked, settled or expired.
   */
  async verify(db: Queryable, merchantId: string, request: FacilitatorRequest): Promise<VerifyResponse> {
    const ours = forThisFacilitator(request);
    if (!ours.ok) return invalid(ours.reason, ours.message);
    const { requirements } = ours;
    const reading = await this.readAttestation(request.paymentPayload, requirements, 'presentation');
    if (!reading.ok) return invalid(reading.reason, reading.message, reading.payer);
    const { claims } = reading;
    const terms = termsRefusal(claims, requirements, merchantId);
    if (terms) return invalid(terms.reason, terms.message, claims.sub);
    const askedUc = BigInt(requirements.amount);
    if (claims.amountUc < askedUc) return invalid('price_not_acceptable', `the attestation authorizes ${claims.amountUc} µc, less than the ${askedUc} µc asked`, claims.sub);
    const record = (await this.deps.ledger.holdRecords(db, [claims.jti])).get(claims.jti);
    if (!record || record.merchantId !== merchantId) return invalid('attestation_invalid', `no hold ${claims.jti}`, claims.sub);
    if (record.revokedAt !== null) return invalid('attestation_revoked', `${revokedWhy(record)}: do not serve it`, claims.sub);
    const { state } = record.redemption;
    if (state === 'captured' || state === 'released') return invalid('already_settled', `the hold is already ${state}`, claims.sub);
    if (state === 'expired') return invalid('hold_expired', `the hold expired at ${record.redemption.expiresAt}; its credit went back to the agent`, claims.sub);
    return { isValid: true, payer: claims.sub };
  }

  // ---- settle ------------------------------------------------------------------------------------------

  /**
   * A settle before it runs: the payment verified as verify does it (the version, scheme, network and asset; the attestation's signature, typ
   * and iss; its merchant, resource and offer against the requirements), except `exp`, since settlement is
   * accepted until the hold's deadline, and the charge within what it authorized instead of covering what is
   * asked. Its refusals are answers that change nothing.
   */
  async settlementOf(merchantId: string, request: FacilitatorRequest): Promise<Settlement> {
    const ours = forThisFacilitator(request);
    if (!ours.ok) return { refused: { ...settleFailure(ours.reason, ours.message), network: requestNetwork(request) } };
    const { requirements } = ours;
    const reading = await this.readAttestation(request.paymentPayload, requirements, 'settlement');
    if (!reading.ok) return { refused: settleFailure('attestation_invalid', reading.message) };
    const { claims } = reading;
    const terms = termsRefusal(claims, requirements, merchantId);
    if (terms) return { refused: settleFailure(terms.reason, terms.message, claims.sub) };
    const chargeUc = BigInt(requirements.amount);
    if (chargeUc > claims.amountUc) {
      return { refused: settleFailure('amount_exceeds_authorized', `the charge of ${chargeUc} µc is more than the ${claims.amountUc} µc authorized`, claims.sub) };
    }
    return { input: { holdId: claims.jti, amountUc: formatUc(chargeUc) } };
  }

  /**
   * Settles many in one pass (the ledger's capture and release batch): each charge captured ("0" released).
   * A capture answers its hold as captured; any other outcome is answered from its hold as it now stands (a
   * release may find it revoked by a freeze, which the release itself leaves as it was). A hold settled before
   * the same way (by another key, or past the key's retention) answers as then; settled otherwise, settle_conflict.
   */
  async settleMany(tx: Tx, requests: ReadonlyArray<SettleX402Input & { merchantId: string }>): Promise<Array<Settled<SettleResponse>>> {
    const outcomes = await this.deps.ledger.resolveMany(
      tx,
      requests.map(({ holdId, amountUc, merchantId }) =>
        amountUc === '0' ? { action: 'release' as const, holdId, merchantId } : { action: 'capture' as const, holdId, merchantId, amountUc: BigInt(amountUc) },
      ),
    );
    const captured = (index: number) => outcomes[index]!.ok && requests[index]!.amountUc !== '0';
    const unsure = requests.filter((_, index) => !captured(index)).map(({ holdId }) => holdId);
    const records = unsure.length === 0 ? new Map<string, HoldRecord>() : await this.deps.ledger.holdRecords(tx, unsure);
    return requests.map((request, index) => {
      const outcome = outcomes[index]!;
      if (outcome.ok && captured(index)) return { ok: true, value: settled(outcome.value) };
      return settlementAnswer(request, outcome, records.get(request.holdId));
    });
  }

  /**
   * The answer to a settle of a jti whose key already holds the answer to a settle with other parameters (the
   * runner's idempotency_key_reused), from the hold as it stands: revoked or expired is that answer; settled the way
   * this one asks (the stored answer was a refusal, and the hold was since settled so, or was already: by the REST
   * API, or by another key) answers as a settle then did; settled otherwise, settle_conflict.
   */
  async conflictOf(merchantId: string, input: SettleX402Input): Promise<SettleResponse> {
    const { holdId } = input;
    const record = (await this.deps.ledger.holdRecords(this.gateway.db, [holdId])).get(holdId);
    if (record && record.merchantId === merchantId) {
      const agentId = record.redemption.agentId;
      if (record.revokedAt !== null) return settleFailure('revoked', revokedMessage(record), agentId);
      if (record.redemption.state === 'expired') return settleFailure('hold_expired', expiredMessage(record), agentId);
      if (settledSameWay(input, record.redemption)) return settled(record.redemption);
      return settleFailure('settle_conflict', `jti ${holdId} was settled with other parameters; its settlement stands`, agentId);
    }
    return settleFailure('settle_conflict', `jti ${holdId} was settled with other parameters`);
  }

  // ---- the attestation ---------------------------------------------------------------------------------

  /**
   * The attestation of a payment, verified in full: a compact JWS whose protected header says ES256 and
   * x402-credit+jwt, signed by one of our published keys, issued by this gateway, with every claim of the
   * scheme. For a presentation `exp` must not have passed (attestation_expired, the signature having
   * verified); a settlement is accepted until the hold's deadline, which the ledger keeps.
   */
  private async readAttestation(payment: PaymentPayload, requirements: PaymentRequirements, use: 'presentation' | 'settlement'): Promise<Reading> {
    const payload = payment.payload as { type?: unknown; attestation?: unknown } | null;
    if (typeof payload !== 'object' || payload === null || payload.type !== 'consume' || typeof payload.attestation !== 'string') {
      return unreadable('the payload is not {type: "consume", attestation}');
    }
    if (payload.attestation.length > ATTESTATION_CHARS_MAX) return unreadable(`the attestation is longer than ${ATTESTATION_CHARS_MAX} characters`);
    const token = payload.attestation;
    let header: ReturnType<typeof decodeProtectedHeader>;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      return unreadable('the attestation is not a compact JWS');
    }
    if (header.alg !== 'ES256') return unreadable(`alg ${String(header.alg)} is not accepted: ES256 only`);
    if (header.typ?.toLowerCase().replace(/^application\//, '') !== ATTESTATION_TYP) return unreadable(`typ ${String(header.typ)} is not ${ATTESTATION_TYP}`);
    const expected = { typ: ATTESTATION_TYP, issuer: this.authority, requiredClaims: REQUIRED_CLAIMS };
    let claimed: JWTPayload;
    try {
      claimed = (await this.gateway.signing.verify(token, expected)).payload;
    } catch (error) {
      // jose checks the signature, then typ, the claims' presence and iss, and `exp` last: an expired one is ours.
      if (!(error instanceof joseErrors.JWTExpired)) return unreadable(`the attestation does not verify: ${(error as Error).message}`);
      if (use === 'presentation') {
        // The signature verified, so its subject is the payer, as in every other refusal of a valid attestation.
        const payer = typeof error.payload.sub === 'string' ? error.payload.sub : undefined;
        // Past its hold's deadline too, the hold is the news: its credit went back to the agent.
        const { holdExp } = error.payload;
        if (typeof holdExp === 'number' && holdExp <= this.gateway.clock.nowS()) {
          return { ok: false, reason: 'hold_expired', message: `the hold expired at ${holdExp}; its credit went back to the agent`, payer };
        }
        return { ok: false, reason: 'attestation_expired', message: 'the attestation expired: authorize again and retry', payer };
      }
      claimed = error.payload;
    }
    const claims = claimsOf(claimed);
    if (!claims) return unreadable('the attestation lacks a claim of the scheme, or has one of the wrong type');
    // Compared in one form, as the x402 package's client compares it before it pays: a server whose requirements
    // write the authority with a trailing slash or in capitals names this gateway all the same.
    const { authority } = requirements.extra;
    if (baseUrlInOneForm(authority) !== claims.iss) return unreadable(`the attestation was issued by ${claims.iss}, not ${quoted(authority)}`);
    return { ok: true, claims };
  }
}

const THIS_SCHEME = `this facilitator settles ${X402_SCHEME} on ${X402_NETWORK} in ${X402_ASSET} only`;

/** A value the request stated, as its message names it: quoted, so an empty or spaced one reads as such (found from outside). */
const quoted = (value: unknown): string => JSON.stringify(value) ?? String(value);

/**
 * The request's requirements when it is for this facilitator; else why not, with x402's own reason (schemas.ts,
 * REQUIREMENTS_REASONS): the version first (another version's requirements are not read as this one's), then the
 * scheme, the network and the asset. Each is the server's statement, so none is a forgery or a price.
 */
function forThisFacilitator(request: FacilitatorRequest): { ok: true; requirements: PaymentRequirements } | { ok: false; reason: RequirementsReason; message: string } {
  if (request.x402Version !== X402_VERSION || request.paymentPayload.x402Version !== X402_VERSION) {
    return { ok: false, reason: 'invalid_x402_version', message: `this facilitator speaks x402 version ${X402_VERSION} only` };
  }
  const { scheme, network } = request.paymentRequirements;
  if (scheme !== X402_SCHEME) return { ok: false, reason: 'invalid_scheme', message: `the scheme ${quoted(scheme)} is not ${X402_SCHEME}: ${THIS_SCHEME}` };
  if (network !== X402_NETWORK) return { ok: false, reason: 'invalid_network', message: `the network ${quoted(network)} is not ${X402_NETWORK}: ${THIS_SCHEME}` };
  // The request's schema admits this scheme on this network only in its whole form (ForeignPaymentRequirements
  // admits every other), so these are PaymentRequirements.
  const requirements = request.paymentRequirements as PaymentRequirements;
  if (requirements.asset !== X402_ASSET) return { ok: false, reason: 'invalid_payment_requirements', message: `the asset ${quoted(requirements.asset)} is not ${X402_ASSET}: ${THIS_SCHEME}` };
  return { ok: true, requirements };
}

/**
 * The network a request for another facilitator names, which its refusal echoes: x402's SettleResponse names the
 * network of the settlement attempted, and nothing was attempted on `acg:credit` (found from outside, bb118: a v1
 * request on `base-sepolia` was answered `"network": "acg:credit"`). A request naming none readably (not a string, or
 * longer than ForeignPaymentRequirements takes) gets this facilitator's own.
 */
function requestNetwork(request: FacilitatorRequest): string {
  const { network } = request.paymentRequirements;
  return typeof network === 'string' && network.length <= NETWORK_CHARS_MAX ? network : X402_NETWORK;
}

/**
 * Whether the attestation is for what the server's requirements state, as verify and settle both check it: its
 * merchant is the caller and the payee, its resource the server's, its offer the server's. The amount is each
 * one's own check (verify: it covers what is asked; settle: the charge is within it).
 */
function termsRefusal(
  claims: AttestationClaims,
  requirements: PaymentRequirements,
  merchantId: string,
): { reason: 'unauthorized_server' | 'resource_mismatch' | 'price_not_acceptable'; message: string } | undefined {
  if (claims.aud !== merchantId) return { reason: 'unauthorized_server', message: `the attestation is for merchant ${claims.aud}, not the caller` };
  if (requirements.payTo !== merchantId) return { reason: 'unauthorized_server', message: `the requirements pay ${quoted(requirements.payTo)}, not the caller` };
  if (requirements.extra.resource !== claims.resource) {
    return { reason: 'resource_mismatch', message: `the attestation is for ${claims.resource}, not ${quoted(requirements.extra.resource)}` };
  }
  if (requirements.extra.offerId !== claims.offerId) {
    return { reason: 'price_not_acceptable', message: `the attestation is for offer ${claims.offerId}, not ${quoted(requirements.extra.offerId)}` };
  }
  return undefined;
}

/** The attestation binds the resource as the server names it, and nothing fetches it: any absolute URI will do. */
function isAbsoluteUri(text: string): boolean {
  return URL.canParse(text) && !/\s/.test(text);
}

function unreadable(message: string): Reading {
  return { ok: false, reason: 'attestation_invalid', message };
}

function invalid(reason: InvalidReason, message: string, payer?: string): VerifyResponse {
  return { isValid: false, invalidReason: reason, invalidMessage: message, ...(payer === undefined ? {} : { payer }) };
}

function settleFailure(reason: SettleErrorReason, message: string, payer?: string): SettleResponse {
  return { success: false, errorReason: reason, errorMessage: message, transaction: '', network: X402_NETWORK, ...(payer === undefined ? {} : { payer }) };
}

function settled(redemption: Redemption): SettleResponse {
  return {
    success: true,
    transaction: '',
    network: X402_NETWORK,
    payer: redemption.agentId,
    amount: redemption.capturedUc,
    extra: { commitmentId: redemption.id, chargedAmount: redemption.capturedUc, receipt: redemption.captureReceipt },
  };
}

function revokedMessage(record: HoldRecord): string {
  return `${revokedWhy(record)}: its credit went back to the agent`;
}

/** When a hold was revoked, and why: its agent (or an ancestor) frozen, or the delegate retired. */
function revokedWhy(record: HoldRecord): string {
  const why = record.redemption.revocation?.reason === 'agent_retired' ? 'its agent was retired' : 'its agent was frozen';
  return `the hold was revoked at ${record.revokedAt} (${why})`;
}

function expiredMessage(record: HoldRecord): string {
  return `the hold expired at ${record.redemption.expiresAt}; its credit went back to the agent`;
}

/** Whether a settled hold was settled as this settle asks: released for "0", else captured for exactly its charge. */
function settledSameWay(request: SettleX402Input, redemption: Redemption): boolean {
  return request.amountUc === '0' ? redemption.state === 'released' : redemption.state === 'captured' && redemption.capturedUc === request.amountUc;
}

/** One settle's answer from the ledger's outcome and the hold as it now stands. */
function settlementAnswer(request: SettleX402Input & { merchantId: string }, outcome: Settled<Redemption>, record: HoldRecord | undefined): Settled<SettleResponse> {
  if (!record || record.merchantId !== request.merchantId) return { ok: true, value: settleFailure('attestation_invalid', `no hold ${request.holdId}`) };
  const { redemption } = record;
  if (record.revokedAt !== null) return { ok: true, value: settleFailure('revoked', revokedMessage(record), redemption.agentId) };
  if (outcome.ok) return { ok: true, value: settled(redemption) };
  if (!(outcome.error instanceof ApiError) || outcome.error.code !== 'hold_resolved') return outcome as Settled<SettleResponse>;
  if (redemption.state === 'expired') return { ok: true, value: settleFailure('hold_expired', expiredMessage(record), redemption.agentId) };
  if (settledSameWay(request, redemption)) return { ok: true, value: settled(redemption) };
  return { ok: true, value: settleFailure('settle_conflict', `jti ${request.holdId} is already ${redemption.state} (${redemption.capturedUc} µc charged)`, redemption.agentId) };
}

/** The scheme's claims of a verified payload, typed; undefined when one is missing or of the wrong type. */
function claimsOf(payload: JWTPayload): AttestationClaims | undefined {
  const { iss, sub, aud, jti, iat, exp, holdExp, amount, asset, resource, offer_id: offerId } = payload as Record<string, unknown>;
  const strings = [iss, sub, aud, jti, asset, resource, offerId];
  if (!strings.every((value) => typeof value === 'string')) return undefined;
  if (![iat, exp, holdExp].every((value) => typeof value === 'number' && Number.isSafeInteger(value))) return undefined;
  if (typeof amount !== 'string' || !UC.test(amount) || asset !== X402_ASSET) return undefined;
  return {
    iss: iss as string,
    sub: sub as string,
    aud: aud as string,
    jti: jti as string,
    iat: iat as number,
    exp: exp as number,
    holdExp: holdExp as number,
    amountUc: BigInt(amount),
    asset: asset as string,
    resource: resource as string,
    offerId: offerId as string,
  };
}
