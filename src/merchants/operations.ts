// The merchant operations, for every face: register and update merchants, verify their domains, issue and
// revoke API keys. (The webhook's operations are the events feature's.)
import { Type, type Static } from '@sinclair/typebox';
import { API_KEY_SCOPES } from '../identity/api-keys.ts';
import { Category, DisplayName, idOf, MerchantIdParams } from '../platform/schemas.ts';
import { inputOf, type SingleStepOperation, type ResolvedBy } from '../platform/operations.ts';
import { API_KEY_REPLAY_NOTICE, MERCHANT_DOMAIN_CHARS_MAX, type DomainProof, type MerchantService } from './service.ts';

const Name = DisplayName();
const Categories = Type.Array(Category, { minItems: 1, maxItems: 20, description: '1–20 categories (duplicates are dropped)' });

export const MerchantCreate = Type.Object(
  {
    name: Name,
    domain: Type.String({
      minLength: 1,
      maxLength: 1024,
      description: `public DNS hostname (no scheme, port, path, credentials or IP address; at most ${MERCHANT_DOMAIN_CHARS_MAX} characters); IDNA-normalised and lower-cased`,
    }),
    categories: Categories,
  },
  { examples: [{ name: 'Example Books', domain: 'books.example.com', categories: ['books'] }], additionalProperties: false },
);

export const MerchantPatch = Type.Object(
  {
    name: Type.Optional(Name),
    categories: Type.Optional(Categories),
    domain: Type.Optional(Type.String({ description: 'refused with 400: the domain is immutable' })),
  },
  { examples: [{ name: 'Example Books Ltd', categories: ['books', 'audiobooks'] }], additionalProperties: false, minProperties: 1 },
);

export const ApiKeyCreate = Type.Object(
  {
    name: Name,
    scopes: Type.Array(Type.String({ enum: Object.keys(API_KEY_SCOPES) }), {
      minItems: 1,
      maxItems: Object.keys(API_KEY_SCOPES).length,
      description: Object.entries(API_KEY_SCOPES).map(([scope, meaning]) => `\`${scope}\`: ${meaning}`).join('; '),
    }),
  },
  { examples: [{ name: 'checkout server', scopes: ['access:check', 'redemptions:capture', 'redemptions:release'] }], additionalProperties: false },
);

export const KeyParams = Type.Object({ id: idOf('merchant (mer_…)'), keyId: idOf('API key (the keyId shown when it was created)') });

const RegisterMerchantInput = inputOf(Type.Object({}), MerchantCreate);
const UpdateMerchantInput = inputOf(MerchantIdParams, MerchantPatch);
const MerchantIdInput = inputOf(MerchantIdParams);
const CreateApiKeyInput = inputOf(MerchantIdParams, ApiKeyCreate);
const RevokeApiKeyInput = inputOf(KeyParams);

type Result<M extends keyof MerchantService> = ResolvedBy<MerchantService, M>;

export interface MerchantOperations {
  registerMerchant: SingleStepOperation<Static<typeof RegisterMerchantInput>, Result<'register'>>;
  updateMerchant: SingleStepOperation<Static<typeof UpdateMerchantInput>, { merchant: Result<'update'> }>;
  verifyMerchantDomain: SingleStepOperation<Static<typeof MerchantIdInput>, Result<'applyDomainProof'>, undefined, DomainProof>;
  createMerchantApiKey: SingleStepOperation<Static<typeof CreateApiKeyInput>, Result<'createApiKey'>>;
  revokeMerchantApiKey: SingleStepOperation<Static<typeof RevokeApiKeyInput>, Result<'revokeApiKey'>>;
}

/** Owner operations read `ownerId` from the principal (a human or owner credential). */
export function merchantOperations(merchants: MerchantService): MerchantOperations {
  return {
    registerMerchant: {
      name: 'registerMerchant',
      input: RegisterMerchantInput,
      idempotency: { key: 'required' },
      run: (tx, { principal, input }) => merchants.register(tx, principal.ownerId!, input),
    },
    updateMerchant: {
      name: 'updateMerchant',
      input: UpdateMerchantInput,
      idempotency: { key: 'required' },
      run: async (tx, { principal, input: { id, ...patch } }) => ({ merchant: await merchants.update(tx, principal.ownerId!, id, patch) }),
    },
    verifyMerchantDomain: {
      name: 'verifyMerchantDomain',
      input: MerchantIdInput,
      idempotency: { key: 'required' },
      prepare: ({ principal, input }) => merchants.checkDomain(principal.ownerId!, input.id),
      run: (tx, { principal, input }, _checked, proof) => merchants.applyDomainProof(tx, principal.ownerId!, input.id, proof),
    },
    createMerchantApiKey: {
      name: 'createMerchantApiKey',
      input: CreateApiKeyInput,
      idempotency: { key: 'required' },
      secrets: { fields: ['secretKey'], replayNotice: API_KEY_REPLAY_NOTICE },
      run: (tx, { principal, input: { id, ...key } }) => merchants.createApiKey(tx, principal.ownerId!, id, key),
    },
    revokeMerchantApiKey: {
      name: 'revokeMerchantApiKey',
      input: RevokeApiKeyInput,
      idempotency: { key: 'optional' },
      revokesCredentials: true,
      run: (tx, { principal, input }) => merchants.revokeApiKey(tx, principal.ownerId!, input.id, input.keyId),
    },
  };
}
