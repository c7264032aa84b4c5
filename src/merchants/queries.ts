// The merchants' reads, for every face: the owner's merchants, one of them, and its API keys (metadata
// only). Only the owner reads them; another owner's merchant is 404, as if it did not exist.
import { Type } from '@sinclair/typebox';
import type { Query } from '../platform/queries.ts';
import { MerchantIdParams, PageQuery, type Page } from '../platform/schemas.ts';
import type { ApiKeyMetadata, Merchant, MerchantService } from './service.ts';
import type { MerchantRow } from './store.ts';

export const MerchantInput = Type.Object({ id: MerchantIdParams.properties.id }, { additionalProperties: false });
export const ApiKeysInput = Type.Object({ id: MerchantIdParams.properties.id, ...PageQuery.properties }, { additionalProperties: false });

export interface MerchantQueries {
  listMerchants: Query<Page, { merchants: Merchant[]; hasMore: boolean }>;
  getMerchant: Query<{ id: string }, { merchant: Merchant }, MerchantRow>;
  listMerchantApiKeys: Query<{ id: string } & Page, { apiKeys: ApiKeyMetadata[]; hasMore: boolean }, MerchantRow>;
}

export function merchantQueries(merchants: MerchantService): MerchantQueries {
  return {
    listMerchants: {
      name: 'listMerchants',
      input: PageQuery,
      output: Type.Object({ merchants: Type.Array(Type.Ref('Merchant')), hasMore: Type.Boolean() }),
      read: (db, { principal, input }) => merchants.list(db, principal.ownerId!, input),
    },
    getMerchant: {
      name: 'getMerchant',
      input: MerchantInput,
      output: Type.Object({ merchant: Type.Ref('Merchant') }),
      access: (db, { principal, input }) => merchants.owned(db, principal.ownerId!, input.id),
      read: async (db, _call, row) => ({ merchant: await merchants.toMerchant(db, row) }),
    },
    listMerchantApiKeys: {
      name: 'listMerchantApiKeys',
      input: ApiKeysInput,
      output: Type.Object({ apiKeys: Type.Array(Type.Ref('ApiKeyMetadata')), hasMore: Type.Boolean() }),
      access: (db, { principal, input }) => merchants.owned(db, principal.ownerId!, input.id),
      read: (db, { input }) => merchants.listApiKeys(db, input.id, input),
    },
  };
}
