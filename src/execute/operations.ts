// The execute operation, for every face: its input schema, built from the catalogue (one branch per service
// and action, each checking that action's input), and the steps (who executes → claim the key → clear,
// hold, run, capture); and the owner's mail connector operations.
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { inputOf, type MultiStepOperation, type SingleStepOperation } from '../platform/operations.ts';
import { AgentIdParams, sentBy } from '../platform/schemas.ts';
import type { Catalogue } from '../connectors/catalogue.ts';
import { MailConnectorInput } from '../connectors/mail.ts';
import { EXECUTE_OPERATION, type ExecuteResult } from './execution.ts';
import type { MailConnectorService, MailConnectorView } from './mail-connectors.ts';
import type { ExecuteService } from './service.ts';

/** Only an owner names the agent (an agent acts as itself): a face shown to an agent leaves it out (`sentBy`). */
const AgentIdMember = Type.Optional(
  Type.String({
    minLength: 1,
    maxLength: 200,
    description: "required with an owner (H or O) credential: the executing agent, one of the owner's; an agent may omit it or send its own id",
    ...sentBy(['human', 'owner']),
  }),
);

export interface ExecuteInput {
  serviceId: string;
  action: string;
  input: Record<string, unknown>;
  agentId?: string;
}

/**
 * One body shape per service and action of the catalogue, discriminated first by `serviceId`, then by
 * `action`, so a generated client types each action's `input` and the validator checks only the matching
 * action's input (Ajv's `discriminator`), refusing a bad one with the path of the offending member.
 */
export function executeInputSchema(catalogue: Catalogue): TSchema {
  return Type.Unsafe<ExecuteInput>({
    type: 'object',
    required: ['serviceId', 'action', 'input'],
    discriminator: { propertyName: 'serviceId' },
    examples: [{ serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } }],
    oneOf: catalogue.services.map((service) => {
      const actions = catalogue.actions
        .filter((entry) => entry.service === service)
        .map(({ action, schemaId }) =>
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
}

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
  const { pipeline } = execute;
  return {
    executeService: {
      name: EXECUTE_OPERATION,
      input: executeInputSchema(execute.catalogue),
      idempotency: { key: 'required', missingCode: 'invalid_input' },
      check: ({ principal, input }) => {
        pipeline.checkRequest(input.serviceId, input.action);
        return pipeline.actingAgentId(principal, input.agentId);
      },
      runClaimed: (key, { input }, agentId) => pipeline.execute(key, { agentId, serviceId: input.serviceId, action: input.action, input: input.input }),
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
