// The MCP tools: one row per operation, naming who may call it, truthful annotations, and the HTTP route
// of the same operation (a test fails when the two input schemas drift apart). A tool that changes
// state names an operation of the runner, so its input schema, its idempotency key space and its rules
// are the operation's own, shared with HTTP; a read names the service call its route makes. No business
// rule lives here.
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import type { ToolAnnotations } from '@modelcontextprotocol/server';
import { CATALOGUE, type ExecuteOperations } from '../execute/operations.ts';
import type { ExecuteService } from '../execute/service.ts';
import type { AgentOperations } from '../agents/operations.ts';
import type { AgentService } from '../agents/service.ts';
import type { LedgerService } from '../ledger/service.ts';
import type { OfferService } from '../offers/service.ts';
import type { Gateway } from '../platform/gateway.ts';
import { IdParams, PageQuery, ResourceId } from '../platform/schemas.ts';
import type { Principal, PrincipalKind } from '../platform/principal.ts';
import type { VoucherOperations } from '../vouchers/operations.ts';

/** The operations the MCP face runs; the same objects' names and schemas as the HTTP routes'. */
export type McpOperations = Pick<VoucherOperations, 'mintVoucher'> &
  Pick<ExecuteOperations, 'executeService'> &
  Pick<AgentOperations, 'registerAgent' | 'updateAgent' | 'freezeAgent' | 'unfreezeAgent'>;

/** Schemas an operation's input refers to by id (each service action's input), for inlining. */
export const SCHEMA_REFS: Record<string, unknown> = Object.fromEntries(CATALOGUE.map(({ definition, schemaId }) => [schemaId, definition.input]));

export interface ToolServices {
  gateway: Gateway;
  identity: AgentService;
  ledger: LedgerService;
  offers: OfferService;
  execute: ExecuteService;
  operations: McpOperations;
}

interface ToolBase {
  name: string;
  title: string;
  description: string;
  /** Who may call it; the tool list a principal sees holds only its own tools. */
  kinds: readonly PrincipalKind[];
  annotations: ToolAnnotations;
  /** The HTTP route of the same operation, when there is one: its params, query and body make this input. */
  http?: { method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE'; url: string };
}

export interface ReadToolDefinition<S extends TSchema = TSchema> extends ToolBase {
  input: S;
  run(services: ToolServices, principal: Principal, input: Static<S>): Promise<object>;
}

/** A tool run by the operation runner; its input is the operation's plus `idempotencyKey`. */
export interface OperationToolDefinition extends ToolBase {
  operation: keyof McpOperations;
}

export type ToolDefinition = ReadToolDefinition | OperationToolDefinition;

const AGENT = ['agent'] as const;
const OWNER = ['human', 'owner'] as const;
const EVERYONE = ['human', 'agent', 'owner'] as const;

/** A read: no side effect on the gateway's state, the same answer until something else changes it. */
const READ: ToolAnnotations = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };

const NoInput = Type.Object({}, { additionalProperties: false });
const AgentPage = Type.Composite([Type.Object({ agentId: ResourceId }), PageQuery], { additionalProperties: false });

/** Changes state; the same idempotency key makes a retry return the first answer, so it is idempotent. */
const WRITE: ToolAnnotations = { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false };

function tool<S extends TSchema>(definition: ReadToolDefinition<S>): ToolDefinition {
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
      return ledger.readHold(gateway.db, principal, input.id);
    },
  }),
  tool({
    name: 'get_intent',
    title: 'Read a retained intent',
    description:
      'A service execution the agent asked for when its credit did not cover the price: the retained request (serviceId, action, input, ' +
      'agentId), its state (pending until a top-up settles or a retry with the same idempotency key executes it; then executed with its ' +
      'result and receipt, failed, or cancelled) and its deadline. The intentId comes from the approval_required or link_configuration_required error.',
    kinds: AGENT,
    input: IdParams,
    annotations: READ,
    async run({ execute }, principal, input) {
      return execute.readIntent(principal, input.id);
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
  {
    name: 'mint_voucher',
    title: 'Mint a voucher for an offer',
    description:
      "Takes a hold of the offer's price against the agent's credit and returns the signed voucher (an ES256 JWT the merchant " +
      'verifies) with the hold (a Redemption). `maxUc` refuses a price above it (CAP_EXCEEDED). Refusals: INSUFFICIENT_CREDITS or ' +
      'CAP_EXCEEDED (402), FROZEN or SCOPE_FORBIDDEN (403); no hold is taken then. `idempotencyKey` is required: a retry MUST reuse ' +
      'the same key, and then returns the first answer without a second hold (the same key over HTTP is the same key).',
    kinds: AGENT,
    annotations: WRITE,
    http: { method: 'POST', url: '/v1/vouchers' },
    operation: 'mintVoucher',
  },
  {
    name: 'execute_service',
    title: 'Execute a metered service action',
    description:
      "Runs one action of a built-in service (github-public repository.get; mail inboxes.list, messages.list, messages.get) and charges " +
      "its price (1 credit) to the agent's credit: a hold, the action, then capture; the receipt is the captured hold. An agent executes " +
      'as itself; an owner names one of its agents in `agentId` (agent_required without it). Refusals before the hold charge nothing: ' +
      'FROZEN, SCOPE_FORBIDDEN, inbox_not_allowed, connector_not_configured; when credit is short the request is retained ' +
      '(link_configuration_required, or approval_required with an intentId). approval_required comes as a URL elicitation of the ' +
      "owner's approval page (2026-07-28 input_required to clients declaring elicitation.url; 2025-11-25 error -32042); once the " +
      'owner approves, the gateway runs the request by itself, once. `idempotencyKey` is required: a retry MUST reuse the same ' +
      'key, and then returns the first answer (or the outcome of the retained request) and charges once.',
    kinds: EVERYONE,
    annotations: { ...WRITE, openWorldHint: true },
    http: { method: 'POST', url: '/v1/services/execute' },
    operation: 'executeService',
  },
  {
    name: 'register_agent',
    title: 'Register an agent',
    description:
      "Registers an agent identity (issuer and subject at the agent identity provider) under the owner, with optional allowances and " +
      '`caps` (perHoldUc, perPeriodUc over periodS). `idempotencyKey` is required: a retry MUST reuse the same key.',
    kinds: OWNER,
    annotations: WRITE,
    http: { method: 'POST', url: '/v1/owner/agents' },
    operation: 'registerAgent',
  },
  {
    name: 'update_agent',
    title: "Set an agent's caps and allowances",
    description:
      "Changes one of the owner's agents: `caps` (perHoldUc and perPeriodUc in microcredits, null = no cap; periodS), allowedServices, " +
      'allowedCategories, inboxAllowlist, name. Members left out keep their value. `idempotencyKey` is optional; a retry should reuse it.',
    kinds: OWNER,
    annotations: { ...WRITE, destructiveHint: true },
    http: { method: 'PATCH', url: '/v1/owner/agents/:id' },
    operation: 'updateAgent',
  },
  {
    name: 'freeze_agent',
    title: 'Freeze an agent',
    description:
      'Stops one of the owner\'s agents from spending: every hold or execution it asks for is refused with FROZEN until it is ' +
      'unfrozen. Freezing a frozen agent changes nothing. `idempotencyKey` is optional; a retry should reuse it.',
    kinds: OWNER,
    annotations: { ...WRITE, destructiveHint: true },
    http: { method: 'POST', url: '/v1/owner/agents/:id/freeze' },
    operation: 'freezeAgent',
  },
  {
    name: 'unfreeze_agent',
    title: 'Unfreeze an agent',
    description: "Lets one of the owner's frozen agents spend again. `idempotencyKey` is optional; a retry should reuse it.",
    kinds: OWNER,
    annotations: WRITE,
    http: { method: 'POST', url: '/v1/owner/agents/:id/unfreeze' },
    operation: 'unfreezeAgent',
  },
];
