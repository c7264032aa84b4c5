// The x402 credit scheme on the wire (the draft credit binding of `batch-settlement`, x402-foundation/x402
// PR #2612), as @x402/core 2.27 speaks it: its identifiers, the facilitator's requests and answers, and the
// authorize request an agent sends. docs/decisions.md "x402 facilitator" records where this diverges from the draft.
import { Type, type Static } from '@sinclair/typebox';
import { IDEMPOTENCY_KEY_PATTERN } from '../platform/idempotency.ts';
import { Microcredits, Nullable, ResourceId } from '../platform/schemas.ts';

export const X402_VERSION = 2;
export const X402_SCHEME = 'batch-settlement';
/** x402's `namespace:reference`; trust is anchored to `extra.authority` (this gateway's base URL), never to this label. */
export const X402_NETWORK = 'acg:credit';
/** Every amount of the scheme is a decimal string of microcredits (1 credit = 1,000,000 µc = $0.01). */
export const X402_ASSET = 'microcredit';
/** The version of the credit binding the scheme follows (`extra.version`). */
export const X402_BINDING_VERSION = '1.0.0';
/** The attestation's JWS `typ`: never a voucher (voucher+jwt), a receipt or an access token. */
export const ATTESTATION_TYP = 'x402-credit+jwt';
/** The longest presentation window (`exp` − `iat`): the draft asks for minutes, not hours. */
export const ATTESTATION_PRESENTATION_S_MAX = 300;
/** Bounds a resource URL the attestation binds. */
export const RESOURCE_URL_CHARS_MAX = 2048;

/**
 * Why a request is not for what this facilitator settles, checked before the attestation, with x402 v2's own
 * reasons (specs/x402-specification-v2.md §9): another x402 version, scheme or network, and requirements in
 * another asset (x402 has no asset reason; `invalid_payment_requirements` is its "requirements invalid"). A
 * misconfigured server, never the draft's forgery signal (`attestation_invalid`) nor its price refusal.
 */
export const REQUIREMENTS_REASONS = ['invalid_x402_version', 'invalid_scheme', 'invalid_network', 'invalid_payment_requirements'] as const;
export type RequirementsReason = (typeof REQUIREMENTS_REASONS)[number];

/**
 * Why a payment does not verify, each its own client behaviour (the draft's three that must never collapse,
 * attestation_expired, attestation_invalid and insufficient_credits, among them).
 */
export const INVALID_REASONS = [
  'attestation_invalid',
  'attestation_expired',
  'attestation_revoked',
  'unauthorized_server',
  'resource_mismatch',
  'price_not_acceptable',
  'already_settled',
  'hold_expired',
  ...REQUIREMENTS_REASONS,
] as const;
export type InvalidReason = (typeof INVALID_REASONS)[number];

/** Why a settlement did not happen. */
export const SETTLE_ERROR_REASONS = [
  'settle_conflict',
  'hold_expired',
  'unauthorized_server',
  'revoked',
  'attestation_invalid',
  'resource_mismatch',
  'price_not_acceptable',
  'amount_exceeds_authorized',
  ...REQUIREMENTS_REASONS,
] as const;
export type SettleErrorReason = (typeof SETTLE_ERROR_REASONS)[number];

/**
 * What each x402 reason means and what its client does next, for the error catalogue (`/docs/errors#x402-{reason}`):
 * typed over every reason of both answers, so a new reason cannot go undocumented.
 */
export const X402_REASON_MEANINGS: Readonly<Record<InvalidReason | SettleErrorReason, string>> = {
  invalid_x402_version: 'The request is not x402 version 2, the only one this facilitator speaks. A server misconfiguration: nothing was read or held.',
  invalid_scheme: 'The requirements name another scheme than batch-settlement. A server misconfiguration: route the payment to its own facilitator.',
  invalid_network: 'The requirements name another network than acg:credit. A server misconfiguration: route the payment to its own facilitator.',
  invalid_payment_requirements: 'The requirements are in another asset than microcredit. A server misconfiguration.',
  attestation_invalid: "The attestation is not one this gateway issued for this merchant (structure, signature, typ, alg or iss), or names no hold of the caller's: treat it as a forgery and do not serve.",
  attestation_expired: 'The attestation verifies but its presentation window (exp) has passed: the agent authorizes again and retries. Its hold is untouched.',
  attestation_revoked: 'The agent or one of its ancestors was frozen, or the delegate retired (the kill switch): its hold was released and its credit went back to the agent. Do not serve.',
  revoked: 'The agent or one of its ancestors was frozen, or the delegate retired, before settlement: its hold was released and nothing was charged. Do not serve.',
  unauthorized_server: "The attestation or the requirements' payTo is another merchant's: only the merchant it was issued to may verify or settle it.",
  resource_mismatch: "The attestation was issued for another resource than the requirements' extra.resource.",
  price_not_acceptable: 'The attestation authorizes less than the amount asked, or is for another offer than extra.offerId.',
  amount_exceeds_authorized: 'The settlement charges more than the attestation authorized: settle at most that amount (the rest goes back to the agent).',
  already_settled: 'The hold was already captured or released: serve nothing more against it.',
  settle_conflict: 'This jti was already settled with other parameters; that settlement stands and nothing more was charged.',
  hold_expired: "The hold passed its deadline and its credit went back to the agent: nothing can be charged; the agent authorizes again.",
};

const Json = Type.Record(Type.String(), Type.Unknown());
/** The longest attestation read; one the gateway signs is about 900 characters. */
export const ATTESTATION_CHARS_MAX = 8192;
/** The longest network a request may name (x402's CAIP-2 networks are far shorter); a refusal echoes it. */
export const NETWORK_CHARS_MAX = 100;

/**
 * PaymentRequirements of this scheme on this network as x402 sends them: what the attestation is checked against,
 * by reason (the asset too: another is invalid_payment_requirements). Malformed, they are a malformed request (400):
 * they are the calling server's own.
 */
export const PaymentRequirements = Type.Object(
  {
    scheme: Type.String({ maxLength: 100, description: X402_SCHEME }),
    network: Type.String({ maxLength: NETWORK_CHARS_MAX, description: X402_NETWORK }),
    asset: Type.String({ maxLength: 100 }),
    amount: Microcredits('for this scheme: the most this request may be charged (verify), the charge (settle; "0" releases)'),
    payTo: Type.String({ maxLength: 200, description: 'for this scheme: the merchant id' }),
    maxTimeoutSeconds: Type.Integer({ minimum: 0 }),
    extra: Type.Object(
      {
        authority: Type.String({ maxLength: 2048, description: "the gateway's base URL: the attestation's issuer" }),
        offerId: Type.String({ maxLength: 200 }),
        resource: Type.String({ maxLength: RESOURCE_URL_CHARS_MAX, description: 'the resource URL as the server protects it' }),
        version: Type.Optional(Type.String({ maxLength: 40 })),
      },
      { additionalProperties: true },
    ),
  },
  { additionalProperties: true },
);
export type PaymentRequirements = Static<typeof PaymentRequirements>;

/**
 * Requirements of another scheme or network (an x402 v1 server's, an `exact` one's, sent here by mistake): read for
 * their scheme and network only, and answered 200 with x402's reason, whatever else they hold (found from outside:
 * a v1 body, or another scheme's amount, was refused 400 for not being this scheme's, and x402's client threw).
 */
export const ForeignPaymentRequirements = Type.Object(
  { scheme: Type.String({ maxLength: 100 }), network: Type.String({ maxLength: NETWORK_CHARS_MAX }) },
  {
    additionalProperties: true,
    not: { type: 'object', required: ['scheme', 'network'], properties: { scheme: { const: X402_SCHEME }, network: { const: X402_NETWORK } } },
    description: `requirements of another scheme or network than ${X402_SCHEME} on ${X402_NETWORK}: answered with invalid_scheme or invalid_network (invalid_x402_version first)`,
  },
);

export const PaymentPayload = Type.Object(
  {
    x402Version: Type.Integer(),
    accepted: Type.Optional(Json),
    resource: Type.Optional(Json),
    // The paying client's own input, passed on by the resource server: whatever it is, what is not a well-formed
    // attestation is answered as the facilitator's refusal (isValid false, attestation_invalid), never as a malformed request.
    payload: Type.Unknown({
      description:
        `for this scheme: \`{"type": "consume", "attestation": "<the compact JWS POST /x402/authorize answered>"}\`, the attestation a string of at most ` +
        `${ATTESTATION_CHARS_MAX} characters. Anything else (not an object, another type, a missing or malformed attestation, text with a control character) is answered ` +
        '`isValid: false` (verify) or `success: false` (settle) with `attestation_invalid`, not a 400',
    }),
    extensions: Type.Optional(Json),
  },
  { additionalProperties: true },
);
export type PaymentPayload = Static<typeof PaymentPayload>;

/**
 * VerifyRequest and SettleRequest: x402 version 2's, its requirements this scheme's whole form or another scheme's or
 * network's (read for those two only); or a request of another x402 version, whatever its payload and requirements
 * hold (found from outside: a v1 body naming this scheme was refused 400 for lacking v2's `amount`, where the version
 * is read first). Either of the last two is answered with x402's reason.
 */
export const FacilitatorRequest = Type.Object(
  {
    x402Version: Type.Integer(),
    paymentPayload: PaymentPayload,
    paymentRequirements: Type.Object({}, { additionalProperties: true, description: `in version ${X402_VERSION}: PaymentRequirements (this scheme) or ForeignPaymentRequirements (another)` }),
  },
  {
    additionalProperties: true,
    anyOf: [
      { properties: { paymentRequirements: { anyOf: [PaymentRequirements, ForeignPaymentRequirements] } } },
      { properties: { x402Version: { not: { const: X402_VERSION } } } },
    ],
    examples: [
      {
        x402Version: 2,
        paymentPayload: { x402Version: 2, payload: { type: 'consume', attestation: 'eyJhbGciOiJFUzI1NiIs…' } },
        paymentRequirements: {
          scheme: X402_SCHEME,
          network: X402_NETWORK,
          asset: X402_ASSET,
          amount: '500000',
          payTo: 'mer_diat4hyfyy6cjpgmj25d6iegcc',
          maxTimeoutSeconds: 300,
          extra: { version: X402_BINDING_VERSION, authority: 'https://gateway.example', offerId: 'off_yqkspmwv2yjtmylogwrpqif3ho', resource: 'https://api.shop.example/report' },
        },
      },
    ],
  },
);
/** As the service reads it: `forThisFacilitator` checks the version, scheme and network before anything else. */
export type FacilitatorRequest = Omit<Static<typeof FacilitatorRequest>, 'paymentRequirements'> & { paymentRequirements: { scheme?: unknown; network?: unknown; [member: string]: unknown } };

export const VerifyResponseSchema = Type.Object(
  {
    isValid: Type.Boolean(),
    invalidReason: Type.Optional(Type.String({ enum: [...INVALID_REASONS] })),
    invalidMessage: Type.Optional(Type.String()),
    payer: Type.Optional(Type.String({ description: 'the agent id (the attestation `sub`)' })),
  },
  { $id: 'X402VerifyResponse', description: 'x402 VerifyResponse: always HTTP 200, `isValid` false with its reason when the payment does not verify' },
);
export type VerifyResponse = Static<typeof VerifyResponseSchema>;

export const SettleResponseSchema = Type.Object(
  {
    success: Type.Boolean(),
    errorReason: Type.Optional(Type.String({ enum: [...SETTLE_ERROR_REASONS] })),
    errorMessage: Type.Optional(Type.String()),
    payer: Type.Optional(Type.String({ description: 'the agent id' })),
    transaction: Type.String({ description: 'always "": no chain transfer' }),
    network: Type.String({ description: `${X402_NETWORK}; a refusal of a request for another network or x402 version names the request's network` }),
    amount: Type.Optional(Microcredits('what was charged; "0" for a release')),
    extra: Type.Optional(
      Type.Object({
        commitmentId: Type.String({ description: 'the attestation `jti`: the hold id, the handle for a dispute' }),
        chargedAmount: Microcredits('what was charged; the rest went back to the agent'),
        receipt: Nullable(Type.String({ description: "the gateway's signed capture receipt (ES256 JWS, typ receipt+jwt); null for a release" })),
      }),
    ),
  },
  { $id: 'X402SettleResponse', description: 'x402 SettleResponse: always HTTP 200, `success` false with its reason when nothing was settled' },
);
export type SettleResponse = Static<typeof SettleResponseSchema>;

export const SupportedSchema = Type.Object(
  {
    kinds: Type.Array(
      Type.Object({
        x402Version: Type.Integer(),
        scheme: Type.String(),
        network: Type.String(),
        extra: Type.Object({ authority: Type.String(), asset: Type.String(), version: Type.String() }),
      }),
    ),
    extensions: Type.Array(Type.String()),
    signers: Type.Record(Type.String(), Type.Array(Type.String())),
  },
  { $id: 'X402Supported', description: 'x402 SupportedResponse: the credit scheme, or no kind while the gateway cannot sign (see /v1/integrations)' },
);
export type Supported = Static<typeof SupportedSchema>;

export const AuthorizeX402Input = Type.Object(
  {
    amount: Microcredits("the price to hold, from the server's requirements (`amount`); at most the offer's priceUc"),
    asset: Type.String({ enum: [X402_ASSET] }),
    resource: Type.String({ minLength: 1, maxLength: RESOURCE_URL_CHARS_MAX, description: 'the resource from the requirements (`extra.resource`), an absolute URI (a URL; `mcp://tool/{name}` for an MCP tool): the attestation is bound to it' }),
    payTo: ResourceId,
    offerId: ResourceId,
    bundleId: Type.Optional(Type.String({ maxLength: 200, description: "the draft's bundle: if sent, the agent's own id" })),
    maxTimeoutSeconds: Type.Optional(Type.Integer({ minimum: 1, description: `the requirements' presentation window; the attestation's is at most ${ATTESTATION_PRESENTATION_S_MAX} s` })),
  },
  { additionalProperties: false },
);
export type AuthorizeX402Input = Static<typeof AuthorizeX402Input>;

/** The authorize body: the input, and the draft's `idempotencyKey` (or the Idempotency-Key header). */
export const AuthorizeX402Body = Type.Object(
  {
    ...AuthorizeX402Input.properties,
    idempotencyKey: Type.Optional(
      Type.String({ pattern: IDEMPOTENCY_KEY_PATTERN.source, description: 'the Idempotency-Key, as the draft carries it (a UUID is a good key); if the header is sent too, the two must be equal' }),
    ),
  },
  {
    additionalProperties: false,
    examples: [
      {
        amount: '500000',
        asset: X402_ASSET,
        resource: 'https://api.shop.example/report',
        payTo: 'mer_diat4hyfyy6cjpgmj25d6iegcc',
        offerId: 'off_yqkspmwv2yjtmylogwrpqif3ho',
        idempotencyKey: '9f8b2c54-1a3e-4f6d-8e07-3d2a5b1c9e44',
      },
    ],
  },
);
export type AuthorizeX402Body = Static<typeof AuthorizeX402Body>;

export const AuthorizationSchema = Type.Object(
  {
    attestation: Type.String({ description: `compact ES256 JWS, typ ${ATTESTATION_TYP}` }),
    redemption: Type.Ref('Redemption'),
  },
  { $id: 'X402Authorization', description: 'The hold an x402 authorize took, and the attestation that presents it' },
);

/** What settle runs once the attestation verified: the hold to resolve and the charge ("0" releases). */
export const SettleX402Input = Type.Object({ holdId: ResourceId, amountUc: Microcredits() }, { additionalProperties: false });
export type SettleX402Input = Static<typeof SettleX402Input>;

export const X402_SCHEMAS = [VerifyResponseSchema, SettleResponseSchema, SupportedSchema, AuthorizationSchema];
