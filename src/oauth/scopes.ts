// The two scopes we issue and which identity provider grants each: the human owner provider gives an
// owner token (O, svc:owner); the agent provider gives an agent token (A, svc:agent).
import { SCOPE_AGENT, SCOPE_OWNER } from '../platform/access-tokens.ts';

export const SCOPES = [SCOPE_AGENT, SCOPE_OWNER] as const;
export type Scope = (typeof SCOPES)[number];

export const IDENTITY_PROVIDERS = ['human', 'agent'] as const;
export type IdentityProviderChoice = (typeof IDENTITY_PROVIDERS)[number];

export const SCOPE_FOR_PROVIDER: Record<IdentityProviderChoice, Scope> = { human: SCOPE_OWNER, agent: SCOPE_AGENT };

/** A space-separated scope list made only of our scopes, as a set; undefined when it names anything else. */
export function parseScope(text: string): Set<Scope> | undefined {
  const names = text.split(' ');
  if (names.some((name) => !(SCOPES as readonly string[]).includes(name))) return undefined;
  return new Set(names as Scope[]);
}
