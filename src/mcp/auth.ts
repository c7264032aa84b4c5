// The MCP SDK carries the caller as its `AuthInfo`; the gateway's principal rides in `extra`. The HTTP
// face verifies the credential with the one credential verifier before the SDK sees the request, so
// this file only translates, and never verifies anything itself.
import type { AuthInfo } from '@modelcontextprotocol/server';
import type { Principal } from '../platform/principal.ts';

export function authInfoFor(principal: Principal, token: string): AuthInfo {
  return { token, clientId: principal.id, scopes: [...principal.scopes], extra: { principal } };
}

export function principalFrom(authInfo: AuthInfo | undefined): Principal {
  const principal = authInfo?.extra?.principal as Principal | undefined;
  if (!principal) throw new Error('the MCP handler was called without a verified principal');
  return principal;
}
