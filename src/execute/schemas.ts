// Execute's resources as every face shows them, registered once by the composition root: the result and
// the approval refusal of an execution, a retained intent and its status, a mail connector, and each
// catalogue action's input schema (its `$id` is what the execute body refers to; the catalogue is given at
// composition, so those come from `actionInputSchemas`).
import { Type, type TSchema } from '@sinclair/typebox';
import { Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import type { Catalogue } from '../connectors/catalogue.ts';
import { APPROVAL_STATE_PENDING, EXECUTE_STATE_SUCCEEDED } from './execution.ts';
import { PREPAID_CREDIT_METHOD } from './payer.ts';

export const ExecuteResultSchema = Type.Object(
  {
    state: Type.Literal(EXECUTE_STATE_SUCCEEDED),
    executionId: Type.String(),
    result: Type.Object({}, { additionalProperties: true, description: "the action's result (see each action's description)" }),
    receipt: Type.Ref('Redemption'),
    priceUc: Microcredits('what was captured'),
    priceUsd: Type.String({ description: 'the same price in US dollars, e.g. "0.01"' }),
    paymentMethod: Type.Literal(PREPAID_CREDIT_METHOD, { description: "paid from the agent's prepaid credit" }),
  },
  { $id: 'ExecuteResult' },
);

export const IntentSchema = Type.Object(
  {
    serviceId: Type.String(),
    action: Type.String(),
    input: Type.Object({}, { additionalProperties: true }),
    agentId: Type.String(),
  },
  { $id: 'ServiceIntent', description: 'the retained execute request (the spec\'s Service intent)' },
);

export const ApprovalRequiredSchema = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    code: Type.Literal('approval_required'),
    detail: Type.Optional(Type.String()),
    state: Type.Literal(APPROVAL_STATE_PENDING),
    intentId: Type.String({ description: 'the retained intent (int_…, GET /v1/intents/{id}), not the approval: the approval is `payment` (its `id`, top_… or pur_…), and `approvalUrl` is its page. (A voucher\'s 402 names its purchase approval pur_… as `intentId`, since a mint retains no intent.)' }),
    intent: Type.Ref('ServiceIntent'),
    priceUc: Microcredits('the price the credit did not cover'),
    payment: Type.Object({}, { additionalProperties: true, description: "the provider's pending payment (a Top-up request record), or, above the approval threshold, the purchase approval" }),
    paymentMethods: Type.Array(Type.Object({ type: Type.String(), status: Type.String() })),
    instructions: Type.String(),
    charged: Type.Literal(false),
  },
  { $id: 'ApprovalRequired', additionalProperties: true, description: 'Problem body of 402 approval_required' },
);

export const MailConnectorSchema = Type.Object(
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

export const IntentViewSchema = Type.Object(
  {
    id: Type.String(),
    state: Type.String({
      enum: ['pending', 'executed', 'failed', 'cancelled'],
      description:
        'pending (waiting for credit, or for its owner\'s approval of the purchase) → executed (ran, charged once) | failed (ran, failed definitively, not charged) | ' +
        'cancelled (its top-up was declined, expired or failed, its purchase approval was declined or expired, no top-up can be asked for it ' +
        '(a delegate: credit its root), or its agent was frozen or retired; not charged)',
    }),
    agentId: Type.String(),
    intent: Type.Ref('ServiceIntent'),
    priceUc: Microcredits('the price of the execution'),
    executionId: Nullable(Type.String()),
    cancellationReason: Nullable(
      Type.String({ enum: ['topup_declined', 'topup_expired', 'topup_failed', 'purchase_declined', 'purchase_expired', 'delegate_has_no_lots', 'agent_frozen', 'agent_retired'] }),
    ),
    result: Nullable(Type.Object({}, { additionalProperties: true, description: "the action's result while the execute answer is retained (24 h by default)" })),
    receipt: Nullable(Type.Ref('Redemption')),
    error: Nullable(Type.Object({}, { additionalProperties: true, description: 'the problem body of a failed intent, while retained' })),
    lastAttempt: Nullable(
      Type.Object(
        {
          at: UnixSeconds('the run'),
          error: Type.Object({}, { additionalProperties: true, description: 'the problem the run was refused with, as the execute request would have been answered' }),
          retried: Type.Boolean({
            description:
              "true: the gateway runs the intent again by itself (a back-off from 30 s to 1 h); false: an owner's rule refused it (the agent's " +
              "mandate, inbox allowlist, mail connector or mail password), and only the agent's retry with its Idempotency-Key runs it now",
          }),
        },
        {
          description:
            "a pending intent's last run by the gateway on its own (after its top-up settled) that left it pending; null when there was none, " +
            "once it is not pending, and after the agent's retry retained it anew",
        },
      ),
    ),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
    expiresAt: UnixSeconds('a pending intent is dropped at'),
  },
  { $id: 'IntentStatus', description: 'A retained intent and its outcome' },
);

/** Each catalogue action's input, named as the execute body's `$ref`s name it. */
export function actionInputSchemas(catalogue: Catalogue): TSchema[] {
  return catalogue.actions.map(({ definition, schemaId }) => ({ ...definition.input, $id: schemaId, description: definition.description }));
}

export const EXECUTE_SCHEMAS: TSchema[] = [ExecuteResultSchema, IntentSchema, ApprovalRequiredSchema, MailConnectorSchema, IntentViewSchema];
