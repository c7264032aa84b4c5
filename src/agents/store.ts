// SQL for agents and their avatar uploads. Nothing but queries. An agent row is read with its owner's
// email (`AgentWithOwnerRow`) where the agent-owner binding is checked.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { refuseUnknownCursor } from '../platform/db/paging.ts';
import { CAP_PERIOD_S_DEFAULT, type ExtendedRules, type MandateRules } from '../policy/mandate.ts';

export interface AgentRow {
  id: string;
  owner_id: string;
  name: string;
  identity_issuer: string;
  identity_subject: string;
  status: 'active' | 'frozen';
  allowed_services: string[];
  allowed_categories: string[];
  inbox_allowlist: string[];
  cap_per_hold_uc: bigint | null;
  cap_per_period_uc: bigint | null;
  cap_period_s: number;
  profile_name: string;
  profile_preset: string;
  profile_color: string;
  avatar_upload_id: string | null;
  created_at_s: bigint;
  updated_at_s: bigint;
  /** The mandate in force: its version (0: not written yet), its hash, and the rules beside the columns above. */
  mandate_version: number;
  mandate_hash: string | null;
  mandate_rules: Partial<ExtendedRules>;
  /** The delegate's parent (null for a root), and every ancestor, root first: written at creation, never changed. */
  parent_id: string | null;
  ancestor_ids: string[];
  /** When the agent was retired (with its subtree); null while not. */
  retired_at_s: bigint | null;
}

export interface AgentWithOwnerRow extends AgentRow {
  owner_email: string;
  owner_email_verified: boolean;
}

const AGENT_WITH_OWNER = `SELECT a.*, o.email AS owner_email, o.email_verified AS owner_email_verified
  FROM agents a JOIN owners o ON o.id = a.owner_id`;

/** What a credential's check reads of an agent: its owner, and that owner's verified email (which binds the agent's identity tokens). */
export interface CredentialAgentRow {
  id: string;
  owner_id: string;
  identity_issuer: string;
  identity_subject: string;
  owner_email: string;
  owner_email_verified: boolean;
}

const CREDENTIAL_AGENT = `SELECT a.id, a.owner_id, a.identity_issuer, a.identity_subject, o.email AS owner_email, o.email_verified AS owner_email_verified
  FROM agents a JOIN owners o ON o.id = a.owner_id`;

/**
 * Agents by identity (issuer + subject) and owner email, many at once (one statement): the lookup of an identity
 * token's agent. Each owner registers an identity once, and a token names its owner by email, so the registration it
 * reaches is that owner's (the oldest, should two owners share one verified email), never another owner's
 * registration of the same subject. Each identity is one probe of the identity index (a lateral lookup), and the
 * arrays are read through a sub-select, which hides their length from the planner: its plan is then the same
 * whatever the call, and PostgreSQL keeps one generic plan per connection. Given the arrays themselves, it planned
 * the statement again at every call (0.13 ms, twice the statement's own run time), since a plan for a call's few
 * identities always looked cheaper than a generic one (docs/decisions.md "Hot lookups plan once"). Only the columns
 * the check needs: the whole row, with its mandate, was parsed for every request.
 */
export async function findAgentsByIdentity(db: Queryable, identities: ReadonlyArray<OwnedIdentity>): Promise<CredentialAgentRow[]> {
  const { rows } = await db.query<CredentialAgentRow>(
    `SELECT a.* FROM unnest((SELECT $1::text[]), (SELECT $2::text[]), (SELECT $3::text[])) AS i(issuer, subject, owner_email)
      CROSS JOIN LATERAL (${CREDENTIAL_AGENT} WHERE a.identity_issuer = i.issuer AND a.identity_subject = i.subject AND o.email = i.owner_email ORDER BY a.seq LIMIT 1) a`,
    [identities.map((i) => i.issuer), identities.map((i) => i.subject), identities.map((i) => i.ownerEmail)],
  );
  return rows;
}

/** An agent identity as a token presents it: issuer, subject, and its owner's email (lower-cased). */
export interface OwnedIdentity {
  issuer: string;
  subject: string;
  ownerEmail: string;
}

/** Whether any owner has registered this identity: what tells a token of an unknown owner from an unregistered agent. */
export async function identityRegistered(db: Queryable, identity: { issuer: string; subject: string }): Promise<boolean> {
  const { rows } = await db.query(`SELECT 1 FROM agents WHERE identity_issuer = $1 AND identity_subject = $2 LIMIT 1`, [identity.issuer, identity.subject]);
  return rows.length > 0;
}

/** What a credential's check reads of agents named by id (our access tokens' subjects), in one statement. */
export async function findCredentialAgents(db: Queryable, agentIds: readonly string[]): Promise<CredentialAgentRow[]> {
  const { rows } = await db.query<CredentialAgentRow>(`${CREDENTIAL_AGENT} WHERE a.id = ANY($1::text[])`, [[...agentIds]]);
  return rows;
}

/** findAgent for many ids at once (one statement). */
export async function findAgents(db: Queryable, agentIds: readonly string[]): Promise<AgentWithOwnerRow[]> {
  const { rows } = await db.query<AgentWithOwnerRow>(`${AGENT_WITH_OWNER} WHERE a.id = ANY($1::text[])`, [[...agentIds]]);
  return rows;
}

export async function findAgent(db: Queryable, agentId: string): Promise<AgentWithOwnerRow | undefined> {
  const { rows } = await db.query<AgentWithOwnerRow>(`${AGENT_WITH_OWNER} WHERE a.id = $1`, [agentId]);
  return rows[0];
}

/** What showing an agent needs beyond its row: the agent whose freeze stops it (FROZEN_BY), or null. */
export interface FrozenBy {
  frozen_by: string | null;
}

/**
 * The agent whose freeze stops agent `a`, found as the spending policy finds it (the agent itself, then its
 * parent, up to its root): `a`'s own id when `a` is not active, else its nearest ancestor that is not active, else
 * null.
 * A root needs no lookup; a delegate one probe of the primary key for its ancestors.
 */
const FROZEN_BY = `CASE WHEN a.status <> 'active' THEN a.id
    WHEN cardinality(a.ancestor_ids) = 0 THEN NULL
    ELSE (SELECT f.id FROM agents f WHERE f.id = ANY(a.ancestor_ids) AND f.status <> 'active' ORDER BY cardinality(f.ancestor_ids) DESC LIMIT 1)
  END AS frozen_by`;

/** findAgent, with the agent whose freeze stops it: the row an agent is shown from (one statement). */
export async function findAgentView(db: Queryable, agentId: string): Promise<(AgentWithOwnerRow & FrozenBy) | undefined> {
  const { rows } = await db.query<AgentWithOwnerRow & FrozenBy>(
    `SELECT a.*, o.email AS owner_email, o.email_verified AS owner_email_verified, ${FROZEN_BY}
       FROM agents a JOIN owners o ON o.id = a.owner_id WHERE a.id = $1`,
    [agentId],
  );
  return rows[0];
}

/** The agent whose freeze stops each of these agents (FROZEN_BY), by id (one statement). */
export async function findFrozenBy(db: Queryable, agentIds: readonly string[]): Promise<Map<string, string | null>> {
  if (agentIds.length === 0) return new Map();
  const { rows } = await db.query<{ id: string } & FrozenBy>(`SELECT a.id, ${FROZEN_BY} FROM agents a WHERE a.id = ANY($1::text[])`, [[...agentIds]]);
  return new Map(rows.map((row) => [row.id, row.frozen_by]));
}

/** The merchants a mandate's budgets name, found by id, or by domain (to tell an owner who named one that way). */
export async function findMerchantsNamed(db: Queryable, names: readonly string[]): Promise<Array<{ id: string; name: string; domain: string; verified: boolean }>> {
  const { rows } = await db.query<{ id: string; name: string; domain: string; verified: boolean }>(
    'SELECT id, name, domain, verified FROM merchants WHERE id = ANY($1::text[]) OR domain = ANY($1::text[])',
    [names],
  );
  return rows;
}

/**
 * An agent's row lock: FOR NO KEY UPDATE, as every lock of agents' rows is (this, lockSubtree, lockAgentsWithAncestors). It excludes every other
 * agent lock, as FOR UPDATE did, but not the share lock a foreign key takes on the row when another transaction
 * inserts a row that names the agent (a refund's new lot, an event): with FOR UPDATE, a refund holding its
 * merchant's earnings row waited here on a mint batch, which waited on lots a capture batch held, which waited on
 * those earnings: a deadlock (found from outside, 2026-12-03). The id, the only key column, never changes.
 */
export async function lockAgent(tx: Tx, agentId: string): Promise<AgentRow | undefined> {
  const { rows } = await tx.query<AgentRow>('SELECT * FROM agents WHERE id = $1 FOR NO KEY UPDATE', [agentId]);
  return rows[0];
}

/**
 * Who is below an agent, as a condition on `agents` the indexes answer: its own row by the primary key, its
 * delegates by the GIN index on ancestor_ids (which answers `@>`, not `= ANY(ancestor_ids)`: that form read the
 * whole table). The agent's id is parameter `$1`.
 */
const IN_SUBTREE_OF_$1 = '(id = $1 OR ancestor_ids @> ARRAY[$1::text])';

/** The agent and every agent below it in its delegation tree, sorted (the GIN index on ancestor_ids finds them). */
export async function subtreeIds(db: Queryable, agentId: string): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM agents WHERE ${IN_SUBTREE_OF_$1} ORDER BY id`, [agentId]);
  return rows.map((row) => row.id);
}

/**
 * Inserts an agent with no spending policy yet (nothing allowed, mandate version 0): `writeMandate`, in the
 * same transaction, gives it version 1. None when its owner has registered the identity already.
 */
export async function insertAgent(db: Queryable, agent: NewAgentRow): Promise<AgentRow | undefined> {
  const { rows } = await db.query<AgentRow>(
    `INSERT INTO agents (id, owner_id, name, identity_issuer, identity_subject, status, allowed_services, allowed_categories,
       inbox_allowlist, cap_period_s, profile_name, profile_preset, profile_color, avatar_upload_id, created_at_s, updated_at_s, parent_id, ancestor_ids)
     VALUES ($1, $2, $3, $4, $5, $6, '[]', '[]', $7, $8, $9, $10, $11, $12, $13, $14, $15, $16::text[])
     ON CONFLICT (owner_id, identity_issuer, identity_subject) DO NOTHING
     RETURNING *`,
    [
      agent.id, agent.owner_id, agent.name, agent.identity_issuer, agent.identity_subject, agent.status, JSON.stringify(agent.inbox_allowlist),
      CAP_PERIOD_S_DEFAULT, agent.profile_name, agent.profile_preset, agent.profile_color, agent.avatar_upload_id, agent.created_at_s, agent.updated_at_s,
      agent.parent_id, agent.ancestor_ids,
    ],
  );
  return rows[0];
}

/** What registration writes of an agent; its spending policy is the mandate's. */
export type NewAgentRow = Omit<
  AgentRow,
  'allowed_services' | 'allowed_categories' | 'cap_per_hold_uc' | 'cap_per_period_uc' | 'cap_period_s' | 'mandate_version' | 'mandate_hash' | 'mandate_rules' | 'retired_at_s'
>;

/** The agent and every delegate below it, shallowest first (the ancestors index), at most `limit` + 1 rows. */
export async function findSubtree(db: Queryable, agentId: string, limit: number): Promise<AgentRow[]> {
  const { rows } = await db.query<AgentRow>(
    `SELECT * FROM agents WHERE ${IN_SUBTREE_OF_$1} ORDER BY cardinality(ancestor_ids), seq LIMIT $2`,
    [agentId, limit + 1],
  );
  return rows;
}

/**
 * Locks the agent, every delegate below it and the given ancestors of it in one statement, in sorted id order
 * (the order every agent lock takes).
 */
export async function lockSubtree(tx: Tx, agentId: string, ancestorIds: readonly string[]): Promise<AgentRow[]> {
  const { rows } = await tx.query<AgentRow>(`SELECT * FROM agents WHERE ${IN_SUBTREE_OF_$1} OR id = ANY($2::text[]) ORDER BY id FOR NO KEY UPDATE`, [agentId, [...ancestorIds]]);
  return rows;
}

/**
 * Locks several agents' rows and all their ancestors' in one statement, in sorted id order. The ancestors are
 * found without a lock: `ancestor_ids` never changes once written. Their ids are gathered into one array first
 * (an init plan, run once), so the rows are found by the primary key: as `id = ANY(…) OR id IN (SELECT …)` the
 * planner could only filter the whole table, a scan of every agent for each group-commit batch (4 ms at 20,000
 * agents).
 */
export async function lockAgentsWithAncestors(tx: Tx, agentIds: readonly string[]): Promise<AgentRow[]> {
  if (agentIds.length === 0) return [];
  const { rows } = await tx.query<AgentRow>(
    `SELECT * FROM agents
      WHERE id = ANY($1::text[] || ARRAY(SELECT unnest(ancestor_ids) FROM agents WHERE id = ANY($1::text[])))
      ORDER BY id FOR NO KEY UPDATE`,
    [[...agentIds]],
  );
  return rows;
}

/** Marks agents retired at `atS` (those not retired already), the caller holding their row locks. */
export async function markRetired(tx: Tx, agentIds: readonly string[], atS: number): Promise<void> {
  await tx.query('UPDATE agents SET retired_at_s = $2, updated_at_s = $2 WHERE id = ANY($1::text[]) AND retired_at_s IS NULL', [[...agentIds], atS]);
}

/** Changes what is not spending policy (name, status, inbox allowlist, profile); the policy is `writeMandate`'s. */
export async function updateAgent(db: Queryable, agent: AgentRow): Promise<AgentRow> {
  const { rows } = await db.query<AgentRow>(
    `UPDATE agents SET name = $2, status = $3, inbox_allowlist = $4, profile_name = $5, profile_preset = $6,
       profile_color = $7, avatar_upload_id = $8, updated_at_s = $9
     WHERE id = $1 RETURNING *`,
    [
      agent.id, agent.name, agent.status, JSON.stringify(agent.inbox_allowlist), agent.profile_name, agent.profile_preset,
      agent.profile_color, agent.avatar_upload_id, agent.updated_at_s,
    ],
  );
  return rows[0]!;
}

/** A mandate version as kept: the canonical JSON its hash is taken over. */
export interface MandateVersionRow {
  agent_id: string;
  version: number;
  hash: string;
  document: string;
  created_at_s: bigint;
  created_by: string;
}

/**
 * The one writer of an agent's spending policy: records a new mandate version and makes it the agent's, its
 * rules copied onto the agent row (the columns the hold pass reads) in the same statement. The caller holds
 * the agent's row lock and passes the next version number.
 */
export async function writeMandate(tx: Tx, version: MandateVersionRow, rules: MandateRules, updatedAtS: bigint): Promise<AgentRow> {
  const { budgets, merchants, approvalAboveUc, notBefore, notAfter, timeZone, alertThresholds, delegation } = rules;
  const extended: ExtendedRules = { budgets, merchants, approvalAboveUc, notBefore, notAfter, timeZone, alertThresholds, delegation };
  const { rows } = await tx.query<AgentRow>(
    `WITH kept AS (
       INSERT INTO mandate_versions (agent_id, version, hash, document, created_at_s, created_by) VALUES ($1, $2, $3, $4, $5, $6) RETURNING agent_id
     )
     UPDATE agents SET mandate_version = $2, mandate_hash = $3, allowed_services = $7, allowed_categories = $8,
       cap_per_hold_uc = $9, cap_per_period_uc = $10, cap_period_s = $11, mandate_rules = $12, updated_at_s = $13
      WHERE id = (SELECT agent_id FROM kept) AND mandate_version = $2 - 1
     RETURNING *`,
    [
      version.agent_id, version.version, version.hash, version.document, version.created_at_s, version.created_by,
      JSON.stringify(rules.allowedServices), JSON.stringify(rules.allowedCategories), rules.caps.perHoldUc, rules.caps.perPeriodUc,
      rules.caps.periodS, JSON.stringify(extended), updatedAtS,
    ],
  );
  if (!rows[0]) throw new Error(`agent ${version.agent_id}: mandate version ${version.version} does not follow the one in force`);
  return rows[0];
}

export async function findMandateVersion(db: Queryable, agentId: string, version: number): Promise<MandateVersionRow | undefined> {
  const { rows } = await db.query<MandateVersionRow>('SELECT * FROM mandate_versions WHERE agent_id = $1 AND version = $2', [agentId, version]);
  return rows[0];
}

/** An agent's mandate versions, newest first, after the version `before` (a cursor), at most `limit` + 1. */
export async function listMandateVersions(db: Queryable, agentId: string, limit: number, before?: number): Promise<MandateVersionRow[]> {
  const { rows } = await db.query<MandateVersionRow>(
    // A version the agent never had finds nothing (not the newest ones), so it is refused as any unknown cursor.
    `SELECT * FROM mandate_versions WHERE agent_id = $1
        AND ($2::int IS NULL OR (version < $2 AND EXISTS (SELECT 1 FROM mandate_versions WHERE agent_id = $1 AND version = $2)))
      ORDER BY version DESC LIMIT $3`,
    [agentId, before ?? null, limit + 1],
  );
  await refuseUnknownCursor(db, rows, before, 'SELECT 1 FROM mandate_versions WHERE version = $1 AND agent_id = $2', [agentId]);
  return rows;
}

/** Agents whose mandate was never written (registered before mandates existed), at most `limit`. */
export async function agentIdsWithoutMandate(db: Queryable, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM agents WHERE mandate_version = 0 ORDER BY id LIMIT $1', [limit]);
  return rows.map((row) => row.id);
}

export interface AvatarUploadRow {
  id: string;
  storage_id: string;
  agent_id: string;
  content_type: string;
  size_bytes: number;
  bytes: Uint8Array | null;
  state: 'pending' | 'uploaded' | 'finalized';
  created_at_s: bigint;
  expires_at_s: bigint;
}

export async function insertAvatarUpload(db: Queryable, upload: Omit<AvatarUploadRow, 'bytes'>): Promise<void> {
  await db.query(
    `INSERT INTO avatar_uploads (id, storage_id, agent_id, content_type, size_bytes, state, created_at_s, expires_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [upload.id, upload.storage_id, upload.agent_id, upload.content_type, upload.size_bytes, upload.state, upload.created_at_s, upload.expires_at_s],
  );
}

export async function findAvatarUpload(db: Queryable, agentId: string, uploadId: string): Promise<AvatarUploadRow | undefined> {
  const { rows } = await db.query<AvatarUploadRow>('SELECT * FROM avatar_uploads WHERE id = $1 AND agent_id = $2', [uploadId, agentId]);
  return rows[0];
}

export async function lockAvatarUpload(tx: Tx, agentId: string, uploadId: string): Promise<AvatarUploadRow | undefined> {
  const { rows } = await tx.query<AvatarUploadRow>('SELECT * FROM avatar_uploads WHERE id = $1 AND agent_id = $2 FOR UPDATE', [uploadId, agentId]);
  return rows[0];
}

export async function storeAvatarBytes(db: Queryable, uploadId: string, bytes: Uint8Array): Promise<void> {
  await db.query(`UPDATE avatar_uploads SET bytes = $2, size_bytes = $3, state = 'uploaded' WHERE id = $1`, [uploadId, bytes, bytes.length]);
}

export async function markAvatarFinalized(db: Queryable, uploadId: string): Promise<void> {
  await db.query(`UPDATE avatar_uploads SET state = 'finalized' WHERE id = $1`, [uploadId]);
}

export async function deleteExpiredAvatarUploads(db: Queryable, nowS: number): Promise<number> {
  const result = await db.query(`DELETE FROM avatar_uploads WHERE state <> 'finalized' AND expires_at_s <= $1`, [nowS]);
  return result.rowCount;
}
