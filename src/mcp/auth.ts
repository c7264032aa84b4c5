// The MCP SDK carries the caller as its `AuthInfo`; the gateway's principal rides in `extra`. The HTTP
// face verifies the credential with the one credential verifier before the SDK sees the request, so
// this file only translates, and never verifies anything itself.
import type { AuthInfo } from '@modelcontextprotocol/server';
import type { Principal } from '../platform/principal.ts';

/**
 * What the HTTP face read of the caller before the SDK sees the request: `delegating`, whether an agent's mandate
 * allows delegates (who is listed the delegation tools). Read there, so a database that fails the read is the route's
 * 503 with Retry-After, not the SDK's 500 -32603 from inside its server factory (a database outage answered every /mcp
 * request 500).
 */
export interface CallerFacts {
  delegating: boolean;
}

/**
 * What a tool tells the HTTP face of its exchange: that its answer was an Idempotency-Key replay (the face marks the
 * HTTP response with `Idempotent-Replayed` while its headers are unsent, and the request's log line always).
 */
export interface ExchangeNotes {
  replayed(): void;
}

export function authInfoFor(principal: Principal, token: string, facts: CallerFacts, notes: ExchangeNotes): AuthInfo {
  return { token, clientId: principal.id, scopes: [...principal.scopes], extra: { principal, facts, notes } };
}

export function principalFrom(authInfo: AuthInfo | undefined): Principal {
  const principal = authInfo?.extra?.principal as Principal | undefined;
  if (!principal) throw new Error('the MCP handler was called without a verified principal');
  return principal;
}

export function callerFactsFrom(authInfo: AuthInfo | undefined): CallerFacts {
  const facts = authInfo?.extra?.facts as CallerFacts | undefined;
  if (!facts) throw new Error('the MCP handler was called without the facts read of its caller');
  return facts;
}

export function exchangeNotesFrom(authInfo: AuthInfo | undefined): ExchangeNotes {
  const notes = authInfo?.extra?.notes as ExchangeNotes | undefined;
  if (!notes) throw new Error('the MCP handler was called without its exchange notes');
  return notes;
}
