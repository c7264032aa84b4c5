// HTTP edge of metered execution: POST /v1/services/execute and the owner's mail connector routes. The
// catalogue (src/connectors/catalogue.ts) is the one source of the services, actions, input schemas and
// prices shown here: the body schema checks each action's input, and the OpenAPI document lists them.
import type { FastifyInstance } from 'fastify';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems, sharesSchemas } from '../platform/http/openapi.ts';
import { AgentIdParams, Microcredits, UnixSeconds } from '../platform/schemas.ts';
import { formatUc, formatUsd } from '../platform/money.ts';
import { MailConnectorInput } from '../connectors/mail.ts';
import type { MailConnectorService } from './mail-connectors.ts';
import { CATALOGUE, ExecuteInput, type ExecuteOperations } from './operations.ts';
import { APPROVAL_STATE_PENDING, EXECUTE_STATE_SUCCEEDED, PAYMENT_METHOD_CREDITS } from './service.ts';

const catalogueTable = [
  '| serviceId | action | price | category | input | what it does |',
  '|---|---|---|---|---|---|',
  ...CATALOGUE.map(
    ({ service, action, definition, schemaId }) =>
      `| \`${service.id}\` | \`${action}\` | ${formatUc(definition.priceUc)} µc ($${formatUsd(definition.priceUc)}) | \`${service.category}\` | \`${schemaId}\` | ${definition.description} |`,
  ),
].join('\n');


const ExecuteResultSchema = Type.Object(
  {
    state: Type.Literal(EXECUTE_STATE_SUCCEEDED),
    executionId: Type.String(),
    result: Type.Object({}, { additionalProperties: true, description: "the action's result (see each action's description)" }),
    receipt: Type.Ref('Redemption'),
    priceUc: Microcredits('what was captured'),
    priceUsd: Type.String({ description: 'the same price in US dollars, e.g. "0.01"' }),
    paymentMethod: Type.Literal(PAYMENT_METHOD_CREDITS, { description: "paid from the agent's prepaid credit" }),
  },
  { $id: 'ExecuteResult' },
);

const IntentSchema = Type.Object(
  {
    serviceId: Type.String(),
    action: Type.String(),
    input: Type.Object({}, { additionalProperties: true }),
    agentId: Type.String(),
  },
  { $id: 'ServiceIntent', description: 'the retained execute request (the spec\'s Service intent)' },
);

const ApprovalRequiredSchema = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    code: Type.Literal('approval_required'),
    detail: Type.Optional(Type.String()),
    state: Type.Literal(APPROVAL_STATE_PENDING),
    intentId: Type.String(),
    intent: Type.Ref('ServiceIntent'),
    priceUc: Microcredits('the price the credit did not cover'),
    payment: Type.Object({}, { additionalProperties: true, description: "the provider's pending payment" }),
    paymentMethods: Type.Array(Type.Object({ type: Type.String(), status: Type.String() })),
    instructions: Type.String(),
    charged: Type.Literal(false),
  },
  { $id: 'ApprovalRequired', additionalProperties: true, description: 'Problem body of 402 approval_required' },
);

const MailConnectorBody = Type.Omit(MailConnectorInput, ['allowlist'], {
  additionalProperties: false,
  examples: [{ host: 'imap.example.com', port: 993, tls: 'implicit', username: 'agent@example.com', password: 'app-password' }],
});

const MailConnectorSchema = Type.Object(
  {
    agentId: Type.String(),
    host: Type.String(),
    port: Type.Integer(),
    tls: Type.String({ enum: ['implicit', 'starttls', 'none'] }),
    username: Type.String(),
    ca: Type.Union([Type.String(), Type.Null()], { description: 'PEM of the CA trusted for this server, or null for the public roots' }),
    inboxAllowlist: Type.Array(Type.String(), { description: "the agent's inboxAllowlist (set it with PATCH /v1/owner/agents/{id})" }),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'MailConnector', description: "an agent's IMAP account; the password is never returned" },
);

const EXECUTE_DESCRIPTION = [
  'Runs one action of a built-in service for an agent and charges its price to the agent\'s credit. Order: clearance ' +
    '(agent active → 403 FROZEN; service and category allowed → 403 SCOPE_FORBIDDEN; the action\'s own checks, e.g. the mail ' +
    'inbox allowlist → 403 inbox_not_allowed, a mail connector → 409 connector_not_configured), then a hold of the price, then ' +
    'the action, then capture. 200 carries the result and the captured hold as `receipt`.',
  'Who executes: an agent credential executes as itself; a human or owner credential must name one of the owner\'s agents in ' +
    '`agentId` (400 agent_required without it, 403 owner_required for any other id).',
  'Idempotency-Key is required (`^[A-Za-z0-9._:-]{1,200}$`; missing or malformed → 400 invalid_input). The same key and body ' +
    'answer the same result and charge once. Of the failures, only those after the hold that are definitive (e.g. 404 ' +
    'upstream_not_found) are stored and replayed; refusals before the hold changed nothing, and rate limits (429) and 5xx may ' +
    'pass, so for those the same key may be retried.',
  'When the action fails, the hold is released and the problem body says `charged: false` (with `executionId` and ' +
    '`redemptionId`): 404 upstream_not_found, 429 upstream_rate_limited (Retry-After), 502 upstream_unavailable / ' +
    'upstream_auth_failed, 504 upstream_timeout.',
  'When credit does not cover the price, the intent is retained and nothing is charged: 503 link_configuration_required ' +
    '(`intentId`, `intent`) without a payment-approval provider, 402 approval_required (`ApprovalRequired`) with one. Retry ' +
    'with the same key once credit arrives. With a provider, the gateway runs the intent once by itself after its top-up settles; ' +
    'GET /v1/intents/{id} shows its outcome, and a retry with the same key answers it.',
  `Catalogue:\n\n${catalogueTable}`,
].join('\n\n');

export interface ExecuteRouteDeps {
  operations: ExecuteOperations;
  mailConnectors: MailConnectorService;
}

export function executeRoutes({ operations, mailConnectors }: ExecuteRouteDeps) {
  const { executeService } = operations;
  return sharesSchemas(async function routes(app: FastifyInstance): Promise<void> {
    for (const { definition, schemaId } of CATALOGUE) {
      app.addSchema({ ...(definition.input as TSchema), $id: schemaId, description: definition.description });
    }
    app.addSchema(ExecuteResultSchema);
    app.addSchema(IntentSchema);
    app.addSchema(ApprovalRequiredSchema);
    app.addSchema(MailConnectorSchema);
    const { db } = app.gateway;

    app.post('/v1/services/execute', {
      config: { auth: { kinds: ['human', 'agent', 'owner'] }, operation: executeService },
      schema: {
        tags: ['services'],
        summary: 'Execute a metered service action',
        description: EXECUTE_DESCRIPTION,
        body: ExecuteInput,
        response: {
          200: Type.Ref('ExecuteResult'),
          402: Type.Union([Type.Ref('ApprovalRequired'), Type.Ref('Problem')]),
          ...problems(400, 404, 409, 429, 502, 503, 504),
        },
      },
      handler: (request, reply) => serve(request, reply, executeService, request.body as ExecuteInput),
    });

    const OWNER = { kinds: ['human', 'owner'] } as const;
    const tags = ['identity'];
    const path = '/v1/owner/agents/:id/mail-connector';

    app.put(path, {
      config: { auth: OWNER },
      schema: { operationId: 'setMailConnector',
        tags,
        summary: "Attach or replace an agent's mail connector",
        description:
          "The IMAP account the `mail` service reads for this agent. The password is sealed at rest (AES-256-GCM with ACG_SECRET_BOX_KEY) " +
          "and never returned. Which inboxes may be read is the agent's `inboxAllowlist` (PATCH /v1/owner/agents/{id}). `tls`: `implicit` " +
          '(port 993) or `starttls`; cleartext (`none`) and non-public hosts are refused. PUT is idempotent by itself, so no Idempotency-Key ' +
          'record is kept (it would hold a hash of the password). 503 runtime_configuration_required in live mode without ACG_SECRET_BOX_KEY.',
        params: AgentIdParams,
        body: MailConnectorBody,
        response: { 200: Type.Ref('MailConnector'), ...problems(400, 404, 503) },
      },
      handler: async (request) => {
        const ownerId = principalOf(request).ownerId!;
        const { id } = request.params as Static<typeof AgentIdParams>;
        const body = request.body as Static<typeof MailConnectorBody>;
        return db.transaction((tx) => mailConnectors.set(tx, ownerId, id, body));
      },
    });

    app.get(path, {
      config: { auth: OWNER },
      schema: { operationId: 'getMailConnector',
        tags,
        summary: "Read an agent's mail connector (without its password)",
        params: AgentIdParams,
        response: { 200: Type.Ref('MailConnector'), ...problems(404) },
      },
      handler: async (request) => mailConnectors.get(principalOf(request).ownerId!, (request.params as Static<typeof AgentIdParams>).id),
    });

    app.delete(path, {
      config: { auth: OWNER },
      schema: { operationId: 'deleteMailConnector',
        tags,
        summary: "Remove an agent's mail connector",
        description: 'Deletes the connector and its sealed password. 204 also when there was none (DELETE is idempotent).',
        params: AgentIdParams,
        response: { 204: Type.Null({ description: 'removed' }), ...problems(404) },
      },
      handler: async (request, reply) => {
        const ownerId = principalOf(request).ownerId!;
        const { id } = request.params as Static<typeof AgentIdParams>;
        await db.transaction((tx) => mailConnectors.remove(tx, ownerId, id));
        return reply.code(204).send();
      },
    });
  });
}
