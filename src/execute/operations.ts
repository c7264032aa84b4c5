// The execute operation, for every face: the catalogue's services and actions, the input schema that
// checks each action's input, and the steps (who executes → claim the key → clear, hold, run, capture).
import { Type, type Static } from '@sinclair/typebox';
import { inputOf, type MultiStepOperation, type SingleStepOperation } from '../platform/operations.ts';
import { AgentIdParams } from '../platform/schemas.ts';
import { SERVICES } from '../connectors/catalogue.ts';
import { MailConnectorInput } from '../connectors/mail.ts';
import type { MailConnectorService, MailConnectorView } from './mail-connectors.ts';
import { EXECUTE_OPERATION, type ExecuteResult, type ExecuteService } from './service.ts';

/** Component name of an action's input schema, e.g. `MailMessagesListInput`. */
function inputSchemaId(serviceId: string, action: string): string {
  const words = `${serviceId} ${action}`.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return `${words.map((word) => word[0]!.toUpperCase() + word.slice(1)).join('')}Input`;
}

export const CATALOGUE = SERVICES.flatMap((service) =>
  Object.entries(service.actions).map(([action, definition]) => ({ service, action, definition, schemaId: inputSchemaId(service.id, action) })),
);

const AgentIdMember = Type.Optional(
  Type.String({ minLength: 1, maxLength: 200, description: "required with an owner (H or O) credential: the executing agent, one of the owner's; an agent may omit it or send its own id" }),
);

/**
 * One body shape per service and action, discriminated first by `serviceId`, then by `action`, so a
 * generated client types each action's `input` and the validator checks only the matching action's
 * input (Ajv's `discriminator`), refusing a bad one with the path of the offending member.
 */
export const ExecuteInput = Type.Unsafe<{ serviceId: string; action: string; input: Record<string, unknown>; agentId?: string }>({
  type: 'object',
  required: ['serviceId', 'action', 'input'],
  discriminator: { propertyName: 'serviceId' },
  examples: [{ serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } }],
  oneOf: SERVICES.map((service) => {
    const actions = CATALOGUE.filter((entry) => entry.service === service).map(({ action, schemaId }) =>
      Type.Object(
        { serviceId: Type.Literal(service.id), action: Type.Literal(action), input: Type.Ref(schemaId), agentId: AgentIdMember },
        { additionalProperties: false },
      ),
    );
    if (actions.length === 1) return actions[0];
    return {
      type: 'object',
      properties: { serviceId: Type.Literal(service.id) },
      required: ['serviceId', 'action'],
      discriminator: { propertyName: 'action' },
      oneOf: actions,
    };
  }),
});

export type ExecuteInput = Static<typeof ExecuteInput>;

export const MailConnectorBody = Type.Omit(MailConnectorInput, ['allowlist'], {
  additionalProperties: false,
  examples: [{ host: 'imap.example.com', port: 993, tls: 'implicit', username: 'agent@example.com', password: 'app-password' }],
});
const SetMailConnectorInput = inputOf(AgentIdParams, MailConnectorBody);
const DeleteMailConnectorInput = inputOf(AgentIdParams);

export interface ExecuteOperations {
  /** Checked before the key: the catalogue has the action, and which agent executes (its id). */
  executeService: MultiStepOperation<ExecuteInput, ExecuteResult, string>;
  setMailConnector: SingleStepOperation<Static<typeof SetMailConnectorInput>, MailConnectorView>;
  deleteMailConnector: SingleStepOperation<Static<typeof DeleteMailConnectorInput>, void>;
}

export function executeOperations(execute: ExecuteService, mailConnectors: MailConnectorService): ExecuteOperations {
  return {
    executeService: {
      name: EXECUTE_OPERATION,
      input: ExecuteInput,
      idempotency: { key: 'required', missingCode: 'invalid_input' },
      check: ({ principal, input }) => {
        execute.checkRequest(input.serviceId, input.action);
        return execute.actingAgentId(principal, input.agentId);
      },
      runClaimed: (key, { input }, agentId) => execute.execute(key, { agentId, serviceId: input.serviceId, action: input.action, input: input.input }),
    },
    setMailConnector: {
      name: 'setMailConnector',
      input: SetMailConnectorInput,
      // PUT is idempotent by itself; a key record would hold a fingerprint of the password.
      idempotency: { key: 'none' },
      run: (tx, { principal, input: { id, ...settings } }) => mailConnectors.set(tx, principal, id, settings),
    },
    deleteMailConnector: {
      name: 'deleteMailConnector',
      input: DeleteMailConnectorInput,
      idempotency: { key: 'none' },
      run: (tx, { principal, input }) => mailConnectors.remove(tx, principal, input.id),
    },
  };
}
