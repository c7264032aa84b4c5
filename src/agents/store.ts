// SQL for agents and their avatar uploads. Nothing but queries. An agent row is read with its owner's
// email (`AgentWithOwnerRow`) where the agent-owner binding is checked.
import type { Queryable, Tx } from '../platform/db/database.ts';

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
}

export interface AgentWithOwnerRow extends AgentRow {
  owner_email: string;
  owner_email_verified: boolean;
}

const AGENT_WITH_OWNER = `SELECT a.*, o.email AS owner_email, o.email_verified AS owner_email_verified
  FROM agents a JOIN owners o ON o.id = a.owner_id`;

/** Agents by identity (issuer + subject), many at once (one statement). */
export async function findAgentsByIdentity(db: Queryable, identities: ReadonlyArray<{ issuer: string; subject: string }>): Promise<AgentWithOwnerRow[]> {
  const { rows } = await db.query<AgentWithOwnerRow>(
    `${AGENT_WITH_OWNER} JOIN unnest($1::text[], $2::text[]) AS i(issuer, subject) ON a.identity_issuer = i.issuer AND a.identity_subject = i.subject`,
    [identities.map((i) => i.issuer), identities.map((i) => i.subject)],
  );
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

export async function lockAgent(tx: Tx, agentId: string): Promise<AgentRow | undefined> {
  const { rows } = await tx.query<AgentRow>('SELECT * FROM agents WHERE id = $1 FOR UPDATE', [agentId]);
  return rows[0];
}

/** Locks several agent rows in one fixed order (sorted ids), so two batches cannot deadlock on them. */
export async function lockAgents(tx: Tx, agentIds: readonly string[]): Promise<AgentRow[]> {
  if (agentIds.length === 0) return [];
  const { rows } = await tx.query<AgentRow>('SELECT * FROM agents WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE', [[...agentIds]]);
  return rows;
}

export async function insertAgent(db: Queryable, agent: AgentRow): Promise<AgentRow> {
  const { rows } = await db.query<AgentRow>(
    `INSERT INTO agents (id, owner_id, name, identity_issuer, identity_subject, status, allowed_services, allowed_categories,
       inbox_allowlist, cap_per_hold_uc, cap_per_period_uc, cap_period_s, profile_name, profile_preset, profile_color,
       avatar_upload_id, created_at_s, updated_at_s)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
     ON CONFLICT (identity_issuer, identity_subject) DO NOTHING
     RETURNING *`,
    [
      agent.id, agent.owner_id, agent.name, agent.identity_issuer, agent.identity_subject, agent.status,
      JSON.stringify(agent.allowed_services), JSON.stringify(agent.allowed_categories), JSON.stringify(agent.inbox_allowlist),
      agent.cap_per_hold_uc, agent.cap_per_period_uc, agent.cap_period_s, agent.profile_name, agent.profile_preset,
      agent.profile_color, agent.avatar_upload_id, agent.created_at_s, agent.updated_at_s,
    ],
  );
  return rows[0]!;
}

export async function updateAgent(db: Queryable, agent: AgentRow): Promise<AgentRow> {
  const { rows } = await db.query<AgentRow>(
    `UPDATE agents SET name = $2, status = $3, allowed_services = $4, allowed_categories = $5, inbox_allowlist = $6,
       cap_per_hold_uc = $7, cap_per_period_uc = $8, cap_period_s = $9, profile_name = $10, profile_preset = $11,
       profile_color = $12, avatar_upload_id = $13, updated_at_s = $14
     WHERE id = $1 RETURNING *`,
    [
      agent.id, agent.name, agent.status, JSON.stringify(agent.allowed_services), JSON.stringify(agent.allowed_categories),
      JSON.stringify(agent.inbox_allowlist), agent.cap_per_hold_uc, agent.cap_per_period_uc, agent.cap_period_s,
      agent.profile_name, agent.profile_preset, agent.profile_color, agent.avatar_upload_id, agent.updated_at_s,
    ],
  );
  return rows[0]!;
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
