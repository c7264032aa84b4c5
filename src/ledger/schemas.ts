// The ledger's resources as every face shows them: one schema each, registered once by the composition
// root, referred to by name (`Type.Ref('Redemption')`) from routes, queries and MCP tools alike.
import { Type } from '@sinclair/typebox';
import { Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import { REFUNDS_PER_REDEMPTION_MAX } from './service.ts';

const Receipt = (description: string) =>
  Nullable(Type.String({ description: `${description}: a compact ES256 JWS (typ \`receipt+jwt\`) signed with a key of /.well-known/jwks.json; null without a signing key. Claims: \`iss\` (this gateway), \`jti\`, \`iat\`, \`kind\` (capture or refund), \`redemption_id\`, \`offer_id\`, \`agent_id\`, \`merchant_id\`, \`amount_uc\`, \`captured_uc\`, \`released_uc\`, \`refunded_uc\`, for a refund \`refund_id\` and \`refund_uc\`, and \`mandate\` (the hash of the mandate in force at the hold) when there was one. A statement of fact, so no \`aud\` and no \`exp\`: check \`merchant_id\` to tell a receipt of yours (an audience check fails with "missing aud", and dropping it would accept another merchant's receipt).` }));

/** A hold's purchase as it was sold (kept with the hold): what its evidence carries, and a list can expand. */
const OfferSold = (description: string) =>
  Nullable(
    Type.Object(
      {},
      {
        additionalProperties: true,
        description: `${description}: a merchant offer \`{id, merchantId, merchantDomain, name, category, priceUc, holdLifetimeS, refundWindowS, updatedAt}\`, or a built-in service action \`{serviceId, action, title, priceUc}\``,
      },
    ),
  );

export const RefundSchema = Type.Object(
  {
    id: Type.String(),
    redemptionId: Type.String(),
    amountUc: Microcredits('refunded to the agent, as new lots that burn and lapse like the lots it was spent from'),
    reason: Nullable(Type.String()),
    createdAt: UnixSeconds('creation'),
    receipt: Receipt('the signed refund receipt'),
  },
  { $id: 'Refund' },
);

export const RedemptionSchema = Type.Object(
  {
    id: Type.String({ description: 'hold id; the `jti` of the voucher' }),
    agentId: Type.String(),
    acceptorId: Type.String({ description: 'the merchant id, or "gateway" for built-in services' }),
    offerId: Type.String(),
    category: Type.String(),
    amountUc: Microcredits('held amount'),
    state: Type.String({ enum: ['held', 'captured', 'released', 'expired'] }),
    expiresAt: UnixSeconds('deadline: at or after it the hold is expired'),
    createdAt: UnixSeconds('creation'),
    capturedUc: Microcredits('captured amount (0 unless captured)'),
    releasedUc: Microcredits('what went back to the agent when the hold resolved; once not held, amountUc = capturedUc + releasedUc'),
    capturedAt: Nullable(UnixSeconds('when it was captured; null unless captured')),
    releasedAt: Nullable(
      UnixSeconds('when credit went back to the agent (release, the uncaptured rest of a partial capture, or expiry, whose time is always expiresAt); null when nothing went back'),
    ),
    // Optional in the schema only: every answer made now has it, but an MCP replay of an answer stored (under its
    // Idempotency-Key, for 24 h) before it existed has none, and the MCP SDK checks a tool's output against it.
    revocation: Type.Optional(
      Nullable(
        Type.Object(
          {
            revokedAt: UnixSeconds('when the gateway withdrew the voucher'),
            reason: Type.String({ description: '`agent_frozen` (the owner froze the agent or an ancestor, releasing its holds) or `agent_retired`' }),
          },
          {
            description:
              'set when the hold was released because its voucher was revoked (the kill switch: its credit went back to the agent, a capture answers 409 ' +
              'voucher_revoked, and the merchant was told by voucher.revoked); null otherwise, a merchant\'s own release included. Always present, ' +
              'except in a replay of an answer stored before 2026-12-03',
          },
        ),
      ),
    ),
    refundedUc: Microcredits('refunded so far; never more than capturedUc'),
    refunds: Type.Array(Type.Ref('Refund'), { description: `oldest first; at most ${REFUNDS_PER_REDEMPTION_MAX}` }),
    captureReceipt: Receipt('the signed capture receipt; null unless captured'),
    allocations: Type.Array(Type.Object({ lotId: Type.String(), amountUc: Microcredits() }), { description: 'one per lot the hold took credit from, in burn-down order' }),
    offer: Type.Optional(
      OfferSold(
        'only in a list asked with `expand=offer` (an owner\'s GET /v1/owner/agents/{agentId}/holds): what was bought, as it was sold; null for a hold taken before mandates (2026-11-24)',
      ),
    ),
  },
  { $id: 'Redemption' },
);

export const BalanceSchema = Type.Object(
  {
    agentId: Type.String(),
    fundedBy: Type.Optional(
      Type.String({
        description:
          "a delegate's balance only: a delegate owns no lots, so this names the root agent of its tree, whose lots fund it; every figure here is that root's pool, shared by the whole tree (what the delegate itself may still spend is its budgets' remainingUc). Absent for a root",
      }),
    ),
    availableUc: Microcredits('spendable now'),
    heldUc: Microcredits('reserved by open holds'),
    capturedUc: Microcredits('ever captured by merchants, before refunds: a refund comes back as a new lot (in grantedUc and refundedUc), so what stays spent is capturedUc − refundedUc'),
    lapsedUc: Microcredits('left in expired lots'),
    grantedUc: Microcredits('ever credited (grants, top-ups and refunds); = available + held + captured + lapsed'),
    refundedUc: Microcredits('of grantedUc, what merchants refunded'),
  },
  { $id: 'Balance', description: "an agent's balance; holds past their deadline are reclaimed before it is read" },
);

export const LotSchema = Type.Object(
  {
    id: Type.String(),
    agentId: Type.String(),
    source: Type.String({ enum: ['grant', 'topup', 'refund'] }),
    sourceRef: Nullable(Type.String()),
    priority: Type.Integer({ description: 'lower burns first' }),
    grantedUc: Microcredits(),
    remainingUc: Microcredits(),
    expiresAt: Nullable(UnixSeconds('after this the remainder lapses')),
    createdAt: UnixSeconds('creation'),
    status: Type.String({ enum: ['active', 'expired', 'spent'] }),
  },
  { $id: 'Lot' },
);

/** The shape of an evidence JWS as served: its payload shortened and its signature made up (a real one carries every claim of EvidenceClaims). */
const EXAMPLE_EVIDENCE =
  'eyJhbGciOiJFUzI1NiIsInR5cCI6ImV2aWRlbmNlK2p3dCIsImtpZCI6IkVaV2gwRGQyam9LaVpKSXJLN3pfWkM3YUdvWDdwSXRYUnlabExDdTB0MVkifQ.' +
  'eyJpc3MiOiJodHRwczovL2dhdGV3YXkuZXhhbXBsZSIsImlhdCI6MTc2NDAwMDkwMCwianRpIjoiZXZkX3huaTUzbGh2dXdjMzdxYW9la2VwbmdyNTV1Iiwic3ViIjoiaG9sZF92NWl4NzJ5dWl0ZXZjcmtxcWN2cmxvZGIzZSJ9.' +
  'wq2Yv0m3kL8pQ0rXH7c1S9dJf4tA6uB2nE5gZ0oI3yK7vW1xR8sT4qF6hD9jC2bN5mP0aL3eG7iU1zY8kO4w';

/** A decoded evidence payload: a captured hold of a merchant offer, partly refunded. */
const EXAMPLE_CLAIMS = {
  iss: 'https://gateway.example',
  iat: 1764000900,
  jti: 'evd_xni53lhvuwc37qaoekepngr55u',
  sub: 'hold_v5ix72yuitevcrkqqcvrlodb3e',
  mandate: {
    version: 2,
    hash: 'SVoNv6SWozSa7lW9GGSADByQnuYmjkXLAkaoKK3uLJM',
    canonical:
      '{"agentId":"agt_fotz7e73xpq5zi3mljkqnzjrea","alertThresholds":[80,100],"allowedCategories":["books"],"allowedServices":["*"],"approvalAboveUc":null,"budgets":[{"id":"daily","limitUc":"20000000","period":"day"}],"caps":{"perHoldUc":null,"perPeriodUc":null,"periodS":86400},"createdAt":1763990000,"merchants":{"allow":null,"deny":[]},"notAfter":null,"notBefore":null,"timeZone":"UTC","version":2}',
  },
  ancestorMandates: [],
  approval: null,
  offer: { id: 'off_en2zs5ifcdsiw5tfsxvjpzbcd2', merchantId: 'mer_lxnpookhtuwhtbmmmiv2iakwti', merchantDomain: 'shop.example.com', name: 'One e-book', category: 'books', priceUc: '2000000', holdLifetimeS: 900, refundWindowS: 2592000, updatedAt: 1763900000 },
  voucher: 'eyJhbGciOiJFUzI1NiIsInR5cCI6InZvdWNoZXIrand0Iiwia2lkIjoi…',
  receipts: ['eyJhbGciOiJFUzI1NiIsInR5cCI6InJlY2VpcHQrand0Iiwia2lkIjoi…', 'eyJhbGciOiJFUzI1NiIsInR5cCI6InJlY2VpcHQrand0Iiwia2lkIjoi…'],
  history: [
    { event: 'held', at: 1764000000, amountUc: '2000000', operationId: 'hold_v5ix72yuitevcrkqqcvrlodb3e' },
    { event: 'captured', at: 1764000300, amountUc: '2000000', releasedUc: '0', operationId: 'hold_v5ix72yuitevcrkqqcvrlodb3e:capture' },
    { event: 'refunded', at: 1764000600, amountUc: '500000', operationId: 'rfd_udehu3lq6xxmvoukljoeo277zm' },
  ],
  redemption: {
    id: 'hold_v5ix72yuitevcrkqqcvrlodb3e',
    agentId: 'agt_fotz7e73xpq5zi3mljkqnzjrea',
    acceptorId: 'mer_lxnpookhtuwhtbmmmiv2iakwti',
    offerId: 'off_en2zs5ifcdsiw5tfsxvjpzbcd2',
    category: 'books',
    amountUc: '2000000',
    state: 'captured',
    expiresAt: 1764000900,
    createdAt: 1764000000,
    capturedUc: '2000000',
    releasedUc: '0',
    capturedAt: 1764000300,
    releasedAt: null,
    revocation: null,
    refundedUc: '500000',
    refunds: [{ id: 'rfd_udehu3lq6xxmvoukljoeo277zm', redemptionId: 'hold_v5ix72yuitevcrkqqcvrlodb3e', amountUc: '500000', reason: 'delivered late', createdAt: 1764000600, receipt: 'eyJhbGciOiJFUzI1NiIsInR5cCI6InJlY2VpcHQrand0Iiwia2lkIjoi…' }],
    captureReceipt: 'eyJhbGciOiJFUzI1NiIsInR5cCI6InJlY2VpcHQrand0Iiwia2lkIjoi…',
    allocations: [{ lotId: 'lot_7ijv6pnofx5sfr2dbobcctlatz', amountUc: '2000000' }],
  },
};

export const EvidenceSchema = Type.Object(
  {
    evidence: Type.String({
      description:
        'a compact ES256 JWS, header `typ` `evidence+jwt`, signed with a key of /.well-known/jwks.json; its payload is an `EvidenceClaims` ' +
        '(verify it, e.g. with jose `jwtVerify(evidence, createRemoteJWKSet(jwksUrl), { issuer, typ: "evidence+jwt" })`, before reading it)',
    }),
  },
  { $id: 'Evidence', description: "a redemption's signed evidence: see docs/decisions.md \"Evidence for a dispute\"", examples: [{ evidence: EXAMPLE_EVIDENCE }] },
);

const HistoryEntrySchema = Type.Object(
  {
    event: Type.String({ enum: ['held', 'captured', 'released', 'expired', 'refunded'] }),
    at: UnixSeconds('when it was journaled; for an expiry, when its credit was reclaimed (at or after expiresAt)'),
    amountUc: Microcredits('held, captured, given back to the agent (release, expiry) or refunded'),
    releasedUc: Type.Optional(Microcredits('captures only: what went back to the agent in the same operation')),
    operationId: Type.String({ description: 'the journal operation: the hold id, `<hold>:capture|release|expire`, or the refund id' }),
  },
  { additionalProperties: false },
);

export const EvidenceClaimsSchema = Type.Object(
  {
    iss: Type.String({ description: 'the gateway base URL' }),
    iat: UnixSeconds('signing'),
    jti: Type.String({ description: 'evidence id (`evd_…`)' }),
    sub: Type.String({ description: 'the redemption (hold) id' }),
    mandate: Nullable(
      Type.Object(
        {
          version: Type.Integer({ minimum: 1 }),
          hash: Type.String({ description: 'base64url SHA-256 of `canonical`: the `mandate` claim of the voucher and of every receipt' }),
          canonical: Type.String({ description: 'the RFC 8785 canonical JSON of the mandate version, byte for byte' }),
        },
        { additionalProperties: false, description: 'the mandate version in force when the hold was taken; null only for a hold older than mandates' },
      ),
    ),
    ancestorMandates: Nullable(
      Type.Array(
        Type.Object(
          {
            agentId: Type.String({ description: 'the ancestor (agt_…)' }),
            version: Type.Integer({ minimum: 1 }),
            hash: Type.String({ description: 'base64url SHA-256 of `canonical`' }),
            canonical: Type.String({ description: 'the RFC 8785 canonical JSON of the mandate version, byte for byte' }),
          },
          { additionalProperties: false },
        ),
        {
          description:
            "for a delegate's hold, the mandate version of each of its ancestors in force when the hold was taken, root first: every one of them bound the purchase " +
            "(an ancestor still on the default rules, version 0, has no document and is left out); [] for a root agent's hold; null for a delegate's hold taken before 2026-12-04, when they were not recorded",
        },
      ),
    ),
    approval: Nullable(
      Type.Object(
        {
          id: Type.String({ description: 'the purchase approval (`pur_…`)' }),
          requestedAt: UnixSeconds("the agent's purchase asked for it"),
          approvedAt: UnixSeconds('the owner approved it'),
          approvedBy: Type.String({ description: 'the owner who approved it' }),
          amountUc: Microcredits('the amount the owner approved'),
          offerId: Type.String({ description: 'the offer (for an execution, the service) the owner approved' }),
        },
        {
          additionalProperties: false,
          description:
            "the owner's approval of a purchase above the mandate's `approvalAboveUc`, under which the hold was taken: such a purchase is within the rules " +
            'because the owner approved it; null when the purchase needed no approval (at or below the threshold, or none set)',
        },
      ),
    ),
    offer: OfferSold('what was bought, as it was sold'),
    voucher: Nullable(
      Type.String({
        description: 'what the hold was bought with, as issued: the voucher (compact JWS, typ `voucher+jwt`), or for an x402 payment its attestation (typ `x402-credit+jwt`); null for an execution of a built-in service',
      }),
    ),
    receipts: Type.Array(Type.String(), { description: 'every signed receipt (typ `receipt+jwt`), in order: the capture, then each refund' }),
    history: Type.Array(HistoryEntrySchema, { description: "the hold's movements, from its journal entries, in the order written" }),
    redemption: Type.Ref('Redemption'),
  },
  { $id: 'EvidenceClaims', additionalProperties: false, description: "the payload of a redemption's evidence (typ `evidence+jwt`)", examples: [EXAMPLE_CLAIMS] },
);

export const LEDGER_SCHEMAS = [RefundSchema, RedemptionSchema, BalanceSchema, LotSchema, EvidenceSchema, EvidenceClaimsSchema];
