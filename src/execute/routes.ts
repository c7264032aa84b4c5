// HTTP edge of metered execution: POST /v1/services/execute, retained intents and the owner's mail connector
// routes. The catalogue the gateway was composed with (src/connectors/catalogue.ts) is the one source of the
// services, actions, input schemas and prices shown here: the body schema checks each action's input, and the
// OpenAPI document lists them.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { AgentIdParams } from '../platform/schemas.ts';
import { formatUc, formatUsd } from '../platform/money.ts';
import type { Catalogue } from '../connectors/catalogue.ts';
import { MailConnectorBody, type ExecuteInput, type ExecuteOperations } from './operations.ts';
import type { ExecuteQueries } from './queries.ts';

function catalogueTable(catalogue: Catalogue): string {
  return [
    '| serviceId | action | price | category | input | what it does |',
    '|---|---|---|---|---|---|',
    ...catalogue.actions.map(
      ({ service, action, definition, schemaId }) =>
        `| \`${service.id}\` | \`${action}\` | ${formatUc(definition.priceUc)} µc ($${formatUsd(definition.priceUc)}) | \`${service.category}\` | \`${schemaId}\` | ${definition.description} |`,
    ),
  ].join('\n');
}

function executeDescription(catalogue: Catalogue): string {
  return [
    'Runs one action of a built-in service for an agent and charges its price to the agent\'s credit. Order: clearance ' +
      '(agent active → 403 FROZEN; service and category allowed → 403 SCOPE_FORBIDDEN; the action\'s own checks, e.g. the mail ' +
      'inbox allowlist → 403 inbox_not_allowed, a mail connector → 409 connector_not_configured), then a hold of the price, then ' +
      'the action, then capture. 200 carries the result and the captured hold as `receipt`.',
    'Who executes: an agent credential executes as itself; a human or owner credential must name one of the owner\'s agents in ' +
      '`agentId` (400 agent_required without it, 403 owner_required for any other id).',
    'Idempotency-Key is required (`^[A-Za-z0-9._:-]{1,200}$`; missing or malformed → 400 invalid_input). The same key and body ' +
      'answer the same result and charge once. Of the failures, only those after the hold that are definitive (e.g. 404 ' +
      'upstream_not_found, 422 upstream_unprocessable, or 409 voucher_revoked when the owner froze or retired the agent while the action ran) are stored and replayed; refusals before the hold changed nothing, and rate limits (429) and 5xx may ' +
      'pass, so for those the same key may be retried.',
    'When the action fails, the hold is released and the problem body says `charged: false` (with `executionId` and ' +
      '`redemptionId`): 404 upstream_not_found, 409 connector_not_configured (the mail connector\'s host resolves to a non-public ' +
      'address: the owner must set a public one; stored under the key like the other definitive failures), 422 ' +
      'upstream_unprocessable (what upstream holds cannot be read, e.g. a message the mail parser refuses), 429 upstream_rate_limited (Retry-After), 502 upstream_unavailable (with Retry-After when the ' +
      'refusal passes by itself, e.g. a mail server\'s session limit) / upstream_auth_failed, 504 upstream_timeout.',
    'When credit does not cover the price, the intent is retained and nothing is charged: 503 link_configuration_required ' +
      '(`intentId`, `intent`) without a payment-approval provider, 402 approval_required (`ApprovalRequired`, `reason` topup_required; above the threshold of the mandate, above_approval_threshold) with one. Retry ' +
      'with the same key once credit arrives. With a provider, the gateway runs the intent once by itself after its top-up settles; ' +
      'GET /v1/intents/{id} shows its outcome, and a retry with the same key answers it. After its top-up was declined, expired or ' +
      'failed, a retry with the same key runs again: if credit now covers it, it executes; otherwise the same retained intent ' +
      '(same `intentId`) is reopened as `pending`, its `cancellationReason` cleared, and a new top-up (a new `payment.id` and ' +
      'approval URL) is requested for it. A delegate has no credit of its own (it spends its root\'s), so with a provider no top-up is asked for it: ' +
      '409 conflict (`reason` delegate_has_no_lots, `rootAgentId`: credit that agent), its intent cancelled at once (`cancellationReason` ' +
      'delegate_has_no_lots), not stored: the retry with the same key runs it once the root has credit.',
    "When the price is above the agent's mandate `approvalAboveUc`, the intent is retained and nothing is charged: 402 " +
      'approval_required (`reason: above_approval_threshold`) whose `approvalUrl` and `payment` are the purchase approval the owner ' +
      'answers on the gateway\'s page (no payment provider needed). The gateway does not run it by itself after approval: the retry with ' +
      'the same key runs it, once. Declined or expired, the intent is cancelled and the retry answers 409 conflict (`reason` ' +
      '`purchase_declined` or `approval_expired`), kept under the key.',
    "What the agent's mandate refuses, before any hold and charging nothing, is answered with the voucher's codes and members, " +
      "its status as the spec's error table gives it outside vouchers (execute's 402 is approval_required alone): 403 CAP_EXCEEDED " +
      '(a per-hold or per-period cap, or a budget: `reason` and the `budget` it would pass), 403 SCOPE_FORBIDDEN (a service the ' +
      'mandate does not allow, or outside its validity), 403 FROZEN (the agent or an ancestor frozen or retired).',
    `Catalogue:\n\n${catalogueTable(catalogue)}`,
  ].join('\n\n');
}

export interface ExecuteRouteDeps {
  operations: ExecuteOperations;
  queries: ExecuteQueries;
  /** The services the execute body and its description list. */
  catalogue: Catalogue;
}

export function executeRoutes({ operations, queries, catalogue }: ExecuteRouteDeps) {
  const { executeService, setMailConnector, deleteMailConnector } = operations;
  return async function routes(app: FastifyInstance): Promise<void> {

    app.post('/v1/services/execute', {
      config: { auth: { kinds: ['human', 'agent', 'owner'] }, operation: executeService },
      schema: {
        tags: ['services'],
        summary: 'Execute a metered service action',
        description: executeDescription(catalogue),
        body: executeService.input,
        response: {
          200: Type.Ref('ExecuteResult'),
          402: Type.Union([Type.Ref('ApprovalRequired'), Type.Ref('Problem')]),
          ...problems(400, 404, 409, 422, 429, 502, 503, 504),
        },
      },
      handler: (request, reply) => serve(request, reply, executeService, request.body as ExecuteInput),
    });

    const OWNER = { kinds: ['human', 'owner'] } as const;
    const tags = ['identity'];
    const path = '/v1/owner/agents/:id/mail-connector';

    app.put(path, {
      config: { auth: OWNER, operation: setMailConnector },
      schema: {
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
      handler: (request, reply) =>
        serve(request, reply, setMailConnector, { ...(request.body as Static<typeof MailConnectorBody>), id: (request.params as Static<typeof AgentIdParams>).id }),
    });

    app.route(queryRoute('GET', path, queries.getMailConnector, { auth: OWNER, tags, summary: "Read an agent's mail connector (without its password)", errors: [404] }));

    app.delete(path, {
      config: { auth: OWNER, operation: deleteMailConnector },
      schema: {
        tags,
        summary: "Remove an agent's mail connector",
        description: 'Deletes the connector and its sealed password. 204 also when there was none (DELETE is idempotent).',
        params: AgentIdParams,
        response: { 204: Type.Null({ description: 'removed' }), ...problems(404) },
      },
      handler: (request, reply) => serve(request, reply, deleteMailConnector, { id: (request.params as Static<typeof AgentIdParams>).id }, { status: 204 }),
    });

    app.route(
      queryRoute('GET', '/v1/intents/:id', queries.getIntent, {
        auth: { kinds: ['human', 'agent', 'owner'] },
        tags: ['services'],
        summary: 'Read a retained intent and its outcome',
        description:
          "Its agent and that agent's owner may read it; anyone else gets 404. After its top-up settles the gateway runs it once by " +
          'itself; a retry of the original execute request with its Idempotency-Key answers the same outcome. A failed intent\'s `error` ' +
          'is the problem body its execute request was answered with.',
        errors: [404],
      }),
    );
  };
}
