// The one credential verifier. Every route and the MCP endpoint resolve `Authorization: Bearer …` to
// exactly one principal here:
//   H  human session JWT from the human identity provider (verified email required);
//   A  agent identity JWT from the agent identity provider, or our `at+jwt` with scope svc:agent;
//   O  our `at+jwt` with scope svc:owner;
//   M  a merchant API key (`acg_mk_…`).
// Tokens are routed by their (unverified) `iss` only to pick the key set; everything is then verified
// in full: algorithm allow-list, signature, iss, aud, exp/nbf (30 s skew), typ. A JWT verified once is
// not verified again while its verification may be reused (verified-tokens.ts); what can be revoked (an
// identity's agent and its owner's email, a merchant key, the access-token deny-list) is read from the
// database in reads coalesced with concurrent requests' and kept for a lifetime that every revocation waits
// out before it answers (platform/credential-facts.ts), so a revocation holds from the next request.
//
// The verifier reads agents and merchant keys through the features that own them (`AgentLookup`,
// `ApiKeyLookup`) and never changes them; it owns only the owners it creates from human sessions.
import { decodeJwt, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import type { Queryable } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { ACCESS_TOKEN_LIFETIME_S, ACCESS_TOKEN_TYP, bearerChallenge, resourceUri, SCOPE_AGENT, SCOPE_OWNER, type Resource } from '../platform/access-tokens.ts';
import type { FactReads } from '../platform/credential-facts.ts';
import type { Principal } from '../platform/principal.ts';
import { isCanonicalCompactJws } from '../platform/signing.ts';
import { parseApiKey, secretMatches, API_KEY_PREFIX } from './api-keys.ts';
import { EXTERNAL_ALGORITHMS, type IdentityProvider, type IdentityProviderKind } from './issuers.ts';
import * as store from './store.ts';
import { VerifiedTokens } from './verified-tokens.ts';

const CLOCK_SKEW_S = 30;
/** `typ` values an identity provider's session token may carry: plain JWTs only, never ours. */
const EXTERNAL_TYPS = new Set([undefined, 'jwt', 'application/jwt']);
/** The MCP endpoint takes a human session or our access token whose `aud` is the MCP resource (spec: "H, or A"). */
const NOT_FOR_MCP = 'the MCP endpoint accepts a human session or an OAuth access token issued for this MCP resource';

/** Where the verifier looks up a merchant API key: the merchants feature, which owns the keys. */
export interface ApiKeyLookup {
  apiKeysForVerification(keyIds: readonly string[]): Promise<CredentialApiKey[]>;
}

/** A merchant API key as the verifier reads it. */
export interface CredentialApiKey {
  id: string;
  merchant_id: string;
  owner_id: string;
  scopes: string[];
  secret_hash: string;
  revoked_at_s: bigint | null;
}

/** A registered agent as the verifier reads it: its owner and its owner's verified email. */
export interface CredentialAgent {
  id: string;
  owner_id: string;
  owner_email: string;
  owner_email_verified: boolean;
}

/** Where the verifier reads agents: agent management, which owns them. */
/** The authorization server's deny-list of our access tokens (revoked when their code was replayed). */
export interface AccessTokenRevocations {
  revokedAccessTokenIds(db: Queryable, jtis: readonly string[]): Promise<string[]>;
}

export interface AgentLookup {
  credentialAgents(db: Queryable, agentIds: readonly string[]): Promise<CredentialAgent[]>;
  /** Each identity's registration by the owner whose (lower-cased) email it names. */
  credentialAgentsByIdentity(db: Queryable, identities: ReadonlyArray<{ issuer: string; subject: string; ownerEmail: string }>): Promise<Array<CredentialAgent & AgentIdentity>>;
  identityRegistered(db: Queryable, identity: { issuer: string; subject: string }): Promise<boolean>;
}

/** The identity an agent is registered under. */
export interface AgentIdentity {
  identity_issuer: string | null;
  identity_subject: string | null;
}

const BEARER = /^Bearer +([^\s]+) *$/i;

export class CredentialVerifier {
  private readonly verified: VerifiedTokens;
  /** The counter of each outcome, labelled once. */
  private readonly outcomes;
  /**
   * What can be revoked (the credential's agent, key or deny-listed token), read in statements coalesced with
   * concurrent requests' and kept for the gateway's credential-fact lifetime (platform/credential-facts.ts).
   */
  private readonly reads: {
    agentById: FactReads<string, CredentialAgent>;
    agentByIdentity: FactReads<{ issuer: string; subject: string; ownerEmail: string }, CredentialAgent>;
    apiKey: FactReads<string, CredentialApiKey>;
    revoked: FactReads<string, true>;
  };

  constructor(
    private readonly gateway: Gateway,
    private readonly providers: Partial<Record<IdentityProviderKind, IdentityProvider>>,
    private readonly apiKeyPepper: string | undefined,
    private readonly apiKeys: ApiKeyLookup,
    private readonly agents: AgentLookup,
    private readonly revocations: AccessTokenRevocations,
  ) {
    this.verified = new VerifiedTokens(gateway.clock);
    const counter = gateway.metrics.tokenVerifications;
    this.outcomes = { reused: counter.labels({ outcome: 'reused' }), verified: counter.labels({ outcome: 'verified' }) };
    const { db, credentials } = gateway;
    const identityId = (i: { issuer: string; subject: string; ownerEmail: string }) => `${i.issuer} ${i.subject} ${i.ownerEmail}`;
    const limits = { inFlightMax: 2, batchMax: 256, gatherOneTurn: db.kind === 'pglite' };
    this.reads = {
      agentById: credentials.reads(async (ids) => new Map((await agents.credentialAgents(db, ids)).map((row) => [row.id, row])), (id) => id, { kind: 'agent', limits }),
      agentByIdentity: credentials.reads<{ issuer: string; subject: string; ownerEmail: string }, CredentialAgent>(
        async (identities) =>
          new Map<string, CredentialAgent>(
            (await agents.credentialAgentsByIdentity(db, identities)).map((row) => [identityId({ issuer: row.identity_issuer!, subject: row.identity_subject!, ownerEmail: row.owner_email }), row]),
          ),
        identityId,
        { kind: 'agent_identity', limits },
      ),
      apiKey: credentials.reads(async (ids) => new Map((await apiKeys.apiKeysForVerification(ids)).map((row) => [row.id, row])), (id) => id, { kind: 'api_key', limits }),
      // A token not on the deny-list is the fact kept: denying one is a revocation, which waits it out.
      revoked: credentials.reads(async (jtis) => new Map((await revocations.revokedAccessTokenIds(db, jtis)).map((jti) => [jti, true as const])), (jti) => jti, {
        kind: 'access_token_denied',
        keepMisses: true,
        limits,
      }),
    };
  }

  provider(kind: IdentityProviderKind): IdentityProvider | undefined {
    return this.providers[kind];
  }

  /**
   * 401 with the RFC 6750/9728 challenge; `error="invalid_token"` only when a token was presented. On the MCP
   * resource it names the scopes its tokens carry, either of which will do (MCP authorization 2025-11-25: servers
   * SHOULD include `scope`; the same list as its metadata's `scopes_supported`).
   */
  unauthorized(resource: Resource, detail: string, tokenPresented: boolean): ApiError {
    const challenge = bearerChallenge(
      this.gateway.config.baseUrl,
      resource,
      tokenPresented ? { error: 'invalid_token', description: detail } : undefined,
      resource === 'mcp' ? `${SCOPE_AGENT} ${SCOPE_OWNER}` : undefined,
    );
    return new ApiError('unauthorized', { detail, headers: { 'www-authenticate': challenge } });
  }

  async authenticate(authorization: string | undefined, resource: Resource): Promise<Principal> {
    if (!authorization) throw this.unauthorized(resource, 'send a credential as Authorization: Bearer <token>', false);
    const match = BEARER.exec(authorization);
    // Another scheme, or Bearer without a token, carries no credential of ours: the challenge has no error code
    // (RFC 6750 §3.1: "attempted using an unsupported authentication method"; found from outside).
    if (!match) throw this.unauthorized(resource, 'the Authorization header must be "Bearer <token>"', false);
    const token = match[1]!;
    if (token.startsWith(API_KEY_PREFIX)) {
      if (resource === 'mcp') throw this.unauthorized(resource, NOT_FOR_MCP, true);
      return this.merchantKey(token, resource);
    }

    let issuer: unknown;
    try {
      issuer = decodeJwt(token).iss;
    } catch {
      throw this.unauthorized(resource, 'the bearer token is neither a JWT nor an API key', true);
    }
    const { baseUrl } = this.gateway.config;
    if (issuer === baseUrl) return this.accessToken(token, resource);
    for (const provider of Object.values(this.providers)) {
      if (provider && issuer === provider.issuer) {
        // At /mcp an agent presents our access token issued for the MCP resource, never its identity JWT.
        if (resource === 'mcp' && provider.kind === 'agent') throw this.unauthorized(resource, NOT_FOR_MCP, true);
        return provider.kind === 'human' ? this.humanSession(token, provider, resource) : this.agentIdentity(token, provider, resource);
      }
    }
    if (this.gateway.config.mode === 'live' && (!this.providers.human || !this.providers.agent)) {
      throw new ApiError('provider_configuration_required', { detail: 'identity providers are not configured (ACG_HUMAN_ISSUER, ACG_AGENT_ISSUER)' });
    }
    // An issuer configured with a terminating slash its provider does not write, or without one it does: the issuer is
    // compared exactly (OIDC Core §3.1.3.7), so the refusal names the one difference (found from outside: a setting
    // that worked while every URL lost its slash was refused in silence after).
    const nearly = typeof issuer === 'string' ? Object.values(this.providers).find((provider) => provider && provider.issuer.replace(/\/$/, '') === issuer.replace(/\/$/, '')) : undefined;
    if (nearly) {
      const setting = nearly.kind === 'human' ? 'ACG_HUMAN_ISSUER' : 'ACG_AGENT_ISSUER';
      const detail = `the token's issuer ${String(issuer)} differs from ${setting} (${nearly.issuer}) only by a terminating slash: issuers are compared exactly, so ${setting} must be written as the provider writes it`;
      this.gateway.log.warn({ setting, tokenIssuer: issuer, configuredIssuer: nearly.issuer }, detail);
      throw this.unauthorized(resource, detail, true);
    }
    throw this.unauthorized(resource, 'the token was issued by an issuer this gateway does not trust', true);
  }

  /**
   * The claims of an earlier verification of `token` for the same `check`, when they may be reused (and the
   * key that verified them is still trusted); counts whether the token was verified again.
   */
  private reuse(token: string, check: string, keyTrusted: (kid: string | undefined) => boolean): Readonly<JWTPayload> | undefined {
    const found = this.verified.find(token, check);
    const reused = found !== undefined && keyTrusted(found.kid);
    this.outcomes[reused ? 'reused' : 'verified'].inc();
    return reused ? found.claims : undefined;
  }

  private async verifyExternal(token: string, provider: IdentityProvider, resource: Resource): Promise<Readonly<JWTPayload>> {
    // The provider's key set is jose's to refresh; a reuse is bounded by the cache's age limit instead.
    const check = `${provider.kind} ${provider.issuer} ${provider.audience}`;
    const reused = this.reuse(token, check, () => true);
    if (reused) return reused;
    try {
      if (!isCanonicalCompactJws(token)) throw new Error('the token is not a compact JWS of three base64url segments, each in its one spelling');
      const { payload, protectedHeader } = await jwtVerify(token, provider.keys, {
        algorithms: EXTERNAL_ALGORITHMS,
        issuer: provider.issuer,
        audience: provider.audience,
        clockTolerance: CLOCK_SKEW_S,
        currentDate: new Date(this.gateway.clock.nowMs()),
        requiredClaims: ['sub', 'exp'],
      });
      if (!EXTERNAL_TYPS.has(protectedHeader.typ?.toLowerCase())) throw new Error(`typ ${protectedHeader.typ} is not a session token`);
      this.verified.remember(token, check, { claims: payload, kid: protectedHeader.kid });
      return payload;
    } catch (error) {
      if (error instanceof joseErrors.JWKSTimeout || (error instanceof TypeError && /fetch/i.test(error.message))) {
        throw new ApiError('runtime_unavailable', { detail: `the ${provider.kind} identity provider's keys cannot be fetched` });
      }
      throw this.unauthorized(resource, `invalid ${provider.kind} identity token: ${this.whyRefused(error)}`, true);
    }
  }

  /**
   * Why a token was refused, in words a client's developer reads: an expired token says when it expired (found from
   * outside: jose's `"exp" claim timestamp check failed` was all a client learned); the rest as jose says it.
   */
  private whyRefused(error: unknown): string {
    if (error instanceof joseErrors.JWTExpired && typeof error.payload.exp === 'number') {
      return `it expired at ${new Date(error.payload.exp * 1000).toISOString()} (now ${new Date(this.gateway.clock.nowMs()).toISOString()}); get a new one`;
    }
    return (error as Error).message;
  }

  /** Our access token for `resource`, verified (or its verification reused while its key is still published). */
  private async verifyAccessToken(token: string, resource: Resource): Promise<Readonly<JWTPayload>> {
    const { signing, config } = this.gateway;
    const expected = {
      typ: ACCESS_TOKEN_TYP,
      issuer: config.baseUrl,
      audience: resourceUri(config.baseUrl, resource),
      requiredClaims: ['sub', 'jti'],
      lifetimeMaxS: ACCESS_TOKEN_LIFETIME_S,
    };
    const check = `${expected.typ} ${expected.issuer} ${expected.audience}`;
    const reused = this.reuse(token, check, (kid) => signing.trusts(kid));
    if (reused) return reused;
    try {
      const { payload, kid } = await signing.verify(token, expected);
      this.verified.remember(token, check, { claims: payload, kid });
      return payload;
    } catch (error) {
      throw this.unauthorized(resource, `invalid access token: ${this.whyRefused(error)}`, true);
    }
  }

  private async humanSession(token: string, provider: IdentityProvider, resource: Resource): Promise<Principal> {
    const claims = await this.verifyExternal(token, provider, resource);
    const { db, clock } = this.gateway;
    // An `iat` ahead of this clock (the provider's clock is ahead) counts as now.
    const issuedAtS = typeof claims.iat === 'number' ? Math.min(Math.floor(claims.iat), clock.nowS()) : null;
    if (claims.email_verified !== true || typeof claims.email !== 'string' || !claims.email.includes('@')) {
      // The provider says the owner's email is not verified (any longer): the owner's controls and its agents stop
      // at once, as for a changed email, until a session says it is verified again.
      if (claims.email_verified === false) await this.unverify(provider, claims.sub!, issuedAtS);
      throw new ApiError('owner_claim_required', { detail: 'the human identity has no verified email' });
    }
    const email = claims.email.toLowerCase();
    const found = await store.findOwnerByIdentity(db, provider.issuer, claims.sub!);
    let owner = found;
    if (!owner || owner.email !== email || !owner.email_verified) {
      owner = await store.upsertOwner(db, {
        id: newId('own'),
        issuer: provider.issuer,
        subject: claims.sub!,
        email,
        emailVerified: true,
        issuedAtS,
        nowS: clock.nowS(),
      });
      // A session issued before the one that wrote the email in force carries the email as it was: it changes
      // nothing, and is refused, as an agent identity bound to that old email is.
      if (owner.email !== email || !owner.email_verified) {
        throw new ApiError('owner_claim_required', { detail: "this session was issued before the one that gave the owner's email as it is now; sign in again" });
      }
      // A known owner's email changed: its agents' identity tokens are bound to the new one from now on, on
      // every instance, before this request goes on.
      if (found) await this.gateway.credentials.revoked();
    }
    return { kind: 'human', id: owner.id, ownerId: owner.id, email, scopes: [], credential: 'human_session' };
  }

  /** Records that a known owner's email is no longer verified (unless a newer session said otherwise). */
  private async unverify(provider: IdentityProvider, subject: string, issuedAtS: number | null): Promise<void> {
    const { db, clock } = this.gateway;
    const owner = await store.findOwnerByIdentity(db, provider.issuer, subject);
    if (!owner || !owner.email_verified) return;
    const written = await store.upsertOwner(db, { id: owner.id, issuer: provider.issuer, subject, email: owner.email, emailVerified: false, issuedAtS, nowS: clock.nowS() });
    if (!written.email_verified) await this.gateway.credentials.revoked();
  }

  private async agentIdentity(token: string, provider: IdentityProvider, resource: Resource): Promise<Principal> {
    const claims = await this.verifyExternal(token, provider, resource);
    const identity = { issuer: provider.issuer, subject: claims.sub! };
    const claimName = this.gateway.config.agentOwnerEmailClaim;
    const ownerEmail = claims[claimName];
    // Each owner registers an identity once; the token's owner email claim picks whose registration it is, so another
    // owner's registration of the same subject is never this agent (found from outside: the first one to register
    // a subject took it from every other owner).
    const agent = typeof ownerEmail === 'string' ? await this.reads.agentByIdentity.read({ ...identity, ownerEmail: ownerEmail.toLowerCase() }) : undefined;
    if (!agent || !agent.owner_email_verified) {
      if (!agent && !(await this.agents.identityRegistered(this.gateway.db, identity))) {
        throw new ApiError('agent_not_registered', { detail: 'no agent is registered for this identity; its owner registers it' });
      }
      throw new ApiError('owner_claim_required', {
        detail: `the agent identity's ${claimName} claim does not match the verified email of an owner who registered it`,
      });
    }
    return this.agentPrincipal(agent, 'agent_identity');
  }

  private agentPrincipal(agent: CredentialAgent, credential: string): Principal {
    return { kind: 'agent', id: agent.id, agentId: agent.id, ownerId: agent.owner_id, ownerEmail: agent.owner_email, scopes: [SCOPE_AGENT], credential };
  }

  private async accessToken(token: string, resource: Resource): Promise<Principal> {
    const { db } = this.gateway;
    const claims = await this.verifyAccessToken(token, resource);
    const scope = typeof claims.scope === 'string' ? claims.scope.split(' ') : [];
    if (typeof claims.sub !== 'string') throw this.unauthorized(resource, 'access token without sub', true);
    // A replayed authorization code revokes the tokens of its grant (RFC 6749 §4.1.2), as a revocation does.
    if (typeof claims.jti !== 'string') throw this.unauthorized(resource, 'access token without jti', true);
    if (await this.reads.revoked.read(claims.jti)) throw this.unauthorized(resource, 'the access token has been revoked', true);
    if (scope.includes(SCOPE_AGENT) && claims.actor_type === 'agent') {
      const agent = await this.reads.agentById.read(claims.sub);
      if (!agent) throw new ApiError('agent_not_registered', { detail: 'the agent this token was issued to is no longer registered' });
      if (!agent.owner_email_verified) throw new ApiError('owner_claim_required', { detail: "the agent's owner is no longer a verified human" });
      // The binding its identity was checked on at consent (its owner's verified email) holds for as long as the
      // token does, as an owner's token's email does: an owner whose email changed stops the agent's tokens too.
      if (claims.email !== agent.owner_email) {
        throw new ApiError('owner_claim_required', { detail: "the agent's owner's verified email is not the one this token was issued under; authorize again" });
      }
      return this.agentPrincipal(agent, 'oauth');
    }
    if (scope.includes(SCOPE_OWNER) && claims.actor_type === 'owner') {
      // Owner controls recheck that the verified-human identity behind the token still holds.
      const owner = await store.findOwner(db, claims.sub);
      if (!owner || !owner.email_verified || owner.email !== claims.email) {
        throw new ApiError('owner_claim_required', { detail: "the owner's verified human identity no longer matches this token" });
      }
      return { kind: 'owner', id: owner.id, ownerId: owner.id, email: owner.email, scopes: [SCOPE_OWNER], credential: 'oauth' };
    }
    throw new ApiError('scope_required', { detail: `the access token needs scope ${SCOPE_AGENT} or ${SCOPE_OWNER}` });
  }

  private async merchantKey(token: string, resource: Resource): Promise<Principal> {
    const parsed = parseApiKey(token);
    if (!parsed || !this.apiKeyPepper) throw this.unauthorized(resource, 'the API key is not valid', true);
    const key = await this.reads.apiKey.read(parsed.keyId);
    if (!key || !secretMatches(this.apiKeyPepper, parsed.secret, key.secret_hash)) {
      throw this.unauthorized(resource, 'the API key is not valid', true);
    }
    if (key.revoked_at_s !== null) throw this.unauthorized(resource, 'the API key has been revoked', true);
    return {
      kind: 'merchant',
      id: key.id,
      apiKeyId: key.id,
      merchantId: key.merchant_id,
      ownerId: key.owner_id,
      scopes: key.scopes,
      credential: 'api_key',
    };
  }
}
