// Agent management's operations, for every face: register and update agents, unfreeze them (freezing, which
// can reach their holds, is the kill switch's: src/revocations), set their profiles and avatars. Each input is
// the path's agent id plus the body's members.
import { Type, type Static, type TOptional } from '@sinclair/typebox';
import { memberRefusal } from '../platform/errors.ts';
import { ALERT_THRESHOLDS_DEFAULT, CAP_PERIOD_S_DEFAULT, defaultExtendedRules, NO_MERCHANT_RULES, refuseAllowedAndDenied, TIME_ZONE_DEFAULT, type MandateRules } from '../policy/mandate.ts';
import { MandateRulesProperties, MerchantRulesInput } from './schemas.ts';
import { AgentIdParams, CategoryOrAny, DisplayName, idOf, Microcredits, Nullable, ResourceId, VersionNumber } from '../platform/schemas.ts';
import { inputOf, type SingleStepOperation } from '../platform/operations.ts';
import { AVATAR_BYTES_MAX, AVATAR_TYPES, PROFILE_PRESETS, type Agent, type AgentProfile, type AgentService, type AvatarType, type MandateView } from './service.ts';

const Name = DisplayName();
const ServiceList = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 20 });
const CategoryList = Type.Array(CategoryOrAny, { maxItems: 100 });
const InboxList = Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 50 });
const CapsInput = Type.Object(
  {
    perHoldUc: Type.Optional(Nullable(Microcredits())),
    perPeriodUc: Type.Optional(Nullable(Microcredits())),
    periodS: Type.Optional(Type.Integer({ minimum: 60, maximum: 31_536_000 })),
  },
  { additionalProperties: false },
);

export const AgentCreate = Type.Object(
  {
    name: Name,
    identity: Type.Object(
      {
        issuer: Type.String({ minLength: 1, maxLength: 500, description: 'must be the configured agent identity provider' }),
        subject: Type.String({ minLength: 1, maxLength: 200 }),
      },
      { additionalProperties: false },
    ),
    allowedServices: Type.Optional(ServiceList),
    allowedCategories: Type.Optional(CategoryList),
    inboxAllowlist: Type.Optional(InboxList),
    caps: Type.Optional(CapsInput),
  },
  {
    additionalProperties: false,
    examples: [{ name: 'Research assistant', identity: { issuer: 'https://agents.example', subject: 'agent-42' }, allowedCategories: ['books'], caps: { perHoldUc: '5000000' } }],
  },
);

export const AgentPatch = Type.Object(
  {
    name: Type.Optional(Name),
    allowedServices: Type.Optional(ServiceList),
    allowedCategories: Type.Optional(CategoryList),
    inboxAllowlist: Type.Optional(InboxList),
    caps: Type.Optional(CapsInput),
  },
  { examples: [{ allowedServices: ['github-public'], caps: { perPeriodUc: '50000000', periodS: 86400 } }], additionalProperties: false, minProperties: 1 },
);

export const ProfileInput = Type.Object(
  {
    name: Name,
    preset: Type.String({ enum: [...PROFILE_PRESETS] }),
    color: Type.String({ pattern: '^#[0-9A-Fa-f]{6}$', description: 'hex colour #rrggbb (stored lower-case)' }),
  },
  { examples: [{ name: 'Research assistant', preset: 'robot', color: '#3366ff' }], additionalProperties: false },
);

export const UploadStart = Type.Object(
  {
    contentType: Type.String({ enum: [...AVATAR_TYPES] }),
    sizeBytes: Type.Integer({ minimum: 1, maximum: AVATAR_BYTES_MAX, description: `at most ${AVATAR_BYTES_MAX} bytes` }),
  },
  { examples: [{ contentType: 'image/png', sizeBytes: 20480 }], additionalProperties: false },
);

export const Finalize = Type.Object({ uploadId: ResourceId, storageId: ResourceId }, { examples: [{ uploadId: 'upl_aprnjr6lx4kwu2ltysuzpaofqx', storageId: 'sto_2xjthgoazlfacpfjysenxsmpuc' }], additionalProperties: false });


/** PUT …/mandate: the whole mandate; a member left out takes its default (GET's rules, without agentId, version, createdAt, hash and usage, PUT back changed). */
export const MandateInput = Type.Object(
  {
    ...(Object.fromEntries(Object.entries(MandateRulesProperties).map(([name, schema]) => [name, Type.Optional(schema)])) as {
      [K in keyof typeof MandateRulesProperties]: TOptional<(typeof MandateRulesProperties)[K]>;
    }),
    merchants: Type.Optional(MerchantRulesInput),
  },
  {
    additionalProperties: false,
    description:
      'Replaces the mandate (a new version; the mandate in force, normalised, writes none and is answered as it stands). Defaults of a member left out: allowedServices and allowedCategories ["*"], caps ' +
      `none (periodS ${CAP_PERIOD_S_DEFAULT}), no budgets, no merchant rules, no approval threshold, no validity window, timeZone ` +
      `${TIME_ZONE_DEFAULT}, alertThresholds [${ALERT_THRESHOLDS_DEFAULT.join(', ')}].`,
    examples: [
      {
        allowedCategories: ['books', 'data'],
        budgets: [
          { id: 'daily', limitUc: '20000000', period: 'day' },
          { id: 'books-monthly', limitUc: '300000000', period: 'month', category: 'books' },
        ],
        merchants: { allow: null, deny: ['spam-shop.example.com'] },
        approvalAboveUc: '5000000',
        timeZone: 'Europe/Paris',
      },
    ],
  },
);
export type MandateInput = Static<typeof MandateInput>;

/** The rules a PUT body states, with the defaults of what it leaves out. */
export function mandateRulesOf(input: MandateInput): MandateRules {
  refuseAllowedAndDenied(input.merchants);
  return {
    ...defaultExtendedRules(),
    allowedServices: ['*'],
    allowedCategories: ['*'],
    ...input,
    caps: input.caps ?? { perHoldUc: null, perPeriodUc: null, periodS: CAP_PERIOD_S_DEFAULT },
    merchants: { ...NO_MERCHANT_RULES, ...input.merchants },
  } as MandateRules;
}

const RegisterAgentInput = inputOf(Type.Object({}), AgentCreate);
// `ifVersion`: the version the caller last read, which must still be in force (HTTP's If-Match, MCP's `ifVersion`);
// not a body member, so a PUT of GET's rules never carries it by accident.
const SetMandateInput = inputOf(
  AgentIdParams,
  Type.Object({
    ...MandateInput.properties,
    ifVersion: Type.Optional(
      VersionNumber('the mandate version this change is made on (the `version` get_mandate showed); another version in force refuses it with 412 precondition_failed and `currentVersion`'),
    ),
  }),
);
// `ifVersion`, as for the mandate's PUT: allowances and caps are mandate rules, so a PATCH is made only on the
// mandate version the caller read when it names one (found from outside: a stale If-Match was ignored).
const UpdateAgentInput = inputOf(
  AgentIdParams,
  Type.Object({
    ...AgentPatch.properties,
    ifVersion: Type.Optional(
      VersionNumber('the mandate version this change is made on (the `version` get_mandate showed); another version in force refuses it with 412 precondition_failed and `currentVersion`'),
    ),
  }),
);
/** The members a PATCH may change (its body's), one of which it must name. */
const PATCH_MEMBERS = Object.keys(AgentPatch.properties);
const AgentIdInput = inputOf(AgentIdParams);
const SetProfileInput = inputOf(AgentIdParams, ProfileInput);
const StartUploadInput = inputOf(AgentIdParams, UploadStart);
const FinalizeInput = inputOf(AgentIdParams, Finalize);
/** The avatar's raw bytes (an image body over HTTP; no other face takes bytes). */
const UploadAvatarBytesInput = Type.Object(
  {
    id: idOf('agent (agt_…)'),
    uploadId: idOf('avatar upload (upl_…)'),
    contentType: Type.String({ description: 'the Content-Type the bytes were sent with' }),
    bytes: Type.Unsafe<Uint8Array>({ description: 'the image bytes' }),
  },
  { additionalProperties: false },
);

type AvatarUploadTicket = Awaited<ReturnType<AgentService['startAvatarUpload']>>;

export interface AgentOperations {
  registerAgent: SingleStepOperation<Static<typeof RegisterAgentInput>, Agent>;
  updateAgent: SingleStepOperation<Static<typeof UpdateAgentInput>, Agent>;
  unfreezeAgent: SingleStepOperation<Static<typeof AgentIdInput>, Agent>;
  setAgentProfile: SingleStepOperation<Static<typeof SetProfileInput>, AgentProfile>;
  startAvatarUpload: SingleStepOperation<Static<typeof StartUploadInput>, AvatarUploadTicket>;
  finalizeAvatarUpload: SingleStepOperation<Static<typeof FinalizeInput>, AgentProfile>;
  uploadAvatarBytes: SingleStepOperation<Static<typeof UploadAvatarBytesInput>, void>;
  setMandate: SingleStepOperation<Static<typeof SetMandateInput>, MandateView>;
}

/** Owner operations: the principal is a human or owner credential; the acting-for rule (acting.ts) finds its agent. */
export function agentOperations(agents: AgentService): AgentOperations {
  return {
    registerAgent: {
      name: 'registerAgent',
      input: RegisterAgentInput,
      idempotency: { key: 'required' },
      run: (tx, { principal, input }) => agents.registerAgent(tx, principal.ownerId!, input),
    },
    updateAgent: {
      name: 'updateAgent',
      input: UpdateAgentInput,
      idempotency: { key: 'optional' },
      // The body's minProperties, which the whole input (its id besides) cannot say: a call naming nothing to change is
      // refused on every face, before its key (found from outside: MCP's update_agent with its id alone answered 200).
      check: ({ input }) => {
        if (PATCH_MEMBERS.some((member) => (input as Record<string, unknown>)[member] !== undefined)) return undefined;
        throw memberRefusal('', `names nothing to change: name at least one of ${PATCH_MEMBERS.join(', ')}`);
      },
      run: (tx, { principal, input: { id, ifVersion, ...patch } }) => agents.updateAgent(tx, principal, id, patch, ifVersion),
    },
    unfreezeAgent: {
      name: 'unfreezeAgent',
      input: AgentIdInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input }) => agents.setStatus(tx, principal, input.id, 'active'),
    },
    setAgentProfile: {
      name: 'setAgentProfile',
      input: SetProfileInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input: { id, ...profile } }) => agents.setProfile(tx, principal, id, profile),
    },
    startAvatarUpload: {
      name: 'startAvatarUpload',
      input: StartUploadInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input }) => agents.startAvatarUpload(tx, principal, input.id, input.contentType as AvatarType, input.sizeBytes),
    },
    finalizeAvatarUpload: {
      name: 'finalizeAvatarUpload',
      input: FinalizeInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal, input }) => agents.finalizeAvatar(tx, principal, input.id, input.uploadId, input.storageId),
    },
    setMandate: {
      name: 'setMandate',
      input: SetMandateInput,
      idempotency: { key: 'required' },
      // One mandate spelled otherwise (`europe/paris`, a category twice, an amount's leading zeros) is one request,
      // as it is one document once stored.
      readAs: ({ id, ifVersion, ...rules }) => {
        try {
          return { id, ifVersion, stored: agents.rulesAsStored(mandateRulesOf(rules)) };
        } catch {
          return { id, ifVersion, ...rules }; // rules it refuses: read as sent
        }
      },
      run: async (tx, { principal, input: { id, ifVersion, ...rules } }) => agents.mandateView(tx, await agents.setMandate(tx, principal, id, mandateRulesOf(rules), ifVersion)),
    },
    uploadAvatarBytes: {
      name: 'uploadAvatarBytes',
      input: UploadAvatarBytesInput,
      // A PUT of the same bytes is idempotent by itself; a key would make us store a fingerprint of an image.
      idempotency: { key: 'none' },
      run: (tx, { principal, input }) => agents.receiveAvatarBytes(tx, principal, input.id, input.uploadId, input.contentType, input.bytes),
    },
  };
}
