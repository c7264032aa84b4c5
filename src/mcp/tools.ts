// The MCP tools: one row per operation, naming who may call it, its input schema (the TypeBox
// definitions the HTTP routes validate with), truthful annotations, the HTTP route of the same operation
// (so a test can fail when the two schemas drift apart), and the call into the same service the route
// makes. No business rule lives here.
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import type { ToolAnnotations } from '@modelcontextprotocol/server';
import type { ExecuteService } from '../execute/service.ts';
import type { IdentityService } from '../identity/service.ts';
import type { LedgerService } from '../ledger/service.ts';
import type { OfferService } from '../offers/service.ts';
import { ApiError } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { IdParams, PageQuery, ResourceId } from '../platform/http/schemas.ts';
import type { Principal, PrincipalKind } from '../platform/principal.ts';

export interface ToolServices {
  gateway: Gateway;
  identity: IdentityService;
  ledger: LedgerService;
  offers: OfferService;
  execute: ExecuteService;
}

export interface ToolDefinition<S extends TSchema = TSchema> {
  name: string;
  title: string;
  description: string;
  /** Who may call it; the tool list a principal sees holds only its own tools. */
  kinds: readonly PrincipalKind[];
  input: S;
  annotations: ToolAnnotations;
  /** The HTTP route of the same operation, when there is one: its params, query and body make this input. */
  http?: { method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE'; url: string };
  run(services: ToolServices, principal: Principal, input: Static<S>): Promise<object>;
}

const AGENT = ['agent'] as const;
const OWNER = ['human', 'owner'] as const;
const EVERYONE = ['human', 'agent', 'owner'] as const;

/** A read: no side effect on the gateway's state, the same answer until something else changes it. */
const READ: ToolAnnotations = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };

const NoInput = Type.Object({}, { additionalProperties: false });
const AgentPage = Type.Composite([Type.Object({ agentId: ResourceId }), PageQuery], { additionalProperties: false });

function tool<S extends TSchema>(definition: ToolDefinition<S>): ToolDefinition {
  return definition as unknown as ToolDefinition;
}

export const TOOLS: readonly ToolDefinition[] = [
  tool({
    name: 'whoami',
    title: 'Who am I',
    description:
      'Who this credential belongs to. For an agent: its settings (status, allowed services and categories, caps), its balance ' +
      '(availableUc, heldUc, capturedUc, lapsedUc, grantedUc; microcredits as decimal strings, 1 credit = 1,000,000) and its credit ' +
      'lots in burn-down order. For a human owner: the owner id and verified email.',
    kinds: EVERYONE,
    input: NoInput,
    annotations: READ,
    http: { method: 'GET', url: '/v1/me' },
    async run({ identity, ledger, gateway }, principal) {
      const base = { kind: principal.kind, credential: principal.credential };
      if (principal.kind !== 'agent') return { ...base, owner: { id: principal.ownerId!, email: principal.email! } };
      const agent = await identity.getAgent(principal.ownerId!, principal.agentId!);
      await ledger.expireDue({ agentId: agent.id });
      return { ...base, agent, balance: await ledger.balance(gateway.db, agent.id), lots: await ledger.lots(gateway.db, agent.id) };
    },
  }),
  tool({
    name: 'list_offers',
    title: 'List offers I can buy',
    description:
      "Active offers of verified merchants in the agent's allowed categories, oldest first (`limit` 1–100, default 20; pass the last " +
      "offer's id as `startingAfter` for the next page). Mint a voucher for one with its id.",
    kinds: AGENT,
    input: PageQuery,
    annotations: READ,
    async run({ identity, offers }, principal, input) {
      const agent = await identity.getAgent(principal.ownerId!, principal.agentId!);
      return offers.listSellable(agent.allowedCategories, input.limit ?? 20, input.startingAfter);
    },
  }),
  tool({
    name: 'get_hold',
    title: 'Read one of my holds',
    description:
      'One of the agent\'s holds (a Redemption: amountUc, state held | captured | released | expired, expiresAt, allocations). ' +
      'Another agent\'s hold is not_found. In live mode holds are read through their merchant (provider_configuration_required), as on HTTP.',
    kinds: AGENT,
    input: IdParams,
    annotations: READ,
    http: { method: 'GET', url: '/v1/redemptions/:id' },
    async run({ ledger, gateway }, principal, input) {
      if (gateway.config.mode === 'live') throw new ApiError('provider_configuration_required', { detail: 'agents read holds through their merchant in live mode' });
      return ledger.getHold(gateway.db, input.id, { agentId: principal.agentId });
    },
  }),
  tool({
    name: 'get_intent',
    title: 'Read a retained intent',
    description:
      'A service execution the agent asked for when its credit did not cover the price: the retained request (serviceId, action, input, ' +
      'agentId), its state (pending until a retry with the same idempotency key executes it, then executed with its executionId) and ' +
      'its deadline. The intentId comes from the link_configuration_required or approval_required error.',
    kinds: AGENT,
    input: IdParams,
    annotations: READ,
    async run({ execute }, principal, input) {
      return execute.getIntent(principal.agentId!, input.id);
    },
  }),
  tool({
    name: 'list_agents',
    title: 'List my agents',
    description:
      "The owner's agents, oldest first, with status (active | frozen), allowances and caps (`limit` 1–100, default 20; pass the last " +
      "agent's id as `startingAfter` for the next page).",
    kinds: OWNER,
    input: PageQuery,
    annotations: READ,
    http: { method: 'GET', url: '/v1/owner/agents' },
    async run({ identity }, principal, input) {
      return identity.listAgents(principal.ownerId!, input.limit ?? 20, input.startingAfter);
    },
  }),
  tool({
    name: 'list_agent_holds',
    title: "List an agent's holds",
    description:
      "The holds (Redemptions) of one of the owner's agents, oldest first (`limit` 1–100, default 20; pass the last hold's id as " +
      '`startingAfter` for the next page). Another owner\'s agent is not_found.',
    kinds: OWNER,
    input: AgentPage,
    annotations: READ,
    async run({ identity, ledger, gateway }, principal, input) {
      await identity.ownedAgentRow(gateway.db, principal.ownerId!, input.agentId);
      await ledger.expireDue({ agentId: input.agentId });
      return ledger.listHolds(gateway.db, input.agentId, input.limit ?? 20, input.startingAfter);
    },
  }),
];
