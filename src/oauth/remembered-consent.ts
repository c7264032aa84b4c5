// Remembered consent, as node-oidc-provider remembers a Grant: a consent given on the consent page is kept,
// bound to the client, the identity that consented (its provider's issuer and subject, and its owner), the request's exact
// scope and resource, and the browser that gave it (the SHA-256 of its binding secret). A later
// authorization request of that client, for that scope and resource, from that browser, is answered with a
// code at once, without the page, until the consent expires (24 h from the click) or its owner revokes it.
// It never widens anything: a request is matched on its exact scope and resource, the code carries the
// scope, actor and subject the person consented to, and the redirect, PKCE and `state` rules of the
// request are checked as strictly as ever before a consent is looked for.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { newId } from '../platform/ids.ts';
import { REMEMBERED_CONSENT_LIFETIME_S, REMEMBERED_CONSENTS_PER_OWNER_MAX } from './limits.ts';
import * as store from './store.ts';

/** The identity that consented, as its provider names it. */
export interface ConsentingIdentity {
  issuer: string;
  subject: string;
}

/** A request as a remembered consent matches it. */
export interface ConsentMatch {
  clientId: string;
  browserHash: string;
  resource: string;
  /** The request's scope as stored with it; null when it named none. */
  requestedScope: string | null;
}

/** What the person consented to: what a code issued by this consent carries. */
export interface ConsentedGrant {
  scope: 'svc:agent' | 'svc:owner';
  actorType: 'agent' | 'owner';
  subject: string;
  /**
   * The owner's verified email the consent was given under (the agent's owner's, for an agent's consent), which
   * its tokens carry and every use rechecks; null in a consent remembered before agents' tokens carried it.
   */
  email: string | null;
  ownerId: string;
}

/** One remembered consent, as its owner reads it. */
export interface OAuthGrant {
  id: string;
  clientId: string;
  clientName: string | null;
  scope: 'svc:agent' | 'svc:owner';
  resource: string;
  /** The agent that consented (agent consent), or null (the owner's own). */
  agentId: string | null;
  identity: ConsentingIdentity;
  createdAt: number;
  expiresAt: number;
}

export interface Revocation {
  clientId: string;
  revokedGrants: number;
  revokedAccessTokens: number;
}

const NONE_NAMED = '';

/** Remembers a consent in the transaction that consumes its request; a consent given again starts anew. */
export async function rememberConsent(tx: Tx, match: ConsentMatch, identity: ConsentingIdentity, granted: ConsentedGrant, nowS: number): Promise<void> {
  await store.purgeExpiredGrants(tx, nowS);
  await store.upsertGrant(tx, {
    id: newId('grt'),
    client_id: match.clientId,
    browser_hash: match.browserHash,
    identity_issuer: identity.issuer,
    identity_subject: identity.subject,
    requested_scope: match.requestedScope ?? NONE_NAMED,
    resource: match.resource,
    scope: granted.scope,
    actor_type: granted.actorType,
    subject: granted.subject,
    email: granted.email,
    owner_id: granted.ownerId,
    nowS,
    expiresAtS: nowS + REMEMBERED_CONSENT_LIFETIME_S,
  });
  await store.forgetOldestGrants(tx, granted.ownerId, REMEMBERED_CONSENTS_PER_OWNER_MAX);
}

/**
 * The consent that answers this request without the page, locked for the transaction that mints its code;
 * undefined when there is none, or when several identities consented to the same request in this browser
 * (only the person can choose between them).
 */
export async function rememberedConsent(tx: Tx, match: ConsentMatch, nowS: number): Promise<ConsentedGrant | undefined> {
  const grants = await store.lockMatchingGrants(tx, { ...match, requestedScope: match.requestedScope ?? NONE_NAMED, nowS });
  if (grants.length !== 1) return undefined;
  const grant = grants[0]!;
  return { scope: grant.scope, actorType: grant.actor_type, subject: grant.subject, email: grant.email, ownerId: grant.owner_id };
}

export async function listRememberedConsents(db: Queryable, ownerId: string, nowS: number): Promise<OAuthGrant[]> {
  const rows = await store.ownerGrants(db, ownerId, nowS);
  return rows.map((row) => ({
    id: row.id,
    clientId: row.client_id,
    clientName: row.client_name,
    scope: row.scope,
    resource: row.resource,
    agentId: row.actor_type === 'agent' ? row.subject : null,
    identity: { issuer: row.identity_issuer, subject: row.identity_subject },
    createdAt: Number(row.created_at_s),
    expiresAt: Number(row.expires_at_s),
  }));
}

/**
 * Forgets every consent the owner, or one of its agents, gave the client (in any browser, for any scope and
 * resource), and takes back what the client still holds (`takeBack`).
 */
export async function revokeRememberedConsents(tx: Tx, ownerId: string, clientId: string, nowS: number): Promise<Revocation> {
  return { clientId, ...(await takeBack(tx, { clientId, ownerId }, nowS)) };
}

/**
 * Takes back what a client holds (`store.ClientHold`): its remembered consents, its codes not yet exchanged, its
 * live access tokens; how many consents and tokens. In this order, so a re-authorization minting a code meanwhile
 * (it holds its consent locked) either finishes first, and its code is deleted here, or finds no consent.
 */
export async function takeBack(tx: Tx, hold: store.ClientHold, nowS: number): Promise<{ revokedGrants: number; revokedAccessTokens: number }> {
  const revokedGrants = await store.deleteGrants(tx, hold);
  await store.deleteUnusedCodes(tx, hold);
  const revokedAccessTokens = await store.revokeLiveTokens(tx, hold, nowS);
  return { revokedGrants, revokedAccessTokens };
}
