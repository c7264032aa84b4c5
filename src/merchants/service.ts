// Merchants: registration, settings, DNS TXT proof of the domain over DNS-over-HTTPS, scoped API keys. An
// owner reaches only its own merchants and an API key only its own merchant; anything else is "not found",
// so ids cannot be probed. The webhook is the events feature's: it reads merchants through the
// MerchantDirectory it declares, which this service implements (reach, lockReached).
import type { MerchantDirectory } from '../events/merchant-directory.ts';
import { emitEvent } from '../events/outbox.ts';
import type { WebhookService } from '../events/service.ts';
import { newApiKey, API_KEY_SCOPES } from '../identity/api-keys.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { pageBySeq } from '../platform/db/paging.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { normaliseDomain } from '../platform/hostnames.ts';
import type { Principal } from '../platform/principal.ts';
import { newId, newSecret } from '../platform/ids.ts';
import type { Page } from '../platform/schemas.ts';
import { hasTxtValue, ResolverError, type DohOptions } from './doh.ts';
import * as store from './store.ts';

/** The label under which the owner publishes the challenge, as ACME uses `_acme-challenge`. */
export const VERIFICATION_LABEL = '_acceptor-verify';
const CHALLENGE_PREFIX = 'acg-domain-verification=';
/** A DNS name is at most 253 characters; the verification name adds the label and a dot to the domain. */
export const MERCHANT_DOMAIN_CHARS_MAX = 253 - VERIFICATION_LABEL.length - 1;
export const MERCHANTS_PER_OWNER_MAX = 100;
export const ACTIVE_API_KEYS_PER_MERCHANT_MAX = 100;
export const ACCEPTED_PAYMENT_METHODS: readonly string[] = ['credits'];

export interface Merchant {
  id: string;
  ownerId: string;
  name: string;
  domain: string;
  /** The exact value of the TXT record to publish. */
  verificationChallenge: string;
  verified: boolean;
  acceptedPaymentMethods: string[];
  /** The configured webhook URL; "" while none is configured. */
  webhookUrl: string;
  categories: string[];
  createdAt: number;
  updatedAt: number;
}

export interface DnsRecord {
  type: 'TXT';
  name: string;
  value: string;
}

export interface ApiKeyMetadata {
  keyId: string;
  merchantId: string;
  ownerId: string;
  name: string;
  scopes: string[];
  createdAt: number;
  /** null until revoked. */
  revokedAt: number | null;
}

/** Who is acting: an owner (H or O) on its merchants, or a merchant API key (M) on its own merchant. */
export type MerchantActor = { kind: 'owner'; ownerId: string } | { kind: 'api_key'; merchantId: string };

/** Who acts for a merchant: its owner (H/O), or one of its API keys (M). */
export function merchantActor(principal: Principal): MerchantActor {
  return principal.kind === 'merchant' ? { kind: 'api_key', merchantId: principal.merchantId! } : { kind: 'owner', ownerId: principal.ownerId! };
}

/** What the DNS said, found outside any transaction (see `checkDomain`). */
export type DomainProof = 'already_verified' | 'found' | 'absent';

export const API_KEY_NOTICE =
  'Store this key now: it is shown only in this response (a replay of this request omits it) and cannot be recovered. ' +
  'Send it as "Authorization: Bearer <key>". Revoke it at POST /v1/merchants/{id}/api-keys/{keyId}/revoke.';

/** A replay's notice: the key it leaves out was shown once (SecretMembers). */
export const API_KEY_REPLAY_NOTICE =
  'The key was shown once, in the first answer to this request, and cannot be recovered. If it was lost, revoke it ' +
  '(POST /v1/merchants/{id}/api-keys/{keyId}/revoke) and create another.';

export function dnsRecordOf(row: Pick<store.MerchantRow, 'domain' | 'verification_challenge'>): DnsRecord {
  return { type: 'TXT', name: `${VERIFICATION_LABEL}.${row.domain}`, value: row.verification_challenge };
}

function toApiKey(row: store.ApiKeyRow): ApiKeyMetadata {
  return {
    keyId: row.id,
    merchantId: row.merchant_id,
    ownerId: row.owner_id,
    name: row.name,
    scopes: row.scopes,
    createdAt: Number(row.created_at_s),
    revokedAt: row.revoked_at_s === null ? null : Number(row.revoked_at_s),
  };
}

function uniqueCategories(categories: readonly string[]): string[] {
  return [...new Set(categories)];
}

function notFound(merchantId: string): ApiError {
  return new ApiError('not_found', { detail: `no merchant ${merchantId} among yours` });
}

/** What other features need of a merchant the actor may act for. */
export interface MerchantFacts {
  id: string;
  ownerId: string;
  domain: string;
  categories: string[];
  verified: boolean;
}

function toFacts(row: store.MerchantRow): MerchantFacts {
  return { id: row.id, ownerId: row.owner_id, domain: row.domain, categories: row.categories, verified: row.verified };
}

export interface MerchantServiceDeps {
  webhooks: WebhookService;
  /** Keys the API key hashes; undefined in live mode without ACG_API_KEY_PEPPER (no keys can be issued). */
  apiKeyPepper: string | undefined;
  doh: DohOptions;
}

export class MerchantService implements MerchantDirectory {
  constructor(
    private readonly gateway: Gateway,
    private readonly deps: MerchantServiceDeps,
  ) {}

  /** The merchant as every face shows it (with its webhook URL). */
  async toMerchant(db: Queryable, row: store.MerchantRow): Promise<Merchant> {
    return (await this.toMerchants(db, [row]))[0]!;
  }

  private async toMerchants(db: Queryable, rows: store.MerchantRow[]): Promise<Merchant[]> {
    const urls = await this.deps.webhooks.urlsFor(db, rows.map((row) => row.id));
    return rows.map((row) => ({
      id: row.id,
      ownerId: row.owner_id,
      name: row.name,
      domain: row.domain,
      verificationChallenge: row.verification_challenge,
      verified: row.verified,
      acceptedPaymentMethods: row.accepted_payment_methods,
      webhookUrl: urls.get(row.id) ?? '',
      categories: row.categories,
      createdAt: Number(row.created_at_s),
      updatedAt: Number(row.updated_at_s),
    }));
  }

  /** One of the owner's merchants; another owner's is 404 like a merchant that does not exist. */
  async owned(db: Queryable, ownerId: string, merchantId: string): Promise<store.MerchantRow> {
    return this.found(await store.findOwnedMerchant(db, ownerId, merchantId), merchantId);
  }

  /** One of the owner's merchants, its row locked for the rest of the transaction. */
  private async lockOwned(tx: Tx, ownerId: string, merchantId: string): Promise<store.MerchantRow> {
    return this.found(await store.lockOwnedMerchant(tx, ownerId, merchantId), merchantId);
  }

  private found(row: store.MerchantRow | undefined, merchantId: string): store.MerchantRow {
    if (!row) throw notFound(merchantId);
    return row;
  }

  /**
   * The merchant an actor may act for, read by `read` (plainly, or with a lock); an API key of another
   * merchant gets the same 404 as a stranger, without a read.
   */
  private async reachable(actor: MerchantActor, merchantId: string, read: () => Promise<store.MerchantRow | undefined>): Promise<store.MerchantRow> {
    const row = actor.kind === 'owner' || actor.merchantId === merchantId ? await read() : undefined;
    if (!row || (actor.kind === 'owner' && row.owner_id !== actor.ownerId)) throw notFound(merchantId);
    return row;
  }

  /** What other features need of a merchant the actor may act for (else 404). */
  async facts(db: Queryable, actor: MerchantActor, merchantId: string): Promise<MerchantFacts> {
    return toFacts(await this.reachable(actor, merchantId, () => store.findMerchant(db, merchantId)));
  }

  /**
   * As `facts`, with the row held FOR SHARE until the transaction ends, so a concurrent change of the
   * merchant (a category removed) waits for it (offer creation).
   */
  async shareFacts(tx: Tx, actor: MerchantActor, merchantId: string): Promise<MerchantFacts> {
    return toFacts(await this.reachable(actor, merchantId, () => store.shareMerchant(tx, merchantId)));
  }

  /** MerchantDirectory (events): the merchant the principal may act for, else 404. */
  async reach(db: Queryable, principal: Principal, merchantId: string): Promise<MerchantFacts> {
    return this.facts(db, merchantActor(principal), merchantId);
  }

  /** MerchantDirectory (events): as `reach`, the row locked FOR UPDATE until `tx` ends (configuring the webhook). */
  async lockReached(tx: Tx, principal: Principal, merchantId: string): Promise<MerchantFacts> {
    const actor = merchantActor(principal);
    // An owner locks only its own row: a stranger's request never makes the owner's wait.
    const lock = () => (actor.kind === 'owner' ? store.lockOwnedMerchant(tx, actor.ownerId, merchantId) : store.lockMerchant(tx, merchantId));
    return toFacts(await this.reachable(actor, merchantId, lock));
  }

  async register(tx: Tx, ownerId: string, input: { name: string; domain: string; categories: string[] }): Promise<{ merchant: Merchant; dnsRecord: DnsRecord }> {
    const domain = normaliseDomain(input.domain);
    if (!domain.ok) throw memberRefusal('domain', domain.reason);
    if (domain.domain.length > MERCHANT_DOMAIN_CHARS_MAX) {
      throw memberRefusal('domain', `must be at most ${MERCHANT_DOMAIN_CHARS_MAX} characters, so that ${VERIFICATION_LABEL}.<domain> is a valid DNS name`);
    }
    if ((await store.countOwnedMerchants(tx, ownerId)) >= MERCHANTS_PER_OWNER_MAX) {
      throw new ApiError('conflict', { detail: `an owner may register at most ${MERCHANTS_PER_OWNER_MAX} merchants` });
    }
    const nowS = BigInt(this.gateway.clock.nowS());
    const row = await store.insertMerchant(tx, {
      id: newId('mer'),
      owner_id: ownerId,
      name: input.name,
      domain: domain.domain,
      categories: uniqueCategories(input.categories),
      // 256 random bits: nobody can publish the value before we hand it out.
      verification_challenge: newSecret(CHALLENGE_PREFIX),
      verified: false,
      verified_in_dev_zone: false,
      accepted_payment_methods: [...ACCEPTED_PAYMENT_METHODS],
      created_at_s: nowS,
      updated_at_s: nowS,
    });
    return { merchant: await this.toMerchant(tx, row), dnsRecord: dnsRecordOf(row) };
  }

  /** The owner's merchants, oldest first. */
  async list(db: Queryable, ownerId: string, page: Page): Promise<{ merchants: Merchant[]; hasMore: boolean }> {
    const found = await pageBySeq<store.MerchantRow>(db, 'merchants', 'owner_id', ownerId, page);
    return { merchants: await this.toMerchants(db, found.items), hasMore: found.hasMore };
  }


  async update(tx: Tx, ownerId: string, merchantId: string, patch: { name?: string; categories?: string[]; domain?: unknown }): Promise<Merchant> {
    if (patch.domain !== undefined) {
      throw memberRefusal('domain', 'is immutable; register a new merchant for another domain');
    }
    // The lock makes the category check and the update one step against a concurrent PATCH.
    const row = await this.lockOwned(tx, ownerId, merchantId);
    const categories = patch.categories ? uniqueCategories(patch.categories) : row.categories;
    const removed = row.categories.filter((category) => !categories.includes(category));
    const inUse = await store.categoriesOfActiveOffers(tx, merchantId, removed);
    if (inUse.length > 0) {
      throw new ApiError('category_in_use', {
        detail: `an active offer uses ${inUse.join(', ')}; deactivate those offers before removing the category`,
        extra: { categories: inUse },
      });
    }
    const updated = await store.updateMerchantSettings(tx, {
      id: merchantId,
      name: patch.name ?? row.name,
      categories,
      updated_at_s: BigInt(this.gateway.clock.nowS()),
    });
    return this.toMerchant(tx, updated);
  }

  /**
   * Live mode, at start: takes back the verifications made in dev mode's own DNS zone, where the operator publishes any
   * record, so a live gateway on a database dev mode used sells nothing on their strength; each such merchant proves
   * its domain again through real DNS (its record and challenge are unchanged).
   */
  async unverifyDevZoneProofs(): Promise<Array<{ id: string; domain: string }>> {
    return store.unverifyDevZoneProofs(this.gateway.db, BigInt(this.gateway.clock.nowS()));
  }

  /** The TXT record a merchant must publish, whoever owns it: for the dev DNS zone's operator publish. */
  async dnsRecord(db: Queryable, merchantId: string): Promise<DnsRecord> {
    const row = await store.findMerchant(db, merchantId);
    if (!row) throw new ApiError('not_found', { detail: `no merchant ${merchantId}` });
    return dnsRecordOf(row);
  }

  /**
   * Asks the DNS-over-HTTPS resolver for the merchant's TXT record, outside any transaction (the query may
   * take seconds). A verified merchant is not queried again. A resolver failure is 503 and changes nothing:
   * "could not ask" is never read as "not there".
   */
  async checkDomain(ownerId: string, merchantId: string): Promise<DomainProof> {
    const row = await this.owned(this.gateway.db, ownerId, merchantId);
    if (row.verified) return 'already_verified';
    const record = dnsRecordOf(row);
    try {
      return (await hasTxtValue(record.name, record.value, this.deps.doh)) ? 'found' : 'absent';
    } catch (error) {
      if (!(error instanceof ResolverError)) throw error;
      this.gateway.log.warn({ merchantId, reason: error.reason, err: error.message }, 'DNS-over-HTTPS resolver failed during domain verification');
      throw new ApiError('runtime_unavailable', {
        detail: `the DNS resolver could not be asked (${error.reason}); nothing changed, retry shortly`,
        retryAfterS: 5,
      });
    }
  }

  /** Applies what `checkDomain` found: verified (with its event, in this transaction) or 409 pending. */
  async applyDomainProof(tx: Tx, ownerId: string, merchantId: string, proof: DomainProof): Promise<{ merchant: Merchant; verified: true }> {
    const row = await this.lockOwned(tx, ownerId, merchantId);
    // A concurrent request may have verified it meanwhile: verification only ever moves one way.
    if (row.verified) return { merchant: await this.toMerchant(tx, row), verified: true };
    // Only a record seen just now verifies ('already_verified' cannot reach here: verification never reverts).
    if (proof !== 'found') {
      throw new ApiError('domain_verification_pending', {
        // A dev gateway reads its own zone, where waiting never helps (found from outside: the console said to wait).
        detail: this.deps.doh.devZoneCleartext === true
          ? `the TXT record is not in this dev gateway's own DNS zone, the only one it reads (no public DNS is asked): publish it there with \`npx acg dev dns publish --merchant ${merchantId}\` in the gateway's directory, then retry`
          : 'the TXT record is not visible yet; publish it and retry (DNS changes can take a few minutes to propagate)',
        extra: { verified: false, dnsRecord: dnsRecordOf(row) },
      });
    }
    const nowMs = this.gateway.clock.nowMs();
    const verified = await store.markVerified(tx, merchantId, BigInt(Math.floor(nowMs / 1000)), this.deps.doh.devZoneCleartext === true);
    const merchant = await this.toMerchant(tx, verified);
    await emitEvent(tx, { merchantId, type: 'merchant.verified', data: { merchant }, nowMs });
    return { merchant, verified: true };
  }

  async createApiKey(
    tx: Tx,
    ownerId: string,
    merchantId: string,
    input: { name: string; scopes: string[] },
  ): Promise<{ apiKey: ApiKeyMetadata; secretKey: string; notice: string }> {
    const pepper = this.deps.apiKeyPepper;
    if (!pepper) throw new ApiError('runtime_configuration_required', { detail: 'API keys cannot be issued: ACG_API_KEY_PEPPER is not configured' });
    const unknown = input.scopes.findIndex((scope) => !Object.hasOwn(API_KEY_SCOPES, scope));
    if (unknown >= 0) throw memberRefusal(`scopes/${unknown}`, `"${input.scopes[unknown]}" is not a scope; known: ${Object.keys(API_KEY_SCOPES).join(', ')}`);
    // Locked so that concurrent creations cannot together pass the limit.
    await this.lockOwned(tx, ownerId, merchantId);
    if ((await store.countActiveApiKeys(tx, merchantId)) >= ACTIVE_API_KEYS_PER_MERCHANT_MAX) {
      throw new ApiError('conflict', { detail: `a merchant may have at most ${ACTIVE_API_KEYS_PER_MERCHANT_MAX} active API keys; revoke one first` });
    }
    const key = newApiKey(pepper);
    const row = await store.insertApiKey(tx, {
      id: key.keyId,
      merchant_id: merchantId,
      owner_id: ownerId,
      name: input.name,
      scopes: [...new Set(input.scopes)],
      secret_hash: key.secretHash,
      created_at_s: BigInt(this.gateway.clock.nowS()),
      revoked_at_s: null,
    });
    return { apiKey: toApiKey(row), secretKey: key.plaintext, notice: API_KEY_NOTICE };
  }

  /** A merchant's keys, newest first (the caller has checked the owner). */
  async listApiKeys(db: Queryable, merchantId: string, page: Page): Promise<{ apiKeys: ApiKeyMetadata[]; hasMore: boolean }> {
    const rows = await store.listApiKeys(db, merchantId, page.limit + 1, page.startingAfter);
    return { apiKeys: rows.slice(0, page.limit).map(toApiKey), hasMore: rows.length > page.limit };
  }

  /** Keys by id with their secret hashes, for the credential verifier only (its coalesced reads: one statement). */
  async apiKeysForVerification(keyIds: readonly string[]): Promise<store.ApiKeyRow[]> {
    return store.findApiKeysById(this.gateway.db, keyIds);
  }

  /**
   * Revokes the key; its operation answers once no instance keeps the key's row from before (platform/
   * credential-facts.ts), so it is refused from the next request. Revoking twice keeps the first time.
   */
  async revokeApiKey(tx: Tx, ownerId: string, merchantId: string, keyId: string): Promise<{ apiKey: ApiKeyMetadata }> {
    await this.owned(tx, ownerId, merchantId);
    const row = await store.lockApiKey(tx, merchantId, keyId);
    if (!row) throw new ApiError('not_found', { detail: `no API key ${keyId} for this merchant` });
    return { apiKey: toApiKey(await store.revokeApiKey(tx, keyId, BigInt(this.gateway.clock.nowS()))) };
  }
}
