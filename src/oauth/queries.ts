// The authorization server's reads, for every face: the consents remembered for an owner and its agents.
import { Type } from '@sinclair/typebox';
import type { Query } from '../platform/queries.ts';
import { listRememberedConsents, type OAuthGrant } from './remembered-consent.ts';

export interface OAuthQueries {
  listOAuthGrants: Query<Record<string, never>, { grants: OAuthGrant[] }>;
}

export function oauthQueries(): OAuthQueries {
  return {
    listOAuthGrants: {
      name: 'listOAuthGrants',
      input: Type.Object({}, { additionalProperties: false }),
      output: Type.Object({ grants: Type.Array(Type.Ref('OAuthGrant')) }),
      read: async (db, { principal, atS }) => ({ grants: await listRememberedConsents(db, principal.ownerId!, atS) }),
    },
  };
}
