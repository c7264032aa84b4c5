// Agent management's reads, for every face: the owner's agents, one agent, its avatar. Who may read an
// agent is the one acting-for rule (acting.ts): the agent itself or its owner; anyone else gets 404.
import { Type } from '@sinclair/typebox';
import { idOf, PageQuery, VersionNumber, type Page } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import { toAgent, type Agent, type AgentService, type MandateView } from './service.ts';
import type { AgentRow, FrozenBy, MandateVersionRow } from './store.ts';

export const AgentIdInput = Type.Object({ id: idOf('agent (agt_…)') }, { additionalProperties: false });

const MandateVersionInput = Type.Object({ id: idOf('agent (agt_…)'), version: VersionNumber('a mandate version of the agent') }, { additionalProperties: false });
const MandateVersionsInput = Type.Object(
  {
    id: idOf('agent (agt_…)'),
    limit: PageQuery.properties.limit,
    startingAfter: Type.Optional(VersionNumber('the last version of the previous page (versions come newest first); a version the agent never had is 400 invalid_input')),
  },
  { additionalProperties: false },
);

/** A mandate version as kept: its canonical JSON, byte for byte, and the hash of it. */
export interface MandateVersionView {
  agentId: string;
  version: number;
  createdAt: number;
  hash: string;
  canonical: string;
}

export interface AgentQueries {
  listAgents: Query<Page, { agents: Agent[]; hasMore: boolean }>;
  getMandate: Query<{ id: string }, MandateView, AgentRow>;
  getMandateVersion: Query<{ id: string; version: number }, MandateVersionView, AgentRow>;
  listMandateVersions: Query<{ id: string; limit: number; startingAfter?: number }, { versions: MandateVersionView[]; hasMore: boolean }, AgentRow>;
  getAgent: Query<{ id: string }, Agent, AgentRow & FrozenBy>;
  getAgentAvatar: Query<{ id: string }, { contentType: string; bytes: Uint8Array }, AgentRow>;
}

/**
 * `reclaimOverdue` reclaims an agent's holds past their deadline (the ledger's, handed over by the composition
 * root): the mandate's usage counts them until then, as the balance does.
 */
export function agentQueries(agents: AgentService, reclaimOverdue: (agentId: string) => Promise<unknown>): AgentQueries {
  const access = agents.agentFor.bind(agents);
  return {
    listAgents: {
      name: 'listAgents',
      input: PageQuery,
      output: Type.Object({ agents: Type.Array(Type.Ref('Agent')), hasMore: Type.Boolean() }),
      read: (db, { principal, input }) => agents.listAgents(db, principal.ownerId!, input),
    },
    getAgent: {
      name: 'getAgent',
      input: AgentIdInput,
      output: Type.Ref('Agent'),
      access: (db, { principal, input }) => access(db, principal, input.id),
      read: async (_db, _call, row) => toAgent(row),
    },
    getMandate: {
      name: 'getMandate',
      input: AgentIdInput,
      output: Type.Ref('Mandate'),
      access: (db, { principal, input }) => access(db, principal, input.id),
      // Usage counts holds past their deadline until they are reclaimed: reclaim them first, as balance reads do.
      settle: (_call, row) => reclaimOverdue(row.id),
      read: (db, _call, row) => agents.mandateView(db, row),
    },
    getMandateVersion: {
      name: 'getMandateVersion',
      input: MandateVersionInput,
      output: Type.Ref('MandateVersion'),
      access: (db, { principal, input }) => access(db, principal, input.id),
      read: async (db, { input }, row) => versionView(await agents.mandateVersion(db, row, input.version)),
    },
    listMandateVersions: {
      name: 'listMandateVersions',
      input: MandateVersionsInput,
      output: Type.Object({ versions: Type.Array(Type.Ref('MandateVersion')), hasMore: Type.Boolean() }),
      access: (db, { principal, input }) => access(db, principal, input.id),
      read: async (db, { input }, row) => {
        const page = await agents.mandateVersions(db, row, input);
        return { versions: page.versions.map(versionView), hasMore: page.hasMore };
      },
    },
    getAgentAvatar: {
      name: 'getAgentAvatar',
      input: AgentIdInput,
      output: Type.Object({}, { description: 'the avatar image, in the type it was uploaded as' }),
      access: (db, { principal, input }) => access(db, principal, input.id),
      read: (db, _call, row) => agents.readAvatar(db, row),
    },
  };
}

function versionView(row: MandateVersionRow): MandateVersionView {
  return { agentId: row.agent_id, version: row.version, createdAt: Number(row.created_at_s), hash: row.hash, canonical: row.document };
}
