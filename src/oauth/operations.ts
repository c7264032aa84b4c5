// The authorization server's operations, for every face: an owner revokes a client's remembered consent.
// Only a human session may: which applications may act for a person is that person's decision, not one an
// application's owner token may take (the route's auth says so).
import { Type, type Static } from '@sinclair/typebox';
import type { Clock } from '../platform/clock.ts';
import type { SingleStepOperation } from '../platform/operations.ts';
import { idOf } from '../platform/schemas.ts';
import { revokeRememberedConsents, type Revocation } from './remembered-consent.ts';

export const RevokeOAuthGrantsInput = Type.Object({ clientId: idOf('OAuth client (cli_…)') }, { additionalProperties: false });

export interface OAuthOperations {
  revokeOAuthGrants: SingleStepOperation<Static<typeof RevokeOAuthGrantsInput>, Revocation>;
}

export function oauthOperations(clock: Clock): OAuthOperations {
  return {
    revokeOAuthGrants: {
      name: 'revokeOAuthGrants',
      input: RevokeOAuthGrantsInput,
      idempotency: { key: 'optional' },
      revokesCredentials: true,
      run: (tx, { principal, input }) => revokeRememberedConsents(tx, principal.ownerId!, input.clientId, clock.nowS()),
    },
  };
}
